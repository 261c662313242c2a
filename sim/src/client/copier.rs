//! A read-process-write copier, as an exactly-once Kafka Streams task or a
//! `sendOffsetsToTransaction` loop runs: it reads the input topic
//! read_committed from its group's committed offsets (OffsetFetch with
//! require_stable, asked again on UNSTABLE_OFFSET_COMMIT), and per batch of
//! input writes the same values to the output topic in a transaction that
//! also carries the new input offsets (AddPartitionsToTxn, Produce,
//! AddOffsetsToTxn, TxnOffsetCommit, EndTxn). It is a standalone consumer
//! (generation -1), not a group member.
//!
//! Now and then the copier process crashes: everything in memory is gone,
//! answers to the old process are ignored, and the new one takes the
//! transactional id over (fencing the old epoch, whose open transaction is
//! aborted) and resumes from the committed offsets. Some transactions are
//! aborted on purpose; their input is read again.
//!
//! It is done when every producer of the input is done and its committed
//! offsets reach the input's end (LSO = high watermark everywhere). What it
//! checks on the spot: the offsets it resumes from are those of a
//! transaction it asked to commit, never older than one answered committed.

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, FetchResponse, ListOffsetsResponse, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rand::RngExt;

use super::batches::{self, AbortedFilter};
use super::txn_requests::{self as req, is_fenced, is_retry};
use super::{backoff_ms, reset, Client, Cx};

/// Kafka's OFFSET_OUT_OF_RANGE: the fetch position is below the log start.
pub(super) const OFFSET_OUT_OF_RANGE: i16 = 1;

#[derive(Clone, Debug)]
pub struct CopierConfig {
    pub input: String,
    pub input_partitions: i32,
    pub output: String,
    pub output_partitions: i32,
    pub transactional_id: String,
    pub group: String,
    pub timeout_ms: i32,
    pub crash_p: f64,
    pub abort_p: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Init,
    Positions,
    /// ListOffsets for the earliest offset of the partitions a fetch found
    /// out of range (`reset`).
    Reset,
    Fetch,
    AddPartitions,
    Produce,
    AddOffsets,
    CommitOffsets,
    EndTxn {
        commit: bool,
    },
    Done,
}

/// What the copier process holds in memory (lost at its crash).
struct Process {
    step: Step,
    session: Option<(i64, i16)>,
    positions: Vec<i64>,
    /// The transaction's copy: (output partition, values), and the input
    /// offsets after it.
    out: Vec<(i32, Vec<Bytes>)>,
    next_positions: Vec<i64>,
    next_seq: Vec<i32>,
    asked: Option<i32>,
    /// The partitions `Step::Reset` asks about.
    resets: Vec<i32>,
    failures: u32,
    retry_at_ms: i64,
}

pub struct Copier {
    client: u32,
    cfg: CopierConfig,
    p: Process,
    /// The test's memory, not the process's: offsets of every transaction
    /// asked to commit, and the last one answered committed (an index).
    commits_asked: Vec<Vec<i64>>,
    last_answered: Option<usize>,
    crashes: u32,
    copied: u64,
}

impl Copier {
    pub fn new(client: u32, cfg: CopierConfig) -> Self {
        let p = Process::new(&cfg);
        Self {
            client,
            cfg,
            p,
            commits_asked: Vec::new(),
            last_answered: None,
            crashes: 0,
            copied: 0,
        }
    }

    fn session(&self) -> (i64, i16) {
        self.p.session.expect("initialised")
    }

    fn send(&mut self, cx: &mut Cx) {
        let id = self.cfg.transactional_id.clone();
        let cfg = &self.cfg;
        self.p.asked = match self.p.step {
            Step::Init => cx.wire.send(4, &req::init(&id, cfg.timeout_ms)),
            Step::Positions => {
                let r = req::offset_fetch(&cfg.group, &cfg.input, cfg.input_partitions);
                cx.wire.send(7, &r)
            }
            Step::Reset => {
                let (version, r) = reset::earliest_request(cx, &cfg.input, self.p.resets.clone());
                cx.wire.send(version, &r)
            }
            Step::Fetch => {
                let r = self.fetch_request(cx);
                cx.wire.send(12, &r)
            }
            Step::AddPartitions => {
                let parts: Vec<i32> = self.p.out.iter().map(|(p, _)| *p).collect();
                let r = req::add_partitions(&id, self.session(), &cfg.output, &parts);
                cx.wire.send(3, &r)
            }
            Step::Produce => {
                let (pid, epoch) = self.session();
                let mut out = Vec::new();
                for (p, values) in &self.p.out {
                    let seq = self.p.next_seq[*p as usize];
                    out.push((*p, batches::encode(values, pid, epoch, seq, true, 0, false)));
                }
                cx.wire.send(9, &req::produce(&id, &cfg.output, out))
            }
            Step::AddOffsets => {
                let r = req::add_offsets(&id, self.session(), &cfg.group);
                cx.wire.send(3, &r)
            }
            Step::CommitOffsets => {
                let r = req::txn_offset_commit(
                    &id,
                    self.session(),
                    &cfg.group,
                    &cfg.input,
                    &self.p.next_positions,
                );
                cx.wire.send(3, &r)
            }
            Step::EndTxn { commit } => cx.wire.send(4, &req::end_txn(&id, self.session(), commit)),
            Step::Done => None,
        };
    }

    fn fetch_request(&self, cx: &mut Cx) -> FetchRequest {
        let at = self
            .p
            .positions
            .iter()
            .enumerate()
            .map(|(p, &offset)| (p as i32, offset));
        read_committed_fetch(cx, &self.cfg.input, at)
    }

    /// Takes what a fetch returned; starts a transaction if there is any.
    fn on_fetch(&mut self, cx: &mut Cx, r: FetchResponse) {
        let out_of_range: Vec<i32> = r
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter(|p| p.error_code == OFFSET_OUT_OF_RANGE)
            .map(|p| p.partition_index)
            .filter(|&p| usize::try_from(p).is_ok_and(|p| p < self.p.positions.len()))
            .collect();
        if !out_of_range.is_empty() {
            // auto.offset.reset=earliest: what is below the log start is
            // gone (a power cut took a whole unsynced segment). A reset is
            // not a copy: the rest of this answer is fetched again after it.
            self.p.resets = out_of_range;
            self.p.step = Step::Reset;
            return;
        }
        let mut at_end = r.error_code == 0;
        let mut next = self.p.positions.clone();
        let mut out: Vec<(i32, Vec<Bytes>)> = Vec::new();
        for part in r.responses.iter().flat_map(|t| t.partitions.iter()) {
            let slot = part.partition_index as usize;
            if part.error_code != 0 || slot >= next.len() {
                at_end = false;
                continue;
            }
            let (hw, lso) = (part.high_watermark, part.last_stable_offset);
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
                Err(e) => return cx.violation(format!("copier: undecodable input: {e}")),
            };
            for batch in decoded {
                if batch.last_offset >= lso {
                    cx.violation(format!(
                        "copier p{slot}: batch {}..={} served at or above the LSO {lso}",
                        batch.base_offset, batch.last_offset
                    ));
                }
                let visible = filter.visible(&batch);
                if batch.last_offset < next[slot] {
                    continue;
                }
                for (offset, value) in &batch.records {
                    if visible && *offset >= next[slot] {
                        let to = slot as i32 % self.cfg.output_partitions;
                        match out.iter_mut().find(|(p, _)| *p == to) {
                            Some((_, values)) => values.push(value.clone()),
                            None => out.push((to, vec![value.clone()])),
                        }
                    }
                }
                next[slot] = batch.last_offset + 1;
            }
            if next[slot] < hw || lso < hw {
                at_end = false;
            }
        }
        if next != self.p.positions && !out.is_empty() {
            self.p.out = out;
            self.p.next_positions = next;
            self.p.step = Step::AddPartitions;
        } else if next != self.p.positions {
            // Only markers or aborted records: nothing to copy, but the
            // offsets move in a transaction all the same.
            self.p.out = Vec::new();
            self.p.next_positions = next;
            self.p.step = Step::AddOffsets;
        } else if !at_end || !cx.history.inputs_done {
            // Nothing new: do not spin on answers that come back at once.
            self.p.retry_at_ms = cx.now_ms + 20;
        } else {
            self.p.step = Step::Done;
            cx.history.copier_finished = true;
            cx.note(format!(
                "copier done: {} values copied, offsets {:?}, {} crashes",
                self.copied, self.p.positions, self.crashes
            ));
        }
    }

    fn on_positions(&mut self, cx: &mut Cx, r: kafka_protocol::messages::OffsetFetchResponse) {
        let mut fetched = vec![-1i64; self.cfg.input_partitions as usize];
        let mut code = r.error_code;
        for part in r.topics.iter().flat_map(|t| t.partitions.iter()) {
            if part.error_code != 0 {
                code = part.error_code;
            }
            if let Some(slot) = fetched.get_mut(part.partition_index as usize) {
                *slot = part.committed_offset;
            }
        }
        if code != 0 {
            if !is_retry(code) && code != req::UNSTABLE_OFFSET_COMMIT {
                cx.violation(format!("copier OffsetFetch: unexpected error {code}"));
            }
            return self.retry(cx, "OffsetFetch", code);
        }
        let known = fetched.iter().all(|&o| o < 0) && self.last_answered.is_none()
            || self
                .commits_asked
                .iter()
                .enumerate()
                .any(|(i, c)| *c == fetched && self.last_answered.is_none_or(|a| i >= a));
        if !known {
            cx.violation(format!(
                "copier resumes from offsets {fetched:?}: not those of a transaction it asked to commit at or after the last one answered committed ({:?})",
                self.last_answered.map(|i| &self.commits_asked[i])
            ));
        }
        cx.note(format!("copier resumes from {fetched:?}"));
        self.p.positions = fetched.iter().map(|&o| o.max(0)).collect();
        self.p.step = Step::Fetch;
    }

    /// The earliest offsets of the partitions a fetch found out of range:
    /// positions below them move up to them.
    fn on_earliest(&mut self, cx: &mut Cx, r: &ListOffsetsResponse) {
        let offsets = match reset::earliest_offsets(r) {
            Ok(offsets) => offsets,
            Err(c) if is_retry(c) => return self.retry(cx, "ListOffsets", c),
            Err(c) => return cx.violation(format!("copier ListOffsets: unexpected error {c}")),
        };
        for (p, start) in offsets {
            let Some(position) = usize::try_from(p)
                .ok()
                .filter(|_| self.p.resets.contains(&p))
                .and_then(|slot| self.p.positions.get_mut(slot))
            else {
                cx.violation(format!(
                    "copier: ListOffsets answer names p{p}, never asked"
                ));
                continue;
            };
            if *position < start {
                cx.note(format!(
                    "copier p{p}: {position} out of range; from the earliest offset {start}"
                ));
                *position = start;
            }
        }
        self.p.resets.clear();
        self.p.failures = 0;
        self.p.step = Step::Fetch;
    }

    /// The answer to a transactional step: move on, retry, or start over.
    fn on_step(&mut self, cx: &mut Cx, what: &str, code: i16, next: Step) {
        match code {
            0 => {
                self.p.failures = 0;
                self.p.step = next;
            }
            c if is_retry(c) => self.retry(cx, what, c),
            c if is_fenced(c) || c == req::INVALID_TXN_STATE => {
                // The timeout took the transaction: a new process resumes.
                cx.note(format!("copier {what}: fenced ({c}); restarts"));
                self.restart(cx);
            }
            c => cx.violation(format!("copier {what}: unexpected error {c}")),
        }
    }

    fn on_end_txn(&mut self, cx: &mut Cx, commit: bool, code: i16) {
        if code != 0 {
            return self.on_step(cx, "EndTxn", code, Step::Fetch);
        }
        if commit {
            self.last_answered = self.commits_asked.len().checked_sub(1);
            self.copied += self.p.out.iter().map(|(_, v)| v.len() as u64).sum::<u64>();
            self.p.positions = self.p.next_positions.clone();
            for (p, values) in &self.p.out {
                self.p.next_seq[*p as usize] += values.len() as i32;
            }
        } else {
            // The input of an aborted transaction is read again; its
            // sequences were spent in the log, so they stay spent.
            for (p, values) in &self.p.out {
                self.p.next_seq[*p as usize] += values.len() as i32;
            }
        }
        self.p.out.clear();
        self.p.failures = 0;
        self.p.step = Step::Fetch;
    }

    fn retry(&mut self, cx: &mut Cx, what: &str, code: i16) {
        self.p.failures += 1;
        self.p.retry_at_ms = cx.now_ms + backoff_ms(cx.rng, self.p.failures.min(3));
        cx.note(format!("copier {what}: error {code}; again"));
    }

    /// The process dies and a new one starts: nothing in memory survives.
    fn restart(&mut self, cx: &mut Cx) {
        self.crashes += 1;
        self.p = Process::new(&self.cfg);
        self.p.retry_at_ms = cx.now_ms + cx.rng.random_range(10..=300);
        cx.wake_in(self.p.retry_at_ms - cx.now_ms);
    }
}

impl Process {
    fn new(cfg: &CopierConfig) -> Self {
        Self {
            step: Step::Init,
            session: None,
            positions: vec![0; cfg.input_partitions as usize],
            out: Vec::new(),
            next_positions: Vec::new(),
            next_seq: vec![0; cfg.output_partitions as usize],
            asked: None,
            resets: Vec::new(),
            failures: 0,
            retry_at_ms: 0,
        }
    }
}

impl Client for Copier {
    fn name(&self) -> String {
        format!(
            "c{} copier {} -> {} ({}, group {})",
            self.client, self.cfg.input, self.cfg.output, self.cfg.transactional_id, self.cfg.group
        )
    }

    fn on_wake(&mut self, cx: &mut Cx) {
        if self.p.step == Step::Done || self.p.asked.is_some() {
            return;
        }
        if cx.wire.conn().is_none() {
            return cx.connect();
        }
        if cx.now_ms < self.p.retry_at_ms {
            return cx.wake_in(self.p.retry_at_ms - cx.now_ms);
        }
        self.send(cx);
    }

    fn on_response(&mut self, cx: &mut Cx, corr: i32, response: ResponseKind) {
        if self.p.asked != Some(corr) {
            return; // an answer to the process that crashed
        }
        self.p.asked = None;
        let step = self.p.step;
        match (step, response) {
            (Step::Init, ResponseKind::InitProducerId(r)) => {
                if r.error_code == 0 {
                    self.p.session = Some((r.producer_id.0, r.producer_epoch));
                }
                self.on_step(cx, "InitProducerId", r.error_code, Step::Positions);
            }
            (Step::Positions, ResponseKind::OffsetFetch(r)) => self.on_positions(cx, r),
            (Step::Reset, ResponseKind::ListOffsets(r)) => self.on_earliest(cx, &r),
            (Step::Fetch, ResponseKind::Fetch(r)) => self.on_fetch(cx, r),
            (Step::AddPartitions, ResponseKind::AddPartitionsToTxn(r)) => {
                let code = req::add_partitions_error(&r);
                self.on_step(cx, "AddPartitionsToTxn", code, Step::Produce);
            }
            (Step::Produce, ResponseKind::Produce(r)) => {
                let answers = req::produce_answers(&r);
                let code = answers.iter().map(|a| a.1).find(|&c| c != 0).unwrap_or(0);
                self.on_step(cx, "Produce", code, Step::AddOffsets);
            }
            (Step::AddOffsets, ResponseKind::AddOffsetsToTxn(r)) => {
                self.on_step(cx, "AddOffsetsToTxn", r.error_code, Step::CommitOffsets)
            }
            (Step::CommitOffsets, ResponseKind::TxnOffsetCommit(r)) => {
                let commit = !cx.rng.random_bool(self.cfg.abort_p);
                if commit && req::txn_offset_commit_error(&r) == 0 {
                    self.commits_asked.push(self.p.next_positions.clone());
                }
                let code = req::txn_offset_commit_error(&r);
                self.on_step(cx, "TxnOffsetCommit", code, Step::EndTxn { commit });
            }
            (Step::EndTxn { commit }, ResponseKind::EndTxn(r)) => {
                self.on_end_txn(cx, commit, r.error_code)
            }
            (step, other) => panic!("copier in {step:?} got {other:?}"),
        }
        if self.p.step != Step::Done && cx.rng.random_bool(self.cfg.crash_p) {
            cx.note(format!("copier process crashes in {:?}", self.p.step));
            return self.restart(cx);
        }
        self.on_wake(cx);
    }

    fn on_disconnect(&mut self, cx: &mut Cx) {
        self.p.asked = None;
        self.p.failures += 1;
        let delay_ms = backoff_ms(cx.rng, self.p.failures.min(3));
        cx.wake_in(delay_ms);
    }

    fn is_done(&self) -> bool {
        self.p.step == Step::Done
    }

    fn status(&self) -> String {
        format!(
            "{}: {:?}, positions {:?}, {} copied, {} crashes",
            self.name(),
            self.p.step,
            self.p.positions,
            self.copied,
            self.crashes
        )
    }
}

/// A copier's read_committed fetch of `topic` at the given (partition,
/// offset) positions; shared by the standalone and the group copier.
pub(super) fn read_committed_fetch(
    cx: &mut Cx,
    topic: &str,
    at: impl IntoIterator<Item = (i32, i64)>,
) -> FetchRequest {
    let partitions = at
        .into_iter()
        .map(|(p, offset)| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(2048)
        })
        .collect();
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(cx.rng.random_range(50..=300))
        .with_min_bytes(1)
        .with_max_bytes(64 * 1024)
        .with_isolation_level(1)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(partitions)])
}
