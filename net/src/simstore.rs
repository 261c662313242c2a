//! A simulated disk and meta.db for running the real server under madsim
//! (`RUSTFLAGS="--cfg madsim"`), where the disk worker thread and sled's
//! threads cannot run and madsim's own file system has no notion of a sync.
//!
//! The store (`SimStore`) lives outside the simulated broker node: the test
//! holds it in an `Arc` and hands a `SimStorage` over it to each incarnation
//! of the node, so the "disk" survives a kill and a restart.
//!
//! The files are the in-process simulator's model, `doze_simdisk::disk::SimDisk`
//! (one model of files, syncs, reads, removals and power cuts for both
//! simulators; see its docs). What is madsim's here:
//! - Latency, from madsim's clock. A `DiskOp::Sync` waits a simulated
//!   latency, then answers `SyncDone`. As in production, a sync covers the
//!   ops already queued behind it too (group commit): the worker carries out
//!   what is queued and issues one SimDisk sync for the round, which a
//!   syncer task completes after the latency, rounds in order, while the
//!   worker goes on with the ops behind (production's syncer thread).
//! - A `DiskOp::Read` is carried out in order with the other ops (it sees
//!   them all) and answered after a simulated latency, without holding up
//!   the ops behind it. The file parts of a response are pinned as in
//!   production (the contract in `storage.rs`): the worker reads them when
//!   it reaches the response's place in the queue, so they hold what the
//!   ops before it left and nothing after (what a pinned descriptor of a
//!   renamed or deleted file still reads), and the writer gets the frame
//!   after a read latency.
//! - A meta batch waits a simulated latency, then is applied atomically and
//!   is durable at once, then answered `MetaDone`. A batch not yet answered
//!   when the node dies is lost (sled's unflushed buffer dies with the process).
//! - `SimStore::crash` is called by the test when it kills the node. It ends
//!   the old incarnation's workers (their ops are ignored from then on) and
//!   decides the fate of what is not durable: `Crash::PowerCut` is
//!   `SimDisk::power_cut` (unsynced bytes lost but for a torn prefix, files
//!   no sync covered may vanish, removals and cuts no sync covered come
//!   back), `Crash::ProcessKill` is `SimDisk::crash` (the page cache keeps
//!   it: the next incarnation reads it, but it is not durable until that
//!   incarnation syncs the file: it must adopt what it keeps). The test picks
//!   one per kill from its seed; the tears are drawn from an rng seeded from
//!   madsim's, so a seed replays.
//! - A clean stop (the queue closed, as at a SIGTERM) makes everything the
//!   incarnation wrote durable, as the production worker's final sync does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use doze_core::log::clean::work::CleanerWork;
use doze_core::{
    BootState, DiskOp, FileRange, FramePart, Input, IoError, IoId, MetaOp, SegmentFile, SyncScope,
};
use doze_simdisk::disk::SimDisk;
use madsim::rand::Rng;
use rand::rngs::ChaCha8Rng;
use rand::SeedableRng;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

use crate::metadb::MetaWrite;
use crate::storage::{
    assemble_frame, Completions, Finished, Frame, FrameFuture, FrameReadError, Started, Storage,
    StorageQueue,
};

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

struct Inner {
    /// Bumped by every crash; workers of an older incarnation stop.
    generation: u64,
    disk: SimDisk,
    /// For the disk's random choices (torn tails at a power cut), seeded
    /// from madsim's rng.
    rng: ChaCha8Rng,
    /// Names the SimDisk syncs this store issues.
    next_sync: IoId,
    meta: BTreeMap<Vec<u8>, Vec<u8>>,
    syncs: u64,
    crashes: u64,
    clean_stops: u64,
    lost_bytes: u64,
    /// Bytes of `.log` files read through `DiskOp::Read` (start-up scans
    /// and searches), and of response file parts.
    log_bytes_read: u64,
    response_bytes_read: u64,
    /// This incarnation follows a clean stop and does not serve yet
    /// (`StorageQueue::serving`): its reads are the start's own.
    clean_start: bool,
    /// `.log` bytes read by start-ups after a clean stop: a clean stop
    /// checkpoints every partition, so these should read indexes only.
    clean_start_log_bytes_read: u64,
}

/// The simulated disk and meta.db of one broker, shared across restarts.
pub struct SimStore {
    inner: Mutex<Inner>,
    latency: Latency,
}

impl SimStore {
    /// Draws from madsim's rng: call it inside the simulation.
    pub fn new(latency: Latency) -> Arc<Self> {
        let seed = madsim::rand::thread_rng().gen::<u64>();
        let inner = Inner {
            generation: 0,
            disk: SimDisk::default(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            next_sync: 0,
            meta: BTreeMap::new(),
            syncs: 0,
            crashes: 0,
            clean_stops: 0,
            lost_bytes: 0,
            log_bytes_read: 0,
            response_bytes_read: 0,
            clean_start: false,
            clean_start_log_bytes_read: 0,
        };
        Arc::new(Self {
            inner: Mutex::new(inner),
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
    /// (the `.log`'s length, the index files whole). Only what opening the
    /// data dir makes durable is (`DataDir::open` fsyncs `logs/`); the rest
    /// is the core's job (`DiskOp::Adopt`).
    pub fn boot_state(&self) -> BootState {
        let mut inner = self.lock();
        inner.disk.open_data_dir();
        let meta = inner
            .meta
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        inner.disk.boot_state(meta)
    }

    /// The node died (the test has just killed it): its workers stop, and
    /// what is not durable is lost or kept as `how` says.
    pub fn crash(&self, how: Crash) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.generation += 1;
        inner.crashes += 1;
        inner.clean_start = false;
        match how {
            Crash::ProcessKill => inner.disk.crash(),
            Crash::PowerCut => {
                let (lost_bytes, _) = inner.disk.power_cut(&mut inner.rng);
                inner.lost_bytes += lost_bytes;
            }
        }
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
        inner.clean_start = true;
        inner.disk.crash();
        let (_, volatile) = inner.disk.unsynced();
        if volatile.is_empty() {
            return Ok(());
        }
        Err(format!("not durable after a clean stop: {volatile:?}"))
    }

    /// `.log` bytes that start-ups after a clean stop read (see `Inner`).
    pub fn clean_start_log_bytes_read(&self) -> u64 {
        self.lock().clean_start_log_bytes_read
    }

    /// One line for the test's log.
    pub fn stats(&self) -> String {
        let inner = self.lock();
        let files = inner.disk.files();
        let partitions: BTreeSet<_> = files.keys().map(|(dir, _, _)| dir).collect();
        let bytes: u64 = files.values().map(|f| f.data.len() as u64).sum();
        format!(
            "{} partitions, {} segment files, {bytes} bytes, {} meta keys, {} syncs, {} crashes, \
             {} clean stops, \
             {} unsynced bytes lost, {} log bytes read ({} by clean starts), \
             {} response bytes read",
            partitions.len(),
            files.len(),
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

    /// Carries out one op that is neither a sync nor a read. A dead
    /// incarnation's op is ignored (its worker stops next).
    fn execute(&self, generation: u64, op: DiskOp) {
        let mut inner = self.lock();
        if inner.generation != generation {
            return;
        }
        let inner = &mut *inner;
        inner.disk.apply(op, &mut inner.rng);
    }

    /// Carries out the clean-shutdown file's write or removal and its
    /// fsyncs at once; `None` if the incarnation is dead.
    fn clean_shutdown(&self, generation: u64, op: DiskOp) -> Option<(IoId, Result<(), IoError>)> {
        let mut inner = self.lock();
        if inner.generation != generation {
            return None;
        }
        let io = match op {
            DiskOp::WriteCleanShutdown { io } | DiskOp::RemoveCleanShutdown { io } => io,
            _ => unreachable!("a clean-shutdown op"),
        };
        let inner = &mut *inner;
        inner.disk.apply(op, &mut inner.rng);
        Some((io, inner.disk.complete_clean_shutdown(io, false)))
    }

    /// Carries out an `Output::Clean` job (`SimDisk::clean`); `None` if the
    /// incarnation is dead.
    fn clean(
        &self,
        generation: u64,
        work: doze_core::log::clean::work::CleanerWork,
    ) -> Option<doze_core::log::clean::work::CleanerOutcome> {
        let mut inner = self.lock();
        if inner.generation != generation {
            return None;
        }
        let inner = &mut *inner;
        Some(inner.disk.clean(work, &mut inner.rng).0)
    }

    /// The incarnation serves: its reads from now on are for requests, not
    /// the start's own.
    fn serving(&self, generation: u64) {
        let mut inner = self.lock();
        if inner.generation == generation {
            inner.clean_start = false;
        }
    }

    /// Carries out a `DiskOp::Read`; `None` if the incarnation is dead.
    fn read(&self, generation: u64, range: &FileRange) -> Option<Result<Bytes, IoError>> {
        let mut inner = self.lock();
        if inner.generation != generation {
            return None;
        }
        let result = inner.disk.read(range);
        if range.file == SegmentFile::Log && result.is_ok() {
            inner.log_bytes_read += range.len;
            if inner.clean_start {
                inner.clean_start_log_bytes_read += range.len;
            }
        }
        Some(result)
    }

    /// The frame of a response whose pin the worker reached: its file parts
    /// read now, in order with the ops; `None` if the incarnation is dead.
    fn read_frame(
        &self,
        generation: u64,
        parts: &[FramePart],
    ) -> Option<Result<Bytes, FrameReadError>> {
        let mut inner = self.lock();
        if inner.generation != generation {
            return None;
        }
        let mut read_bytes = 0;
        let frame = assemble_frame(parts, |range, buf| {
            buf.copy_from_slice(&inner.disk.read(range)?);
            read_bytes += range.len;
            Ok(())
        });
        inner.response_bytes_read += read_bytes;
        Some(frame)
    }

    /// Issues a disk sync covering every op carried out so far (but for
    /// what `scope` leaves); `None` if the incarnation is dead.
    fn issue_sync(&self, generation: u64, scope: SyncScope) -> Option<IoId> {
        let mut inner = self.lock();
        if inner.generation != generation {
            return None;
        }
        let inner = &mut *inner;
        inner.next_sync += 1;
        let io = inner.next_sync;
        inner.disk.apply(DiskOp::Sync { io, scope }, &mut inner.rng);
        Some(io)
    }

    /// Completes the sync `issue_sync` returned; `None` if the incarnation
    /// is dead (the crash dropped the sync).
    fn complete_sync(&self, generation: u64, io: IoId) -> Option<Result<(), IoError>> {
        let mut inner = self.lock();
        if inner.generation != generation {
            return None;
        }
        let result = inner.disk.complete_sync(io, false, false);
        inner.syncs += 1;
        Some(result)
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

/// One incarnation's storage over a `SimStore`, for `server::Setup`.
pub struct SimStorage(pub Arc<SimStore>);

/// The broker task's end of the simulated workers.
pub struct SimQueue {
    disk: UnboundedSender<Job>,
    meta: UnboundedSender<MetaWrite>,
    store: Arc<SimStore>,
}

/// What goes through the simulated disk worker's queue, in order.
enum Job {
    Op(DiskOp),
    Clean {
        io: IoId,
        work: CleanerWork,
    },
    /// The core serves: reads from here on are for requests.
    Serving,
    /// A response's file parts, read when the worker gets here.
    Pin {
        parts: Vec<FramePart>,
        reply: oneshot::Sender<Result<Bytes, FrameReadError>>,
    },
}

impl StorageQueue for SimQueue {
    fn submit_disk(&self, op: DiskOp) -> Result<(), IoError> {
        self.disk
            .send(Job::Op(op))
            .map_err(|_| IoError("the simulated disk worker has stopped".into()))
    }

    fn submit_clean(&self, io: IoId, work: CleanerWork) -> Result<(), IoError> {
        self.disk
            .send(Job::Clean { io, work })
            .map_err(|_| IoError("the simulated disk worker has stopped".into()))
    }

    fn response_frame(&self, parts: Vec<FramePart>) -> FrameFuture {
        let has_files = parts.iter().any(|p| matches!(p, FramePart::File(_)));
        if !has_files {
            let frame = assemble_frame(&parts, |_, _| unreachable!("no file part"));
            return Box::pin(async move { frame.map(|bytes| Frame::whole(bytes).into()) });
        }
        let (reply, frame) = oneshot::channel();
        // A worker gone drops the reply, and the frame fails as a whole.
        let _ = self.disk.send(Job::Pin { parts, reply });
        let latency = SimStore::draw_us(self.store.latency.read_us);
        Box::pin(async move {
            let frame = frame.await.map_err(|_| {
                FrameReadError::Frame("the simulated disk worker stopped before the read".into())
            })?;
            tokio::time::sleep(latency).await;
            frame.map(|bytes| Frame::whole(bytes).into())
        })
    }

    fn serving(&self) {
        let _ = self.disk.send(Job::Serving);
    }

    fn submit_meta(&self, write: MetaWrite) -> Result<(), IoError> {
        self.meta
            .send(write)
            .map_err(|_| IoError("the simulated meta worker has stopped".into()))
    }
}

impl Storage for SimStorage {
    type Queue = SimQueue;

    fn start(self, completions: Completions) -> anyhow::Result<Started<SimQueue>> {
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
            queue: SimQueue { disk, meta, store },
            // Not counted here: under madsim the readers never wait for the
            // disk (back-pressure is the real storage's, tested in net).
            backlog: Arc::default(),
            finished,
        })
    }
}

async fn disk_worker(
    store: Arc<SimStore>,
    generation: u64,
    mut queue: UnboundedReceiver<Job>,
    completions: Completions,
) {
    let (rounds, syncer_queue) = mpsc::unbounded_channel();
    let syncer = tokio::spawn(syncer(
        Arc::clone(&store),
        generation,
        syncer_queue,
        completions.clone(),
    ));
    while let Some(job) = queue.recv().await {
        let mut syncs: Vec<IoId> = Vec::new();
        // A round with any `All` sync in it is an `All` one.
        let mut scope = SyncScope::Logs;
        let mut step = |job: Job, syncs: &mut Vec<_>| match job {
            Job::Op(DiskOp::Sync { io, scope: asked }) => {
                syncs.push(io);
                if asked == SyncScope::All {
                    scope = SyncScope::All;
                }
            }
            Job::Op(DiskOp::Read { io, range }) => {
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
            Job::Serving => store.serving(generation),
            Job::Clean { io, work } => {
                let Some(outcome) = store.clean(generation, work) else {
                    return; // a dead incarnation
                };
                // Carried out now, in order; answered later, as a read.
                let latency = SimStore::draw_us(store.latency.read_us);
                let completions = completions.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(latency).await;
                    let _ = completions.send(Input::CleanerDone { io, outcome });
                });
            }
            Job::Op(
                op @ (DiskOp::WriteCleanShutdown { .. } | DiskOp::RemoveCleanShutdown { .. }),
            ) => {
                if let Some((io, result)) = store.clean_shutdown(generation, op) {
                    let _ = completions.send(Input::CleanShutdownDone { io, result });
                }
            }
            Job::Op(op) => store.execute(generation, op),
            Job::Pin { parts, reply } => {
                // A dead incarnation drops the reply: the frame fails.
                if let Some(frame) = store.read_frame(generation, &parts) {
                    let _ = reply.send(frame);
                }
            }
        };
        step(job, &mut syncs);
        if syncs.is_empty() {
            continue;
        }
        // As in production (disk.rs), the sync starts at once: what is
        // queued behind it is the next sync's.
        let Some(disk_sync) = store.issue_sync(generation, scope) else {
            return;
        };
        if rounds.send((disk_sync, syncs)).is_err() {
            return;
        }
    }
    // The queue closed: a clean stop. The rounds in flight, then the final
    // sync, as in production.
    drop(rounds);
    let _ = syncer.await;
    if let Some(disk_sync) = store.issue_sync(generation, SyncScope::All) {
        let _ = store.complete_sync(generation, disk_sync);
    }
}

/// Completes the worker's sync rounds in order, each after a latency, and
/// answers their `Sync`s.
async fn syncer(
    store: Arc<SimStore>,
    generation: u64,
    mut rounds: UnboundedReceiver<(IoId, Vec<IoId>)>,
    completions: Completions,
) {
    while let Some((disk_sync, syncs)) = rounds.recv().await {
        tokio::time::sleep(SimStore::draw_us(store.latency.sync_us)).await;
        let Some(result) = store.complete_sync(generation, disk_sync) else {
            return;
        };
        for io in syncs {
            let result = result.clone();
            if completions.deliver(Input::SyncDone { io, result }).is_err() {
                return;
            }
        }
    }
}

async fn meta_worker(
    store: Arc<SimStore>,
    generation: u64,
    mut queue: UnboundedReceiver<MetaWrite>,
    completions: Completions,
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
        if completions.deliver(done).is_err() {
            return;
        }
    }
}
