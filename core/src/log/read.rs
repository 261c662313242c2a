//! Reading the log: Fetch, and ListOffsets by timestamp.

use super::{PartitionLog, StoredBatch};
use crate::batch::{self, BatchHeader};
use bytes::{Bytes, BytesMut};
use std::fmt;

/// Why a read found nothing to return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The fetch offset is below the log start or above the log end.
    OffsetOutOfRange,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::OffsetOutOfRange => write!(f, "fetch offset out of range"),
        }
    }
}

impl PartitionLog {
    /// The bytes of whole batches from the one holding `fetch_offset`, as
    /// Kafka's Fetch returns them: a batch is returned whole even when
    /// `fetch_offset` lies in its middle (clients skip the earlier records).
    /// Only batches entirely below `upper_offset` (exclusive: the high
    /// watermark, or the last stable offset for read_committed) are returned.
    /// Stops before a batch that would take the total past `max_bytes`, except
    /// that with `min_one_batch` the first batch is returned whole whatever its
    /// size (KIP-74: a consumer must always make progress).
    ///
    /// `fetch_offset` at the log end (or between `upper_offset` and the log
    /// end) reads nothing; below the log start or above the log end it is
    /// `OffsetOutOfRange`. One batch is returned without a copy; several are
    /// copied into one buffer.
    pub fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        upper_offset: i64,
        min_one_batch: bool,
    ) -> Result<Bytes, ReadError> {
        assert!(
            upper_offset <= self.log_end_offset,
            "the read bound is at or below the log end"
        );
        if fetch_offset < self.log_start_offset || fetch_offset > self.log_end_offset {
            return Err(ReadError::OffsetOutOfRange);
        }
        let first = self.index_of_offset(fetch_offset);
        let mut end = first;
        let mut total_bytes: usize = 0;
        for stored in self.batches.range(first..) {
            if stored.entry.last_offset() >= upper_offset {
                break;
            }
            let size_bytes = stored.bytes.len();
            let fits = total_bytes
                .checked_add(size_bytes)
                .is_some_and(|t| t <= max_bytes);
            let first_of_min_one = min_one_batch && end == first;
            if !(fits || first_of_min_one) {
                break;
            }
            total_bytes += size_bytes;
            end += 1;
        }
        Ok(match end - first {
            0 => Bytes::new(),
            1 => self.batches[first].bytes.clone(),
            _ => {
                let mut out = BytesMut::with_capacity(total_bytes);
                for stored in self.batches.range(first..end) {
                    out.extend_from_slice(&stored.bytes);
                }
                assert!(out.len() == total_bytes, "copied what was counted");
                out.freeze()
            }
        })
    }

    /// ListOffsets by timestamp, as Kafka's FileRecords.searchForTimestamp:
    /// the earliest offset whose record timestamp is >= `timestamp_ms`, with
    /// that record's timestamp; `None` when there is none, or when it is at or
    /// above `upper_offset`.
    ///
    /// Batches are found by their max timestamp; inside an uncompressed batch
    /// the records' own timestamps give the exact offset, as in Kafka. A
    /// compressed batch is not decompressed: it answers with its base offset
    /// and its max timestamp, which is never later than the exact answer, so a
    /// consumer that seeks there misses nothing (it may see a few earlier
    /// records).
    pub fn offset_for_timestamp(&self, timestamp_ms: i64, upper_offset: i64) -> Option<(i64, i64)> {
        // Every batch before `first` has max_timestamp < timestamp_ms.
        let first = self
            .batches
            .partition_point(|b| b.max_timestamp_so_far < timestamp_ms);
        let found = self
            .batches
            .range(first..)
            .filter(|b| b.entry.header.max_timestamp >= timestamp_ms)
            .find_map(|b| self.first_record_at_or_after(b, timestamp_ms))?;
        (found.0 < upper_offset).then_some(found)
    }

    /// The first record of `stored` at or after the log start whose timestamp
    /// is >= `timestamp_ms`, as (offset, timestamp).
    fn first_record_at_or_after(
        &self,
        stored: &StoredBatch,
        timestamp_ms: i64,
    ) -> Option<(i64, i64)> {
        let header = &stored.entry.header;
        let fallback = (
            header.base_offset.max(self.log_start_offset),
            header.max_timestamp,
        );
        let Some(times) = batch::record_times(&stored.bytes) else {
            return Some(fallback);
        };
        for time in times {
            // A malformed record inside a CRC-valid batch: answer at batch granularity.
            let Ok(time) = time else {
                return Some(fallback);
            };
            let offset = header.base_offset + i64::from(time.offset_delta);
            if time.timestamp >= timestamp_ms && offset >= self.log_start_offset {
                return Some((offset, time.timestamp));
            }
        }
        None
    }

    /// ListOffsets MAX_TIMESTAMP (-3): the record with the largest timestamp
    /// among batches entirely below `upper_offset`, as (offset, timestamp); the
    /// first batch wins a tie, and inside it the first record carrying that
    /// timestamp, as in Kafka. A compressed batch answers with its base offset
    /// (a consumer seeking there sees the record). Scans the index linearly:
    /// this request is rare, and the index is in memory.
    pub fn max_timestamp(&self, upper_offset: i64) -> Option<(i64, i64)> {
        let mut best: Option<&StoredBatch> = None;
        for stored in &self.batches {
            if stored.entry.last_offset() >= upper_offset {
                break;
            }
            let max_timestamp = stored.entry.header.max_timestamp;
            if best.is_none_or(|b| max_timestamp > b.entry.header.max_timestamp) {
                best = Some(stored);
            }
        }
        let best = best?;
        let header: &BatchHeader = &best.entry.header;
        let offset = batch::record_times(&best.bytes)
            .and_then(|times| {
                times
                    .map_while(Result::ok)
                    .find(|t| t.timestamp == header.max_timestamp)
                    .map(|t| header.base_offset + i64::from(t.offset_delta))
            })
            .unwrap_or(header.base_offset);
        Some((offset, header.max_timestamp))
    }
}
