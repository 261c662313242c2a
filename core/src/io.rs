//! The whole boundary of the core: what comes in (`Input`) and what goes out
//! (`Output`). The core never touches a socket, a file or a clock; the driver
//! (the tokio adapter in `net`, or the simulator in `sim`) carries these out
//! and reports completions back as inputs.

use bytes::Bytes;

/// A connection, numbered by the driver. Never reused within one run.
pub type ConnId = u64;
/// Names one `DiskOp::Sync` or one `Output::Meta` so its completion can find it.
pub type IoId = u64;

/// A partition's directory on disk, named `{topic}-{partition}` as in Kafka.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionDir {
    pub topic: String,
    pub partition: i32,
}

impl PartitionDir {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
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

/// The segment file name for a base offset, as Kafka names them.
pub fn segment_file_name(base_offset: i64) -> String {
    format!("{base_offset:020}.log")
}

/// Why a disk or meta.db operation failed. The core only needs to know that it
/// failed; the text is for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoError(pub String);

/// What the driver found on disk at start-up, handed to the core once, first.
///
/// Contract: everything in it must be durable. After a process crash the
/// page cache still holds bytes that were never fsynced and reads return
/// them; the driver fsyncs every segment file, partition directory and
/// meta.db before `Input::Boot` (the core serves recovered data as durable,
/// and a power cut after the restart must not take it back).
#[derive(Clone, Debug, Default)]
pub struct BootState {
    /// Every key/value pair of meta.db.
    pub meta: Vec<(Vec<u8>, Vec<u8>)>,
    /// Every partition directory found, with its segments' bytes.
    pub partitions: Vec<RecoveredPartition>,
}

#[derive(Clone, Debug)]
pub struct RecoveredPartition {
    pub dir: PartitionDir,
    /// Segments in any order; the core sorts them by base offset.
    pub segments: Vec<RecoveredSegment>,
}

#[derive(Clone, Debug)]
pub struct RecoveredSegment {
    pub base_offset: i64,
    pub bytes: Bytes,
}

pub enum Input {
    /// The state found on disk. Must be the first input; requests before it
    /// are a driver bug.
    Boot(BootState),
    /// One request frame from a connection, with the 4-byte size prefix removed.
    Frame { conn: ConnId, frame: Bytes },
    /// The connection is gone; anything owed to it is dropped.
    Disconnected { conn: ConnId },
    /// A `DiskOp::Sync` finished: on `Ok`, every disk operation emitted before
    /// that sync is durable. On `Err`, some of them may not be.
    SyncDone {
        io: IoId,
        result: Result<(), IoError>,
    },
    /// An `Output::Meta` batch finished: on `Ok` it is durable in meta.db; on
    /// `Err` none of it may be relied on.
    MetaDone {
        io: IoId,
        result: Result<(), IoError>,
    },
    /// Time passed; the driver sends this when `poll_timeout` is reached.
    Tick,
}

/// Disk work, carried out by the driver strictly in the order emitted.
#[derive(Clone, Debug, PartialEq)]
pub enum DiskOp {
    /// Append bytes at the end of a segment file, creating the directory and
    /// file when absent. No completion: a failure is reported by the next Sync.
    Append {
        dir: PartitionDir,
        segment_base: i64,
        bytes: Bytes,
    },
    /// Make every earlier operation durable (fdatasync of every file and
    /// directory touched since the last sync). Completion: `Input::SyncDone`.
    Sync { io: IoId },
    /// Cut a segment file to `len` bytes (a torn tail, or unsynced bytes after
    /// a failed sync).
    Truncate {
        dir: PartitionDir,
        segment_base: i64,
        len: u64,
    },
    /// Remove one segment file (retention, or a segment past a truncation).
    DeleteSegment {
        dir: PartitionDir,
        segment_base: i64,
    },
    /// Remove a partition directory and everything in it (topic deletion).
    DeletePartition { dir: PartitionDir },
}

/// One change to meta.db; a batch of them is applied atomically.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaOp {
    Put { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// A response frame (without the size prefix), in request order per connection.
    Response {
        conn: ConnId,
        frame: Bytes,
    },
    /// Close this connection (bad input Kafka answers by closing).
    Close {
        conn: ConnId,
    },
    Disk(DiskOp),
    /// Write a batch to meta.db atomically and durably; completion `Input::MetaDone`.
    Meta {
        io: IoId,
        ops: Vec<MetaOp>,
    },
}
