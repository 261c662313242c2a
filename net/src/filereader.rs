//! The file parts of response frames: which file each part reads is fixed
//! in order with the disk ops (the contract in `storage.rs`), and the bytes
//! are read with pread, or sent to a plain TCP socket with sendfile(2), on
//! tokio's blocking pool, so neither the broker task nor a connection's
//! async writer ever waits on the disk.
//!
//! Why sendfile for large frames: a consumer reading a topic from the
//! start gets frames of megabytes, nearly all records. Read with pread,
//! each byte was copied from the page cache into the broker and again into
//! the socket; sendfile hands the socket the page-cache pages, so the
//! broker copies none of them (Kafka does the same with
//! `FileChannel.transferTo`, `FileRecords.writeTo`). Small frames (a
//! consumer at the tail) are read: one buffer and one write beside the
//! responses around them cost less than the extra system calls.
//!
//! Why the order matters: the log cleaner swaps a new `{base}.log` in by
//! rename(2) while consumers are being served, and retention deletes
//! segments. A response planned on the old layout must read the old file (an
//! open descriptor keeps its inode alive after the name moves on); one
//! planned after the swap must read the new one. Opening a part's file when
//! the writer gets to it, possibly after later ops ran, gets both wrong.
//!
//! So descriptors are *pinned* when the broker task dispatches the response
//! (`DiskQueue::response_frame`), and only ever opened by the disk worker,
//! in order with the ops: a pin is a job in the worker's queue, answered
//! with the part's descriptors (`Arc<File>`) through a oneshot. The writer
//! awaits that and preads. Descriptors are cached (a few, least recently
//! used out): a consumer at the tail reads the same active segment over and
//! over. The worker forgets a cached descriptor when it renames over, or
//! deletes, its name, so the cache always holds the files the names held
//! after the last op the worker carried out.
//!
//! The fast path, which is the common one: when no op that changes a live
//! name (a rename to or from a live name, a segment or partition deletion)
//! is queued and not yet carried out, the cache is current for the
//! dispatch point, and a response whose files are all cached is pinned on
//! the broker task at once, with no round trip through the worker. The
//! appends and cuts still queued ahead of it do not matter for what it
//! reads: the core points responses only at synced bytes (below the high
//! watermark), whose appends the worker carried out before their sync
//! completed, and cuts only bytes it never served.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{BufMut, BytesMut};

use doze_core::{limits, FileRange, FramePart, IoError, PartitionDir, SegmentFile};
use tokio::sync::{mpsc, oneshot};

use crate::datadir::segment_path;
use crate::splice;
pub use crate::splice::SpliceError;
use crate::storage::{
    assemble_frame, chunk_buffer, frame_size, Frame, FrameFuture, FrameReadError, ReadyFrame,
};

/// Descriptors the reader keeps open: enough for the active segments of the
/// partitions being consumed at once; a miss costs one open(2) on the disk
/// worker.
const READER_OPEN_FILES_MAX: usize = 64;

/// A live segment file (responses never read `.cleaned` or `.swap` files).
pub(crate) type LiveKey = (PartitionDir, i64, SegmentFile);

/// The descriptors of a response's files, each the file its name held at
/// the dispatch point, or why it could not be opened then.
pub(crate) type Pinned = Vec<(LiveKey, Result<Arc<File>, IoError>)>;

/// A pin on its way through the disk worker's queue.
pub(crate) struct PinJob {
    pub keys: Vec<LiveKey>,
    pub reply: oneshot::Sender<Pinned>,
}

#[derive(Clone)]
pub struct FileReader(Arc<Shared>);

struct Shared {
    logs_dir: PathBuf,
    cache: Mutex<Cache>,
    /// Ops that change a live name, queued to the worker and not yet carried
    /// out: while any is, the cache may be ahead of or behind the dispatch
    /// point, and pins go through the queue.
    name_changes_queued: AtomicU64,
    /// Pins served from the cache on the broker task, and through the queue:
    /// for the log at shutdown and for the tests.
    pins_fast: AtomicU64,
    pins_queued: AtomicU64,
}

#[derive(Default)]
struct Cache {
    files: HashMap<LiveKey, CachedFile>,
    uses: u64,
}

struct CachedFile {
    file: Arc<File>,
    last_use: u64,
}

impl FileReader {
    pub fn new(logs_dir: PathBuf) -> Self {
        Self(Arc::new(Shared {
            logs_dir,
            cache: Mutex::default(),
            name_changes_queued: AtomicU64::new(0),
            pins_fast: AtomicU64::new(0),
            pins_queued: AtomicU64::new(0),
        }))
    }

    /// The broker task is about to queue an op that changes a live name.
    pub(crate) fn name_change_queued(&self) {
        self.0.name_changes_queued.fetch_add(1, Ordering::AcqRel);
    }

    /// The worker carried one out (or it never reached the queue), and has
    /// forgotten the descriptors it made stale.
    pub(crate) fn name_change_done(&self) {
        let before = self.0.name_changes_queued.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "more name changes done than queued");
    }

    /// The disk worker renamed over, or deleted, this segment's live files.
    pub fn forget_segment(&self, dir: &PartitionDir, segment_base: i64) {
        self.lock()
            .files
            .retain(|(d, base, _), _| !(d == dir && *base == segment_base));
    }

    /// The disk worker is deleting this partition's directory.
    pub fn forget_partition(&self, dir: &PartitionDir) {
        self.lock().files.retain(|(d, _, _), _| d != dir);
    }

    /// (pins served on the broker task, pins that went through the queue)
    pub fn pin_counts(&self) -> (u64, u64) {
        (
            self.0.pins_fast.load(Ordering::Relaxed),
            self.0.pins_queued.load(Ordering::Relaxed),
        )
    }

    fn lock(&self) -> MutexGuard<'_, Cache> {
        // A panic while holding the lock leaves nothing half done: the map
        // holds whole entries only.
        self.0.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The broker task's fast path: every key's descriptor, if the cache is
    /// current for this dispatch point and holds them all.
    pub(crate) fn pin_cached(&self, keys: &[LiveKey]) -> Option<Pinned> {
        // Acquire: the worker forgot what an op made stale before it counted
        // the op done, so a zero here means the cache reflects every name
        // change queued so far (only this task queues them).
        if self.0.name_changes_queued.load(Ordering::Acquire) != 0 {
            return None;
        }
        let mut cache = self.lock();
        cache.uses += 1;
        let uses = cache.uses;
        let mut pinned = Vec::with_capacity(keys.len());
        for key in keys {
            let cached = cache.files.get_mut(key)?;
            cached.last_use = uses;
            pinned.push((key.clone(), Ok(Arc::clone(&cached.file))));
        }
        self.0.pins_fast.fetch_add(1, Ordering::Relaxed);
        Some(pinned)
    }

    /// The disk worker's side of a pin, in order with the ops: each key's
    /// descriptor from the cache, or opened now and cached.
    pub(crate) fn pin_in_order(&self, keys: Vec<LiveKey>) -> Pinned {
        self.0.pins_queued.fetch_add(1, Ordering::Relaxed);
        keys.into_iter()
            .map(|key| {
                let file = self.open(&key);
                (key, file)
            })
            .collect()
    }

    /// Only the disk worker opens (between ops, never during one), so what
    /// it caches is what the name holds now.
    fn open(&self, key: &LiveKey) -> Result<Arc<File>, IoError> {
        {
            let mut cache = self.lock();
            cache.uses += 1;
            let uses = cache.uses;
            if let Some(cached) = cache.files.get_mut(key) {
                cached.last_use = uses;
                return Ok(Arc::clone(&cached.file));
            }
        }
        let path = segment_path(&self.0.logs_dir, &key.0, key.1, key.2)?;
        let file = File::open(&path)
            .map_err(|e| IoError(format!("cannot open {}: {e}", path.display())))?;
        if key.2 == SegmentFile::Log {
            // Consumers read a log forward: the kernel's readahead window
            // for this descriptor doubles (as the raw read in `make bench`
            // asks for its own). Cold 1 GiB reads of 8 partitions, three
            // alternating rounds: 788/782/675 MB/s with it, 472/716/583
            // without. Only a hint: a failure changes nothing but speed.
            // SAFETY: a plain descriptor; posix_fadvise(2) only reads its arguments.
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
        }
        let file = Arc::new(file);
        let mut cache = self.lock();
        if cache.files.len() >= READER_OPEN_FILES_MAX {
            let oldest = cache
                .files
                .iter()
                .min_by_key(|(_, cached)| cached.last_use)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                cache.files.remove(&oldest);
            }
        }
        let last_use = cache.uses;
        cache.files.insert(
            key.clone(),
            CachedFile {
                file: Arc::clone(&file),
                last_use,
            },
        );
        Ok(file)
    }
}

/// The distinct files of a response's parts, in order of first use.
pub(crate) fn part_keys(parts: &[FramePart]) -> Vec<LiveKey> {
    let mut keys: Vec<LiveKey> = Vec::new();
    for part in parts {
        if let FramePart::File(range) = part {
            let key = (range.dir.clone(), range.segment_base, range.file);
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    keys
}

/// Where a response's descriptors come from: already pinned, or a pin
/// queued to the worker.
pub(crate) enum PinSource {
    Ready(Pinned),
    Queued(oneshot::Receiver<Pinned>),
}

/// The frame, once its descriptors are in. A frame with fewer than
/// `RESPONSE_SPLICE_BYTES_MIN` file bytes is read here, whole, into one
/// buffer; a larger one is handed to the writer pinned and unread
/// (`ReadyFrame::Pinned`), which sends it with sendfile(2) or reads it.
pub(crate) fn read_pinned(parts: Vec<FramePart>, source: PinSource) -> FrameFuture {
    Box::pin(async move {
        let pinned = match source {
            PinSource::Ready(pinned) => pinned,
            PinSource::Queued(reply) => reply.await.map_err(|_| {
                FrameReadError::Frame("the disk worker stopped before pinning the files".into())
            })?,
        };
        if pinned.is_empty() {
            // No file part: nothing to read, no trip to the blocking pool.
            return assemble_frame(&parts, |_, _| unreachable!("no file part"))
                .map(|bytes| Frame::whole(bytes).into());
        }
        let frame = PinnedFrame { parts, pinned };
        if frame.file_bytes() >= limits::RESPONSE_SPLICE_BYTES_MIN {
            return Ok(ReadyFrame::Pinned(frame));
        }
        frame.read().await.map(ReadyFrame::Read)
    })
}

/// A response frame whose files are pinned (the descriptors their names
/// held at the dispatch point) and not yet read.
pub struct PinnedFrame {
    parts: Vec<FramePart>,
    pinned: Pinned,
}

impl PinnedFrame {
    fn file_bytes(&self) -> u64 {
        self.parts
            .iter()
            .map(|part| match part {
                FramePart::File(range) => range.len,
                FramePart::Bytes(_) => 0,
            })
            .sum()
    }

    /// Reads the frame into memory with pread on the blocking pool: whole
    /// up to `RESPONSE_CHUNK_BYTES` of file parts, else in chunks that the
    /// writer sends while the next ones are read (`storage::Frame`).
    pub async fn read(self) -> Result<Frame, FrameReadError> {
        let file_bytes = self.file_bytes();
        if file_bytes > limits::RESPONSE_CHUNK_BYTES as u64 {
            return stream_frame(self.parts, self.pinned).await;
        }
        let Self { parts, pinned } = self;
        let read = move || {
            assemble_frame(&parts, |range, buf| {
                read_range(pinned_file(&pinned, range)?, range, buf)
            })
        };
        tokio::task::spawn_blocking(read)
            .await
            .unwrap_or_else(|e| Err(FrameReadError::Frame(format!("the read stopped: {e}"))))
            .map(Frame::whole)
    }

    /// Sends the frame, size prefix included, to `socket` (a descriptor of
    /// its own for a plain TCP socket, with nothing of the connection's
    /// buffered ahead of it): the byte parts with send(2), the file parts
    /// with sendfile(2), which moves page-cache pages to the socket without
    /// copying them through the broker. The calls run on the blocking pool,
    /// as they may wait on the disk (a cold page cache), and wait for the
    /// socket with poll(2) there. Dropping the future stops them within
    /// `SPLICE_POLL_MS`.
    ///
    /// Every file part's length is checked against its file first, so that
    /// a file too short (cut since the dispatch, which the core rules out)
    /// fails the frame before any of it is sent; a read error in the middle
    /// (EIO) cuts the frame short, as a failed chunk does (`read`).
    pub async fn splice(self, socket: OwnedFd) -> Result<(), SpliceError> {
        splice::send_frame(self.parts, self.pinned, socket).await
    }
}

/// The descriptor pinned for `range`'s file, or why it could not be opened.
pub(crate) fn pinned_file<'a>(pinned: &'a Pinned, range: &FileRange) -> Result<&'a File, IoError> {
    pinned_entry(pinned, range).as_deref().map_err(Clone::clone)
}

fn pinned_entry<'a>(pinned: &'a Pinned, range: &FileRange) -> &'a Result<Arc<File>, IoError> {
    let key = (range.dir.clone(), range.segment_base, range.file);
    pinned
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, file)| file)
        .expect("every file part's key was pinned")
}

/// A large frame: one blocking task reads it chunk by chunk, at most
/// `RESPONSE_CHUNKS_AHEAD` ahead of the writer; the first chunk is awaited
/// here, so a failure to read the start still sends nothing of the frame.
async fn stream_frame(parts: Vec<FramePart>, pinned: Pinned) -> Result<Frame, FrameReadError> {
    let size = frame_size(&parts)?;
    let (chunks, mut rest) = mpsc::channel(limits::RESPONSE_CHUNKS_AHEAD);
    tokio::task::spawn_blocking(move || {
        let chunk_bytes = limits::RESPONSE_CHUNK_BYTES;
        let mut chunk = chunk_buffer();
        chunk.put_i32(size);
        // Sends the chunk if full (or `last`); false once the writer is gone.
        let send = |chunk: &mut BytesMut, last: bool| -> bool {
            if chunk.len() < chunk_bytes && !last {
                return true;
            }
            let full = std::mem::replace(chunk, chunk_buffer()).freeze();
            chunks.blocking_send(Ok(full)).is_ok()
        };
        for part in &parts {
            match part {
                FramePart::Bytes(bytes) => {
                    let mut bytes = &bytes[..];
                    while !bytes.is_empty() {
                        let n = bytes.len().min(chunk_bytes - chunk.len());
                        chunk.extend_from_slice(&bytes[..n]);
                        bytes = &bytes[n..];
                        if !send(&mut chunk, false) {
                            return;
                        }
                    }
                }
                FramePart::File(range) => {
                    let mut done = 0u64;
                    while done < range.len {
                        let n = (range.len - done).min((chunk_bytes - chunk.len()) as u64);
                        let piece = FileRange {
                            position: range.position + done,
                            len: n,
                            ..range.clone()
                        };
                        let read = pinned_file(&pinned, &piece)
                            .and_then(|file| append_range(file, &piece, &mut chunk));
                        if let Err(error) = read {
                            let _ = chunks.blocking_send(Err(FrameReadError::Part {
                                range: range.clone(),
                                error,
                            }));
                            return;
                        }
                        done += n;
                        if !send(&mut chunk, false) {
                            return;
                        }
                    }
                }
            }
        }
        if !chunk.is_empty() {
            send(&mut chunk, true);
        }
    });
    match rest.recv().await {
        Some(Ok(head)) => Ok(Frame {
            head,
            rest: Some(rest),
        }),
        Some(Err(e)) => Err(e),
        None => Err(FrameReadError::Frame("the read stopped".into())),
    }
}

/// Appends exactly `range.len` bytes of `range` to `chunk` (a short file
/// is an error), read by pread(2) straight into its spare capacity. A
/// chunk zero-filled and then overwritten cost about 7% of the broker's CPU
/// while serving a cold fetch (perf: memset beside the page-cache copy).
fn append_range(file: &File, range: &FileRange, chunk: &mut BytesMut) -> Result<(), IoError> {
    let failed = |e: io::Error| read_failed(range, e);
    let len = usize::try_from(range.len).map_err(|_| failed(io::ErrorKind::InvalidInput.into()))?;
    chunk.reserve(len);
    let mut done = 0usize;
    while done < len {
        let want = len - done;
        let at = libc::off_t::try_from(range.position + done as u64)
            .map_err(|_| failed(io::ErrorKind::InvalidInput.into()))?;
        let spare = chunk.spare_capacity_mut();
        assert!(
            spare.len() >= want,
            "reserved above, filled only by this loop"
        );
        // SAFETY: `spare` is writable memory of at least `want` bytes, and
        // pread(2) writes at most `want` bytes to it.
        let n = unsafe { libc::pread(file.as_raw_fd(), spare.as_mut_ptr().cast(), want, at) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(failed(e));
        }
        if n == 0 {
            return Err(failed(io::ErrorKind::UnexpectedEof.into()));
        }
        let n = n as usize;
        // SAFETY: pread(2) initialized the first `n` bytes of the spare
        // capacity, right after the chunk's length.
        unsafe { chunk.set_len(chunk.len() + n) };
        done += n;
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes of `range` (a short file is an error).
fn read_range(file: &File, range: &FileRange, buf: &mut [u8]) -> Result<(), IoError> {
    file.read_exact_at(buf, range.position)
        .map_err(|e| read_failed(range, e))
}

pub(crate) fn read_failed(range: &FileRange, e: io::Error) -> IoError {
    IoError(format!(
        "cannot read {} bytes at {} of {}/{}: {e}",
        range.len,
        range.position,
        range.dir.dir_name(),
        range.file.file_name(range.segment_base)
    ))
}
