//! What one partition's log, producer state and transaction state do
//! together, for the API handlers and the transaction coordinator alike:
//! appending a marker, and cutting all three back after a failed sync.

use crate::broker::Broker;
use crate::producer::ProducerStates;
use crate::topics::PartitionKey;

/// Appends a transaction marker of `producer_id` to a partition; returns its
/// offset, or None if the partition is gone (or offline). An abort of a
/// transaction that wrote here is booked in the segment's `.txnindex`.
pub(crate) fn append_marker(
    b: &mut Broker,
    key: &PartitionKey,
    producer_id: i64,
    epoch: i16,
    commit: bool,
    now_ms: i64,
) -> Option<i64> {
    if b.offline.contains(key) {
        return None;
    }
    let log = b.topics.partition_mut_by_key(key)?;
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
    Some(info.base_offset)
}

/// The partition's producer state (empty for a partition never written).
pub(crate) fn producer_states<'a>(b: &'a mut Broker, key: &PartitionKey) -> &'a mut ProducerStates {
    b.producer_states.entry(key.clone()).or_default()
}

/// After a failed sync: cuts the partition back to its high watermark, its
/// producer and transaction state with it, and emits the cut.
pub(crate) fn truncate_to_durable(b: &mut Broker, key: &PartitionKey) {
    let Some(hw) = b.topics.partition_by_key(key).map(|l| l.high_watermark()) else {
        return;
    };
    let aborted_cut = b
        .partition_txns
        .get_mut(key)
        .map(|t| t.truncate_above(hw))
        .unwrap_or_default();
    if let Some(states) = b.producer_states.get_mut(key) {
        states.truncate_above(hw);
    }
    let log = b.topics.partition_mut_by_key(key).expect("present above");
    let ops = log.truncate_to_durable(&aborted_cut);
    for op in ops {
        b.emit_disk(key.clone(), op);
    }
}
