//! JoinGroup: new members (MEMBER_ID_REQUIRED from v4), existing members
//! rejoining, and static members taking over their old id. Follows Kafka
//! 4.x's `GroupMetadataManager.java` (classicGroupJoinToClassicGroup,
//! classicGroupJoinNewMember / NewStaticMember / NewDynamicMember /
//! ExistingMember, addMemberThenRebalanceOrCompleteJoin,
//! updateStaticMemberThenRebalanceOrCompleteJoin, acceptJoiningMember).
//! Kafka writes the group before answering a replaced static member; here
//! membership is not stored, so the answer comes at once.

use bytes::Bytes;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::JoinGroupResponse;
use kafka_protocol::ResponseError;

use super::member::{Member, Protocol};
use super::rebalance::heartbeat_key;
use super::state::State;
use super::{join_error, str_bytes, sync_error, Coordinator};
use crate::limits;
use crate::request::RequestCtx;

/// A JoinGroup, as the handler decoded it.
pub(crate) struct JoinArgs {
    pub group_id: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    /// Already the session timeout for v0 (which has no rebalance timeout).
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
}

impl Coordinator {
    pub fn join(&mut self, now_ms: i64, ctx: RequestCtx, args: JoinArgs) {
        if let Err(error) = self.check_join(&args) {
            return self.outbox.join(ctx, join_error(&args.member_id, error));
        }
        let g = self.group_or_create(&args.group_id, now_ms);
        if g.deleting {
            // Kafka's Dead group: the client finds the coordinator again and retries.
            return self.outbox.join(
                ctx,
                join_error(&args.member_id, ResponseError::CoordinatorNotAvailable),
            );
        }
        if !accepts_joining_member(g, &args.member_id) {
            // As Kafka: the member (if it was one) leaves without a rebalance.
            if let Some(removed) = g.remove(&args.member_id) {
                self.timers
                    .cancel(&heartbeat_key(&args.group_id, &removed.id));
                self.answer_removed(removed, ResponseError::GroupMaxSizeReached);
            }
            return self
                .outbox
                .join(ctx, join_error("", ResponseError::GroupMaxSizeReached));
        }
        if args.member_id.is_empty() {
            self.join_new_member(now_ms, ctx, args)
        } else {
            self.join_existing_member(now_ms, ctx, args)
        }
    }

    fn check_join(&self, args: &JoinArgs) -> Result<(), ResponseError> {
        if args.group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        if !self.session_timeout_ok(args.session_timeout_ms) {
            return Err(ResponseError::InvalidSessionTimeout);
        }
        if !self.groups.contains_key(&args.group_id) {
            // Only a join without a member id creates a group.
            if !args.member_id.is_empty() {
                return Err(ResponseError::UnknownMemberId);
            }
            if self.groups.len() >= limits::GROUPS_MAX {
                return Err(ResponseError::CoordinatorNotAvailable);
            }
        }
        Ok(())
    }

    fn join_new_member(&mut self, now_ms: i64, ctx: RequestCtx, args: JoinArgs) {
        let g = &self.groups[&args.group_id];
        if !g.supports_protocols(&args.protocol_type, &args.protocols) {
            return self.outbox.join(
                ctx,
                join_error("", ResponseError::InconsistentGroupProtocol),
            );
        }
        let existing_static = args
            .instance_id
            .as_ref()
            .and_then(|i| g.static_members.get(i))
            .cloned();
        let pending_count = g.pending_members.len();
        let prefix = args
            .instance_id
            .clone()
            .unwrap_or_else(|| args.client_id.clone());
        let new_id = self.new_member_id(&args.group_id, &prefix, now_ms);
        if let Some(old_id) = existing_static {
            return self.replace_static_member(now_ms, ctx, args, old_id, new_id);
        }
        if args.instance_id.is_some() || ctx.version < 4 {
            return self.add_member_then_rebalance_or_complete_join(now_ms, ctx, args, new_id);
        }
        // JoinGroup v4+: a dynamic member first learns its id, and joins with it.
        if pending_count >= limits::GROUP_MEMBERS_MAX {
            return self
                .outbox
                .join(ctx, join_error("", ResponseError::GroupMaxSizeReached));
        }
        let g = self.groups.get_mut(&args.group_id).expect("group exists");
        g.pending_members.insert(new_id.clone());
        self.timers.schedule(
            heartbeat_key(&args.group_id, &new_id),
            now_ms + args.session_timeout_ms as i64,
        );
        self.outbox
            .join(ctx, join_error(&new_id, ResponseError::MemberIdRequired));
    }

    fn join_existing_member(&mut self, now_ms: i64, ctx: RequestCtx, args: JoinArgs) {
        let g = &self.groups[&args.group_id];
        let member_id = args.member_id.clone();
        if !g.supports_protocols(&args.protocol_type, &args.protocols) {
            return self.outbox.join(
                ctx,
                join_error(&member_id, ResponseError::InconsistentGroupProtocol),
            );
        }
        if g.pending_members.contains(&member_id) && args.instance_id.is_none() {
            return self.add_member_then_rebalance_or_complete_join(now_ms, ctx, args, member_id);
        }
        if let Err(error) = g.validate_member(&member_id, args.instance_id.as_deref()) {
            return self.outbox.join(ctx, join_error(&member_id, error));
        }
        let member = &g.members[&member_id];
        let same_protocols = member.matches(&args.protocols);
        match g.state {
            State::PreparingRebalance => {
                self.update_member_then_rebalance_or_complete_join(now_ms, ctx, args)
            }
            State::CompletingRebalance if same_protocols => {
                // A member that missed its JoinGroup answer: the current generation again.
                let with_members = g.is_leader(&member_id);
                let response =
                    self.generation_response(&args.group_id, &member_id, with_members, None, false);
                self.outbox.join(ctx, response)
            }
            State::Stable if same_protocols && !g.is_leader(&member_id) => {
                let response =
                    self.generation_response(&args.group_id, &member_id, false, None, false);
                self.outbox.join(ctx, response)
            }
            // New metadata, or the leader asking for a new assignment.
            State::CompletingRebalance | State::Stable => {
                self.update_member_then_rebalance_or_complete_join(now_ms, ctx, args)
            }
            State::Empty => self
                .outbox
                .join(ctx, join_error(&member_id, ResponseError::UnknownMemberId)),
        }
    }

    /// The current generation as a JoinGroup answer for `member_id`.
    pub(super) fn generation_response(
        &self,
        group_id: &str,
        member_id: &str,
        with_members: bool,
        leader: Option<&str>,
        skip_assignment: bool,
    ) -> JoinGroupResponse {
        let g = &self.groups[group_id];
        let protocol = g.protocol_name.as_deref().unwrap_or_default();
        let members = if with_members {
            g.members
                .values()
                .map(|m| {
                    JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(&m.id))
                        .with_group_instance_id(m.instance_id.as_deref().map(str_bytes))
                        .with_metadata(m.metadata(protocol))
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinGroupResponse::default()
            .with_generation_id(g.generation_id)
            .with_protocol_type(g.protocol_type.as_deref().map(str_bytes))
            .with_protocol_name(g.protocol_name.as_deref().map(str_bytes))
            .with_leader(str_bytes(
                leader.or(g.leader_id.as_deref()).unwrap_or_default(),
            ))
            .with_skip_assignment(skip_assignment)
            .with_member_id(str_bytes(member_id))
            .with_members(members)
    }

    /// Takes a JoinGroup's protocols and timeouts for an existing member and
    /// parks `ctx` on it.
    fn update_member(&mut self, group_id: &str, member_id: &str, args: &JoinArgs, ctx: RequestCtx) {
        let g = self.groups.get_mut(group_id).expect("group exists");
        let m = g.members.get_mut(member_id).expect("member exists");
        m.protocols = args.protocols.clone();
        m.rebalance_timeout_ms = args.rebalance_timeout_ms;
        m.session_timeout_ms = args.session_timeout_ms;
        if let Some(replaced) = m.join_waiter.replace(ctx) {
            let response = join_error(member_id, ResponseError::RebalanceInProgress);
            self.outbox.join(replaced, response);
        }
    }

    fn update_member_then_rebalance_or_complete_join(
        &mut self,
        now_ms: i64,
        ctx: RequestCtx,
        args: JoinArgs,
    ) {
        self.update_member(&args.group_id, &args.member_id, &args, ctx);
        self.maybe_prepare_rebalance_or_complete_join(now_ms, &args.group_id);
    }

    fn add_member_then_rebalance_or_complete_join(
        &mut self,
        now_ms: i64,
        ctx: RequestCtx,
        args: JoinArgs,
        id: String,
    ) {
        let g = self.groups.get_mut(&args.group_id).expect("group exists");
        if g.state == State::PreparingRebalance && g.previous_state == State::Empty {
            g.new_member_added = true; // the initial delay extends
        }
        g.add(Member {
            id: id.clone(),
            instance_id: args.instance_id,
            client_id: args.client_id,
            client_host: args.client_host,
            rebalance_timeout_ms: args.rebalance_timeout_ms,
            session_timeout_ms: args.session_timeout_ms,
            protocol_type: args.protocol_type,
            protocols: args.protocols,
            assignment: Bytes::new(),
            join_waiter: Some(ctx),
            sync_waiter: None,
            is_new: true,
        });
        // A new member cannot heartbeat while it waits; a client that gave up
        // would leave a defunct member, so its wait is bounded (Kafka's
        // classicGroupNewMemberJoinTimeoutMs).
        let deadline_ms = now_ms + limits::GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS;
        self.timers
            .schedule(heartbeat_key(&args.group_id, &id), deadline_ms);
        self.maybe_prepare_rebalance_or_complete_join(now_ms, &args.group_id);
    }

    /// A known group.instance.id joins without a member id: it takes over the
    /// old member's place; in a Stable group whose protocol stays the same no
    /// rebalance follows and it gets the current generation.
    fn replace_static_member(
        &mut self,
        now_ms: i64,
        ctx: RequestCtx,
        args: JoinArgs,
        old_id: String,
        new_id: String,
    ) {
        let gid = args.group_id.clone();
        let instance_id = args.instance_id.clone().expect("static member");
        let g = self.groups.get_mut(&gid).expect("group exists");
        let current_leader = g.leader_id.clone();
        let mut old = g
            .members
            .remove(&old_id)
            .expect("static member maps to a member");
        // Fence whoever still waits as the old member id.
        if let Some(waiter) = old.join_waiter.take() {
            self.outbox
                .join(waiter, join_error(&old_id, ResponseError::FencedInstanceId));
        }
        if let Some(waiter) = old.sync_waiter.take() {
            self.outbox
                .sync(waiter, sync_error(ResponseError::FencedInstanceId));
        }
        let session_timeout_ms = old.session_timeout_ms;
        old.id = new_id.clone();
        old.is_new = false;
        g.members.insert(new_id.clone(), old);
        if g.is_leader(&old_id) {
            g.leader_id = Some(new_id.clone());
        }
        g.static_members.insert(instance_id, new_id.clone());
        self.timers.cancel(&heartbeat_key(&gid, &old_id));
        self.timers.schedule(
            heartbeat_key(&gid, &new_id),
            now_ms + session_timeout_ms as i64,
        );
        let version = ctx.version;
        self.update_member(&gid, &new_id, &args, ctx);
        let g = &self.groups[&gid];
        match g.state {
            State::Stable if g.protocol_name.as_deref() == Some(g.select_protocol().as_str()) => {
                // v9+ lets the leader skip the assignment; older leaders are
                // told the old leader id, so they act as followers.
                let response = if version >= 9 {
                    let is_leader = g.is_leader(&new_id);
                    self.generation_response(&gid, &new_id, is_leader, None, is_leader)
                } else {
                    self.generation_response(
                        &gid,
                        &new_id,
                        false,
                        Some(current_leader.as_deref().unwrap_or_default()),
                        false,
                    )
                };
                let g = self.groups.get_mut(&gid).expect("group exists");
                let waiter = g
                    .members
                    .get_mut(&new_id)
                    .and_then(|m| m.join_waiter.take());
                self.outbox.join(waiter.expect("parked just now"), response);
            }
            State::Stable => self.maybe_prepare_rebalance_or_complete_join(now_ms, &gid),
            // The leader may already be assigning to the old id: start over.
            State::CompletingRebalance => self.prepare_rebalance(now_ms, &gid),
            State::PreparingRebalance => self.maybe_complete_join_phase(now_ms, &gid),
            State::Empty => unreachable!("group {gid}: a static member in an Empty group"),
        }
    }
}

/// Kafka's acceptJoiningMember: new members only while the group is below
/// its size limit (counting those that rejoined, during a rebalance).
fn accepts_joining_member(g: &super::Group, member_id: &str) -> bool {
    let known = g.members.get(member_id);
    match g.state {
        State::Empty => true,
        State::PreparingRebalance => {
            known.is_some_and(|m| m.is_awaiting_join())
                || g.awaiting_join_count() < limits::GROUP_MEMBERS_MAX
        }
        State::CompletingRebalance | State::Stable => {
            known.is_some() || g.members.len() < limits::GROUP_MEMBERS_MAX
        }
    }
}
