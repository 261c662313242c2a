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
//!    `{base}.log.cleaned`, then its index files (`DiskOp::AppendCleaned`),
//!    and then swaps it in: sync; the index files renamed to `.swap`;
//!    sync; the `.log` renamed to `.swap` (the commit point: start-up
//!    finishes a swap whose `.log.swap` it finds, and discards any other
//!    staged file); sync; the index files renamed over the live ones;
//!    sync; the log's layout switched in memory and the `.log` renamed over
//!    the live one in the same breath (a response planned before it reads
//!    the old file, one planned after reads the new: see
//!    `Output::ResponseParts`); sync.
//!
//! The reading, mapping and filtering of a segment are CPU work in
//! proportion to its records, done beside the core: the pass hands each
//! segment to the driver as an `Output::Clean` job (`log::clean::work`),
//! one job in flight at a time, and goes on when `Input::CleanerDone`
//! brings back the filled map, or the cleaned copy's index entries (its
//! `.log.cleaned` written, unsynced). Everything else, the choice of the
//! log, the rules and each step of the swap, stays here.
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

use std::collections::BTreeSet;
use std::sync::Arc;

use super::Core;
use crate::boundary::Output;
use crate::checkpoint::Due;
use crate::io::{DiskOp, FileStage, IoId, PartitionDir, SegmentFile};
use crate::limits;
use crate::log::clean::filter::{OffsetMap, TxnWalk};
use crate::log::clean::work::{
    CleanRules, CleanerDone, CleanerError, CleanerOutcome, CleanerTask, CleanerWork,
};
use crate::log::clean::{self, CleanedSegment, SegmentSpan};
use crate::topics::PartitionKey;

pub use crate::partition::CleanerProgress;

/// The cleaner's state in the broker.
#[derive(Default)]
pub(crate) struct Cleaner {
    pass: Option<Pass>,
    /// The `Output::Clean` job in flight. It may outlive its pass (a
    /// deleted topic ends the pass at once): no pass starts, and the broker
    /// does not stop, until it is back, so two jobs never write at once and
    /// none writes after a clean stop.
    work: Option<IoId>,
    next_check_ms: i64,
    /// Deleted partitions that awaited their recovery checkpoint (each
    /// partition's own flag is `Cleaning::awaiting_checkpoint`): the write
    /// in flight still wakes the cleaner when it is stored, as it would
    /// have had the partition stayed.
    orphaned_checkpoints: BTreeSet<PartitionKey>,
}

struct Pass {
    key: PartitionKey,
    dir: PartitionDir,
    /// The first dirty offset and the first offset the pass may not touch.
    first_dirty: i64,
    end: i64,
    spans: Vec<SegmentSpan>,
    /// Shared with the Clean jobs; handed to a Map job and back (while one
    /// runs, the pass holds an empty stand-in).
    map: Arc<OffsetMap>,
    map_walk: TxnWalk,
    clean_walk: TxnWalk,
    rules: Arc<CleanRules>,
    step: Step,
    /// Waiting for a sync whose io is at least this one.
    sync_from: Option<IoId>,
    bytes_read: u64,
    bytes_written: u64,
    /// Bytes of the dirty range when the pass began, and when it began.
    dirty_bytes: u64,
    started_ms: i64,
}

enum Step {
    /// Mapping span `i`'s keys (a job, then its completion).
    Map { i: usize },
    /// Writing span `i`'s cleaned copy (a job, then its completion).
    Clean { i: usize },
    /// Waiting for the sync after one step of the swap of span `i`.
    Swap {
        i: usize,
        copy: Box<CleanedSegment>,
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

impl Cleaner {
    /// The partition a pass is rewriting (retention waits).
    pub fn cleaning_key(&self) -> Option<PartitionKey> {
        self.pass.as_ref().map(|p| p.key.clone())
    }

    /// Whether an `Output::Clean` job is in flight (a stop waits for it).
    pub fn working(&self) -> bool {
        self.work.is_some()
    }

    pub fn next_deadline_ms(&self) -> Option<i64> {
        (self.pass.is_none() && self.work.is_none()).then_some(self.next_check_ms)
    }
}

impl Core {
    /// What the cleaner has done for a partition (`None`: no pass yet).
    pub fn cleaner_progress(&self, topic: &str, partition: i32) -> Option<CleanerProgress> {
        let key = self.topics.get(topic)?.key(partition);
        let partition = self.topics.get_partition(&key)?;
        partition.cleaning().progress.clone()
    }

    /// The first offset the cleaner has not cleaned (0: none cleaned yet),
    /// which recovery checkpoints carry across restarts.
    pub(super) fn cleaner_first_dirty_offset(&self, key: &PartitionKey) -> i64 {
        self.topics
            .get_partition(key)
            .map_or(0, |p| p.cleaning().first_dirty_offset())
    }

    /// A partition recovered with the cleaner's first dirty offset its
    /// checkpoint held.
    pub(super) fn cleaner_booted(&mut self, key: PartitionKey, first_dirty_offset: i64) {
        if first_dirty_offset > 0 {
            let partition = self.topics.get_partition_mut(&key);
            let cleaning = partition.expect("a booted partition").cleaning_mut();
            cleaning.progress.get_or_insert_default().first_dirty_offset = first_dirty_offset;
        }
    }

    /// A topic is deleted: its partitions' checkpoints the cleaner awaits
    /// still wake it when stored.
    pub(super) fn cleaner_forget_topic(&mut self, topic: &crate::topics::Topic) {
        for (p, partition) in (0..).zip(topic.partitions.iter()) {
            if partition.cleaning().awaiting_checkpoint {
                self.cleaner.orphaned_checkpoints.insert(topic.key(p));
            }
        }
    }

    /// A recovery checkpoint of `key` was stored: if it held the cleaner
    /// back, the cleaner looks again now rather than after its backoff.
    pub(super) fn cleaner_on_checkpoint(&mut self, key: &PartitionKey) {
        let awaited = match self.topics.get_partition_mut(key) {
            Some(partition) => std::mem::take(&mut partition.cleaning_mut().awaiting_checkpoint),
            None => self.cleaner.orphaned_checkpoints.remove(key),
        };
        if awaited {
            self.cleaner.next_check_ms = self.cleaner.next_check_ms.min(self.now_ms);
        }
    }

    /// Timer: starts a pass on the dirtiest compacted partition, if any is
    /// dirty enough and no pass runs.
    pub(super) fn cleaner_tick(&mut self) {
        if self.cleaner.pass.is_some()
            || self.cleaner.work.is_some()
            || self.now_ms < self.cleaner.next_check_ms
        {
            return;
        }
        self.cleaner.next_check_ms = self.now_ms + self.config.cleaner_backoff_ms.max(1);
        if self.shutting_down {
            return;
        }
        let (chosen, held_back) = self.filthiest_log();
        if !held_back.is_empty() {
            for key in &held_back {
                let partition = self.topics.get_partition_mut(key);
                let cleaning = partition.expect("held back from the topics").cleaning_mut();
                cleaning.awaiting_checkpoint = true;
            }
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
            map: Arc::new(OffsetMap::new(limits::CLEANER_MAP_ENTRIES_MAX)),
            map_walk: TxnWalk::new(aborted.clone()),
            clean_walk: TxnWalk::new(aborted),
            rules: Arc::new(CleanRules {
                last_records,
                delete_retention_ms,
                end_offset: dirtiness.end_offset,
            }),
            step: Step::Map { i: first_map },
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
            let may_clean = |p: &crate::partition::Partition| p.cleaning().may_clean(self.now_ms);
            if !config.compact
                || !self.topics.get_partition(&key).is_some_and(may_clean)
                || self.is_offline(&key)
            {
                continue;
            }
            let Ok(view) = self.partition_view(&key.topic, key.partition) else {
                continue;
            };
            let first_dirty = self.cleaner_first_dirty_offset(&key);
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

    /// After a completion the pass waited for (a job, a sync): whether it
    /// goes on. Its partition gone (the topic deleted) ends it; a stopping
    /// broker stops it (`cleaner_stop_pass`).
    fn cleaner_pass_goes_on(&mut self) -> bool {
        if !self.pass_partition_alive() {
            self.cleaner.pass = None;
            return false;
        }
        if self.shutting_down {
            self.cleaner_stop_pass();
            return false;
        }
        true
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

    /// Moves the pass on: hands the step's job to the driver, unless it
    /// waits for one or for a sync.
    fn cleaner_advance(&mut self) {
        if self.cleaner.pass.is_none() {
            return;
        }
        if !self.pass_partition_alive() {
            self.cleaner.pass = None;
            return;
        }
        let pass = self.cleaner.pass.as_ref().expect("checked");
        if self.cleaner.work.is_some() || pass.sync_from.is_some() {
            return;
        }
        if self.shutting_down {
            return self.cleaner_stop_pass();
        }
        match pass.step {
            Step::Map { i } | Step::Clean { i } if !self.pass_span_held(i) => {
                // DeleteRecords removed it meanwhile: the next pass starts
                // from what is left.
                self.cleaner_abandon("the segment was deleted meanwhile", false)
            }
            Step::Map { i } | Step::Clean { i } => self.cleaner_issue_work(i),
            Step::Swap { .. } | Step::Installed { .. } => {
                unreachable!("a swap step always waits for its sync")
            }
        }
    }

    /// Hands span `i` to the driver: its keys to map, or its cleaned copy
    /// to write, as the step says.
    fn cleaner_issue_work(&mut self, i: usize) {
        let now_ms = self.now_ms;
        let pass = self.cleaner.pass.as_mut().expect("a pass runs");
        let span = pass.spans[i];
        let task = match pass.step {
            Step::Map { .. } => CleanerTask::Map {
                // Handed over, not shared: the job fills it without a copy.
                map: std::mem::replace(&mut pass.map, Arc::new(OffsetMap::new(0))),
                walk: std::mem::take(&mut pass.map_walk),
                from: pass.first_dirty,
            },
            Step::Clean { .. } => CleanerTask::Clean {
                map: Arc::clone(&pass.map),
                walk: std::mem::take(&mut pass.clean_walk),
                rules: Arc::clone(&pass.rules),
                now_ms,
                segment_end_offset: span.end_offset,
            },
            Step::Swap { .. } | Step::Installed { .. } => {
                unreachable!("jobs are issued while mapping or cleaning")
            }
        };
        let work = CleanerWork {
            dir: pass.dir.clone(),
            segment_base: span.base_offset,
            size_bytes: span.size_bytes,
            task,
        };
        let io = self.outbox.take_io();
        self.cleaner.work = Some(io);
        // Not through `emit_disk`: the job asks for no sync of its own; the
        // copy it writes is synced by the swap's first step, or discarded.
        self.outbox.push(Output::Clean { io, work });
    }

    /// A job came back: the map goes on to the next span or the pass to
    /// cleaning; a cleaned copy goes on to its swap.
    pub(crate) fn cleaner_work_done(&mut self, io: IoId, outcome: CleanerOutcome) {
        assert_eq!(
            self.cleaner.work,
            Some(io),
            "CleanerDone for a job the cleaner did not issue"
        );
        self.cleaner.work = None;
        if self.cleaner.pass.is_none() {
            // Its pass ended meanwhile (the topic was deleted): look again.
            self.cleaner.next_check_ms = self.cleaner.next_check_ms.min(self.now_ms);
            return;
        }
        if !self.cleaner_pass_goes_on() {
            return;
        }
        let pass = self.cleaner.pass.as_mut().expect("checked");
        pass.bytes_read += outcome.bytes_read;
        let i = match pass.step {
            Step::Map { i } | Step::Clean { i } => i,
            Step::Swap { .. } | Step::Installed { .. } => {
                unreachable!("jobs are issued while mapping or cleaning")
            }
        };
        match outcome.result {
            Err(CleanerError::Read(e)) => {
                // A segment DeleteRecords removed meanwhile is no damage.
                let damaged = self.pass_span_held(i);
                self.cleaner_abandon(&format!("read failed: {}", e.0), damaged)
            }
            Err(CleanerError::Write(e)) => {
                self.cleaner_abandon(&format!("writing the cleaned copy failed: {}", e.0), false)
            }
            Err(CleanerError::Damaged(why)) => self.cleaner_abandon(&why, true),
            Ok(CleanerDone::Mapped { map, walk, full }) => {
                pass.map = map;
                pass.map_walk = walk;
                if full {
                    // The map filled mid-segment: the pass cleans what it covers.
                    self.cleaner_start_clean(0);
                } else {
                    let end = pass.spans[i].end_offset;
                    Arc::get_mut(&mut pass.map)
                        .expect("a Map job hands the map back unshared")
                        .covers_up_to(end - 1);
                    if i + 1 < pass.spans.len() {
                        pass.step = Step::Map { i: i + 1 };
                    } else {
                        self.cleaner_start_clean(0);
                    }
                }
                self.cleaner_advance();
            }
            Ok(CleanerDone::Cleaned {
                mut copy,
                walk,
                bytes_written,
            }) => {
                pass.clean_walk = walk;
                pass.bytes_written += bytes_written;
                let ops = copy.finish();
                pass.step = Step::Swap {
                    i,
                    copy,
                    done: SwapStep::Written,
                };
                self.cleaner_emit(ops);
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
        pass.step = Step::Clean { i };
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
        // A deleted partition's pass leaves nothing to remember.
        if let Some(partition) = self.topics.get_partition_mut(&pass.key) {
            let progress = partition.cleaning_mut().progress.get_or_insert_default();
            progress.first_dirty_offset = progress.first_dirty_offset.max(cleaned_up_to);
            progress.passes += 1;
            progress.last_cleaned_ms = now_ms;
            progress.bytes_read += pass.bytes_read;
            progress.bytes_written += pass.bytes_written;
            progress.last_pass_ms = elapsed_ms;
            progress.last_pass_dirty_bytes = pass.dirty_bytes;
        }
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
        // Its staged files are discarded now: no job may write them after.
        assert!(self.cleaner.work.is_none(), "a pass abandoned mid-job");
        let pass = self.cleaner.pass.take().expect("a pass runs");
        tracing::warn!(topic = %pass.key.topic, partition = pass.key.partition, "cleaning abandoned: {why}");
        let base = match &pass.step {
            Step::Clean { i } => Some(pass.spans[*i].base_offset),
            Step::Swap { copy, .. } => Some(copy.base_offset()),
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
        // A deleted partition's pass leaves nothing to remember.
        if let Some(partition) = self.topics.get_partition_mut(&pass.key) {
            let cleaning = partition.cleaning_mut();
            cleaning.backoff_until_ms = Some(until);
            cleaning.uncleanable |= uncleanable;
        }
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

    /// A sync completed: the swap step waiting for it goes on.
    pub(super) fn cleaner_sync_done(&mut self, io: IoId, ok: bool) {
        let Some(pass) = self.cleaner.pass.as_mut() else {
            return;
        };
        if pass.sync_from.is_none_or(|from| io < from) {
            return;
        }
        pass.sync_from = None;
        if !self.cleaner_pass_goes_on() {
            return;
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
        if !log.install_cleaned(*copy, span.size_bytes) {
            // `cleaner_sync_done` checked the segment a moment ago, so only
            // a bug gets here.
            tracing::error!(topic = %key.topic, partition = key.partition, "cleaned segment {} gone before its swap", span.base_offset);
            return self.cleaner_abandon("the segment changed under the pass", false);
        }
        if let Some(txns) = partition.txns_mut() {
            txns.replace_aborted_in(span.base_offset, span.end_offset, &kept_aborted);
        }
        self.reads.forget_segment(&dir, span.base_offset);
        // What parked requests read of the old file is the top's to drop.
        self.replaced_segments.push((dir.clone(), span.base_offset));
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
