//! The metrics snapshot (`crate::metrics`) built from the broker's stores:
//! it asks every one of them, so it is the broker's to build.

use super::Core;
use crate::metrics::{ConsumerOffset, Counters, PartitionSnapshot, Snapshot, TopicSnapshot};

/// Builds the snapshot from the broker's stores, through their own methods.
pub(super) fn snapshot(b: &Core, counters: Counters) -> Snapshot {
    let mut topics = Vec::new();
    let mut partitions = Vec::new();
    for (name, topic) in b.topics().iter() {
        topics.push(TopicSnapshot {
            topic: name.clone(),
            counters: topic.counters,
        });
        for p in 0..topic.partitions.len() as i32 {
            // Offline partitions answer nothing, here as to clients.
            let Ok(view) = b.partition_view(name, p) else {
                continue;
            };
            partitions.push(PartitionSnapshot {
                topic: name.clone(),
                partition: p,
                high_watermark: view.log().high_watermark(),
                last_stable_offset: view.last_stable_offset(),
            });
        }
    }
    let mut consumer_offsets = Vec::new();
    let offsets = &b.groups().offsets;
    for group in offsets.groups() {
        for ((topic, partition), record) in offsets.of_group(group) {
            let Some(log) = b.topics().partition(topic, *partition) else {
                continue; // committed for a topic since deleted
            };
            consumer_offsets.push(ConsumerOffset {
                group: group.clone(),
                topic: topic.clone(),
                partition: *partition,
                committed_offset: record.offset,
                high_watermark: log.high_watermark(),
            });
        }
    }
    Snapshot {
        counters,
        txns_open: b.txns().open_count(),
        fetch_sessions: b.fetch_sessions().len() as u64,
        topics,
        partitions,
        consumer_offsets,
    }
}
