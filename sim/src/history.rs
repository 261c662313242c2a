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
}

/// A high watermark in a fetch answer, with when that fetch was sent.
#[derive(Clone, Debug)]
pub struct HwSeen {
    pub sent_ms: i64,
    pub consumer: u32,
    pub partition: i32,
    pub high_watermark: i64,
}

#[derive(Default)]
pub struct History {
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
}

impl History {
    pub fn violation(&mut self, now_ms: i64, what: String) {
        self.violations.push(format!("at t={now_ms}ms: {what}"));
    }
}
