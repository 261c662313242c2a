//! Start-up: from what the driver listed (`Input::Boot`) to serving.
//!
//! 1. meta.db is loaded (topics, producer ids, groups, transactional ids,
//!    recovery checkpoints).
//! 2. Each partition's log is recovered (`log::recovery`): below its recovery
//!    point from the index files, above it by reading the batches, a few
//!    reads in flight at a time. The batches read continue the producer and
//!    transaction state of the checkpoint; aborts found are booked in the
//!    `.txnindex` again.
//! 3. The boot sync makes everything adopted and repaired durable (a crashed
//!    process can leave unsynced bytes in the page cache, and a power cut
//!    after the restart must not take back what was served); then the
//!    coordinator carries out the decisions it had stored.
//! 4. Requests that arrived meanwhile wait (`parked`) and run in order once
//!    the boot sync is done; then every recovered partition gets a new
//!    checkpoint, so the next start reads nothing twice.
//!
//! A partition whose checkpoint cannot be used (an index file it vouches for
//! is missing or damaged) has the checkpoint deleted from meta.db first, and
//! only then are its index files rewritten and its segments read.
//!
//! A recovery read that keeps failing takes its partition offline (answered
//! KAFKA_STORAGE_ERROR until a restart), as Kafka takes a failed log dir offline.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use super::meta_entry::{self, MetaEntry};
use super::{Core, MetaAction};
use crate::checkpoint::{self, CheckpointRecord, Due};
use crate::io::{BootState, ConnId, DiskOp, FileRange, IoError, IoId, PartitionDir};
use crate::limits;
use crate::log::recovery::LogRecovery;
use crate::partition::{PartitionTxns, Recovering};
use crate::produce_checks::ProduceChecks;
use crate::producer::ProducerStates;
use crate::topics::PartitionKey;

/// Times a failing recovery read is tried before its partition goes offline.
const RECOVERY_READ_TRIES: u32 = 3;

/// The start-up in progress; `None` in the broker once it serves.
#[derive(Default)]
pub(crate) struct Boot {
    /// How many partitions are being recovered (each holds its own state:
    /// `Partition::recovering`).
    recovering: usize,
    /// Partitions whose next read is not issued yet.
    queue: VecDeque<PartitionKey>,
    reads: BTreeMap<IoId, (PartitionKey, FileRange)>,
    /// Segments adopted: adopted again if the boot sync fails.
    adopted: Vec<(PartitionKey, PartitionDir, i64)>,
    /// Partitions recovered, checkpointed once serving.
    recovered: Vec<PartitionKey>,
    sync_io: Option<IoId>,
    /// Whether the coordinator's stored decisions were taken up.
    resumed: bool,
    /// Frames that arrived before the broker served, in order.
    parked: VecDeque<super::EarlyFrame>,
    /// The clean-shutdown file's removal in flight, and what the driver
    /// listed, which recovery starts from once it is durable
    /// (`clean_shutdown`).
    removing_clean_shutdown: Option<(IoId, BootState)>,
}

impl Boot {
    pub fn park(&mut self, conn: ConnId, frame: Bytes, checks: Option<ProduceChecks>) {
        self.parked.push_back((conn, frame, checks));
    }

    pub fn forget_conn(&mut self, conn: ConnId) {
        self.parked.retain(|(c, _, _)| *c != conn);
    }

    pub fn is_boot_read(&self, io: IoId) -> bool {
        self.reads.contains_key(&io)
    }

    pub fn is_boot_sync(&self, io: IoId) -> bool {
        self.sync_io == Some(io)
    }

    /// A start-up that waits for the clean-shutdown file's removal `io`.
    pub fn removing_clean_shutdown(io: IoId, state: BootState) -> Self {
        let mut boot = Self::default();
        boot.await_clean_shutdown_removal(io, state);
        boot
    }

    pub fn await_clean_shutdown_removal(&mut self, io: IoId, state: BootState) {
        assert!(
            self.removing_clean_shutdown.is_none(),
            "one removal in flight"
        );
        self.removing_clean_shutdown = Some((io, state));
    }

    /// The removal `io` completed: what the driver listed.
    pub fn take_clean_shutdown_removal(&mut self, io: IoId) -> BootState {
        let (waited, state) = self
            .removing_clean_shutdown
            .take()
            .expect("a clean-shutdown removal in flight");
        assert_eq!(waited, io, "the completion of the removal in flight");
        state
    }
}

/// Step 1 and the start of step 2. With `state.clean_shutdown`, the
/// clean-shutdown file's removal is durable by now (`clean_shutdown`), and
/// the segment files are trusted as listed: nothing is adopted.
pub(crate) fn start(b: &mut Core, state: BootState) {
    let trusted = state.clean_shutdown;
    let mut checkpoints: BTreeMap<(String, i32), CheckpointRecord> = BTreeMap::new();
    let mut log_starts: BTreeMap<(String, i32), i64> = BTreeMap::new();
    // meta.db is read once, here, and each store is handed its own records
    // in meta.db's order (`meta_entry` names them all; the stores name none
    // of the others).
    let mut topics = Vec::new();
    let mut offsets = Vec::new();
    let mut txns = Vec::new();
    for (key, value) in &state.meta {
        match meta_entry::decode_entry(key, value) {
            Ok(MetaEntry::Topic { name, record }) => topics.push((name, record)),
            Ok(MetaEntry::GroupOffset {
                group,
                topic,
                partition,
                record,
            }) => offsets.push((group, topic, partition, record)),
            Ok(MetaEntry::Txn { id, record }) => txns.push((id, record)),
            Ok(MetaEntry::ProducerIds(record)) => b.producer_ids.boot(&record),
            Ok(MetaEntry::Checkpoint {
                topic_id,
                partition,
                record,
            }) => {
                checkpoints.insert((topic_id, partition), record);
            }
            Ok(MetaEntry::LogStart {
                topic_id,
                partition,
                record,
            }) => {
                log_starts.insert((topic_id, partition), record.offset);
            }
            Ok(MetaEntry::Scram {
                user,
                mechanism,
                credential,
            }) => b.security.set_credential(user, mechanism, credential),
            Ok(MetaEntry::Acl(binding)) => {
                b.security.acls.insert(binding);
            }
            Ok(MetaEntry::TxnPartitionFlag { .. }) => {}
            Err(e) => tracing::error!("skipping unreadable meta.db entry: {e}"),
        }
    }
    b.groups.boot(b.now_ms, offsets);
    b.topics.load(&b.config, topics);
    crate::txn::boot::load(b, txns);
    // Frames parked while the clean-shutdown file was removed stay first.
    let mut boot = b.booting.take().unwrap_or_default();
    assert!(
        boot.removing_clean_shutdown.is_none(),
        "recovery starts once the clean-shutdown file is durably gone"
    );
    for found in state.partitions {
        let dir = found.dir.clone();
        let Some((key, segment_bytes)) = b.topics.recovering(&b.config, &dir) else {
            // A directory without a topic (or past its partitions): left by a
            // deletion that a crash interrupted after meta.db forgot the topic.
            let key = PartitionKey {
                topic: dir.topic.clone(),
                id: uuid::Uuid::nil(),
                partition: dir.partition,
            };
            b.emit_disk(key, DiskOp::DeletePartition { dir });
            continue;
        };
        let id = key.id.hyphenated().to_string();
        let stored_log_start = log_starts.remove(&(id.clone(), key.partition));
        let record = checkpoints.remove(&(id, key.partition));
        let checkpoint_existed = record.is_some();
        // A cleaning a crash interrupted is finished or discarded first.
        let (segments, staged_ops) =
            crate::log::clean::finish_swaps(&dir, found.segments, found.swaps, found.abandoned);
        for op in staged_ops {
            b.emit_disk(key.clone(), op);
        }
        let mut recovery = LogRecovery::start(
            dir,
            segment_bytes,
            segments,
            record.as_ref().map(|r| &r.log),
            trusted,
        );
        let used = recovery.from_checkpoint();
        let checkpoint_offset = record.as_ref().filter(|_| used).map(|r| r.log.offset);
        let cleaner_first_dirty_offset = record
            .as_ref()
            .filter(|_| used)
            .map_or(0, |r| r.cleaner_first_dirty_offset.min(r.log.offset));
        let (producers, ongoing) = match record.filter(|_| used) {
            Some(r) => (r.producers, r.ongoing_txns),
            None => (ProducerStates::default(), Vec::new()),
        };
        let txns = PartitionTxns::from_boot(&ongoing, recovery.take_aborted());
        let unused_checkpoint = checkpoint_existed && !used;
        let ops = recovery.take_ops();
        let held_ops = if unused_checkpoint {
            drop_checkpoint(b, &key);
            Some(ops)
        } else {
            emit_repairs(b, &mut boot, &key, ops);
            boot.queue.push_back(key.clone());
            None
        };
        let partition = b.topics.get_partition_mut(&key);
        partition
            .expect("recovering() found it")
            .start_recovering(Recovering {
                recovery,
                held_ops,
                producers,
                txns,
                checkpoint_offset,
                cleaner_first_dirty_offset,
                stored_log_start,
                failures: 0,
            });
        boot.recovering += 1;
    }
    b.booting = Some(boot);
    pump(b);
}

/// Emits a partition's repairs, noting the segments it adopts.
fn emit_repairs(b: &mut Core, boot: &mut Boot, key: &PartitionKey, ops: Vec<DiskOp>) {
    for op in ops {
        if let DiskOp::Adopt { dir, segment_base } = &op {
            boot.adopted.push((key.clone(), dir.clone(), *segment_base));
        }
        b.emit_disk(key.clone(), op);
    }
}

fn drop_checkpoint(b: &mut Core, key: &PartitionKey) {
    let ops = vec![crate::io::MetaOp::Delete {
        key: checkpoint::key(&key.id, key.partition),
    }];
    b.emit_meta(ops, MetaAction::CheckpointDropped(key.clone()));
}

/// The checkpoint a partition could not use is gone (or the delete failed:
/// then it is tried again): its repairs go out and its scan starts.
pub(crate) fn checkpoint_dropped(b: &mut Core, key: PartitionKey, stored: bool) {
    if !stored {
        return drop_checkpoint(b, &key);
    }
    let mut boot = b.booting.take().expect("booting");
    let held = b
        .topics
        .get_partition_mut(&key)
        .and_then(|p| p.recovering_mut())
        .and_then(|r| r.held_ops.take())
        .expect("a partition waits for its checkpoint to go");
    emit_repairs(b, &mut boot, &key, held);
    boot.queue.push_back(key);
    b.booting = Some(boot);
    pump(b);
}

/// Issues recovery reads up to the bound, and finishes partitions whose scan
/// is over.
fn pump(b: &mut Core) {
    loop {
        let boot = b.booting.as_mut().expect("booting");
        if boot.reads.len() >= limits::RECOVERY_READS_IN_FLIGHT_MAX {
            return;
        }
        let Some(key) = boot.queue.pop_front() else {
            break;
        };
        let part = b.topics.get_partition(&key).and_then(|p| p.recovering());
        let part = part.expect("queued partitions are booting");
        match part.recovery.next_read() {
            Some(range) => {
                let io = b.emit_read(range.clone());
                let boot = b.booting.as_mut().expect("booting");
                boot.reads.insert(io, (key, range));
            }
            None => finish_partition(b, key),
        }
    }
    let boot = b.booting.as_ref().expect("booting");
    if boot.recovering == 0 && boot.reads.is_empty() && !boot.resumed {
        logs_recovered(b);
    }
}

/// A recovery read completed.
pub(crate) fn read_done(b: &mut Core, io: IoId, result: Result<Bytes, IoError>) {
    let boot = b.booting.as_mut().expect("booting");
    let (key, range) = boot.reads.remove(&io).expect("a boot read");
    let partition = b.topics.get_partition_mut(&key);
    let part = partition
        .and_then(|p| p.recovering_mut())
        .expect("reading partitions are booting");
    match result {
        Ok(bytes) => {
            let scanned = part.recovery.on_read(&range, &bytes);
            let mut ops = Vec::new();
            for batch in &scanned {
                let h = &batch.header;
                part.producers.replay(h, batch.marker);
                if !h.is_transactional() {
                    continue;
                }
                match batch.marker.map(|m| m.commit) {
                    Some(commit) => {
                        if let Some(aborted) =
                            part.txns.on_marker(h.producer_id, commit, h.base_offset)
                        {
                            ops.push(part.recovery.log_mut().append_aborted(&aborted));
                        }
                    }
                    // An empty data batch is one the cleaner kept for its
                    // producer's sequence (Kafka keeps the same): what it
                    // held is gone, and so may be its transaction's marker.
                    None if !h.is_control() && h.records_count > 0 => {
                        part.txns.on_data(h.producer_id, h.base_offset)
                    }
                    None => {}
                }
            }
            // Index entries of the batches first, then the aborts booked.
            let mut all = part.recovery.take_ops();
            all.extend(ops);
            boot.queue.push_front(key.clone());
            for op in all {
                b.emit_disk(key.clone(), op);
            }
        }
        Err(e) => {
            part.failures += 1;
            tracing::error!(dir = %range.dir.dir_name(), "recovery read failed: {}", e.0);
            if part.failures < RECOVERY_READ_TRIES {
                boot.queue.push_front(key);
            } else {
                tracing::error!(dir = %range.dir.dir_name(), "partition offline until restart");
                boot.recovering -= 1;
                let partition = b.topics.get_partition_mut(&key);
                let partition = partition.expect("a recovering partition exists");
                partition.take_recovering();
                partition.set_offline();
            }
        }
    }
    pump(b);
}

/// Installs a recovered partition's log and state.
fn finish_partition(b: &mut Core, key: PartitionKey) {
    let boot = b.booting.as_mut().expect("booting");
    let part = b
        .topics
        .get_partition_mut(&key)
        .and_then(|p| p.take_recovering());
    let part = part.expect("finishing a booting partition");
    boot.recovering -= 1;
    boot.recovered.push(key.clone());
    let mut log = part.recovery.finish();
    if let Some(offset) = part.stored_log_start {
        log.restore_log_start(offset);
    }
    let hw = log.high_watermark();
    let log_start = log.log_start_offset();
    let mut txns = part.txns;
    txns.mark_durable(hw);
    txns.forget_below(log_start);
    let partition = b.topics.install(&key, log);
    partition.install_state(part.producers, txns);
    *partition.checkpoint_mut() = crate::checkpoint::CheckpointState::booted(
        part.checkpoint_offset,
        log_start,
        part.cleaner_first_dirty_offset,
    );
    b.cleaner_booted(key, part.cleaner_first_dirty_offset);
}

/// Step 3: every log is recovered.
fn logs_recovered(b: &mut Core) {
    // Nothing starts a sync while the logs are recovered (no timers, no
    // requests, Shutdown waits), so this one covers all recovery wrote.
    assert!(
        b.sync_in_flight_io().is_none(),
        "no sync is in flight before the boot sync"
    );
    b.request_sync();
    let io = b.sync_in_flight_io();
    let boot = b.booting.as_mut().expect("booting");
    boot.resumed = true;
    boot.sync_io = io;
    if io.is_none() {
        serve(b);
    }
}

/// The boot sync completed.
pub(crate) fn sync_done(b: &mut Core, ok: bool) {
    if ok {
        return serve(b);
    }
    // Nothing may be served as durable that is not: adopt again, repair the
    // index files recovery wrote (the failure may have lost some of their
    // appends), sync again.
    let boot = b.booting.as_mut().expect("booting");
    let adopted = boot.adopted.clone();
    boot.sync_io = None;
    for (key, dir, segment_base) in adopted {
        b.emit_disk(key.clone(), DiskOp::Adopt { dir, segment_base });
        b.repair_indexes(&key, segment_base);
    }
    b.request_sync();
    let io = b.sync_in_flight_io();
    let boot = b.booting.as_mut().expect("booting");
    boot.sync_io = io;
    if io.is_none() {
        serve(b);
    }
}

/// Step 4.
fn serve(b: &mut Core) {
    let Some(boot) = b.booting.take() else {
        return;
    };
    assert!(boot.resumed, "the logs are recovered before serving");
    // The decisions stored before the stop are carried out now, once the
    // boot sync made what recovery found durable: a marker found in the log
    // is not written again (`txn::complete::resume`), and one that only sat
    // in the page cache of a crashed process could still have been lost
    // before. Their markers ride the next sync; requests wait behind them.
    crate::txn::boot::resume(b);
    let recovered: BTreeSet<PartitionKey> = boot.recovered.into_iter().collect();
    b.write_due_checkpoints(recovered.into_iter().collect(), Due::Now);
    // The top runs them, in order, as the next thing it does.
    b.early_frames = boot.parked;
}
