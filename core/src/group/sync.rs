//! SyncGroup: the leader's assignment reaches every member. Follows Kafka
//! 4.x's `GroupMetadataManager.java` (classicGroupSyncToClassicGroup,
//! validateSyncGroup, removePendingSyncMember, setAndPropagateAssignment,
//! resetAndPropagateAssignmentWithError, propagateAssignment). Kafka stores
//! the assignment before answering; here it is not stored (a restart
//! forgets members), so the answers go out at once.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::SyncGroupResponse;
use kafka_protocol::ResponseError;

use super::state::State;
use super::timers::TimerKey;
use super::{str_bytes, sync_error, Coordinator};
use crate::request::RequestCtx;

/// A SyncGroup, as the handler decoded it.
pub(crate) struct SyncArgs {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
    /// v5+: checked against the group's when given.
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

impl Coordinator {
    pub fn sync(&mut self, now_ms: i64, ctx: RequestCtx, args: SyncArgs) {
        let gid = args.group_id.clone();
        if let Err(error) = self.check_sync(&args) {
            return self.outbox.sync(ctx, sync_error(error));
        }
        let g = self.groups.get_mut(&gid).expect("checked");
        match g.state {
            State::PreparingRebalance => self
                .outbox
                .sync(ctx, sync_error(ResponseError::RebalanceInProgress)),
            State::CompletingRebalance => {
                let m = g.members.get_mut(&args.member_id).expect("checked");
                if let Some(replaced) = m.sync_waiter.replace(ctx) {
                    self.outbox
                        .sync(replaced, sync_error(ResponseError::RebalanceInProgress));
                }
                self.remove_pending_sync_member(&gid, &args.member_id);
                let g = self.groups.get_mut(&gid).expect("checked");
                if g.is_leader(&args.member_id) {
                    tracing::info!(
                        group = gid,
                        generation = g.generation_id,
                        "assignment received from the leader"
                    );
                    let mut given: BTreeMap<String, Bytes> = args.assignments.into_iter().collect();
                    for m in g.members.values_mut() {
                        m.assignment = given.remove(&m.id).unwrap_or_default();
                    }
                    self.propagate_assignment(now_ms, &gid, None);
                    let g = self.groups.get_mut(&gid).expect("checked");
                    g.transition(State::Stable, now_ms);
                }
            }
            State::Stable => {
                let assignment = g.members[&args.member_id].assignment.clone();
                let response = SyncGroupResponse::default()
                    .with_protocol_type(g.protocol_type.as_deref().map(str_bytes))
                    .with_protocol_name(g.protocol_name.as_deref().map(str_bytes))
                    .with_assignment(assignment);
                self.remove_pending_sync_member(&gid, &args.member_id);
                self.outbox.sync(ctx, response);
            }
            State::Empty => unreachable!("check_sync refuses empty groups"),
        }
    }

    fn check_sync(&self, args: &SyncArgs) -> Result<(), ResponseError> {
        if args.group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let Some(g) = self
            .groups
            .get(&args.group_id)
            .filter(|g| g.state != State::Empty)
        else {
            return Err(ResponseError::UnknownMemberId);
        };
        if g.deleting {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        g.validate_member(&args.member_id, args.instance_id.as_deref())?;
        if args.generation_id != g.generation_id {
            return Err(ResponseError::IllegalGeneration);
        }
        let inconsistent = |given: &Option<String>, ours: &Option<String>| matches!((given, ours), (Some(a), Some(b)) if a != b);
        if inconsistent(&args.protocol_type, &g.protocol_type)
            || inconsistent(&args.protocol_name, &g.protocol_name)
        {
            return Err(ResponseError::InconsistentGroupProtocol);
        }
        Ok(())
    }

    fn remove_pending_sync_member(&mut self, gid: &str, member_id: &str) {
        let g = self.groups.get_mut(gid).expect("group exists");
        g.pending_sync.remove(member_id);
        if g.pending_sync.is_empty() {
            self.timers.cancel(&TimerKey::Sync {
                group: gid.to_string(),
            });
        }
    }

    pub(super) fn reset_and_propagate_assignment_with_error(
        &mut self,
        now_ms: i64,
        gid: &str,
        error: ResponseError,
    ) {
        let g = self.groups.get_mut(gid).expect("group exists");
        assert_eq!(
            g.state,
            State::CompletingRebalance,
            "group {gid}: assignments reset only while completing"
        );
        for m in g.members.values_mut() {
            m.assignment = Bytes::new();
        }
        self.propagate_assignment(now_ms, gid, Some(error));
    }

    /// Answers every parked SyncGroup: with its assignment, or with `error`;
    /// each answered member's session restarts.
    fn propagate_assignment(&mut self, now_ms: i64, gid: &str, error: Option<ResponseError>) {
        let g = self.groups.get_mut(gid).expect("group exists");
        let (protocol_type, protocol_name) = (g.protocol_type.clone(), g.protocol_name.clone());
        let mut answered = Vec::new();
        for m in g.members.values_mut() {
            let Some(waiter) = m.sync_waiter.take() else {
                continue;
            };
            let response = match error {
                None => SyncGroupResponse::default()
                    .with_protocol_type(protocol_type.as_deref().map(str_bytes))
                    .with_protocol_name(protocol_name.as_deref().map(str_bytes))
                    .with_assignment(m.assignment.clone()),
                Some(error) => sync_error(error),
            };
            self.outbox.sync(waiter, response);
            answered.push(m.id.clone());
        }
        for id in answered {
            self.reschedule_heartbeat(now_ms, gid, &id);
        }
    }
}
