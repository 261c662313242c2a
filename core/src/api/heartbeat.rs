//! Heartbeat (key 12), v0–v4.
//!
//! Keeps a member's session alive. Answers REBALANCE_IN_PROGRESS while the
//! group prepares a rebalance (the member should rejoin), UNKNOWN_MEMBER_ID
//! for a member the group does not know (or a group it does not have),
//! ILLEGAL_GENERATION for a stale generation, FENCED_INSTANCE_ID for a static
//! member replaced by a newer instance.
//!
//! ACL: READ on the group (GROUP_AUTHORIZATION_FAILED).

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse, ResponseKind};
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::security::acl::{resource, Op};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: HeartbeatRequest) {
    if !b
        .core
        .authorized(&ctx, Op::Read, resource::GROUP, req.group_id.0.as_str())
    {
        let code = ResponseError::GroupAuthorizationFailed.code();
        let response = HeartbeatResponse::default().with_error_code(code);
        return b.core.respond(&ctx, ResponseKind::Heartbeat(response));
    }
    let now_ms = b.core.now_ms();
    let instance_id = req.group_instance_id.as_ref().map(|s| s.as_str());
    let error = b.core.groups_mut().heartbeat(
        now_ms,
        req.group_id.0.as_str(),
        req.generation_id,
        req.member_id.as_str(),
        instance_id,
    );
    let code = error.map_or(0, |e| e.code());
    b.core.respond(
        &ctx,
        ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code)),
    );
}
