//! What the log knows about one segment file.

use crate::batch::NO_TIMESTAMP;

/// One segment file, `{base_offset:020}.log` in the partition's directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The file's name: at or below the base offset of its first batch.
    pub base_offset: i64,
    /// Bytes in the file (as far as the core has asked for them).
    pub size_bytes: u64,
    /// Largest max timestamp of its batches; NO_TIMESTAMP (-1) when none has one.
    pub max_timestamp_ms: i64,
    /// Broker time of the last append (the file's mtime, as Kafka would see
    /// it); -1 when unknown (a segment found at start-up).
    pub last_append_ms: i64,
}

impl Segment {
    pub(super) fn new(base_offset: i64) -> Self {
        assert!(base_offset >= 0, "segment base offsets are never negative");
        Self {
            base_offset,
            size_bytes: 0,
            max_timestamp_ms: NO_TIMESTAMP,
            last_append_ms: -1,
        }
    }

    /// The time retention.ms is measured from, as Kafka's
    /// LogSegment.largestTimestamp: the largest record timestamp when there is
    /// one, else the last modification. A client that stamps records in the
    /// far future keeps its segment that long, in Kafka as here.
    pub fn retention_timestamp_ms(&self) -> Option<i64> {
        if self.max_timestamp_ms >= 0 {
            return Some(self.max_timestamp_ms);
        }
        (self.last_append_ms >= 0).then_some(self.last_append_ms)
    }
}
