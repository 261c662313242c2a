//! Retention: deleting the oldest whole segments by time and by size, and
//! those wholly below a log start that DeleteRecords moved inside the log.

use super::PartitionLog;
use crate::io::DiskOp;

impl PartitionLog {
    /// Deletes the oldest segments past retention.ms (measured from each
    /// segment's largest timestamp, see `Segment::retention_timestamp_ms`) and
    /// then those beyond retention.bytes (while the log minus its oldest
    /// segment is still at least retention.bytes), as Kafka does; -1 disables
    /// either rule. Stops at the first segment that must stay. The log start
    /// offset moves to the next segment's base. Returns the DeleteSegment ops.
    ///
    /// Never deletes the active segment (Kafka may roll it first; we do not),
    /// and deletes a segment only when the next one already holds durable
    /// data, so that the file whose name carries the new log start offset is
    /// on disk (Kafka asks only that the segment be below the high watermark;
    /// it also keeps a log-start checkpoint file, which we do not).
    ///
    /// A segment found at start-up without any timestamp gets `now_ms` as its
    /// last modification, so it expires retention.ms after the restart.
    pub fn apply_retention(
        &mut self,
        now_ms: i64,
        retention_ms: i64,
        retention_bytes: i64,
    ) -> Vec<DiskOp> {
        // Segments a moved log start left behind (a crash came between the
        // start's meta.db write and the deletion) go first, as Kafka's
        // deleteLogStartOffsetBreachedSegments runs beside the other rules.
        let mut ops = self.delete_segments_below_start();
        if retention_ms >= 0 {
            while self.oldest_is_deletable() {
                let oldest = self
                    .segments
                    .front_mut()
                    .expect("deletable implies present");
                let timestamp_ms = match oldest.retention_timestamp_ms() {
                    Some(ms) => ms,
                    None => {
                        oldest.last_append_ms = now_ms;
                        now_ms
                    }
                };
                if now_ms.saturating_sub(timestamp_ms) <= retention_ms {
                    break;
                }
                ops.push(self.delete_oldest_segment());
            }
        }
        if let Ok(retention_bytes) = u64::try_from(retention_bytes) {
            let mut size_bytes = self.size_bytes();
            while self.oldest_is_deletable() {
                let oldest_bytes = self
                    .segments
                    .front()
                    .expect("deletable implies present")
                    .size_bytes;
                if size_bytes - oldest_bytes < retention_bytes {
                    break;
                }
                size_bytes -= oldest_bytes;
                ops.push(self.delete_oldest_segment());
            }
        }
        ops
    }

    /// Moves the log start to `offset` (DeleteRecords), which may lie inside
    /// a segment, and returns the deletions of the segments now wholly below
    /// it. As Kafka's UnifiedLog.maybeIncrementLogStartOffset
    /// (storage/src/main/java/org/apache/kafka/storage/internals/log/UnifiedLog.java):
    /// a start at or below the current one changes nothing, and one above the
    /// high watermark is refused (the caller answers OFFSET_OUT_OF_RANGE
    /// before it gets here, so here it is a broken invariant).
    pub fn increment_log_start(&mut self, offset: i64) -> Vec<DiskOp> {
        assert!(
            offset <= self.high_watermark,
            "the log start {offset} never passes the high watermark {}",
            self.high_watermark
        );
        if offset <= self.log_start_offset {
            return Vec::new();
        }
        self.log_start_offset = offset;
        // The batch holding the new start stays known: a fetch from the
        // start is sent from it whole, as Kafka sends it.
        self.known.retain(|_, pos| pos.last_offset >= offset);
        self.delete_segments_below_start()
    }

    /// At start-up: the log start stored by DeleteRecords, if above the
    /// first segment's base (Kafka's LogLoader takes the larger of its
    /// log-start-offset checkpoint and the first segment's base). A stored
    /// start beyond the recovered log means synced data was lost under us:
    /// the start stops at the log's end instead of claiming offsets no batch
    /// holds.
    pub fn restore_log_start(&mut self, offset: i64) {
        self.log_start_stored(offset);
        if offset <= self.log_start_offset {
            return;
        }
        let offset = if offset > self.high_watermark {
            tracing::error!(
                dir = %self.dir.dir_name(),
                stored = offset,
                high_watermark = self.high_watermark,
                "stored log start lies beyond the recovered log; starting at its end"
            );
            self.high_watermark
        } else {
            offset
        };
        self.log_start_offset = offset;
        self.known.retain(|_, pos| pos.last_offset >= offset);
    }

    /// Deletes the oldest segments wholly below the log start (the next
    /// segment starts at or below it), under retention's rule: never the
    /// active segment, and only while the next one holds durable data.
    fn delete_segments_below_start(&mut self) -> Vec<DiskOp> {
        let mut ops = Vec::new();
        while self.oldest_is_deletable() && self.segments[1].base_offset <= self.log_start_offset {
            ops.push(self.delete_oldest_segment());
        }
        ops
    }

    /// Whether the oldest segment is not the active one and the next segment
    /// starts below the high watermark (so the oldest is wholly durable and
    /// the next holds durable data).
    fn oldest_is_deletable(&self) -> bool {
        match self.segments.get(1) {
            Some(next) => next.base_offset < self.high_watermark,
            None => false,
        }
    }

    fn delete_oldest_segment(&mut self) -> DiskOp {
        let oldest = self
            .segments
            .pop_front()
            .expect("deletable implies present");
        let next = self
            .segments
            .front()
            .expect("the active segment is never deleted");
        self.log_start_offset = self.log_start_offset.max(next.base_offset);
        assert!(
            self.log_start_offset <= self.high_watermark,
            "retention deletes only durable data"
        );
        let start = self.log_start_offset;
        self.known.retain(|_, pos| pos.last_offset >= start);
        // The .log and its index files go together.
        DiskOp::DeleteSegment {
            dir: self.dir.clone(),
            segment_base: oldest.base_offset,
        }
    }
}
