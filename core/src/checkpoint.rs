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

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::api::MetaAction;
use crate::broker::Broker;
use crate::io::MetaOp;
use crate::limits;
use crate::log::recovery::LogCheckpoint;
use crate::meta;
use crate::producer::ProducerStates;
use crate::topics::PartitionKey;

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
}

/// What the broker knows of a partition's last checkpoint.
#[derive(Clone, Debug, Default)]
pub(crate) struct CheckpointState {
    /// Offset of the last one stored (None: none yet).
    offset: Option<i64>,
    log_start_offset: i64,
    /// The log's durable byte count when it was taken.
    durable_bytes: u64,
    written_ms: i64,
    in_flight: bool,
}

/// A checkpoint write in flight.
pub struct PendingCheckpoint {
    key: PartitionKey,
    offset: i64,
    log_start_offset: i64,
    durable_bytes: u64,
}

/// Checkpoints of every partition, and when to look at them next.
#[derive(Default)]
pub(crate) struct Checkpoints {
    states: BTreeMap<PartitionKey, CheckpointState>,
    next_check_ms: i64,
}

impl Checkpoints {
    /// A partition recovered from its checkpoint at `offset`.
    pub fn booted(&mut self, key: PartitionKey, offset: Option<i64>, log_start_offset: i64) {
        let state = CheckpointState {
            offset,
            log_start_offset,
            ..CheckpointState::default()
        };
        self.states.insert(key, state);
    }

    pub fn forget_topic(&mut self, id: &Uuid) {
        self.states.retain(|k, _| k.id != *id);
    }

    pub fn in_flight(&self) -> bool {
        self.states.values().any(|s| s.in_flight)
    }

    pub fn next_deadline_ms(&self) -> i64 {
        self.next_check_ms
    }
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

/// Writes the checkpoints of `keys` that are due.
pub(crate) fn write_due(b: &mut Broker, keys: Vec<PartitionKey>, due: Due) {
    let now_ms = b.now_ms;
    let mut writes = Vec::new();
    for key in keys {
        let Some(log) = b.topics.partition_by_key(&key) else {
            continue;
        };
        let state = b.checkpoints.states.entry(key.clone()).or_default();
        if state.in_flight {
            continue;
        }
        let hw = log.high_watermark();
        let moved = state.offset != Some(hw) || state.log_start_offset != log.log_start_offset();
        if !moved {
            continue;
        }
        let grown =
            log.durable_bytes().saturating_sub(state.durable_bytes) >= limits::CHECKPOINT_BYTES;
        let old = now_ms - state.written_ms >= limits::CHECKPOINT_INTERVAL_MS;
        let start_moved = state.log_start_offset != log.log_start_offset();
        let go = match due {
            Due::Now => true,
            Due::Bytes => grown,
            Due::Time => grown || old || start_moved,
        };
        if !go {
            continue;
        }
        state.in_flight = true;
        let producers = b
            .producer_states
            .get(&key)
            .map(|p| p.snapshot_at(hw))
            .unwrap_or_default();
        let ongoing_txns = b
            .partition_txns
            .get(&key)
            .map(|t| t.ongoing_at(hw))
            .unwrap_or_default();
        let record = CheckpointRecord {
            log: log.checkpoint(),
            producers,
            ongoing_txns,
        };
        let pending = PendingCheckpoint {
            key: key.clone(),
            offset: hw,
            log_start_offset: log.log_start_offset(),
            durable_bytes: log.durable_bytes(),
        };
        writes.push((key, record, pending));
    }
    for (key, record, pending) in writes {
        let ops = vec![MetaOp::Put {
            key: self::key(&key.id, key.partition),
            value: meta::encode(&record),
        }];
        b.emit_meta(ops, MetaAction::Checkpoint(pending));
    }
}

/// The timer: every partition is looked at a few times per interval.
pub(crate) fn tick(b: &mut Broker) {
    if b.now_ms < b.checkpoints.next_check_ms {
        return;
    }
    b.checkpoints.next_check_ms = b.now_ms + (limits::CHECKPOINT_INTERVAL_MS / 4).max(1);
    let keys = b.topics.keys();
    write_due(b, keys, Due::Time);
}

/// A checkpoint write completed.
pub(crate) fn written(b: &mut Broker, pending: PendingCheckpoint, stored: bool) {
    let now_ms = b.now_ms;
    let Some(state) = b.checkpoints.states.get_mut(&pending.key) else {
        return; // the topic was deleted meanwhile
    };
    state.in_flight = false;
    if stored {
        state.offset = Some(pending.offset);
        state.log_start_offset = pending.log_start_offset;
        state.durable_bytes = pending.durable_bytes;
        state.written_ms = now_ms;
    }
}

/// The meta.db deletes of a deleted topic's checkpoints.
pub(crate) fn delete_ops(id: &Uuid, partitions: i32) -> Vec<MetaOp> {
    (0..partitions)
        .map(|p| MetaOp::Delete { key: key(id, p) })
        .collect()
}
