//! A simulated disk and meta.db for running the real server under madsim
//! (`RUSTFLAGS="--cfg madsim"`), where the disk worker thread and sled's
//! threads cannot run and madsim's own file system has no notion of a sync.
//!
//! The store (`SimStore`) lives outside the simulated broker node: the test
//! holds it in an `Arc` and hands a `SimStorage` over it to each incarnation
//! of the node, so the "disk" survives a kill and a restart.
//!
//! The model:
//! - Partition dirs hold segment files (`.log` and its three indexes), each
//!   with two layers. `current` is what a reader of the file would see now
//!   (every append, cut and removal carried out so far); `durable` is what
//!   survives a power cut. As in production (`disk.rs`), an op makes its
//!   file dirty, and creating or removing a file or a dir makes the dir
//!   dirty; `DiskOp::Adopt` makes a segment's files and dir dirty. A
//!   `DiskOp::Sync` waits a simulated latency (madsim's clock), then makes
//!   every dirty file's current bytes durable and every dirty dir's entries
//!   (which files exist), then answers `SyncDone`. As in production, a sync
//!   covers the ops already queued behind it too (group commit).
//! - A `DiskOp::Read` is carried out in order with the other ops (it sees
//!   them all) and answered after a simulated latency, without holding up
//!   the ops behind it. The file parts of responses (`SimStore::reader`) are
//!   read after a latency too, from whatever the files hold by then.
//! - A meta batch waits a simulated latency, then is applied atomically and
//!   is durable at once, then answered `MetaDone`. A batch not yet answered
//!   when the node dies is lost (sled's unflushed buffer dies with the process).
//! - `SimStore::crash` is called by the test when it kills the node. It ends
//!   the old incarnation's workers (their ops are ignored from then on) and
//!   decides the fate of what is not durable: `Crash::PowerCut` loses it
//!   (every file and dir goes back to its durable layer, including what an
//!   earlier incarnation left unsynced), `Crash::ProcessKill` keeps it in the
//!   page cache: the next incarnation reads it, but it is not durable until
//!   that incarnation syncs the file (it must adopt what it keeps), and a
//!   later power cut loses it. The test picks one per kill from its seed.
//!   Torn writes are not modelled here (the in-process simulator, `sim/`,
//!   covers them).
//! - A clean stop (the queue closed, as at a SIGTERM) makes everything the
//!   incarnation wrote durable, as the production worker's final sync does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use doze_core::io::{RecoveredPartition, RecoveredSegment};
use doze_core::{
    BootState, DiskOp, FileRange, FramePart, Input, IoError, IoId, MetaOp, PartitionDir,
    SegmentFile,
};
use madsim::rand::Rng;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use crate::metadb::MetaWrite;
use crate::storage::{
    assemble_frame, Finished, FrameFuture, FrameReader, Started, Storage, StorageQueue,
};

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
    /// A `DiskOp::Read`, and the file parts of one response frame.
    pub read_us: (u64, u64),
}

impl Default for Latency {
    fn default() -> Self {
        // An SSD's fdatasync, a sled flush, a read mostly from the page cache.
        Self {
            sync_us: (200, 5_000),
            meta_us: (200, 3_000),
            read_us: (5, 500),
        }
    }
}

/// One file of one segment.
type FileKey = (PartitionDir, i64, SegmentFile);

/// Partition dirs, each with its files by (segment base, kind).
#[derive(Clone, Default, PartialEq)]
struct Layer {
    dirs: BTreeMap<PartitionDir, BTreeMap<(i64, SegmentFile), Vec<u8>>>,
}

impl Layer {
    fn file(&self, (dir, base, kind): &FileKey) -> Option<&Vec<u8>> {
        self.dirs.get(dir)?.get(&(*base, *kind))
    }

    /// The file, created (with its dir) when absent; true if it was.
    fn file_or_create(&mut self, (dir, base, kind): &FileKey) -> (&mut Vec<u8>, bool) {
        let files = self.dirs.entry(dir.clone()).or_default();
        let created = !files.contains_key(&(*base, *kind));
        (files.entry((*base, *kind)).or_default(), created)
    }

    fn bytes(&self) -> u64 {
        self.dirs
            .values()
            .flat_map(BTreeMap::values)
            .map(|f| f.len() as u64)
            .sum()
    }

    /// Exactly the bytes of `range`, as a read of the file would return them.
    fn read(&self, range: &FileRange) -> Result<&[u8], IoError> {
        let key = (range.dir.clone(), range.segment_base, range.file);
        let name = || {
            format!(
                "{}/{}",
                range.dir.dir_name(),
                range.file.file_name(range.segment_base)
            )
        };
        let file = self
            .file(&key)
            .ok_or_else(|| IoError(format!("cannot read {}: no such file", name())))?;
        let start = usize::try_from(range.position).unwrap_or(usize::MAX);
        let end = start.saturating_add(usize::try_from(range.len).unwrap_or(usize::MAX));
        file.get(start..end).ok_or_else(|| {
            IoError(format!(
                "cannot read {} bytes at {} of {}: it has {}",
                range.len,
                range.position,
                name(),
                file.len()
            ))
        })
    }
}

#[derive(Default)]
struct Inner {
    /// Bumped by every crash; workers of an older incarnation stop.
    generation: u64,
    current: Layer,
    durable: Layer,
    /// Files this incarnation wrote, cut or adopted since its last sync:
    /// what its next sync flushes (as fdatasync flushes the files written
    /// to, old unsynced pages of those files included).
    dirty_files: BTreeSet<FileKey>,
    /// Dirs whose entries changed (or were adopted) since the last sync.
    dirty_dirs: BTreeSet<PartitionDir>,
    meta: BTreeMap<Vec<u8>, Vec<u8>>,
    syncs: u64,
    crashes: u64,
    clean_stops: u64,
    lost_bytes: u64,
    /// Bytes of `.log` files read through `DiskOp::Read` (start-up scans
    /// and searches), and of response file parts.
    log_bytes_read: u64,
    response_bytes_read: u64,
    /// Syncs completed by this incarnation: none yet means it is still
    /// booting (requests wait for the boot sync).
    incarnation_syncs: u64,
    /// This incarnation follows a clean stop.
    clean_start: bool,
    /// `.log` bytes read by start-ups after a clean stop: a clean stop
    /// checkpoints every partition, so these should read indexes only.
    clean_start_log_bytes_read: u64,
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

    /// What a starting broker finds, as the production start-up (`boot.rs`)
    /// lists it: every meta pair, and every partition dir with its segments
    /// (the `.log`'s length, the index files whole). Nothing is made durable
    /// here: that is the core's job (`DiskOp::Adopt`).
    pub fn boot_state(&self) -> BootState {
        let inner = self.lock();
        let meta = inner
            .meta
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let partitions = inner
            .current
            .dirs
            .iter()
            .map(|(dir, files)| {
                let mut segments: BTreeMap<i64, RecoveredSegment> = BTreeMap::new();
                for (&(base_offset, kind), bytes) in files {
                    let segment = segments
                        .entry(base_offset)
                        .or_insert_with(|| RecoveredSegment {
                            base_offset,
                            ..RecoveredSegment::default()
                        });
                    let whole = Some(Bytes::copy_from_slice(bytes));
                    match kind {
                        SegmentFile::Log => segment.log_bytes = Some(bytes.len() as u64),
                        SegmentFile::OffsetIndex => segment.offset_index = whole,
                        SegmentFile::TimeIndex => segment.time_index = whole,
                        SegmentFile::TxnIndex => segment.txn_index = whole,
                    }
                }
                RecoveredPartition {
                    dir: dir.clone(),
                    segments: segments.into_values().collect(),
                }
            })
            .collect();
        BootState { meta, partitions }
    }

    /// The node died (the test has just killed it): its workers stop, and
    /// what is not durable is lost or kept as `how` says.
    pub fn crash(&self, how: Crash) {
        let mut inner = self.lock();
        inner.generation += 1;
        inner.crashes += 1;
        inner.incarnation_syncs = 0;
        inner.clean_start = false;
        inner.dirty_files.clear();
        inner.dirty_dirs.clear();
        if how == Crash::ProcessKill || inner.current == inner.durable {
            // The page cache keeps the bytes: the next incarnation reads
            // them, but they stay volatile until it syncs them.
            return;
        }
        let lost = inner.current.bytes().saturating_sub(inner.durable.bytes());
        inner.lost_bytes += lost;
        inner.current = inner.durable.clone();
    }

    /// The node stopped cleanly (`server::serve` returned after its
    /// shutdown) and the test is about to restart it. Everything it held
    /// must be durable by now: the core made it so before `Output::Stopped`
    /// (adopting what earlier incarnations left unsynced), and the workers
    /// synced what was queued. Returns what is not, if anything.
    pub fn stopped_cleanly(&self) -> Result<(), String> {
        let mut inner = self.lock();
        inner.generation += 1;
        inner.clean_stops += 1;
        inner.incarnation_syncs = 0;
        inner.clean_start = true;
        if inner.current == inner.durable {
            return Ok(());
        }
        let durable = &inner.durable;
        let volatile: Vec<String> = inner
            .current
            .dirs
            .iter()
            .flat_map(|(dir, files)| files.iter().map(move |(name, bytes)| (dir, name, bytes)))
            .filter(|(dir, (base, kind), bytes)| {
                durable.file(&((*dir).clone(), *base, *kind)) != Some(*bytes)
            })
            .map(|(dir, (base, kind), _)| format!("{}/{}", dir.dir_name(), kind.file_name(*base)))
            .collect();
        Err(format!("not durable after a clean stop: {volatile:?}"))
    }

    /// `.log` bytes that start-ups after a clean stop read (see `Inner`).
    pub fn clean_start_log_bytes_read(&self) -> u64 {
        self.lock().clean_start_log_bytes_read
    }

    /// One line for the test's log.
    pub fn stats(&self) -> String {
        let inner = self.lock();
        let files: usize = inner.current.dirs.values().map(BTreeMap::len).sum();
        format!(
            "{} partitions, {files} segment files, {} bytes, {} meta keys, {} syncs, {} crashes, \
             {} clean stops, \
             {} unsynced bytes lost, {} log bytes read ({} by clean starts), \
             {} response bytes read",
            inner.current.dirs.len(),
            inner.current.bytes(),
            inner.meta.len(),
            inner.syncs,
            inner.crashes,
            inner.clean_stops,
            inner.lost_bytes,
            inner.log_bytes_read,
            inner.clean_start_log_bytes_read,
            inner.response_bytes_read,
        )
    }

    fn draw_us(range: (u64, u64)) -> Duration {
        let (low, high) = range;
        assert!(low <= high, "latency range {low}..={high}");
        Duration::from_micros(madsim::rand::thread_rng().gen_range(low..=high))
    }

    /// Carries out one op that is neither a sync nor a read on the current
    /// layer. A dead incarnation's op is ignored (its worker stops next).
    fn execute(&self, generation: u64, op: DiskOp) -> Result<(), IoError> {
        let mut inner = self.lock();
        if inner.generation != generation {
            return Ok(());
        }
        let inner = &mut *inner;
        match op {
            DiskOp::Sync { .. } | DiskOp::Read { .. } => {
                unreachable!("syncs and reads are handled by the worker")
            }
            DiskOp::Append {
                dir,
                segment_base,
                file,
                bytes,
            } => {
                let key = (dir, segment_base, file);
                let (data, created) = inner.current.file_or_create(&key);
                data.extend_from_slice(&bytes);
                if created {
                    inner.dirty_dirs.insert(key.0.clone());
                }
                inner.dirty_files.insert(key);
            }
            DiskOp::Truncate {
                dir,
                segment_base,
                file,
                len,
            } => {
                let key = (dir, segment_base, file);
                let len = usize::try_from(len)
                    .map_err(|_| IoError(format!("cannot truncate to {len} bytes")))?;
                let (data, created) = inner.current.file_or_create(&key);
                // set_len: a longer length pads with zeroes, as ftruncate does.
                data.resize(len, 0);
                if created {
                    inner.dirty_dirs.insert(key.0.clone());
                }
                inner.dirty_files.insert(key);
            }
            DiskOp::DeleteSegment { dir, segment_base } => {
                if let Some(files) = inner.current.dirs.get_mut(&dir) {
                    let before = files.len();
                    files.retain(|&(base, _), _| base != segment_base);
                    if files.len() != before {
                        inner.dirty_dirs.insert(dir.clone());
                    }
                }
                inner
                    .dirty_files
                    .retain(|(d, base, _)| !(*d == dir && *base == segment_base));
            }
            DiskOp::DeletePartition { dir } => {
                if inner.current.dirs.remove(&dir).is_some() {
                    inner.dirty_dirs.insert(dir.clone());
                }
                inner.dirty_files.retain(|(d, _, _)| *d != dir);
            }
            DiskOp::Adopt { dir, segment_base } => {
                let present: Vec<FileKey> = SegmentFile::ALL
                    .into_iter()
                    .map(|kind| (dir.clone(), segment_base, kind))
                    .filter(|key| inner.current.file(key).is_some())
                    .collect();
                inner.dirty_files.extend(present);
                inner.dirty_dirs.insert(dir);
            }
        }
        Ok(())
    }

    /// Carries out a `DiskOp::Read` on the current layer; `None` if the
    /// incarnation is dead.
    fn read(&self, generation: u64, range: &FileRange) -> Option<Result<Bytes, IoError>> {
        let mut inner = self.lock();
        if inner.generation != generation {
            return None;
        }
        let result = inner.current.read(range).map(Bytes::copy_from_slice);
        if range.file == SegmentFile::Log && result.is_ok() {
            inner.log_bytes_read += range.len;
            if inner.clean_start && inner.incarnation_syncs == 0 {
                inner.clean_start_log_bytes_read += range.len;
            }
        }
        Some(result)
    }

    /// Makes what is dirty durable: each dirty dir's entries (files removed
    /// from it are removed; a dir removed is removed whole), then each dirty
    /// file's bytes. False if the incarnation is dead.
    fn make_durable(&self, generation: u64) -> bool {
        let mut inner = self.lock();
        if inner.generation != generation {
            return false;
        }
        let inner = &mut *inner;
        for dir in std::mem::take(&mut inner.dirty_dirs) {
            match inner.current.dirs.get(&dir) {
                Some(current) => {
                    let durable = inner.durable.dirs.entry(dir).or_default();
                    durable.retain(|name, _| current.contains_key(name));
                }
                None => {
                    inner.durable.dirs.remove(&dir);
                }
            }
        }
        for key in std::mem::take(&mut inner.dirty_files) {
            if let Some(bytes) = inner.current.file(&key) {
                let bytes = bytes.clone();
                *inner.durable.file_or_create(&key).0 = bytes;
            }
        }
        inner.syncs += 1;
        inner.incarnation_syncs += 1;
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

/// Reads the file parts of response frames from the store's current layer,
/// after a simulated latency.
struct SimReader(Arc<SimStore>);

impl FrameReader for SimReader {
    fn read_frame(&self, parts: Vec<FramePart>) -> FrameFuture {
        let store = Arc::clone(&self.0);
        Box::pin(async move {
            tokio::time::sleep(SimStore::draw_us(store.latency.read_us)).await;
            let mut inner = store.lock();
            let mut read_bytes = 0;
            let frame = assemble_frame(&parts, |range, buf| {
                buf.copy_from_slice(inner.current.read(range)?);
                read_bytes += range.len;
                Ok(())
            });
            inner.response_bytes_read += read_bytes;
            frame
        })
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

    fn start(self, completions: UnboundedSender<Input>) -> anyhow::Result<Started<SimQueue>> {
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
        let meta_task = tokio::spawn(meta_worker(
            Arc::clone(&store),
            generation,
            meta_queue,
            completions,
        ));
        let finished: Finished = Box::pin(async move {
            disk_task
                .await
                .map_err(|e| anyhow::anyhow!("the simulated disk worker failed: {e}"))?;
            meta_task
                .await
                .map_err(|e| anyhow::anyhow!("the simulated meta worker failed: {e}"))?;
            Ok(())
        });
        Ok(Started {
            queue: SimQueue { disk, meta },
            reader: Arc::new(SimReader(Arc::clone(&store))),
            finished,
        })
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
            DiskOp::Read { io, range } => {
                let Some(result) = store.read(generation, &range) else {
                    return; // a dead incarnation
                };
                // Answered later, without holding up the ops behind it.
                let latency = SimStore::draw_us(store.latency.read_us);
                let completions = completions.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(latency).await;
                    let _ = completions.send(Input::ReadDone { io, result });
                });
            }
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
    // The queue closed: a clean stop. The final sync, as in production.
    store.make_durable(generation);
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
