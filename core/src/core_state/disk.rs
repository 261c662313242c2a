//! Disk and meta.db as outputs: appends and other partition operations,
//! the one sync in flight (group commit), reads, meta.db writes, and what
//! each completion sets going.

use bytes::Bytes;

use super::{recovery, Core, SyncInFlight};
use crate::boundary::Output;
use crate::checkpoint::{Due, PendingCheckpoint};
use crate::group::{offset_key, TopicPartition};
use crate::io::{DiskOp, FileRange, IoError, IoId, MetaOp, SyncScope};
use crate::producer::ids::ProducerIdsRecord;
use crate::topics::PartitionKey;
use crate::txn::write::TxnWrite;

/// What to do when a meta.db write the core started completes (Ok or not).
pub(crate) enum MetaAction {
    /// An API handler's own write: the top finishes it (`MetaDone::Request`).
    Request,
    /// A new block of producer ids, which InitProducerId requests wait for.
    ProducerIdBlock(ProducerIdsRecord),
    /// A transactional id's record (`txn::write`).
    Txn(TxnWrite),
    /// A recovery checkpoint (`crate::checkpoint`).
    Checkpoint(PendingCheckpoint),
    /// A checkpoint start-up could not use was deleted (`recovery`).
    CheckpointDropped(PartitionKey),
    /// Expired group offsets were deleted (`group::expiry`).
    OffsetExpiry(Vec<(String, TopicPartition)>),
}

/// What a completed meta.db write leaves for the top.
pub(crate) enum MetaDone {
    /// The core did all there was to do.
    Done,
    /// An API handler's own write: the handler finishes.
    Request { stored: bool },
    /// A block of producer ids: the InitProducerId requests that waited run.
    IdBlock { stored: bool },
}

/// What a completed sync leaves for the top, beyond the core's own steps.
pub(crate) struct SyncDone {
    pub ok: bool,
    /// It covered the boot sync (start-up may now serve).
    pub boot: bool,
}

impl Core {
    /// A sync completed: the partitions it covered move their durable
    /// points, or, if it failed, are cut back to them. The steps that
    /// follow are `boot_sync_done`, `removals_synced` and `after_sync`,
    /// with the top's wake-ups in between.
    pub(crate) fn sync_done(&mut self, io: IoId, result: Result<(), IoError>) -> SyncDone {
        let inflight = self.sync_in_flight.take();
        let inflight = inflight.expect("SyncDone without a sync in flight");
        assert_eq!(
            inflight.io, io,
            "SyncDone for a sync that is not the one in flight"
        );
        let ok = result.is_ok();
        match result {
            Ok(()) => {
                let moved = self
                    .topics
                    .partitions_mut()
                    .filter_map(|(key, p)| p.sync_done(inflight.scope).then_some(key))
                    .collect();
                self.write_due_checkpoints(moved, Due::Bytes);
                if inflight.scope == SyncScope::All {
                    self.all_sync_wanted = false;
                    // They were due when they asked for this sync.
                    let waiting = self
                        .topics
                        .partitions_mut()
                        .filter_map(|(key, p)| p.take_checkpoint_wait().then_some(key))
                        .collect();
                    self.write_due_checkpoints(waiting, Due::Now);
                }
            }
            Err(e) => {
                // After a failed fsync the page cache cannot be trusted
                // (fsyncgate): cut every partition back to what is known durable,
                // fail whoever waited on the rest (the top), and sync the cut
                // itself: those the sync covered, those written since, and
                // those with the index appends earlier syncs left for this one.
                tracing::error!("sync failed: {}; truncating to the durable point", e.0);
                for (_, partition) in self.topics.partitions_mut() {
                    if partition.sync_failed() {
                        partition.truncate_to_durable(&mut self.outbox);
                    }
                }
            }
        }
        let boot = self.booting.as_ref().is_some_and(|b| b.is_boot_sync(io));
        SyncDone { ok, boot }
    }

    /// The boot sync completed: start-up serves, or syncs again.
    pub(crate) fn boot_sync_done(&mut self, ok: bool) {
        recovery::sync_done(self, ok);
    }

    /// Whether sync `io` made some topic removal durable (topic creations
    /// that waited for it may go on).
    pub(crate) fn removals_synced(&mut self, io: IoId, ok: bool) -> bool {
        let removals = self.unsynced_removals.len();
        if ok {
            self.unsynced_removals
                .retain(|_, covering| *covering != Some(io));
        } else {
            // The next sync covers them.
            for covering in self.unsynced_removals.values_mut() {
                if *covering == Some(io) {
                    *covering = None;
                }
            }
        }
        self.unsynced_removals.len() < removals
    }

    /// The core's last steps after a sync: transaction completions and the
    /// cleaner go on.
    pub(crate) fn after_sync(&mut self, io: IoId, ok: bool) {
        crate::txn::complete::on_sync(self);
        self.cleaner_sync_done(io, ok);
    }

    /// Whether `io` is one of start-up's reads.
    pub(crate) fn is_boot_read(&self, io: IoId) -> bool {
        self.booting.as_ref().is_some_and(|b| b.is_boot_read(io))
    }

    /// One of start-up's reads completed.
    pub(crate) fn boot_read_done(&mut self, io: IoId, result: Result<Bytes, IoError>) {
        recovery::read_done(self, io, result)
    }

    /// A meta.db write completed.
    pub(crate) fn meta_done(&mut self, io: IoId, result: Result<(), IoError>) -> MetaDone {
        let action = self
            .pending_meta
            .remove(&io)
            .expect("MetaDone for an unknown write");
        if let Err(e) = &result {
            tracing::error!("meta.db write failed: {}", e.0);
        }
        let stored = result.is_ok();
        match action {
            MetaAction::Request => return MetaDone::Request { stored },
            MetaAction::ProducerIdBlock(record) => {
                self.producer_ids.block_done(&record, stored);
                return MetaDone::IdBlock { stored };
            }
            MetaAction::Txn(w) => crate::txn::write::done(self, w, stored),
            MetaAction::Checkpoint(p) => self.checkpoint_written(p, stored),
            MetaAction::CheckpointDropped(key) => recovery::checkpoint_dropped(self, key, stored),
            MetaAction::OffsetExpiry(expired) => self.groups.end_expiry(&expired, stored),
        }
        MetaDone::Done
    }

    /// Asks the driver for a range of a segment file; `Input::ReadDone` answers.
    pub(crate) fn emit_read(&mut self, range: FileRange) -> IoId {
        let io = self.outbox.take_io();
        self.outbox.push(Output::Disk(DiskOp::Read { io, range }));
        io
    }

    /// The sync in flight, if any.
    pub(crate) fn sync_in_flight_io(&self) -> Option<IoId> {
        self.sync_in_flight.as_ref().map(|s| s.io)
    }

    /// Emits a disk operation for a partition; it becomes durable with the
    /// next sync. A partition gone (a deleted topic's, a directory no topic
    /// owns) still wants that sync.
    pub(super) fn emit_disk(&mut self, key: PartitionKey, op: DiskOp) {
        match self.topics.get_partition_mut(&key) {
            Some(partition) => partition.emit(op, &mut self.outbox),
            None => {
                self.gone_dirty = true;
                self.outbox.disk(op);
            }
        }
    }

    /// A partition may hold index appends no sync covered.
    pub(super) fn index_lagging(&self) -> bool {
        self.topics.partitions().any(|(_, p)| p.is_index_lagging())
    }

    /// Asks for everything emitted so far to become durable. One sync is in
    /// flight at a time; appends made meanwhile ride the next one together
    /// (group commit).
    pub(crate) fn request_sync(&mut self) {
        if self.sync_in_flight.is_none() && self.sync_wanted() {
            self.start_sync();
        }
    }

    /// Something waits for a sync: disk operations no sync covered, an
    /// `All` sync asked for, or a topic's removal whose sync failed.
    pub(super) fn sync_wanted(&self) -> bool {
        self.gone_dirty
            || self.topics.partitions().any(|(_, p)| p.is_dirty())
            || self.all_sync_wanted
            || self.unsynced_removals.values().any(Option::is_none)
    }

    /// Asks for a `SyncScope::All` sync: the next one, or now if none is
    /// in flight (even with nothing dirty: the index appends a `Logs` sync
    /// left are the driver's to know).
    pub(super) fn request_all_sync(&mut self) {
        self.all_sync_wanted = true;
        self.request_sync();
    }

    /// A partition's checkpoint is due but its index entries below the
    /// high watermark are not all durable: the next sync covers them
    /// (`SyncScope::All`), and the checkpoint is written once it completes.
    pub(super) fn checkpoint_after_index_sync(&mut self, key: PartitionKey) {
        if let Some(partition) = self.topics.get_partition_mut(&key) {
            partition.wait_for_index_sync();
        }
        self.request_all_sync();
    }

    /// Acknowledged writes need their `.log` bytes durable, not their index
    /// entries (`SyncScope`): a sync covers the index files only when a
    /// checkpoint waits for it, and at start-up (the boot sync makes what
    /// recovery wrote durable before a checkpoint vouches for it).
    fn start_sync(&mut self) {
        assert!(
            self.sync_in_flight.is_none(),
            "one sync in flight at a time"
        );
        let booting = self.booting.is_some();
        let scope = if booting || self.all_sync_wanted {
            SyncScope::All
        } else {
            SyncScope::Logs
        };
        let io = self.outbox.take_io();
        for covering in self.unsynced_removals.values_mut() {
            covering.get_or_insert(io);
        }
        // What partitions gone left needs no sync once one starts.
        self.gone_dirty = false;
        for (_, partition) in self.topics.partitions_mut() {
            partition.start_sync(scope);
        }
        self.sync_in_flight = Some(SyncInFlight { io, scope });
        self.outbox.push(Output::Disk(DiskOp::Sync { io, scope }));
    }

    /// Deletes the group offsets that expired, when the check is due
    /// (`group::expiry`); a transaction's staged offsets stay.
    pub(super) fn expire_offsets(&mut self) {
        let txns = &self.txns;
        let expired = self
            .groups
            .take_expired(self.now_ms, |g, t, p| txns.has_staged_offset(g, t, p));
        if expired.is_empty() {
            return;
        }
        let ops = expired
            .iter()
            .map(|(group, (topic, partition))| MetaOp::Delete {
                key: offset_key(group, topic, *partition),
            })
            .collect();
        self.emit_meta(ops, MetaAction::OffsetExpiry(expired));
    }

    /// Writes a batch to meta.db; `action` runs when it completes.
    pub(crate) fn emit_meta(&mut self, ops: Vec<MetaOp>, action: MetaAction) -> IoId {
        let io = self.outbox.take_io();
        self.pending_meta.insert(io, action);
        self.outbox.push(Output::Meta { io, ops });
        io
    }
}
