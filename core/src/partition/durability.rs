//! Where the partition stands with the disk: disk operations no sync covered
//! yet, index appends a `SyncScope::Logs` sync left out, the point the sync
//! in flight brings it to; the cut back to what is durable after a failed
//! sync, and going offline after a failed read.

use super::Partition;
use crate::io::{DiskOp, FileRange, SyncScope};
use crate::outbox::Outbox;

impl Partition {
    /// Emits a disk operation of this partition; it becomes durable with
    /// the next sync that covers the partition.
    pub fn emit(&mut self, op: DiskOp, outbox: &mut Outbox) {
        self.dirty = true;
        outbox.disk(op);
    }

    pub(super) fn emit_all(&mut self, ops: Vec<DiskOp>, outbox: &mut Outbox) {
        for op in ops {
            self.emit(op, outbox);
        }
    }

    /// Disk operations no sync covers yet.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Index appends a `SyncScope::Logs` sync may have left unsynced.
    pub fn is_index_lagging(&self) -> bool {
        self.index_lagging
    }

    /// A sync of `scope` starts: it covers the partition if it is dirty, or
    /// (an `All` sync) if index appends lag; then it is no longer dirty.
    pub fn start_sync(&mut self, scope: SyncScope) {
        assert!(self.sync_point.is_none(), "one sync in flight at a time");
        let covered = self.dirty || (scope == SyncScope::All && self.index_lagging);
        self.dirty = false;
        if covered {
            self.sync_point = Some(self.log.sync_point(scope));
            if scope == SyncScope::Logs {
                // It may hold index appends this sync leaves out.
                self.index_lagging = true;
            }
        }
    }

    /// The sync in flight completed OK: what it covered is durable. Returns
    /// whether it covered this partition.
    pub fn sync_done(&mut self, scope: SyncScope) -> bool {
        let Some(point) = self.sync_point.take() else {
            return false;
        };
        if scope == SyncScope::All {
            self.index_lagging = false;
        }
        self.log.mark_durable(point, scope);
        let hw = self.log.high_watermark();
        if let Some(txns) = self.txns.as_mut() {
            txns.mark_durable(hw);
        }
        true
    }

    /// The sync in flight failed: whether the partition must be cut back
    /// (`truncate_to_durable`): the sync covered it, or it holds writes or
    /// index appends no sync made durable.
    pub fn sync_failed(&mut self) -> bool {
        let covered = self.sync_point.take().is_some();
        covered || self.dirty || self.index_lagging
    }

    /// Its due checkpoint waits for the next `SyncScope::All` sync.
    pub fn wait_for_index_sync(&mut self) {
        self.checkpoint_after_index_sync = true;
    }

    /// Whether a checkpoint waited for the `All` sync that completed; it
    /// waits no more.
    pub fn take_checkpoint_wait(&mut self) -> bool {
        std::mem::take(&mut self.checkpoint_after_index_sync)
    }

    /// After a failed sync: cuts the partition back to its high watermark,
    /// its producer and transaction state with it, and emits the cut (and
    /// the repair of the index files of the segment kept).
    pub fn truncate_to_durable(&mut self, outbox: &mut Outbox) {
        let hw = self.log.high_watermark();
        let hw_segment = self.log.high_watermark_position().segment_base;
        let aborted_kept = match self.txns.as_mut() {
            Some(txns) => {
                txns.truncate_above(hw);
                txns.aborted_in(hw_segment, i64::MAX)
            }
            None => Vec::new(),
        };
        if let Some(states) = self.producers.as_mut() {
            states.truncate_above(hw);
        }
        let ops = self.log.truncate_to_durable(&aborted_kept);
        self.emit_all(ops, outbox);
        // Index appends of earlier segments a `SyncScope::Logs` sync left
        // unsynced: the failure may have taken them too.
        let unsynced = self.log.segments_with_unsynced_indexes();
        for base in unsynced.into_iter().filter(|b| *b != hw_segment) {
            self.repair_indexes(base, outbox);
        }
    }

    /// Repairs a segment's index files from memory (after a failed sync).
    pub fn repair_indexes(&mut self, segment_base: i64, outbox: &mut Outbox) {
        let Some((from, to)) = self.log.segment_span(segment_base) else {
            return;
        };
        let aborted = self
            .txns
            .as_ref()
            .map(|t| t.aborted_in(from, to))
            .unwrap_or_default();
        let ops = self.log.repair_indexes(segment_base, &aborted);
        self.emit_all(ops, outbox);
    }

    /// A read of `range` failed. The partition answers KAFKA_STORAGE_ERROR
    /// until a restart (Kafka takes the failed log dir offline), unless the
    /// log no longer holds the range (retention or the cleaner got there
    /// first: a race, not a failed disk). Returns whether it went offline
    /// now.
    pub fn read_failed(&mut self, range: &FileRange) -> bool {
        if !self.log.holds(range) || self.offline {
            return false;
        }
        self.offline = true;
        true
    }

    /// Start-up could not read the partition's files.
    pub fn set_offline(&mut self) {
        self.offline = true;
    }
}
