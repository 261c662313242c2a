//! What the server needs from storage, so that the same server runs on real
//! files (production) and on a simulated store (madsim tests).
//!
//! The contract is the core's (`doze_core::io`): disk ops are carried out
//! strictly in the order submitted; a `DiskOp::Sync` is answered with
//! `Input::SyncDone` once everything submitted before it is durable; a
//! `DiskOp::Read` with `Input::ReadDone`, seeing every op before it; a meta
//! batch is applied atomically and answered with `Input::MetaDone` once it is
//! durable. Completions go to the broker task's completion channel. Submitting
//! never blocks the broker task.
//!
//! The file parts of response frames (`Output::ResponseParts`) are read off
//! the broker task, by the connection writers, so that record bytes never
//! pass through it and a slow disk holds up only the connection waiting for
//! them. But *which* file a part reads is fixed in order with the disk ops:
//! **a response's file parts see every disk op submitted before the
//! response was dispatched (`StorageQueue::response_frame`, called in
//! output order with `submit_disk`) and none submitted after it.** The log
//! cleaner renames a new `{base}.log` over the live one while consumers are
//! served, and retention deletes segments: a response planned before the
//! swap or the deletion reads the old file (a descriptor pinned at dispatch
//! keeps its inode alive), one planned after reads the new one, however
//! late its writer gets to it. The contract is about which file a name
//! holds, not about appends and cuts within a file, which need no ordering:
//! the core points a response only at synced bytes (their appends ran before
//! their sync completed) and never cuts those. So a response whose files are
//! already open, with no rename or deletion queued, is pinned at once, with
//! no trip through the disk queue (`filereader.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use doze_core::log::clean::work::CleanerWork;
use doze_core::{limits, DiskOp, FileRange, FramePart, Input, IoError, IoId};
use tokio::sync::mpsc::UnboundedSender;

use crate::metadb::MetaWrite;

#[cfg(not(madsim))]
pub use self::production::{DiskAndSled, Workers};

/// Resolves once the storage has carried out everything submitted before the
/// queue was dropped and made it durable; an error means it may not be.
pub type Finished = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// Bytes of appends (live and `.cleaned`) queued to the disk writer and not
/// yet written. The connection readers start no new request while it is
/// above `APPENDS_QUEUED_BYTES_MAX` (back-pressure: without it a producer
/// with many requests in flight, faster than the disk, fills the broker's
/// memory with queued appends; the cleaner's copies count as well, so a
/// cleaning that outruns the disk slows the producers instead of growing
/// the queue). The request frames themselves are charged to the
/// `RequestBudget` (`budget.rs`).
#[derive(Default)]
pub struct Backlog {
    bytes: std::sync::atomic::AtomicUsize,
    drained: tokio::sync::Notify,
}

impl Backlog {
    /// `n` bytes were queued (a request read, an append submitted).
    pub fn add(&self, n: usize) {
        self.bytes
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// `n` queued bytes left the queue (taken by the core, written or failed).
    pub fn done(&self, n: usize) {
        let before = self
            .bytes
            .fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
        assert!(before >= n, "more append bytes done than queued");
        if before - n <= limits::APPENDS_QUEUED_BYTES_MAX {
            self.drained.notify_waiters();
        }
    }

    pub fn queued_bytes(&self) -> usize {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Resolves once the queued appends are at most the limit.
    pub async fn room(&self) {
        loop {
            // Created before the check, so a `done` in between still wakes it.
            let drained = self.drained.notified();
            if self.queued_bytes() <= limits::APPENDS_QUEUED_BYTES_MAX {
                return;
            }
            drained.await;
        }
    }
}

/// Where the storage's workers report completions.
///
/// `send` queues one for the broker task. `deliver` is for the two a
/// request waits on, `MetaDone` and `SyncDone`: once the server has set its
/// direct path (`set_direct`), the core takes them in on the worker's own
/// thread, under the broker task's lock (`server.rs`), and what they let go
/// on leaves from there: a commit's markers go to the disk queue as soon as
/// its decision is durable, and its answer to the connection's writer as
/// soon as the markers are, instead of each completion first waking the
/// broker task to be handled there: two wake-ups of a thread, on the way
/// of every commit and every acks=all produce (one producer's EndTxn p50
/// went from 0.38-0.40 ms to 0.35-0.36 ms beside it on the bench's
/// machine, whose fdatasync p50 is 0.12 ms).
#[derive(Clone)]
pub struct Completions {
    channel: UnboundedSender<Input>,
    direct: Arc<std::sync::OnceLock<DirectPath>>,
}

/// Hands a completion to the core where it is called; gives it back when the
/// core is gone (the broker task ended), and it then goes to the channel.
pub type DirectPath = Box<dyn Fn(Input) -> Option<Input> + Send + Sync>;

/// The broker task has ended (at shutdown): nobody takes completions.
#[derive(Debug)]
pub struct BrokerGone;

impl Completions {
    pub fn new(channel: UnboundedSender<Input>) -> Self {
        Self {
            channel,
            direct: Arc::default(),
        }
    }

    /// Queues a completion for the broker task. Fails only once the broker
    /// task is gone (at shutdown).
    pub fn send(&self, input: Input) -> Result<(), BrokerGone> {
        self.channel.send(input).map_err(|_| BrokerGone)
    }

    /// A completion a request may wait on: handed to the core on this
    /// thread if the direct path is set, else queued as `send` does. Fails
    /// as `send` does, once the broker task is gone.
    pub fn deliver(&self, input: Input) -> Result<(), BrokerGone> {
        let input = match self.direct.get() {
            Some(direct) => match direct(input) {
                None => return Ok(()),
                Some(input) => input,
            },
            None => input,
        };
        self.send(input)
    }

    /// Sets the direct path, once (the server does, once its core exists).
    pub fn set_direct(&self, direct: DirectPath) {
        assert!(
            self.direct.set(direct).is_ok(),
            "the direct path is set once"
        );
    }
}

impl From<UnboundedSender<Input>> for Completions {
    fn from(channel: UnboundedSender<Input>) -> Self {
        Self::new(channel)
    }
}

/// A storage before it starts: `serve` starts it once, before the core boots.
pub trait Storage {
    type Queue: StorageQueue;

    /// Starts the workers. Completions go to `completions`. Dropping the
    /// returned queue tells the workers to finish; `finished` says when they
    /// have (it does nothing until polled).
    fn start(self, completions: Completions) -> anyhow::Result<Started<Self::Queue>>;
}

/// A started storage.
pub struct Started<Q> {
    /// The broker task's end.
    pub queue: Q,
    /// For the connection readers: the appends not yet written.
    pub backlog: Arc<Backlog>,
    pub finished: Finished,
}

/// The broker task's end of a started storage.
pub trait StorageQueue: Send + 'static {
    /// Queues one disk op, in order. Fails only if the storage is gone, after
    /// which nothing can be made durable.
    fn submit_disk(&self, op: DiskOp) -> Result<(), IoError>;
    /// Queues disk ops, in order, as `submit_disk` one by one would. The
    /// broker task hands over what one input produced at once, so a worker
    /// blocked on its queue wakes once for them (a marker's append, its
    /// index entries and the sync that follows them).
    fn submit_disks(&self, ops: Vec<DiskOp>) -> Result<(), IoError> {
        ops.into_iter().try_for_each(|op| self.submit_disk(op))
    }
    /// Queues one of the cleaner's jobs (`Output::Clean`), in order with
    /// the disk ops: its files are opened after the ops queued before it.
    /// Completion: `Input::CleanerDone`. Fails only if the storage is gone.
    fn submit_clean(&self, io: IoId, work: CleanerWork) -> Result<(), IoError>;
    /// Queues one meta.db batch. Fails only if the storage is gone.
    fn submit_meta(&self, write: MetaWrite) -> Result<(), IoError>;
    /// The core serves (start-up is done): what is read after the ops
    /// queued so far is read for requests. Only the simulated store uses it,
    /// to count what a start itself reads of the logs.
    fn serving(&self) {}
    /// The frame of an `Output::ResponseParts`, its files pinned at this
    /// point of the disk op order (the contract above): called when the
    /// response is dispatched, in output order with `submit_disk`. The
    /// future, awaited by the connection's writer, resolves to the frame,
    /// its 4-byte size prefix included, ready for the socket.
    fn response_frame(&self, parts: Vec<FramePart>) -> FrameFuture;
}

/// A response frame being pinned and read; see `StorageQueue::response_frame`.
pub type FrameFuture = Pin<Box<dyn Future<Output = Result<ReadyFrame, FrameReadError>> + Send>>;

/// A response frame as its future hands it to the connection's writer.
pub enum ReadyFrame {
    /// In memory, or being read into memory chunk by chunk.
    Read(Frame),
    /// A large frame whose files are pinned and not read: the writer sends
    /// it from the page cache with sendfile(2) when its socket is plain TCP
    /// (`PinnedFrame::splice`), else has it read like any other
    /// (`PinnedFrame::read`).
    #[cfg(not(madsim))]
    Pinned(crate::filereader::PinnedFrame),
}

impl From<Frame> for ReadyFrame {
    fn from(frame: Frame) -> Self {
        Self::Read(frame)
    }
}

/// A response frame for the socket: its first bytes (the size prefix with
/// them), then, for a frame too large to read in one go, the rest in chunks
/// read ahead while the first ones are written. A large Fetch response thus
/// costs a few chunks of memory, not its whole size, and its disk reads
/// overlap its socket writes.
pub struct Frame {
    pub head: Bytes,
    /// The chunks after `head`, in order; a read that fails ends them with
    /// its error (the frame is then cut short, and the connection must close).
    pub rest: Option<tokio::sync::mpsc::Receiver<Result<Bytes, FrameReadError>>>,
}

impl Frame {
    /// A frame read whole.
    pub fn whole(bytes: Bytes) -> Self {
        Self {
            head: bytes,
            rest: None,
        }
    }
}

/// Chunk buffers written and given back (`recycle_chunk`), for the next
/// chunks: with glibc's malloc a fresh 1 MiB buffer was an mmap, 256 page
/// faults and a munmap, which cost a quarter of the broker's time reading a
/// warm topic; the pool also spares mimalloc (`alloc.rs`) the work.
static CHUNK_POOL: std::sync::Mutex<Vec<BytesMut>> = std::sync::Mutex::new(Vec::new());

/// An empty buffer of `limits::RESPONSE_CHUNK_BYTES`, recycled if one is.
pub fn chunk_buffer() -> BytesMut {
    let recycled = CHUNK_POOL.lock().unwrap_or_else(|e| e.into_inner()).pop();
    recycled.unwrap_or_else(|| BytesMut::with_capacity(limits::RESPONSE_CHUNK_BYTES))
}

/// A chunk the socket has taken, back to the pool if nothing else holds it
/// and the pool is not full (at most `RESPONSE_CHUNKS_POOLED` are kept).
pub fn recycle_chunk(chunk: Bytes) {
    let Ok(mut buffer) = chunk.try_into_mut() else {
        return;
    };
    if buffer.capacity() < limits::RESPONSE_CHUNK_BYTES {
        return;
    }
    buffer.clear();
    let mut pool = CHUNK_POOL.lock().unwrap_or_else(|e| e.into_inner());
    if pool.len() < limits::RESPONSE_CHUNKS_POOLED {
        pool.push(buffer);
    }
}

/// The size prefix of a frame of `parts`, or why it cannot be sent.
pub fn frame_size(parts: &[FramePart]) -> Result<i32, FrameReadError> {
    let total: u64 = parts
        .iter()
        .map(|part| match part {
            FramePart::Bytes(bytes) => bytes.len() as u64,
            FramePart::File(range) => range.len,
        })
        .fold(0, u64::saturating_add);
    i32::try_from(total).map_err(|_| FrameReadError::Frame(format!("a response of {total} bytes")))
}

/// Why a frame of parts cannot be sent. Either way the connection closes
/// with nothing of the frame sent.
#[derive(Debug)]
pub enum FrameReadError {
    /// A file part could not be read (EIO, the file gone at the dispatch
    /// point or too short): the core hears of it (`Input::ResponseReadFailed`).
    Part { range: FileRange, error: IoError },
    /// The frame as a whole cannot be sent: longer than its i32 size prefix
    /// allows (a core bug), or the disk worker stopped before pinning its
    /// files (shutting down).
    Frame(String),
}

/// Assembles a frame: the size prefix, then each part, file parts read by
/// `read` straight into the frame's buffer (one buffer, one copy).
pub fn assemble_frame(
    parts: &[FramePart],
    mut read: impl FnMut(&FileRange, &mut [u8]) -> Result<(), IoError>,
) -> Result<Bytes, FrameReadError> {
    let size = frame_size(parts)?;
    // Fits: i32::MAX bytes fit a usize on every target we build for.
    let mut frame = BytesMut::with_capacity(4 + size as usize);
    frame.put_i32(size);
    for part in parts {
        match part {
            FramePart::Bytes(bytes) => frame.extend_from_slice(bytes),
            FramePart::File(range) => {
                let start = frame.len();
                frame.resize(start + range.len as usize, 0);
                read(range, &mut frame[start..]).map_err(|error| FrameReadError::Part {
                    range: range.clone(),
                    error,
                })?;
            }
        }
    }
    Ok(frame.freeze())
}

// Not in a madsim build: madsim forbids OS threads, and its stand-in is
// `simstore::SimStorage`.
#[cfg(not(madsim))]
mod production {
    use std::path::PathBuf;
    use std::sync::Arc;

    use anyhow::{anyhow, Context};
    use doze_core::{DiskOp, FramePart, IoError};

    use super::Backlog;

    use super::{
        CleanerWork, Completions, Finished, FrameFuture, IoId, Started, Storage, StorageQueue,
    };
    use crate::console::metrics::NetMetrics;
    use crate::disk::{DiskQueue, DiskWorker};
    use crate::filereader::FileReader;
    use crate::metadb::{MetaQueue, MetaWorker, MetaWrite};
    use crate::metastore::MetaStore;

    /// Production storage: segment files under `logs_dir` written and read by
    /// the disk worker thread (`disk.rs`), response file parts pinned by it
    /// and read by `filereader.rs`, and meta.db (sled) owned by the meta worker thread
    /// (`metadb.rs`).
    pub struct DiskAndSled {
        pub logs_dir: PathBuf,
        /// meta.db, opened and replayed at start-up.
        pub meta: MetaStore,
        /// Where the disk worker measures its group commits.
        pub metrics: Arc<NetMetrics>,
    }

    pub struct Workers {
        disk: DiskQueue,
        meta: MetaQueue,
    }

    impl StorageQueue for Workers {
        fn submit_disk(&self, op: DiskOp) -> Result<(), IoError> {
            self.disk.submit(op)
        }

        fn submit_disks(&self, ops: Vec<DiskOp>) -> Result<(), IoError> {
            self.disk.submit_all(ops)
        }

        fn submit_clean(&self, io: IoId, work: CleanerWork) -> Result<(), IoError> {
            self.disk.submit_clean(io, work)
        }

        fn submit_meta(&self, write: MetaWrite) -> Result<(), IoError> {
            self.meta.submit(write)
        }

        fn response_frame(&self, parts: Vec<FramePart>) -> FrameFuture {
            self.disk.response_frame(parts)
        }
    }

    impl Storage for DiskAndSled {
        type Queue = Workers;

        fn start(self, completions: Completions) -> anyhow::Result<Started<Workers>> {
            let reader = FileReader::new(self.logs_dir.clone());
            let backlog = Arc::new(Backlog::default());
            let (disk, disk_thread) = DiskWorker::spawn(
                self.logs_dir,
                completions.clone(),
                reader,
                Arc::clone(&backlog),
                self.metrics,
            )
            .context("cannot start the disk worker")?
            .into_parts();
            let (meta, meta_thread) = MetaWorker::spawn(self.meta, completions)
                .context("cannot start the meta worker")?
                .into_parts();
            let finished: Finished = Box::pin(async move {
                // Once the queues are dropped the workers finish what was queued,
                // sync or flush it, and stop. Joined off the async threads.
                let (disk_result, meta_result) =
                    tokio::task::spawn_blocking(move || (disk_thread.join(), meta_thread.join()))
                        .await
                        .context("cannot join the workers")?;
                let disk_result = disk_result.map_err(|_| anyhow!("the disk worker panicked"))?;
                let meta_result = meta_result.map_err(|_| anyhow!("the meta worker panicked"))?;
                disk_result.map_err(|e| anyhow!("final disk sync failed: {}", e.0))?;
                meta_result.map_err(|e| anyhow!("final meta.db flush failed: {}", e.0))?;
                Ok(())
            });
            Ok(Started {
                queue: Workers { disk, meta },
                backlog,
                finished,
            })
        }
    }
}

#[cfg(all(test, not(madsim)))]
mod backlog_tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn readers_wait_while_the_backlog_is_over_the_limit() {
        let backlog = Arc::new(Backlog::default());
        backlog.room().await; // empty: room at once
        backlog.add(limits::APPENDS_QUEUED_BYTES_MAX + 1);
        let waiting = tokio::spawn({
            let backlog = Arc::clone(&backlog);
            async move { backlog.room().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "over the limit: the reader waits");
        backlog.done(1);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("back at the limit: the reader goes on")
            .unwrap();
        backlog.done(limits::APPENDS_QUEUED_BYTES_MAX);
        assert_eq!(backlog.queued_bytes(), 0);
    }
}
