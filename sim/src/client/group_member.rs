//! The group copier's membership: InitProducerId and FindCoordinator at the
//! start of a process, JoinGroup (MEMBER_ID_REQUIRED first, as JoinGroup v4+
//! asks of a new dynamic member), SyncGroup (the leader sends the range
//! assignment), heartbeats, the rejoin after an error (abort first), the
//! LeaveGroup at the end, and the crash of the process.

use kafka_protocol::messages::{InitProducerIdResponse, JoinGroupResponse, SyncGroupResponse};
use rand::RngExt;

use super::group_copier::{GroupCopier, Process, Step};
use super::group_requests::{self as greq, Membership};
use super::txn_requests::{self as req, is_fenced, is_retry};
use super::Cx;

impl GroupCopier {
    pub(super) fn on_init(&mut self, cx: &mut Cx, r: &InitProducerIdResponse) {
        match r.error_code {
            0 => {
                self.p.session = Some((r.producer_id.0, r.producer_epoch));
                self.p.next_seq.iter_mut().for_each(|s| *s = 0);
                self.p.failures = 0;
                self.p.step = Step::FindCoordinator;
            }
            c if is_retry(c) => self.retry(cx, "InitProducerId", c),
            c => cx.violation(format!("group copier InitProducerId: unexpected error {c}")),
        }
    }

    pub(super) fn on_find_coordinator(&mut self, cx: &mut Cx, code: i16) {
        match code {
            0 => self.p.step = Step::Join,
            c if is_retry(c) => self.retry(cx, "FindCoordinator", c),
            c => cx.violation(format!("FindCoordinator: unexpected error {c}")),
        }
    }

    pub(super) fn on_join(&mut self, cx: &mut Cx, r: JoinGroupResponse) {
        match r.error_code {
            greq::MEMBER_ID_REQUIRED => {
                // Join again at once, with the id the coordinator made.
                self.p.member.member_id = r.member_id.to_string();
            }
            0 => {
                let member_id = r.member_id.to_string();
                if member_id != self.p.member.member_id {
                    cx.violation(format!(
                        "JoinGroup with member id {:?} answered for {member_id:?}",
                        self.p.member.member_id
                    ));
                }
                let leader = r.leader.as_str() == member_id;
                self.p.member = Membership {
                    member_id,
                    generation: r.generation_id,
                };
                self.p.join_members = if leader {
                    r.members
                        .iter()
                        .map(|m| (m.member_id.to_string(), m.metadata.clone()))
                        .collect()
                } else {
                    Vec::new()
                };
                if leader && self.p.join_members.is_empty() {
                    cx.violation("the leader's JoinGroup answer lists no members".into());
                }
                cx.note(format!(
                    "joined generation {}{}",
                    r.generation_id,
                    if leader { " as leader" } else { "" }
                ));
                self.p.failures = 0;
                self.p.step = Step::Sync;
            }
            greq::UNKNOWN_MEMBER_ID => {
                cx.note("JoinGroup: unknown member; joins as a new one".into());
                self.p.member.member_id.clear();
            }
            c if is_retry(c) || c == greq::REBALANCE_IN_PROGRESS => self.retry(cx, "JoinGroup", c),
            c => {
                // Reported, then asked again after a backoff: the run goes
                // on, and a stuck group shows as a liveness failure too.
                cx.violation(format!("JoinGroup: unexpected error {c}"));
                self.retry(cx, "JoinGroup", c);
            }
        }
    }

    /// The leader's assignments for SyncGroup (followers send none).
    pub(super) fn assignments(&self, cx: &mut Cx) -> Vec<(String, bytes::Bytes)> {
        if self.p.join_members.is_empty() {
            return Vec::new();
        }
        match greq::range_assign(&self.p.join_members, &self.cfg.input, self.cfg.partitions) {
            Ok(plan) => plan
                .into_iter()
                .map(|(m, parts)| (m, greq::assignment(&self.cfg.input, &parts)))
                .collect(),
            Err(e) => {
                cx.violation(format!("leader: {e}"));
                Vec::new()
            }
        }
    }

    pub(super) fn on_sync(&mut self, cx: &mut Cx, r: SyncGroupResponse) {
        match r.error_code {
            0 => {
                let assigned = match greq::decode_assignment(&r.assignment, &self.cfg.input) {
                    Ok(a) => a,
                    Err(e) => return cx.violation(format!("SyncGroup: {e}")),
                };
                cx.note(format!(
                    "generation {}: assigned {assigned:?}",
                    self.p.member.generation
                ));
                self.p.assigned = assigned;
                self.p.positions.clear();
                self.p.rejoin = None;
                self.p.failures = 0;
                self.p.next_heartbeat_ms = cx.now_ms + self.heartbeat_interval_ms();
                self.p.step = if self.p.assigned.is_empty() {
                    Step::Idle
                } else {
                    Step::Positions
                };
            }
            c if greq::must_rejoin(c) => {
                cx.note(format!("SyncGroup: error {c}; joins again"));
                if c == greq::UNKNOWN_MEMBER_ID {
                    self.p.member.member_id.clear();
                }
                self.p.step = Step::Join;
            }
            c if is_retry(c) => self.retry(cx, "SyncGroup", c),
            c => cx.violation(format!("SyncGroup: unexpected error {c}")),
        }
    }

    /// heartbeat.interval.ms: a third of the session, as Kafka advises.
    fn heartbeat_interval_ms(&self) -> i64 {
        self.cfg.session_timeout_ms as i64 / 3
    }

    fn in_generation(&self) -> bool {
        self.p.member.generation >= 0
            && !matches!(
                self.p.step,
                Step::Init
                    | Step::FindCoordinator
                    | Step::Join
                    | Step::Sync
                    | Step::Leave
                    | Step::Dead { .. }
                    | Step::Done
            )
    }

    pub(super) fn heartbeat_due(&self, cx: &Cx) -> bool {
        self.in_generation() && self.p.rejoin.is_none() && cx.now_ms >= self.p.next_heartbeat_ms
    }

    /// ms until the next heartbeat is due (a long time when none is).
    pub(super) fn until_heartbeat_ms(&self, cx: &Cx) -> i64 {
        if self.in_generation() && self.p.rejoin.is_none() {
            (self.p.next_heartbeat_ms - cx.now_ms).max(1)
        } else {
            i64::MAX / 4
        }
    }

    pub(super) fn send_heartbeat(&mut self, cx: &mut Cx) {
        let r = greq::heartbeat(&self.cfg.group, &self.p.member);
        self.p.asked = cx.wire.send(4, &r);
        self.p.heartbeat_asked = self.p.asked.is_some();
        self.p.next_heartbeat_ms = cx.now_ms + self.heartbeat_interval_ms();
    }

    pub(super) fn on_heartbeat(&mut self, cx: &mut Cx, code: i16) {
        match code {
            0 => {}
            c if greq::must_rejoin(c) => self.ask_rejoin(cx, "Heartbeat", c),
            c if is_retry(c) => {}
            c => cx.violation(format!("Heartbeat: unexpected error {c}")),
        }
    }

    /// The group moved on without this member's current view.
    pub(super) fn ask_rejoin(&mut self, cx: &mut Cx, what: &str, code: i16) {
        let new_id = code == greq::UNKNOWN_MEMBER_ID;
        cx.note(format!(
            "{what}: error {code} in {:?}; abort{} and rejoin",
            self.p.step,
            if self.p.txn_open { "" } else { " (none open)" }
        ));
        self.p.rejoin = Some(self.p.rejoin.unwrap_or(false) || new_id);
    }

    /// Gives up the assignment: abort what is open, then join.
    pub(super) fn start_rejoin(&mut self, _cx: &mut Cx) {
        self.rebalances += 1;
        let new_id = self.p.rejoin.take().unwrap_or(false);
        if new_id {
            self.p.member.member_id.clear();
        }
        self.p.member.generation = -1;
        self.p.assigned.clear();
        self.p.positions.clear();
        self.p.failures = 0;
        self.p.retry_at_ms = 0;
        self.p.step = if self.p.txn_open {
            Step::Abort
        } else {
            self.drop_txn();
            Step::Join
        };
    }

    pub(super) fn on_abort(&mut self, cx: &mut Cx, code: i16) {
        match code {
            // INVALID_TXN_STATE: nothing was open after all (a lost answer
            // to an AddPartitionsToTxn that failed, or a commit that landed).
            0 | req::INVALID_TXN_STATE => {
                let unknown = self.p.produce_sent && !self.p.produce_acked;
                self.drop_txn();
                self.p.failures = 0;
                self.p.step = Step::Join;
                if unknown {
                    // Whether the batches landed is unknown, and so is the
                    // next sequence: a new epoch starts them over (KIP-360).
                    cx.note("a Produce's outcome is unknown: InitProducerId again".into());
                    self.p.session = None;
                    self.p.step = Step::Init;
                }
            }
            c if is_retry(c) => self.retry(cx, "EndTxn abort", c),
            c if is_fenced(c) => {
                cx.note(format!("EndTxn abort: fenced ({c}); the process restarts"));
                self.crash(cx);
            }
            c => cx.violation(format!(
                "EndTxn abort before a rejoin: unexpected error {c}"
            )),
        }
    }

    /// Forgets the open transaction; the sequences of its acknowledged
    /// batches were spent in the log.
    pub(super) fn drop_txn(&mut self) {
        if self.p.produce_acked {
            for (p, values) in &self.p.out {
                self.p.next_seq[*p as usize] += values.len() as i32;
            }
        }
        self.p.produce_sent = false;
        self.p.produce_acked = false;
        self.p.out.clear();
        self.p.next_positions.clear();
        self.p.txn_open = false;
    }

    pub(super) fn on_leave(&mut self, cx: &mut Cx, code: i16) {
        if code != 0 && !greq::must_rejoin(code) && !is_retry(code) {
            cx.violation(format!("LeaveGroup: unexpected error {code}"));
        }
        cx.note(format!(
            "leaves the group: {} values copied, {} crashes, {} rebalances",
            self.copied, self.crashes, self.rebalances
        ));
        self.p.step = Step::Done;
    }

    /// Maybe the process dies here, with its transaction open.
    pub(super) fn maybe_crash(&mut self, cx: &mut Cx) -> bool {
        if self.crashes >= self.cfg.crashes_max || !cx.rng.random_bool(self.cfg.crash_p) {
            return false;
        }
        cx.note(format!(
            "member process crashes in {:?} (transaction open)",
            self.p.step
        ));
        self.crash(cx);
        true
    }

    /// Everything in memory is gone; the connection drops; a new process
    /// starts before or after the group notices the old one is gone.
    pub(super) fn crash(&mut self, cx: &mut Cx) {
        self.crashes += 1;
        cx.disconnect();
        let session_ms = self.cfg.session_timeout_ms as i64;
        let until_ms = cx.now_ms + cx.rng.random_range(10..=session_ms * 3 / 2);
        self.p = Process::new(&self.cfg);
        self.p.step = Step::Dead { until_ms };
        cx.wake_in(until_ms - cx.now_ms);
    }
}
