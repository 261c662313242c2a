//! The group copier's copying: positions from the group's committed offsets
//! (OffsetFetch require_stable, asked again while a transaction of the
//! previous owner holds them: UNSTABLE_OFFSET_COMMIT), read_committed
//! fetches of its assigned partitions, the transaction (AddPartitionsToTxn,
//! Produce, AddOffsetsToTxn, TxnOffsetCommit v3 with the member's
//! generation, EndTxn), and the check that the whole group is done: every
//! partition's committed offset at the input's end (LSO = high watermark).
//!
//! What it checks on the spot: the offsets it resumes from are never below
//! one that any member's EndTxn commit answered before it asked.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::{
    FetchRequest, FetchResponse, ListOffsetsResponse, OffsetFetchResponse, ProduceRequest,
};
use rand::RngExt;

use super::batches::{self, AbortedFilter};
use super::group_copier::{GroupCopier, Step};
use super::group_requests as greq;
use super::txn_requests::{self as req, is_fenced, is_retry};
use super::{reset, Cx};
use crate::history::GroupCommit;

/// Input records copied per transaction, at most: small transactions, so
/// that many of them are open when a rebalance comes.
const RECORDS_PER_TXN_MAX: usize = 8;
/// A transaction's processing time, between its Produce and its offsets:
/// what a real job spends on a batch, and a window for rebalances.
pub(super) const PROCESS_MS: std::ops::RangeInclusive<i64> = 20..=400;

/// A fetch answer, per partition: (high watermark, LSO, error code).
type Ends = BTreeMap<i32, (i64, i64, i16)>;

impl GroupCopier {
    pub(super) fn fetch_request(&self, cx: &mut Cx, at: &BTreeMap<i32, i64>) -> FetchRequest {
        let at = at.iter().map(|(&p, &offset)| (p, offset));
        super::copier::read_committed_fetch(cx, &self.cfg.input, at)
    }

    pub(super) fn produce_request(&self) -> ProduceRequest {
        let (pid, epoch) = self.session();
        let mut out = Vec::new();
        for (p, values) in &self.p.out {
            let seq = self.p.next_seq[*p as usize];
            out.push((*p, batches::encode(values, pid, epoch, seq, true, 0, false)));
        }
        req::produce(&self.cfg.transactional_id, &self.cfg.output, out)
    }

    pub(super) fn on_positions(&mut self, cx: &mut Cx, r: &OffsetFetchResponse) {
        let fetched = match greq::fetched_offsets(r) {
            Ok(f) => f,
            Err(c) if is_retry(c) || c == req::UNSTABLE_OFFSET_COMMIT => {
                return self.retry(cx, "OffsetFetch", c)
            }
            Err(c) if greq::must_rejoin(c) => return self.ask_rejoin(cx, "OffsetFetch", c),
            Err(c) => {
                return cx.violation(format!("group copier OffsetFetch: unexpected error {c}"))
            }
        };
        let sent_ms = self.p.positions_sent_ms;
        for &(p, offset) in &fetched {
            let answered = cx
                .history
                .group_commits
                .iter()
                .filter(|c| c.partition == p && c.at_ms <= sent_ms)
                .map(|c| c.offset)
                .max();
            if let Some(a) = answered.filter(|&a| offset < a) {
                cx.violation(format!(
                    "group copier resumes p{p} from {offset}, below {a}, whose commit was answered before it asked (t={sent_ms}ms)"
                ));
            }
        }
        let expected: Vec<i32> = fetched.iter().map(|f| f.0).collect();
        if expected != self.p.assigned {
            return cx.violation(format!(
                "OffsetFetch for {:?} answered {expected:?}",
                self.p.assigned
            ));
        }
        cx.note(format!("resumes from {fetched:?}"));
        self.p.positions = fetched.iter().map(|&(p, o)| (p, o.max(0))).collect();
        self.p.failures = 0;
        self.p.step = Step::Fetch;
    }

    /// Takes what a fetch returned; starts a transaction if there is any.
    pub(super) fn on_fetch(&mut self, cx: &mut Cx, r: FetchResponse) {
        let out_of_range: Vec<i32> = r
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter(|p| p.error_code == super::copier::OFFSET_OUT_OF_RANGE)
            .map(|p| p.partition_index)
            .filter(|p| self.p.positions.contains_key(p))
            .collect();
        if !out_of_range.is_empty() {
            // auto.offset.reset=earliest: what is below the log start is
            // gone (a power cut took a whole unsynced segment). The rest of
            // this answer is fetched again after the reset.
            self.p.resets = out_of_range;
            self.p.step = Step::Reset;
            return;
        }
        let mut next = self.p.positions.clone();
        let mut out: Vec<(i32, Vec<Bytes>)> = Vec::new();
        let Some(ends) = self.read_fetch(cx, &r, &mut next, &mut out) else {
            return;
        };
        let at_end = r.error_code == 0
            && next.iter().all(|(p, &n)| {
                ends.get(p)
                    .is_some_and(|&(hw, lso, code)| code == 0 && n >= hw && lso >= hw)
            });
        if next != self.p.positions {
            // A transaction even when only markers or aborted records were
            // passed over: the offsets move all the same.
            self.p.step = if out.is_empty() {
                Step::AddOffsets
            } else {
                Step::AddPartitions
            };
            self.p.out = out;
            self.p.next_positions = next;
        } else if at_end && cx.history.inputs_done {
            self.p.step = Step::CheckOffsets;
        } else {
            // Nothing new: do not spin on answers that come back at once.
            self.pause(cx, 20);
        }
    }

    /// The earliest offsets of the partitions a fetch found out of range:
    /// positions below them move up, and the move is committed in a
    /// transaction of its own, as a copy's offsets are.
    pub(super) fn on_earliest(&mut self, cx: &mut Cx, r: &ListOffsetsResponse) {
        let offsets = match reset::earliest_offsets(r) {
            Ok(offsets) => offsets,
            Err(c) if is_retry(c) => return self.retry(cx, "ListOffsets", c),
            Err(c) => {
                return cx.violation(format!("group copier ListOffsets: unexpected error {c}"))
            }
        };
        let mut next = self.p.positions.clone();
        for (p, start) in offsets {
            let Some(position) = next.get_mut(&p).filter(|_| self.p.resets.contains(&p)) else {
                cx.violation(format!(
                    "group copier: ListOffsets answer names p{p}, never asked"
                ));
                continue;
            };
            if *position < start {
                cx.note(format!(
                    "p{p}: {position} out of range; from the earliest offset {start}"
                ));
                *position = start;
            }
        }
        self.p.resets.clear();
        self.p.failures = 0;
        if next != self.p.positions {
            self.p.out = Vec::new();
            self.p.next_positions = next;
            self.p.step = Step::AddOffsets;
        } else {
            self.p.step = Step::Fetch;
        }
    }

    /// Reads the records past `next` into `out` (per output partition),
    /// moving `next` past every batch; None after a violation.
    fn read_fetch(
        &self,
        cx: &mut Cx,
        r: &FetchResponse,
        next: &mut BTreeMap<i32, i64>,
        out: &mut Vec<(i32, Vec<Bytes>)>,
    ) -> Option<Ends> {
        let mut ends = Ends::new();
        let taken = &mut 0;
        'partitions: for part in r.responses.iter().flat_map(|t| t.partitions.iter()) {
            let p = part.partition_index;
            let (hw, lso) = (part.high_watermark, part.last_stable_offset);
            ends.insert(p, (hw, lso, part.error_code));
            let Some(position) = next.get_mut(&p) else {
                continue;
            };
            if part.error_code != 0 {
                continue;
            }
            let aborted = part
                .aborted_transactions
                .iter()
                .flatten()
                .map(|a| (a.first_offset, a.producer_id.0))
                .collect();
            let mut filter = AbortedFilter::new(aborted);
            let records = part.records.clone().unwrap_or_default();
            let decoded = match batches::decode(records) {
                Ok(d) => d,
                Err(e) => {
                    cx.violation(format!("group copier: undecodable input: {e}"));
                    return None;
                }
            };
            for batch in decoded {
                if batch.last_offset >= lso {
                    cx.violation(format!(
                        "group copier p{p}: batch {}..={} served at or above the LSO {lso}",
                        batch.base_offset, batch.last_offset
                    ));
                }
                let visible = filter.visible(&batch);
                if batch.last_offset < *position {
                    continue;
                }
                let to = p % self.cfg.partitions;
                for (offset, value) in &batch.records {
                    if !visible || *offset < *position {
                        continue;
                    }
                    if *taken >= RECORDS_PER_TXN_MAX {
                        // Full: the rest of this batch is the next one's.
                        break 'partitions;
                    }
                    *taken += 1;
                    match out.iter_mut().find(|(q, _)| *q == to) {
                        Some((_, values)) => values.push(value.clone()),
                        None => out.push((to, vec![value.clone()])),
                    }
                    *position = offset + 1;
                }
                *position = batch.last_offset + 1;
            }
        }
        Some(ends)
    }

    /// The answer to a transactional step: move on, retry, or die.
    pub(super) fn on_step(&mut self, cx: &mut Cx, what: &str, code: i16, next: Step) {
        match code {
            0 => {
                self.p.failures = 0;
                self.p.step = next;
            }
            c if is_retry(c) => self.retry(cx, what, c),
            c if is_fenced(c) || c == req::INVALID_TXN_STATE => {
                // The timeout took the transaction (and bumped the epoch):
                // the producer is dead, and with it this process.
                cx.note(format!("{what}: fenced ({c}); the process restarts"));
                self.crash(cx);
            }
            c => cx.violation(format!("group copier {what}: unexpected error {c}")),
        }
    }

    pub(super) fn on_commit_offsets(&mut self, cx: &mut Cx, code: i16) {
        if greq::must_rejoin(code) {
            return self.ask_rejoin(cx, "TxnOffsetCommit", code);
        }
        let commit = !cx.rng.random_bool(self.cfg.abort_p);
        self.on_step(cx, "TxnOffsetCommit", code, Step::EndTxn { commit });
    }

    pub(super) fn on_end_txn(&mut self, cx: &mut Cx, commit: bool, code: i16) {
        if code != 0 {
            return self.on_step(cx, "EndTxn", code, Step::Fetch);
        }
        if commit {
            for (&partition, &offset) in &self.p.next_positions {
                cx.history.group_commits.push(GroupCommit {
                    at_ms: cx.elapsed_ms,
                    partition,
                    offset,
                });
            }
            self.copied += self.p.out.iter().map(|(_, v)| v.len() as u64).sum::<u64>();
            self.p.positions = std::mem::take(&mut self.p.next_positions);
        }
        // An aborted transaction's input is read again.
        self.drop_txn();
        self.p.failures = 0;
        self.p.step = Step::Fetch;
    }

    pub(super) fn on_check_offsets(&mut self, cx: &mut Cx, r: &OffsetFetchResponse) {
        match greq::fetched_offsets(r) {
            Ok(offsets) => {
                self.p.check_offsets = offsets.iter().map(|&(p, o)| (p, o.max(0))).collect();
                self.p.failures = 0;
                self.p.step = Step::CheckEnd;
            }
            Err(c) if is_retry(c) || c == req::UNSTABLE_OFFSET_COMMIT => {
                self.retry(cx, "OffsetFetch (done check)", c)
            }
            Err(c) => cx.violation(format!("OffsetFetch (done check): unexpected error {c}")),
        }
    }

    /// Done when every partition's committed offset is its high watermark
    /// and nothing is open (LSO = high watermark): the group copied all.
    pub(super) fn on_check_end(&mut self, cx: &mut Cx, r: FetchResponse) {
        let mut at: BTreeMap<i32, i64> = self.p.check_offsets.iter().copied().collect();
        let Some(ends) = self.read_fetch(cx, &r, &mut at, &mut Vec::new()) else {
            return;
        };
        let done = r.error_code == 0
            && (0..self.cfg.partitions).all(|p| {
                let committed = self.p.check_offsets.iter().find(|c| c.0 == p).map(|c| c.1);
                ends.get(&p)
                    .is_some_and(|&(hw, lso, code)| code == 0 && lso == hw && committed == Some(hw))
            });
        if !done {
            self.p.step = if self.p.assigned.is_empty() {
                Step::Idle
            } else {
                Step::Fetch
            };
            return self.pause(cx, 100);
        }
        cx.note(format!(
            "the group's committed offsets are the input's end: {:?}",
            self.p.check_offsets
        ));
        cx.history.group_copy_finished = true;
        cx.history.group_final_offsets = self.p.check_offsets.clone();
        self.p.step = Step::Leave;
    }
}
