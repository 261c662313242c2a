//! A simulated disk and meta.db for running the real server under madsim
//! (`RUSTFLAGS="--cfg madsim"`), where the disk worker thread and sled's
//! threads cannot run and madsim's own file system has no notion of a sync.
//!
//! The store (`SimStore`) lives outside the simulated broker node: the test
//! holds it in an `Arc` and hands a `SimStorage` over it to each incarnation
//! of the node, so the "disk" survives a kill and a restart.
//!
//! The model:
//! - Segment files have two layers. `current` is what a reader of the file
//!   would see now (every append, cut and removal carried out so far);
//!   `durable` is what survives a power cut. A `DiskOp::Sync` waits a
//!   simulated latency (madsim's clock), then makes everything carried out
//!   before it durable, then answers `SyncDone`. As in production, a sync
//!   covers the ops already queued behind it too (group commit).
//! - A meta batch waits a simulated latency, then is applied atomically and
//!   is durable at once, then answered `MetaDone`. A batch not yet answered
//!   when the node dies is lost (sled's unflushed buffer dies with the process).
//! - `SimStore::crash` is called by the test when it kills the node. It ends
//!   the old incarnation's workers (their ops are ignored from then on) and
//!   decides the fate of unsynced segment bytes: `Crash::PowerCut` loses them
//!   (every file goes back to its durable layer, including bytes an earlier
//!   incarnation left unsynced), `Crash::ProcessKill` keeps them in the page
//!   cache: the next incarnation reads them, but they are not durable until
//!   it syncs that partition, and a later power cut loses them. The test
//!   picks one per kill from its seed. Torn writes are not modelled here (the
//!   in-process simulator, `sim/`, covers them), and durability is tracked per
//!   partition where the kernel tracks it per file.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use doze_core::io::{RecoveredPartition, RecoveredSegment};
use doze_core::{BootState, DiskOp, Input, IoError, IoId, MetaOp, PartitionDir};
use madsim::rand::Rng;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use crate::metadb::MetaWrite;
use crate::storage::{Finished, Storage, StorageQueue};

/// Ops carried out in one group-commit round before its sync (as in disk.rs).
const ROUND_OPS_MAX: usize = 4096;

/// How a killed node's unsynced segment bytes fare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crash {
    /// The machine lost power: only what was synced survives.
    PowerCut,
    /// Only the process died: the OS still writes back what it was given.
    ProcessKill,
}

/// Simulated latencies, drawn uniformly from these ranges (microseconds).
#[derive(Clone, Debug)]
pub struct Latency {
    pub sync_us: (u64, u64),
    pub meta_us: (u64, u64),
}

impl Default for Latency {
    fn default() -> Self {
        // An SSD's fdatasync, and a sled flush.
        Self {
            sync_us: (200, 5_000),
            meta_us: (200, 3_000),
        }
    }
}

/// Partition dirs, each with its segments' bytes.
type Files = BTreeMap<PartitionDir, BTreeMap<i64, Vec<u8>>>;

#[derive(Default)]
struct Inner {
    /// Bumped by every crash; workers of an older incarnation stop.
    generation: u64,
    current: Files,
    durable: Files,
    /// Partitions this incarnation changed since its last sync: what its
    /// next sync flushes (as fdatasync flushes the files written to, old
    /// unsynced pages of those files included).
    dirty: BTreeSet<PartitionDir>,
    meta: BTreeMap<Vec<u8>, Vec<u8>>,
    syncs: u64,
    crashes: u64,
    lost_bytes: u64,
}

/// The simulated disk and meta.db of one broker, shared across restarts.
#[derive(Default)]
pub struct SimStore {
    inner: Mutex<Inner>,
    latency: Latency,
}

impl SimStore {
    pub fn new(latency: Latency) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::default(),
            latency,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .expect("the sim store lock is never poisoned")
    }

    /// What a starting broker finds: every meta pair, and every partition dir
    /// with its segments, as the production start-up (`boot.rs`) reads them.
    /// Like `boot.rs`, it first makes everything it found durable (the
    /// `BootState` contract): bytes a killed process left in the page cache
    /// must not be served and then lost to a later power cut.
    pub fn boot_state(&self) -> BootState {
        let mut inner = self.lock();
        inner.durable = inner.current.clone();
        let meta = inner
            .meta
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let partitions = inner
            .current
            .iter()
            .map(|(dir, segments)| RecoveredPartition {
                dir: dir.clone(),
                segments: segments
                    .iter()
                    .map(|(&base_offset, bytes)| RecoveredSegment {
                        base_offset,
                        bytes: Bytes::copy_from_slice(bytes),
                    })
                    .collect(),
            })
            .collect();
        BootState { meta, partitions }
    }

    /// The node died (the test has just killed it): its workers stop, and
    /// unsynced bytes are lost or kept as `how` says.
    pub fn crash(&self, how: Crash) {
        let mut inner = self.lock();
        inner.generation += 1;
        inner.crashes += 1;
        inner.dirty.clear();
        if how == Crash::ProcessKill {
            // The page cache keeps the bytes: the next incarnation reads
            // them, but they stay volatile until a sync of that partition
            // (or are lost at a later power cut).
            return;
        }
        let dirs: BTreeSet<PartitionDir> = inner
            .current
            .keys()
            .chain(inner.durable.keys())
            .cloned()
            .collect();
        for dir in dirs {
            if inner.current.get(&dir) == inner.durable.get(&dir) {
                continue;
            }
            let before = size(inner.current.get(&dir));
            let durable = inner.durable.get(&dir).cloned();
            inner.lost_bytes += before.saturating_sub(size(durable.as_ref()));
            set(&mut inner.current, &dir, durable);
        }
    }

    /// One line for the test's log.
    pub fn stats(&self) -> String {
        let inner = self.lock();
        let bytes: usize = inner
            .current
            .values()
            .flat_map(|segments| segments.values())
            .map(Vec::len)
            .sum();
        format!(
            "{} partitions, {bytes} segment bytes, {} meta keys, {} syncs, {} crashes, {} unsynced bytes lost",
            inner.current.len(),
            inner.meta.len(),
            inner.syncs,
            inner.crashes,
            inner.lost_bytes
        )
    }

    fn draw_us(range: (u64, u64)) -> Duration {
        let (low, high) = range;
        assert!(low <= high, "latency range {low}..={high}");
        Duration::from_micros(madsim::rand::thread_rng().gen_range(low..=high))
    }

    /// Carries out one non-sync op on the current layer.
    fn execute(&self, generation: u64, op: DiskOp) -> Result<(), IoError> {
        let mut inner = self.lock();
        if inner.generation != generation {
            return Ok(()); // a dead incarnation's op; its worker stops next
        }
        match op {
            DiskOp::Sync { .. } => unreachable!("syncs are handled by the worker"),
            DiskOp::Append {
                dir,
                segment_base,
                bytes,
            } => {
                let file = inner
                    .current
                    .entry(dir.clone())
                    .or_default()
                    .entry(segment_base)
                    .or_default();
                file.extend_from_slice(&bytes);
                inner.dirty.insert(dir);
                Ok(())
            }
            DiskOp::Truncate {
                dir,
                segment_base,
                len,
            } => {
                let Some(file) = inner
                    .current
                    .get_mut(&dir)
                    .and_then(|segments| segments.get_mut(&segment_base))
                else {
                    return Err(IoError(format!(
                        "cannot truncate {}/{segment_base}: no such file",
                        dir.dir_name()
                    )));
                };
                // set_len: a longer length pads with zeroes, as ftruncate does.
                file.resize(usize::try_from(len).expect("a segment fits in memory"), 0);
                inner.dirty.insert(dir);
                Ok(())
            }
            DiskOp::DeleteSegment { dir, segment_base } => {
                if let Some(segments) = inner.current.get_mut(&dir) {
                    if segments.remove(&segment_base).is_some() {
                        inner.dirty.insert(dir);
                    }
                }
                Ok(())
            }
            DiskOp::DeletePartition { dir } => {
                if inner.current.remove(&dir).is_some() {
                    inner.dirty.insert(dir);
                }
                Ok(())
            }
        }
    }

    /// Makes the current layer durable. False if the incarnation is dead.
    fn make_durable(&self, generation: u64) -> bool {
        let mut inner = self.lock();
        if inner.generation != generation {
            return false;
        }
        let dirty = std::mem::take(&mut inner.dirty);
        for dir in dirty {
            let current = inner.current.get(&dir).cloned();
            set(&mut inner.durable, &dir, current);
        }
        inner.syncs += 1;
        true
    }

    /// Applies one meta batch atomically. False if the incarnation is dead.
    fn apply_meta(&self, generation: u64, ops: Vec<MetaOp>) -> bool {
        let mut inner = self.lock();
        if inner.generation != generation {
            return false;
        }
        for op in ops {
            match op {
                MetaOp::Put { key, value } => {
                    inner.meta.insert(key, value);
                }
                MetaOp::Delete { key } => {
                    inner.meta.remove(&key);
                }
            }
        }
        true
    }
}

fn size(segments: Option<&BTreeMap<i64, Vec<u8>>>) -> u64 {
    segments.map_or(0, |s| s.values().map(|f| f.len() as u64).sum())
}

fn set(files: &mut Files, dir: &PartitionDir, segments: Option<BTreeMap<i64, Vec<u8>>>) {
    match segments {
        Some(segments) => {
            files.insert(dir.clone(), segments);
        }
        None => {
            files.remove(dir);
        }
    }
}

/// One incarnation's storage over a `SimStore`, for `server::Setup`.
pub struct SimStorage(pub Arc<SimStore>);

/// The broker task's end of the simulated workers.
pub struct SimQueue {
    disk: UnboundedSender<DiskOp>,
    meta: UnboundedSender<MetaWrite>,
}

impl StorageQueue for SimQueue {
    fn submit_disk(&self, op: DiskOp) -> Result<(), IoError> {
        self.disk
            .send(op)
            .map_err(|_| IoError("the simulated disk worker has stopped".into()))
    }

    fn submit_meta(&self, write: MetaWrite) -> Result<(), IoError> {
        self.meta
            .send(write)
            .map_err(|_| IoError("the simulated meta worker has stopped".into()))
    }
}

impl Storage for SimStorage {
    type Queue = SimQueue;

    fn start(self, completions: UnboundedSender<Input>) -> anyhow::Result<(SimQueue, Finished)> {
        let store = self.0;
        let generation = store.lock().generation;
        let (disk, disk_queue) = mpsc::unbounded_channel();
        let (meta, meta_queue) = mpsc::unbounded_channel();
        let disk_task = tokio::spawn(disk_worker(
            Arc::clone(&store),
            generation,
            disk_queue,
            completions.clone(),
        ));
        let meta_task = tokio::spawn(meta_worker(store, generation, meta_queue, completions));
        let finished: Finished = Box::pin(async move {
            disk_task
                .await
                .map_err(|e| anyhow::anyhow!("the simulated disk worker failed: {e}"))?;
            meta_task
                .await
                .map_err(|e| anyhow::anyhow!("the simulated meta worker failed: {e}"))?;
            Ok(())
        });
        Ok((SimQueue { disk, meta }, finished))
    }
}

async fn disk_worker(
    store: Arc<SimStore>,
    generation: u64,
    mut queue: UnboundedReceiver<DiskOp>,
    completions: UnboundedSender<Input>,
) {
    // The first failure since the last sync, reported by the next one.
    let mut error: Option<IoError> = None;
    while let Some(op) = queue.recv().await {
        let mut syncs: Vec<(IoId, Option<IoError>)> = Vec::new();
        let mut step = |op: DiskOp, syncs: &mut Vec<_>| match op {
            DiskOp::Sync { io } => syncs.push((io, error.take())),
            op => {
                if let Err(e) = store.execute(generation, op) {
                    error.get_or_insert(e);
                }
            }
        };
        step(op, &mut syncs);
        if syncs.is_empty() {
            continue;
        }
        // Group commit: what is already queued rides along with this sync.
        for _ in 1..ROUND_OPS_MAX {
            match queue.try_recv() {
                Ok(op) => step(op, &mut syncs),
                Err(_) => break,
            }
        }
        tokio::time::sleep(SimStore::draw_us(store.latency.sync_us)).await;
        if !store.make_durable(generation) {
            return;
        }
        for (io, error) in syncs {
            let result = error.map_or(Ok(()), Err);
            if completions.send(Input::SyncDone { io, result }).is_err() {
                return;
            }
        }
    }
}

async fn meta_worker(
    store: Arc<SimStore>,
    generation: u64,
    mut queue: UnboundedReceiver<MetaWrite>,
    completions: UnboundedSender<Input>,
) {
    while let Some(write) = queue.recv().await {
        tokio::time::sleep(SimStore::draw_us(store.latency.meta_us)).await;
        if !store.apply_meta(generation, write.ops) {
            return;
        }
        let done = Input::MetaDone {
            io: write.io,
            result: Ok(()),
        };
        if completions.send(done).is_err() {
            return;
        }
    }
}
