//! What the log knows about one segment: its size, its offsets, its largest
//! timestamp and its sparse indexes (`index.rs`). No batch bytes.

use bytes::BytesMut;

use super::index::{self, OffsetEntry, TimeEntry};
use crate::batch::{BatchHeader, NO_TIMESTAMP};
use crate::io::{DiskOp, PartitionDir, SegmentFile};

/// One segment, `{base_offset:020}.log` and its index files.
#[derive(Clone, Debug)]
pub struct Segment {
    /// The file's name: at or below the base offset of its first batch.
    pub base_offset: i64,
    /// Bytes of valid batches in the `.log`.
    pub size_bytes: u64,
    /// The offset after its last batch (`base_offset` while empty).
    pub next_offset: i64,
    /// Largest max timestamp of its batches; NO_TIMESTAMP (-1) when none has one.
    pub max_timestamp_ms: i64,
    /// Last offset of the first batch that reached `max_timestamp_ms` (-1: none).
    pub offset_of_max_timestamp: i64,
    /// Broker time of the last append (the file's mtime, as Kafka would see
    /// it); -1 when unknown (a segment found at start-up).
    pub last_append_ms: i64,
    pub(super) offset_index: Vec<OffsetEntry>,
    pub(super) time_index: Vec<TimeEntry>,
    /// Entries in the `.txnindex`.
    pub(super) txn_entries: u64,
    /// Bytes of the `.index`, `.timeindex` and `.txnindex` known synced
    /// (what a failed sync cannot have taken): a repair cuts the files back
    /// to these, never below, and appends the rest again.
    pub(super) durable_index_bytes: [u64; 3],
    /// Bytes appended since the last offset index entry (Kafka's
    /// bytesSinceLastIndexEntry).
    pub(super) bytes_since_index_entry: u64,
    /// The largest timestamp of the segment's first batch, which segment.ms
    /// is measured from (Kafka's rollingBasedTimestamp); `None` while
    /// unknown: no batch yet, or a segment taken from its index files at
    /// start-up, whose first batch was not read.
    pub(super) first_batch_timestamp_ms: Option<i64>,
    /// Broker time the segment was made, or first appended to after a
    /// start-up (-1: not yet): segment.ms is measured from it when the first
    /// batch has no timestamp (Kafka's `created`).
    pub(super) created_ms: i64,
}

/// Two segments are equal when they hold the same: what is known synced of
/// their index files is bookkeeping of the run, not content.
impl PartialEq for Segment {
    fn eq(&self, other: &Self) -> bool {
        let content = |s: &Self| {
            (
                s.base_offset,
                s.size_bytes,
                s.next_offset,
                s.max_timestamp_ms,
                s.offset_of_max_timestamp,
                s.last_append_ms,
                s.txn_entries,
                s.bytes_since_index_entry,
            )
        };
        content(self) == content(other)
            && self.offset_index == other.offset_index
            && self.time_index == other.time_index
    }
}

impl Eq for Segment {}

impl Segment {
    pub(super) fn new(base_offset: i64) -> Self {
        assert!(base_offset >= 0, "segment base offsets are never negative");
        Self {
            base_offset,
            size_bytes: 0,
            next_offset: base_offset,
            max_timestamp_ms: NO_TIMESTAMP,
            offset_of_max_timestamp: -1,
            last_append_ms: -1,
            offset_index: Vec::new(),
            time_index: Vec::new(),
            txn_entries: 0,
            durable_index_bytes: [0; 3],
            bytes_since_index_entry: 0,
            first_batch_timestamp_ms: None,
            created_ms: -1,
        }
    }

    /// How long the segment has waited to roll when a batch whose largest
    /// timestamp is `batch_timestamp_ms` comes at `now_ms`, as Kafka's
    /// LogSegment.timeWaitedForRoll: from the first batch's timestamp to
    /// this batch's when the first has one, else from the segment's making
    /// to now. A segment from start-up whose first batch is unknown counts
    /// from its first append after the start (Kafka reads the first batch
    /// from the file; we do not read for this).
    pub(super) fn time_waited_for_roll_ms(&mut self, now_ms: i64, batch_timestamp_ms: i64) -> i64 {
        if self.created_ms < 0 {
            self.created_ms = now_ms;
        }
        match self.first_batch_timestamp_ms {
            Some(first_ms) if first_ms >= 0 => batch_timestamp_ms.saturating_sub(first_ms),
            _ => now_ms.saturating_sub(self.created_ms),
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

    /// Entries of the offset and time indexes held for this segment.
    pub fn index_entries(&self) -> usize {
        self.offset_index.len() + self.time_index.len()
    }

    pub(super) fn relative(&self, offset: i64) -> u32 {
        let relative = offset - self.base_offset;
        assert!(
            (0..=i64::from(u32::MAX)).contains(&relative),
            "offset {offset} lies in segment {}",
            self.base_offset
        );
        relative as u32
    }

    /// The position to start reading at to find the batch holding `offset`.
    pub(super) fn index_position(&self, offset: i64) -> u64 {
        let relative = (offset - self.base_offset).clamp(0, i64::from(u32::MAX)) as u32;
        u64::from(index::lookup_position(&self.offset_index, relative))
    }

    /// The position to start reading at to find the first timestamp at or
    /// after `timestamp_ms`.
    pub(super) fn time_position(&self, timestamp_ms: i64) -> u64 {
        match index::lookup_time(&self.time_index, timestamp_ms) {
            Some(relative) => u64::from(index::lookup_position(&self.offset_index, relative)),
            None => 0,
        }
    }

    /// Books a batch appended (or found by a scan) at `position`, and returns
    /// the index file appends it calls for, as Kafka's LogSegment.append: an
    /// offset index entry once more than `interval_bytes` were appended since
    /// the last one, with a time index entry beside it when the largest
    /// timestamp grew.
    pub(super) fn on_batch(
        &mut self,
        dir: &PartitionDir,
        header: &BatchHeader,
        position: u64,
        interval_bytes: u64,
    ) -> Vec<DiskOp> {
        assert_eq!(position, self.size_bytes, "batches are appended at the end");
        assert!(
            header.base_offset >= self.next_offset,
            "offsets increase within a segment"
        );
        let size_bytes = header.total_bytes() as u64;
        let last_offset = header.last_offset();
        if position == 0 {
            self.first_batch_timestamp_ms = Some(header.max_timestamp);
        }
        if header.max_timestamp > self.max_timestamp_ms {
            self.max_timestamp_ms = header.max_timestamp;
            self.offset_of_max_timestamp = last_offset;
        }
        let mut ops = Vec::new();
        if self.bytes_since_index_entry > interval_bytes {
            let entry = OffsetEntry {
                relative_offset: self.relative(last_offset),
                position: u32::try_from(position).expect("segments stay below 4 GiB"),
            };
            let mut buf = BytesMut::with_capacity(index::OFFSET_ENTRY_BYTES);
            entry.encode(&mut buf);
            self.offset_index.push(entry);
            ops.push(self.append_op(dir, SegmentFile::OffsetIndex, buf));
            ops.extend(self.maybe_time_entry(dir));
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += size_bytes;
        self.size_bytes += size_bytes;
        self.next_offset = last_offset + 1;
        ops
    }

    /// A time index entry for the largest timestamp so far, if it grew since
    /// the last entry (also called when the segment is rolled, so that the
    /// file's last entry always names the segment's largest timestamp).
    pub(super) fn maybe_time_entry(&mut self, dir: &PartitionDir) -> Option<DiskOp> {
        if self.offset_of_max_timestamp < 0 {
            return None;
        }
        let grew = self
            .time_index
            .last()
            .is_none_or(|e| e.timestamp_ms < self.max_timestamp_ms);
        if !grew {
            return None;
        }
        let entry = TimeEntry {
            timestamp_ms: self.max_timestamp_ms,
            relative_offset: self.relative(self.offset_of_max_timestamp),
        };
        let mut buf = BytesMut::with_capacity(index::TIME_ENTRY_BYTES);
        entry.encode(&mut buf);
        self.time_index.push(entry);
        Some(self.append_op(dir, SegmentFile::TimeIndex, buf))
    }

    pub(super) fn append_op(&self, dir: &PartitionDir, file: SegmentFile, buf: BytesMut) -> DiskOp {
        DiskOp::Append {
            dir: dir.clone(),
            segment_base: self.base_offset,
            file,
            bytes: buf.freeze(),
        }
    }

    /// The ops that create the segment's four files, empty: an absent index
    /// file then means it was lost, not that it was never needed.
    pub(super) fn create_ops(&self, dir: &PartitionDir) -> Vec<DiskOp> {
        SegmentFile::ALL
            .into_iter()
            .map(|file| self.append_op(dir, file, BytesMut::new()))
            .collect()
    }

    /// Cuts the segment to its batches below `position` (which end at
    /// `next_offset`) with the index entries that point there, and returns
    /// the op that cuts the `.log` (the index files are repaired apart,
    /// `repair_index_ops`). The largest timestamp is kept unless the batch
    /// holding it was cut, then it becomes `kept_max` (the largest timestamp
    /// of the batches kept and the last offset of the batch holding it, as
    /// captured when they were made durable).
    pub(super) fn truncate(
        &mut self,
        dir: &PartitionDir,
        position: u64,
        next_offset: i64,
        kept_max: (i64, i64),
    ) -> DiskOp {
        assert!(position <= self.size_bytes, "truncation only shortens");
        self.size_bytes = position;
        if position == 0 {
            // Emptied: segment.ms counts afresh, as Kafka's truncateTo resets
            // `created` and the rolling timestamp (here from the next append).
            self.first_batch_timestamp_ms = None;
            self.created_ms = -1;
        }
        self.next_offset = next_offset;
        self.offset_index
            .retain(|e| u64::from(e.position) < position);
        let kept_relative = (next_offset - 1 - self.base_offset).max(-1);
        self.time_index
            .retain(|e| i64::from(e.relative_offset) <= kept_relative);
        if self.offset_of_max_timestamp >= next_offset {
            let (max_timestamp_ms, offset) = kept_max;
            assert!(
                offset < next_offset && (offset < 0 || offset >= self.base_offset),
                "the kept largest timestamp lies in the kept batches"
            );
            self.max_timestamp_ms = max_timestamp_ms;
            self.offset_of_max_timestamp = offset;
        }
        self.bytes_since_index_entry = match self.offset_index.last() {
            Some(e) => position - u64::from(e.position),
            None => position,
        };
        DiskOp::Truncate {
            dir: dir.clone(),
            segment_base: self.base_offset,
            file: SegmentFile::Log,
            len: position,
        }
    }

    /// The lengths of the three index files as memory holds them.
    pub(super) fn index_bytes(&self) -> [u64; 3] {
        [
            (self.offset_index.len() * index::OFFSET_ENTRY_BYTES) as u64,
            (self.time_index.len() * index::TIME_ENTRY_BYTES) as u64,
            self.txn_entries * index::TXN_ENTRY_BYTES as u64,
        ]
    }

    /// Whether the index files hold bytes not known durable (appends a
    /// `SyncScope::Logs` sync left out, or a repair's).
    pub(super) fn indexes_unsynced(&self) -> bool {
        self.durable_index_bytes != self.index_bytes()
    }

    /// Repairs the segment's index files after a failed sync, from what
    /// memory holds (and `aborted`, the segment's aborted transactions): the
    /// sync may have lost appends or left torn ones, and truncating a file
    /// to the length memory expects would pad it with zeros. Each file is cut
    /// back to its synced prefix (which the failure cannot have touched, so a
    /// crash midway never leaves less than was synced) and the rest appended.
    pub(super) fn repair_index_ops(
        &mut self,
        dir: &PartitionDir,
        aborted: &[index::AbortedTxn],
    ) -> Vec<DiskOp> {
        self.txn_entries = aborted.len() as u64;
        let mut offsets =
            BytesMut::with_capacity(self.offset_index.len() * index::OFFSET_ENTRY_BYTES);
        self.offset_index
            .iter()
            .for_each(|e| e.encode(&mut offsets));
        let mut times = BytesMut::with_capacity(self.time_index.len() * index::TIME_ENTRY_BYTES);
        self.time_index.iter().for_each(|e| e.encode(&mut times));
        let mut txns = BytesMut::with_capacity(aborted.len() * index::TXN_ENTRY_BYTES);
        aborted
            .iter()
            .for_each(|a| txns.extend_from_slice(&a.encode()));
        let mut ops = Vec::new();
        let files = [
            (SegmentFile::OffsetIndex, offsets),
            (SegmentFile::TimeIndex, times),
            (SegmentFile::TxnIndex, txns),
        ];
        for (i, (file, bytes)) in files.into_iter().enumerate() {
            let synced = self.durable_index_bytes[i].min(bytes.len() as u64);
            self.durable_index_bytes[i] = synced;
            ops.push(DiskOp::Truncate {
                dir: dir.clone(),
                segment_base: self.base_offset,
                file,
                len: synced,
            });
            let rest = bytes.freeze().slice(synced as usize..);
            if !rest.is_empty() {
                ops.push(DiskOp::Append {
                    dir: dir.clone(),
                    segment_base: self.base_offset,
                    file,
                    bytes: rest,
                });
            }
        }
        ops
    }

    /// Truncates of the index files to the entries memory holds (a start-up
    /// scan then appends the entries of the batches it reads; the `.log` is
    /// cut only where the scan finds it torn).
    pub(super) fn index_cut_ops(&self, dir: &PartitionDir) -> Vec<DiskOp> {
        let lens = [
            (
                SegmentFile::OffsetIndex,
                (self.offset_index.len() * index::OFFSET_ENTRY_BYTES) as u64,
            ),
            (
                SegmentFile::TimeIndex,
                (self.time_index.len() * index::TIME_ENTRY_BYTES) as u64,
            ),
            (
                SegmentFile::TxnIndex,
                self.txn_entries * index::TXN_ENTRY_BYTES as u64,
            ),
        ];
        lens.into_iter()
            .map(|(file, len)| DiskOp::Truncate {
                dir: dir.clone(),
                segment_base: self.base_offset,
                file,
                len,
            })
            .collect()
    }
}
