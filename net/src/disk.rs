//! The disk worker: carries out the core's `DiskOp`s, strictly in order, on a
//! dedicated OS thread with blocking `std::fs` calls.
//!
//! Why a thread of its own: an fsync can take tens of milliseconds (seconds on
//! a busy disk), and the broker task must keep answering fetches and metadata
//! meanwhile. Why not tokio's blocking pool: its tasks may run concurrently and
//! out of order, and the core's contract is a strict order.
//!
//! Durability bookkeeping: every file written or cut since the last sync, and
//! every directory whose entries changed (a segment created or removed, a
//! partition dir created or removed), is *dirty*. A `Sync` fdatasyncs the dirty
//! files and fsyncs the dirty directories, and only then reports `SyncDone`.
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
//! Errors: appends, cuts and removals have no completion of their own. The
//! first failure since the last `Sync` is kept and reported by the next `Sync`
//! (the core then treats everything since its previous sync as unsafe), and the
//! error state is cleared for the one after.
//!
//! Back-pressure: the queue is unbounded on purpose, because the broker task
//! must never block on the disk. What waits in it is bounded only by what the
//! clients keep in flight (each produce is answered after its sync); the core
//! does not hold produces back yet.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::mem;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use doze_core::io::segment_file_name;
use doze_core::{DiskOp, Input, IoError, IoId, PartitionDir};
use tokio::sync::mpsc::UnboundedSender;
use tracing::{debug, info, warn};

use crate::datadir::sync_dir;

/// Segment files kept open at once. Past this the least recently used one is
/// synced (if dirty) and closed, so thousands of partitions do not exhaust the
/// process's file descriptors.
pub const OPEN_FILES_MAX: usize = 512;
/// Ops carried out in one group-commit round before its fsyncs start, so that a
/// queue that never empties still gets its syncs answered.
const ROUND_OPS_MAX: usize = 4096;

pub struct DiskWorker {
    ops: mpsc::Sender<DiskOp>,
    thread: thread::JoinHandle<Result<(), IoError>>,
}

impl DiskWorker {
    /// Starts the worker over `logs_dir`. `SyncDone`s go to `completions`.
    pub fn spawn(logs_dir: PathBuf, completions: UnboundedSender<Input>) -> io::Result<Self> {
        Self::spawn_with(logs_dir, completions, OPEN_FILES_MAX)
    }

    fn spawn_with(
        logs_dir: PathBuf,
        completions: UnboundedSender<Input>,
        open_files_max: usize,
    ) -> io::Result<Self> {
        let (ops, queue) = mpsc::channel();
        let disk = Disk::new(logs_dir, open_files_max);
        let thread = thread::Builder::new()
            .name("doze-disk".into())
            .spawn(move || disk.run(queue, completions))?;
        Ok(Self { ops, thread })
    }

    /// Splits into the queue (for the broker task) and the thread (for the
    /// shutdown). Dropping the queue tells the worker to finish and stop.
    pub fn into_parts(self) -> (DiskQueue, thread::JoinHandle<Result<(), IoError>>) {
        (DiskQueue(self.ops), self.thread)
    }
}

/// The broker task's end of the worker's queue.
pub struct DiskQueue(mpsc::Sender<DiskOp>);

impl DiskQueue {
    /// Queues one op. Fails only if the worker thread is gone (it panicked),
    /// after which nothing can be made durable.
    pub fn submit(&self, op: DiskOp) -> Result<(), IoError> {
        self.0
            .send(op)
            .map_err(|_| IoError("the disk worker has stopped".into()))
    }
}

type SegmentKey = (PartitionDir, i64);

struct OpenSegment {
    file: File,
    /// Value of `Disk::uses` at the last use, for least-recently-used eviction.
    last_use: u64,
}

/// One round of fsyncs, handed to the syncer thread.
struct SyncRound {
    /// Dirty files: a duplicate descriptor where the file is open (so the
    /// worker may close its own meanwhile), else the path.
    files: Vec<(PathBuf, Option<File>)>,
    dirs: Vec<PathBuf>,
    /// The `Sync`s the round answers, each with an error it must report
    /// whatever the fsyncs do.
    syncs: Vec<(IoId, Option<IoError>)>,
}

struct Disk {
    logs_dir: PathBuf,
    open: HashMap<SegmentKey, OpenSegment>,
    open_files_max: usize,
    uses: u64,
    dirty_files: HashSet<SegmentKey>,
    dirty_dirs: HashSet<PathBuf>,
    /// The first failure since the last `Sync`, which that `Sync` will report.
    error: Option<IoError>,
}

impl Disk {
    fn new(logs_dir: PathBuf, open_files_max: usize) -> Self {
        assert!(
            open_files_max > 0,
            "the disk worker needs at least one open file"
        );
        Self {
            logs_dir,
            open: HashMap::new(),
            open_files_max,
            uses: 0,
            dirty_files: HashSet::new(),
            dirty_dirs: HashSet::new(),
            error: None,
        }
    }

    fn run(
        mut self,
        queue: mpsc::Receiver<DiskOp>,
        completions: UnboundedSender<Input>,
    ) -> Result<(), IoError> {
        let (rounds, syncer_queue) = mpsc::channel::<SyncRound>();
        let syncer = thread::Builder::new()
            .name("doze-sync".into())
            .spawn(move || run_syncer(syncer_queue, completions))
            .expect("spawn the syncer thread");
        while let Ok(op) = queue.recv() {
            // Syncs reached this round, each with the error it must report
            // regardless of how the fsyncs go.
            let mut syncs = Vec::new();
            self.execute(op, &mut syncs);
            if syncs.is_empty() {
                continue;
            }
            for _ in 1..ROUND_OPS_MAX {
                match queue.try_recv() {
                    Ok(op) => self.execute(op, &mut syncs),
                    Err(_) => break,
                }
            }
            let round = self.take_round(syncs);
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
        match &result {
            Ok(()) => info!("disk worker: final sync done"),
            Err(e) => warn!(error = %e.0, "disk worker: final sync failed"),
        }
        result
    }

    fn execute(&mut self, op: DiskOp, syncs: &mut Vec<(IoId, Option<IoError>)>) {
        let result = match op {
            DiskOp::Sync { io } => {
                syncs.push((io, self.error.take()));
                return;
            }
            DiskOp::Append {
                dir,
                segment_base,
                bytes,
            } => self.append(&dir, segment_base, &bytes),
            DiskOp::Truncate {
                dir,
                segment_base,
                len,
            } => self.truncate(&dir, segment_base, len),
            DiskOp::DeleteSegment { dir, segment_base } => self.delete_segment(&dir, segment_base),
            DiskOp::DeletePartition { dir } => self.delete_partition(&dir),
        };
        if let Err(e) = result {
            warn!(error = %e.0, "disk op failed; the next sync will report it");
            self.error.get_or_insert(e);
        }
    }

    fn append(&mut self, dir: &PartitionDir, base: i64, bytes: &[u8]) -> Result<(), IoError> {
        let path = self.segment_path(dir, base)?;
        let file = self
            .file(dir, base, true)
            .map_err(|e| failed("open", &path, e))?;
        file.write_all(bytes)
            .map_err(|e| failed("append to", &path, e))?;
        self.dirty_files.insert((dir.clone(), base));
        Ok(())
    }

    fn truncate(&mut self, dir: &PartitionDir, base: i64, len: u64) -> Result<(), IoError> {
        let path = self.segment_path(dir, base)?;
        let file = self
            .file(dir, base, false)
            .map_err(|e| failed("open", &path, e))?;
        file.set_len(len)
            .map_err(|e| failed("truncate", &path, e))?;
        self.dirty_files.insert((dir.clone(), base));
        Ok(())
    }

    fn delete_segment(&mut self, dir: &PartitionDir, base: i64) -> Result<(), IoError> {
        let path = self.segment_path(dir, base)?;
        let key = (dir.clone(), base);
        // Its pending writes die with it; there is nothing left to sync.
        self.open.remove(&key);
        self.dirty_files.remove(&key);
        match fs::remove_file(&path) {
            Ok(()) => {
                self.dirty_dirs.insert(self.partition_path(dir)?);
                Ok(())
            }
            // Already gone is what was asked for (a repeated repair after a crash).
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(failed("remove", &path, e)),
        }
    }

    fn delete_partition(&mut self, dir: &PartitionDir) -> Result<(), IoError> {
        let path = self.partition_path(dir)?;
        self.open.retain(|(d, _), _| d != dir);
        self.dirty_files.retain(|(d, _)| d != dir);
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

    /// The open segment file, opening it (and with `create`, creating it and
    /// its directory) on first use.
    fn file(&mut self, dir: &PartitionDir, base: i64, create: bool) -> io::Result<&mut File> {
        self.uses += 1;
        let key = (dir.clone(), base);
        if !self.open.contains_key(&key) {
            if self.open.len() >= self.open_files_max {
                self.evict_least_recently_used();
            }
            let file = self.open_segment(dir, base, create)?;
            self.open
                .insert(key.clone(), OpenSegment { file, last_use: 0 });
        }
        let segment = self.open.get_mut(&key).expect("inserted above");
        segment.last_use = self.uses;
        Ok(&mut segment.file)
    }

    fn open_segment(&mut self, dir: &PartitionDir, base: i64, create: bool) -> io::Result<File> {
        let dir_path = self
            .partition_path(dir)
            .map_err(|e| io::Error::other(e.0))?;
        let path = dir_path.join(segment_file_name(base));
        // Append mode: every write lands at the current end, which is also
        // right after a `Truncate` has cut the file shorter.
        let mut options = OpenOptions::new();
        options.append(true);
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

    /// Closes the least recently used file, syncing it first if dirty: a
    /// write-back error must surface through a `Sync`, and after the close no
    /// descriptor of ours would see it.
    fn evict_least_recently_used(&mut self) {
        let oldest = self
            .open
            .iter()
            .min_by_key(|(_, s)| s.last_use)
            .map(|(k, _)| k.clone());
        let Some(key) = oldest else { return };
        let segment = self.open.remove(&key).expect("found above");
        if self.dirty_files.remove(&key) {
            if let Err(e) = segment.file.sync_data() {
                let path = self
                    .logs_dir
                    .join(key.0.dir_name())
                    .join(segment_file_name(key.1));
                let e = failed("fdatasync", &path, e);
                warn!(error = %e.0, "sync before close failed; the next sync will report it");
                self.error.get_or_insert(e);
            }
        }
        debug!(dir = %key.0.dir_name(), base = key.1, "closed least recently used segment");
    }

    /// Takes the dirty sets as a round for the syncer thread.
    fn take_round(&mut self, syncs: Vec<(IoId, Option<IoError>)>) -> SyncRound {
        let files = mem::take(&mut self.dirty_files)
            .into_iter()
            .map(|key| {
                let path = self
                    .logs_dir
                    .join(key.0.dir_name())
                    .join(segment_file_name(key.1));
                let dup = self.open.get(&key).and_then(|s| s.file.try_clone().ok());
                (path, dup)
            })
            .collect();
        let dirs = mem::take(&mut self.dirty_dirs).into_iter().collect();
        SyncRound { files, dirs, syncs }
    }

    /// One round of fsyncs: every dirty file, then every dirty directory. All
    /// are attempted even after a failure; the first failure is returned. The
    /// dirty sets are cleared either way: after a failed fsync the kernel may
    /// have dropped the dirty pages, so a retry proves nothing, and the core
    /// answers a failed sync by rewriting (truncating) what it cannot trust.
    fn sync_dirty(&mut self) -> Result<(), IoError> {
        let started = Instant::now();
        let files = mem::take(&mut self.dirty_files);
        let dirs = mem::take(&mut self.dirty_dirs);
        let mut first_error = None;
        for key in &files {
            let path = self
                .logs_dir
                .join(key.0.dir_name())
                .join(segment_file_name(key.1));
            let result = match self.open.get(key) {
                Some(segment) => segment.file.sync_data(),
                // Unreachable today (eviction syncs), but cheap to get right.
                None => File::open(&path).and_then(|f| f.sync_data()),
            };
            if let Err(e) = result {
                first_error.get_or_insert(failed("fdatasync", &path, e));
            }
        }
        for dir in &dirs {
            if let Err(e) = sync_dir(dir) {
                first_error.get_or_insert(failed("fsync", dir, e));
            }
        }
        debug!(
            files = files.len(),
            dirs = dirs.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "synced"
        );
        match first_error {
            Some(e) => {
                warn!(error = %e.0, "sync failed");
                Err(e)
            }
            None => Ok(()),
        }
    }

    fn segment_path(&self, dir: &PartitionDir, base: i64) -> Result<PathBuf, IoError> {
        Ok(self.partition_path(dir)?.join(segment_file_name(base)))
    }

    /// The partition's directory. A name that could leave `logs/` is refused
    /// here, whatever validated it before: `DeletePartition` runs
    /// `remove_dir_all` on this path.
    fn partition_path(&self, dir: &PartitionDir) -> Result<PathBuf, IoError> {
        let name = dir.dir_name();
        if name.contains(['/', '\\', '\0']) {
            return Err(IoError(format!(
                "refusing partition directory name {name:?}"
            )));
        }
        Ok(self.logs_dir.join(name))
    }
}

/// The syncer thread: fsyncs each round and reports its `Sync`s, in order.
/// Every fsync of a round is attempted even after a failure; the first
/// failure is what the round's syncs report (see `Disk::sync_dirty`).
fn run_syncer(rounds: mpsc::Receiver<SyncRound>, completions: UnboundedSender<Input>) {
    while let Ok(round) = rounds.recv() {
        let started = Instant::now();
        let mut first_error = None;
        for (path, dup) in &round.files {
            let result = match dup {
                Some(file) => file.sync_data(),
                None => File::open(path).and_then(|f| f.sync_data()),
            };
            if let Err(e) = result {
                first_error.get_or_insert(failed("fdatasync", path, e));
            }
        }
        for dir in &round.dirs {
            if let Err(e) = sync_dir(dir) {
                first_error.get_or_insert(failed("fsync", dir, e));
            }
        }
        debug!(
            files = round.files.len(),
            dirs = round.dirs.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "synced"
        );
        if let Some(e) = &first_error {
            warn!(error = %e.0, "sync failed");
        }
        for (io, earlier) in round.syncs {
            let result = match (earlier, &first_error) {
                (Some(e), _) => Err(e),
                (None, Some(e)) => Err(e.clone()),
                (None, None) => Ok(()),
            };
            // The broker task is gone only during shutdown, when nobody
            // waits for the answer any more.
            let _ = completions.send(Input::SyncDone { io, result });
        }
    }
}

fn failed(what: &str, path: &Path, e: io::Error) -> IoError {
    IoError(format!("cannot {what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    fn temp_logs(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("doze-disk-test-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn append(dir: &PartitionDir, segment_base: i64, bytes: &'static [u8]) -> DiskOp {
        DiskOp::Append {
            dir: dir.clone(),
            segment_base,
            bytes: Bytes::from_static(bytes),
        }
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

    #[test]
    fn append_sync_truncate_delete() {
        let logs = temp_logs("ops");
        let (tx, mut done) = unbounded_channel();
        let (queue, thread) = DiskWorker::spawn(logs.clone(), tx).unwrap().into_parts();
        let p = PartitionDir::new("orders", 0);
        let seg0 = logs.join("orders-0").join(segment_file_name(0));
        let seg100 = logs.join("orders-0").join(segment_file_name(100));

        queue.submit(append(&p, 0, b"hello")).unwrap();
        queue.submit(append(&p, 0, b" world")).unwrap();
        queue.submit(DiskOp::Sync { io: 1 }).unwrap();
        assert_eq!(sync_result(&mut done, 1), Ok(()));
        assert_eq!(fs::read(&seg0).unwrap(), b"hello world");

        queue
            .submit(DiskOp::Truncate {
                dir: p.clone(),
                segment_base: 0,
                len: 5,
            })
            .unwrap();
        queue.submit(append(&p, 0, b"!")).unwrap();
        queue.submit(DiskOp::Sync { io: 2 }).unwrap();
        assert_eq!(sync_result(&mut done, 2), Ok(()));
        assert_eq!(fs::read(&seg0).unwrap(), b"hello!");

        queue.submit(append(&p, 100, b"x")).unwrap();
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
        queue.submit(DiskOp::Sync { io: 3 }).unwrap();
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
        queue.submit(DiskOp::Sync { io: 4 }).unwrap();
        assert_eq!(sync_result(&mut done, 4), Ok(()));
        assert!(!logs.join("orders-0").exists());

        // A failed op is reported by the next sync only, then forgotten.
        let missing = PartitionDir::new("missing", 0);
        queue
            .submit(DiskOp::Truncate {
                dir: missing,
                segment_base: 0,
                len: 0,
            })
            .unwrap();
        queue.submit(DiskOp::Sync { io: 5 }).unwrap();
        queue.submit(DiskOp::Sync { io: 6 }).unwrap();
        assert!(sync_result(&mut done, 5).is_err());
        assert_eq!(sync_result(&mut done, 6), Ok(()));

        // A name that would escape logs/ is refused, not acted on.
        let evil = PartitionDir::new("../../etc", 0);
        queue.submit(DiskOp::DeletePartition { dir: evil }).unwrap();
        queue.submit(DiskOp::Sync { io: 7 }).unwrap();
        assert!(sync_result(&mut done, 7).is_err());

        drop(queue);
        assert_eq!(thread.join().unwrap(), Ok(()));
        fs::remove_dir_all(&logs).unwrap();
    }

    #[test]
    fn many_segments_few_open_files() {
        let logs = temp_logs("lru");
        let (tx, mut done) = unbounded_channel();
        let (queue, thread) = DiskWorker::spawn_with(logs.clone(), tx, 2)
            .unwrap()
            .into_parts();
        // Round-robin over more segments than open files, with syncs queued
        // back to back so that rounds cover several of them.
        for round in 0..3u64 {
            for part in 0..5 {
                let p = PartitionDir::new("t", part);
                queue.submit(append(&p, 0, b"ab")).unwrap();
                queue
                    .submit(DiskOp::Sync {
                        io: round * 5 + part as u64 + 1,
                    })
                    .unwrap();
            }
        }
        for io in 1..=15 {
            assert_eq!(sync_result(&mut done, io), Ok(()));
        }
        for part in 0..5 {
            let path = logs.join(format!("t-{part}")).join(segment_file_name(0));
            assert_eq!(fs::read(path).unwrap(), b"ababab");
        }
        drop(queue);
        assert_eq!(thread.join().unwrap(), Ok(()));
        fs::remove_dir_all(&logs).unwrap();
    }

    #[test]
    fn unsynced_appends_are_synced_at_shutdown() {
        let logs = temp_logs("shutdown");
        let (tx, _done) = unbounded_channel();
        let (queue, thread) = DiskWorker::spawn(logs.clone(), tx).unwrap().into_parts();
        queue
            .submit(append(&PartitionDir::new("t", 0), 0, b"tail"))
            .unwrap();
        drop(queue);
        assert_eq!(thread.join().unwrap(), Ok(()));
        assert_eq!(
            fs::read(logs.join("t-0").join(segment_file_name(0))).unwrap(),
            b"tail"
        );
        fs::remove_dir_all(&logs).unwrap();
    }
}
