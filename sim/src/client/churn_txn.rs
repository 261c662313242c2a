//! The churner's transactions (`churner.rs`): now and then, after its
//! read-back, the churner opens a transaction on the scratch topic's
//! current incarnation (AddPartitionsToTxn, AddOffsetsToTxn and
//! TxnOffsetCommit of its reading group's offsets, one batch per added
//! partition), deletes the topic with the transaction open, and ends it
//! (commit or abort) either before the topic is created again, when its
//! markers have no partition to go to, or just after, when Kafka's
//! coordinator, which names a transaction's partitions by topic name, sends
//! them to the new incarnation. Kafka drops a deleted topic's staged offsets
//! with its committed ones (`OffsetMetadataManager.onPartitionsDeleted`).
//!
//! The churner holds the broker to what follows from that:
//! - EndTxn of the open transaction succeeds: a deleted partition neither
//!   fails nor hangs the outcome;
//! - the offsets it staged do not come back on commit (the churner's
//!   OffsetFetch after each creation finds none);
//! - the new incarnation is not held by the transaction: its
//!   read_committed read-back finds the last stable offset at the high
//!   watermark, and every record acknowledged to it;
//! - the next transaction of the id commits.
//!
//! Some transactions have the deletion race their batches: the churner
//! sends DeleteTopics on its connection right behind the transactional
//! Produce, before the Produce is answered (`delete_behind_produce`). doze
//! works on a connection's requests as they come and answers them in
//! order, so the topic may go while the batches wait for their fsync. Each
//! batch is then answered, either acknowledged or with
//! UNKNOWN_TOPIC_OR_PARTITION (its partition is gone), and never left
//! hanging; a refused batch is lost to the deletion, and the transaction
//! aborts, as a Kafka client aborts one whose batch failed. The promises
//! above hold all the same.
//!
//! One request in flight, but for that deletion; a lost answer is asked
//! again unchanged (the same batch bytes and sequences, so the broker's
//! dedup answers a resent batch).

use bytes::Bytes;
use kafka_protocol::messages::ResponseKind;
use rand::RngExt;

use super::churner::UNKNOWN_TOPIC_OR_PARTITION;
use super::txn_requests::{self as req, is_fenced, is_retry};
use super::values::{self, RecordId};
use super::Cx;

/// The churner's transactional id.
const CHURN_TXN_ID: &str = "sim-churn-txn";
/// Its transaction timeout: far longer than a round, so that the broker
/// never aborts one of its transactions on its own in a healthy run.
const TIMEOUT_MS: i32 = 60_000;
/// Records in a transaction's batch for one partition.
const BATCH_RECORDS: std::ops::RangeInclusive<u32> = 1..=3;
/// Tells a transactional record of an incarnation from a plain one.
const TXN_RECORD_BIT: u64 = 1 << 31;
/// Chance that a transaction's batches are raced by their topic's deletion.
const RACE_P: f64 = 0.4;

/// When the open transaction is ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndAt {
    /// After the topic's deletion was answered, before it is created again.
    Deleted,
    /// After the next incarnation's creation was answered.
    Recreated,
}

/// What the churner's transaction asks next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Init,
    AddPartitions,
    AddOffsets,
    StageOffsets,
    Produce,
    End,
}

/// Where a transaction's batch stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Batch {
    Unanswered,
    Acked,
    /// Refused for its partition's deletion, or never answered before it:
    /// the transaction aborts.
    Lost,
}

/// A transaction the churner has opened.
#[derive(Debug)]
pub struct Open {
    pub commit: bool,
    pub end_at: EndAt,
    /// DeleteTopics goes right behind the transactional Produce.
    delete_behind_produce: bool,
    /// That DeleteTopics was sent: a batch refused UNKNOWN_TOPIC_OR_PARTITION
    /// since is lost to it.
    delete_sent: bool,
    started_ms: i64,
    incarnation: u32,
    /// (partition, records) written, and where each stands.
    batches: Vec<(i32, u32, Batch)>,
    /// The group offsets it stages (index = partition).
    offsets: Vec<i64>,
}

/// How a transaction's answer leaves it.
pub enum Outcome {
    /// Ask the next request (or the same one again, after a backoff when
    /// `backoff`).
    Again { backoff: bool },
    /// This stage's part is done: the writes are in (the churner deletes
    /// the topic now), or the transaction is over (EndTxn answered with
    /// success, or the broker fenced it past its timeout and aborted it).
    Done,
    /// A promise broken.
    Broken(String),
}

pub struct ChurnTxn {
    /// Producer id and epoch, once InitProducerId answered.
    session: Option<(i64, i16)>,
    pub open: Option<Open>,
    step: Step,
    /// Transactions ended with success (`History::churn_txns_ended` counts
    /// them for the run).
    pub ended: u32,
}

impl ChurnTxn {
    pub fn new() -> Self {
        Self {
            session: None,
            open: None,
            step: Step::Init,
            ended: 0,
        }
    }

    /// Opens a transaction over `partitions` of `incarnation`, staging
    /// `offsets` for the reading group.
    pub fn begin(&mut self, cx: &mut Cx, incarnation: u32, partitions: i32, offsets: &[i64]) {
        assert!(self.open.is_none(), "one transaction at a time");
        let mut chosen: Vec<i32> = (0..partitions)
            .filter(|_| cx.rng.random_bool(0.7))
            .collect();
        if chosen.is_empty() {
            chosen.push(cx.rng.random_range(0..partitions));
        }
        let batches = chosen
            .into_iter()
            .map(|p| (p, cx.rng.random_range(BATCH_RECORDS), Batch::Unanswered))
            .collect();
        let end_at = if cx.rng.random_bool(0.5) {
            EndAt::Deleted
        } else {
            EndAt::Recreated
        };
        let commit = cx.rng.random_bool(0.6);
        let open = Open {
            commit,
            end_at,
            delete_behind_produce: cx.rng.random_bool(RACE_P),
            delete_sent: false,
            started_ms: cx.now_ms,
            incarnation,
            batches,
            offsets: offsets.to_vec(),
        };
        cx.note(format!("{CHURN_TXN_ID} opens {open:?}"));
        self.open = Some(open);
        self.step = if self.session.is_some() {
            Step::AddPartitions
        } else {
            Step::Init
        };
    }

    /// The next request is the transactional Produce, and DeleteTopics is
    /// to go right behind it (not sent yet).
    pub fn wants_delete_behind(&self) -> bool {
        self.step == Step::Produce
            && self
                .open
                .as_ref()
                .is_some_and(|o| o.delete_behind_produce && !o.delete_sent)
    }

    /// DeleteTopics went out behind the Produce.
    pub fn delete_sent(&mut self) {
        self.open
            .as_mut()
            .expect("a transaction is open")
            .delete_sent = true;
    }

    /// The topic is gone (or may be) with batches not acknowledged: they
    /// are lost, and the transaction aborts.
    pub fn abandon_unacked(&mut self, cx: &mut Cx) {
        let Some(open) = self.open.as_mut() else {
            return;
        };
        let mut lost = 0;
        for batch in open.batches.iter_mut().filter(|b| b.2 == Batch::Unanswered) {
            batch.2 = Batch::Lost;
            lost += 1;
        }
        if lost > 0 {
            cx.note(format!(
                "{CHURN_TXN_ID}: {lost} batches unanswered when the topic went: abort"
            ));
            open.commit = false;
        }
    }

    /// Moves the open transaction on to EndTxn.
    pub fn end(&mut self) {
        assert!(self.open.is_some(), "a transaction to end");
        self.step = Step::End;
    }

    /// "commit" or "abort".
    fn decision(open: &Open) -> &'static str {
        if open.commit {
            "commit"
        } else {
            "abort"
        }
    }

    fn open(&self) -> &Open {
        self.open.as_ref().expect("a transaction is open")
    }

    fn session(&self) -> (i64, i16) {
        self.session.expect("InitProducerId answered")
    }

    /// The value of transactional record `k` of an incarnation.
    fn value(client: u32, incarnation: u32, partition: i32, k: u32) -> Bytes {
        let n =
            u64::from(incarnation) << 32 | TXN_RECORD_BIT | (partition as u64) << 8 | u64::from(k);
        values::encode(RecordId { client, n })
    }

    /// Sends the step's request; its correlation id.
    pub fn send(&mut self, cx: &mut Cx, client: u32, topic: &str, group: &str) -> Option<i32> {
        match self.step {
            Step::Init => {
                let version = cx.rng.random_range(0..=5);
                cx.wire.send(version, &req::init(CHURN_TXN_ID, TIMEOUT_MS))
            }
            Step::AddPartitions => {
                let parts: Vec<i32> = self.open().batches.iter().map(|b| b.0).collect();
                let r = req::add_partitions(CHURN_TXN_ID, self.session(), topic, &parts);
                let version = cx.rng.random_range(0..=3);
                cx.wire.send(version, &r)
            }
            Step::AddOffsets => {
                let r = req::add_offsets(CHURN_TXN_ID, self.session(), group);
                let version = cx.rng.random_range(0..=3);
                cx.wire.send(version, &r)
            }
            Step::StageOffsets => {
                let offsets = &self.open().offsets;
                let r = req::txn_offset_commit(CHURN_TXN_ID, self.session(), group, topic, offsets);
                let version = cx.rng.random_range(0..=3);
                cx.wire.send(version, &r)
            }
            Step::Produce => {
                let (pid, epoch) = self.session();
                let open = self.open();
                // Each incarnation's partitions are new to the producer:
                // sequences start at 0, and a resent batch has the same bytes.
                let batches = open
                    .batches
                    .iter()
                    .filter(|b| b.2 == Batch::Unanswered)
                    .map(|&(p, count, _)| {
                        let values: Vec<Bytes> = (0..count)
                            .map(|k| Self::value(client, open.incarnation, p, k))
                            .collect();
                        let bytes = super::batches::encode(
                            &values,
                            pid,
                            epoch,
                            0,
                            true,
                            open.started_ms,
                            false,
                        );
                        (p, bytes)
                    })
                    .collect();
                let version = cx.rng.random_range(3..=9);
                cx.wire
                    .send(version, &req::produce(CHURN_TXN_ID, topic, batches))
            }
            Step::End => {
                let r = req::end_txn(CHURN_TXN_ID, self.session(), self.open().commit);
                let version = cx.rng.random_range(0..=4);
                cx.wire.send(version, &r)
            }
        }
    }

    /// The answer to the step's request.
    pub fn on_response(&mut self, cx: &mut Cx, response: ResponseKind) -> Outcome {
        let (what, code) = match (self.step, response) {
            (Step::Init, ResponseKind::InitProducerId(r)) => {
                if r.error_code == 0 {
                    self.session = Some((r.producer_id.0, r.producer_epoch));
                    self.step = Step::AddPartitions;
                    return Outcome::Again { backoff: false };
                }
                ("InitProducerId", r.error_code)
            }
            (Step::AddPartitions, ResponseKind::AddPartitionsToTxn(r)) => {
                ("AddPartitionsToTxn", req::add_partitions_error(&r))
            }
            (Step::AddOffsets, ResponseKind::AddOffsetsToTxn(r)) => {
                ("AddOffsetsToTxn", r.error_code)
            }
            (Step::StageOffsets, ResponseKind::TxnOffsetCommit(r)) => {
                ("TxnOffsetCommit", req::txn_offset_commit_error(&r))
            }
            (Step::Produce, ResponseKind::Produce(r)) => {
                return self.on_produced(cx, req::produce_answers(&r))
            }
            (Step::End, ResponseKind::EndTxn(r)) => ("EndTxn", r.error_code),
            (step, other) => panic!("{CHURN_TXN_ID}: {other:?} answered in {step:?}"),
        };
        if code != 0 {
            return self.refused(cx, what, code);
        }
        match self.step {
            Step::AddPartitions => self.step = Step::AddOffsets,
            Step::AddOffsets => self.step = Step::StageOffsets,
            Step::StageOffsets => self.step = Step::Produce,
            Step::End => {
                let open = self.open.take().expect("EndTxn of an open transaction");
                cx.note(format!(
                    "{CHURN_TXN_ID} {} of incarnation {} ended ({:?})",
                    Self::decision(&open),
                    open.incarnation,
                    open.end_at
                ));
                self.ended += 1;
                cx.history.churn_txns_ended += 1;
                if open.end_at == EndAt::Recreated {
                    cx.history.churn_txns_ended_recreated += 1;
                }
                self.step = Step::AddPartitions;
                return Outcome::Done;
            }
            Step::Init | Step::Produce => unreachable!("answered above"),
        }
        Outcome::Again { backoff: false }
    }

    fn on_produced(&mut self, cx: &mut Cx, answers: Vec<(i32, i16, i64)>) -> Outcome {
        let mut refused = None;
        let open = self.open.as_mut().expect("produce within a transaction");
        for (partition, code, _) in answers {
            let Some(batch) = open.batches.iter_mut().find(|b| b.0 == partition) else {
                return Outcome::Broken(format!("Produce answered p{partition}, never sent"));
            };
            let raced = open.delete_sent;
            match code {
                0 => {
                    batch.2 = Batch::Acked;
                    cx.history.churn_batches_raced_acked += u64::from(raced);
                }
                UNKNOWN_TOPIC_OR_PARTITION if raced => {
                    // Its partition went with the deletion sent behind it:
                    // lost, and a Kafka client aborts the transaction.
                    batch.2 = Batch::Lost;
                    open.commit = false;
                    cx.history.churn_batches_raced_lost += 1;
                    cx.note(format!(
                        "{CHURN_TXN_ID}: p{partition}'s batch lost to the topic's deletion: abort"
                    ));
                }
                c => refused = Some(c),
            }
        }
        if let Some(code) = refused {
            return self.refused(cx, "transactional Produce", code);
        }
        if open.batches.iter().all(|b| b.2 != Batch::Unanswered) {
            return Outcome::Done;
        }
        Outcome::Again { backoff: true }
    }

    /// An error answer: asked again when Kafka's client would; a fence only
    /// past the timeout, when the broker may have aborted the transaction
    /// (the churner then starts its next one with a new InitProducerId).
    fn refused(&mut self, cx: &mut Cx, what: &str, code: i16) -> Outcome {
        if is_retry(code) {
            return Outcome::Again { backoff: true };
        }
        let timed_out = self
            .open
            .as_ref()
            .is_some_and(|o| cx.now_ms - o.started_ms > i64::from(TIMEOUT_MS));
        if is_fenced(code) && timed_out {
            cx.note(format!(
                "{CHURN_TXN_ID}: {what} fenced ({code}) past the timeout: the broker aborted it"
            ));
            self.session = None;
            self.open = None;
            self.step = Step::Init;
            return Outcome::Done;
        }
        let state = match &self.open {
            Some(o) => format!(
                "transaction of incarnation {} ({}, ends {:?}, open {} ms)",
                o.incarnation,
                Self::decision(o),
                o.end_at,
                cx.now_ms - o.started_ms
            ),
            None => "no transaction".into(),
        };
        Outcome::Broken(format!("{CHURN_TXN_ID} {what} answered {code} ({state})"))
    }
}
