//! Producers, as the Java client behaves (RecordAccumulator, Sender,
//! TransactionManager for idempotence):
//!
//! - idempotent (enable.idempotence=true, acks=all): InitProducerId first;
//!   each partition's batches carry consecutive sequences; at most 5 batches
//!   in flight per partition; a retriable error or a lost connection resends
//!   the *same* batch (same producer id, epoch, sequence, bytes), in sequence
//!   order. OUT_OF_ORDER_SEQUENCE_NUMBER on a batch with an earlier one still
//!   unresolved is retried after it; on the oldest unacknowledged batch (or
//!   INVALID_PRODUCER_EPOCH) the producer waits for everything in flight, gets
//!   a new producer id, and resends what is left from sequence 0 (KIP-360's
//!   epoch bump; a new session, so the history marks those records);
//! - plain (enable.idempotence=false, acks=1 or -1): no producer id; retries
//!   resend the batch, which may duplicate it. No promise against duplicates.
//!
//! One Produce request carries at most one batch per partition (v3+), and
//! the batches of several partitions, as the Java Sender drains them.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    InitProducerIdRequest, ProduceRequest, ProducerId, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rand::RngExt;

use super::values::{self, RecordId};
use super::{backoff_ms, is_retriable, Client, Cx};

/// max.in.flight.requests.per.connection, the most idempotence allows.
const IN_FLIGHT_PER_PARTITION_MAX: usize = 5;
/// Batches waiting per partition before the producer stops making more
/// (buffer.memory, in batches).
const QUEUED_PER_PARTITION_MAX: usize = 10;
const RECORDS_PER_BATCH_MAX: u64 = 8;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const INVALID_PRODUCER_EPOCH: i16 = 47;

#[derive(Clone, Debug)]
pub struct ProducerConfig {
    pub topic: String,
    pub partitions: i32,
    pub records: u64,
    pub idempotent: bool,
    pub acks: i16,
    /// Records carry keys (the topic is compacted).
    pub keyed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BatchState {
    Unsent,
    InFlight(i32),
}

#[derive(Clone, Debug)]
struct Batch {
    /// Record numbers, consecutive.
    first_n: u64,
    count: u64,
    base_seq: i32,
    created_ms: i64,
    state: BatchState,
    sends: u32,
}

pub struct Producer {
    client: u32,
    cfg: ProducerConfig,
    produce_version: i16,
    init_version: i16,
    /// (producer id, epoch) once InitProducerId answered.
    session: Option<(i64, i16)>,
    init_asked: Option<i32>,
    init_attempts: u32,
    /// Waiting for in-flight batches to settle before a new producer id.
    bumping: bool,
    next_n: u64,
    next_seq: Vec<i32>,
    /// Unacknowledged batches per partition, oldest first.
    queues: Vec<VecDeque<Batch>>,
    /// Produce requests in flight: correlation id -> (partition, first_n).
    in_flight: BTreeMap<i32, Vec<(i32, u64)>>,
    next_batch_ms: i64,
    retry_at_ms: i64,
    failures: u32,
}

impl Producer {
    pub fn new(client: u32, cfg: ProducerConfig, rng: &mut impl rand::Rng) -> Self {
        assert!(cfg.partitions > 0, "a topic has partitions");
        assert!(
            !cfg.idempotent || cfg.acks == -1,
            "idempotence needs acks=all"
        );
        let partitions = cfg.partitions as usize;
        Self {
            client,
            produce_version: rng.random_range(3..=9),
            init_version: rng.random_range(0..=5),
            cfg,
            session: None,
            init_asked: None,
            init_attempts: 0,
            bumping: false,
            next_n: 0,
            next_seq: vec![0; partitions],
            queues: vec![VecDeque::new(); partitions],
            in_flight: BTreeMap::new(),
            next_batch_ms: 0,
            retry_at_ms: 0,
            failures: 0,
        }
    }

    fn make_batches(&mut self, cx: &mut Cx) {
        while self.next_n < self.cfg.records && cx.now_ms >= self.next_batch_ms {
            let partition = cx.rng.random_range(0..self.cfg.partitions) as usize;
            if self.queues[partition].len() >= QUEUED_PER_PARTITION_MAX {
                // The buffer is full: an answer (or a dropped connection)
                // wakes the producer again, so no timer is needed.
                return;
            }
            let count = cx
                .rng
                .random_range(1..=RECORDS_PER_BATCH_MAX)
                .min(self.cfg.records - self.next_n);
            let base_seq = if self.cfg.idempotent {
                self.next_seq[partition]
            } else {
                -1
            };
            if self.cfg.idempotent {
                self.next_seq[partition] += count as i32;
            }
            let batch = Batch {
                first_n: self.next_n,
                count,
                base_seq,
                created_ms: cx.now_ms,
                state: BatchState::Unsent,
                sends: 0,
            };
            self.queues[partition].push_back(batch);
            self.next_n += count;
            self.next_batch_ms = cx.now_ms + cx.rng.random_range(0..=20);
            cx.history.produced.insert(self.client, self.next_n);
        }
        if self.next_n < self.cfg.records {
            cx.wake_in((self.next_batch_ms - cx.now_ms).max(1));
        }
    }

    /// The batch bytes: the same on every send of one batch.
    fn encode(&self, batch: &Batch) -> Bytes {
        let (producer_id, producer_epoch) = if self.cfg.idempotent {
            self.session.expect("have an id")
        } else {
            (-1, -1)
        };
        let values: Vec<Bytes> = (0..batch.count)
            .map(|i| {
                values::encode(RecordId {
                    client: self.client,
                    n: batch.first_n + i,
                })
            })
            .collect();
        super::batches::encode(
            &values,
            producer_id,
            producer_epoch,
            batch.base_seq,
            false,
            batch.created_ms,
            self.cfg.keyed,
        )
    }

    /// Sends every batch that may go: per partition the oldest unsent one,
    /// when every older one is in flight and fewer than 5 are.
    fn send_batches(&mut self, cx: &mut Cx) {
        loop {
            let mut parts = Vec::new();
            for (p, queue) in self.queues.iter().enumerate() {
                let in_flight = queue
                    .iter()
                    .filter(|b| b.state != BatchState::Unsent)
                    .count();
                let Some(next) = queue.iter().position(|b| b.state == BatchState::Unsent) else {
                    continue;
                };
                let in_order = queue
                    .iter()
                    .take(next)
                    .all(|b| b.state != BatchState::Unsent);
                if in_order && in_flight < IN_FLIGHT_PER_PARTITION_MAX {
                    parts.push((p, next));
                }
            }
            if parts.is_empty() {
                return;
            }
            let data = parts
                .iter()
                .map(|&(p, i)| {
                    let records = self.encode(&self.queues[p][i]);
                    PartitionProduceData::default()
                        .with_index(p as i32)
                        .with_records(Some(records))
                })
                .collect();
            let topic = TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(self.cfg.topic.clone())))
                .with_partition_data(data);
            let req = ProduceRequest::default()
                .with_acks(self.cfg.acks)
                .with_timeout_ms(30_000)
                .with_topic_data(vec![topic]);
            let Some(corr) = cx.wire.send(self.produce_version, &req) else {
                return;
            };
            let mut sent = Vec::new();
            for (p, i) in parts {
                let batch = &mut self.queues[p][i];
                batch.state = BatchState::InFlight(corr);
                batch.sends += 1;
                sent.push((p as i32, batch.first_n));
            }
            self.in_flight.insert(corr, sent);
        }
    }

    fn find(&mut self, partition: i32, first_n: u64) -> Option<(usize, usize)> {
        let p = usize::try_from(partition).ok()?;
        let i = self
            .queues
            .get(p)?
            .iter()
            .position(|b| b.first_n == first_n)?;
        Some((p, i))
    }

    fn on_produce(&mut self, cx: &mut Cx, corr: i32, r: kafka_protocol::messages::ProduceResponse) {
        let sent = self
            .in_flight
            .remove(&corr)
            .expect("a produce answer to a request in flight");
        let answers: Vec<(i32, i16, i64)> = r
            .responses
            .iter()
            .flat_map(|t| {
                t.partition_responses
                    .iter()
                    .map(|p| (p.index, p.error_code, p.base_offset))
            })
            .collect();
        for (partition, first_n) in sent {
            let (p, i) = self
                .find(partition, first_n)
                .expect("a batch in flight is queued");
            let Some(&(_, code, base_offset)) = answers.iter().find(|a| a.0 == partition) else {
                cx.violation(format!("produce answer lacks partition {partition}"));
                self.queues[p][i].state = BatchState::Unsent;
                continue;
            };
            self.settle(cx, p, i, code, base_offset);
        }
    }

    fn settle(&mut self, cx: &mut Cx, p: usize, i: usize, code: i16, base_offset: i64) {
        let batch = &mut self.queues[p][i];
        let what = format!(
            "p{p} n{}..+{} seq{}",
            batch.first_n, batch.count, batch.base_seq
        );
        match code {
            0 => {
                let batch = self.queues[p].remove(i).expect("found above");
                self.failures = 0;
                if base_offset < 0 {
                    return cx.violation(format!(
                        "{what}: acknowledged with base offset {base_offset}"
                    ));
                }
                cx.note(format!("acked {what} at offset {base_offset}"));
                for k in 0..batch.count {
                    let id = RecordId {
                        client: self.client,
                        n: batch.first_n + k,
                    };
                    let ack = crate::history::Ack {
                        at_ms: cx.elapsed_ms,
                        client: self.client,
                        partition: p as i32,
                        offset: base_offset + k as i64,
                        id,
                    };
                    cx.history.acks.push(ack);
                }
            }
            OUT_OF_ORDER_SEQUENCE_NUMBER | INVALID_PRODUCER_EPOCH if self.cfg.idempotent => {
                batch.state = BatchState::Unsent;
                if i == 0 || code == INVALID_PRODUCER_EPOCH {
                    cx.note(format!(
                        "{what}: error {code} on the oldest batch; new producer id"
                    ));
                    self.bumping = true;
                } else {
                    cx.note(format!(
                        "{what}: error {code} behind an unresolved batch; retry"
                    ));
                }
            }
            c if is_retriable(c) => {
                batch.state = BatchState::Unsent;
                self.failures += 1;
                self.retry_at_ms = cx.now_ms + backoff_ms(cx.rng, self.failures.min(3));
                cx.note(format!("{what}: retriable error {c}; resend"));
            }
            c => {
                // Not a code a well-behaved producer should ever get here.
                self.queues[p].remove(i);
                cx.violation(format!(
                    "{what}: unexpected produce error {c}; batch abandoned"
                ));
            }
        }
    }

    fn ask_producer_id(&mut self, cx: &mut Cx) {
        // A null transactional id: an idempotent producer, as the Java client
        // sends it (an empty string would be a malformed transactional id).
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        self.init_asked = cx.wire.send(self.init_version, &req);
    }

    fn on_init(&mut self, cx: &mut Cx, r: kafka_protocol::messages::InitProducerIdResponse) {
        if r.error_code != 0 {
            self.init_attempts += 1;
            cx.note(format!("InitProducerId error {}; retry", r.error_code));
            if !is_retriable(r.error_code) {
                cx.violation(format!("InitProducerId: unexpected error {}", r.error_code));
            }
            let delay_ms = backoff_ms(cx.rng, self.init_attempts);
            return cx.wake_in(delay_ms);
        }
        cx.note(format!(
            "producer id {} epoch {}",
            r.producer_id.0, r.producer_epoch
        ));
        self.session = Some((r.producer_id.0, r.producer_epoch));
        if self.bumping {
            // A new session: every unacknowledged batch starts again at 0.
            self.bumping = false;
            for (p, queue) in self.queues.iter_mut().enumerate() {
                let mut seq = 0i32;
                for batch in queue.iter_mut() {
                    assert_eq!(
                        batch.state,
                        BatchState::Unsent,
                        "nothing in flight across an epoch bump"
                    );
                    batch.base_seq = seq;
                    seq += batch.count as i32;
                    // Only a batch sent before may already be in the log
                    // under the old id.
                    if batch.sends > 0 {
                        for k in 0..batch.count {
                            let id = RecordId {
                                client: self.client,
                                n: batch.first_n + k,
                            };
                            cx.history.resequenced.insert(id);
                        }
                    }
                }
                self.next_seq[p] = seq;
            }
        }
    }
}

impl Client for Producer {
    fn name(&self) -> String {
        let kind = if self.cfg.idempotent {
            "idempotent"
        } else {
            "plain"
        };
        format!(
            "c{} {kind} producer acks={} v{}",
            self.client, self.cfg.acks, self.produce_version
        )
    }

    fn on_wake(&mut self, cx: &mut Cx) {
        if self.is_done() {
            return;
        }
        if cx.wire.conn().is_none() {
            return cx.connect();
        }
        if self.cfg.idempotent && (self.session.is_none() || self.bumping) {
            let settled = self.in_flight.is_empty();
            if self.init_asked.is_none() && settled {
                self.ask_producer_id(cx);
            }
            return;
        }
        self.make_batches(cx);
        if cx.now_ms < self.retry_at_ms {
            return cx.wake_in(self.retry_at_ms - cx.now_ms);
        }
        self.send_batches(cx);
    }

    fn on_response(&mut self, cx: &mut Cx, corr: i32, response: ResponseKind) {
        match response {
            ResponseKind::Produce(r) => self.on_produce(cx, corr, r),
            ResponseKind::InitProducerId(r) => {
                assert_eq!(self.init_asked, Some(corr), "one InitProducerId in flight");
                self.init_asked = None;
                self.on_init(cx, r);
            }
            other => panic!("producer got {other:?}"),
        }
        self.on_wake(cx);
    }

    fn on_disconnect(&mut self, cx: &mut Cx) {
        // Unknown outcome: resend every batch in flight, in order.
        self.in_flight.clear();
        self.init_asked = None;
        for queue in &mut self.queues {
            for batch in queue.iter_mut() {
                batch.state = BatchState::Unsent;
            }
        }
        self.failures += 1;
        let delay_ms = backoff_ms(cx.rng, self.failures.min(3));
        cx.wake_in(delay_ms);
    }

    fn is_done(&self) -> bool {
        self.next_n == self.cfg.records && self.queues.iter().all(|q| q.is_empty())
    }

    fn status(&self) -> String {
        let queued: usize = self.queues.iter().map(|q| q.len()).sum();
        format!(
            "{}: made {}/{} records, {queued} batches unacknowledged, {} requests in flight, session {:?}, bumping {}",
            self.name(),
            self.next_n,
            self.cfg.records,
            self.in_flight.len(),
            self.session,
            self.bumping
        )
    }
}
