//! The stored form of one transactional id (meta.db key `txn/<id>`), as
//! Kafka's TransactionMetadata keeps it (core/src/main/scala/kafka/
//! coordinator/transaction/TransactionMetadata.scala), plus the consumer
//! offsets staged by TxnOffsetCommit, which Kafka keeps as transactional
//! records in __consumer_offsets and we keep here until the commit applies them.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub const KEY_PREFIX: &str = "txn/";
/// Flags earlier versions wrote for partitions that held a transactional
/// batch (`txnpart/<topic id>/<partition>`); read and ignored: transaction
/// state now comes with each partition's recovery.
pub const PARTITION_FLAG_PREFIX: &str = "txnpart/";

pub fn key(transactional_id: &str) -> Vec<u8> {
    format!("{KEY_PREFIX}{transactional_id}").into_bytes()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

impl TxnState {
    /// The name Kafka's tools print (DescribeTransactions, ListTransactions).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }

    pub fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }

    pub fn is_complete(self) -> bool {
        matches!(self, TxnState::CompleteCommit | TxnState::CompleteAbort)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedOffset {
    pub topic: String,
    /// The topic's id when the offset was staged: a commit after the topic
    /// was deleted (or deleted and created again) drops the offset, as
    /// Kafka's OffsetMetadataManager.onPartitionsDeleted drops pending
    /// transactional offsets. Absent in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_id: Option<String>,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRecord {
    pub producer_id: i64,
    /// The id before a rotation (epoch exhaustion), for KIP-360 retries.
    pub previous_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last client-driven bump, for KIP-360 retries.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<(String, i32)>,
    /// Groups added with AddOffsetsToTxn.
    pub groups: BTreeSet<String>,
    /// group -> offsets staged by TxnOffsetCommit (one per partition; a
    /// list, since JSON map keys must be strings).
    pub staged_offsets: BTreeMap<String, Vec<StagedOffset>>,
    /// When the open transaction started (-1 when none).
    pub start_ms: i64,
    /// When the state last changed; the timeout counts from here.
    pub last_update_ms: i64,
}

impl TxnRecord {
    /// A new id's record before its first transition (`state::create`).
    pub(super) fn new(producer_id: i64, timeout_ms: i32, now_ms: i64) -> Self {
        Self {
            producer_id,
            previous_producer_id: -1,
            producer_epoch: -1,
            last_producer_epoch: -1,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            staged_offsets: BTreeMap::new(),
            start_ms: -1,
            last_update_ms: now_ms,
        }
    }
}

impl TxnRecord {
    /// Stages an offset, replacing an earlier one of the same partition
    /// (for `state`'s TxnOffsetCommit transition).
    pub(super) fn stage_offset(&mut self, group: &str, staged: StagedOffset) {
        let list = self.staged_offsets.entry(group.to_string()).or_default();
        match list
            .iter_mut()
            .find(|s| s.topic == staged.topic && s.partition == staged.partition)
        {
            Some(s) => *s = staged,
            None => list.push(staged),
        }
    }
}

/// Kafka's TransactionMetadata.isEpochExhausted.
pub fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}
