//! The log cleaner's side of the log: which segments a pass may clean, the
//! replacement segment it builds batch by batch, and swapping it in. The
//! decisions per batch are `filter.rs` (Kafka's rules); the records inside
//! a batch, `records.rs`. The pass itself (reads, syncs, renames, as the
//! broker drives it) is `crate::core_state::cleaner`.
//!
//! Kafka cleans groups of segments into one; this cleaner replaces each
//! segment by its cleaned copy under the same base offset, so segments
//! shrink but never merge (a log of many small cleaned segments costs index
//! entries, not correctness). Offsets are never renumbered: a consumer sees
//! gaps, and a read at an offset that is gone gets the next batch.

pub mod codec;
pub mod codec_stream;
pub mod filter;
pub mod records;
pub mod work;

use bytes::{Bytes, BytesMut};

use super::{PartitionLog, Segment, INDEX_INTERVAL_BYTES};
use crate::batch::BatchHeader;
use crate::io::{DiskOp, FileStage, PartitionDir, RecoveredSegment, SegmentFile};
use crate::log::AbortedTxn;

/// A segment a pass may rewrite: its base, size and the offset after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentSpan {
    pub base_offset: i64,
    pub size_bytes: u64,
    pub end_offset: i64,
    pub max_timestamp_ms: i64,
}

/// How dirty a log is, for choosing which to clean (Kafka's LogToClean).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dirtiness {
    /// The first offset not cleaned yet.
    pub first_dirty_offset: i64,
    /// The first offset a pass may not touch (a segment base).
    pub end_offset: i64,
    pub clean_bytes: u64,
    pub dirty_bytes: u64,
    /// The largest timestamp of the first dirty segment (for max.compaction.lag.ms).
    pub first_dirty_timestamp_ms: i64,
}

impl Dirtiness {
    pub fn ratio(&self) -> f64 {
        let total = self.clean_bytes + self.dirty_bytes;
        if total == 0 {
            0.0
        } else {
            self.dirty_bytes as f64 / total as f64
        }
    }
}

impl PartitionLog {
    /// The closed segments below `end`, oldest first.
    pub fn spans_below(&self, end_offset: i64) -> Vec<SegmentSpan> {
        let mut spans = Vec::new();
        for (i, s) in self.segments.iter().enumerate() {
            let Some(next) = self.segments.get(i + 1) else {
                break;
            };
            if next.base_offset > end_offset {
                break;
            }
            spans.push(SegmentSpan {
                base_offset: s.base_offset,
                size_bytes: s.size_bytes,
                end_offset: next.base_offset,
                max_timestamp_ms: s.max_timestamp_ms,
            });
        }
        spans
    }

    /// Where a pass must stop, as Kafka's LogCleanerManager
    /// (cleanableOffsets, calculateCleanableBytes): at the base of the
    /// segment holding the first offset it may not touch: the last stable
    /// offset `lso`, the active segment, the segment the high watermark lies
    /// in (its tail may not be durable yet, and a failed sync repairs its
    /// index files), and the first segment newer than min.compaction.lag.ms.
    pub fn dirtiness(
        &self,
        first_dirty_offset: i64,
        lso: i64,
        now_ms: i64,
        min_compaction_lag_ms: i64,
    ) -> Dirtiness {
        let first_dirty_offset = first_dirty_offset.max(self.log_start_offset);
        let mut uncleanable = lso.min(self.high_watermark_position.segment_base);
        if let Some(active) = self.segments.back() {
            uncleanable = uncleanable.min(active.base_offset);
        }
        for span in self.spans_below(uncleanable) {
            let young = span.max_timestamp_ms > now_ms.saturating_sub(min_compaction_lag_ms);
            if span.end_offset > first_dirty_offset && young {
                uncleanable = span.base_offset;
                break;
            }
        }
        let end_offset = match self.segment_index(uncleanable) {
            Some(i) => self.segments[i].base_offset,
            None => self.log_start_offset,
        };
        let mut d = Dirtiness {
            first_dirty_offset,
            end_offset,
            clean_bytes: 0,
            dirty_bytes: 0,
            first_dirty_timestamp_ms: -1,
        };
        for span in self.spans_below(end_offset) {
            if span.end_offset <= first_dirty_offset {
                d.clean_bytes += span.size_bytes;
            } else {
                if d.dirty_bytes == 0 {
                    d.first_dirty_timestamp_ms = span.max_timestamp_ms;
                }
                d.dirty_bytes += span.size_bytes;
            }
        }
        d
    }

    /// Whether the segment based at `base_offset` is still there as a pass
    /// read it (`size_bytes`): DeleteRecords may have deleted it since.
    pub fn holds_segment(&self, base_offset: i64, size_bytes: u64) -> bool {
        self.segment(base_offset)
            .is_some_and(|s| s.size_bytes == size_bytes)
    }

    /// Swaps in the cleaned copy of the segment based at `new.base_offset`,
    /// if that segment is still there as the pass read it (`size_bytes`):
    /// retention or DeleteRecords may have deleted it meanwhile. Batch
    /// positions remembered in it are forgotten.
    pub fn install_cleaned(&mut self, new: CleanedSegment, size_bytes: u64) -> bool {
        let base = new.segment.base_offset;
        let Some(i) = self.segment_index(base) else {
            return false;
        };
        let live = &self.segments[i];
        if live.base_offset != base || live.size_bytes != size_bytes || i + 1 >= self.segments.len()
        {
            return false;
        }
        let mut segment = new.segment;
        segment.last_append_ms = live.last_append_ms;
        segment.txn_entries = new.txn_index.len() as u64;
        segment.durable_index_bytes = segment.index_bytes();
        self.segments[i] = segment;
        self.known.retain(|_, pos| pos.segment_base != base);
        true
    }
}

/// The cleaned copy of one segment being written (`{base}.*.cleaned`).
#[derive(Debug)]
pub struct CleanedSegment {
    dir: PartitionDir,
    segment: Segment,
    txn_index: Vec<AbortedTxn>,
}

impl CleanedSegment {
    pub fn new(dir: PartitionDir, base_offset: i64) -> Self {
        Self {
            dir,
            segment: Segment::new(base_offset),
            txn_index: Vec::new(),
        }
    }

    pub fn base_offset(&self) -> i64 {
        self.segment.base_offset
    }

    pub fn size_bytes(&self) -> u64 {
        self.segment.size_bytes
    }

    /// Books a kept batch at the end of the copy; its bytes go out with
    /// `append_log`, the batches of one read together.
    pub fn push(&mut self, header: &BatchHeader) {
        let position = self.segment.size_bytes;
        // The index appends it asks for are written whole by `finish`.
        let _ = self
            .segment
            .on_batch(&self.dir, header, position, INDEX_INTERVAL_BYTES);
    }

    /// The op writing kept batches, booked with `push`, to the copy's `.log`.
    pub fn append_log(&self, bytes: Bytes) -> DiskOp {
        self.append(SegmentFile::Log, bytes)
    }

    /// The aborted transactions whose markers the copy keeps.
    pub fn kept_aborted(&self) -> &[AbortedTxn] {
        &self.txn_index
    }

    /// Books an aborted transaction whose marker the copy keeps.
    pub fn keep_aborted(&mut self, aborted: AbortedTxn) {
        self.txn_index.push(aborted);
    }

    /// The ops that finish the copy: its index files written whole (every
    /// file created, empty ones too, so the swap renames all four).
    pub fn finish(&mut self) -> Vec<DiskOp> {
        let _ = self.segment.maybe_time_entry(&self.dir);
        let mut offsets = BytesMut::new();
        self.segment
            .offset_index
            .iter()
            .for_each(|e| e.encode(&mut offsets));
        let mut times = BytesMut::new();
        self.segment
            .time_index
            .iter()
            .for_each(|e| e.encode(&mut times));
        let mut txns = BytesMut::new();
        self.txn_index
            .iter()
            .for_each(|a| txns.extend_from_slice(&a.encode()));
        vec![
            self.append(SegmentFile::Log, Bytes::new()),
            self.append(SegmentFile::OffsetIndex, offsets.freeze()),
            self.append(SegmentFile::TimeIndex, times.freeze()),
            self.append(SegmentFile::TxnIndex, txns.freeze()),
        ]
    }

    fn append(&self, file: SegmentFile, bytes: Bytes) -> DiskOp {
        DiskOp::AppendCleaned {
            dir: self.dir.clone(),
            segment_base: self.segment.base_offset,
            file,
            bytes,
        }
    }
}

/// The index files, then the `.log`: a swap is committed once the `.log`
/// has its new name, so it is renamed last, after a sync of the others.
pub const INDEX_FILES: [SegmentFile; 3] = [
    SegmentFile::OffsetIndex,
    SegmentFile::TimeIndex,
    SegmentFile::TxnIndex,
];

/// The renames of a segment's files from one stage to the next.
pub fn renames(
    dir: &PartitionDir,
    segment_base: i64,
    files: &[SegmentFile],
    from: FileStage,
    to: FileStage,
) -> Vec<DiskOp> {
    files
        .iter()
        .map(|&file| DiskOp::Rename {
            dir: dir.clone(),
            segment_base,
            file,
            from,
            to,
        })
        .collect()
}

/// Start-up: finishes the swaps a crash interrupted after their commit
/// point (a `.log.swap` found: every `.swap` still there is renamed over
/// its live file, the `.log` last) and discards the cleanings that did not
/// commit, as Kafka's log loading does with `.swap` and `.cleaned` files.
/// Returns the segments as they are once those ops are carried out, and
/// the ops, which go out before any other of the partition's.
///
/// A base listed both as a swap and as abandoned is a swap: its discard
/// would remove the `.log.swap` too, and the segment would then be read as
/// the cleaned copy's length from the old file (a batch cut short there
/// truncated the whole partition: sim seed 91308807, where a pass's final
/// rename failed its sync, the next pass staged `.cleaned` files under the
/// same base, and a power cut brought the `.log.swap` back beside them). A
/// stray `.cleaned` there outlives the swap and is discarded at the next
/// start.
pub fn finish_swaps(
    dir: &PartitionDir,
    mut segments: Vec<RecoveredSegment>,
    swaps: Vec<RecoveredSegment>,
    abandoned: Vec<i64>,
) -> (Vec<RecoveredSegment>, Vec<DiskOp>) {
    let mut ops: Vec<DiskOp> = abandoned
        .into_iter()
        .filter(|base| !swaps.iter().any(|s| s.base_offset == *base))
        .map(|segment_base| DiskOp::DiscardStaged {
            dir: dir.clone(),
            segment_base,
        })
        .collect();
    for swap in swaps {
        let base = swap.base_offset;
        let present = [
            (SegmentFile::OffsetIndex, swap.offset_index.is_some()),
            (SegmentFile::TimeIndex, swap.time_index.is_some()),
            (SegmentFile::TxnIndex, swap.txn_index.is_some()),
            (SegmentFile::Log, true),
        ];
        let files: Vec<SegmentFile> = present
            .into_iter()
            .filter(|(_, here)| *here)
            .map(|(file, _)| file)
            .collect();
        ops.extend(renames(dir, base, &files, FileStage::Swap, FileStage::Live));
        let live = match segments.iter_mut().find(|s| s.base_offset == base) {
            Some(live) => live,
            None => {
                segments.push(RecoveredSegment {
                    base_offset: base,
                    ..RecoveredSegment::default()
                });
                segments.last_mut().expect("just pushed")
            }
        };
        live.log_bytes = swap.log_bytes;
        live.offset_index = swap.offset_index.or(live.offset_index.take());
        live.time_index = swap.time_index.or(live.time_index.take());
        live.txn_index = swap.txn_index.or(live.txn_index.take());
    }
    (segments, ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(base_offset: i64, log_bytes: u64) -> RecoveredSegment {
        RecoveredSegment {
            base_offset,
            log_bytes: Some(log_bytes),
            ..RecoveredSegment::default()
        }
    }

    #[test]
    fn a_swap_is_finished_and_never_discarded_even_when_its_base_is_also_listed_abandoned() {
        let dir = PartitionDir::new("t", 0);
        let live = vec![segment(0, 204), segment(2, 4039)];
        let swaps = vec![segment(0, 61)];
        let (segments, ops) = finish_swaps(&dir, live, swaps, vec![0, 2]);
        let discarded: Vec<i64> = ops
            .iter()
            .filter_map(|op| match op {
                DiskOp::DiscardStaged { segment_base, .. } => Some(*segment_base),
                _ => None,
            })
            .collect();
        assert_eq!(discarded, vec![2], "only the cleaning that did not commit");
        assert!(ops.iter().any(|op| matches!(
            op,
            DiskOp::Rename {
                segment_base: 0,
                file: SegmentFile::Log,
                from: FileStage::Swap,
                to: FileStage::Live,
                ..
            }
        )));
        let zero = segments.iter().find(|s| s.base_offset == 0).unwrap();
        assert_eq!(zero.log_bytes, Some(61));
    }
}
