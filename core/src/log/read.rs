//! Reading the log through the boundary: where a fetch starts and which file
//! range it sends, where a timestamp lies (ListOffsets). Each search is a pure
//! function of the log and of the reads a request has gathered so far
//! (`Reads`): it either answers, or names the one range it must read next.
//! The caller issues that `DiskOp::Read`, parks the request, and runs the
//! search again from the start when the bytes are in; since a search only
//! looks at durable data (below the high watermark), which never changes in
//! place, the bytes it gathered stay true between rounds.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;

use super::{BatchPos, LogPosition, PartitionLog, Segment};
use crate::batch::{self, BATCH_HEADER_BYTES};
use crate::io::{FileRange, SegmentFile};
use crate::limits;

/// The bytes of the ranges a request has read so far.
pub type Reads = BTreeMap<FileRange, Bytes>;

/// Why a read found nothing to return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The fetch offset is below the log start or above the log end.
    OffsetOutOfRange,
    /// The bytes on disk do not hold what the indexes promise: a segment
    /// damaged under us (answered KAFKA_STORAGE_ERROR).
    Corrupt,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::OffsetOutOfRange => write!(f, "fetch offset out of range"),
            ReadError::Corrupt => write!(f, "segment bytes disagree with the index"),
        }
    }
}

/// Where the batch holding an offset lies (or what was derived from it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Locate<T = BatchPos> {
    Found(T),
    /// Read this range (a window of batch headers) and search again.
    Need(FileRange),
    Failed(ReadError),
}

impl<T> Locate<T> {
    pub fn map_found<U>(self, f: impl FnOnce(T) -> U) -> Locate<U> {
        match self {
            Locate::Found(t) => Locate::Found(f(t)),
            Locate::Need(r) => Locate::Need(r),
            Locate::Failed(e) => Locate::Failed(e),
        }
    }

    pub fn and_then<U>(self, f: impl FnOnce(T) -> Locate<U>) -> Locate<U> {
        match self {
            Locate::Found(t) => f(t),
            Locate::Need(r) => Locate::Need(r),
            Locate::Failed(e) => Locate::Failed(e),
        }
    }
}

/// ListOffsets by timestamp.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimeSearch {
    /// (offset, timestamp) of the first record at or after the timestamp.
    Found(i64, i64),
    NotFound,
    Need(FileRange),
    Failed(ReadError),
}

/// One step of a walk over batch headers.
enum Walk {
    /// A whole header at this position (and the batch's bytes when the
    /// window holds all of them).
    Batch(BatchPos, Option<Bytes>),
    Failed,
}

impl PartitionLog {
    fn range(&self, segment_base: i64, position: u64, len: u64) -> FileRange {
        FileRange {
            dir: self.dir.clone(),
            segment_base,
            file: SegmentFile::Log,
            position,
            len,
        }
    }

    /// Where the durable bytes of a segment end.
    fn durable_end(&self, segment: &Segment) -> u64 {
        let hw = self.high_watermark_position;
        if segment.base_offset < hw.segment_base {
            segment.size_bytes
        } else if segment.base_offset == hw.segment_base {
            hw.position
        } else {
            0
        }
    }

    /// The header window starting at `position` of a segment, as read before.
    fn window(&self, segment: &Segment, position: u64, reads: &Reads) -> Result<Bytes, FileRange> {
        let end = self.durable_end(segment);
        let len = (limits::LOCATE_READ_BYTES as u64).min(end.saturating_sub(position));
        let range = self.range(segment.base_offset, position, len);
        reads.get(&range).cloned().ok_or(range)
    }

    /// Reads the header at `position` of `segment` from `reads`.
    fn walk(&self, segment: &Segment, position: u64, reads: &Reads) -> Result<Walk, FileRange> {
        let end = self.durable_end(segment);
        if position + BATCH_HEADER_BYTES as u64 > end {
            return Ok(Walk::Failed);
        }
        // The most recent window that covers this header.
        let found = reads.range(..=self.range(segment.base_offset, position, u64::MAX));
        let covering = found.rev().find(|(r, _)| {
            r.segment_base == segment.base_offset
                && r.file == SegmentFile::Log
                && r.dir == self.dir
                && r.position <= position
                && r.position + r.len >= position + BATCH_HEADER_BYTES as u64
        });
        let (range, bytes) = match covering {
            Some((range, bytes)) => (range, bytes),
            // No window holds the header yet: read one starting there.
            None => return self.window(segment, position, reads).map(|_| Walk::Failed),
        };
        let at = (position - range.position) as usize;
        let Ok(header) = batch::parse_header(&bytes[at..]) else {
            return Ok(Walk::Failed);
        };
        let pos = BatchPos::of(&header, segment.base_offset, position);
        if pos.end_position() > end || pos.base_offset < segment.base_offset {
            return Ok(Walk::Failed);
        }
        let whole = (at + pos.size_bytes as usize <= bytes.len())
            .then(|| bytes.slice(at..at + pos.size_bytes as usize));
        Ok(Walk::Batch(pos, whole))
    }

    /// Finds the batch holding `offset` (log start <= offset < high watermark),
    /// or, when the cleaner removed it, the first batch after it (a
    /// compacted log has gaps; Kafka's fetch also answers from the next
    /// batch there is, possibly in a later segment).
    pub fn locate(&self, offset: i64, reads: &Reads) -> Locate {
        if offset < self.log_start_offset || offset >= self.high_watermark {
            return Locate::Failed(ReadError::OffsetOutOfRange);
        }
        if let Some(pos) = self.known_batch(offset) {
            return Locate::Found(pos);
        }
        let Some(mut i) = self.segment_index(offset) else {
            return Locate::Failed(ReadError::OffsetOutOfRange);
        };
        let mut segment = &self.segments[i];
        // Start at the index entry, or past a known batch below the offset.
        let mut position = segment.index_position(offset);
        if let Some((_, below)) = self.known.range(..=offset).next_back() {
            if below.segment_base == segment.base_offset && below.end_position() > position {
                position = below.end_position();
            }
        }
        for _ in 0..limits::LOCATE_STEPS_MAX {
            match self.walk(segment, position, reads) {
                Err(range) => return Locate::Need(range),
                Ok(Walk::Failed) => {
                    // The segment ends before any batch reaching the offset:
                    // the cleaner emptied its tail; go on in the next one.
                    let next = self.segments.get(i + 1);
                    match next {
                        Some(next)
                            if position == self.durable_end(segment)
                                && next.base_offset < self.high_watermark =>
                        {
                            i += 1;
                            segment = next;
                            position = 0;
                        }
                        _ => return Locate::Failed(ReadError::Corrupt),
                    }
                }
                Ok(Walk::Batch(pos, _)) if pos.last_offset >= offset => return Locate::Found(pos),
                Ok(Walk::Batch(pos, _)) => position = pos.end_position(),
            }
        }
        Locate::Failed(ReadError::Corrupt)
    }

    /// The range a fetch sends from `first` (the batch holding the fetch
    /// offset), as Kafka's LogSegment.read: from its position up to `upper`
    /// (the high watermark's, or the last stable offset's position), within
    /// its segment, at most `max_bytes`, except that with `min_one_batch` the
    /// first batch goes whole whatever its size (KIP-74). The range may end
    /// inside a batch; clients drop a partial last batch, as from Kafka.
    pub fn fetch_range(
        &self,
        first: &BatchPos,
        upper: LogPosition,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> FileRange {
        let segment = self
            .segment(first.segment_base)
            .expect("a located batch's segment is retained");
        let end = if upper.segment_base == segment.base_offset {
            upper.position
        } else if upper.segment_base > segment.base_offset {
            self.durable_end(segment)
        } else {
            0
        };
        if first.end_position() > end {
            // The fetch offset lay in a gap the cleaner left just below the
            // bound (an open transaction's first batch): nothing to send yet.
            return self.range(first.segment_base, first.position, 0);
        }
        let available = end - first.position;
        let mut len = available.min(max_bytes as u64);
        if min_one_batch {
            len = len.max(first.size_bytes);
        }
        self.range(first.segment_base, first.position, len)
    }

    /// How many offsets a fetch answer sends whole, for operators
    /// (`crate::metrics`): from `fetch_offset` to the end of the last batch
    /// that `ranges` (`fetch_range`, then `next_fetch_range`s, from `first`)
    /// hold entirely. Reaching `upper`, the position of `upper_offset` (the
    /// high watermark or the LSO), that is `upper_offset`. Cut short by a
    /// size limit, the last whole batch is looked for among the batches the
    /// log remembers (a consumer at the tail reads those); failing that,
    /// only the first batch counts, if it was sent whole. Never reads the
    /// disk: it costs at most `KNOWN_BATCHES_MAX` steps.
    pub fn offsets_sent(
        &self,
        fetch_offset: i64,
        first: &BatchPos,
        ranges: &[FileRange],
        upper_offset: i64,
        upper: LogPosition,
    ) -> u64 {
        let (Some(head), Some(last)) = (ranges.first(), ranges.last()) else {
            return 0;
        };
        let end = LogPosition {
            segment_base: last.segment_base,
            position: last.position + last.len,
        };
        let end_offset = if end == upper {
            upper_offset
        } else {
            let remembered = self
                .known
                .values()
                .rev()
                .take_while(|pos| pos.last_offset >= first.last_offset)
                .find(|pos| {
                    (pos.segment_base, pos.end_position()) <= (end.segment_base, end.position)
                });
            match remembered {
                Some(pos) => pos.last_offset + 1,
                None if head.len >= first.size_bytes => first.last_offset + 1,
                None => fetch_offset,
            }
        };
        u64::try_from(end_offset - fetch_offset).unwrap_or(0)
    }

    /// The range that carries a fetch on into the next segment, when `prev`
    /// (whole batches) reached the end of its own and `max_bytes` is left:
    /// from that segment's start up to `upper`, at most `max_bytes`.
    ///
    /// Kafka's LogSegment.read stops at its segment's end. Here a fetch goes
    /// on, because a cleaned segment can hold nothing but the empty batch
    /// that keeps its last offset (`clean::filter`): answers made only of
    /// those, one per segment, would carry no record, and librdkafka takes
    /// ten such answers in a row for a message too large to fetch.
    pub fn next_fetch_range(
        &self,
        prev: &FileRange,
        upper: LogPosition,
        max_bytes: usize,
    ) -> Option<FileRange> {
        let i = self.segment_index(prev.segment_base)?;
        let segment = &self.segments[i];
        let ends_segment = segment.base_offset == prev.segment_base
            && upper.segment_base > segment.base_offset
            && prev.position + prev.len == self.durable_end(segment);
        let next = self.segments.get(i + 1)?;
        if !ends_segment || next.base_offset > upper.segment_base || max_bytes == 0 {
            return None;
        }
        let end = if upper.segment_base == next.base_offset {
            upper.position
        } else {
            self.durable_end(next)
        };
        let len = end.min(max_bytes as u64);
        (len > 0).then(|| self.range(next.base_offset, 0, len))
    }

    /// ListOffsets by timestamp, as Kafka's FileRecords.searchForTimestamp:
    /// the earliest offset at or above the log start whose record timestamp
    /// is >= `timestamp_ms`, among batches below `upper_offset`.
    ///
    /// Segments are skipped by their largest timestamp, and inside one the
    /// time index says where to start reading headers; inside an
    /// uncompressed batch the records' own timestamps give the exact offset.
    /// A compressed batch is not decompressed: it answers with its base
    /// offset and its max timestamp, which is never later than the exact
    /// answer, so a consumer that seeks there misses nothing.
    pub fn offset_for_timestamp(
        &self,
        timestamp_ms: i64,
        upper_offset: i64,
        reads: &Reads,
    ) -> TimeSearch {
        for segment in &self.segments {
            if segment.base_offset >= upper_offset {
                break;
            }
            if segment.max_timestamp_ms < timestamp_ms {
                continue;
            }
            let mut position = segment.time_position(timestamp_ms);
            let end = self.durable_end(segment);
            let mut steps = 0;
            while position < end {
                steps += 1;
                if steps > limits::LOCATE_STEPS_MAX * 64 {
                    return TimeSearch::Failed(ReadError::Corrupt);
                }
                let (pos, bytes) = match self.walk(segment, position, reads) {
                    Err(range) => return TimeSearch::Need(range),
                    Ok(Walk::Failed) => return TimeSearch::Failed(ReadError::Corrupt),
                    Ok(Walk::Batch(pos, bytes)) => (pos, bytes),
                };
                if pos.last_offset >= upper_offset {
                    return TimeSearch::NotFound;
                }
                position = pos.end_position();
                if pos.max_timestamp_ms < timestamp_ms || pos.last_offset < self.log_start_offset {
                    continue;
                }
                let bytes = match bytes {
                    Some(bytes) => bytes,
                    None => {
                        let range = self.range(pos.segment_base, pos.position, pos.size_bytes);
                        match reads.get(&range) {
                            Some(bytes) => bytes.clone(),
                            None => return TimeSearch::Need(range),
                        }
                    }
                };
                if let Some(found) = self.first_record_at_or_after(&pos, &bytes, timestamp_ms) {
                    return TimeSearch::Found(found.0, found.1);
                }
            }
        }
        TimeSearch::NotFound
    }

    /// The first record of the batch at or after the log start whose
    /// timestamp is >= `timestamp_ms`, as (offset, timestamp).
    fn first_record_at_or_after(
        &self,
        pos: &BatchPos,
        bytes: &[u8],
        timestamp_ms: i64,
    ) -> Option<(i64, i64)> {
        let fallback = (
            pos.base_offset.max(self.log_start_offset),
            pos.max_timestamp_ms,
        );
        let Some(times) = batch::record_times(bytes) else {
            return Some(fallback);
        };
        for time in times {
            // A malformed record inside a CRC-valid batch: answer at batch granularity.
            let Ok(time) = time else {
                return Some(fallback);
            };
            let offset = pos.base_offset + i64::from(time.offset_delta);
            if time.timestamp >= timestamp_ms && offset >= self.log_start_offset {
                return Some((offset, time.timestamp));
            }
        }
        None
    }

    /// ListOffsets MAX_TIMESTAMP (-3): the record with the largest timestamp
    /// among batches below `upper_offset`, as (offset, timestamp); the first
    /// batch wins a tie, and inside it the first record carrying that
    /// timestamp, as in Kafka, or none if no record carries it. A compressed
    /// batch answers with its base offset. Segments whose largest timestamp
    /// sits at or above the bound (an open transaction's) are passed over.
    pub fn max_timestamp(&self, upper_offset: i64, reads: &Reads) -> TimeSearch {
        let best = self
            .segments
            .iter()
            .filter(|s| s.offset_of_max_timestamp >= 0 && s.offset_of_max_timestamp < upper_offset)
            .fold(None::<&Segment>, |best, s| match best {
                Some(b) if b.max_timestamp_ms >= s.max_timestamp_ms => Some(b),
                _ => Some(s),
            });
        let Some(best) = best else {
            return TimeSearch::NotFound;
        };
        let pos = match self.locate(best.offset_of_max_timestamp, reads) {
            Locate::Found(pos) => pos,
            Locate::Need(range) => return TimeSearch::Need(range),
            Locate::Failed(e) => return TimeSearch::Failed(e),
        };
        let range = self.range(pos.segment_base, pos.position, pos.size_bytes);
        let Some(bytes) = reads.get(&range) else {
            return TimeSearch::Need(range);
        };
        let Some(times) = batch::record_times(bytes) else {
            return TimeSearch::Found(pos.base_offset, pos.max_timestamp_ms);
        };
        // No record carrying the batch's max timestamp: Kafka then answers
        // no offset (UnifiedLog's MAX_TIMESTAMP lookup, through
        // RecordBatch.offsetOfMaxTimestamp). It happens when a client set
        // the LogAppendTime bit on a CreateTime topic: the batch is stored
        // with the header's time as its max, which its records, read
        // without the bit, do not carry (`batch::with_create_time_max`).
        match times
            .map_while(Result::ok)
            .find(|t| t.timestamp == pos.max_timestamp_ms)
        {
            Some(t) => TimeSearch::Found(
                pos.base_offset + i64::from(t.offset_delta),
                pos.max_timestamp_ms,
            ),
            None => TimeSearch::NotFound,
        }
    }
}
