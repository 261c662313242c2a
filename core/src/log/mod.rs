//! One partition's log. The batches live in segment files on disk; the core
//! holds what it decides with: the segment list with each segment's sparse
//! offset and time indexes (`segment.rs`, `index.rs`), the log start, high
//! watermark and end offsets, and a bounded cache of the positions of the
//! most recently appended batches (`known`), which lets a consumer at the
//! tail be served without a read. Memory does not grow with retained bytes
//! beyond the sparse indexes (20 bytes per 4 KiB of log).
//!
//! Writes are `DiskOp`s that the caller pushes to its output queue, in the
//! order returned. Reads are `DiskOp::Read`s planned here (`read.rs`: where a
//! fetch starts, which range it sends, where a timestamp lies) and carried out
//! by the driver; a Fetch response carries file ranges, not bytes.
//!
//! Offsets: `log_start_offset <= high_watermark <= log_end_offset`. The log end
//! offset is the next offset to assign. The high watermark is the end of the
//! durable data: everything below it has been synced (single node, so it is
//! also what consumers may see). It moves only when a sync completes
//! (`mark_durable`), and after a failed sync everything above it is cut off
//! (`truncate_to_durable`).

pub mod clean;
pub mod index;
mod read;
pub mod recovery;
mod retention;
mod segment;

#[cfg(test)]
mod tests;

pub use index::AbortedTxn;
pub use read::{Locate, ReadError, Reads, TimeSearch};
pub use segment::Segment;

use crate::batch::{self, BatchHeader};
use crate::io::{DiskOp, PartitionDir, SegmentFile, SyncScope};
use crate::limits;
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;

/// Kafka's index.interval.bytes default: an offset index entry per 4 KiB.
pub const INDEX_INTERVAL_BYTES: u64 = 4096;

/// Where one batch lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchPos {
    pub base_offset: i64,
    pub last_offset: i64,
    pub segment_base: i64,
    pub position: u64,
    pub size_bytes: u64,
    pub max_timestamp_ms: i64,
}

impl BatchPos {
    pub fn of(header: &BatchHeader, segment_base: i64, position: u64) -> Self {
        Self {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            segment_base,
            position,
            size_bytes: header.total_bytes() as u64,
            max_timestamp_ms: header.max_timestamp,
        }
    }

    pub fn end_position(&self) -> u64 {
        self.position + self.size_bytes
    }
}

/// A place in the log: a segment and a byte position in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LogPosition {
    pub segment_base: i64,
    pub position: u64,
}

/// What `append` did.
#[derive(Clone, Debug, PartialEq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The broker time stamped on the batch with LogAppendTime; -1 otherwise
    /// (what ProduceResponse's log_append_time_ms wants).
    pub log_append_time_ms: i64,
    /// Where the batch went.
    pub pos: BatchPos,
    /// Disk work to emit, in order.
    pub ops: Vec<DiskOp>,
}

/// The log's end at the moment a `DiskOp::Sync` is emitted: once that sync
/// completes OK, everything below `log_end_offset` is durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncPoint {
    log_end_offset: i64,
    end: LogPosition,
    appended_bytes: u64,
    /// The largest timestamp of the end's segment and the last offset of the
    /// batch holding it: once durable, what a later truncation keeps of it.
    max_timestamp: (i64, i64),
    /// For a `SyncScope::All` sync, the index file lengths of every segment
    /// with index bytes not known durable, durable once this sync is (a
    /// `Logs` sync leaves index appends out, over many rolls).
    index_bytes: Vec<(i64, [u64; 3])>,
    /// Points captured before a `truncate_to_durable` are void: after a failed
    /// sync, a later sync's success says nothing about the pages lost earlier.
    generation: u64,
}

/// One partition's log. See the module comment.
pub struct PartitionLog {
    dir: PartitionDir,
    segment_bytes: u64,
    /// segment.ms: an append rolls the active segment once it has waited
    /// longer than this (`Segment::time_waited_for_roll_ms`).
    segment_ms: i64,
    /// Oldest first; the last is the active segment, the only one appended to.
    /// Empty only for a new log before its first append.
    segments: VecDeque<Segment>,
    log_start_offset: i64,
    /// The log start meta.db holds (DeleteRecords stored it; 0 when none).
    /// Below `log_start_offset` when retention moved the start since: that
    /// start is durable only once its deletions are synced.
    stored_log_start: i64,
    log_end_offset: i64,
    high_watermark: i64,
    /// Where the high watermark lies (a batch boundary).
    high_watermark_position: LogPosition,
    /// The largest timestamp below the high watermark in its segment, and
    /// the last offset of the batch holding it ((-1, -1): none). The segment
    /// knows only its largest timestamp overall, and its sparse time index
    /// may miss the batches after its last entry; a truncation and a
    /// checkpoint need this one.
    durable_max_timestamp: (i64, i64),
    /// The high watermark as of the last `SyncScope::All` sync: the index
    /// entries of the batches below it are durable. A `Logs` sync moves the
    /// high watermark and leaves this behind; a checkpoint vouches for the
    /// index entries below its offset, so it waits for this to catch up.
    indexes_durable_offset: i64,
    sync_generation: u64,
    /// Bytes appended (or found by the start-up scan) since start-up, and how
    /// many of them are durable: what checkpoints are paced by.
    appended_bytes: u64,
    durable_bytes: u64,
    /// Positions of recent batches by base offset, at most
    /// `limits::KNOWN_BATCHES_MAX`: a consumer at the tail, the LSO and a
    /// duplicate's answer are found without a read.
    known: BTreeMap<i64, BatchPos>,
}

impl fmt::Debug for PartitionLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartitionLog")
            .field("dir", &self.dir)
            .field("log_start_offset", &self.log_start_offset)
            .field("high_watermark", &self.high_watermark)
            .field("log_end_offset", &self.log_end_offset)
            .field("segments", &self.segments.len())
            .finish()
    }
}

impl PartitionLog {
    /// An empty log starting at offset 0. Its first segment (base 0) is
    /// created by the first append.
    pub fn new(dir: PartitionDir, segment_bytes: u64) -> Self {
        Self::starting_at(dir, segment_bytes, 0)
    }

    fn starting_at(dir: PartitionDir, segment_bytes: u64, offset: i64) -> Self {
        Self {
            dir,
            segment_bytes,
            // No time roll until the topic's segment.ms is set: a log made
            // without a topic (tests, tools) rolls by size alone.
            segment_ms: i64::MAX,
            segments: VecDeque::new(),
            log_start_offset: offset,
            stored_log_start: 0,
            log_end_offset: offset,
            high_watermark: offset,
            high_watermark_position: LogPosition {
                segment_base: offset,
                position: 0,
            },
            durable_max_timestamp: (batch::NO_TIMESTAMP, -1),
            indexes_durable_offset: offset,
            sync_generation: 0,
            appended_bytes: 0,
            durable_bytes: 0,
            known: BTreeMap::new(),
        }
    }

    // ---- getters ----

    /// The partition's directory, named in every DiskOp.
    pub fn dir(&self) -> &PartitionDir {
        &self.dir
    }

    /// The first offset still in the log (earlier ones were deleted by retention).
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// The log start meta.db holds (0 when none).
    pub fn stored_log_start(&self) -> i64 {
        self.stored_log_start
    }

    /// meta.db now holds `offset` as this log's start.
    pub fn log_start_stored(&mut self, offset: i64) {
        self.stored_log_start = self.stored_log_start.max(offset);
    }

    /// The next offset to assign.
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    /// The end of the durable data: every offset below it is synced.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// Where the high watermark lies.
    pub fn high_watermark_position(&self) -> LogPosition {
        self.high_watermark_position
    }

    /// Bytes of all retained segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size_bytes).sum()
    }

    /// Bytes made durable since start-up (a counter: checkpoints are paced by it).
    pub fn durable_bytes(&self) -> u64 {
        self.durable_bytes
    }

    /// Whether the index entries of every batch below the high watermark
    /// are durable (a checkpoint at the high watermark may vouch for them).
    pub fn indexes_durable(&self) -> bool {
        self.indexes_durable_offset >= self.high_watermark
    }

    /// Segments, oldest first; the last is the active one.
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter()
    }

    /// Entries held in memory for this log (index entries and known batch
    /// positions): what its memory grows with.
    pub fn memory_entries(&self) -> usize {
        self.segments
            .iter()
            .map(Segment::index_entries)
            .sum::<usize>()
            + self.known.len()
    }

    /// The position of the end of the log.
    pub fn end_position(&self) -> LogPosition {
        match self.segments.back() {
            Some(s) => LogPosition {
                segment_base: s.base_offset,
                position: s.size_bytes,
            },
            None => LogPosition {
                segment_base: self.log_end_offset,
                position: 0,
            },
        }
    }

    /// Index of the segment holding `offset` (the last one based at or below it).
    fn segment_index(&self, offset: i64) -> Option<usize> {
        let after = self.segments.partition_point(|s| s.base_offset <= offset);
        after.checked_sub(1)
    }

    fn segment(&self, base_offset: i64) -> Option<&Segment> {
        let i = self.segment_index(base_offset)?;
        let s = &self.segments[i];
        (s.base_offset == base_offset).then_some(s)
    }

    fn remember(&mut self, pos: BatchPos) {
        self.known.insert(pos.base_offset, pos);
        while self.known.len() > limits::KNOWN_BATCHES_MAX {
            self.known.pop_first();
        }
    }

    /// Whether the log holds the bytes of `range` (its segment is retained
    /// and long enough).
    pub fn holds(&self, range: &crate::io::FileRange) -> bool {
        let end = range.position.saturating_add(range.len);
        match range.file {
            SegmentFile::Log => self
                .segment(range.segment_base)
                .is_some_and(|s| end <= s.size_bytes),
            _ => self.segment(range.segment_base).is_some(),
        }
    }

    /// The known batch holding `offset`, if its position is remembered.
    pub fn known_batch(&self, offset: i64) -> Option<BatchPos> {
        let (_, pos) = self.known.range(..=offset).next_back()?;
        (pos.last_offset >= offset).then_some(*pos)
    }

    // ---- mutators ----

    /// Changes segment.bytes for the segments rolled from now on.
    pub fn set_segment_bytes(&mut self, segment_bytes: u64) {
        self.segment_bytes = segment_bytes;
    }

    /// Changes segment.ms: from the next append on, the active segment rolls
    /// once it is older than this.
    pub fn set_segment_ms(&mut self, segment_ms: i64) {
        assert!(segment_ms >= 1, "segment.ms is at least 1");
        self.segment_ms = segment_ms;
    }

    /// segment.bytes and segment.ms, as set.
    pub fn roll_limits(&self) -> (u64, i64) {
        (self.segment_bytes, self.segment_ms)
    }

    /// Appends one batch, already validated (`batch::split_produce_records`)
    /// or built by the broker (a marker), at the log end offset. Rolls to a new
    /// segment when the active one is non-empty and the batch would take it
    /// past segment.bytes (a batch larger than segment.bytes gets a segment of
    /// its own), when it has waited longer than segment.ms (Kafka's
    /// LogSegment.shouldRoll, checked at append as there), or when its
    /// offsets would not fit the index's relative offsets. With
    /// `log_append_time` the batch is stamped with `now_ms`.
    pub fn append(&mut self, batch: Bytes, now_ms: i64, log_append_time: bool) -> AppendInfo {
        let base_offset = self.log_end_offset;
        let log_append_time_ms = if log_append_time {
            now_ms
        } else {
            batch::NO_TIMESTAMP
        };
        // Only LogAppendTime changes bytes under the CRC, which takes a copy;
        // the base offset and leader epoch are set as the batch is written
        // (AppendBatch).
        let batch = if log_append_time {
            batch::rewrite(&batch, base_offset, Some(now_ms))
        } else {
            batch
        };
        let mut header = batch::parse_header(&batch).expect("append takes a validated batch");
        header.base_offset = base_offset;
        assert!(
            header.last_offset_delta >= 0,
            "a validated batch has a non-negative offset delta"
        );
        assert_eq!(
            batch.len(),
            header.total_bytes(),
            "append takes exactly one batch"
        );
        let size_bytes = batch.len() as u64;
        let mut ops = Vec::new();
        let segment_ms = self.segment_ms;
        let roll = match self.segments.back_mut() {
            None => true,
            Some(active) => {
                let full = active.size_bytes + size_bytes > self.segment_bytes;
                let relative_overflow =
                    header.last_offset() - active.base_offset > i64::from(i32::MAX);
                let waited_ms = active.time_waited_for_roll_ms(now_ms, header.max_timestamp);
                let aged = waited_ms > segment_ms;
                active.size_bytes > 0 && (full || relative_overflow || aged)
            }
        };
        if roll {
            ops.extend(self.roll(base_offset, now_ms));
        }
        let dir = self.dir.clone();
        let active = self
            .segments
            .back_mut()
            .expect("a segment exists after the roll check");
        assert!(
            active.base_offset <= base_offset,
            "a segment's base is at or before its batches"
        );
        let position = active.size_bytes;
        ops.push(DiskOp::AppendBatch {
            dir: dir.clone(),
            segment_base: active.base_offset,
            base_offset,
            batch,
        });
        ops.extend(active.on_batch(&dir, &header, position, INDEX_INTERVAL_BYTES));
        active.last_append_ms = now_ms;
        let pos = BatchPos::of(&header, active.base_offset, position);
        self.remember(pos);
        self.appended_bytes += size_bytes;
        self.log_end_offset = pos.last_offset + 1;
        AppendInfo {
            base_offset,
            last_offset: pos.last_offset,
            log_append_time_ms,
            pos,
            ops,
        }
    }

    /// Starts a new active segment at `base_offset`: the old one gets its
    /// final time index entry, the new one its four files.
    fn roll(&mut self, base_offset: i64, now_ms: i64) -> Vec<DiskOp> {
        let mut ops = Vec::new();
        let dir = self.dir.clone();
        if let Some(active) = self.segments.back_mut() {
            ops.extend(active.maybe_time_entry(&dir));
        }
        let mut segment = Segment::new(base_offset);
        segment.created_ms = now_ms;
        ops.extend(segment.create_ops(&dir));
        self.segments.push_back(segment);
        ops
    }

    /// Books an aborted transaction whose marker was just appended (or
    /// found): the entry goes to the `.txnindex` of the marker's segment.
    pub fn append_aborted(&mut self, aborted: &AbortedTxn) -> DiskOp {
        let i = self
            .segment_index(aborted.last_offset)
            .expect("the marker's segment is retained");
        let segment = &mut self.segments[i];
        segment.txn_entries += 1;
        DiskOp::Append {
            dir: self.dir.clone(),
            segment_base: segment.base_offset,
            file: SegmentFile::TxnIndex,
            bytes: aborted.encode(),
        }
    }

    /// Captures the log end to pass to `mark_durable` once the `DiskOp::Sync`
    /// the caller emits now completes OK.
    pub fn sync_point(&self, scope: SyncScope) -> SyncPoint {
        let index_bytes = match scope {
            SyncScope::Logs => Vec::new(),
            SyncScope::All => self
                .segments
                .iter()
                .filter(|s| s.indexes_unsynced())
                .map(|s| (s.base_offset, s.index_bytes()))
                .collect(),
        };
        SyncPoint {
            log_end_offset: self.log_end_offset,
            end: self.end_position(),
            appended_bytes: self.appended_bytes,
            max_timestamp: self.segments.back().map_or((batch::NO_TIMESTAMP, -1), |s| {
                (s.max_timestamp_ms, s.offset_of_max_timestamp)
            }),
            index_bytes,
            generation: self.sync_generation,
        }
    }

    /// A sync emitted at `point` completed OK: the high watermark advances to
    /// it (never backwards), and with `SyncScope::All` the index entries
    /// below it are durable too. A point from before a `truncate_to_durable`
    /// is ignored.
    pub fn mark_durable(&mut self, point: SyncPoint, scope: SyncScope) {
        if point.generation != self.sync_generation {
            return;
        }
        assert!(
            point.log_end_offset <= self.log_end_offset,
            "without a truncation the log end offset never moves back"
        );
        if point.log_end_offset > self.high_watermark {
            self.high_watermark = point.log_end_offset;
            self.high_watermark_position = point.end;
            self.durable_max_timestamp = point.max_timestamp;
        }
        self.durable_bytes = self.durable_bytes.max(point.appended_bytes);
        if scope == SyncScope::Logs {
            return;
        }
        self.indexes_durable_offset = self.indexes_durable_offset.max(point.log_end_offset);
        for (base, bytes) in &point.index_bytes {
            if let Some(segment) = self.segments.iter_mut().find(|s| s.base_offset == *base) {
                for (durable, now) in segment.durable_index_bytes.iter_mut().zip(bytes) {
                    *durable = (*durable).max(*now);
                }
            }
        }
    }

    /// After a failed sync: drops everything above the high watermark and
    /// returns the ops that cut the files to match (the segment holding the
    /// high watermark is cut there and its index files repaired; every later
    /// segment is deleted). Afterwards `log_end_offset() == high_watermark()`.
    /// `aborted_kept` are the aborted transactions whose markers lie in the
    /// high watermark's segment below it (`PartitionTxns::aborted_in` after
    /// `truncate_above`): its `.txnindex` holds exactly those.
    pub fn truncate_to_durable(&mut self, aborted_kept: &[AbortedTxn]) -> Vec<DiskOp> {
        self.sync_generation += 1;
        self.appended_bytes = self.durable_bytes;
        let hw = self.high_watermark;
        let cut = self.high_watermark_position;
        let mut ops = Vec::new();
        while self
            .segments
            .back()
            .is_some_and(|s| s.base_offset > cut.segment_base)
        {
            let gone = self.segments.pop_back().expect("checked");
            ops.push(DiskOp::DeleteSegment {
                dir: self.dir.clone(),
                segment_base: gone.base_offset,
            });
        }
        // Deletions were pushed newest first; the files go in that order too,
        // so a crash midway leaves a prefix of segments, never a hole.
        let dir = self.dir.clone();
        match self.segments.back_mut() {
            Some(segment) => {
                assert_eq!(
                    segment.base_offset, cut.segment_base,
                    "the high watermark's segment is retained"
                );
                if self.log_end_offset > hw {
                    let kept_max = self.durable_max_timestamp;
                    ops.push(segment.truncate(&dir, cut.position, hw, kept_max));
                }
                // Even with no batch cut, the failed sync may have lost index
                // appends (an entry of a durable batch, a roll's final time
                // entry): the index files are repaired from memory.
                ops.extend(segment.repair_index_ops(&dir, aborted_kept));
            }
            None => {
                // Nothing was durable in any segment: the log is empty at hw.
                assert_eq!(cut.position, 0, "an empty log's end is at position 0");
            }
        }
        self.known.retain(|_, pos| pos.last_offset < hw);
        self.log_end_offset = hw;
        assert!(
            self.log_start_offset <= self.log_end_offset,
            "truncation stays above the log start"
        );
        ops
    }

    /// The offsets a segment's batches lie in: from its base up to the next
    /// segment's base (unbounded for the active one).
    pub fn segment_span(&self, segment_base: i64) -> Option<(i64, i64)> {
        let i = self
            .segments
            .iter()
            .position(|s| s.base_offset == segment_base)?;
        let next = self.segments.get(i + 1).map_or(i64::MAX, |s| s.base_offset);
        Some((segment_base, next))
    }

    /// Segments whose index files hold appends not known durable: after a
    /// failed sync, each is repaired (`repair_indexes`).
    pub fn segments_with_unsynced_indexes(&self) -> Vec<i64> {
        self.segments
            .iter()
            .filter(|s| s.indexes_unsynced())
            .map(|s| s.base_offset)
            .collect()
    }

    /// Repairs a segment's index files from memory after a failed sync (see
    /// `Segment::repair_index_ops`). `aborted` are the aborted transactions
    /// whose markers lie in the segment.
    pub fn repair_indexes(&mut self, segment_base: i64, aborted: &[AbortedTxn]) -> Vec<DiskOp> {
        let dir = self.dir.clone();
        match self
            .segments
            .iter_mut()
            .find(|s| s.base_offset == segment_base)
        {
            Some(segment) => segment.repair_index_ops(&dir, aborted),
            None => Vec::new(),
        }
    }

    /// Removes the partition's directory and everything in it (topic deletion).
    pub fn delete_all(&self) -> DiskOp {
        DiskOp::DeletePartition {
            dir: self.dir.clone(),
        }
    }
}
