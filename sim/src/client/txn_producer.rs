//! A transactional producer, as the Java client's TransactionManager runs
//! one (classic protocol): InitProducerId with its transactional id
//! (retried on CONCURRENT_TRANSACTIONS and coordinator errors), then per
//! transaction AddPartitionsToTxn for the partitions it will write, one
//! batch per partition (consecutive sequences per partition within the
//! epoch, the same bytes on every resend), and EndTxn with a commit or an
//! abort, asked again on CONCURRENT_TRANSACTIONS or a lost connection until
//! it gets the outcome. One request in flight at a time.
//!
//! Misbehaviour on purpose, per configuration:
//! - `silent_p`: after its writes, the producer goes quiet past its
//!   transaction timeout plus the broker's check interval, then tries to
//!   commit; the broker has aborted it and fenced the epoch by then (unless
//!   a restart in between restarted the clock: then the commit may win);
//! - `dead_at_end`: the last transaction is left open and the producer
//!   vanishes; the broker must abort it within its timeout;
//! - `zombie`: once refused as fenced (another instance took the id over),
//!   it keeps sending with its old epoch a few times, and every one of
//!   those must be refused.
//!
//! A producer refused as fenced (and not a zombie) starts over as a new
//! instance, as an application does after ProducerFencedException; so,
//! sometimes, does one whose EndTxn's connection was lost
//! (`RESTART_ON_LOST_END_P`).

use bytes::Bytes;
use kafka_protocol::messages::ResponseKind;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

use super::txn_requests::{self as req, is_fenced, is_retry};
use super::values::{self, RecordId};
use super::{backoff_ms, batches, Client, Cx};
use crate::history::{Ack, EndTxnAnswer, TxnWritten};

const PARTITIONS_PER_TXN_MAX: i32 = 3;
const RECORDS_PER_BATCH_MAX: u64 = 5;
/// Requests a zombie sends after it learned it is fenced.
const ZOMBIE_TRIES: u32 = 3;
/// Chance that losing the connection with EndTxn in flight ends the
/// application too (the machine it shares with the broker lost power): a
/// new instance starts, and its InitProducerId has the broker abort
/// whatever of the transaction it still holds open. The outcome must be
/// whole either way.
const RESTART_ON_LOST_END_P: f64 = 0.3;

#[derive(Clone, Debug)]
pub struct TxnProducerConfig {
    pub topic: String,
    pub partitions: i32,
    pub transactional_id: String,
    pub transactions: u64,
    pub timeout_ms: i32,
    pub abort_p: f64,
    pub silent_p: f64,
    /// How long a silent producer waits: past its timeout and the check.
    pub silent_ms: i64,
    pub dead_at_end: bool,
    pub zombie: bool,
    /// Records carry keys (the topic is compacted).
    pub keyed: bool,
    /// Seeds the draws of `RESTART_ON_LOST_END_P`, apart from the run's
    /// generator: added after the sweep's seeds were in use, they change a
    /// run only when a restart strikes (as `FaultKind::own_draws`).
    pub restart_seed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Init,
    Begin,
    AddPartitions,
    Produce,
    Silent {
        until_ms: i64,
    },
    EndTxn,
    /// Fenced, and still sending: `left` more requests.
    Zombie {
        left: u32,
    },
    Done,
}

#[derive(Clone, Debug)]
struct Batch {
    partition: i32,
    first_n: u64,
    count: u64,
    base_seq: i32,
    acked: bool,
}

struct Txn {
    /// Index in `history.txns`.
    index: usize,
    batches: Vec<Batch>,
    commit: bool,
    silent: bool,
}

pub struct TxnProducer {
    client: u32,
    cfg: TxnProducerConfig,
    versions: Versions,
    step: Step,
    session: Option<(i64, i16)>,
    txn: Option<Txn>,
    /// Next sequence per partition, in this session.
    next_seq: Vec<i32>,
    next_n: u64,
    finished_txns: u64,
    asked: Option<i32>,
    failures: u32,
    retry_at_ms: i64,
    restart_rng: ChaCha8Rng,
}

struct Versions {
    init: i16,
    add_partitions: i16,
    produce: i16,
    end_txn: i16,
}

impl TxnProducer {
    pub fn new(client: u32, cfg: TxnProducerConfig, rng: &mut impl rand::Rng) -> Self {
        assert!(cfg.partitions > 0, "a topic has partitions");
        let partitions = cfg.partitions as usize;
        let restart_seed = cfg.restart_seed;
        Self {
            client,
            versions: Versions {
                init: rng.random_range(0..=5),
                add_partitions: rng.random_range(0..=3),
                produce: rng.random_range(3..=9),
                end_txn: rng.random_range(0..=4),
            },
            cfg,
            step: Step::Init,
            session: None,
            txn: None,
            next_seq: vec![0; partitions],
            next_n: 0,
            finished_txns: 0,
            asked: None,
            failures: 0,
            retry_at_ms: 0,
            restart_rng: ChaCha8Rng::seed_from_u64(restart_seed),
        }
    }

    fn session(&self) -> (i64, i16) {
        self.session.expect("a session once initialised")
    }

    fn send(&mut self, cx: &mut Cx) {
        let id = self.cfg.transactional_id.clone();
        self.asked = match self.step {
            Step::Init => cx
                .wire
                .send(self.versions.init, &req::init(&id, self.cfg.timeout_ms)),
            Step::Begin => return self.begin(cx),
            Step::AddPartitions => {
                let parts: Vec<i32> = self.txn().batches.iter().map(|b| b.partition).collect();
                let r = req::add_partitions(&id, self.session(), &self.cfg.topic, &parts);
                cx.wire.send(self.versions.add_partitions, &r)
            }
            Step::Produce | Step::Zombie { left: _ } if self.produce_next() => {
                self.zombie_batch(cx);
                let batches = self.unacked_batches();
                let r = req::produce(&id, &self.cfg.topic, batches);
                cx.wire.send(self.versions.produce, &r)
            }
            Step::Silent { until_ms } if cx.now_ms < until_ms => {
                return cx.wake_in(until_ms - cx.now_ms);
            }
            Step::Silent { .. } | Step::EndTxn | Step::Zombie { .. } => {
                if self.step != Step::EndTxn && !matches!(self.step, Step::Zombie { .. }) {
                    cx.note("silent past the transaction timeout; now tries to end it".into());
                    self.step = Step::EndTxn;
                }
                let commit = self.txn().commit;
                let txn_index = self.txn().index;
                // A zombie's EndTxn after its fence must not count as asked:
                // the transaction was decided without it.
                let t = &mut cx.history.txns[txn_index];
                if self.step == Step::EndTxn {
                    if commit {
                        t.commit_sent = true;
                    } else {
                        t.abort_sent = true;
                    }
                }
                let r = req::end_txn(&id, self.session(), commit);
                cx.wire.send(self.versions.end_txn, &r)
            }
            Step::Done => None,
            Step::Produce => unreachable!("produce_next holds in Produce"),
        };
    }

    /// A zombie with nothing left unacknowledged writes a new batch, with the
    /// next sequence of its dead epoch.
    fn zombie_batch(&mut self, cx: &mut Cx) {
        let txn = self.txn.as_mut().expect("a zombie has its transaction");
        if !matches!(self.step, Step::Zombie { .. }) || txn.batches.iter().any(|b| !b.acked) {
            return;
        }
        let partition = txn.batches[0].partition;
        let count = cx.rng.random_range(1..=RECORDS_PER_BATCH_MAX);
        txn.batches.push(Batch {
            partition,
            first_n: self.next_n,
            count,
            base_seq: self.next_seq[partition as usize],
            acked: false,
        });
        for k in 0..count {
            let id = RecordId {
                client: self.client,
                n: self.next_n + k,
            };
            cx.history.zombie_writes.push(id);
        }
        self.next_seq[partition as usize] += count as i32;
        self.next_n += count;
        cx.history.produced.insert(self.client, self.next_n);
    }

    /// Produce, or (as a zombie) alternate produce and EndTxn.
    fn produce_next(&self) -> bool {
        match self.step {
            Step::Produce => true,
            Step::Zombie { left } => left % 2 == 1 && self.txn.is_some(),
            _ => false,
        }
    }

    fn txn(&self) -> &Txn {
        self.txn.as_ref().expect("a transaction is open")
    }

    fn unacked_batches(&self) -> Vec<(i32, Bytes)> {
        let (pid, epoch) = self.session();
        self.txn()
            .batches
            .iter()
            .filter(|b| !b.acked)
            .map(|b| {
                let values: Vec<Bytes> = (0..b.count)
                    .map(|k| {
                        values::encode(RecordId {
                            client: self.client,
                            n: b.first_n + k,
                        })
                    })
                    .collect();
                let bytes =
                    batches::encode(&values, pid, epoch, b.base_seq, true, 0, self.cfg.keyed);
                (b.partition, bytes)
            })
            .collect()
    }

    /// Starts the next transaction: its partitions, records and fate.
    fn begin(&mut self, cx: &mut Cx) {
        if self.finished_txns >= self.cfg.transactions {
            self.step = Step::Done;
            return cx.note("all transactions ended".into());
        }
        let wanted = cx
            .rng
            .random_range(1..=PARTITIONS_PER_TXN_MAX.min(self.cfg.partitions));
        let mut parts: Vec<i32> = (0..self.cfg.partitions).collect();
        while parts.len() > wanted as usize {
            let drop = cx.rng.random_range(0..parts.len());
            parts.remove(drop);
        }
        let mut batches = Vec::new();
        let mut ids = Vec::new();
        for p in parts {
            let count = cx.rng.random_range(1..=RECORDS_PER_BATCH_MAX);
            let slot = p as usize;
            batches.push(Batch {
                partition: p,
                first_n: self.next_n,
                count,
                base_seq: self.next_seq[slot],
                acked: false,
            });
            for k in 0..count {
                ids.push(RecordId {
                    client: self.client,
                    n: self.next_n + k,
                });
            }
            self.next_seq[slot] += count as i32;
            self.next_n += count;
        }
        cx.history.produced.insert(self.client, self.next_n);
        let (pid, epoch) = self.session();
        cx.history.txns.push(TxnWritten {
            client: self.client,
            transactional_id: self.cfg.transactional_id.clone(),
            producer_id: pid,
            epoch,
            ids,
            commit_sent: false,
            abort_sent: false,
            answered: None,
            fenced: false,
        });
        let commit = !cx.rng.random_bool(self.cfg.abort_p);
        let silent = cx.rng.random_bool(self.cfg.silent_p);
        self.txn = Some(Txn {
            index: cx.history.txns.len() - 1,
            batches,
            commit,
            silent,
        });
        self.step = Step::AddPartitions;
        self.send(cx);
    }

    fn retry(&mut self, cx: &mut Cx, what: &str, code: i16) {
        self.failures += 1;
        self.retry_at_ms = cx.now_ms + backoff_ms(cx.rng, self.failures.min(3));
        cx.note(format!("{what}: error {code}; again"));
    }

    /// Another instance (or the timeout) took the id over.
    fn fenced(&mut self, cx: &mut Cx, what: &str, code: i16) {
        if let Some(txn) = &self.txn {
            cx.history.txns[txn.index].fenced = true;
        }
        if self.cfg.zombie {
            if let Step::Zombie { .. } = self.step {
                return; // counted by the caller
            }
            cx.note(format!(
                "{what}: fenced ({code}); a zombie keeps sending with its old epoch"
            ));
            self.step = Step::Zombie { left: ZOMBIE_TRIES };
            return;
        }
        cx.note(format!(
            "{what}: fenced ({code}); starts over as a new instance"
        ));
        self.start_over();
    }

    /// A new instance of the application: its open transaction is given up
    /// (the broker decides it), and it starts with InitProducerId.
    fn start_over(&mut self) {
        self.txn = None;
        self.finished_txns += 1;
        self.session = None;
        self.step = Step::Init;
    }

    fn on_init(&mut self, cx: &mut Cx, code: i16, pid: i64, epoch: i16) {
        match code {
            0 => {
                cx.note(format!("transactional producer id {pid} epoch {epoch}"));
                self.session = Some((pid, epoch));
                self.next_seq.iter_mut().for_each(|s| *s = 0);
                self.step = Step::Begin;
            }
            c if is_retry(c) => self.retry(cx, "InitProducerId", c),
            c => cx.violation(format!("InitProducerId: unexpected error {c}")),
        }
    }

    fn on_add_partitions(&mut self, cx: &mut Cx, code: i16) {
        match code {
            0 => self.step = Step::Produce,
            c if is_retry(c) => self.retry(cx, "AddPartitionsToTxn", c),
            c if is_fenced(c) => self.fenced(cx, "AddPartitionsToTxn", c),
            c => cx.violation(format!("AddPartitionsToTxn: unexpected error {c}")),
        }
    }

    fn on_produce(&mut self, cx: &mut Cx, answers: Vec<(i32, i16, i64)>) {
        let zombie = matches!(self.step, Step::Zombie { .. });
        let mut fenced_code = None;
        let txn = self.txn.as_mut().expect("produce within a transaction");
        for (partition, code, base_offset) in answers {
            let Some(batch) = txn
                .batches
                .iter_mut()
                .find(|b| b.partition == partition && !b.acked)
            else {
                continue;
            };
            match code {
                0 if zombie => cx.violation(format!(
                    "a fenced zombie's batch p{partition} n{} was accepted at offset {base_offset}",
                    batch.first_n
                )),
                0 => {
                    batch.acked = true;
                    for k in 0..batch.count {
                        cx.history.acks.push(Ack {
                            at_ms: cx.elapsed_ms,
                            client: self.client,
                            partition,
                            offset: base_offset + k as i64,
                            id: RecordId {
                                client: self.client,
                                n: batch.first_n + k,
                            },
                        });
                    }
                }
                c if is_fenced(c) || c == req::INVALID_TXN_STATE => fenced_code = Some(c),
                c if is_retry(c) => {}
                c => cx.violation(format!("transactional produce p{partition}: error {c}")),
            }
        }
        let all_acked = txn.batches.iter().all(|b| b.acked);
        let silent = txn.silent;
        if let Some(code) = fenced_code {
            return self.fenced(cx, "Produce", code);
        }
        if zombie {
            return;
        }
        if all_acked {
            self.failures = 0;
            self.step = if silent {
                let until_ms = cx.now_ms + self.cfg.silent_ms;
                cx.note(format!("goes silent for {} ms", self.cfg.silent_ms));
                Step::Silent { until_ms }
            } else if self.cfg.dead_at_end && self.finished_txns + 1 == self.cfg.transactions {
                cx.note("dies with its transaction open".into());
                Step::Done
            } else {
                Step::EndTxn
            };
        } else {
            self.retry(cx, "Produce", -1);
        }
    }

    fn on_end_txn(&mut self, cx: &mut Cx, code: i16) {
        let txn = self.txn.as_ref().expect("EndTxn within a transaction");
        let commit = txn.commit;
        cx.history.end_txn_answers.push(EndTxnAnswer {
            at_ms: cx.elapsed_ms,
            client: self.client,
            commit,
            code,
        });
        let decision = if commit { "commit" } else { "abort" };
        if let Step::Zombie { .. } = self.step {
            if code == 0 {
                cx.violation(format!(
                    "a fenced zombie's EndTxn {decision} was answered with success"
                ));
            }
            return;
        }
        match code {
            0 => {
                cx.note(format!("EndTxn {decision}: done"));
                cx.history.txns[txn.index].answered = Some(commit);
                self.txn = None;
                self.finished_txns += 1;
                self.failures = 0;
                self.step = Step::Begin;
            }
            c if is_retry(c) => self.retry(cx, "EndTxn", c),
            c if is_fenced(c) => self.fenced(cx, "EndTxn", c),
            c => cx.violation(format!(
                "EndTxn {decision} of this producer's open transaction answered {c}: not in the decision table"
            )),
        }
    }
}

impl Client for TxnProducer {
    fn name(&self) -> String {
        format!(
            "c{} transactional producer {} timeout {} ms{}{} (init v{}, add v{}, produce v{}, end v{})",
            self.client,
            self.cfg.transactional_id,
            self.cfg.timeout_ms,
            if self.cfg.zombie { " zombie" } else { "" },
            if self.cfg.dead_at_end { " dies-open" } else { "" },
            self.versions.init,
            self.versions.add_partitions,
            self.versions.produce,
            self.versions.end_txn
        )
    }

    fn on_wake(&mut self, cx: &mut Cx) {
        if self.step == Step::Done || self.asked.is_some() {
            return;
        }
        if cx.wire.conn().is_none() {
            return cx.connect();
        }
        if cx.now_ms < self.retry_at_ms {
            return cx.wake_in(self.retry_at_ms - cx.now_ms);
        }
        self.send(cx);
    }

    fn on_response(&mut self, cx: &mut Cx, corr: i32, response: ResponseKind) {
        assert_eq!(self.asked, Some(corr), "one request in flight");
        self.asked = None;
        match response {
            ResponseKind::InitProducerId(r) => {
                self.on_init(cx, r.error_code, r.producer_id.0, r.producer_epoch)
            }
            ResponseKind::AddPartitionsToTxn(r) => {
                self.on_add_partitions(cx, req::add_partitions_error(&r))
            }
            ResponseKind::Produce(r) => self.on_produce(cx, req::produce_answers(&r)),
            ResponseKind::EndTxn(r) => self.on_end_txn(cx, r.error_code),
            other => panic!("transactional producer got {other:?}"),
        }
        if let Step::Zombie { left } = self.step {
            self.step = match left {
                0 | 1 => Step::Done,
                n => Step::Zombie { left: n - 1 },
            };
        }
        self.on_wake(cx);
    }

    fn on_disconnect(&mut self, cx: &mut Cx) {
        self.asked = None;
        if self.step == Step::EndTxn && self.restart_rng.random_bool(RESTART_ON_LOST_END_P) {
            cx.note(
                "EndTxn lost with the connection; the application starts over as a new instance"
                    .to_string(),
            );
            self.start_over();
        }
        // Otherwise the outcome is unknown: the same request goes again
        // (same batches, same decision), as the Java client's Sender does.
        self.failures += 1;
        let delay_ms = backoff_ms(cx.rng, self.failures.min(3));
        cx.wake_in(delay_ms);
    }

    fn is_done(&self) -> bool {
        self.step == Step::Done
    }

    fn status(&self) -> String {
        format!(
            "{}: {:?}, {}/{} transactions, session {:?}",
            self.name(),
            self.step,
            self.finished_txns,
            self.cfg.transactions,
            self.session
        )
    }
}
