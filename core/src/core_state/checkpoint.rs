//! When recovery checkpoints are written (`crate::checkpoint` says what one
//! holds): after a sync that moved a partition far enough, on the timer, at
//! the end of start-up and at a clean shutdown.

use super::{Core, MetaAction};
use crate::checkpoint::{self, Due, PendingCheckpoint};
use crate::config::PlantedBug;
use crate::topics::PartitionKey;

impl Core {
    /// Whether a checkpoint write of any partition is in flight.
    pub(super) fn checkpoint_in_flight(&self) -> bool {
        self.topics
            .partitions()
            .any(|(_, p)| p.checkpoint().in_flight())
    }

    /// Writes the checkpoints of `keys` that are due.
    pub(super) fn write_due_checkpoints(&mut self, keys: Vec<PartitionKey>, due: Due) {
        let mut writes = Vec::new();
        let mut waiting = Vec::new();
        for key in keys {
            let Some(partition) = self.topics.get_partition(&key) else {
                continue;
            };
            let log = partition.log();
            let first_dirty = self.cleaner_first_dirty_offset(&key);
            if !self
                .checkpoints
                .is_due(partition.checkpoint(), log, first_dirty, due, self.now_ms)
            {
                continue;
            }
            if !log.indexes_durable()
                && self.config.planted_bug != Some(PlantedBug::CheckpointBeforeIndexesDurable)
            {
                // A checkpoint vouches for the index entries below it, and a
                // `SyncScope::Logs` sync moved the high watermark without
                // them: it is written after the next sync, which covers them.
                waiting.push(key);
                continue;
            }
            writes.push(checkpoint::at_high_watermark(
                &key,
                log,
                partition.producers(),
                partition
                    .txns()
                    .map(|t| t.ongoing_at(log.high_watermark()))
                    .unwrap_or_default(),
                first_dirty,
            ));
            let partition = self.topics.get_partition_mut(&key).expect("found above");
            partition.checkpoint_mut().start();
        }
        for (ops, pending) in writes {
            self.emit_meta(ops, MetaAction::Checkpoint(pending));
        }
        for key in waiting {
            self.checkpoint_after_index_sync(key);
        }
    }

    /// The checkpoint timer: every partition is looked at a few times per interval.
    pub(super) fn checkpoint_tick(&mut self) {
        if !self.checkpoints.tick(self.now_ms) {
            return;
        }
        let keys = self.topics.keys();
        self.write_due_checkpoints(keys, Due::Time);
    }

    /// A checkpoint write completed.
    pub(super) fn checkpoint_written(&mut self, pending: PendingCheckpoint, stored: bool) {
        let key = pending.key().clone();
        if let Some(partition) = self.topics.get_partition_mut(&key) {
            partition
                .checkpoint_mut()
                .written(pending, stored, self.now_ms);
        } // else the topic was deleted meanwhile
        if stored {
            self.cleaner_on_checkpoint(&key);
        }
    }
}
