//! The words of the core's boundary that every layer speaks: connections,
//! disk operations on segment files, meta.db changes, and what the driver
//! found on disk at start-up. The boundary itself, what comes in (`Input`)
//! and what goes out (`Output`), is `crate::boundary`, above every module
//! whose types it carries; this module names none of them, so the log and
//! the stores below can use it.

use std::sync::Arc;

use bytes::Bytes;

/// A connection, numbered by the driver. Never reused within one run.
pub type ConnId = u64;
/// Names one `DiskOp::Sync` or one `Output::Meta` so its completion can find it.
pub type IoId = u64;

/// A partition's directory on disk, named `{topic}-{partition}` as in Kafka.
/// The name is shared (`Arc`): every disk operation of the partition carries
/// its directory, and a clone must not allocate on the produce path.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionDir {
    pub topic: Arc<str>,
    pub partition: i32,
}

impl PartitionDir {
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }

    /// The directory name under `<data-dir>/logs/`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// Parses a directory name written by `dir_name` (topic names may hold '-').
    pub fn parse_dir_name(name: &str) -> Option<Self> {
        let (topic, partition) = name.rsplit_once('-')?;
        let partition: i32 = partition.parse().ok()?;
        if topic.is_empty() || partition < 0 {
            return None;
        }
        Some(Self::new(topic, partition))
    }
}

/// The files of one segment, named as Kafka names them:
/// `{base_offset:020}.log` holds the batches; `.index` (8-byte entries: the
/// offset of a batch's last record relative to the segment base, u32 BE, and
/// the batch's position in the `.log`, u32 BE), `.timeindex` (12-byte entries:
/// a max timestamp so far, i64 BE, and the relative last offset of the batch
/// that reached it, u32 BE) and `.txnindex` (34-byte entries of aborted
/// transactions: version i16 = 0, producer id, first offset, last offset, last
/// stable offset, all i64 BE) are the caches Kafka keeps beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SegmentFile {
    Log,
    OffsetIndex,
    TimeIndex,
    TxnIndex,
}

impl SegmentFile {
    pub const ALL: [SegmentFile; 4] = [
        SegmentFile::Log,
        SegmentFile::OffsetIndex,
        SegmentFile::TimeIndex,
        SegmentFile::TxnIndex,
    ];

    pub fn extension(self) -> &'static str {
        match self {
            SegmentFile::Log => "log",
            SegmentFile::OffsetIndex => "index",
            SegmentFile::TimeIndex => "timeindex",
            SegmentFile::TxnIndex => "txnindex",
        }
    }

    /// The file's name for a segment's base offset.
    pub fn file_name(self, base_offset: i64) -> String {
        format!("{base_offset:020}.{}", self.extension())
    }

    /// The inverse of `file_name`: (base offset, kind).
    pub fn parse_file_name(name: &str) -> Option<(i64, SegmentFile)> {
        let (digits, extension) = name.split_once('.')?;
        let kind = Self::ALL.into_iter().find(|k| k.extension() == extension)?;
        if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((digits.parse().ok()?, kind))
    }
}

/// Which name a segment's file goes by: its live name, or one of the two
/// names the log cleaner writes a replacement under before it is swapped in,
/// as Kafka's cleaner does (`{name}.cleaned` while being written,
/// `{name}.swap` once complete). A rename from `Swap` to `Live` replaces the
/// live file atomically (rename(2)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileStage {
    Live,
    Cleaned,
    Swap,
}

impl FileStage {
    /// What the stage appends to the file's live name.
    pub fn suffix(self) -> &'static str {
        match self {
            FileStage::Live => "",
            FileStage::Cleaned => ".cleaned",
            FileStage::Swap => ".swap",
        }
    }

    /// The file's name at this stage.
    pub fn file_name(self, file: SegmentFile, base_offset: i64) -> String {
        format!("{}{}", file.file_name(base_offset), self.suffix())
    }

    /// The inverse of `file_name`: (base offset, kind, stage).
    pub fn parse_file_name(name: &str) -> Option<(i64, SegmentFile, FileStage)> {
        for stage in [FileStage::Cleaned, FileStage::Swap] {
            if let Some(live) = name.strip_suffix(stage.suffix()) {
                let (base, kind) = SegmentFile::parse_file_name(live)?;
                return Some((base, kind, stage));
            }
        }
        let (base, kind) = SegmentFile::parse_file_name(name)?;
        Some((base, kind, FileStage::Live))
    }
}

/// The segment file name for a base offset, as Kafka names them.
pub fn segment_file_name(base_offset: i64) -> String {
    SegmentFile::Log.file_name(base_offset)
}

/// A byte range of one segment file.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileRange {
    pub dir: PartitionDir,
    pub segment_base: i64,
    pub file: SegmentFile,
    pub position: u64,
    pub len: u64,
}

/// One piece of a response frame: bytes the core built, or a range of a
/// segment file that the driver copies to the socket itself (sendfile or
/// pread), so record data never passes through the core.
#[derive(Clone, Debug, PartialEq)]
pub enum FramePart {
    Bytes(Bytes),
    File(FileRange),
}

/// Why a disk or meta.db operation failed. The core only needs to know that it
/// failed; the text is for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoError(pub String);

/// What the driver found on disk at start-up, handed to the core once, first.
///
/// The driver lists the data dir and reads meta.db and the small index files;
/// it reads no segment data and fsyncs nothing. The core decides what it must
/// scan (what lies above each partition's recovery point, and any segment
/// whose indexes are missing or inconsistent), reads it through
/// `DiskOp::Read`, and makes what it adopts durable with `DiskOp::Adopt` and a
/// `Sync` before serving it: after a process crash the page cache still holds
/// bytes that were never fsynced, and reads return them.
#[derive(Clone, Debug, Default)]
pub struct BootState {
    /// Every key/value pair of meta.db.
    pub meta: Vec<(Vec<u8>, Vec<u8>)>,
    /// Every partition directory found, with its segments.
    pub partitions: Vec<RecoveredPartition>,
    /// Random bytes from the driver (the OS's, or the simulator's seed):
    /// the core makes SCRAM's server nonces from them, having no
    /// randomness of its own.
    pub entropy: [u8; 32],
    /// The clean-shutdown file (`CLEAN_SHUTDOWN_FILE_NAME`) was in the data
    /// dir: the last process stopped cleanly, every segment file is
    /// durable as listed, and the core removes the file
    /// (`DiskOp::RemoveCleanShutdown`) before anything else
    /// (`core_state::clean_shutdown`).
    pub clean_shutdown: bool,
}

/// The clean-shutdown file's name, in `<data-dir>/logs/` beside the
/// partition directories, as Kafka keeps `.kafka_cleanshutdown` in each log
/// dir (`CleanShutdownFileHandler`, read by `LogManager.loadLogs`). Its
/// presence is all it says; it is empty. Not Kafka's name: doze vouches
/// only for a file doze wrote.
pub const CLEAN_SHUTDOWN_FILE_NAME: &str = ".doze_cleanshutdown";

#[derive(Clone, Debug)]
pub struct RecoveredPartition {
    pub dir: PartitionDir,
    /// Segments in any order; the core sorts them by base offset. A segment
    /// is listed when any of its live files is present.
    pub segments: Vec<RecoveredSegment>,
    /// The cleaner's replacements found complete: one entry per segment base
    /// whose `.log.swap` is present, describing its `.swap` files as
    /// `segments` describes live ones (a `None` file: no `.swap` of it; the
    /// swap had already renamed it into place). The core finishes the swap.
    pub swaps: Vec<RecoveredSegment>,
    /// Segment bases with any other `.cleaned` or `.swap` file: a cleaning
    /// that did not commit, which the core discards. A base that is also in
    /// `swaps` is a swap, never discarded (`log::clean::finish_swaps`).
    pub abandoned: Vec<i64>,
}

#[derive(Clone, Debug, Default)]
pub struct RecoveredSegment {
    pub base_offset: i64,
    /// Length of the `.log` file; `None` when it is absent.
    pub log_bytes: Option<u64>,
    /// Contents of the index files, whole; `None` when a file is absent.
    pub offset_index: Option<Bytes>,
    pub time_index: Option<Bytes>,
    pub txn_index: Option<Bytes>,
}

/// Disk work, carried out by the driver strictly in the order emitted.
#[derive(Clone, Debug, PartialEq)]
pub enum DiskOp {
    /// Append bytes at the end of one of a segment's files, creating the
    /// directory and file when absent. No completion: a failure is reported
    /// by the next Sync.
    Append {
        dir: PartitionDir,
        segment_base: i64,
        file: SegmentFile,
        bytes: Bytes,
    },
    /// Append a record batch at the end of a segment's `.log`: `batch` as
    /// the client sent it (or the broker built it) with its base offset set
    /// to `base_offset` and its partition leader epoch to the node's
    /// (`batch::stored_prefix`). Offsets are assigned without copying the
    /// batch (both lie outside its CRC); `batch::with_base_offset` gives
    /// the bytes written. Creates the directory and file when absent; no
    /// completion, as `Append`.
    AppendBatch {
        dir: PartitionDir,
        segment_base: i64,
        base_offset: i64,
        batch: Bytes,
    },
    /// Make every earlier operation durable (fdatasync of every file and
    /// directory touched or adopted since the last sync), but for what
    /// `scope` leaves for a later one. Completion: `Input::SyncDone`.
    Sync { io: IoId, scope: SyncScope },
    /// Cut one of a segment's files to `len` bytes (a torn tail, unsynced
    /// bytes after a failed sync, an index entry past its log).
    Truncate {
        dir: PartitionDir,
        segment_base: i64,
        file: SegmentFile,
        len: u64,
    },
    /// Remove a segment: its `.log` and its index files, and any `.cleaned`
    /// or `.swap` file of it, those present.
    DeleteSegment {
        dir: PartitionDir,
        segment_base: i64,
    },
    /// Remove a partition directory and everything in it (topic deletion).
    DeletePartition { dir: PartitionDir },
    /// Read a byte range of a segment file. Completion: `Input::ReadDone`
    /// with exactly `range.len` bytes, or an error (EIO, a file gone or
    /// shorter than the range). It sees every earlier operation.
    Read { io: IoId, range: FileRange },
    /// Append bytes at the end of a segment file's `.cleaned` copy (the log
    /// cleaner's replacement being written), creating it when absent. No
    /// completion: a failure is reported by the next Sync, which also makes
    /// the bytes durable.
    AppendCleaned {
        dir: PartitionDir,
        segment_base: i64,
        file: SegmentFile,
        bytes: Bytes,
    },
    /// Rename one of a segment's files from one stage to another
    /// (`Cleaned` to `Swap`, or `Swap` to `Live`, which replaces the live file
    /// atomically). Durable once the next Sync completes (it fsyncs the
    /// directory); until then a power cut may undo it. No completion: a
    /// failure (a missing source) is reported by the next Sync.
    Rename {
        dir: PartitionDir,
        segment_base: i64,
        file: SegmentFile,
        from: FileStage,
        to: FileStage,
    },
    /// Remove a segment's `.cleaned` and `.swap` files, those present (a
    /// cleaning abandoned, or found abandoned at start-up). Durable with the
    /// next Sync.
    DiscardStaged {
        dir: PartitionDir,
        segment_base: i64,
    },
    /// The core takes a segment's files as they are on disk (found at
    /// start-up, maybe left unsynced in the page cache by a crashed process):
    /// the next Sync makes them durable as if they had just been written.
    Adopt {
        dir: PartitionDir,
        segment_base: i64,
    },
    /// Create the clean-shutdown file (`CLEAN_SHUTDOWN_FILE_NAME`), then
    /// fsync it and its directory. Emitted only once everything before it is
    /// durable (at a clean stop, before `Output::Stopped`). Completion:
    /// `Input::CleanShutdownDone`, once it is durable (or an error: the file
    /// may then be there or not).
    WriteCleanShutdown { io: IoId },
    /// Remove the clean-shutdown file, then fsync its directory; absent is
    /// not an error. Completion: `Input::CleanShutdownDone`, once the
    /// removal is durable. At start-up, the first op; the core emits no
    /// other until it completes.
    RemoveCleanShutdown { io: IoId },
}

/// What a `DiskOp::Sync` makes durable.
///
/// A live segment's index files (`.index`, `.timeindex`, `.txnindex`) are
/// a cache of its batch headers: a start-up trusts them only below the
/// partition's recovery checkpoint and writes them again above it (as Kafka
/// rebuilds the indexes above its recovery point). So an acknowledged write
/// needs its `.log` bytes durable, not its index entries, and only the sync
/// a checkpoint is taken after must cover those (`checkpoint`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncScope {
    /// Every earlier operation but appends to live index files: a file
    /// whose only unsynced change is appended entries stays unsynced (its
    /// directory entry is synced), until an `All` sync.
    Logs,
    /// Every earlier operation, the deferred index appends included.
    All,
}

/// One change to meta.db; a batch of them is applied atomically.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaOp {
    Put { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
}
