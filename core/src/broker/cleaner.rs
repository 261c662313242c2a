//! The log cleaner: one pass at a time over one compacted partition, as
//! Kafka's LogCleaner does it with one cleaner thread, but as disk work the
//! core asks for, so the simulator can crash and power-cut it anywhere.
//!
//! A pass (choosing the log: Kafka's LogCleanerManager.grabFilthiestCompactedLog,
//! the dirtiest over min.cleanable.dirty.ratio, or any whose first dirty
//! segment is older than max.compaction.lag.ms):
//!
//! 1. **Map**: reads the dirty segments (from the first offset not cleaned
//!    yet up to the first it may not touch, `PartitionLog::dirtiness`) and
//!    books each key's latest offset (`filter::map_batch`).
//! 2. **Clean**, segment by segment from the log start: reads it, decides
//!    each batch (`filter::Filter`), writes what stays to
//!    `{base}.*.cleaned` (`DiskOp::AppendCleaned`), and then swaps it in:
//!    sync; the index files renamed to `.swap`; sync; the `.log` renamed to
//!    `.swap` (the commit point: start-up finishes a swap whose `.log.swap`
//!    it finds, and discards any other staged file); sync; the index files
//!    renamed over the live ones; sync; the log's layout switched in memory
//!    and the `.log` renamed over the live one in the same breath (a
//!    response planned before it reads the old file, one planned after
//!    reads the new: see `Output::ResponseParts`); sync.
//!
//! A failed sync or read before the switch abandons the pass (its staged
//! files are discarded); the partition is tried again after
//! log.cleaner.backoff.ms. Retention leaves a partition alone while a pass
//! runs on it, so the segment being swapped stays put; a deleted topic ends
//! the pass without another op, and so does a stopping broker (the next
//! start finishes or discards what it left). Where a pass stands is in
//! memory (a restart begins it again); the first dirty offset that finished
//! passes reached is stored with the partition's recovery checkpoint and
//! read back at start-up (`cleaner_booted`), so a restart does not count the
//! whole log dirty again.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::Broker;
use crate::batch;
use crate::checkpoint::Due;
use crate::io::{DiskOp, FileRange, FileStage, IoError, IoId, PartitionDir, SegmentFile};
use crate::limits;
use crate::log::clean::filter::{self, Filter, LastRecord, OffsetMap, TxnWalk, Verdict};
use crate::log::clean::{self, CleanedSegment, SegmentSpan};
use crate::topics::PartitionKey;

/// What the cleaner has done for one partition, for the operator tools.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CleanerProgress {
    /// The first offset not cleaned yet.
    pub first_dirty_offset: i64,
    pub passes: u64,
    /// Broker time the last pass finished (-1: none yet).
    pub last_cleaned_ms: i64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// How long the last pass took, and how many dirty bytes it began with.
    pub last_pass_ms: i64,
    pub last_pass_dirty_bytes: u64,
}

/// The cleaner's state in the broker.
#[derive(Default)]
pub(crate) struct Cleaner {
    progress: BTreeMap<PartitionKey, CleanerProgress>,
    /// Partitions a read failed or a batch did not parse for: left alone
    /// until a restart (Kafka marks such a partition uncleanable).
    uncleanable: BTreeSet<PartitionKey>,
    /// Partitions a pass was abandoned on, and when to try them again.
    backoff_until_ms: BTreeMap<PartitionKey, i64>,
    pass: Option<Pass>,
    next_check_ms: i64,
    /// Partitions held back by their recovery checkpoint, one asked for:
    /// when it is stored the cleaner looks again at once.
    awaiting_checkpoint: BTreeSet<PartitionKey>,
}

struct Pass {
    key: PartitionKey,
    dir: PartitionDir,
    /// The first dirty offset and the first offset the pass may not touch.
    first_dirty: i64,
    end: i64,
    spans: Vec<SegmentSpan>,
    map: OffsetMap,
    map_walk: TxnWalk,
    clean_walk: TxnWalk,
    last_records: BTreeMap<i64, LastRecord>,
    delete_retention_ms: i64,
    step: Step,
    /// The map filled before the dirty range's end: the pass cleans what it covers.
    map_full: bool,
    /// The read in flight, and how many bytes it asked for.
    read: Option<(IoId, u64)>,
    /// Waiting for a sync whose io is at least this one.
    sync_from: Option<IoId>,
    bytes_read: u64,
    bytes_written: u64,
    /// Bytes of the dirty range when the pass began, and when it began.
    dirty_bytes: u64,
    started_ms: i64,
}

enum Step {
    /// Reading span `i` from `position` into the offset map.
    Map { i: usize, position: u64 },
    /// Reading span `i` from `position`, writing its cleaned copy.
    Clean {
        i: usize,
        position: u64,
        copy: CleanedSegment,
    },
    /// Waiting for the sync after one step of the swap of span `i`.
    Swap {
        i: usize,
        copy: CleanedSegment,
        done: SwapStep,
    },
    /// Span `i` swapped in: waiting for the sync of its `.log` rename.
    Installed { i: usize },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SwapStep {
    Written,
    IndexesStaged,
    Committed,
    IndexesLive,
}

impl Pass {
    /// The span a read is made of, and the position it starts at.
    fn reading_at(&self) -> (usize, u64) {
        match &self.step {
            Step::Map { i, position } | Step::Clean { i, position, .. } => (*i, *position),
            _ => unreachable!("reads are made while mapping or cleaning"),
        }
    }
}

impl Cleaner {
    /// The partition a pass is rewriting (retention waits).
    pub fn cleaning_key(&self) -> Option<PartitionKey> {
        self.pass.as_ref().map(|p| p.key.clone())
    }

    pub fn owns_read(&self, io: IoId) -> bool {
        self.pass
            .as_ref()
            .is_some_and(|p| p.read.is_some_and(|(r, _)| r == io))
    }

    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.pass.is_none().then_some(self.next_check_ms)
    }
}

impl Broker {
    /// What the cleaner has done for a partition (`None`: no pass yet).
    pub fn cleaner_progress(&self, topic: &str, partition: i32) -> Option<CleanerProgress> {
        let key = self.topics.get(topic)?.key(partition);
        self.cleaner.progress.get(&key).cloned()
    }

    /// The first offset the cleaner has not cleaned (0: none cleaned yet),
    /// which recovery checkpoints carry across restarts.
    pub(super) fn cleaner_first_dirty_offset(&self, key: &PartitionKey) -> i64 {
        self.cleaner
            .progress
            .get(key)
            .map_or(0, |p| p.first_dirty_offset)
    }

    /// A partition recovered with the cleaner's first dirty offset its
    /// checkpoint held.
    pub(super) fn cleaner_booted(&mut self, key: PartitionKey, first_dirty_offset: i64) {
        if first_dirty_offset > 0 {
            self.cleaner
                .progress
                .entry(key)
                .or_default()
                .first_dirty_offset = first_dirty_offset;
        }
    }

    /// A recovery checkpoint of `key` was stored: if it held the cleaner
    /// back, the cleaner looks again now rather than after its backoff.
    pub(super) fn cleaner_on_checkpoint(&mut self, key: &PartitionKey) {
        if self.cleaner.awaiting_checkpoint.remove(key) {
            self.cleaner.next_check_ms = self.cleaner.next_check_ms.min(self.now_ms);
        }
    }

    /// Timer: starts a pass on the dirtiest compacted partition, if any is
    /// dirty enough and no pass runs.
    pub(super) fn cleaner_tick(&mut self) {
        if self.cleaner.pass.is_some() || self.now_ms < self.cleaner.next_check_ms {
            return;
        }
        self.cleaner.next_check_ms = self.now_ms + self.config.cleaner_backoff_ms.max(1);
        if self.shutting_down {
            return;
        }
        let (chosen, held_back) = self.filthiest_log();
        if !held_back.is_empty() {
            self.cleaner
                .awaiting_checkpoint
                .extend(held_back.iter().cloned());
            self.write_due_checkpoints(held_back, Due::Now);
        }
        let Some((key, dirtiness)) = chosen else {
            return;
        };
        let (dir, spans, last_records, aborted, delete_retention_ms) = {
            let topic = self.topics.get(&key.topic).expect("chosen from the topics");
            let delete_retention_ms = topic.cleanup_config(&self.config).delete_retention_ms;
            let log = self
                .topics
                .partition_by_key(&key)
                .expect("chosen from the topics");
            let spans = log.spans_below(dirtiness.end_offset);
            let partition = self
                .topics
                .get_partition(&key)
                .expect("chosen from the topics");
            let last_records = partition
                .producers()
                .map(|p| p.last_records())
                .unwrap_or_default();
            let aborted = partition
                .txns()
                .map(|t| t.aborted_overlapping(log.log_start_offset(), dirtiness.end_offset))
                .unwrap_or_default();
            (
                log.dir().clone(),
                spans,
                last_records,
                aborted,
                delete_retention_ms,
            )
        };
        let first_map = spans
            .iter()
            .position(|s| s.end_offset > dirtiness.first_dirty_offset)
            .expect("a dirty log has a dirty segment");
        tracing::info!(
            topic = %key.topic, partition = key.partition,
            from = dirtiness.first_dirty_offset, to = dirtiness.end_offset,
            dirty_bytes = dirtiness.dirty_bytes, ratio = dirtiness.ratio(),
            "cleaning"
        );
        self.cleaner.pass = Some(Pass {
            key,
            dir,
            first_dirty: dirtiness.first_dirty_offset,
            end: dirtiness.end_offset,
            spans,
            map: OffsetMap::new(limits::CLEANER_MAP_ENTRIES_MAX),
            map_walk: TxnWalk::new(aborted.clone()),
            clean_walk: TxnWalk::new(aborted),
            last_records,
            delete_retention_ms,
            step: Step::Map {
                i: first_map,
                position: 0,
            },
            map_full: false,
            read: None,
            sync_from: None,
            bytes_read: 0,
            bytes_written: 0,
            dirty_bytes: dirtiness.dirty_bytes,
            started_ms: self.now_ms,
        });
        self.cleaner_advance();
    }

    /// The dirtiest compacted partition worth a pass, and the partitions
    /// a pass would clean more of with a newer recovery checkpoint.
    ///
    /// A pass ends at or below the partition's last stored checkpoint, as
    /// Kafka's ends below the active segment where its last producer-state
    /// snapshot lies: the start-up scan replays the batches above the
    /// checkpoint, with the transactions it found open, and it must never
    /// meet a cleaned segment (a marker taken out there would leave its
    /// transaction open for good, and the last stable offset stuck).
    fn filthiest_log(&self) -> (Option<(PartitionKey, clean::Dirtiness)>, Vec<PartitionKey>) {
        let mut best: Option<(PartitionKey, clean::Dirtiness)> = None;
        let mut held_back = Vec::new();
        for key in self.topics.keys() {
            let Some(topic) = self.topics.get(&key.topic) else {
                continue;
            };
            let config = topic.cleanup_config(&self.config);
            if !config.compact
                || self.cleaner.uncleanable.contains(&key)
                || self.is_offline(&key)
                || self
                    .cleaner
                    .backoff_until_ms
                    .get(&key)
                    .is_some_and(|until| self.now_ms < *until)
            {
                continue;
            }
            let Ok(view) = self.partition_view(&key.topic, key.partition) else {
                continue;
            };
            let first_dirty = self
                .cleaner
                .progress
                .get(&key)
                .map_or(0, |p| p.first_dirty_offset);
            let lso = view.last_stable_offset();
            // Its last offset, not its end: a checkpoint at a segment's end
            // names that segment and a position in it (its size), which a
            // pass over that segment would leave pointing past the file.
            let checkpointed = view
                .checkpoint()
                .stored_offset()
                .map_or(-1, |offset| offset - 1);
            let dirtiness = |end| {
                view.log()
                    .dirtiness(first_dirty, end, self.now_ms, config.min_compaction_lag_ms)
            };
            let cleanable = |d: &clean::Dirtiness| {
                let overdue = d.first_dirty_timestamp_ms >= 0
                    && self.now_ms.saturating_sub(d.first_dirty_timestamp_ms)
                        > config.max_compaction_lag_ms;
                d.dirty_bytes > 0 && (d.ratio() >= config.min_cleanable_dirty_ratio || overdue)
            };
            let d = dirtiness(lso.min(checkpointed));
            if checkpointed + 1 < lso && !cleanable(&d) && cleanable(&dirtiness(lso)) {
                held_back.push(key.clone());
            }
            if cleanable(&d) && best.as_ref().is_none_or(|(_, b)| d.ratio() > b.ratio()) {
                best = Some((key, d));
            }
        }
        (best, held_back)
    }

    /// Whether the pass's partition is still the one it started on.
    fn pass_partition_alive(&self) -> bool {
        let pass = self.cleaner.pass.as_ref().expect("a pass runs");
        self.topics.partition_by_key(&pass.key).is_some()
    }

    /// Whether span `i` of the pass is still in the log as the pass read it
    /// (DeleteRecords deletes the segments below the new log start at once;
    /// retention waits for the pass).
    fn pass_span_held(&self, i: usize) -> bool {
        let pass = self.cleaner.pass.as_ref().expect("a pass runs");
        let span = pass.spans[i];
        self.topics
            .partition_by_key(&pass.key)
            .is_some_and(|log| log.holds_segment(span.base_offset, span.size_bytes))
    }

    /// Moves the pass on as far as it can without waiting.
    fn cleaner_advance(&mut self) {
        loop {
            if self.cleaner.pass.is_none() {
                return;
            }
            if !self.pass_partition_alive() {
                self.cleaner.pass = None;
                return;
            }
            let pass = self.cleaner.pass.as_mut().expect("checked");
            if pass.read.is_some() || pass.sync_from.is_some() {
                return;
            }
            if self.shutting_down {
                return self.cleaner_stop_pass();
            }
            match &mut pass.step {
                Step::Map { i, position } => {
                    let span = pass.spans[*i];
                    if *position < span.size_bytes {
                        let (i, position) = (*i, *position);
                        return self.cleaner_read(i, position, None);
                    }
                    pass.map.covers_up_to(span.end_offset - 1);
                    if *i + 1 < pass.spans.len() {
                        *i += 1;
                        *position = 0;
                    } else {
                        self.cleaner_start_clean(0);
                    }
                }
                Step::Clean { i, position, .. } => {
                    let (i, position) = (*i, *position);
                    let span = pass.spans[i];
                    if position < span.size_bytes {
                        return self.cleaner_read(i, position, None);
                    }
                    let Step::Clean { mut copy, .. } =
                        std::mem::replace(&mut pass.step, Step::Installed { i })
                    else {
                        unreachable!("matched above")
                    };
                    let ops = copy.finish();
                    pass.step = Step::Swap {
                        i,
                        copy,
                        done: SwapStep::Written,
                    };
                    self.cleaner_emit(ops);
                }
                Step::Swap { .. } | Step::Installed { .. } => {
                    unreachable!("a swap step always waits for its sync")
                }
            }
        }
    }

    /// Starts cleaning span `i`, or ends the pass when the map's reach ends.
    fn cleaner_start_clean(&mut self, i: usize) {
        let pass = self.cleaner.pass.as_mut().expect("a pass runs");
        let reach = pass.map.latest_offset() + 1;
        let Some(span) = pass.spans.get(i).filter(|s| s.base_offset < reach) else {
            let up_to = reach.min(pass.end);
            return self.cleaner_finish(up_to);
        };
        let copy = CleanedSegment::new(pass.dir.clone(), span.base_offset);
        pass.step = Step::Clean {
            i,
            position: 0,
            copy,
        };
        // A pass abandoned before may have left staged files under this base.
        let discard = DiskOp::DiscardStaged {
            dir: pass.dir.clone(),
            segment_base: span.base_offset,
        };
        let key = pass.key.clone();
        self.emit_disk(key, discard);
    }

    fn cleaner_finish(&mut self, cleaned_up_to: i64) {
        let pass = self.cleaner.pass.take().expect("a pass runs");
        let now_ms = self.now_ms;
        let elapsed_ms = now_ms - pass.started_ms;
        tracing::info!(
            topic = %pass.key.topic, partition = pass.key.partition,
            up_to = cleaned_up_to, dirty_bytes = pass.dirty_bytes, read = pass.bytes_read,
            written = pass.bytes_written, elapsed_ms,
            "cleaned"
        );
        let progress = self.cleaner.progress.entry(pass.key.clone()).or_default();
        progress.first_dirty_offset = progress.first_dirty_offset.max(cleaned_up_to);
        progress.passes += 1;
        progress.last_cleaned_ms = now_ms;
        progress.bytes_read += pass.bytes_read;
        progress.bytes_written += pass.bytes_written;
        progress.last_pass_ms = elapsed_ms;
        progress.last_pass_dirty_bytes = pass.dirty_bytes;
        // Stored with the next checkpoint, asked for now.
        self.write_due_checkpoints(vec![pass.key], Due::Now);
        // Another log may be dirty already.
        self.cleaner.next_check_ms = now_ms;
    }

    /// A stopping broker ends the pass where it stands. Until the cleaned
    /// copy's index files replace the live ones its staged files are
    /// discarded, and that removal is synced before `Output::Stopped` (a
    /// clean stop leaves nothing unsynced, even after a failed sync of the
    /// copy); past that point the next start finishes the swap.
    fn cleaner_stop_pass(&mut self) {
        let pass = self.cleaner.pass.as_ref().expect("a pass runs");
        let live = matches!(
            pass.step,
            Step::Swap {
                done: SwapStep::IndexesLive,
                ..
            } | Step::Installed { .. }
        );
        if live {
            self.cleaner.pass = None;
        } else {
            self.cleaner_abandon("the broker stops", false);
        }
    }

    /// Gives up the pass: its staged files go, the partition waits a backoff.
    fn cleaner_abandon(&mut self, why: &str, uncleanable: bool) {
        let pass = self.cleaner.pass.take().expect("a pass runs");
        tracing::warn!(topic = %pass.key.topic, partition = pass.key.partition, "cleaning abandoned: {why}");
        let base = match &pass.step {
            Step::Clean { copy, .. } | Step::Swap { copy, .. } => Some(copy.base_offset()),
            Step::Map { .. } | Step::Installed { .. } => None,
        };
        if let (Some(segment_base), true) =
            (base, self.topics.partition_by_key(&pass.key).is_some())
        {
            let op = DiskOp::DiscardStaged {
                dir: pass.dir.clone(),
                segment_base,
            };
            self.emit_disk(pass.key.clone(), op);
            self.request_sync();
        }
        let until = self.now_ms + self.config.cleaner_backoff_ms.max(1);
        self.cleaner
            .backoff_until_ms
            .insert(pass.key.clone(), until);
        if uncleanable {
            self.cleaner.uncleanable.insert(pass.key);
        }
    }

    fn cleaner_read(&mut self, i: usize, position: u64, len: Option<u64>) {
        let pass = self.cleaner.pass.as_ref().expect("a pass runs");
        let span = pass.spans[i];
        let len = len.unwrap_or(limits::CLEANER_READ_BYTES as u64);
        let len = len.min(span.size_bytes - position);
        let range = FileRange {
            dir: pass.dir.clone(),
            segment_base: span.base_offset,
            file: SegmentFile::Log,
            position,
            len,
        };
        let io = self.emit_read(range);
        self.cleaner.pass.as_mut().expect("a pass runs").read = Some((io, len));
    }

    /// Emits the pass's disk ops, counting the bytes of cleaned copies written.
    fn cleaner_write(&mut self, ops: Vec<DiskOp>) {
        let pass = self.cleaner.pass.as_mut().expect("a pass runs");
        for op in &ops {
            if let DiskOp::AppendCleaned { bytes, .. } = op {
                pass.bytes_written += bytes.len() as u64;
            }
        }
        let key = pass.key.clone();
        for op in ops {
            self.emit_disk(key.clone(), op);
        }
    }

    /// Emits the pass's disk ops and asks for the sync it then waits for.
    fn cleaner_emit(&mut self, ops: Vec<DiskOp>) {
        self.cleaner_write(ops);
        // Any sync issued from now on covers them.
        let from = self.outbox.next_io();
        self.cleaner.pass.as_mut().expect("a pass runs").sync_from = Some(from);
        self.request_sync();
    }

    pub(super) fn cleaner_read_done(&mut self, result: Result<Bytes, IoError>) {
        if !self.pass_partition_alive() {
            self.cleaner.pass = None;
            return;
        }
        if self.shutting_down {
            return self.cleaner_stop_pass();
        }
        let bytes = match result {
            Ok(bytes) => bytes,
            Err(e) => {
                let (i, _) = self
                    .cleaner
                    .pass
                    .as_ref()
                    .expect("a pass runs")
                    .reading_at();
                // A segment DeleteRecords removed meanwhile is no damage.
                let damaged = self.pass_span_held(i);
                return self.cleaner_abandon(&format!("read failed: {}", e.0), damaged);
            }
        };
        let pass = self.cleaner.pass.as_mut().expect("a pass runs");
        let (_, asked) = pass.read.take().expect("the pass's read");
        debug_assert_eq!(asked, bytes.len() as u64, "a read returns what it asked");
        pass.bytes_read += bytes.len() as u64;
        match self.cleaner_take_batches(&bytes) {
            Ok(Some(need)) => {
                let (i, position) = self
                    .cleaner
                    .pass
                    .as_ref()
                    .expect("a pass runs")
                    .reading_at();
                self.cleaner_read(i, position, Some(need));
            }
            Ok(None) => self.cleaner_advance(),
            Err(why) => self.cleaner_abandon(&why, true),
        }
    }

    /// Handles the whole batches at the start of `bytes` (read at the step's
    /// position). Returns the bytes to read next when not even one batch
    /// was whole (a batch larger than a read).
    fn cleaner_take_batches(&mut self, bytes: &Bytes) -> Result<Option<u64>, String> {
        let now_ms = self.now_ms;
        let pass = self.cleaner.pass.as_mut().expect("a pass runs");
        let mut at = 0usize;
        let mut pending: Option<bytes::BytesMut> = None;
        while at < bytes.len() {
            let rest = &bytes[at..];
            let header = match batch::parse_header(rest) {
                Ok(h) if h.total_bytes() <= rest.len() => h,
                Ok(h) if at == 0 => return Ok(Some(h.total_bytes() as u64)),
                Err(batch::BatchError::Truncated) if at == 0 => {
                    return Ok(Some(batch::BATCH_HEADER_BYTES as u64))
                }
                Ok(_) | Err(batch::BatchError::Truncated) => break,
                Err(e) => return Err(format!("a batch does not parse: {e}")),
            };
            let one = bytes.slice(at..at + header.total_bytes());
            batch::check_stored_batch(&one).map_err(|e| format!("a batch is damaged: {e}"))?;
            at += header.total_bytes();
            match &mut pass.step {
                Step::Map { .. } => {
                    let fits = filter::map_batch(
                        &mut pass.map,
                        &mut pass.map_walk,
                        &header,
                        &one,
                        pass.first_dirty,
                    )
                    .map_err(|e| e.0)?;
                    if !fits {
                        pass.map_full = true;
                        break;
                    }
                }
                Step::Clean { copy, i, .. } => {
                    let mut f = Filter {
                        segment_end_offset: pass.spans[*i].end_offset,
                        map: &pass.map,
                        walk: std::mem::take(&mut pass.clean_walk),
                        last_records: &pass.last_records,
                        now_ms,
                        delete_retention_ms: pass.delete_retention_ms,
                        end_offset: pass.end,
                    };
                    let decided = f.batch(&header, &one);
                    pass.clean_walk = f.walk;
                    let (verdict, kept_abort) = decided.map_err(|e| e.0)?;
                    let kept = match verdict {
                        Verdict::Keep => Some(one),
                        Verdict::Replace(b) => Some(b),
                        Verdict::Drop => None,
                    };
                    if let Some(kept) = kept {
                        let h = batch::parse_header(&kept).expect("a kept batch parses");
                        copy.push(&h);
                        let pending = pending.get_or_insert_with(Default::default);
                        pending.extend_from_slice(&kept);
                    }
                    if let Some(aborted) = kept_abort {
                        copy.keep_aborted(aborted);
                    }
                }
                _ => unreachable!("reads are made while mapping or cleaning"),
            }
        }
        let at = at as u64;
        let mut write = None;
        match &mut pass.step {
            Step::Map { .. } if pass.map_full => {
                // The map filled mid-segment: the pass cleans what it covers.
                self.cleaner_start_clean(0);
                return Ok(None);
            }
            Step::Map { position, .. } => *position += at,
            Step::Clean { position, copy, .. } => {
                *position += at;
                write = pending.map(|kept| copy.append_log(kept.freeze()));
            }
            _ => unreachable!("reads are made while mapping or cleaning"),
        }
        self.cleaner_write(write.into_iter().collect());
        Ok(None)
    }

    /// A sync completed: the swap step waiting for it goes on.
    pub(super) fn cleaner_sync_done(&mut self, io: IoId, ok: bool) {
        let Some(pass) = self.cleaner.pass.as_mut() else {
            return;
        };
        if pass.sync_from.is_none_or(|from| io < from) {
            return;
        }
        pass.sync_from = None;
        if !self.pass_partition_alive() {
            self.cleaner.pass = None;
            return;
        }
        if self.shutting_down {
            return self.cleaner_stop_pass();
        }
        let pass = self.cleaner.pass.as_mut().expect("checked");
        let (i, done) = match &pass.step {
            Step::Swap { i, done, .. } => (*i, *done),
            Step::Installed { i } => {
                let next = *i + 1;
                self.cleaner_start_clean(next);
                return self.cleaner_advance();
            }
            _ => unreachable!("only swap steps wait for syncs"),
        };
        if !ok && done != SwapStep::IndexesLive {
            return self.cleaner_abandon("a sync failed", false);
        }
        if !self.pass_span_held(i) {
            // Deleted below a new log start (its staged files with it):
            // nothing to swap in; the next pass starts from what is left.
            return self.cleaner_abandon("the segment was deleted meanwhile", false);
        }
        let pass = self.cleaner.pass.as_mut().expect("checked");
        let dir = pass.dir.clone();
        let base = pass.spans[i].base_offset;
        let stage = |from, to, files: &[SegmentFile]| clean::renames(&dir, base, files, from, to);
        let (next, ops) = match done {
            SwapStep::Written => (
                SwapStep::IndexesStaged,
                stage(FileStage::Cleaned, FileStage::Swap, &clean::INDEX_FILES),
            ),
            SwapStep::IndexesStaged => (
                SwapStep::Committed,
                stage(FileStage::Cleaned, FileStage::Swap, &[SegmentFile::Log]),
            ),
            SwapStep::Committed => (
                SwapStep::IndexesLive,
                stage(FileStage::Swap, FileStage::Live, &clean::INDEX_FILES),
            ),
            SwapStep::IndexesLive => return self.cleaner_install(i),
        };
        if let Step::Swap { done, .. } = &mut pass.step {
            *done = next;
        }
        self.cleaner_emit(ops);
    }

    /// The last step of a swap: the log's layout switches to the cleaned
    /// copy and its `.log` is renamed over the live one, in one breath.
    fn cleaner_install(&mut self, i: usize) {
        let pass = self.cleaner.pass.as_mut().expect("a pass runs");
        let Step::Swap { copy, .. } = std::mem::replace(&mut pass.step, Step::Installed { i })
        else {
            unreachable!("installing follows the swap steps")
        };
        let span = pass.spans[i];
        let key = pass.key.clone();
        let dir = pass.dir.clone();
        let partition = self.topics.get_partition_mut(&key).expect("checked alive");
        let log = partition.log_mut();
        let kept_aborted = copy.kept_aborted().to_vec();
        if !log.install_cleaned(copy, span.size_bytes) {
            // `cleaner_sync_done` checked the segment a moment ago, so only
            // a bug gets here.
            tracing::error!(topic = %key.topic, partition = key.partition, "cleaned segment {} gone before its swap", span.base_offset);
            return self.cleaner_abandon("the segment changed under the pass", false);
        }
        if let Some(txns) = partition.txns_mut() {
            txns.replace_aborted_in(span.base_offset, span.end_offset, &kept_aborted);
        }
        self.reading.forget_segment(&dir, span.base_offset);
        let ops = clean::renames(
            &dir,
            span.base_offset,
            &[SegmentFile::Log],
            FileStage::Swap,
            FileStage::Live,
        );
        self.cleaner_emit(ops);
    }
}
