//! Heartbeat and LeaveGroup. Follows Kafka 4.x's `GroupMetadataManager.java`
//! (classicGroupHeartbeatToClassicGroup, validateClassicGroupHeartbeat,
//! classicGroupLeaveToClassicGroup) and `GroupCoordinatorService.leaveGroup`
//! (an unknown group answers each member UNKNOWN_MEMBER_ID).

use kafka_protocol::ResponseError;

use super::rebalance::heartbeat_key;
use super::state::State;
use super::Coordinator;

impl Coordinator {
    /// The error a Heartbeat gets (None for NONE).
    pub fn heartbeat(
        &mut self,
        now_ms: i64,
        gid: &str,
        generation_id: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Option<ResponseError> {
        if gid.is_empty() {
            return Some(ResponseError::InvalidGroupId);
        }
        let Some(g) = self.groups.get(gid) else {
            return Some(ResponseError::UnknownMemberId);
        };
        if g.deleting {
            return Some(ResponseError::CoordinatorNotAvailable);
        }
        if let Err(error) = g.validate_member(member_id, instance_id) {
            return Some(error);
        }
        if generation_id != g.generation_id {
            return Some(ResponseError::IllegalGeneration);
        }
        match g.state {
            State::Empty => Some(ResponseError::UnknownMemberId),
            State::PreparingRebalance => {
                self.reschedule_heartbeat(now_ms, gid, member_id);
                Some(ResponseError::RebalanceInProgress)
            }
            State::CompletingRebalance | State::Stable => {
                self.reschedule_heartbeat(now_ms, gid, member_id);
                None
            }
        }
    }

    /// LeaveGroup for a batch of (member id, group.instance.id): the error
    /// of the whole request, or one per member (None for NONE).
    pub fn leave(
        &mut self,
        now_ms: i64,
        gid: &str,
        leaving: &[(String, Option<String>)],
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        if gid.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let Some(g) = self.groups.get(gid) else {
            return Ok(vec![Some(ResponseError::UnknownMemberId); leaving.len()]);
        };
        if g.deleting {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        let mut results = Vec::with_capacity(leaving.len());
        let mut any_left = false;
        for (member_id, instance_id) in leaving {
            let g = self.groups.get_mut(gid).expect("group exists");
            let target = if member_id.is_empty() {
                // An admin removing a static member by instance id alone.
                instance_id
                    .as_ref()
                    .and_then(|i| g.static_members.get(i))
                    .cloned()
                    .ok_or(ResponseError::UnknownMemberId)
            } else if g.pending_members.contains(member_id) {
                Ok(member_id.clone())
            } else {
                g.validate_member(member_id, instance_id.as_deref())
                    .map(|()| member_id.clone())
            };
            match target {
                Ok(id) => {
                    tracing::info!(group = gid, member = id, "member left");
                    if let Some(removed) = g.remove(&id) {
                        self.answer_removed(removed, ResponseError::UnknownMemberId);
                    }
                    self.timers.cancel(&heartbeat_key(gid, &id));
                    any_left = true;
                    results.push(None);
                }
                Err(error) => results.push(Some(error)),
            }
        }
        if any_left {
            match self.groups[gid].state {
                State::Stable | State::CompletingRebalance => {
                    self.maybe_prepare_rebalance_or_complete_join(now_ms, gid)
                }
                State::PreparingRebalance => self.maybe_complete_join_phase(now_ms, gid),
                State::Empty => {}
            }
        }
        Ok(results)
    }
}
