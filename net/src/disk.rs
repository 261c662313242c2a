//! The disk worker: carries out the core's `DiskOp`s, strictly in order, on a
//! dedicated OS thread with blocking `std::fs` calls. A segment is four files
//! (`.log`, `.index`, `.timeindex`, `.txnindex`); each is opened, written,
//! synced and evicted on its own.
//!
//! Why a thread of its own: an fsync can take tens of milliseconds (seconds on
//! a busy disk), and the broker task must keep answering fetches and metadata
//! meanwhile. Why not tokio's blocking pool: its tasks may run concurrently and
//! out of order, and the core's contract is a strict order.
//!
//! Durability bookkeeping: every file written or cut since the last sync, and
//! every directory whose entries changed (a segment created or removed, a
//! partition dir created or removed), is *dirty*. So is every file the core
//! adopted at start-up (`DiskOp::Adopt`, with its directory): a crashed
//! process may have left it in the page cache only. A `Sync` fdatasyncs the
//! dirty files and fsyncs the dirty directories, and only then reports
//! `SyncDone`. A live index file whose only change is appends is kept apart
//! (`index_appends`): a `SyncScope::Logs` sync leaves it for the next
//! `SyncScope::All` one (the core's checkpoints wait for that), so a
//! produce round fdatasyncs one file per partition, not three.
//!
//! Reads (`DiskOp::Read`, the core's start-up scan and its searches of batch
//! headers) are carried out in order with the writes, so they see every op
//! before them, and answered at once with `ReadDone`. They come from the page
//! cache and are small (`limits::RECOVERY_READ_BYTES` at most).
//!
//! Pins: the queue also carries the pins of responses' file parts
//! (`DiskQueue::response_frame`, see `filereader.rs`), so a response reads
//! the files its segment names held at its dispatch point. The worker answers
//! a pin with read descriptors at once, between two ops; the reading itself
//! happens on tokio's blocking pool.
//!
//! The log cleaner's files: `DiskOp::AppendCleaned` writes a segment file's
//! `{name}.cleaned` copy, `DiskOp::Rename` moves it to `{name}.swap` and then
//! over the live name (rename(2): atomic), `DiskOp::DiscardStaged` removes
//! the copies. The worker keys its descriptors and dirty set by name and
//! stage; a rename carries the descriptor and the dirtiness of its file to
//! the new name (the inode is the same), drops those of the file it
//! replaced (no name holds it any more), and dirties the directory. Before a
//! rename over or a deletion of a live name, the response reader's cached
//! descriptors of the segment are forgotten.
//!
//! The cleaner's jobs (`Output::Clean`): the worker opens the segment's
//! `.log` and creates its `.log.cleaned` copy (dirtying it and, when new,
//! its directory) in order with the other ops, then hands both descriptors
//! to the cleaner's thread (`cleaner_work.rs`), which answers `CleanerDone`
//! itself; the ops behind do not wait for the job.
//!
//! Group commit: when a `Sync` arrives, the worker first carries out every op
//! already queued behind it (in order, including more `Sync`s), then hands one
//! round of fsyncs to the syncer thread, which reports every `Sync` of the
//! round. Each `Sync` only promises that what came *before* it is durable, so
//! syncing a little more is always allowed, and a busy broker gets many
//! appends per fsync. The worker goes on writing while the syncer waits on
//! the disk, so the copy into the page cache of round N+1 overlaps the
//! fdatasync of round N (found by `make bench`: done one after the other they
//! left the broker well short of raw write+fdatasync bandwidth). Rounds are
//! synced and reported in order; an fdatasync of a file written meanwhile is
//! still a correct sync of what was written before it.
//!
//! Metrics: each round's fsync time, and the log appends and bytes it made
//! durable (the group commit's size), go to `NetMetrics` from the syncer.
//!
//! Errors: appends, cuts and removals have no completion of their own. The
//! first failure since the last `Sync` is kept and reported by the next `Sync`
//! (the core then treats everything since its previous sync as unsafe), and the
//! error state is cleared for the one after.
//!
//! Back-pressure: the queue is unbounded on purpose, because the broker task
//! must never block on the disk. What waits in it is bounded only by what the
//! clients keep in flight (each produce is answered after its sync); the core
//! does not hold produces back yet.

use std::collections::{HashSet, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::mem;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use crate::storage::Completions;
use bytes::Bytes;
use doze_core::log::clean::work::{CleanerError, CleanerOutcome, CleanerWork};
use doze_core::{batch, limits};
use doze_core::{
    DiskOp, FileRange, FileStage, FramePart, Input, IoError, IoId, PartitionDir, SegmentFile,
    SyncScope,
};
use rustc_hash::{FxHashMap, FxHashSet};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use crate::cleaner_work::{CleanerJob, CleanerThread, OpenCleanerFiles};
use crate::console::metrics::NetMetrics;
use crate::datadir::{partition_path, staged_path};
use crate::filereader::{part_keys, read_pinned, FileReader, PinJob, PinSource};
use crate::storage::{Backlog, FrameFuture};
use crate::syncpool::SyncPool;

/// Segment files kept open at once (all four kinds count). Past this the
/// least recently used one is synced (if dirty) and closed, so thousands of
/// partitions do not exhaust the process's file descriptors.
pub const OPEN_FILES_MAX: usize = 512;
/// Files closed together when the worker's open files reach
/// `OPEN_FILES_MAX`: this fraction of them, the least recently used, the
/// dirty ones fdatasynced together first. Why: closed one at a time, each
/// with its own fdatasync, a start-up with 10,000 partitions (four files
/// each, all adopted, so all dirty) closed 89,488 files one fdatasync after
/// another (23 s to serve, `make bench` section 9); synced together by the
/// pool, their fdatasyncs overlap (see `syncpool`).
const EVICTED_FRACTION: usize = 8;
/// Dirty files a sync round opens beyond those the worker keeps open, and
/// directories it opens at once: past this, the rest are synced this many
/// at a time. Why: a start-up with 10,000 partitions adopts about 10,500
/// files that are not open and 10,001 directories; opened all at once (and
/// duplicated for the pool) they ran out of descriptors at a limit of
/// 20,000 (EMFILE: the boot sync failed and was done again).
const ROUND_FILES_OPENED_MAX: usize = 256;

pub struct DiskWorker {
    ops: mpsc::Sender<Queued>,
    thread: thread::JoinHandle<Result<(), IoError>>,
    backlog: Arc<Backlog>,
    reader: FileReader,
}

/// What goes through the worker's queue, in the broker task's order.
enum Queued {
    /// Ops queued together (`DiskQueue::submit_all`).
    Ops(Vec<DiskOp>),
    Clean {
        io: IoId,
        work: CleanerWork,
    },
    Pin(PinJob),
}

/// What the worker runs next: one op, or one pin.
enum Job {
    Op(DiskOp),
    Clean { io: IoId, work: CleanerWork },
    Pin(PinJob),
}

/// The worker's end of its queue: ops queued together are handed out one
/// at a time (an empty batch is skipped), so the worker sees one op per job.
struct Inbox {
    queue: mpsc::Receiver<Queued>,
    /// The rest of the last batch taken, in order.
    taken: VecDeque<DiskOp>,
}

impl Inbox {
    /// The next job, waiting for one; `None` once the queue is closed and
    /// empty.
    fn recv(&mut self) -> Option<Job> {
        self.next(|queue| queue.recv().ok())
    }

    /// The next job if one is queued.
    fn try_recv(&mut self) -> Option<Job> {
        self.next(|queue| queue.try_recv().ok())
    }

    fn next(&mut self, take: impl Fn(&mpsc::Receiver<Queued>) -> Option<Queued>) -> Option<Job> {
        loop {
            if let Some(op) = self.taken.pop_front() {
                return Some(Job::Op(op));
            }
            match take(&self.queue)? {
                Queued::Ops(ops) => self.taken.extend(ops),
                Queued::Clean { io, work } => return Some(Job::Clean { io, work }),
                Queued::Pin(pin) => return Some(Job::Pin(pin)),
            }
        }
    }
}

impl DiskWorker {
    /// Starts the worker over `logs_dir`. `SyncDone`s and `ReadDone`s go to
    /// `completions`; `reader`'s cached descriptors are forgotten as files
    /// are deleted; each group commit is measured into `metrics`.
    pub fn spawn(
        logs_dir: PathBuf,
        completions: Completions,
        reader: FileReader,
        backlog: Arc<Backlog>,
        metrics: Arc<NetMetrics>,
    ) -> io::Result<Self> {
        Self::spawn_with(
            logs_dir,
            completions,
            reader,
            OPEN_FILES_MAX,
            backlog,
            metrics,
        )
    }

    fn spawn_with(
        logs_dir: PathBuf,
        completions: Completions,
        reader: FileReader,
        open_files_max: usize,
        backlog: Arc<Backlog>,
        metrics: Arc<NetMetrics>,
    ) -> io::Result<Self> {
        let (ops, queue) = mpsc::channel();
        let disk = Disk::new(
            logs_dir,
            reader.clone(),
            open_files_max,
            Arc::clone(&backlog),
        );
        let thread = thread::Builder::new()
            .name("doze-disk".into())
            .spawn(move || disk.run(queue, completions, metrics))?;
        Ok(Self {
            ops,
            thread,
            backlog,
            reader,
        })
    }

    /// Splits into the queue (for the broker task) and the thread (for the
    /// shutdown). Dropping the queue tells the worker to finish and stop.
    pub fn into_parts(self) -> (DiskQueue, thread::JoinHandle<Result<(), IoError>>) {
        (
            DiskQueue {
                ops: self.ops,
                backlog: self.backlog,
                reader: self.reader,
            },
            self.thread,
        )
    }
}

/// The broker task's end of the worker's queue.
pub struct DiskQueue {
    ops: mpsc::Sender<Queued>,
    backlog: Arc<Backlog>,
    reader: FileReader,
}

impl DiskQueue {
    /// Queues one op. Fails only if the worker thread is gone (it panicked),
    /// after which nothing can be made durable.
    pub fn submit(&self, op: DiskOp) -> Result<(), IoError> {
        self.submit_all(vec![op])
    }

    /// Queues one of the cleaner's jobs, in order with the ops.
    pub fn submit_clean(&self, io: IoId, work: CleanerWork) -> Result<(), IoError> {
        self.ops
            .send(Queued::Clean { io, work })
            .map_err(|_| IoError("the disk worker has stopped".into()))
    }

    /// Queues ops, in order, as one job: a worker waiting on its queue
    /// wakes once for them all.
    pub fn submit_all(&self, ops: Vec<DiskOp>) -> Result<(), IoError> {
        let appended: usize = ops
            .iter()
            .map(|op| match op {
                DiskOp::Append { bytes, .. } | DiskOp::AppendCleaned { bytes, .. } => bytes.len(),
                DiskOp::AppendBatch { batch, .. } => batch.len(),
                _ => 0,
            })
            .sum();
        // Counted before they can run, so that no pin after them takes a
        // cached descriptor they are about to make stale.
        let name_changes = ops.iter().filter(|op| changes_live_names(op)).count();
        for _ in 0..name_changes {
            self.reader.name_change_queued();
        }
        self.backlog.add(appended);
        self.ops.send(Queued::Ops(ops)).map_err(|_| {
            self.backlog.done(appended);
            for _ in 0..name_changes {
                self.reader.name_change_done();
            }
            IoError("the disk worker has stopped".into())
        })
    }

    /// The frame of a response, its files pinned now, in order with the ops
    /// submitted (the contract in `storage.rs`). From the reader's cache on
    /// this task when that is current and holds them all; else through the
    /// worker's queue, which opens them when it gets there.
    pub fn response_frame(&self, parts: Vec<FramePart>) -> FrameFuture {
        let keys = part_keys(&parts);
        if keys.is_empty() {
            return read_pinned(parts, PinSource::Ready(Vec::new()));
        }
        if let Some(pinned) = self.reader.pin_cached(&keys) {
            return read_pinned(parts, PinSource::Ready(pinned));
        }
        let (reply, pinned) = oneshot::channel();
        // A worker gone drops the reply, and the frame fails as a whole.
        let _ = self.ops.send(Queued::Pin(PinJob { keys, reply }));
        read_pinned(parts, PinSource::Queued(pinned))
    }
}

/// Appends, which `Disk::append_all` writes together.
fn is_append(op: &DiskOp) -> bool {
    matches!(
        op,
        DiskOp::Append { .. } | DiskOp::AppendBatch { .. } | DiskOp::AppendCleaned { .. }
    )
}

/// Whether an op changes which file a live segment name holds: what makes
/// the response reader's cached descriptors stale.
fn changes_live_names(op: &DiskOp) -> bool {
    match op {
        DiskOp::DeleteSegment { .. } | DiskOp::DeletePartition { .. } => true,
        DiskOp::Rename { from, to, .. } => *from == FileStage::Live || *to == FileStage::Live,
        _ => false,
    }
}

/// A lane's share of a run of appends: each file (by its place in the run)
/// with a descriptor of its own and its appends in order.
type LaneWrites = Vec<(usize, File, Vec<Bytes>)>;
/// The failures of a lane's writes, by the file's place in the run.
type LaneFailures = Vec<(usize, io::Error)>;

/// A thread that writes a share of a run of appends for the worker.
struct AppendLane {
    jobs: mpsc::Sender<(LaneWrites, mpsc::Sender<LaneFailures>)>,
}

impl AppendLane {
    /// The thread stops when the lane is dropped.
    fn start() -> io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<(LaneWrites, mpsc::Sender<LaneFailures>)>();
        thread::Builder::new()
            .name("doze-append".into())
            .spawn(move || {
                while let Ok((writes, reply)) = queue.recv() {
                    let _ = reply.send(write_lane(writes));
                }
            })?;
        Ok(Self { jobs })
    }

    /// Starts writing; the reply carries the failures.
    fn write(&self, writes: LaneWrites) -> mpsc::Receiver<LaneFailures> {
        let (reply, failures) = mpsc::channel();
        // A thread gone drops `reply`, which the worker reads as a failure.
        let _ = self.jobs.send((writes, reply));
        failures
    }
}

/// Writes each file's appends in order; a file stops at its first failure.
fn write_lane(writes: LaneWrites) -> LaneFailures {
    let mut failures = Vec::new();
    for (at, mut file, parts) in writes {
        if let Err(e) = write_all_vectored(&mut file, &parts) {
            failures.push((at, e));
        }
    }
    failures
}

/// The parts written for `DiskOp::AppendBatch`: the batch's stored prefix
/// (its new base offset and the leader epoch, `batch::stored_prefix`), then
/// the rest of it (a slice, not a copy).
fn batch_parts(base_offset: i64, batch: Bytes) -> Vec<Bytes> {
    let prefix = batch::stored_prefix(&batch, base_offset);
    vec![
        Bytes::copy_from_slice(&prefix),
        batch.slice(batch::STORED_PREFIX_BYTES..),
    ]
}

/// Every byte of `parts`, in order, with as few writev(2) calls as the
/// kernel allows (up to `IOV_MAX` slices each).
fn write_all_vectored(file: &mut File, parts: &[Bytes]) -> io::Result<()> {
    const IOV_MAX: usize = 1024;
    let mut part = 0;
    let mut offset = 0; // within parts[part]
    while part < parts.len() {
        if parts[part].len() == offset {
            part += 1;
            offset = 0;
            continue;
        }
        let slices: Vec<io::IoSlice> = std::iter::once(&parts[part][offset..])
            .chain(parts[part + 1..].iter().map(|p| &p[..]))
            .take(IOV_MAX)
            .map(io::IoSlice::new)
            .collect();
        let mut written = match file.write_vectored(&slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        // Advance past what was written.
        while written > 0 {
            let left = parts[part].len() - offset;
            if written >= left {
                written -= left;
                part += 1;
                offset = 0;
            } else {
                offset += written;
                written = 0;
            }
        }
    }
    Ok(())
}

/// One file of one segment, under one of its names.
type FileKey = (PartitionDir, i64, SegmentFile, FileStage);

struct OpenFile {
    file: File,
    /// Value of `Disk::uses` at the last use, for least-recently-used eviction.
    last_use: u64,
}

/// One round of fsyncs, handed to the syncer thread.
struct SyncRound {
    /// Dirty files, each with its own descriptor (a duplicate where the
    /// worker has the file open, so it may close its own meanwhile), or the
    /// error that kept it from being opened. Named (`describe`) only in a
    /// failure's message: a round is taken for every sync.
    files: Vec<(FileKey, Result<File, IoError>)>,
    dirs: Vec<PathBuf>,
    /// The `Sync`s the round answers, each with an error it must report
    /// whatever the fsyncs do.
    syncs: Vec<(IoId, Option<IoError>)>,
    /// Appends to `.log` files since the previous round, and their bytes:
    /// what this round makes durable (the group commit's size).
    log_appends: u64,
    log_append_bytes: u64,
}

struct Disk {
    logs_dir: PathBuf,
    reader: FileReader,
    open: FxHashMap<FileKey, OpenFile>,
    open_files_max: usize,
    uses: u64,
    dirty_files: FxHashSet<FileKey>,
    /// Live index files not in `dirty_files` whose only change since their
    /// last fdatasync is appends: synced by `SyncScope::All` rounds only.
    index_appends: FxHashSet<FileKey>,
    /// The widest scope of the `Sync`s gathered into the round being built.
    round_scope: SyncScope,
    dirty_dirs: HashSet<PathBuf>,
    /// Directories whose fsync failed in a round: they stay dirty for the
    /// next one (a removal is durable only once an fsync of its directory
    /// succeeds; the core cannot rewrite it as it rewrites file contents).
    /// The syncer thread fills it, the worker drains it into each round.
    dirs_to_retry: Arc<Mutex<Vec<PathBuf>>>,
    /// Where the files of a round are synced together.
    pool: Arc<SyncPool>,
    /// The first failure since the last `Sync`, which that `Sync` will report.
    error: Option<IoError>,
    /// Append bytes queued and not yet written (the readers' back-pressure).
    backlog: Arc<Backlog>,
    /// Appends to `.log` files since the last round was taken, and their
    /// bytes (`SyncRound::log_appends`).
    log_appends: u64,
    log_append_bytes: u64,
    /// Threads that write a share of a large run of appends (`append_all`).
    lanes: Vec<AppendLane>,
    /// Runs the cleaner's jobs; started at the first.
    cleaner: Option<CleanerThread>,
}

impl Disk {
    fn new(
        logs_dir: PathBuf,
        reader: FileReader,
        open_files_max: usize,
        backlog: Arc<Backlog>,
    ) -> Self {
        assert!(
            open_files_max > 0,
            "the disk worker needs at least one open file"
        );
        Self {
            logs_dir,
            reader,
            open: FxHashMap::default(),
            open_files_max,
            uses: 0,
            dirty_files: FxHashSet::default(),
            index_appends: FxHashSet::default(),
            round_scope: SyncScope::Logs,
            dirty_dirs: HashSet::new(),
            dirs_to_retry: Arc::default(),
            pool: Arc::new(SyncPool::start().expect("start the fdatasync threads")),
            error: None,
            backlog,
            log_appends: 0,
            log_append_bytes: 0,
            lanes: (1..limits::DISK_APPEND_LANES)
                .map(|_| AppendLane::start().expect("start the append threads"))
                .collect(),
            cleaner: None,
        }
    }

    fn run(
        mut self,
        queue: mpsc::Receiver<Queued>,
        completions: Completions,
        metrics: Arc<NetMetrics>,
    ) -> Result<(), IoError> {
        let (rounds, syncer_queue) = mpsc::channel::<SyncRound>();
        let syncer_completions = completions.clone();
        let retry = Arc::clone(&self.dirs_to_retry);
        let pool = Arc::clone(&self.pool);
        // Rounds handed to the syncer and not reported yet.
        let at_syncer = Arc::new(AtomicUsize::new(0));
        let syncer_metrics = Arc::clone(&metrics);
        let syncer_rounds = Arc::clone(&at_syncer);
        let syncer = thread::Builder::new()
            .name("doze-sync".into())
            .spawn(move || {
                while let Ok(round) = syncer_queue.recv() {
                    finish_round(round, &syncer_completions, &retry, &pool, &syncer_metrics);
                    syncer_rounds.fetch_sub(1, Ordering::Release);
                }
            })
            .expect("spawn the syncer thread");
        let mut inbox = Inbox {
            queue,
            taken: VecDeque::new(),
        };
        // A job taken from the queue while gathering appends, not run yet.
        let mut held = None;
        while let Some(job) = held.take().or_else(|| inbox.recv()) {
            // Syncs reached this round, each with the error it must report
            // regardless of how the fsyncs go.
            let mut syncs = Vec::new();
            self.run_job(job, &mut inbox, &mut held, &mut syncs, &completions);
            if syncs.is_empty() {
                continue;
            }
            // The round starts at once: nothing queued behind the sync is
            // written into it first. The core keeps one sync in flight, so
            // what follows is appends, which its next sync covers; writing
            // them first only delays this one (by seconds when the page
            // cache takes writes slowly and the queue never empties), and the
            // syncer thread fsyncs while this thread goes on writing.
            let round = self.take_round(syncs);
            // Rounds are reported in order: inline only behind none, and
            // only with nothing queued to write meanwhile.
            held = held.take().or_else(|| inbox.try_recv());
            let inline = at_syncer.load(Ordering::Acquire) == 0
                && round.log_append_bytes <= limits::DISK_INLINE_SYNC_BYTES_MAX
                && held.is_none();
            if inline {
                let retry = &self.dirs_to_retry;
                finish_round(round, &completions, retry, &self.pool, &metrics);
                continue;
            }
            at_syncer.fetch_add(1, Ordering::Release);
            if rounds.send(round).is_err() {
                break; // the syncer died (a panic): nothing more can be promised
            }
        }
        // The queue closed: the broker is shutting down. Let the syncer finish
        // its rounds, then make the rest durable before the process exits.
        drop(rounds);
        let _ = syncer.join();
        let synced = self.sync_dirty();
        let result = match self.error.take() {
            Some(e) => Err(e),
            None => synced,
        };
        let (pins_fast, pins_queued) = self.reader.pin_counts();
        match &result {
            Ok(()) => info!(pins_fast, pins_queued, "disk worker: final sync done"),
            Err(e) => warn!(error = %e.0, "disk worker: final sync failed"),
        }
        result
    }

    /// Runs `job`; an append takes with it the appends queued right behind
    /// it (`append_all`), and the first other job it meets is left in `held`.
    fn run_job(
        &mut self,
        job: Job,
        inbox: &mut Inbox,
        held: &mut Option<Job>,
        syncs: &mut Vec<(IoId, Option<IoError>)>,
        completions: &Completions,
    ) {
        match job {
            Job::Op(op) if is_append(&op) => {
                let mut appends = vec![op];
                while appends.len() < limits::DISK_APPENDS_GATHERED_MAX {
                    match inbox.try_recv() {
                        Some(Job::Op(op)) if is_append(&op) => appends.push(op),
                        Some(other) => {
                            *held = Some(other);
                            break;
                        }
                        None => break,
                    }
                }
                self.append_all(appends);
            }
            Job::Op(op) => self.execute(op, syncs, completions),
            Job::Clean { io, work } => self.clean(io, work, completions),
            Job::Pin(PinJob { keys, reply }) => {
                // The writer may have gone meanwhile; then nobody reads.
                let _ = reply.send(self.reader.pin_in_order(keys));
            }
        }
    }

    fn execute(
        &mut self,
        op: DiskOp,
        syncs: &mut Vec<(IoId, Option<IoError>)>,
        completions: &Completions,
    ) {
        let name_change = changes_live_names(&op);
        let result = match op {
            DiskOp::Sync { io, scope } => {
                syncs.push((io, self.error.take()));
                if scope == SyncScope::All {
                    self.round_scope = SyncScope::All;
                }
                return;
            }
            DiskOp::Read { io, range } => {
                // A read has its own completion; it does not touch `error`.
                let result = self.read(&range);
                if let Err(e) = &result {
                    warn!(error = %e.0, "disk read failed");
                }
                // The broker task is gone only during shutdown.
                let _ = completions.send(Input::ReadDone { io, result });
                return;
            }
            op @ (DiskOp::Append { .. }
            | DiskOp::AppendBatch { .. }
            | DiskOp::AppendCleaned { .. }) => {
                self.append_all(vec![op]);
                return;
            }
            DiskOp::Truncate {
                dir,
                segment_base,
                file,
                len,
            } => self.truncate(&(dir, segment_base, file, FileStage::Live), len),
            DiskOp::Rename {
                dir,
                segment_base,
                file,
                from,
                to,
            } => self.rename(&(dir, segment_base, file, from), to),
            DiskOp::DeleteSegment { dir, segment_base } => self.delete_segment(&dir, segment_base),
            DiskOp::DiscardStaged { dir, segment_base } => {
                self.remove_files(&dir, segment_base, &[FileStage::Cleaned, FileStage::Swap])
            }
            DiskOp::DeletePartition { dir } => self.delete_partition(&dir),
            DiskOp::Adopt { dir, segment_base } => self.adopt(&dir, segment_base),
            DiskOp::WriteCleanShutdown { io } => {
                let result = self.write_clean_shutdown();
                let _ = completions.send(Input::CleanShutdownDone { io, result });
                return;
            }
            DiskOp::RemoveCleanShutdown { io } => {
                let result = self.remove_clean_shutdown();
                let _ = completions.send(Input::CleanShutdownDone { io, result });
                return;
            }
        };
        self.keep_error(result);
        if name_change {
            // Done, failed or not: the reader's cache was brought up to date
            // before the op touched the names, and pins may use it again.
            self.reader.name_change_done();
        }
    }

    /// A run of appends as one: each file's in order, different files on
    /// different threads when the run is large. Copying into the page cache
    /// is most of what the broker does while producing (perf: about half
    /// its samples), as in Kafka, whose request handler threads append to
    /// different partitions at once; on two cores a second thread gained a
    /// few percent (doze-bench produce, 4 producers: 550-570 MB/s with one,
    /// 573-579 with two). Each file's appends go out in as few writev(2)
    /// calls as the kernel takes. The order between files does not matter:
    /// none is durable before the next sync, and start-up already finds an
    /// index past its log.
    fn append_all(&mut self, ops: Vec<DiskOp>) {
        // Each file's appends, in order, and their bytes.
        let mut files: Vec<(FileKey, Vec<Bytes>, usize)> = Vec::new();
        let mut total_bytes = 0;
        for op in ops {
            let (key, parts) = match op {
                DiskOp::Append {
                    dir,
                    segment_base,
                    file,
                    bytes,
                } => {
                    if file == SegmentFile::Log && !bytes.is_empty() {
                        self.log_appends += 1;
                        self.log_append_bytes += bytes.len() as u64;
                    }
                    ((dir, segment_base, file, FileStage::Live), vec![bytes])
                }
                DiskOp::AppendBatch {
                    dir,
                    segment_base,
                    base_offset,
                    batch,
                } => {
                    self.log_appends += 1;
                    self.log_append_bytes += batch.len() as u64;
                    let key = (dir, segment_base, SegmentFile::Log, FileStage::Live);
                    (key, batch_parts(base_offset, batch))
                }
                DiskOp::AppendCleaned {
                    dir,
                    segment_base,
                    file,
                    bytes,
                } => ((dir, segment_base, file, FileStage::Cleaned), vec![bytes]),
                _ => unreachable!("append_all takes appends only"),
            };
            let n: usize = parts.iter().map(Bytes::len).sum();
            total_bytes += n;
            match files.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, file_parts, file_n)) => {
                    *file_n += n;
                    file_parts.extend(parts);
                }
                None => files.push((key, parts, n)),
            }
        }
        let parallel = !self.lanes.is_empty()
            && files.len() >= 2
            && total_bytes >= limits::DISK_APPEND_PARALLEL_BYTES_MIN;
        // Largest first, each to the lane with the fewest bytes so far; lane
        // 0 is this thread (the only one for a small run). Files are opened
        // here, where opening one may create it and dirty its directory.
        if parallel {
            files.sort_by_key(|(_, _, n)| std::cmp::Reverse(*n));
        }
        let lane_count = if parallel { self.lanes.len() + 1 } else { 1 };
        let mut lanes: Vec<LaneWrites> = (0..lane_count).map(|_| Vec::new()).collect();
        let mut lane_bytes = vec![0usize; lane_count];
        // This thread's files, written through the worker's own descriptors.
        let mut mine = Vec::new();
        for (at, (key, parts, n)) in files.iter_mut().enumerate() {
            let lane = (0..lane_count)
                .min_by_key(|&l| lane_bytes[l])
                .expect("at least one lane");
            lane_bytes[lane] += *n;
            if lane == 0 {
                mine.push(at);
                continue;
            }
            let opened = self
                .file(key, true)
                .and_then(|f| f.try_clone())
                .map_err(|e| self.failed_at("open", key, e));
            match opened {
                Ok(file) => {
                    self.appended(key);
                    lanes[lane].push((at, file, mem::take(parts)));
                }
                Err(e) => self.keep_error(Err(e)),
            }
        }
        let replies: Vec<_> = lanes
            .into_iter()
            .skip(1)
            .zip(&self.lanes)
            .filter(|(writes, _)| !writes.is_empty())
            .map(|(writes, lane)| lane.write(writes))
            .collect();
        let mut failures = Vec::new();
        for at in mine {
            let (key, parts, _) = &files[at];
            let written = match self.file(key, true) {
                Ok(file) => {
                    let written = write_all_vectored(file, parts);
                    // Open, so dirty, whatever the write did.
                    self.appended(key);
                    written.map_err(|e| self.failed_at("append to", key, e))
                }
                Err(e) => Err(self.failed_at("open", key, e)),
            };
            self.keep_error(written);
        }
        for reply in replies {
            match reply.recv() {
                Ok(lane_failures) => failures.extend(lane_failures),
                Err(_) => failures.push((usize::MAX, io::Error::other("an append thread died"))),
            }
        }
        self.backlog.done(total_bytes);
        for (at, e) in failures {
            let name = files
                .get(at)
                .map_or("a segment file".into(), |(k, _, _)| describe(k));
            self.keep_error(Err(IoError(format!("cannot append to {name}: {e}"))));
        }
    }

    /// Marks a file appended to: dirty, or for a live index file not dirty
    /// otherwise, left for an `All` sync.
    fn appended(&mut self, key: &FileKey) {
        let live_index = key.2 != SegmentFile::Log && key.3 == FileStage::Live;
        if live_index && !self.dirty_files.contains(key) {
            self.index_appends.insert(key.clone());
        } else {
            self.dirty_files.insert(key.clone());
        }
    }

    /// Marks a file changed otherwise than by appends (cut, adopted, renamed
    /// here): dirty for the next sync of any scope.
    fn changed(&mut self, key: FileKey) {
        self.index_appends.remove(&key);
        self.dirty_files.insert(key);
    }

    /// The first failure since the last `Sync` is what it reports.
    fn keep_error(&mut self, result: Result<(), IoError>) {
        if let Err(e) = result {
            warn!(error = %e.0, "disk op failed; the next sync will report it");
            self.error.get_or_insert(e);
        }
    }

    /// Cuts (or pads with zeroes, as ftruncate does) to `len`, creating the
    /// file when absent.
    fn truncate(&mut self, key: &FileKey, len: u64) -> Result<(), IoError> {
        let path = self.path(key)?;
        // A file not open that already has that length is not opened (which
        // could close another): start-up cuts every index file to what its
        // checkpoint vouches for, and after a clean stop each one already
        // is. It is marked changed all the same, as if cut.
        if !self.open.contains_key(key) && fs::metadata(&path).is_ok_and(|m| m.len() == len) {
            self.changed(key.clone());
            return Ok(());
        }
        let file = self.file(key, true).map_err(|e| failed("open", &path, e))?;
        file.set_len(len)
            .map_err(|e| failed("truncate", &path, e))?;
        self.changed(key.clone());
        Ok(())
    }

    /// Exactly `range.len` bytes; a missing or shorter file is an error.
    /// A cleaner job: its files opened here, in order, its work on the
    /// cleaner's thread. A file that will not open is the job's outcome.
    fn clean(&mut self, io: IoId, work: CleanerWork, completions: &Completions) {
        let dir = work.dir.clone();
        let live = (
            dir.clone(),
            work.segment_base,
            SegmentFile::Log,
            FileStage::Live,
        );
        let copy = (dir, work.segment_base, SegmentFile::Log, FileStage::Cleaned);
        let opened = self
            .open_clone(&live, false)
            .map_err(CleanerError::Read)
            .and_then(|(source, source_path)| {
                let (target, target_path) =
                    self.open_clone(&copy, true).map_err(CleanerError::Write)?;
                self.appended(&copy);
                Ok(OpenCleanerFiles {
                    source,
                    source_path,
                    target,
                    target_path,
                })
            });
        let files = match opened {
            Ok(files) => files,
            Err(e) => {
                warn!(error = ?e, "cleaner job: a file would not open");
                let outcome = CleanerOutcome {
                    bytes_read: 0,
                    result: Err(e),
                };
                let _ = completions.send(Input::CleanerDone { io, outcome });
                return;
            }
        };
        let cleaner = match &self.cleaner {
            Some(cleaner) => cleaner,
            None => self.cleaner.insert(
                CleanerThread::start(completions.clone()).expect("start the cleaner thread"),
            ),
        };
        cleaner.run(CleanerJob { io, work, files });
    }

    /// A descriptor of its own of one of the worker's files, and its path.
    fn open_clone(&mut self, key: &FileKey, create: bool) -> Result<(File, PathBuf), IoError> {
        let path = self.path(key)?;
        let file = self
            .file(key, create)
            .and_then(|f| f.try_clone())
            .map_err(|e| failed("open", &path, e))?;
        Ok((file, path))
    }

    fn read(&mut self, range: &FileRange) -> Result<Bytes, IoError> {
        let key = (
            range.dir.clone(),
            range.segment_base,
            range.file,
            FileStage::Live,
        );
        let path = self.path(&key)?;
        let file = self
            .file(&key, false)
            .map_err(|e| failed("open", &path, e))?;
        // The length first, so a range past the end allocates nothing.
        let file_len = file.metadata().map_err(|e| failed("stat", &path, e))?.len();
        let end = range.position.checked_add(range.len);
        if end.is_none_or(|end| end > file_len) {
            return Err(IoError(format!(
                "cannot read {} bytes at {} of {}: the file has {file_len}",
                range.len,
                range.position,
                path.display()
            )));
        }
        let len = usize::try_from(range.len).map_err(|_| IoError("a read too large".into()))?;
        let mut bytes = vec![0; len];
        file.read_exact_at(&mut bytes, range.position)
            .map_err(|e| failed("read", &path, e))?;
        Ok(Bytes::from(bytes))
    }

    /// Renames `from` (a file under one stage's name) to the `to` stage's
    /// name, replacing what is there. The descriptor and the dirtiness follow
    /// the inode: if its bytes were written since the last sync, the next
    /// sync fdatasyncs them under the new name, with the directory.
    fn rename(&mut self, from: &FileKey, to: FileStage) -> Result<(), IoError> {
        let (dir, base, kind, from_stage) = from.clone();
        if from_stage == to {
            return Err(IoError(format!(
                "a rename of {} onto itself",
                describe(from)
            )));
        }
        let to_key = (dir.clone(), base, kind, to);
        let from_path = self.path(from)?;
        let to_path = self.path(&to_key)?;
        if from_stage == FileStage::Live || to == FileStage::Live {
            // Before the name moves on: no pin from here takes the old file.
            self.reader.forget_segment(&dir, base);
        }
        fs::rename(&from_path, &to_path).map_err(|e| {
            IoError(format!(
                "cannot rename {} to {}: {e}",
                from_path.display(),
                to_path.display()
            ))
        })?;
        // The file replaced has no name any more: its descriptor closes and
        // its unsynced bytes are moot (a power cut before the next sync may
        // bring it back as it was last synced, which the core allows for).
        self.open.remove(&to_key);
        self.dirty_files.remove(&to_key);
        self.index_appends.remove(&to_key);
        if let Some(open) = self.open.remove(from) {
            self.open.insert(to_key.clone(), open);
        }
        // Appends left for an `All` sync go with the rename's sync.
        if self.dirty_files.remove(from) | self.index_appends.remove(from) {
            self.changed(to_key);
        }
        self.dirty_dirs
            .insert(partition_path(&self.logs_dir, &dir)?);
        Ok(())
    }

    /// Removes every file of the segment that is there, under every name.
    fn delete_segment(&mut self, dir: &PartitionDir, base: i64) -> Result<(), IoError> {
        self.reader.forget_segment(dir, base);
        self.remove_files(
            dir,
            base,
            &[FileStage::Live, FileStage::Cleaned, FileStage::Swap],
        )
    }

    /// Removes the segment's files under the names of `stages`, those there.
    fn remove_files(
        &mut self,
        dir: &PartitionDir,
        base: i64,
        stages: &[FileStage],
    ) -> Result<(), IoError> {
        let mut first_error = None;
        for kind in SegmentFile::ALL {
            for &stage in stages {
                let key = (dir.clone(), base, kind, stage);
                // Its pending writes die with it; there is nothing left to sync.
                self.open.remove(&key);
                self.dirty_files.remove(&key);
                self.index_appends.remove(&key);
                let path = self.path(&key)?;
                match fs::remove_file(&path) {
                    Ok(()) => {
                        self.dirty_dirs.insert(partition_path(&self.logs_dir, dir)?);
                    }
                    // Already gone is what was asked for (a repeated repair
                    // after a crash, or a file never written).
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        first_error.get_or_insert(failed("remove", &path, e));
                    }
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn delete_partition(&mut self, dir: &PartitionDir) -> Result<(), IoError> {
        let path = partition_path(&self.logs_dir, dir)?;
        self.reader.forget_partition(dir);
        self.open.retain(|(d, _, _, _), _| d != dir);
        self.dirty_files.retain(|(d, _, _, _)| d != dir);
        self.index_appends.retain(|(d, _, _, _)| d != dir);
        self.dirty_dirs.remove(&path);
        match fs::remove_dir_all(&path) {
            Ok(()) => {
                self.dirty_dirs.insert(self.logs_dir.clone());
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(failed("remove", &path, e)),
        }
    }

    /// The next sync makes the segment's files durable as if just written,
    /// and the entries naming them (the partition dir's, and the partition
    /// dir's own in `logs/`): a crashed process may have left any of them
    /// unsynced.
    /// The clean-shutdown file (`core_state::clean_shutdown` in the core
    /// says what it claims and why a power cut anywhere keeps the claim
    /// true): created empty, fsynced, then `logs/` fsynced, so that once
    /// this returns Ok a power cut leaves it. Kafka fsyncs the file and not
    /// its directory (`CleanShutdownFileHandler.write`).
    fn write_clean_shutdown(&mut self) -> Result<(), IoError> {
        let path = self.logs_dir.join(doze_core::io::CLEAN_SHUTDOWN_FILE_NAME);
        let file = File::create(&path).map_err(|e| failed("create", &path, e))?;
        file.sync_all().map_err(|e| failed("fsync", &path, e))?;
        crate::datadir::sync_dir(&self.logs_dir).map_err(|e| failed("fsync", &self.logs_dir, e))?;
        info!("clean-shutdown file written");
        Ok(())
    }

    /// Removes the clean-shutdown file and fsyncs `logs/`: once this
    /// returns Ok, no power cut brings it back. Absent already is fine (the
    /// fsync still runs: a removal by an earlier, killed start may not be
    /// durable yet).
    fn remove_clean_shutdown(&mut self) -> Result<(), IoError> {
        let path = self.logs_dir.join(doze_core::io::CLEAN_SHUTDOWN_FILE_NAME);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed("remove", &path, e)),
        }
        crate::datadir::sync_dir(&self.logs_dir).map_err(|e| failed("fsync", &self.logs_dir, e))
    }

    fn adopt(&mut self, dir: &PartitionDir, base: i64) -> Result<(), IoError> {
        let dir_path = partition_path(&self.logs_dir, dir)?;
        for kind in SegmentFile::ALL {
            let key = (dir.clone(), base, kind, FileStage::Live);
            if self.open.contains_key(&key) || self.path(&key)?.exists() {
                self.changed(key);
            }
        }
        self.dirty_dirs.insert(dir_path);
        self.dirty_dirs.insert(self.logs_dir.clone());
        Ok(())
    }

    /// The open file, opening it (and with `create`, creating it and its
    /// directory) on first use.
    fn file(&mut self, key: &FileKey, create: bool) -> io::Result<&mut File> {
        self.uses += 1;
        if !self.open.contains_key(key) {
            if self.open.len() >= self.open_files_max {
                self.evict_least_recently_used();
            }
            let file = self.open_file(key, create)?;
            self.open
                .insert(key.clone(), OpenFile { file, last_use: 0 });
        }
        let open = self.open.get_mut(key).expect("inserted above");
        open.last_use = self.uses;
        Ok(&mut open.file)
    }

    fn open_file(&mut self, key: &FileKey, create: bool) -> io::Result<File> {
        let dir_path = partition_path(&self.logs_dir, &key.0).map_err(|e| io::Error::other(e.0))?;
        let path = dir_path.join(key.3.file_name(key.2, key.1));
        // Append mode: every write lands at the current end, which is also
        // right after a `Truncate` has cut the file shorter. Readable too,
        // for `DiskOp::Read` (pread ignores the append mode).
        let mut options = OpenOptions::new();
        options.read(true).append(true);
        if !create {
            return options.open(&path);
        }
        // `create_new` tells whether the file is new, and a new file makes its
        // directory dirty: its entry must be synced too.
        match options.clone().create_new(true).open(&path) {
            Ok(file) => {
                self.dirty_dirs.insert(dir_path);
                Ok(file)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => options.open(&path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(&dir_path)?;
                self.dirty_dirs.insert(self.logs_dir.clone());
                let file = options.create_new(true).open(&path)?;
                self.dirty_dirs.insert(dir_path);
                Ok(file)
            }
            Err(e) => Err(e),
        }
    }

    /// Closes the least recently used files (`EVICTED_FRACTION` of those
    /// open), syncing the dirty ones first, together: a write-back error
    /// must surface through a `Sync`, and after the close no descriptor of
    /// ours would see it.
    fn evict_least_recently_used(&mut self) {
        let count = (self.open_files_max / EVICTED_FRACTION).max(1);
        let mut by_age: Vec<(u64, FileKey)> = self
            .open
            .iter()
            .map(|(key, open)| (open.last_use, key.clone()))
            .collect();
        if by_age.len() > count {
            by_age.select_nth_unstable_by_key(count - 1, |(last_use, _)| *last_use);
            by_age.truncate(count);
        }
        let mut dirty = Vec::new();
        for (_, key) in by_age {
            let open = self.open.remove(&key).expect("listed above");
            if self.dirty_files.remove(&key) | self.index_appends.remove(&key) {
                dirty.push((key, open.file));
            }
        }
        let files: Vec<&File> = dirty.iter().map(|(_, file)| file).collect();
        let synced = self.pool.sync_all(&files);
        for ((key, _), result) in dirty.iter().zip(synced) {
            if let Err(e) = result {
                let e = IoError(format!("cannot fdatasync {}: {e}", describe(key)));
                warn!(error = %e.0, "sync before close failed; the next sync will report it");
                self.error.get_or_insert(e);
            }
        }
        debug!(
            files = count,
            synced = dirty.len(),
            "closed least recently used segment files"
        );
    }

    /// Takes the dirty sets as a round for the syncer thread. Files are
    /// opened here, in order with the ops, so that a deletion queued after
    /// the sync cannot make the syncer miss a file it had to sync.
    fn take_round(&mut self, syncs: Vec<(IoId, Option<IoError>)>) -> SyncRound {
        let mut keys = mem::take(&mut self.dirty_files);
        if mem::replace(&mut self.round_scope, SyncScope::Logs) == SyncScope::All {
            keys.extend(self.index_appends.drain());
        }
        let mut files = Vec::with_capacity(keys.len());
        let mut opened_here = 0;
        let mut beyond = Vec::new();
        for key in keys {
            let file = match self.open.get(&key) {
                Some(open) => open
                    .file
                    .try_clone()
                    .map_err(|e| IoError(format!("cannot dup {}: {e}", describe(&key)))),
                None if opened_here < ROUND_FILES_OPENED_MAX => {
                    opened_here += 1;
                    self.path(&key)
                        .and_then(|path| File::open(&path).map_err(|e| failed("open", &path, e)))
                }
                None => {
                    beyond.push(key);
                    continue;
                }
            };
            files.push((key, file));
        }
        self.sync_beyond_round(&beyond, &mut files);
        let retry = mem::take(&mut *self.dirs_to_retry.lock().unwrap_or_else(|e| e.into_inner()));
        self.dirty_dirs.extend(retry);
        let dirs = mem::take(&mut self.dirty_dirs).into_iter().collect();
        SyncRound {
            files,
            dirs,
            syncs,
            log_appends: mem::take(&mut self.log_appends),
            log_append_bytes: mem::take(&mut self.log_append_bytes),
        }
    }

    /// Syncs here, `ROUND_FILES_OPENED_MAX` at a time, the dirty files a
    /// round did not open (`take_round`), before the round is handed over;
    /// those that fail join the round with their errors, which its `Sync`s
    /// then report.
    fn sync_beyond_round(
        &mut self,
        beyond: &[FileKey],
        files: &mut Vec<(FileKey, Result<File, IoError>)>,
    ) {
        for chunk in beyond.chunks(ROUND_FILES_OPENED_MAX) {
            let mut opened = Vec::with_capacity(chunk.len());
            for key in chunk {
                match self
                    .path(key)
                    .and_then(|path| File::open(&path).map_err(|e| failed("open", &path, e)))
                {
                    Ok(file) => opened.push((key, file)),
                    Err(e) => files.push((key.clone(), Err(e))),
                }
            }
            let refs: Vec<&File> = opened.iter().map(|(_, file)| file).collect();
            let synced = self.pool.sync_all(&refs);
            for ((key, _), result) in opened.iter().zip(synced) {
                if let Err(e) = result {
                    let e = IoError(format!("cannot fdatasync {}: {e}", describe(key)));
                    files.push(((*key).clone(), Err(e)));
                }
            }
        }
    }

    /// The final round, on this thread: every dirty file, then every dirty
    /// directory. All are attempted even after a failure; the first failure
    /// is returned. Dirty files are cleared either way: after a failed fsync
    /// the kernel may have dropped the dirty pages, so a retry proves nothing,
    /// and the core answers a failed sync by rewriting (truncating) what it
    /// cannot trust. A directory whose fsync failed stays dirty
    /// (`dirs_to_retry`): its removals are not the core's to rewrite.
    fn sync_dirty(&mut self) -> Result<(), IoError> {
        self.round_scope = SyncScope::All;
        let round = self.take_round(Vec::new());
        sync_round(&round, &self.dirs_to_retry, &self.pool)
    }

    fn path(&self, key: &FileKey) -> Result<PathBuf, IoError> {
        staged_path(&self.logs_dir, &key.0, key.1, key.2, key.3)
    }

    /// The error of `what` failing on the file of `key`, naming its path
    /// (made only now: appends name no path when they succeed).
    fn failed_at(&self, what: &str, key: &FileKey, e: io::Error) -> IoError {
        match self.path(key) {
            Ok(path) => failed(what, &path, e),
            Err(bad_name) => bad_name,
        }
    }
}

/// Fsyncs a round and reports its `Sync`s, in order: on the syncer thread,
/// or on the worker's own (`limits::DISK_INLINE_SYNC_BYTES_MAX`).
fn finish_round(
    round: SyncRound,
    completions: &Completions,
    dirs_to_retry: &Mutex<Vec<PathBuf>>,
    pool: &SyncPool,
    metrics: &NetMetrics,
) {
    let started = Instant::now();
    let synced = sync_round(&round, dirs_to_retry, pool);
    let elapsed = started.elapsed();
    metrics.group_commit(elapsed, round.log_appends, round.log_append_bytes);
    let (files, dirs) = (round.files.len(), round.dirs.len());
    let bytes = round.log_append_bytes;
    for (io, earlier) in round.syncs {
        let result = match (earlier, &synced) {
            (Some(e), _) => Err(e),
            (None, Err(e)) => Err(e.clone()),
            (None, Ok(())) => Ok(()),
        };
        // Handed to the core here (`Completions::deliver`): the writes it
        // made durable are answered without a trip through the broker task.
        let _ = completions.deliver(Input::SyncDone { io, result });
    }
    // After the answers: a debug line (which `make bench` reads) is not
    // on the way of the commits it reports.
    debug!(
        files,
        dirs,
        bytes,
        elapsed_us = elapsed.as_micros() as u64,
        "synced"
    );
}

/// Every fsync of a round is attempted even after a failure; the first
/// failure is what the round's syncs report (see `Disk::sync_dirty`).
fn sync_round(
    round: &SyncRound,
    dirs_to_retry: &Mutex<Vec<PathBuf>>,
    pool: &SyncPool,
) -> Result<(), IoError> {
    let opened: Vec<(&FileKey, &File)> = round
        .files
        .iter()
        .filter_map(|(key, file)| file.as_ref().ok().map(|f| (key, f)))
        .collect();
    let files: Vec<&File> = opened.iter().map(|(_, f)| *f).collect();
    let synced = pool.sync_all(&files);
    let results = round
        .files
        .iter()
        .filter_map(|(_, file)| file.as_ref().err().cloned().map(Err))
        .chain(opened.iter().zip(synced).map(|((key, _), r)| {
            r.map_err(|e| IoError(format!("cannot fdatasync {}: {e}", describe(key))))
        }));
    let mut first_error = results.into_iter().find_map(Result::err);
    for chunk in round.dirs.chunks(ROUND_FILES_OPENED_MAX) {
        let opened: Vec<(&PathBuf, io::Result<File>)> =
            chunk.iter().map(|dir| (dir, File::open(dir))).collect();
        let refs: Vec<&File> = opened.iter().filter_map(|(_, d)| d.as_ref().ok()).collect();
        let mut synced = pool.fsync_dirs(&refs).into_iter();
        for (dir, opened) in opened {
            let result = match opened {
                Ok(_) => synced.next().expect("one result per directory opened"),
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                first_error.get_or_insert(failed("fsync", dir, e));
                dirs_to_retry
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(dir.clone());
            }
        }
    }
    match first_error {
        Some(e) => {
            warn!(error = %e.0, "sync failed");
            Err(e)
        }
        None => Ok(()),
    }
}

fn describe(key: &FileKey) -> String {
    format!("{}/{}", key.0.dir_name(), key.3.file_name(key.2, key.1))
}

fn failed(what: &str, path: &Path, e: io::Error) -> IoError {
    IoError(format!("cannot {what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filereader::SpliceError;
    use crate::storage::{Frame, FrameReadError, ReadyFrame};
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    fn temp_logs(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("doze-disk-test-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn start(logs: &Path, open_files_max: usize) -> (DiskQueue, UnboundedReceiver<Input>, Join) {
        let (queue, done, thread, _) = start_counted(logs, open_files_max);
        (queue, done, thread)
    }

    fn start_counted(
        logs: &Path,
        open_files_max: usize,
    ) -> (DiskQueue, UnboundedReceiver<Input>, Join, Arc<Backlog>) {
        let (tx, done) = unbounded_channel();
        let tx: Completions = tx.into();
        let reader = FileReader::new(logs.to_path_buf());
        let backlog = Arc::new(Backlog::default());
        let (queue, thread) = DiskWorker::spawn_with(
            logs.to_path_buf(),
            tx,
            reader,
            open_files_max,
            Arc::clone(&backlog),
            Arc::default(),
        )
        .unwrap()
        .into_parts();
        (queue, done, thread, backlog)
    }

    type Join = thread::JoinHandle<Result<(), IoError>>;

    fn append(dir: &PartitionDir, base: i64, file: SegmentFile, bytes: &'static [u8]) -> DiskOp {
        DiskOp::Append {
            dir: dir.clone(),
            segment_base: base,
            file,
            bytes: Bytes::from_static(bytes),
        }
    }

    fn log(dir: &PartitionDir, base: i64, bytes: &'static [u8]) -> DiskOp {
        append(dir, base, SegmentFile::Log, bytes)
    }

    /// A sync of every scope (what the tests before `SyncScope` meant).
    fn full_sync(io: IoId) -> DiskOp {
        DiskOp::Sync {
            io,
            scope: SyncScope::All,
        }
    }

    fn truncate(dir: &PartitionDir, base: i64, file: SegmentFile, len: u64) -> DiskOp {
        DiskOp::Truncate {
            dir: dir.clone(),
            segment_base: base,
            file,
            len,
        }
    }

    fn read(io: IoId, dir: &PartitionDir, base: i64, position: u64, len: u64) -> DiskOp {
        DiskOp::Read {
            io,
            range: FileRange {
                dir: dir.clone(),
                segment_base: base,
                file: SegmentFile::Log,
                position,
                len,
            },
        }
    }

    fn path(logs: &Path, dir: &str, base: i64, file: SegmentFile) -> PathBuf {
        logs.join(dir).join(file.file_name(base))
    }

    fn sync_result(done: &mut UnboundedReceiver<Input>, want_io: IoId) -> Result<(), IoError> {
        match done.blocking_recv() {
            Some(Input::SyncDone { io, result }) => {
                assert_eq!(io, want_io, "syncs complete in order");
                result
            }
            _ => panic!("expected SyncDone {want_io}"),
        }
    }

    fn read_result(done: &mut UnboundedReceiver<Input>, want_io: IoId) -> Result<Bytes, IoError> {
        match done.blocking_recv() {
            Some(Input::ReadDone { io, result }) => {
                assert_eq!(io, want_io, "reads complete in order");
                result
            }
            _ => panic!("expected ReadDone {want_io}"),
        }
    }

    /// A worker's queue and thread, its completions, and its metrics.
    type Metered = (
        DiskQueue,
        thread::JoinHandle<Result<(), IoError>>,
        UnboundedReceiver<Input>,
        Arc<NetMetrics>,
    );

    /// A worker on `logs` with metrics of its own to read back.
    fn spawn_metered(logs: &Path) -> Metered {
        let metrics = Arc::new(NetMetrics::default());
        let (tx, done) = unbounded_channel();
        let tx: Completions = tx.into();
        let (queue, thread) = DiskWorker::spawn_with(
            logs.to_path_buf(),
            tx,
            FileReader::new(logs.to_path_buf()),
            OPEN_FILES_MAX,
            Arc::default(),
            Arc::clone(&metrics),
        )
        .unwrap()
        .into_parts();
        (queue, thread, done, metrics)
    }

    /// A round starts when the worker reaches its Sync: appends queued
    /// behind the Sync are the next round's, not written into this one
    /// first. (Gathering them delayed rounds by seconds under a producer
    /// that kept the queue full.) The three ops are one job, so the append
    /// after the Sync is queued when the worker reaches it.
    #[test]
    fn a_sync_round_covers_only_what_came_before_its_sync() {
        let logs = temp_logs("round-at-sync");
        let (queue, thread, mut done, metrics) = spawn_metered(&logs);
        let p = PartitionDir::new("r", 0);
        queue
            .submit_all(vec![
                log(&p, 0, b"before"),
                full_sync(1),
                log(&p, 0, b"after the sync"),
            ])
            .unwrap();
        assert_eq!(sync_result(&mut done, 1), Ok(()));
        assert_eq!(
            metrics.group_commit_totals(),
            (1, 1, 6),
            "the first round covers the append before its Sync alone"
        );
        queue.submit(full_sync(2)).unwrap();
        assert_eq!(sync_result(&mut done, 2), Ok(()));
        assert_eq!(metrics.group_commit_totals(), (2, 2, 20));
        drop(queue);
        thread.join().unwrap().unwrap();
        fs::remove_dir_all(&logs).unwrap();
    }

    #[test]
    fn each_group_commit_is_measured_with_the_log_appends_it_covered() {
        let logs = temp_logs("group-commit-metrics");
        let (queue, thread, mut done, metrics) = spawn_metered(&logs);
        let p = PartitionDir::new("m", 0);
        queue.submit(log(&p, 0, b"first")).unwrap();
        queue.submit(log(&p, 0, b"second")).unwrap();
        // Index entries are bookkeeping, not appends a client made.
        queue
            .submit(append(&p, 0, SegmentFile::OffsetIndex, b"12345678"))
            .unwrap();
        queue.submit(full_sync(1)).unwrap();
        assert_eq!(sync_result(&mut done, 1), Ok(()));
        assert_eq!(metrics.group_commit_totals(), (1, 2, 11));
        queue.submit(full_sync(2)).unwrap();
        assert_eq!(sync_result(&mut done, 2), Ok(()));
        assert_eq!(
            metrics.group_commit_totals(),
            (2, 2, 11),
            "a round with nothing appended covers nothing"
        );
        drop(queue);
        thread.join().unwrap().unwrap();
        fs::remove_dir_all(&logs).unwrap();
    }

    #[test]
    fn the_backlog_counts_appends_until_they_are_written() {
        let logs = temp_logs("backlog");
        let (queue, mut done, thread, backlog) = start_counted(&logs, OPEN_FILES_MAX);
        let p = PartitionDir::new("orders", 0);
        queue.submit(log(&p, 0, b"hello")).unwrap();
        queue.submit(truncate(&p, 0, SegmentFile::Log, 5)).unwrap();
        assert!(
            backlog.queued_bytes() <= 5,
            "only appends count, until written"
        );
        queue.submit(full_sync(1)).unwrap();
        assert_eq!(sync_result(&mut done, 1), Ok(()));
        assert_eq!(
            backlog.queued_bytes(),
            0,
            "written appends are no longer queued"
        );
        // An append to a file that cannot be created still leaves the queue.
        let bad = PartitionDir::new("orders", 1);
        fs::write(logs.join(bad.dir_name()), b"a file, not a directory").unwrap();
        queue.submit(log(&bad, 0, b"lost")).unwrap();
        queue.submit(full_sync(2)).unwrap();
        assert!(sync_result(&mut done, 2).is_err());
        assert_eq!(
            backlog.queued_bytes(),
            0,
            "a failed append is no longer queued"
        );
        drop(queue);
        let _ = thread.join();
    }

    #[test]
    fn ops_queued_together_run_in_order() {
        let logs = temp_logs("together");
        let (queue, mut done, thread) = start(&logs, OPEN_FILES_MAX);
        let p = PartitionDir::new("t", 0);
        queue.submit_all(Vec::new()).unwrap();
        queue
            .submit_all(vec![
                log(&p, 0, b"hello"),
                full_sync(1),
                truncate(&p, 0, SegmentFile::Log, 4),
                log(&p, 0, b"!"),
                append(&p, 0, SegmentFile::OffsetIndex, b"12345678"),
                full_sync(2),
            ])
            .unwrap();
        queue.submit(log(&p, 0, b"?")).unwrap();
        queue.submit_all(vec![full_sync(3)]).unwrap();
        for io in 1..=3 {
            assert_eq!(sync_result(&mut done, io), Ok(()));
        }
        let read = |kind| fs::read(path(&logs, "t-0", 0, kind)).unwrap();
        assert_eq!(read(SegmentFile::Log), b"hell!?");
        assert_eq!(read(SegmentFile::OffsetIndex), b"12345678");
        drop(queue);
        assert_eq!(thread.join().unwrap(), Ok(()));
        fs::remove_dir_all(&logs).unwrap();
    }

    #[test]
    fn append_sync_truncate_delete() {
        let logs = temp_logs("ops");
        let (queue, mut done, thread) = start(&logs, OPEN_FILES_MAX);
        let p = PartitionDir::new("orders", 0);
        let seg0 = path(&logs, "orders-0", 0, SegmentFile::Log);
        let seg100 = path(&logs, "orders-0", 100, SegmentFile::Log);

        queue.submit(log(&p, 0, b"hello")).unwrap();
        queue.submit(log(&p, 0, b" world")).unwrap();
        queue.submit(full_sync(1)).unwrap();
        assert_eq!(sync_result(&mut done, 1), Ok(()));
        assert_eq!(fs::read(&seg0).unwrap(), b"hello world");

        queue.submit(truncate(&p, 0, SegmentFile::Log, 5)).unwrap();
        queue.submit(log(&p, 0, b"!")).unwrap();
        queue.submit(full_sync(2)).unwrap();
        assert_eq!(sync_result(&mut done, 2), Ok(()));
        assert_eq!(fs::read(&seg0).unwrap(), b"hello!");

        queue.submit(log(&p, 100, b"x")).unwrap();
        queue
            .submit(DiskOp::DeleteSegment {
                dir: p.clone(),
                segment_base: 0,
            })
            .unwrap();
        queue
            .submit(DiskOp::DeleteSegment {
                dir: p.clone(),
                segment_base: 7,
            })
            .unwrap(); // absent: fine
        queue.submit(full_sync(3)).unwrap();
        assert_eq!(sync_result(&mut done, 3), Ok(()));
        assert!(!seg0.exists());
        assert_eq!(fs::read(&seg100).unwrap(), b"x");

        queue
            .submit(DiskOp::DeletePartition { dir: p.clone() })
            .unwrap();
        queue
            .submit(DiskOp::DeletePartition {
                dir: PartitionDir::new("never", 1),
            })
            .unwrap();
        queue.submit(full_sync(4)).unwrap();
        assert_eq!(sync_result(&mut done, 4), Ok(()));
        assert!(!logs.join("orders-0").exists());

        // A failed op is reported by the next sync only, then forgotten. A
        // file where the partition directory should be makes it fail.
        fs::write(logs.join("blocked-0"), b"not a directory").unwrap();
        queue
            .submit(log(&PartitionDir::new("blocked", 0), 0, b"x"))
            .unwrap();
        queue.submit(full_sync(5)).unwrap();
        queue.submit(full_sync(6)).unwrap();
        assert!(sync_result(&mut done, 5).is_err());
        assert_eq!(sync_result(&mut done, 6), Ok(()));

        // A name that would escape logs/ is refused, not acted on.
        let evil = PartitionDir::new("../../etc", 0);
        queue.submit(DiskOp::DeletePartition { dir: evil }).unwrap();
        queue.submit(full_sync(7)).unwrap();
        assert!(sync_result(&mut done, 7).is_err());

        drop(queue);
        assert_eq!(thread.join().unwrap(), Ok(()));
        fs::remove_dir_all(&logs).unwrap();
    }

    #[test]
    fn file_kinds_are_created_cut_and_deleted_together() {
        let logs = temp_logs("kinds");
        let (queue, mut done, thread) = start(&logs, OPEN_FILES_MAX);
        let p = PartitionDir::new("t", 2);

        // An empty append creates the file; a truncate creates an absent one
        // (its directory too) at the length asked.
        queue
            .submit(append(&p, 50, SegmentFile::OffsetIndex, b""))
            .unwrap();
        queue
            .submit(append(&p, 50, SegmentFile::TimeIndex, b"0123456789ab"))
            .unwrap();
        queue
            .submit(truncate(
                &PartitionDir::new("u", 0),
                0,
                SegmentFile::TxnIndex,
                3,
            ))
            .unwrap();
        queue
            .submit(truncate(&p, 50, SegmentFile::TimeIndex, 4))
            .unwrap();
        queue.submit(log(&p, 50, b"batches")).unwrap();
        queue.submit(full_sync(1)).unwrap();
        assert_eq!(sync_result(&mut done, 1), Ok(()));
        assert_eq!(
            fs::read(path(&logs, "t-2", 50, SegmentFile::OffsetIndex)).unwrap(),
            b""
        );
        assert_eq!(
            fs::read(path(&logs, "t-2", 50, SegmentFile::TimeIndex)).unwrap(),
            b"0123"
        );
        assert_eq!(
            fs::read(path(&logs, "u-0", 0, SegmentFile::TxnIndex)).unwrap(),
            [0, 0, 0]
        );
        assert!(!path(&logs, "t-2", 50, SegmentFile::TxnIndex).exists());

        // DeleteSegment removes every kind that is there, and only that
        // segment's.
        queue.submit(log(&p, 80, b"next")).unwrap();
        queue
            .submit(DiskOp::DeleteSegment {
                dir: p.clone(),
                segment_base: 50,
            })
            .unwrap();
        queue.submit(full_sync(2)).unwrap();
        assert_eq!(sync_result(&mut done, 2), Ok(()));
        let mut left: Vec<_> = fs::read_dir(logs.join("t-2"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, vec![SegmentFile::Log.file_name(80)]);

        drop(queue);
        assert_eq!(thread.join().unwrap(), Ok(()));
        fs::remove_dir_all(&logs).unwrap();
    }

    #[test]
    fn reads_see_every_earlier_op() {
        let logs = temp_logs("read");
        let (queue, mut done, thread) = start(&logs, OPEN_FILES_MAX);
        let p = PartitionDir::new("r", 0);

        // Unsynced bytes are read back (they are in the page cache), and a
        // cut is seen by the read after it.
        queue.submit(log(&p, 0, b"abcdef")).unwrap();
        queue.submit(read(1, &p, 0, 1, 3)).unwrap();
        queue.submit(truncate(&p, 0, SegmentFile::Log, 2)).unwrap();
        queue.submit(read(2, &p, 0, 0, 3)).unwrap(); // short: an error
        queue.submit(read(3, &p, 0, 0, 2)).unwrap();
        queue.submit(read(4, &p, 9, 0, 1)).unwrap(); // no such file
        queue.submit(read(5, &p, 0, u64::MAX, 2)).unwrap(); // past any end
        queue.submit(read(6, &p, 0, 2, 0)).unwrap(); // empty, at the end
        assert_eq!(read_result(&mut done, 1).unwrap(), &b"bcd"[..]);
        assert!(read_result(&mut done, 2).is_err());
        assert_eq!(read_result(&mut done, 3).unwrap(), &b"ab"[..]);
        assert!(read_result(&mut done, 4).is_err());
        assert!(read_result(&mut done, 5).is_err());
        assert_eq!(read_result(&mut done, 6).unwrap(), &b""[..]);
        assert!(
            !path(&logs, "r-0", 9, SegmentFile::Log).exists(),
            "a read creates nothing"
        );

        // A failed read is its own answer: the next sync is not failed by it.
        queue.submit(full_sync(7)).unwrap();
        assert_eq!(sync_result(&mut done, 7), Ok(()));

        drop(queue);
        assert_eq!(thread.join().unwrap(), Ok(()));
        fs::remove_dir_all(&logs).unwrap();
    }

    /// A worker on `logs`, at most `open_files_max` files open, driven by
    /// hand (`execute`, `take_round`) rather than through its queue.
    fn hand_driven(logs: &Path, open_files_max: usize) -> Disk {
        let logs = logs.to_path_buf();
        Disk::new(
            logs.clone(),
            FileReader::new(logs),
            open_files_max,
            Arc::default(),
        )
    }

    #[test]
    fn adopted_files_are_synced_by_the_next_sync() {
        let logs = temp_logs("adopt");
        // What a crashed process left: a partition with a log and one index.
        fs::create_dir_all(logs.join("a-0")).unwrap();
        fs::write(path(&logs, "a-0", 0, SegmentFile::Log), b"left").unwrap();
        fs::write(path(&logs, "a-0", 0, SegmentFile::OffsetIndex), b"idx").unwrap();
        let p = PartitionDir::new("a", 0);
        let adopt = |segment_base| DiskOp::Adopt {
            dir: p.clone(),
            segment_base,
        };

        // What the next round syncs, looked at on a worker's state directly:
        // the files that are there, their directory and logs/.
        let mut disk = hand_driven(&logs, 4);
        let (tx, _rx) = unbounded_channel();
        let tx: Completions = tx.into();
        let mut syncs = Vec::new();
        disk.execute(adopt(0), &mut syncs, &tx);
        disk.execute(adopt(99), &mut syncs, &tx); // nothing there: nothing to sync
        assert!(disk.error.is_none());
        let round = disk.take_round(syncs);
        let mut names: Vec<_> = round.files.iter().map(|(name, _)| describe(name)).collect();
        names.sort();
        assert_eq!(
            names,
            vec![
                format!("a-0/{}", SegmentFile::OffsetIndex.file_name(0)),
                format!("a-0/{}", SegmentFile::Log.file_name(0)),
            ]
        );
        assert!(round.files.iter().all(|(_, file)| file.is_ok()));
        let mut dirs = round.dirs.clone();
        dirs.sort();
        assert_eq!(dirs, vec![logs.clone(), logs.join("a-0")]);

        // And through the worker, the sync after them succeeds.
        let (queue, mut done, thread) = start(&logs, OPEN_FILES_MAX);
        queue.submit(adopt(0)).unwrap();
        queue.submit(full_sync(1)).unwrap();
        assert_eq!(sync_result(&mut done, 1), Ok(()));
        drop(queue);
        assert_eq!(thread.join().unwrap(), Ok(()));
        fs::remove_dir_all(&logs).unwrap();
    }

    #[test]
    fn many_files_few_open() {
        let logs = temp_logs("lru");
        let (queue, mut done, thread) = start(&logs, 2);
        // Round-robin over more files (of every kind) than open files, with
        // reads between and syncs queued back to back so that rounds cover
        // several of them.
        let mut io = 0;
        for _ in 0..3u64 {
            for part in 0..3 {
                let p = PartitionDir::new("t", part);
                for kind in SegmentFile::ALL {
                    queue.submit(append(&p, 0, kind, b"ab")).unwrap();
                }
                io += 1;
                queue.submit(full_sync(io)).unwrap();
                io += 1;
                queue.submit(read(io, &p, 0, 0, 2)).unwrap();
            }
        }
        let mut synced = 0;
        for _ in 0..io {
            match done.blocking_recv() {
                Some(Input::SyncDone { result, .. }) => {
                    assert_eq!(result, Ok(()));
                    synced += 1;
                }
                Some(Input::ReadDone { result, .. }) => {
                    assert_eq!(result.unwrap(), &b"ab"[..]);
                }
                _ => panic!("expected a completion"),
            }
        }
        assert_eq!(synced, 9);
        for part in 0..3 {
            for kind in SegmentFile::ALL {
                let file = path(&logs, &format!("t-{part}"), 0, kind);
                assert_eq!(fs::read(file).unwrap(), b"ababab");
            }
        }
        drop(queue);
        assert_eq!(thread.join().unwrap(), Ok(()));
        fs::remove_dir_all(&logs).unwrap();
    }

    /// At `OPEN_FILES_MAX`, the least recently used eighth is closed
    /// together, the dirty ones fdatasynced first (no longer dirty, and
    /// nothing lost), the clean ones just closed.
    #[test]
    fn open_files_at_the_limit_close_an_eighth_together_syncing_the_dirty_ones() {
        let logs = temp_logs("evict-batch");
        let max = 16;
        let mut disk = hand_driven(&logs, max);
        let (tx, _rx) = unbounded_channel();
        let tx: Completions = tx.into();
        let mut syncs = Vec::new();
        let key = |part: i32| {
            (
                PartitionDir::new("e", part),
                0,
                SegmentFile::Log,
                FileStage::Live,
            )
        };
        for part in 0..max as i32 {
            let p = PartitionDir::new("e", part);
            disk.backlog.add(1);
            disk.execute(log(&p, 0, b"x"), &mut syncs, &tx);
        }
        // The two oldest become clean: a round takes every dirty file.
        drop(disk.take_round(Vec::new()));
        for part in 2..max as i32 {
            let p = PartitionDir::new("e", part);
            disk.backlog.add(1);
            disk.execute(log(&p, 0, b"y"), &mut syncs, &tx);
        }
        assert_eq!(disk.open.len(), max);
        assert_eq!(disk.dirty_files.len(), max - 2);
        // One more file: an eighth (2) goes, the least recently used: e-0
        // and e-1, clean. Then two more: e-2 and e-3 go, dirty, synced.
        for part in max as i32..max as i32 + 3 {
            let p = PartitionDir::new("e", part);
            disk.backlog.add(1);
            disk.execute(log(&p, 0, b"z"), &mut syncs, &tx);
        }
        assert!(disk.error.is_none(), "{:?}", disk.error);
        assert_eq!(disk.open.len(), max - 1);
        for part in 0..4 {
            assert!(!disk.open.contains_key(&key(part)), "e-{part} closed");
            assert!(!disk.dirty_files.contains(&key(part)), "e-{part} not dirty");
        }
        assert!(disk.open.contains_key(&key(4)));
        assert!(disk.dirty_files.contains(&key(4)));
        assert_eq!(
            fs::read(path(&logs, "e-2", 0, SegmentFile::Log)).unwrap(),
            b"xy"
        );
        fs::remove_dir_all(&logs).unwrap();
    }

    /// A boot round adopts more files than it opens at once
    /// (`ROUND_FILES_OPENED_MAX`): the rest are synced before the round is
    /// handed over, a batch at a time, and a failure among them is the
    /// round's to report.
    #[test]
    fn a_round_with_more_unopened_files_than_it_opens_syncs_them_all_and_reports_a_failure() {
        let logs = temp_logs("round-beyond");
        let partitions = ROUND_FILES_OPENED_MAX + 44;
        for part in 0..partitions {
            let dir = logs.join(format!("b-{part}"));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join(SegmentFile::Log.file_name(0)), b"left").unwrap();
        }
        let adopt = |part: usize| DiskOp::Adopt {
            dir: PartitionDir::new("b", part as i32),
            segment_base: 0,
        };
        let mut disk = hand_driven(&logs, 4);
        let (tx, _rx) = unbounded_channel();
        let tx: Completions = tx.into();
        let mut syncs = Vec::new();
        for part in 0..partitions {
            disk.execute(adopt(part), &mut syncs, &tx);
        }
        assert_eq!(disk.dirty_files.len(), partitions);
        let round = disk.take_round(vec![(1, None)]);
        assert_eq!(
            round.files.len(),
            ROUND_FILES_OPENED_MAX,
            "the rest synced here"
        );
        assert!(round.files.iter().all(|(_, file)| file.is_ok()));
        assert!(disk.dirty_files.is_empty());
        assert_eq!(round.dirs.len(), partitions + 1, "each directory and logs/");

        // Through the worker: one file gone after its adoption fails the
        // sync, wherever it falls (in the round or beyond it).
        let (queue, mut done, thread) = start(&logs, 4);
        for part in 0..partitions {
            queue.submit(adopt(part)).unwrap();
        }
        queue.submit(full_sync(1)).unwrap();
        assert_eq!(sync_result(&mut done, 1), Ok(()));
        for part in 0..partitions {
            queue.submit(adopt(part)).unwrap();
        }
        // The file goes once the adoptions are carried out: a read queued
        // behind them answers first.
        queue
            .submit(read(2, &PartitionDir::new("b", 0), 0, 0, 4))
            .unwrap();
        assert_eq!(read_result(&mut done, 2).unwrap(), &b"left"[..]);
        let gone = format!("b-{}", partitions - 1);
        fs::remove_file(path(&logs, &gone, 0, SegmentFile::Log)).unwrap();
        queue.submit(full_sync(3)).unwrap();
        let result = sync_result(&mut done, 3);
        assert!(
            result.as_ref().is_err_and(|e| e.0.contains(&gone)),
            "{result:?}"
        );
        drop(queue);
        let _ = thread.join().unwrap();
        fs::remove_dir_all(&logs).unwrap();
    }

    #[test]
    fn unsynced_appends_are_synced_at_shutdown() {
        let logs = temp_logs("shutdown");
        let (queue, _done, thread) = start(&logs, OPEN_FILES_MAX);
        let p = PartitionDir::new("t", 0);
        queue.submit(log(&p, 0, b"tail")).unwrap();
        queue
            .submit(append(&p, 0, SegmentFile::TxnIndex, b"txn"))
            .unwrap();
        drop(queue);
        assert_eq!(thread.join().unwrap(), Ok(()));
        assert_eq!(
            fs::read(path(&logs, "t-0", 0, SegmentFile::Log)).unwrap(),
            b"tail"
        );
        assert_eq!(
            fs::read(path(&logs, "t-0", 0, SegmentFile::TxnIndex)).unwrap(),
            b"txn"
        );
        fs::remove_dir_all(&logs).unwrap();
    }

    fn cleaned(dir: &PartitionDir, base: i64, file: SegmentFile, bytes: &'static [u8]) -> DiskOp {
        DiskOp::AppendCleaned {
            dir: dir.clone(),
            segment_base: base,
            file,
            bytes: Bytes::from_static(bytes),
        }
    }

    fn rename(
        dir: &PartitionDir,
        base: i64,
        file: SegmentFile,
        from: FileStage,
        to: FileStage,
    ) -> DiskOp {
        DiskOp::Rename {
            dir: dir.clone(),
            segment_base: base,
            file,
            from,
            to,
        }
    }

    fn staged(logs: &Path, dir: &str, base: i64, file: SegmentFile, stage: FileStage) -> PathBuf {
        logs.join(dir).join(stage.file_name(file, base))
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn cleaned_files_are_written_swapped_in_and_discarded() {
        use FileStage::{Cleaned, Live, Swap};
        let logs = temp_logs("clean");
        let (queue, mut done, thread, backlog) = start_counted(&logs, OPEN_FILES_MAX);
        let p = PartitionDir::new("c", 0);
        let live_log = path(&logs, "c-0", 0, SegmentFile::Log);

        // The live segment, then its cleaned copy beside it: the live file
        // is untouched, and the cleaner's bytes count in the backlog until
        // written.
        queue.submit(log(&p, 0, b"old-old-old")).unwrap();
        queue
            .submit(cleaned(&p, 0, SegmentFile::Log, b"new"))
            .unwrap();
        queue
            .submit(cleaned(&p, 0, SegmentFile::Log, b"er"))
            .unwrap();
        queue
            .submit(cleaned(&p, 0, SegmentFile::OffsetIndex, b"idx"))
            .unwrap();
        queue.submit(full_sync(1)).unwrap();
        assert_eq!(sync_result(&mut done, 1), Ok(()));
        assert_eq!(backlog.queued_bytes(), 0);
        assert_eq!(fs::read(&live_log).unwrap(), b"old-old-old");
        assert_eq!(
            fs::read(staged(&logs, "c-0", 0, SegmentFile::Log, Cleaned)).unwrap(),
            b"newer"
        );

        // Cleaned -> swap (the .log last), then swap -> live (the .log last):
        // the live files are replaced, and nothing staged is left.
        for (from, to) in [(Cleaned, Swap), (Swap, Live)] {
            queue
                .submit(rename(&p, 0, SegmentFile::OffsetIndex, from, to))
                .unwrap();
            queue
                .submit(rename(&p, 0, SegmentFile::Log, from, to))
                .unwrap();
        }
        queue.submit(full_sync(2)).unwrap();
        assert_eq!(sync_result(&mut done, 2), Ok(()));
        assert_eq!(fs::read(&live_log).unwrap(), b"newer");
        assert_eq!(
            listing(&logs.join("c-0")),
            vec![
                SegmentFile::OffsetIndex.file_name(0),
                SegmentFile::Log.file_name(0)
            ]
        );
        // The worker's own descriptor of the live name is the new file's:
        // an append and a read after the swap see it, not the old one.
        queue.submit(log(&p, 0, b"+")).unwrap();
        queue.submit(read(3, &p, 0, 0, 6)).unwrap();
        assert_eq!(read_result(&mut done, 3).unwrap(), &b"newer+"[..]);

        // A renamed source that is not there: reported by the next sync
        // (and only by it), and nothing is replaced.
        queue
            .submit(rename(&p, 0, SegmentFile::Log, Swap, Live))
            .unwrap();
        queue.submit(full_sync(4)).unwrap();
        queue.submit(full_sync(5)).unwrap();
        let missing = sync_result(&mut done, 4).unwrap_err();
        assert!(missing.0.contains("rename"), "{}", missing.0);
        assert_eq!(sync_result(&mut done, 5), Ok(()));
        assert_eq!(fs::read(&live_log).unwrap(), b"newer+");

        // An abandoned cleaning: .cleaned and .swap files removed, the live
        // ones kept; absent ones are fine.
        queue
            .submit(cleaned(&p, 0, SegmentFile::Log, b"x"))
            .unwrap();
        queue
            .submit(cleaned(&p, 0, SegmentFile::TimeIndex, b"t"))
            .unwrap();
        queue
            .submit(rename(&p, 0, SegmentFile::TimeIndex, Cleaned, Swap))
            .unwrap();
        queue.submit(full_sync(6)).unwrap();
        assert_eq!(sync_result(&mut done, 6), Ok(()));
        assert_eq!(listing(&logs.join("c-0")).len(), 4);
        let discard = DiskOp::DiscardStaged {
            dir: p.clone(),
            segment_base: 0,
        };
        queue.submit(discard.clone()).unwrap();
        queue.submit(discard).unwrap();
        queue.submit(full_sync(7)).unwrap();
        assert_eq!(sync_result(&mut done, 7), Ok(()));
        assert_eq!(
            listing(&logs.join("c-0")),
            vec![
                SegmentFile::OffsetIndex.file_name(0),
                SegmentFile::Log.file_name(0)
            ]
        );

        // A segment deletion takes its staged files with it, and only its.
        queue
            .submit(cleaned(&p, 0, SegmentFile::Log, b"x"))
            .unwrap();
        queue
            .submit(cleaned(&p, 0, SegmentFile::TxnIndex, b"y"))
            .unwrap();
        queue
            .submit(rename(&p, 0, SegmentFile::TxnIndex, Cleaned, Swap))
            .unwrap();
        queue
            .submit(cleaned(&p, 9, SegmentFile::Log, b"z"))
            .unwrap();
        queue
            .submit(DiskOp::DeleteSegment {
                dir: p.clone(),
                segment_base: 0,
            })
            .unwrap();
        queue.submit(full_sync(8)).unwrap();
        assert_eq!(sync_result(&mut done, 8), Ok(()));
        assert_eq!(
            listing(&logs.join("c-0")),
            vec![Cleaned.file_name(SegmentFile::Log, 9)]
        );

        drop(queue);
        assert_eq!(thread.join().unwrap(), Ok(()));
        fs::remove_dir_all(&logs).unwrap();
    }

    #[test]
    fn renames_dirty_the_directory_and_carry_the_file_to_sync() {
        use FileStage::{Cleaned, Live, Swap};
        let logs = temp_logs("rename-dirty");
        // The appends below are executed, not submitted: count them here.
        let backlog = Arc::new(Backlog::default());
        backlog.add(b"old".len() + b"new".len() + b"unsynced".len());
        let mut disk = Disk::new(logs.clone(), FileReader::new(logs.clone()), 4, backlog);
        let (tx, _rx) = unbounded_channel();
        let tx: Completions = tx.into();
        let p = PartitionDir::new("d", 0);
        // A swap into place, executed, not submitted: counted here as the
        // queue counts it.
        let swap_in = |disk: &mut Disk| {
            disk.reader.name_change_queued();
            rename(&p, 0, SegmentFile::Log, Swap, Live)
        };
        let names = |round: &SyncRound| {
            let mut names: Vec<_> = round.files.iter().map(|(n, _)| describe(n)).collect();
            names.sort();
            names
        };

        // Written since the last sync, then renamed: the next round syncs
        // it under its new name, and the directory.
        let mut syncs = Vec::new();
        disk.execute(log(&p, 0, b"old"), &mut syncs, &tx);
        disk.execute(cleaned(&p, 0, SegmentFile::Log, b"new"), &mut syncs, &tx);
        disk.execute(
            rename(&p, 0, SegmentFile::Log, Cleaned, Swap),
            &mut syncs,
            &tx,
        );
        assert!(disk.error.is_none());
        let round = disk.take_round(syncs);
        assert_eq!(
            names(&round),
            vec![
                format!("d-0/{}", Live.file_name(SegmentFile::Log, 0)),
                format!("d-0/{}", Swap.file_name(SegmentFile::Log, 0)),
            ]
        );
        assert!(round.files.iter().all(|(_, file)| file.is_ok()));
        let mut dirs = round.dirs.clone();
        dirs.sort();
        assert_eq!(dirs, vec![logs.clone(), logs.join("d-0")]);
        sync_round(&round, &disk.dirs_to_retry, &disk.pool).unwrap();

        // Synced before the rename: only the directory is left to sync,
        // and the live file it replaced is not synced either.
        let mut syncs = Vec::new();
        disk.execute(log(&p, 0, b"unsynced"), &mut syncs, &tx);
        let op = swap_in(&mut disk);
        disk.execute(op, &mut syncs, &tx);
        assert!(disk.error.is_none());
        let round = disk.take_round(syncs);
        assert!(names(&round).is_empty(), "{:?}", names(&round));
        assert_eq!(round.dirs, vec![logs.join("d-0")]);
        assert_eq!(
            fs::read(path(&logs, "d-0", 0, SegmentFile::Log)).unwrap(),
            b"new"
        );

        // A missing source fails and changes nothing; the sync reports it.
        let mut syncs = Vec::new();
        let op = swap_in(&mut disk);
        disk.execute(op, &mut syncs, &tx);
        disk.execute(full_sync(1), &mut syncs, &tx);
        assert_eq!(syncs.len(), 1);
        assert!(syncs[0].1.is_some(), "the sync carries the rename's error");
        let round = disk.take_round(syncs);
        assert!(round.dirs.is_empty());
        fs::remove_dir_all(&logs).unwrap();
    }

    #[test]
    fn a_logs_sync_leaves_index_appends_for_an_all_sync() {
        let logs = temp_logs("scope");
        let backlog = Arc::new(Backlog::default());
        let mut disk = Disk::new(logs.clone(), FileReader::new(logs.clone()), 8, backlog);
        let (tx, _rx) = unbounded_channel();
        let tx: Completions = tx.into();
        let p = PartitionDir::new("s", 0);
        let name = |kind: SegmentFile| format!("s-0/{}", kind.file_name(0));
        let round = |disk: &mut Disk, ops: Vec<DiskOp>, scope| {
            let mut syncs = Vec::new();
            for op in ops {
                disk.backlog.add(match &op {
                    DiskOp::Append { bytes, .. } => bytes.len(),
                    _ => 0,
                });
                disk.execute(op, &mut syncs, &tx);
            }
            disk.execute(DiskOp::Sync { io: 1, scope }, &mut syncs, &tx);
            assert!(disk.error.is_none());
            let round = disk.take_round(syncs);
            sync_round(&round, &disk.dirs_to_retry, &disk.pool).unwrap();
            let mut names: Vec<_> = round.files.iter().map(|(n, _)| describe(n)).collect();
            names.sort();
            (names, round.dirs.len())
        };
        let appends = || {
            vec![
                log(&p, 0, b"batch"),
                append(&p, 0, SegmentFile::OffsetIndex, b"offsets!"),
                append(&p, 0, SegmentFile::TimeIndex, b"times..."),
            ]
        };

        // New files: the log's bytes and the directory (the index files'
        // entries with it), not the index bytes.
        let (names, dirs) = round(&mut disk, appends(), SyncScope::Logs);
        assert_eq!(names, vec![name(SegmentFile::Log)]);
        assert_eq!(dirs, 2, "the new partition dir and logs/");
        // More appends, another Logs sync: still the log alone.
        let (names, _) = round(&mut disk, appends(), SyncScope::Logs);
        assert_eq!(names, vec![name(SegmentFile::Log)]);
        // An All sync takes the index appends left so far.
        let (names, _) = round(&mut disk, vec![], SyncScope::All);
        assert_eq!(
            names,
            vec![name(SegmentFile::OffsetIndex), name(SegmentFile::TimeIndex)]
        );
        let (names, dirs) = round(&mut disk, vec![], SyncScope::All);
        assert!(names.is_empty() && dirs == 0, "nothing left: {names:?}");
        // A cut is not an append: any sync covers it, and the appends after it.
        let cut = truncate(&p, 0, SegmentFile::OffsetIndex, 8);
        let more = append(&p, 0, SegmentFile::OffsetIndex, b"offsets2");
        let (names, _) = round(&mut disk, vec![cut, more], SyncScope::Logs);
        assert_eq!(names, vec![name(SegmentFile::OffsetIndex)]);
        // Appends left unsynced are synced when the file is closed, and at
        // shutdown.
        let (names, _) = round(&mut disk, appends(), SyncScope::Logs);
        assert_eq!(names, vec![name(SegmentFile::Log)]);
        assert_eq!(disk.index_appends.len(), 2);
        assert_eq!(disk.sync_dirty(), Ok(()));
        assert!(disk.index_appends.is_empty());
        fs::remove_dir_all(&logs).unwrap();
    }

    /// The response's frame, with its 4-byte size prefix removed.
    /// The frame in memory: a pinned one read as a TLS writer has it read.
    async fn in_memory(frame: FrameFuture) -> Result<Frame, FrameReadError> {
        match frame.await? {
            ReadyFrame::Read(frame) => Ok(frame),
            ReadyFrame::Pinned(frame) => frame.read().await,
        }
    }

    async fn frame_bytes(frame: FrameFuture) -> Result<Bytes, FrameReadError> {
        let read = async {
            let frame = in_memory(frame).await?;
            let mut bytes = frame.head.to_vec();
            if let Some(mut rest) = frame.rest {
                while let Some(chunk) = rest.recv().await {
                    bytes.extend_from_slice(&chunk?);
                }
            }
            Ok(Bytes::from(bytes).slice(4..))
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), read)
            .await
            .expect("a response frame is read within 10 s")
    }

    fn log_part(dir: &PartitionDir, base: i64, position: u64, len: u64) -> FramePart {
        FramePart::File(FileRange {
            dir: dir.clone(),
            segment_base: base,
            file: SegmentFile::Log,
            position,
            len,
        })
    }

    async fn synced(done: &mut UnboundedReceiver<Input>, want_io: IoId) {
        match done.recv().await {
            Some(Input::SyncDone { io, result }) => {
                assert_eq!(io, want_io);
                assert_eq!(result, Ok(()));
            }
            _ => panic!("expected SyncDone {want_io}"),
        }
    }

    /// A queue whose worker the test runs by hand (`run`), so that what
    /// runs before what is certain.
    struct HandDriven {
        queue: DiskQueue,
        jobs: Inbox,
        disk: Disk,
        reader: FileReader,
        completions: Completions,
    }

    impl HandDriven {
        fn new(logs: &Path) -> Self {
            let reader = FileReader::new(logs.to_path_buf());
            let backlog: Arc<Backlog> = Arc::default();
            let (ops, jobs) = mpsc::channel();
            let disk = Disk::new(
                logs.to_path_buf(),
                reader.clone(),
                OPEN_FILES_MAX,
                Arc::clone(&backlog),
            );
            let queue = DiskQueue {
                ops,
                backlog,
                reader: reader.clone(),
            };
            let (completions, _) = unbounded_channel();
            let completions: Completions = completions.into();
            let jobs = Inbox {
                queue: jobs,
                taken: VecDeque::new(),
            };
            Self {
                queue,
                jobs,
                disk,
                reader,
                completions,
            }
        }

        /// The worker carries out everything queued.
        fn run(&mut self) {
            let mut syncs = Vec::new();
            let mut held = None;
            while let Some(job) = held.take().or_else(|| self.jobs.try_recv()) {
                self.disk.run_job(
                    job,
                    &mut self.jobs,
                    &mut held,
                    &mut syncs,
                    &self.completions,
                );
            }
            assert!(self.disk.error.is_none(), "{:?}", self.disk.error);
        }
    }

    #[test]
    fn a_batch_is_written_with_its_new_base_offset_and_the_leader_epoch() {
        let logs = temp_logs("batch");
        let mut w = HandDriven::new(&logs);
        let dir = PartitionDir::new("batch", 0);
        // More slices than one writev takes (two per batch).
        let mut want = Vec::new();
        for n in 0..3000i64 {
            let mut sent = vec![0u8; 61];
            sent[8..].fill((n % 251) as u8);
            let mut written = sent.clone();
            written[..8].copy_from_slice(&(1000 + n).to_be_bytes());
            // The leader epoch too; the length between them is kept.
            written[12..16].copy_from_slice(&0i32.to_be_bytes());
            want.extend_from_slice(&written);
            let batch = Bytes::from(sent);
            w.queue
                .submit(DiskOp::AppendBatch {
                    dir: dir.clone(),
                    segment_base: 0,
                    base_offset: 1000 + n,
                    batch,
                })
                .unwrap();
        }
        w.run();
        let got = fs::read(path(&logs, "batch-0", 0, SegmentFile::Log)).unwrap();
        assert!(got == want, "{} bytes, want {}", got.len(), want.len());
        assert_eq!(&got[..8], &1000i64.to_be_bytes());
        let _ = fs::remove_dir_all(&logs);
    }

    #[test]
    fn a_large_run_of_appends_lands_in_order_in_each_file() {
        let logs = temp_logs("lanes");
        let mut w = HandDriven::new(&logs);
        assert!(!w.disk.lanes.is_empty(), "the worker has another lane");
        let dirs: Vec<PartitionDir> = (0..5).map(|p| PartitionDir::new("lanes", p)).collect();
        let mut want = vec![Vec::new(); dirs.len()];
        // Interleaved, of different sizes, and one file written twice in a
        // row: a run the worker spreads over its lanes by file.
        for round in 0..6u8 {
            for (i, dir) in dirs.iter().enumerate() {
                let copies = if i == 0 { 2 } else { 1 };
                for copy in 0..copies {
                    let bytes = Bytes::from(vec![round * 16 + i as u8 + copy; 40_000 + i * 7_000]);
                    want[i].extend_from_slice(&bytes);
                    w.queue
                        .submit(DiskOp::Append {
                            dir: dir.clone(),
                            segment_base: 0,
                            file: SegmentFile::Log,
                            bytes,
                        })
                        .unwrap();
                }
            }
        }
        let total: usize = want.iter().map(Vec::len).sum();
        assert!(total > limits::DISK_APPEND_PARALLEL_BYTES_MIN * 4);
        w.run();
        for (i, want) in want.iter().enumerate() {
            let got = fs::read(path(&logs, &format!("lanes-{i}"), 0, SegmentFile::Log)).unwrap();
            assert!(
                got == *want,
                "file {i}: {} bytes, want {}",
                got.len(),
                want.len()
            );
        }
        assert_eq!(w.queue.backlog.queued_bytes(), 0);
        assert_eq!(w.disk.dirty_files.len(), dirs.len());
        let _ = fs::remove_dir_all(&logs);
    }

    #[tokio::test]
    async fn responses_read_the_files_of_their_dispatch_point() {
        use FileStage::{Cleaned, Live, Swap};
        let logs = temp_logs("pin");
        let mut w = HandDriven::new(&logs);
        let p = PartitionDir::new("f", 0);
        let whole = || {
            vec![
                FramePart::Bytes(Bytes::from_static(b"<")),
                log_part(&p, 0, 0, 3),
                FramePart::Bytes(Bytes::from_static(b">")),
            ]
        };

        w.queue.submit(log(&p, 0, b"old")).unwrap();
        w.queue
            .submit(cleaned(&p, 0, SegmentFile::Log, b"new"))
            .unwrap();
        w.queue
            .submit(rename(&p, 0, SegmentFile::Log, Cleaned, Swap))
            .unwrap();
        w.run();

        // Cold: pinned through the worker's queue, and cached there.
        let cold = w.queue.response_frame(whole());
        assert_eq!(
            w.reader.pin_counts(),
            (0, 0),
            "not pinned until the worker gets there"
        );
        w.run();
        assert_eq!(w.reader.pin_counts(), (0, 1));
        assert_eq!(frame_bytes(cold).await.unwrap(), &b"<old>"[..]);
        // Warm, nothing renaming queued: pinned at once from the cache.
        let before_fast = w.queue.response_frame(whole());
        assert_eq!(w.reader.pin_counts(), (1, 1));
        // A name change queued (an unrelated deletion): the next response
        // goes through the queue, ahead of the swap queued after it.
        w.queue
            .submit(DiskOp::DeleteSegment {
                dir: p.clone(),
                segment_base: 7,
            })
            .unwrap();
        let before_queued = w.queue.response_frame(whole());
        w.queue
            .submit(rename(&p, 0, SegmentFile::Log, Swap, Live))
            .unwrap();
        let after = w.queue.response_frame(whole());
        assert_eq!(w.reader.pin_counts(), (1, 1));
        // The swap runs before any of the three is read; each reads the
        // file of its dispatch point.
        w.run();
        assert_eq!(w.reader.pin_counts(), (1, 3));
        assert_eq!(
            fs::read(path(&logs, "f-0", 0, SegmentFile::Log)).unwrap(),
            b"new"
        );
        assert_eq!(frame_bytes(before_fast).await.unwrap(), &b"<old>"[..]);
        assert_eq!(frame_bytes(before_queued).await.unwrap(), &b"<old>"[..]);
        assert_eq!(frame_bytes(after).await.unwrap(), &b"<new>"[..]);
        // The swap done, the cache (filled by the last pin) serves again.
        let after_fast = w.queue.response_frame(whole());
        assert_eq!(w.reader.pin_counts(), (2, 3));
        assert_eq!(frame_bytes(after_fast).await.unwrap(), &b"<new>"[..]);

        // Retention deletes the segment: a response dispatched before still
        // reads it; one dispatched after fails on its part, named.
        let before_delete = w.queue.response_frame(whole());
        w.queue
            .submit(DiskOp::DeleteSegment {
                dir: p.clone(),
                segment_base: 0,
            })
            .unwrap();
        let after_delete = w.queue.response_frame(whole());
        w.run();
        assert_eq!(frame_bytes(before_delete).await.unwrap(), &b"<new>"[..]);
        match frame_bytes(after_delete).await {
            Err(FrameReadError::Part { range, error }) => {
                assert_eq!(range.segment_base, 0);
                assert!(error.0.contains("cannot open"), "{}", error.0);
            }
            other => panic!("a deleted segment was read: {other:?}"),
        }

        // The segment made again under the same name (a topic recreated):
        // the new bytes, never a stale descriptor's. A range past the end is
        // the part's error too; a frame of bytes alone reads nothing.
        w.queue.submit(log(&p, 0, b"again")).unwrap();
        let again = w
            .queue
            .response_frame(vec![log_part(&p, 0, 1, 4), log_part(&p, 0, 0, 1)]);
        let short = w.queue.response_frame(vec![log_part(&p, 0, 3, 3)]);
        w.run();
        assert_eq!(frame_bytes(again).await.unwrap(), &b"gaina"[..]);
        assert!(matches!(
            frame_bytes(short).await,
            Err(FrameReadError::Part { .. })
        ));
        let plain = w
            .queue
            .response_frame(vec![FramePart::Bytes(Bytes::from_static(b"hi"))]);
        assert_eq!(frame_bytes(plain).await.unwrap(), &b"hi"[..]);

        // The worker gone: the frame fails as a whole, not on a part.
        let HandDriven { queue, jobs, .. } = w;
        drop(jobs);
        let orphan = queue.response_frame(vec![log_part(&p, 0, 0, 1), log_part(&p, 5, 0, 1)]);
        assert!(matches!(
            frame_bytes(orphan).await,
            Err(FrameReadError::Frame(_))
        ));
        fs::remove_dir_all(&logs).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_response_comes_in_chunks_and_a_failed_later_chunk_cuts_it_short() {
        let chunk = limits::RESPONSE_CHUNK_BYTES;
        let logs = temp_logs("chunks");
        let mut w = HandDriven::new(&logs);
        let p = PartitionDir::new("c", 0);
        // Two and a half chunks of log, every byte telling its position.
        let data: &'static [u8] = Vec::leak((0..chunk * 5 / 2).map(|i| (i % 251) as u8).collect());
        w.queue.submit(log(&p, 0, data)).unwrap();
        w.run();
        let len = data.len() as u64;
        let parts = || {
            vec![
                FramePart::Bytes(Bytes::from_static(b"<")),
                log_part(&p, 0, 0, len),
                FramePart::Bytes(Bytes::from_static(b">")),
            ]
        };
        let frame = w.queue.response_frame(parts());
        w.run();
        let frame = in_memory(frame).await.unwrap();
        assert_eq!(frame.head.len(), chunk, "the first chunk is whole");
        assert_eq!(
            &frame.head[..4],
            &(len as i32 + 2).to_be_bytes(),
            "the size prefix leads"
        );
        assert!(frame.rest.is_some(), "the rest comes in chunks");
        let whole = frame_bytes(w.queue.response_frame(parts())).await.unwrap();
        assert_eq!(whole.len(), data.len() + 2);
        assert_eq!(whole[0], b'<');
        assert_eq!(&whole[1..whole.len() - 1], data);
        assert_eq!(whole[whole.len() - 1], b'>');

        // A range past the end of the file: the first chunk is read and
        // sent, then the part's error ends the chunks.
        let past = w.queue.response_frame(vec![log_part(&p, 0, 0, len + 10)]);
        let past = in_memory(past).await.unwrap();
        assert_eq!(past.head.len(), chunk);
        let mut rest = past.rest.expect("chunks");
        let mut failed = false;
        while let Some(chunk) = rest.recv().await {
            if let Err(e) = chunk {
                assert!(matches!(e, FrameReadError::Part { .. }), "{e:?}");
                failed = true;
            }
        }
        assert!(failed, "the short read is reported");
        // Past the end from the start: nothing is sent.
        let none = w
            .queue
            .response_frame(vec![log_part(&p, 0, len, chunk as u64 * 2)]);
        assert!(matches!(
            in_memory(none).await,
            Err(FrameReadError::Part { .. })
        ));
        fs::remove_dir_all(&logs).unwrap();
    }

    /// A connected pair of loopback TCP sockets: (the broker's, the client's).
    async fn socket_pair() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        (accepted.unwrap().0, client.unwrap())
    }

    /// The frame a pinned response splices into a socket: what the client
    /// reads, and how the splice ended.
    async fn spliced(frame: FrameFuture) -> (Vec<u8>, Result<(), SpliceError>) {
        use std::os::fd::AsFd;
        let ReadyFrame::Pinned(frame) = frame.await.unwrap() else {
            panic!("a large frame comes pinned");
        };
        let (server, mut client) = socket_pair().await;
        let fd = server.as_fd().try_clone_to_owned().unwrap();
        let sent = tokio::spawn(async move {
            let sent = frame.splice(fd).await;
            drop(server);
            sent
        });
        let got = read_to_end_within_10s(&mut client).await;
        (got, sent.await.unwrap())
    }

    /// Everything the client gets until the socket closes, which must be
    /// within 10 s.
    async fn read_to_end_within_10s(client: &mut tokio::net::TcpStream) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let mut got = Vec::new();
        let read = client.read_to_end(&mut got);
        tokio::time::timeout(std::time::Duration::from_secs(10), read)
            .await
            .expect("the socket closes within 10 s")
            .unwrap();
        got
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_response_is_spliced_from_the_file_and_a_short_file_sends_none_of_it() {
        let logs = temp_logs("splice");
        let mut w = HandDriven::new(&logs);
        let p = PartitionDir::new("s", 0);
        let len = limits::RESPONSE_CHUNK_BYTES * 5 / 2;
        let data: &'static [u8] = Vec::leak((0..len).map(|i| (i % 251) as u8).collect());
        w.queue.submit(log(&p, 0, data)).unwrap();
        w.run();
        let len = len as u64;
        let half = len / 2;
        // Byte parts around and between two ranges, the second before the
        // first in the file.
        let parts = vec![
            FramePart::Bytes(Bytes::from_static(b"<")),
            log_part(&p, 0, half, len - half),
            FramePart::Bytes(Bytes::from_static(b"|")),
            log_part(&p, 0, 0, half),
            FramePart::Bytes(Bytes::from_static(b">")),
        ];
        let frame = w.queue.response_frame(parts);
        w.run();
        let (got, sent) = spliced(frame).await;
        sent.unwrap();
        assert_eq!(&got[..4], &(len as i32 + 3).to_be_bytes(), "size prefix");
        let body = &got[4..];
        assert_eq!(body.len(), len as usize + 3);
        let half = half as usize;
        let mut want = vec![b'<'];
        want.extend_from_slice(&data[half..]);
        want.push(b'|');
        want.extend_from_slice(&data[..half]);
        want.push(b'>');
        assert!(body == &want[..], "the spliced frame is the parts in order");

        // A small frame is read at once, never spliced.
        let small = w.queue.response_frame(vec![log_part(&p, 0, 0, 10)]);
        w.run();
        assert!(matches!(small.await, Ok(ReadyFrame::Read(_))));

        // A range past the end of its file: the frame fails on that part
        // before a byte of it is sent.
        let past = vec![
            FramePart::Bytes(Bytes::from_static(b"<")),
            log_part(&p, 0, 0, len + 1),
        ];
        let frame = w.queue.response_frame(past);
        w.run();
        let (got, sent) = spliced(frame).await;
        assert!(got.is_empty(), "{} bytes of a failed frame sent", got.len());
        match sent {
            Err(SpliceError::Read(FrameReadError::Part { range, .. })) => {
                assert_eq!(range.len, len + 1)
            }
            other => panic!("a short file spliced: {other:?}"),
        }
        fs::remove_dir_all(&logs).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_splice_to_a_client_that_stopped_reading_ends_when_its_writer_goes() {
        use std::os::fd::AsFd;
        let logs = temp_logs("splice-stop");
        let mut w = HandDriven::new(&logs);
        let p = PartitionDir::new("t", 0);
        // More than both socket buffers on loopback hold.
        let len = 64 * 1024 * 1024;
        w.queue
            .submit(log(&p, 0, Vec::leak(vec![7u8; len])))
            .unwrap();
        w.run();
        let frame = w.queue.response_frame(vec![log_part(&p, 0, 0, len as u64)]);
        w.run();
        let ReadyFrame::Pinned(frame) = frame.await.unwrap() else {
            panic!("a large frame comes pinned");
        };
        let (server, mut client) = socket_pair().await;
        let fd = server.as_fd().try_clone_to_owned().unwrap();
        // The client reads nothing: the splice waits on a full socket until
        // its future is dropped (as the writer's linger drops it).
        let splice = tokio::time::timeout(std::time::Duration::from_millis(300), frame.splice(fd));
        assert!(
            splice.await.is_err(),
            "64 MiB spliced to a client not reading"
        );
        // The blocking task stopped and closed its descriptor: with the
        // connection's own closed too, the client reads what got through,
        // then the end of the stream.
        drop(server);
        let got = read_to_end_within_10s(&mut client).await;
        assert!(got.len() < len + 4, "{} bytes arrived", got.len());
        fs::remove_dir_all(&logs).unwrap();
    }

    #[tokio::test]
    async fn a_response_before_a_swap_reads_the_old_file_through_the_worker_thread() {
        use FileStage::{Cleaned, Live, Swap};
        let logs = temp_logs("pin-thread");
        let (tx, mut done) = unbounded_channel();
        let tx: Completions = tx.into();
        let (queue, thread) = DiskWorker::spawn_with(
            logs.clone(),
            tx,
            FileReader::new(logs.clone()),
            OPEN_FILES_MAX,
            Arc::default(),
            Arc::default(),
        )
        .unwrap()
        .into_parts();
        let p = PartitionDir::new("g", 0);
        queue.submit(log(&p, 0, b"old")).unwrap();
        queue
            .submit(cleaned(&p, 0, SegmentFile::Log, b"new"))
            .unwrap();
        queue
            .submit(rename(&p, 0, SegmentFile::Log, Cleaned, Swap))
            .unwrap();
        let before = queue.response_frame(vec![log_part(&p, 0, 0, 3)]);
        queue
            .submit(rename(&p, 0, SegmentFile::Log, Swap, Live))
            .unwrap();
        let after = queue.response_frame(vec![log_part(&p, 0, 0, 3)]);
        queue.submit(full_sync(1)).unwrap();
        // The sync answered: the swap has run, and neither frame is read yet.
        synced(&mut done, 1).await;
        assert_eq!(frame_bytes(before).await.unwrap(), &b"old"[..]);
        assert_eq!(frame_bytes(after).await.unwrap(), &b"new"[..]);
        drop(queue);
        let joined = tokio::task::spawn_blocking(move || thread.join().unwrap());
        assert_eq!(joined.await.unwrap(), Ok(()));
        fs::remove_dir_all(&logs).unwrap();
    }
}
