//! A read-process-write copier that is one member of a consumer group, as
//! an exactly-once Kafka Streams app or a KIP-447 `sendOffsetsToTransaction`
//! loop with a subscribed KafkaConsumer runs. Several instances share the
//! group; each owns the input partitions the leader's range assignment
//! gave it, and copies them in transactions whose TxnOffsetCommit (v3)
//! carries its generation and member id, so that the group refuses the
//! offsets of a member it no longer counts (KIP-447's zombie fencing).
//!
//! Split by concern: this file holds the process, the request it sends
//! and the dispatch of answers; `group_member.rs` the membership (join,
//! sync, heartbeats, rejoin, leave, crash); `group_copy.rs` the copying
//! (positions, fetch, the transaction, the check that the group is done).
//!
//! A member heartbeats on the simulated clock between its other requests
//! (one in flight at a time, as on the coordinator connection). When a
//! heartbeat or a commit answers REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION
//! or UNKNOWN_MEMBER_ID, it aborts its open transaction, rejoins, and
//! resumes from the committed offsets (OffsetFetch require_stable) of its
//! new assignment. Now and then its process crashes (stops heartbeating,
//! its connection drops, its transaction is left open) and a new process
//! with the same transactional id starts a little later and joins anew.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::ResponseKind;

use super::group_requests::{self as greq, Membership};
use super::txn_requests as req;
use super::{backoff_ms, reset, Client, Cx};

#[derive(Clone, Debug)]
pub struct GroupCopierConfig {
    pub input: String,
    pub output: String,
    /// Partitions of the input and of the output (the same count: input
    /// partition p is copied to output partition p).
    pub partitions: i32,
    pub transactional_id: String,
    pub group: String,
    pub txn_timeout_ms: i32,
    /// At least the broker's group.min.session.timeout.ms (6000).
    pub session_timeout_ms: i32,
    /// Chance of a crash after each answer inside a transaction.
    pub crash_p: f64,
    pub crashes_max: u32,
    pub abort_p: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Init,
    FindCoordinator,
    Join,
    Sync,
    Positions,
    /// Assigned nothing: only heartbeats, until the group is done.
    Idle,
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
    /// Aborts the open transaction before rejoining.
    Abort,
    /// The group's committed offsets, all partitions, then the input's end.
    CheckOffsets,
    CheckEnd,
    Leave,
    /// The process is dead; a new one starts at `until_ms`.
    Dead {
        until_ms: i64,
    },
    Done,
}

/// What the member process holds in memory (lost at its crash).
pub(super) struct Process {
    pub step: Step,
    pub session: Option<(i64, i16)>,
    pub member: Membership,
    /// Set by the join answer when this member leads: (id, subscription).
    pub join_members: Vec<(String, Bytes)>,
    pub assigned: Vec<i32>,
    /// Next input offset per assigned partition.
    pub positions: BTreeMap<i32, i64>,
    /// The open transaction's copy per output partition, and the input
    /// positions after it.
    pub out: Vec<(i32, Vec<Bytes>)>,
    pub next_positions: BTreeMap<i32, i64>,
    pub next_seq: Vec<i32>,
    /// A transaction may be open on the broker (partitions or the group
    /// were added): an abort is due before rejoining.
    pub txn_open: bool,
    /// The transaction's Produce was sent, and answered with success:
    /// whether its sequences are spent in the log, or unknown.
    pub produce_sent: bool,
    pub produce_acked: bool,
    /// The group must be joined again; true: with a new member id.
    pub rejoin: Option<bool>,
    pub asked: Option<i32>,
    /// The partitions `Step::Reset` asks about.
    pub resets: Vec<i32>,
    pub heartbeat_asked: bool,
    pub next_heartbeat_ms: i64,
    /// When the last OffsetFetch of positions was sent (the on-the-spot
    /// check compares with commits answered before it).
    pub positions_sent_ms: i64,
    /// Committed offsets of every partition, for the done check.
    pub check_offsets: Vec<(i32, i64)>,
    pub failures: u32,
    pub retry_at_ms: i64,
}

pub struct GroupCopier {
    pub(super) client: u32,
    pub(super) cfg: GroupCopierConfig,
    pub(super) p: Process,
    pub(super) crashes: u32,
    pub(super) copied: u64,
    pub(super) rebalances: u32,
}

impl GroupCopier {
    pub fn new(client: u32, cfg: GroupCopierConfig) -> Self {
        let p = Process::new(&cfg);
        Self {
            client,
            cfg,
            p,
            crashes: 0,
            copied: 0,
            rebalances: 0,
        }
    }

    pub(super) fn session(&self) -> (i64, i16) {
        self.p.session.expect("initialised")
    }

    fn send(&mut self, cx: &mut Cx) {
        let id = self.cfg.transactional_id.clone();
        let cfg = &self.cfg;
        let group = cfg.group.as_str();
        let all: Vec<i32> = (0..cfg.partitions).collect();
        self.p.asked = match self.p.step {
            Step::Init => cx.wire.send(4, &req::init(&id, cfg.txn_timeout_ms)),
            Step::FindCoordinator => cx.wire.send(3, &greq::find_coordinator(group)),
            Step::Join => {
                let r = greq::join(
                    group,
                    &self.p.member.member_id,
                    cfg.session_timeout_ms,
                    &cfg.input,
                );
                cx.wire.send(5, &r)
            }
            Step::Sync => {
                let r = greq::sync(group, &self.p.member, self.assignments(cx));
                cx.wire.send(5, &r)
            }
            Step::Positions => {
                self.p.positions_sent_ms = cx.elapsed_ms;
                let r = greq::offset_fetch(group, &cfg.input, &self.p.assigned);
                cx.wire.send(7, &r)
            }
            Step::CheckOffsets => cx
                .wire
                .send(7, &greq::offset_fetch(group, &cfg.input, &all)),
            Step::Reset => {
                let (version, r) = reset::earliest_request(cx, &cfg.input, self.p.resets.clone());
                cx.wire.send(version, &r)
            }
            Step::Fetch => {
                let r = self.fetch_request(cx, &self.p.positions);
                cx.wire.send(12, &r)
            }
            Step::CheckEnd => {
                let at: BTreeMap<i32, i64> = self.p.check_offsets.iter().copied().collect();
                let r = self.fetch_request(cx, &at);
                cx.wire.send(12, &r)
            }
            Step::AddPartitions => {
                self.p.txn_open = true;
                let parts: Vec<i32> = self.p.out.iter().map(|(p, _)| *p).collect();
                let r = req::add_partitions(&id, self.session(), &cfg.output, &parts);
                cx.wire.send(3, &r)
            }
            Step::Produce => {
                self.p.produce_sent = true;
                let r = self.produce_request();
                cx.wire.send(9, &r)
            }
            Step::AddOffsets => {
                self.p.txn_open = true;
                cx.wire
                    .send(3, &req::add_offsets(&id, self.session(), group))
            }
            Step::CommitOffsets => {
                let offsets: Vec<(i32, i64)> = self
                    .p
                    .next_positions
                    .iter()
                    .map(|(&p, &o)| (p, o))
                    .collect();
                let r = greq::txn_offset_commit(
                    &id,
                    self.session(),
                    group,
                    &self.p.member,
                    &cfg.input,
                    &offsets,
                );
                cx.wire.send(3, &r)
            }
            Step::EndTxn { commit } => cx.wire.send(4, &req::end_txn(&id, self.session(), commit)),
            Step::Abort => cx.wire.send(4, &req::end_txn(&id, self.session(), false)),
            Step::Leave => cx
                .wire
                .send(3, &greq::leave(group, &self.p.member.member_id)),
            Step::Idle | Step::Dead { .. } | Step::Done => None,
        };
    }

    pub(super) fn retry(&mut self, cx: &mut Cx, what: &str, code: i16) {
        self.p.failures += 1;
        self.p.retry_at_ms = cx.now_ms + backoff_ms(cx.rng, self.p.failures.min(3));
        cx.note(format!("{what}: error {code}; again"));
    }

    /// Waits a little before the next request of the same step.
    pub(super) fn pause(&mut self, cx: &mut Cx, delay_ms: i64) {
        self.p.retry_at_ms = cx.now_ms + delay_ms;
    }

    /// Whether a rejoin may start now: only between requests of the
    /// member's work, never in the middle of joining or leaving.
    fn working(&self) -> bool {
        !matches!(
            self.p.step,
            Step::Init
                | Step::FindCoordinator
                | Step::Join
                | Step::Sync
                | Step::Abort
                | Step::Leave
                | Step::Dead { .. }
                | Step::Done
        )
    }
}

impl Process {
    pub(super) fn new(cfg: &GroupCopierConfig) -> Self {
        Self {
            step: Step::Init,
            session: None,
            member: Membership {
                member_id: String::new(),
                generation: -1,
            },
            join_members: Vec::new(),
            assigned: Vec::new(),
            positions: BTreeMap::new(),
            out: Vec::new(),
            next_positions: BTreeMap::new(),
            next_seq: vec![0; cfg.partitions as usize],
            txn_open: false,
            produce_sent: false,
            produce_acked: false,
            rejoin: None,
            asked: None,
            resets: Vec::new(),
            heartbeat_asked: false,
            next_heartbeat_ms: 0,
            positions_sent_ms: 0,
            check_offsets: Vec::new(),
            failures: 0,
            retry_at_ms: 0,
        }
    }
}

impl Client for GroupCopier {
    fn name(&self) -> String {
        format!(
            "c{} group copier {} -> {} ({}, group {}, session {} ms)",
            self.client,
            self.cfg.input,
            self.cfg.output,
            self.cfg.transactional_id,
            self.cfg.group,
            self.cfg.session_timeout_ms
        )
    }

    fn on_wake(&mut self, cx: &mut Cx) {
        if let Step::Dead { until_ms } = self.p.step {
            if cx.now_ms < until_ms {
                return cx.wake_in(until_ms - cx.now_ms);
            }
            cx.note("a new member process starts".into());
            self.p.step = Step::Init;
        }
        if self.p.step == Step::Done || self.p.asked.is_some() {
            return;
        }
        if cx.wire.conn().is_none() {
            return cx.connect();
        }
        if self.p.rejoin.is_some() && self.working() {
            self.start_rejoin(cx);
        }
        if self.heartbeat_due(cx) {
            return self.send_heartbeat(cx);
        }
        if self.p.step == Step::Idle {
            if !cx.history.inputs_done {
                return cx.wake_in(self.until_heartbeat_ms(cx).min(200));
            }
            self.p.step = Step::CheckOffsets;
        }
        if cx.now_ms < self.p.retry_at_ms {
            let wait_ms = self
                .until_heartbeat_ms(cx)
                .min(self.p.retry_at_ms - cx.now_ms);
            return cx.wake_in(wait_ms);
        }
        self.send(cx);
    }

    fn on_response(&mut self, cx: &mut Cx, corr: i32, response: ResponseKind) {
        if self.p.asked != Some(corr) {
            return; // an answer to a process that crashed
        }
        self.p.asked = None;
        if std::mem::take(&mut self.p.heartbeat_asked) {
            match response {
                ResponseKind::Heartbeat(r) => self.on_heartbeat(cx, r.error_code),
                other => panic!("group copier: a heartbeat answered {other:?}"),
            }
            return self.on_wake(cx);
        }
        let step = self.p.step;
        match (step, response) {
            (Step::Init, ResponseKind::InitProducerId(r)) => self.on_init(cx, &r),
            (Step::FindCoordinator, ResponseKind::FindCoordinator(r)) => {
                self.on_find_coordinator(cx, r.error_code)
            }
            (Step::Join, ResponseKind::JoinGroup(r)) => self.on_join(cx, r),
            (Step::Sync, ResponseKind::SyncGroup(r)) => self.on_sync(cx, r),
            (Step::Positions, ResponseKind::OffsetFetch(r)) => self.on_positions(cx, &r),
            (Step::CheckOffsets, ResponseKind::OffsetFetch(r)) => self.on_check_offsets(cx, &r),
            (Step::Reset, ResponseKind::ListOffsets(r)) => self.on_earliest(cx, &r),
            (Step::Fetch, ResponseKind::Fetch(r)) => self.on_fetch(cx, r),
            (Step::CheckEnd, ResponseKind::Fetch(r)) => self.on_check_end(cx, r),
            (Step::AddPartitions, ResponseKind::AddPartitionsToTxn(r)) => {
                let code = req::add_partitions_error(&r);
                self.on_step(cx, "AddPartitionsToTxn", code, Step::Produce);
            }
            (Step::Produce, ResponseKind::Produce(r)) => {
                let answers = req::produce_answers(&r);
                let code = answers.iter().map(|a| a.1).find(|&c| c != 0).unwrap_or(0);
                self.on_step(cx, "Produce", code, Step::AddOffsets);
                if code == 0 {
                    self.p.produce_acked = true;
                    let process_ms =
                        rand::RngExt::random_range(cx.rng, super::group_copy::PROCESS_MS);
                    self.pause(cx, process_ms);
                }
            }
            (Step::AddOffsets, ResponseKind::AddOffsetsToTxn(r)) => {
                self.on_step(cx, "AddOffsetsToTxn", r.error_code, Step::CommitOffsets)
            }
            (Step::CommitOffsets, ResponseKind::TxnOffsetCommit(r)) => {
                self.on_commit_offsets(cx, req::txn_offset_commit_error(&r))
            }
            (Step::EndTxn { commit }, ResponseKind::EndTxn(r)) => {
                self.on_end_txn(cx, commit, r.error_code)
            }
            (Step::Abort, ResponseKind::EndTxn(r)) => self.on_abort(cx, r.error_code),
            (Step::Leave, ResponseKind::LeaveGroup(r)) => self.on_leave(cx, r.error_code),
            (step, other) => panic!("group copier in {step:?} got {other:?}"),
        }
        if self.p.txn_open && self.maybe_crash(cx) {
            return;
        }
        self.on_wake(cx);
    }

    fn on_disconnect(&mut self, cx: &mut Cx) {
        // Unknown outcome: the same request goes again on a new connection.
        self.p.asked = None;
        self.p.heartbeat_asked = false;
        self.p.failures += 1;
        let delay_ms = backoff_ms(cx.rng, self.p.failures.min(3));
        cx.wake_in(delay_ms);
    }

    fn is_done(&self) -> bool {
        self.p.step == Step::Done
    }

    fn status(&self) -> String {
        format!(
            "{}: {:?}, member {:?} generation {}, assigned {:?}, positions {:?}, rejoin {:?}, {} copied, {} crashes, {} rebalances",
            self.name(),
            self.p.step,
            self.p.member.member_id,
            self.p.member.generation,
            self.p.assigned,
            self.p.positions,
            self.p.rejoin,
            self.copied,
            self.crashes,
            self.rebalances
        )
    }
}
