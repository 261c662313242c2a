//! SyncGroup (key 14), v0–v5.
//!
//! The leader hands in the assignment of every member; the followers'
//! SyncGroup waits for it. Once it arrives all are answered and the group is
//! Stable. In a Stable group SyncGroup returns the member's assignment. A
//! rebalance that starts meanwhile answers waiting members
//! REBALANCE_IN_PROGRESS. v5 carries the protocol type and name, checked
//! against the group's (INCONSISTENT_GROUP_PROTOCOL).
//!
//! ACL: READ on the group (GROUP_AUTHORIZATION_FAILED).

use kafka_protocol::messages::{ResponseKind, SyncGroupRequest};
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::group::{sync_error, SyncArgs};
use crate::security::acl::{resource, Op};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: SyncGroupRequest) {
    if !b
        .core
        .authorized(&ctx, Op::Read, resource::GROUP, req.group_id.0.as_str())
    {
        let response = sync_error(ResponseError::GroupAuthorizationFailed);
        return b.core.respond(&ctx, ResponseKind::SyncGroup(response));
    }
    let args = SyncArgs {
        group_id: req.group_id.0.to_string(),
        generation_id: req.generation_id,
        member_id: req.member_id.to_string(),
        instance_id: req.group_instance_id.map(|s| s.to_string()),
        protocol_type: req.protocol_type.map(|s| s.to_string()),
        protocol_name: req.protocol_name.map(|s| s.to_string()),
        assignments: req
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect(),
    };
    let now_ms = b.core.now_ms();
    b.core.groups_mut().sync(now_ms, ctx, args);
    b.core.flush_group_answers();
}
