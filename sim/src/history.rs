//! What the clients observed, for the oracle: acknowledgements, records seen
//! by consumers, high watermarks, the final log read back after a last power
//! cut, and violations spotted on the spot.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::client::values::RecordId;

/// A record the broker acknowledged at `offset`.
#[derive(Clone, Debug)]
pub struct Ack {
    pub at_ms: i64,
    pub client: u32,
    pub partition: i32,
    pub offset: i64,
    pub id: RecordId,
}

/// A record a consumer was given.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at_ms: i64,
    pub consumer: u32,
    pub partition: i32,
    pub offset: i64,
    pub value: Bytes,
    /// Read with isolation level read_committed.
    pub read_committed: bool,
}

/// One transaction as its producer knows it: the records it wrote, whether
/// it asked to commit, what it was answered.
#[derive(Clone, Debug)]
pub struct TxnWritten {
    pub client: u32,
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    /// Records sent in it (acknowledged or not).
    pub ids: Vec<RecordId>,
    /// An EndTxn commit was sent at least once.
    pub commit_sent: bool,
    /// An EndTxn abort was sent at least once.
    pub abort_sent: bool,
    /// The decision EndTxn answered with success (true: commit).
    pub answered: Option<bool>,
    /// The producer was refused as fenced while this was open.
    pub fenced: bool,
}

/// An EndTxn answer, for the decision table.
#[derive(Clone, Debug)]
pub struct EndTxnAnswer {
    pub at_ms: i64,
    pub client: u32,
    pub commit: bool,
    pub code: i16,
}

/// An EndTxn commit a group copier was answered: the group's committed
/// offset of `partition` is at least `offset` from then on.
#[derive(Clone, Debug)]
pub struct GroupCommit {
    pub at_ms: i64,
    pub partition: i32,
    pub offset: i64,
}

/// A batch of the final log, as the verifier read it back.
pub type FinalBatch = crate::client::batches::BatchView;

/// A high watermark and last stable offset in a fetch answer, with when
/// that fetch was sent and when its answer came.
#[derive(Clone, Debug)]
pub struct HwSeen {
    pub sent_ms: i64,
    pub received_ms: i64,
    pub consumer: u32,
    pub partition: i32,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    /// The log start in the same answer (Fetch v5 and later).
    pub log_start_offset: i64,
}

/// A DeleteRecords answer: the partition's log start (its low watermark),
/// stored before the answer left.
#[derive(Clone, Debug)]
pub struct RecordsDeleted {
    pub answered_ms: i64,
    pub partition: i32,
    pub low_watermark: i64,
}

#[derive(Default)]
pub struct History {
    /// The main topic is compacted (`oracle_compact`).
    pub compacted: bool,
    /// The main topic has retention: records below `final_log_start` may
    /// be gone (`oracle::below_log_start`).
    pub retention: bool,
    /// Per partition of the main topic, the log start the final read was
    /// last sent to (ListOffsets' earliest after OFFSET_OUT_OF_RANGE); 0
    /// when it read from the beginning.
    pub final_log_start: BTreeMap<i32, i64>,
    /// DeleteRecords answers on the main topic, in the order they came.
    pub records_deleted: Vec<RecordsDeleted>,
    pub acks: Vec<Ack>,
    pub seen: Vec<Seen>,
    pub hws: Vec<HwSeen>,
    /// Broken invariants noticed as they happened (with simulated time).
    pub violations: Vec<String>,
    /// Records each producer made (ids 0..n), whether or not they landed.
    pub produced: BTreeMap<u32, u64>,
    /// Producers that promise no duplicates (idempotent ones).
    pub idempotent: BTreeSet<u32>,
    /// Records resent under a new producer id after an epoch bump. Kafka's
    /// idempotence holds within one producer session, so a duplicate of one
    /// of these is not a violation (the oracle counts them).
    pub resequenced: BTreeSet<RecordId>,
    /// Every record of the final log, per partition, in the order read.
    pub final_log: BTreeMap<i32, Vec<(i64, Bytes)>>,
    pub final_high_watermark: BTreeMap<i32, i64>,
    pub final_read_done: bool,
    /// Transactions, in the order their producers began them.
    pub txns: Vec<TxnWritten>,
    pub end_txn_answers: Vec<EndTxnAnswer>,
    /// Records a zombie sent after it was told it is fenced: none may land.
    pub zombie_writes: Vec<RecordId>,
    /// Every batch of the final log, per (topic, partition), main topic and
    /// the copier's output alike.
    pub final_batches: BTreeMap<(String, i32), Vec<FinalBatch>>,
    /// Verifiers still reading back; the final read is done at zero.
    pub final_reads_pending: u32,
    /// Every producer of the main topic is done (the copier's input is complete).
    pub inputs_done: bool,
    /// The copier's output topic, when a copier ran, and whether it
    /// finished copying (the exactly-once check needs all of the input).
    pub copier_output: Option<String>,
    pub copier_finished: bool,
    /// The group copiers' output topic, when they ran; whether one of them
    /// saw the group's committed offsets reach the input's end, and those
    /// offsets (partition, offset).
    pub group_output: Option<String>,
    pub group_copy_finished: bool,
    pub group_final_offsets: Vec<(i32, i64)>,
    pub group_commits: Vec<GroupCommit>,
    /// Committed offsets the offset keeper saw expire (`client::offset_keeper`).
    pub offsets_expired_seen: u64,
    /// The churner's transactions ended across their topic's deletion
    /// (`client::churn_txn`), and of those, ended after its re-creation.
    pub churn_txns_ended: u64,
    pub churn_txns_ended_recreated: u64,
    /// The churner's transactional batches answered with their topic's
    /// DeleteTopics sent right behind them: acknowledged, or refused
    /// because the partition went first.
    pub churn_batches_raced_acked: u64,
    pub churn_batches_raced_lost: u64,
}

impl History {
    pub fn violation(&mut self, now_ms: i64, what: String) {
        self.violations.push(format!("at t={now_ms}ms: {what}"));
    }
}
