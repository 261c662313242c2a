//! Recovery checkpoints: per partition, a meta.db record saying "everything
//! below this offset is synced and indexed", with the producer state and the
//! open transactions as of that offset (Kafka keeps the same in its
//! recovery-point-offset-checkpoint file and its producer `.snapshot`s).
//!
//! A start-up reads the segments below a partition's recovery point from
//! their index files alone and reads batches only above it, so a clean start
//! costs the indexes and a start after a crash costs at most
//! `CHECKPOINT_BYTES` (or `CHECKPOINT_INTERVAL_MS` of writes) per partition.
//!
//! A checkpoint is taken at the high watermark, from state that may run
//! ahead of it: the producer and transaction state are cut back to it
//! (`snapshot_at`, `ongoing_at`), so nothing a power cut could take away is
//! in a checkpoint. It is written after the sync that made its offset
//! durable (the index entries below it rode that sync too), when enough bytes
//! or time have passed, after retention moved the log start, and for every
//! partition at a clean shutdown.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::io::MetaOp;
use crate::log::recovery::LogCheckpoint;
use crate::log::PartitionLog;
use crate::meta;
use crate::partition_key::PartitionKey;
use crate::producer::ProducerStates;

pub const KEY_PREFIX: &str = "ckpt/";

/// `ckpt/<topic id>/<partition>`.
pub fn key(topic_id: &Uuid, partition: i32) -> Vec<u8> {
    format!("{KEY_PREFIX}{}/{partition}", topic_id.hyphenated()).into_bytes()
}

/// Parses the part of a key after `KEY_PREFIX`.
pub fn parse_key(rest: &str) -> Option<(String, i32)> {
    let (topic_id, partition) = rest.rsplit_once('/')?;
    Some((topic_id.to_string(), partition.parse().ok()?))
}

/// One partition's checkpoint, as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckpointRecord {
    pub log: LogCheckpoint,
    pub producers: ProducerStates,
    /// (producer id, first offset) of the transactions open at `log.offset`.
    pub ongoing_txns: Vec<(i64, i64)>,
    /// The log cleaner's first dirty offset (Kafka's cleaner-offset-
    /// checkpoint file): below it the log was cleaned, so a start does not
    /// count the whole log dirty again. 0 (the default of records written
    /// before it existed): nothing cleaned.
    #[serde(default)]
    pub cleaner_first_dirty_offset: i64,
}

/// What the broker knows of a partition's last checkpoint; the partition
/// holds it (`crate::partition::Partition::checkpoint`), so it goes with
/// its topic.
#[derive(Clone, Debug, Default)]
pub(crate) struct CheckpointState {
    /// Offset of the last one stored (None: none yet).
    offset: Option<i64>,
    log_start_offset: i64,
    /// The log's durable byte count when it was taken.
    durable_bytes: u64,
    written_ms: i64,
    in_flight: bool,
    /// The cleaner's first dirty offset it holds.
    cleaner_first_dirty_offset: i64,
}

/// A checkpoint write in flight.
pub struct PendingCheckpoint {
    key: PartitionKey,
    offset: i64,
    log_start_offset: i64,
    durable_bytes: u64,
    cleaner_first_dirty_offset: i64,
}

/// Why a checkpoint may be due.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// A sync moved the high watermark: due after `CHECKPOINT_BYTES`.
    Bytes,
    /// The timer: due after `CHECKPOINT_INTERVAL_MS`, or a moved log start.
    Time,
    /// Now, whatever changed (boot, shutdown).
    Now,
}

/// When to look at the partitions' checkpoints next, and what makes one due.
pub(crate) struct Checkpoints {
    next_check_ms: i64,
    /// `BrokerConfig::checkpoint_bytes` and `checkpoint_interval_ms`.
    bytes: u64,
    interval_ms: i64,
}

impl PendingCheckpoint {
    pub fn key(&self) -> &PartitionKey {
        &self.key
    }
}

impl Checkpoints {
    pub fn new(bytes: u64, interval_ms: i64) -> Self {
        Self {
            next_check_ms: 0,
            bytes,
            interval_ms,
        }
    }

    pub fn next_deadline_ms(&self) -> i64 {
        self.next_check_ms
    }

    /// Whether a checkpoint of the partition is due for `due` (and none is
    /// in flight).
    pub fn is_due(
        &self,
        state: &CheckpointState,
        log: &PartitionLog,
        cleaner_first_dirty_offset: i64,
        due: Due,
        now_ms: i64,
    ) -> bool {
        if state.in_flight {
            return false;
        }
        let hw = log.high_watermark();
        let moved = state.offset != Some(hw)
            || state.log_start_offset != log.log_start_offset()
            || state.cleaner_first_dirty_offset != cleaner_first_dirty_offset;
        if !moved {
            return false;
        }
        let grown = log.durable_bytes().saturating_sub(state.durable_bytes) >= self.bytes;
        let old = now_ms - state.written_ms >= self.interval_ms;
        let start_moved = state.log_start_offset != log.log_start_offset();
        match due {
            Due::Now => true,
            Due::Bytes => grown,
            Due::Time => grown || old || start_moved,
        }
    }

    /// The timer: whether every partition is to be looked at now (a few
    /// times per interval); if so, the next look is scheduled.
    pub fn tick(&mut self, now_ms: i64) -> bool {
        if now_ms < self.next_check_ms {
            return false;
        }
        self.next_check_ms = now_ms + (self.interval_ms / 4).max(1);
        true
    }
}

impl CheckpointState {
    /// A partition recovered from its checkpoint at `offset`.
    pub fn booted(
        offset: Option<i64>,
        log_start_offset: i64,
        cleaner_first_dirty_offset: i64,
    ) -> Self {
        CheckpointState {
            offset,
            log_start_offset,
            cleaner_first_dirty_offset,
            ..CheckpointState::default()
        }
    }

    /// The offset of the partition's last stored checkpoint.
    pub fn stored_offset(&self) -> Option<i64> {
        self.offset
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// A checkpoint of the partition is in flight from now.
    pub fn start(&mut self) {
        assert!(!self.in_flight, "one checkpoint of a partition at a time");
        self.in_flight = true;
    }

    /// The partition's checkpoint write completed.
    pub fn written(&mut self, pending: PendingCheckpoint, stored: bool, now_ms: i64) {
        self.in_flight = false;
        if stored {
            self.offset = Some(pending.offset);
            self.log_start_offset = pending.log_start_offset;
            self.durable_bytes = pending.durable_bytes;
            self.written_ms = now_ms;
            self.cleaner_first_dirty_offset = pending.cleaner_first_dirty_offset;
        }
    }
}

/// The checkpoint of a partition at its high watermark, with the producer
/// and transaction state cut back to it (`ongoing_txns`: the transactions
/// open at the high watermark, `PartitionTxns::ongoing_at`, which the caller
/// reads so that this layer names no partition state above it): the
/// meta.db write that stores it, and what to remember when that completes.
pub(crate) fn at_high_watermark(
    key: &PartitionKey,
    log: &PartitionLog,
    producers: Option<&ProducerStates>,
    ongoing_txns: Vec<(i64, i64)>,
    cleaner_first_dirty_offset: i64,
) -> (Vec<MetaOp>, PendingCheckpoint) {
    let hw = log.high_watermark();
    let record = CheckpointRecord {
        log: log.checkpoint(),
        producers: producers.map(|p| p.snapshot_at(hw)).unwrap_or_default(),
        ongoing_txns,
        cleaner_first_dirty_offset,
    };
    let pending = PendingCheckpoint {
        key: key.clone(),
        offset: hw,
        log_start_offset: log.log_start_offset(),
        durable_bytes: log.durable_bytes(),
        cleaner_first_dirty_offset,
    };
    let ops = vec![MetaOp::Put {
        key: self::key(&key.id, key.partition),
        value: meta::encode(&record),
    }];
    (ops, pending)
}

/// The meta.db deletes of a deleted topic's checkpoints.
pub(crate) fn delete_ops(id: &Uuid, partitions: i32) -> Vec<MetaOp> {
    (0..partitions)
        .map(|p| MetaOp::Delete { key: key(id, p) })
        .collect()
}
