//! Start-up of one partition's log, from what the driver listed (segment
//! sizes and index files) and the partition's recovery checkpoint.
//!
//! - Below the recovery point everything is synced and indexed: the segments
//!   there are taken from their index files alone, without reading a byte of
//!   their batches.
//! - From the recovery point on, the batches are read (`DiskOp::Read`, in
//!   chunks) and checked one by one (header, length, CRC, offsets that
//!   increase); their index entries are written again, and the segments are
//!   adopted (made durable by the boot sync: a crashed process may have left
//!   them in the page cache only). The first batch that fails is a torn tail:
//!   it and everything after it is cut off, never served.
//! - Without a usable checkpoint (none yet, or an index file below the
//!   recovery point missing or inconsistent) every segment is read: the
//!   indexes are a cache of the batch headers, rebuilt from them.
//!
//! The batches read are handed to the caller as they come, so that producer
//! and transaction state continue from the checkpoint's snapshot.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::index::{self, AbortedTxn};
use super::{BatchPos, LogPosition, PartitionLog, Segment, INDEX_INTERVAL_BYTES};
use crate::batch::{self, BatchHeader, BATCH_HEADER_BYTES};
use crate::io::{DiskOp, FileRange, PartitionDir, RecoveredSegment, SegmentFile};
use crate::limits;

/// The log's part of a partition's recovery checkpoint: everything below
/// `offset` (at `segment_base`/`position`) is synced, and so are the index
/// entries of the batches there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogCheckpoint {
    pub offset: i64,
    pub segment_base: i64,
    pub position: u64,
    /// The largest timestamp below `offset` in that segment, and the last
    /// offset of the batch holding it (-1: none).
    pub max_timestamp_ms: i64,
    pub offset_of_max_timestamp: i64,
}

/// A batch found by the scan, for the caller's producer and transaction state.
#[derive(Clone, Debug)]
pub struct ScannedBatch {
    pub header: BatchHeader,
    pub pos: BatchPos,
    /// For a control batch: the marker it holds (commit or abort, and its
    /// coordinator epoch).
    pub marker: Option<crate::control::EndMarker>,
}

/// One segment to read: from `position` to `end` (its file length).
#[derive(Clone, Debug)]
struct ScanJob {
    segment_base: i64,
    position: u64,
    end: u64,
    /// Bytes the next read must hold at least: a batch found to be larger
    /// than one read (max.message.bytes may exceed it) is read whole.
    need: u64,
}

/// A partition log being recovered. See the module comment.
pub struct LogRecovery {
    log: PartitionLog,
    jobs: VecDeque<ScanJob>,
    /// The next offset a scanned batch may have.
    expected_min: i64,
    /// Aborted transactions from the `.txnindex` files kept.
    aborted: Vec<AbortedTxn>,
    /// Whether the checkpoint was used (else the caller starts producer and
    /// transaction state from nothing).
    from_checkpoint: bool,
    ops: Vec<DiskOp>,
}

impl LogRecovery {
    /// Plans the recovery. The returned value has the repairs to emit first
    /// (`take_ops`) and then asks for reads (`next_read`). `durable`: the
    /// files are known durable as listed (the last stop was clean,
    /// `core_state::clean_shutdown`), so nothing is adopted; the scan above
    /// the recovery point still runs, for the producer and transaction
    /// state and the index entries.
    pub fn start(
        dir: PartitionDir,
        segment_bytes: u64,
        mut found: Vec<RecoveredSegment>,
        checkpoint: Option<&LogCheckpoint>,
        durable: bool,
    ) -> Self {
        found.sort_by_key(|s| s.base_offset);
        for pair in found.windows(2) {
            assert!(
                pair[0].base_offset != pair[1].base_offset,
                "two segments listed with one base offset"
            );
        }
        let mut ops = Vec::new();
        // Index files whose .log is gone before the first real segment: what a
        // crash left of a retention deletion.
        while found.first().is_some_and(|s| s.log_bytes.is_none()) {
            let orphan = found.remove(0);
            ops.push(DiskOp::DeleteSegment {
                dir: dir.clone(),
                segment_base: orphan.base_offset,
            });
        }
        // A .log missing further on is a hole nobody of ours makes: the log
        // ends before it.
        if let Some(hole) = found.iter().position(|s| s.log_bytes.is_none()) {
            tracing::warn!(dir = %dir.dir_name(), "segment file missing; the log ends before it");
            for gone in found.drain(hole..) {
                ops.push(DiskOp::DeleteSegment {
                    dir: dir.clone(),
                    segment_base: gone.base_offset,
                });
            }
        }
        let start = found.first().map_or(0, |s| s.base_offset);
        let mut recovery = Self {
            log: PartitionLog::starting_at(dir, segment_bytes, start),
            jobs: VecDeque::new(),
            expected_min: start,
            aborted: Vec::new(),
            from_checkpoint: false,
            ops,
        };
        let usable = checkpoint.filter(|c| recovery.try_checkpoint(&found, c));
        if usable.is_none() {
            recovery.plan_full(&found);
        }
        // The boot sync covers the partition's directory whatever recovery
        // does: a crashed process may have removed files (a retention or an
        // orphan deletion) whose directory it never synced, and a power cut
        // after this start would bring them back.
        let adopts = recovery
            .ops
            .iter()
            .any(|op| matches!(op, DiskOp::Adopt { .. }));
        if !adopts {
            let base = recovery
                .log
                .segments
                .back()
                .map_or(start, |s| s.base_offset);
            recovery.ops.push(recovery.adopt(base));
        }
        if durable {
            // Durable as listed: nothing to adopt, and a cut to the length a
            // file already has changes nothing that needs a sync (after a
            // crash it is kept: the sync after it makes the file durable).
            recovery.ops.retain(|op| match op {
                DiskOp::Adopt { .. } => false,
                DiskOp::Truncate {
                    segment_base,
                    file,
                    len,
                    ..
                } => listed_len(&found, *segment_base, *file) != Some(*len),
                _ => true,
            });
        }
        recovery
    }

    /// Sets the log up from the checkpoint and the index files below it;
    /// false (and nothing changed) when they do not agree with what is on disk.
    fn try_checkpoint(&mut self, found: &[RecoveredSegment], c: &LogCheckpoint) -> bool {
        let below: Vec<&RecoveredSegment> = found
            .iter()
            .filter(|s| s.base_offset < c.segment_base)
            .collect();
        let at = found.iter().find(|s| s.base_offset == c.segment_base);
        let above: Vec<&RecoveredSegment> = found
            .iter()
            .filter(|s| s.base_offset > c.segment_base)
            .collect();
        let Some(at) = at else {
            // The checkpoint's segment is gone. With older ones left, the
            // directory is not one we left; with none left, retention
            // deleted it, and with it the batches between the recovery
            // point and the next segment that the checkpoint's producer and
            // transaction snapshot never saw: a marker there would leave its
            // transaction open for good (the LSO stuck at the log start).
            // As Kafka's ProducerStateManager.truncateAndReload drops the
            // snapshots at or below the log start, the state is rebuilt
            // from the batches that remain.
            return false;
        };
        if at.log_bytes.unwrap_or(0) < c.position {
            return false; // synced bytes are missing
        }
        let mut segments = VecDeque::new();
        let mut aborted = Vec::new();
        for (i, s) in below.iter().enumerate() {
            let next_base = below.get(i + 1).map_or(c.segment_base, |n| n.base_offset);
            let Some(segment) = closed_segment(s, next_base, &mut aborted) else {
                tracing::warn!(
                    segment = s.base_offset,
                    "index files missing or inconsistent; rebuilding every index from the log"
                );
                return false;
            };
            segments.push_back(segment);
        }
        let mut ops = Vec::new();
        let mut jobs = VecDeque::new();
        let Some(segment) = checkpoint_segment(at, c, &mut aborted) else {
            tracing::warn!(
                segment = at.base_offset,
                "index files inconsistent; rebuilding every index from the log"
            );
            return false;
        };
        ops.extend(segment.index_cut_ops(&self.log.dir));
        // Adopted even with nothing above the recovery point: a roll may
        // have written its final time entry (of a batch below the point)
        // after the checkpoint's sync, and a crash left it unsynced.
        ops.push(self.adopt(segment.base_offset));
        let end = at.log_bytes.expect("checked");
        if end > c.position {
            jobs.push_back(ScanJob {
                segment_base: at.base_offset,
                position: c.position,
                end,
                need: 0,
            });
        }
        segments.push_back(segment);
        for s in above {
            let (segment, job) = self.whole_scan(s, &mut ops);
            jobs.push_back(job);
            segments.push_back(segment);
        }
        self.log.segments = segments;
        self.jobs = jobs;
        self.aborted = aborted;
        self.expected_min = c.offset;
        self.from_checkpoint = true;
        self.ops.extend(ops);
        true
    }

    /// Every segment is read from its start; every index file is written again.
    fn plan_full(&mut self, found: &[RecoveredSegment]) {
        let mut segments = VecDeque::new();
        let mut ops = Vec::new();
        for s in found {
            let (segment, job) = self.whole_scan(s, &mut ops);
            self.jobs.push_back(job);
            segments.push_back(segment);
        }
        self.ops.extend(ops);
        self.log.segments = segments;
    }

    /// A segment read from its start: its index files emptied (the scan
    /// writes them again), adopted, and the read to make.
    fn whole_scan(&self, found: &RecoveredSegment, ops: &mut Vec<DiskOp>) -> (Segment, ScanJob) {
        let segment = Segment::new(found.base_offset);
        ops.extend(segment.index_cut_ops(&self.log.dir));
        ops.push(self.adopt(found.base_offset));
        let job = ScanJob {
            segment_base: found.base_offset,
            position: 0,
            end: found.log_bytes.expect("holes were cut above"),
            need: 0,
        };
        (segment, job)
    }

    fn adopt(&self, segment_base: i64) -> DiskOp {
        DiskOp::Adopt {
            dir: self.log.dir.clone(),
            segment_base,
        }
    }

    /// Whether the producer and transaction state continue from the
    /// checkpoint's snapshot (else they start from nothing).
    pub fn from_checkpoint(&self) -> bool {
        self.from_checkpoint
    }

    /// Aborted transactions of the `.txnindex` files kept, in marker order.
    pub fn take_aborted(&mut self) -> Vec<AbortedTxn> {
        std::mem::take(&mut self.aborted)
    }

    /// Disk work to emit now, in order.
    pub fn take_ops(&mut self) -> Vec<DiskOp> {
        std::mem::take(&mut self.ops)
    }

    /// The log as recovered so far (to book aborted transactions found).
    pub fn log_mut(&mut self) -> &mut PartitionLog {
        &mut self.log
    }

    /// The next range to read, or `None` when the scan is over.
    pub fn next_read(&self) -> Option<FileRange> {
        let job = self.jobs.front()?;
        let chunk = (limits::RECOVERY_READ_BYTES as u64).max(job.need);
        let len = (job.end - job.position).min(chunk);
        Some(FileRange {
            dir: self.log.dir.clone(),
            segment_base: job.segment_base,
            file: SegmentFile::Log,
            position: job.position,
            len,
        })
    }

    /// Takes the bytes of the range `next_read` named: books every whole
    /// valid batch, and returns them. Stops the scan at a torn batch.
    pub fn on_read(&mut self, range: &FileRange, bytes: &[u8]) -> Vec<ScannedBatch> {
        let job = self.jobs.front().cloned().expect("a read was asked for");
        assert_eq!(
            (range.segment_base, range.position),
            (job.segment_base, job.position),
            "reads come back for the range asked"
        );
        assert_eq!(
            bytes.len() as u64,
            range.len,
            "a read returns what was asked"
        );
        let mut scanned = Vec::new();
        if job.position == 0 && self.leaves_a_gap(job.segment_base) {
            // The batches between the last one read and this segment's base
            // were lost (a power cut kept a later file's unsynced pages and
            // not an earlier one's): nothing from here on was ever synced,
            // so nothing here was acknowledged; the log ends before the gap.
            let why = format!("segment starts after a gap at offset {}", self.expected_min);
            self.torn(&job, 0, &why);
            return scanned;
        }
        let mut at: usize = 0;
        let chunk_end_is_file_end = range.position + range.len == job.end;
        loop {
            let rest = &bytes[at..];
            if rest.is_empty() && chunk_end_is_file_end {
                self.jobs.pop_front();
                self.segment_read(job.segment_base);
                break;
            }
            let position = job.position + at as u64;
            // A header or batch that runs past the chunk: read again from it,
            // unless the chunk ends the file (then it is torn).
            let needed = match batch::parse_header(rest) {
                Ok(h) => h.total_bytes(),
                Err(batch::BatchError::Truncated) => BATCH_HEADER_BYTES,
                Err(e) => {
                    self.torn(&job, position, &e.to_string());
                    break;
                }
            };
            if rest.len() < needed {
                if chunk_end_is_file_end || position + needed as u64 > job.end {
                    self.torn(&job, position, "batch runs past the end of the file");
                } else {
                    let job = self.jobs.front_mut().expect("current job");
                    job.position = position;
                    job.need = needed as u64;
                }
                break;
            }
            let header = match batch::check_stored_batch(rest) {
                Ok(h) => h,
                Err(e) => {
                    self.torn(&job, position, &e.to_string());
                    break;
                }
            };
            let expected_min = self.expected_min.max(job.segment_base);
            if header.base_offset < expected_min || position + needed as u64 > u64::from(u32::MAX) {
                let why = format!(
                    "batch base offset {} below {expected_min}",
                    header.base_offset
                );
                self.torn(&job, position, &why);
                break;
            }
            let marker = header
                .is_control()
                .then(|| crate::control::read(&header, rest))
                .flatten();
            let pos = self.book(job.segment_base, &header, position);
            scanned.push(ScannedBatch {
                header,
                pos,
                marker,
            });
            at += needed;
            if at == bytes.len() && !chunk_end_is_file_end {
                let job = self.jobs.front_mut().expect("current job");
                job.position = position + needed as u64;
                job.need = 0;
                break;
            }
        }
        scanned
    }

    /// A segment was read to its end: if a later one follows, it was rolled,
    /// and gets the final time index entry a roll writes.
    fn segment_read(&mut self, segment_base: i64) {
        let dir = self.log.dir.clone();
        let last = self.log.segments.back().map(|s| s.base_offset);
        if last == Some(segment_base) {
            return;
        }
        let segment = self
            .log
            .segments
            .iter_mut()
            .find(|s| s.base_offset == segment_base)
            .expect("the scanned segment is listed");
        self.ops.extend(segment.maybe_time_entry(&dir));
    }

    fn book(&mut self, segment_base: i64, header: &BatchHeader, position: u64) -> BatchPos {
        let dir = self.log.dir.clone();
        let segment = self
            .log
            .segments
            .iter_mut()
            .find(|s| s.base_offset == segment_base)
            .expect("the scanned segment is listed");
        let ops = segment.on_batch(&dir, header, position, INDEX_INTERVAL_BYTES);
        let pos = BatchPos::of(header, segment.base_offset, position);
        self.ops.extend(ops);
        self.log.remember(pos);
        self.log.appended_bytes += pos.size_bytes;
        self.expected_min = pos.last_offset + 1;
        pos
    }

    /// Whether a segment (not the first) starts after the offset the batches
    /// before it end at.
    fn leaves_a_gap(&self, segment_base: i64) -> bool {
        let first = self.log.segments.front().map(|s| s.base_offset);
        first.is_some_and(|first| first < segment_base) && segment_base != self.expected_min
    }

    /// Cuts the log at `position` of the current job's segment, and drops
    /// every later segment; a segment cut to nothing goes too, unless it is
    /// the first (its name carries the log start).
    fn torn(&mut self, job: &ScanJob, position: u64, why: &str) {
        tracing::warn!(
            dir = %self.log.dir.dir_name(),
            segment_base = job.segment_base,
            valid_bytes = position,
            file_bytes = job.end,
            "torn segment tail cut off: {why}"
        );
        self.ops.push(DiskOp::Truncate {
            dir: self.log.dir.clone(),
            segment_base: job.segment_base,
            file: SegmentFile::Log,
            len: position,
        });
        while self
            .log
            .segments
            .back()
            .is_some_and(|s| s.base_offset > job.segment_base)
        {
            let gone = self.log.segments.pop_back().expect("checked");
            self.ops.push(DiskOp::DeleteSegment {
                dir: self.log.dir.clone(),
                segment_base: gone.base_offset,
            });
        }
        let first = self.log.segments.front().map(|s| s.base_offset);
        let gap = self.expected_min != job.segment_base;
        if position == 0 && gap && first.is_some_and(|first| first < job.segment_base) {
            // An empty segment after others would claim offsets up to its
            // base that no batch holds. Without a gap it stays, empty, as
            // the active segment: dropping it would make the segment before
            // it active again, one taken from its index files whose length
            // no scan vouches for (a crash after appending to it, with the
            // deletion not yet synced, leaves a torn tail below the
            // recovery point that the next start would never read).
            let gone = self
                .log
                .segments
                .pop_back()
                .expect("the torn segment is listed");
            assert_eq!(
                gone.base_offset, job.segment_base,
                "the torn segment is the last"
            );
            self.ops.push(DiskOp::DeleteSegment {
                dir: self.log.dir.clone(),
                segment_base: gone.base_offset,
            });
        }
        self.jobs.clear();
    }

    /// The recovered log, once `next_read` is `None`. Everything in it is
    /// treated as durable: the caller makes it so with the boot sync before
    /// serving anything (or it was, after a clean stop).
    pub fn finish(mut self) -> PartitionLog {
        assert!(self.jobs.is_empty(), "the scan is over");
        let log = &mut self.log;
        // Offsets run on from segment to segment.
        let bases: Vec<i64> = log.segments.iter().map(|s| s.base_offset).collect();
        for (i, segment) in log.segments.iter_mut().enumerate() {
            if let Some(next) = bases.get(i + 1) {
                segment.next_offset = segment.next_offset.max(*next);
            }
        }
        log.log_end_offset = log
            .segments
            .back()
            .map_or(log.log_start_offset, |s| s.next_offset.max(s.base_offset));
        log.log_start_offset = log
            .segments
            .front()
            .map_or(log.log_end_offset, |s| s.base_offset);
        log.high_watermark = log.log_end_offset;
        // The boot sync is a `SyncScope::All` one: it makes the index
        // entries recovery wrote durable before anything is served.
        log.indexes_durable_offset = log.log_end_offset;
        log.high_watermark_position = log.end_position();
        log.durable_max_timestamp = log.segments.back().map_or((batch::NO_TIMESTAMP, -1), |s| {
            (s.max_timestamp_ms, s.offset_of_max_timestamp)
        });
        log.durable_bytes = log.appended_bytes;
        assert!(
            log.log_start_offset <= log.log_end_offset,
            "recovered offsets are ordered"
        );
        assert!(self.ops.is_empty(), "every op was taken before finishing");
        self.log
    }
}

/// The length of a segment's file as the driver listed it; `None` when absent.
fn listed_len(found: &[RecoveredSegment], segment_base: i64, file: SegmentFile) -> Option<u64> {
    let segment = found.iter().find(|s| s.base_offset == segment_base)?;
    let index = |bytes: &Option<bytes::Bytes>| bytes.as_ref().map(|b| b.len() as u64);
    match file {
        SegmentFile::Log => segment.log_bytes,
        SegmentFile::OffsetIndex => index(&segment.offset_index),
        SegmentFile::TimeIndex => index(&segment.time_index),
        SegmentFile::TxnIndex => index(&segment.txn_index),
    }
}

/// A segment wholly below the recovery point, from its index files; `None`
/// when one is absent or disagrees with the `.log`.
fn closed_segment(
    found: &RecoveredSegment,
    next_base: i64,
    aborted: &mut Vec<AbortedTxn>,
) -> Option<Segment> {
    let log_bytes = found.log_bytes?;
    let offsets = index::decode_offset_index(found.offset_index.as_deref()?)?;
    let times = index::decode_time_index(found.time_index.as_deref()?)?;
    let txns = index::decode_txn_index(found.txn_index.as_deref()?)?;
    let span = next_base - found.base_offset;
    let fits_offsets = offsets
        .last()
        .is_none_or(|e| u64::from(e.position) < log_bytes && i64::from(e.relative_offset) < span);
    let fits_times = times
        .last()
        .is_none_or(|e| i64::from(e.relative_offset) < span);
    let fits_txns = txns
        .iter()
        .all(|t| t.last_offset >= found.base_offset && t.last_offset < next_base);
    if !(fits_offsets && fits_times && fits_txns) {
        return None;
    }
    let mut segment = Segment::new(found.base_offset);
    segment.size_bytes = log_bytes;
    segment.next_offset = next_base;
    if let Some(last) = times.last() {
        segment.max_timestamp_ms = last.timestamp_ms;
        segment.offset_of_max_timestamp = found.base_offset + i64::from(last.relative_offset);
    }
    Some(with_indexes(segment, offsets, times, txns, aborted))
}

/// The checkpoint's segment, cut back to the recovery point: index entries
/// at or past it are dropped (they are written again by the scan).
fn checkpoint_segment(
    found: &RecoveredSegment,
    c: &LogCheckpoint,
    aborted: &mut Vec<AbortedTxn>,
) -> Option<Segment> {
    // Every segment is created with its index files, so an absent one was lost.
    let mut offsets = index::decode_offset_index(found.offset_index.as_deref()?)?;
    let mut times = index::decode_time_index(found.time_index.as_deref()?)?;
    let mut txns = index::decode_txn_index(found.txn_index.as_deref()?)?;
    let relative_end = c.offset - c.segment_base;
    offsets.retain(|e| u64::from(e.position) < c.position);
    times.retain(|e| i64::from(e.relative_offset) < relative_end);
    txns.retain(|t| t.last_offset < c.offset);
    if txns.iter().any(|t| t.last_offset < c.segment_base) {
        return None;
    }
    let mut segment = Segment::new(c.segment_base);
    segment.size_bytes = c.position;
    segment.next_offset = c.offset;
    if c.offset_of_max_timestamp >= 0 && c.offset_of_max_timestamp < c.offset {
        segment.max_timestamp_ms = c.max_timestamp_ms;
        segment.offset_of_max_timestamp = c.offset_of_max_timestamp;
    } else if let Some(last) = times.last() {
        segment.max_timestamp_ms = last.timestamp_ms;
        segment.offset_of_max_timestamp = c.segment_base + i64::from(last.relative_offset);
    }
    segment.bytes_since_index_entry = match offsets.last() {
        Some(e) => c.position - u64::from(e.position),
        None => c.position,
    };
    Some(with_indexes(segment, offsets, times, txns, aborted))
}

/// A segment below (or at) the recovery point takes its index entries from
/// its files; its aborted transactions join the partition's list.
fn with_indexes(
    mut segment: Segment,
    offsets: Vec<index::OffsetEntry>,
    times: Vec<index::TimeEntry>,
    txns: Vec<AbortedTxn>,
    aborted: &mut Vec<AbortedTxn>,
) -> Segment {
    segment.offset_index = offsets;
    segment.time_index = times;
    segment.txn_entries = txns.len() as u64;
    // Below the recovery point the index files are synced (the checkpoint
    // vouches), as far as memory holds them.
    segment.durable_index_bytes = segment.index_bytes();
    aborted.extend(txns);
    segment
}

impl PartitionLog {
    /// The log's part of a recovery checkpoint at the high watermark.
    pub fn checkpoint(&self) -> LogCheckpoint {
        let hw = self.high_watermark_position;
        let (max_timestamp_ms, offset_of_max_timestamp) = self.durable_max_timestamp;
        LogCheckpoint {
            offset: self.high_watermark,
            segment_base: hw.segment_base,
            position: hw.position,
            max_timestamp_ms,
            offset_of_max_timestamp,
        }
    }

    /// Where the checkpoint's recovery point lies, for tests and tools.
    pub fn recovery_position(c: &LogCheckpoint) -> LogPosition {
        LogPosition {
            segment_base: c.segment_base,
            position: c.position,
        }
    }
}
