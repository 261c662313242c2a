//! Retention: deleting the oldest whole segments by time and by size.

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
        let mut ops = Vec::new();
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
        self.known.retain(|_, pos| pos.base_offset >= start);
        // The .log and its index files go together.
        DiskOp::DeleteSegment {
            dir: self.dir.clone(),
            segment_base: oldest.base_offset,
        }
    }
}
