//! The rebalance itself: the join phase and the timers that end it, session
//! expiry, and the sync deadline. Follows Kafka 4.x's
//! `GroupMetadataManager.java` (maybePrepareRebalanceOrCompleteJoin,
//! prepareRebalance, tryCompleteInitialRebalanceElseSchedule,
//! completeClassicGroupJoin, expireClassicGroupMemberHeartbeat,
//! removeMemberAndUpdateClassicGroup, expirePendingSync) method for method.
//!
//! Two differences hold throughout the coordinator: membership and
//! assignments are not written to storage (a restart forgets them), so
//! answers Kafka gives after its log append are given at once; and a parked
//! request that Kafka would drop (a newer JoinGroup or SyncGroup of the same
//! member replaced it, or the member was removed) is answered, because a
//! connection's answers leave in order and a lost one would stall it.

use kafka_protocol::ResponseError;

use super::state::{JoinTimer, State};
use super::timers::TimerKey;
use super::{join_error, sync_error, Coordinator};

pub(super) fn heartbeat_key(group: &str, member: &str) -> TimerKey {
    TimerKey::Heartbeat {
        group: group.to_string(),
        member: member.to_string(),
    }
}

impl Coordinator {
    // ---- the join phase -----------------------------------------------------

    pub(super) fn maybe_prepare_rebalance_or_complete_join(&mut self, now_ms: i64, gid: &str) {
        if self.groups[gid].can_rebalance() {
            self.prepare_rebalance(now_ms, gid)
        } else {
            self.maybe_complete_join_phase(now_ms, gid)
        }
    }

    pub(super) fn prepare_rebalance(&mut self, now_ms: i64, gid: &str) {
        if self.groups[gid].state == State::CompletingRebalance {
            self.reset_and_propagate_assignment_with_error(
                now_ms,
                gid,
                ResponseError::RebalanceInProgress,
            );
        }
        self.timers.cancel(&TimerKey::Sync {
            group: gid.to_string(),
        });
        let initial_delay_ms = self.settings.initial_rebalance_delay_ms;
        let g = self.groups.get_mut(gid).expect("group exists");
        g.pending_sync.clear();
        let initial = g.state == State::Empty;
        if initial {
            // A new group waits for more members before its first generation.
            let remaining_ms = (g.rebalance_timeout_ms() - initial_delay_ms).max(0);
            g.join_timer = JoinTimer::InitialDelay {
                delay_ms: initial_delay_ms,
                remaining_ms,
            };
            self.timers.schedule(
                TimerKey::Join {
                    group: gid.to_string(),
                },
                now_ms + initial_delay_ms,
            );
        }
        g.transition(State::PreparingRebalance, now_ms);
        tracing::debug!(
            group = gid,
            generation = g.generation_id,
            "preparing to rebalance"
        );
        if !initial {
            self.maybe_complete_join_else_schedule(now_ms, gid);
        }
    }

    fn maybe_complete_join_else_schedule(&mut self, now_ms: i64, gid: &str) {
        let g = self.groups.get_mut(gid).expect("group exists");
        if g.has_all_members_joined() {
            return self.complete_join(now_ms, gid);
        }
        g.join_timer = JoinTimer::Complete;
        let deadline_ms = now_ms + g.rebalance_timeout_ms();
        self.timers.schedule(
            TimerKey::Join {
                group: gid.to_string(),
            },
            deadline_ms,
        );
    }

    /// Completes the join phase early when everyone is in (but never during
    /// the initial delay, which runs its course).
    pub(super) fn maybe_complete_join_phase(&mut self, now_ms: i64, gid: &str) {
        let g = &self.groups[gid];
        if g.state == State::PreparingRebalance
            && g.previous_state != State::Empty
            && g.has_all_members_joined()
        {
            self.complete_join(now_ms, gid);
        }
    }

    pub(super) fn join_timer_fired(&mut self, now_ms: i64, gid: &str) {
        let Some(g) = self.groups.get_mut(gid) else {
            return;
        };
        if g.state != State::PreparingRebalance || g.deleting {
            return;
        }
        match g.join_timer {
            JoinTimer::Complete => self.complete_join(now_ms, gid),
            JoinTimer::InitialDelay {
                delay_ms,
                remaining_ms,
            } => {
                if g.new_member_added && remaining_ms != 0 {
                    g.new_member_added = false;
                    let next_delay_ms = self.settings.initial_rebalance_delay_ms.min(remaining_ms);
                    let next_remaining_ms = (remaining_ms - delay_ms).max(0);
                    g.join_timer = JoinTimer::InitialDelay {
                        delay_ms: next_delay_ms,
                        remaining_ms: next_remaining_ms,
                    };
                    self.timers.schedule(
                        TimerKey::Join {
                            group: gid.to_string(),
                        },
                        now_ms + next_delay_ms,
                    );
                } else {
                    self.complete_join(now_ms, gid)
                }
            }
        }
    }

    /// Ends the join phase: dynamic members that did not rejoin are removed,
    /// the next generation starts, and every parked JoinGroup is answered
    /// (the leader's with the members and their metadata).
    fn complete_join(&mut self, now_ms: i64, gid: &str) {
        self.timers.cancel(&TimerKey::Join {
            group: gid.to_string(),
        });
        let g = &self.groups[gid];
        assert_eq!(
            g.state,
            State::PreparingRebalance,
            "group {gid}: join completes only while preparing"
        );
        let gone: Vec<String> = g
            .members
            .values()
            .filter(|m| !m.is_awaiting_join() && !m.is_static())
            .map(|m| m.id.clone())
            .collect();
        for id in &gone {
            let g = self.groups.get_mut(gid).expect("group exists");
            let removed = g.remove(id).expect("member listed above");
            self.timers.cancel(&heartbeat_key(gid, id));
            self.answer_removed(removed, ResponseError::UnknownMemberId);
        }
        if !gone.is_empty() {
            tracing::info!(group = gid, ?gone, "removed members that did not rejoin");
        }
        let g = self.groups.get_mut(gid).expect("group exists");
        if !g.maybe_elect_new_joined_leader() && !g.members.is_empty() {
            // Only static members remain and none rejoined: wait another
            // rebalance timeout (their sessions may end meanwhile).
            g.join_timer = JoinTimer::Complete;
            let deadline_ms = now_ms + g.rebalance_timeout_ms();
            self.timers.schedule(
                TimerKey::Join {
                    group: gid.to_string(),
                },
                deadline_ms,
            );
            return;
        }
        g.init_next_generation(now_ms);
        if g.state == State::Empty {
            tracing::info!(group = gid, generation = g.generation_id, "group is empty");
            return;
        }
        tracing::info!(
            group = gid,
            generation = g.generation_id,
            members = g.members.len(),
            "group stabilizing"
        );
        let ids: Vec<String> = g.members.keys().cloned().collect();
        for id in ids {
            let with_members = self.groups[gid].is_leader(&id);
            let response = self.generation_response(gid, &id, with_members, None, false);
            let g = self.groups.get_mut(gid).expect("group exists");
            let m = g.members.get_mut(&id).expect("member listed above");
            let waiter = m.join_waiter.take();
            m.is_new = false;
            let session_timeout_ms = m.session_timeout_ms as i64;
            g.pending_sync.insert(id.clone());
            if let Some(waiter) = waiter {
                self.outbox.join(waiter, response);
            }
            self.timers
                .schedule(heartbeat_key(gid, &id), now_ms + session_timeout_ms);
        }
        let g = self.groups.get_mut(gid).expect("group exists");
        g.sync_generation = g.generation_id;
        let deadline_ms = now_ms + g.rebalance_timeout_ms();
        self.timers.schedule(
            TimerKey::Sync {
                group: gid.to_string(),
            },
            deadline_ms,
        );
    }

    /// Answers whatever a removed member was waiting on.
    pub(super) fn answer_removed(
        &mut self,
        mut removed: super::member::Member,
        error: ResponseError,
    ) {
        if let Some(waiter) = removed.join_waiter.take() {
            self.outbox.join(waiter, join_error("", error));
        }
        if let Some(waiter) = removed.sync_waiter.take() {
            self.outbox.sync(waiter, sync_error(error));
        }
    }

    /// Removes a member and lets the group move on (session expiry).
    fn remove_member_and_update_group(&mut self, now_ms: i64, gid: &str, member_id: &str) {
        let g = self.groups.get_mut(gid).expect("group exists");
        let removed = g.remove(member_id).expect("member exists");
        self.timers.cancel(&heartbeat_key(gid, member_id));
        // A new member may expire with its JoinGroup parked: UNKNOWN_MEMBER_ID
        // makes it join again if it is still alive.
        self.answer_removed(removed, ResponseError::UnknownMemberId);
        let g = &self.groups[gid];
        match g.state {
            State::Stable | State::CompletingRebalance => {
                self.maybe_prepare_rebalance_or_complete_join(now_ms, gid)
            }
            State::PreparingRebalance if g.has_all_members_joined() => {
                self.complete_join(now_ms, gid)
            }
            _ => {}
        }
    }

    pub(super) fn expire_heartbeat(&mut self, now_ms: i64, gid: &str, member_id: &str) {
        let Some(g) = self.groups.get_mut(gid) else {
            return;
        };
        if g.deleting {
            return;
        }
        if g.pending_members.remove(member_id) {
            tracing::info!(group = gid, member = member_id, "pending member expired");
            if g.state == State::PreparingRebalance && g.has_all_members_joined() {
                self.complete_join(now_ms, gid);
            }
            return;
        }
        let Some(m) = g.members.get(member_id) else {
            return;
        };
        if !m.has_satisfied_heartbeat() {
            tracing::info!(
                group = gid,
                member = member_id,
                "session expired; removing the member"
            );
            self.remove_member_and_update_group(now_ms, gid, member_id);
        }
    }

    /// Members that did not send SyncGroup in time are removed and the group
    /// rebalances without them.
    pub(super) fn expire_pending_sync(&mut self, now_ms: i64, gid: &str) {
        let Some(g) = self.groups.get_mut(gid) else {
            return;
        };
        if g.deleting || g.generation_id != g.sync_generation {
            return;
        }
        let syncing = matches!(g.state, State::CompletingRebalance | State::Stable);
        if !syncing || g.pending_sync.is_empty() {
            return;
        }
        let late: Vec<String> = g.pending_sync.iter().cloned().collect();
        tracing::info!(group = gid, ?late, "removing members that did not sync");
        for id in &late {
            let g = self.groups.get_mut(gid).expect("group exists");
            if let Some(removed) = g.remove(id) {
                self.answer_removed(removed, ResponseError::UnknownMemberId);
            }
            self.timers.cancel(&heartbeat_key(gid, id));
        }
        self.prepare_rebalance(now_ms, gid);
    }

    pub(super) fn reschedule_heartbeat(&mut self, now_ms: i64, gid: &str, member_id: &str) {
        let m = &self.groups[gid].members[member_id];
        let deadline_ms = now_ms + m.session_timeout_ms as i64;
        self.timers
            .schedule(heartbeat_key(gid, member_id), deadline_ms);
    }
}
