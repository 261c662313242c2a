//! One partition's log: every retained batch held in memory as `Bytes`, and
//! mirrored on disk as Kafka-style segment files through `DiskOp`s that the
//! caller pushes to its output queue, in the order returned.
//!
//! Offsets: `log_start_offset <= high_watermark <= log_end_offset`. The log end
//! offset is the next offset to assign. The high watermark is the end of the
//! durable data: everything below it has been synced (single node, so it is
//! also what consumers may see). It moves only when a sync completes
//! (`mark_durable`), and after a failed sync everything above it is cut off
//! (`truncate_to_durable`).
//!
//! The index is a `VecDeque` of one entry per batch, sorted by offset, so that
//! lookups are binary searches. It lives in memory and is rebuilt by the
//! start-up scan (`recover`) instead of being kept in `.index`/`.timeindex`
//! files: the scan reads every byte anyway to check the CRCs, and one less file
//! kind is one less thing to tear at a power cut.

mod read;
mod recovery;
mod retention;
mod segment;

#[cfg(test)]
mod tests;

pub use read::ReadError;
pub use segment::Segment;

use crate::batch::{self, BatchHeader};
use crate::io::{DiskOp, PartitionDir};
use bytes::Bytes;
use std::collections::VecDeque;
use std::fmt;

/// Where one batch lives and what its header says (after the broker set its
/// base offset). One per retained batch.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchIndexEntry {
    /// The header as stored (base offset assigned, LogAppendTime applied).
    pub header: BatchHeader,
    /// Base offset of the segment file holding the batch.
    pub segment_base: i64,
    /// Byte position of the batch in its segment file.
    pub position_bytes: u64,
    /// Broker time when the batch was appended; -1 for batches found at start-up.
    pub append_time_ms: i64,
}

impl BatchIndexEntry {
    /// The batch's first offset.
    pub fn base_offset(&self) -> i64 {
        self.header.base_offset
    }

    /// The batch's last offset (inclusive).
    pub fn last_offset(&self) -> i64 {
        self.header.last_offset()
    }

    /// Bytes of the batch in its segment file.
    pub fn size_bytes(&self) -> u64 {
        self.header.total_bytes() as u64
    }
}

/// What `append` did.
#[derive(Clone, Debug, PartialEq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The broker time stamped on the batch with LogAppendTime; -1 otherwise
    /// (what ProduceResponse's log_append_time_ms wants).
    pub log_append_time_ms: i64,
    /// Disk work to emit, in order.
    pub ops: Vec<DiskOp>,
}

/// The log's end at the moment a `DiskOp::Sync` is emitted: once that sync
/// completes OK, everything below `log_end_offset` is durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncPoint {
    log_end_offset: i64,
    /// Points captured before a `truncate_to_durable` are void: after a failed
    /// sync, a later sync's success says nothing about the pages lost earlier.
    generation: u64,
}

struct StoredBatch {
    entry: BatchIndexEntry,
    bytes: Bytes,
    /// Largest max_timestamp of this batch and every batch before it (including
    /// batches since deleted): monotonic, so a binary search finds where
    /// timestamps first reach a target, as Kafka's time index does.
    max_timestamp_so_far: i64,
}

/// One partition's log. See the module comment.
pub struct PartitionLog {
    dir: PartitionDir,
    segment_bytes: u64,
    /// Oldest first; the last is the active segment, the only one appended to.
    /// Empty only for a new log before its first append.
    segments: VecDeque<Segment>,
    /// Every retained batch, sorted by offset.
    batches: VecDeque<StoredBatch>,
    log_start_offset: i64,
    log_end_offset: i64,
    high_watermark: i64,
    sync_generation: u64,
}

impl fmt::Debug for PartitionLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The batches' bytes would drown everything else.
        f.debug_struct("PartitionLog")
            .field("dir", &self.dir)
            .field("log_start_offset", &self.log_start_offset)
            .field("high_watermark", &self.high_watermark)
            .field("log_end_offset", &self.log_end_offset)
            .field("segments", &self.segments)
            .field("batch_count", &self.batches.len())
            .finish()
    }
}

impl PartitionLog {
    /// An empty log starting at offset 0. Its first segment (base 0) is
    /// created by the first append.
    pub fn new(dir: PartitionDir, segment_bytes: u64) -> Self {
        Self {
            dir,
            segment_bytes,
            segments: VecDeque::new(),
            batches: VecDeque::new(),
            log_start_offset: 0,
            log_end_offset: 0,
            high_watermark: 0,
            sync_generation: 0,
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

    /// The next offset to assign.
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    /// The end of the durable data: every offset below it is synced.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// Bytes of all retained segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size_bytes).sum()
    }

    /// Segments, oldest first; the last is the active one.
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter()
    }

    /// Number of retained batches.
    pub fn batch_count(&self) -> usize {
        self.batches.len()
    }

    /// Batches whose last offset is at or after `offset`, in offset order
    /// (the batch holding `offset` first). For rebuilding producer and
    /// transaction state from the log's tail.
    pub fn batches_from(&self, offset: i64) -> impl Iterator<Item = (&BatchIndexEntry, &Bytes)> {
        let first = self.index_of_offset(offset);
        self.batches.range(first..).map(|b| (&b.entry, &b.bytes))
    }

    /// The base offset of the oldest batch within the last `window_bytes` of
    /// the log (the log end if it is empty): where a rebuild of producer
    /// state from the log's tail starts. Walks back from the end, so it costs
    /// the batches in the window, not the whole log.
    pub fn tail_start_offset(&self, window_bytes: u64) -> i64 {
        let mut total_bytes: u64 = 0;
        let mut start = self.log_end_offset;
        for stored in self.batches.iter().rev() {
            total_bytes += stored.bytes.len() as u64;
            if total_bytes > window_bytes {
                break;
            }
            start = stored.entry.base_offset();
        }
        start
    }

    /// Index of the first batch whose last offset is >= `offset`.
    fn index_of_offset(&self, offset: i64) -> usize {
        self.batches
            .partition_point(|b| b.entry.last_offset() < offset)
    }

    // ---- mutators ----

    /// Changes segment.bytes for the segments rolled from now on.
    pub fn set_segment_bytes(&mut self, segment_bytes: u64) {
        self.segment_bytes = segment_bytes;
    }

    /// Appends one batch, already validated (`batch::split_produce_records`)
    /// or built by the broker (a marker), at the log end offset. Rolls to a new
    /// segment when the active one is non-empty and the batch would take it
    /// past segment.bytes (a batch larger than segment.bytes gets a segment of
    /// its own). With `log_append_time` the batch is stamped with `now_ms`.
    pub fn append(&mut self, batch: Bytes, now_ms: i64, log_append_time: bool) -> AppendInfo {
        let base_offset = self.log_end_offset;
        let log_append_time_ms = if log_append_time {
            now_ms
        } else {
            batch::NO_TIMESTAMP
        };
        let bytes = batch::rewrite(&batch, base_offset, log_append_time.then_some(now_ms));
        let header = batch::parse_header(&bytes).expect("append takes a validated batch");
        assert!(
            header.last_offset_delta >= 0,
            "a validated batch has a non-negative offset delta"
        );
        let size_bytes = bytes.len() as u64;
        let roll = match self.segments.back() {
            None => true,
            Some(active) => {
                active.size_bytes > 0 && active.size_bytes + size_bytes > self.segment_bytes
            }
        };
        if roll {
            self.segments.push_back(Segment::new(base_offset));
        }
        let active = self
            .segments
            .back_mut()
            .expect("a segment exists after the roll check");
        assert!(
            active.base_offset <= base_offset,
            "a segment's base is at or before its batches"
        );
        let position_bytes = active.size_bytes;
        active.size_bytes += size_bytes;
        active.max_timestamp_ms = active.max_timestamp_ms.max(header.max_timestamp);
        active.last_append_ms = now_ms;
        let segment_base = active.base_offset;
        let max_timestamp_so_far = self.batches.back().map_or(header.max_timestamp, |b| {
            b.max_timestamp_so_far.max(header.max_timestamp)
        });
        let last_offset = header.last_offset();
        self.batches.push_back(StoredBatch {
            entry: BatchIndexEntry {
                header,
                segment_base,
                position_bytes,
                append_time_ms: now_ms,
            },
            bytes: bytes.clone(),
            max_timestamp_so_far,
        });
        self.log_end_offset = last_offset + 1;
        let ops = vec![DiskOp::Append {
            dir: self.dir.clone(),
            segment_base,
            bytes,
        }];
        AppendInfo {
            base_offset,
            last_offset,
            log_append_time_ms,
            ops,
        }
    }

    /// Captures the log end to pass to `mark_durable` once the `DiskOp::Sync`
    /// the caller emits now completes OK.
    pub fn sync_point(&self) -> SyncPoint {
        SyncPoint {
            log_end_offset: self.log_end_offset,
            generation: self.sync_generation,
        }
    }

    /// A sync emitted at `point` completed OK: the high watermark advances to
    /// it (never backwards). A point from before a `truncate_to_durable` is
    /// ignored.
    pub fn mark_durable(&mut self, point: SyncPoint) {
        if point.generation != self.sync_generation {
            return;
        }
        assert!(
            point.log_end_offset <= self.log_end_offset,
            "without a truncation the log end offset never moves back"
        );
        self.high_watermark = self.high_watermark.max(point.log_end_offset);
    }

    /// After a failed sync: drops everything above the high watermark from
    /// memory and returns the ops that cut the files to match (a Truncate of
    /// the segment holding the first lost batch, or its DeleteSegment if it
    /// would be left empty and is not the first segment, then DeleteSegment for
    /// every later segment). Afterwards `log_end_offset() == high_watermark()`.
    pub fn truncate_to_durable(&mut self) -> Vec<DiskOp> {
        self.sync_generation += 1;
        let hw = self.high_watermark;
        let first_lost = self.batches.partition_point(|b| b.entry.base_offset() < hw);
        if let Some(kept) = first_lost.checked_sub(1).map(|i| &self.batches[i]) {
            assert!(
                kept.entry.last_offset() < hw,
                "the high watermark lies on a batch boundary"
            );
        }
        let mut ops = Vec::new();
        if first_lost == self.batches.len() {
            assert!(
                self.log_end_offset == hw,
                "no batch above the high watermark, so nothing to cut"
            );
            return ops;
        }
        let cut_segment = self.batches[first_lost].entry.segment_base;
        let cut_position = self.batches[first_lost].entry.position_bytes;
        self.batches.truncate(first_lost);
        let mut deleted = Vec::new();
        while self
            .segments
            .back()
            .is_some_and(|s| s.base_offset > cut_segment)
        {
            deleted.push(self.segments.pop_back().expect("checked").base_offset);
        }
        // Deleting the cut segment is safe only when the data left before it
        // ends exactly at the high watermark: a restart then finds the same
        // log end in the earlier segment.
        let kept_end = self.batches.back().map(|b| b.entry.last_offset() + 1);
        let deletable = self.segments.len() > 1 && kept_end == Some(hw);
        let segment = self
            .segments
            .back_mut()
            .expect("the cut segment is retained");
        assert!(
            segment.base_offset == cut_segment,
            "the cut batch's segment is retained"
        );
        if cut_position == 0 && deletable {
            self.segments.pop_back();
            ops.push(DiskOp::DeleteSegment {
                dir: self.dir.clone(),
                segment_base: cut_segment,
            });
        } else {
            // Otherwise the segment stays, even empty: its file name is what
            // carries the log start (or end) offset across a restart.
            segment.size_bytes = cut_position;
            segment.max_timestamp_ms = self
                .batches
                .iter()
                .rev()
                .take_while(|b| b.entry.segment_base == cut_segment)
                .map(|b| b.entry.header.max_timestamp)
                .max()
                .unwrap_or(batch::NO_TIMESTAMP);
            let dir = self.dir.clone();
            ops.push(DiskOp::Truncate {
                dir,
                segment_base: cut_segment,
                len: cut_position,
            });
        }
        for segment_base in deleted.into_iter().rev() {
            ops.push(DiskOp::DeleteSegment {
                dir: self.dir.clone(),
                segment_base,
            });
        }
        self.log_end_offset = hw;
        assert!(
            self.log_start_offset <= self.log_end_offset,
            "truncation stays above the log start"
        );
        ops
    }

    /// Removes the partition's directory and everything in it (topic deletion).
    pub fn delete_all(&self) -> DiskOp {
        DiskOp::DeletePartition {
            dir: self.dir.clone(),
        }
    }
}
