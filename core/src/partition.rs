//! What one partition's log, producer state and transaction state do
//! together, for the API handlers and the transaction coordinator alike:
//! appending a marker, and cutting all three back after a failed sync.

use crate::broker::Broker;
use crate::producer::ProducerStates;
use crate::topics::PartitionKey;

/// Why a marker was not appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MarkerRefused {
    /// The partition is gone (its topic deleted): nothing left to mark.
    Gone,
    /// The partition is offline after a failed read: try again (it comes
    /// back with a restart, which carries the decision out anyway).
    Offline,
}

/// Appends a transaction marker of `producer_id` to a partition and returns
/// its offset. An abort of a transaction that wrote here is booked in the
/// segment's `.txnindex`.
pub(crate) fn append_marker(
    b: &mut Broker,
    key: &PartitionKey,
    producer_id: i64,
    epoch: i16,
    commit: bool,
    now_ms: i64,
) -> Result<i64, MarkerRefused> {
    if b.offline.contains(key) {
        return Err(MarkerRefused::Offline);
    }
    let log = b
        .topics
        .partition_mut_by_key(key)
        .ok_or(MarkerRefused::Gone)?;
    let mut info = log.append(
        crate::txn::marker::build(producer_id, epoch, commit, 0, now_ms),
        now_ms,
        false,
    );
    let aborted = b.partition_txns.entry(key.clone()).or_default().on_marker(
        producer_id,
        commit,
        info.base_offset,
    );
    if let Some(aborted) = aborted {
        let log = b.topics.partition_mut_by_key(key).expect("appended above");
        info.ops.push(log.append_aborted(&aborted));
    }
    producer_states(b, key).record_marker(producer_id, epoch, now_ms);
    for op in info.ops {
        b.emit_disk(key.clone(), op);
    }
    Ok(info.base_offset)
}

/// The partition's producer state (empty for a partition never written).
pub(crate) fn producer_states<'a>(b: &'a mut Broker, key: &PartitionKey) -> &'a mut ProducerStates {
    b.producer_states.entry(key.clone()).or_default()
}

/// After a failed sync: cuts the partition back to its high watermark, its
/// producer and transaction state with it, and emits the cut (and the
/// repair of the index files of the segment kept).
pub(crate) fn truncate_to_durable(b: &mut Broker, key: &PartitionKey) {
    let Some(log) = b.topics.partition_by_key(key) else {
        return;
    };
    let hw = log.high_watermark();
    let hw_segment = log.high_watermark_position().segment_base;
    let aborted_kept = match b.partition_txns.get_mut(key) {
        Some(txns) => {
            txns.truncate_above(hw);
            txns.aborted_in(hw_segment, i64::MAX)
        }
        None => Vec::new(),
    };
    if let Some(states) = b.producer_states.get_mut(key) {
        states.truncate_above(hw);
    }
    let log = b.topics.partition_mut_by_key(key).expect("present above");
    let ops = log.truncate_to_durable(&aborted_kept);
    for op in ops {
        b.emit_disk(key.clone(), op);
    }
}

/// Repairs a segment's index files from memory (after a failed sync).
pub(crate) fn repair_indexes(b: &mut Broker, key: &PartitionKey, segment_base: i64) {
    let Some(log) = b.topics.partition_mut_by_key(key) else {
        return;
    };
    let Some((from, to)) = log.segment_span(segment_base) else {
        return;
    };
    let aborted = b
        .partition_txns
        .get(key)
        .map(|t| t.aborted_in(from, to))
        .unwrap_or_default();
    let ops = log.repair_indexes(segment_base, &aborted);
    for op in ops {
        b.emit_disk(key.clone(), op);
    }
}

/// One partition as a handler reads it: its log and its transaction state.
pub(crate) struct PartitionView<'a> {
    pub log: &'a crate::log::PartitionLog,
    pub txns: Option<&'a crate::txn::PartitionTxns>,
    pub producers: Option<&'a ProducerStates>,
}

impl PartitionView<'_> {
    /// The first offset of the oldest open transaction, or the high watermark.
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.log.high_watermark();
        self.txns
            .and_then(|t| t.first_unstable_offset())
            .map_or(hw, |first| first.min(hw))
    }

    /// What a reader may see up to: the LSO under read_committed, else the
    /// high watermark.
    pub fn read_bound(&self, read_committed: bool) -> i64 {
        if read_committed {
            self.last_stable_offset()
        } else {
            self.log.high_watermark()
        }
    }
}

impl Broker {
    /// A partition to read or write, or the error a client is answered with:
    /// UNKNOWN_TOPIC_OR_PARTITION, or KAFKA_STORAGE_ERROR while it is offline.
    pub(crate) fn partition_view(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<PartitionView<'_>, kafka_protocol::ResponseError> {
        use kafka_protocol::ResponseError;
        let (Some(log), Some(t)) = (
            self.topics.partition(topic, partition),
            self.topics.get(topic),
        ) else {
            return Err(ResponseError::UnknownTopicOrPartition);
        };
        let key = t.key(topic, partition);
        if self.offline.contains(&key) {
            return Err(ResponseError::KafkaStorageError);
        }
        Ok(PartitionView {
            txns: self.partition_txns.get(&key),
            producers: self.producer_states.get(&key),
            log,
        })
    }
}
