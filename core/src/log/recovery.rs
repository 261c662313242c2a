//! The start-up scan: rebuild the in-memory log and index from the segment
//! files, and cut off a torn tail so that it is never served.

use super::{BatchIndexEntry, PartitionLog, Segment, StoredBatch};
use crate::batch;
use crate::io::{DiskOp, PartitionDir, RecoveredSegment};
use std::fmt;

/// Why a batch in a segment ends the valid prefix of the log.
enum Torn {
    Batch(batch::BatchError),
    /// A base offset below the previous batch's end, or below the segment's base.
    OffsetGoesBack {
        base_offset: i64,
        expected_min: i64,
    },
}

impl fmt::Display for Torn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Torn::Batch(e) => write!(f, "{e}"),
            Torn::OffsetGoesBack {
                base_offset,
                expected_min,
            } => {
                write!(f, "batch base offset {base_offset} below {expected_min}")
            }
        }
    }
}

impl PartitionLog {
    /// Rebuilds a log from the segment files found at start-up (in any order).
    ///
    /// Each segment is scanned batch by batch (header, length, record count,
    /// CRC) and offsets must increase. The first batch that fails is a torn
    /// tail: it and everything after it, in its segment and in every later
    /// segment, is dropped, and the returned ops make the files match (a
    /// Truncate of that segment to its valid prefix, or its DeleteSegment when
    /// the prefix is empty and it is not the first segment; a DeleteSegment for
    /// every later segment). Linear in the bytes found.
    ///
    /// Everything kept is durable (high watermark = log end offset). The log
    /// start is the first batch's base offset; with no batch at all, it is the
    /// log end, which is the last segment's base offset.
    pub fn recover(
        dir: PartitionDir,
        segment_bytes: u64,
        mut segments: Vec<RecoveredSegment>,
    ) -> (Self, Vec<DiskOp>) {
        segments.sort_by_key(|s| s.base_offset);
        for pair in segments.windows(2) {
            // Deleting a "later" duplicate would delete the file that was kept.
            assert!(
                pair[0].base_offset != pair[1].base_offset,
                "two segment files with one base offset"
            );
        }
        let mut log = Self::new(dir, segment_bytes);
        let mut ops = Vec::new();
        let mut torn_at: Option<i64> = None;
        for (i, found) in segments.iter().enumerate() {
            if torn_at.is_some() {
                ops.push(DiskOp::DeleteSegment {
                    dir: log.dir.clone(),
                    segment_base: found.base_offset,
                });
                continue;
            }
            let (segment, torn) = log.scan_segment(found);
            let Some(torn) = torn else {
                log.segments.push_back(segment);
                continue;
            };
            tracing::warn!(
                dir = %log.dir.dir_name(),
                segment_base = found.base_offset,
                valid_bytes = segment.size_bytes,
                found_bytes = found.bytes.len(),
                "torn segment tail cut off: {torn}"
            );
            torn_at = Some(found.base_offset);
            if segment.size_bytes == 0 && i > 0 {
                ops.push(DiskOp::DeleteSegment {
                    dir: log.dir.clone(),
                    segment_base: found.base_offset,
                });
            } else {
                let len = segment.size_bytes;
                ops.push(DiskOp::Truncate {
                    dir: log.dir.clone(),
                    segment_base: found.base_offset,
                    len,
                });
                log.segments.push_back(segment);
            }
        }
        let data_end = log.batches.back().map(|b| b.entry.last_offset() + 1);
        let last_segment_base = log.segments.back().map(|s| s.base_offset);
        log.log_end_offset = data_end.max(last_segment_base).unwrap_or(0);
        log.log_start_offset = log
            .batches
            .front()
            .map_or(log.log_end_offset, |b| b.entry.base_offset());
        log.high_watermark = log.log_end_offset;
        assert!(
            log.log_start_offset <= log.log_end_offset,
            "recovered offsets are ordered"
        );
        (log, ops)
    }

    /// Scans one segment's bytes, pushing its valid batches to the index.
    /// Returns the segment (sized to its valid prefix) and why it stopped
    /// short of the end, if it did.
    fn scan_segment(&mut self, found: &RecoveredSegment) -> (Segment, Option<Torn>) {
        let mut segment = Segment::new(found.base_offset);
        let bytes = &found.bytes;
        let mut position: usize = 0;
        while position < bytes.len() {
            let header = match batch::check_batch(&bytes[position..]) {
                Ok(header) => header,
                Err(e) => return (segment, Some(Torn::Batch(e))),
            };
            let expected_min = match self.batches.back() {
                Some(prev) => (prev.entry.last_offset() + 1).max(found.base_offset),
                None => found.base_offset,
            };
            if header.base_offset < expected_min {
                let torn = Torn::OffsetGoesBack {
                    base_offset: header.base_offset,
                    expected_min,
                };
                return (segment, Some(torn));
            }
            let size_bytes = header.total_bytes();
            segment.max_timestamp_ms = segment.max_timestamp_ms.max(header.max_timestamp);
            let max_timestamp_so_far = self.batches.back().map_or(header.max_timestamp, |b| {
                b.max_timestamp_so_far.max(header.max_timestamp)
            });
            self.batches.push_back(StoredBatch {
                entry: BatchIndexEntry {
                    header,
                    segment_base: found.base_offset,
                    position_bytes: position as u64,
                    append_time_ms: -1,
                },
                bytes: bytes.slice(position..position + size_bytes),
                max_timestamp_so_far,
            });
            position += size_bytes;
            segment.size_bytes = position as u64;
        }
        (segment, None)
    }
}
