//! Heartbeat (key 12), v0–v4.
//!
//! Keeps a member's session alive. Answers REBALANCE_IN_PROGRESS while the
//! group prepares a rebalance (the member should rejoin), UNKNOWN_MEMBER_ID
//! for a member the group does not know (or a group it does not have),
//! ILLEGAL_GENERATION for a stale generation, FENCED_INSTANCE_ID for a static
//! member replaced by a newer instance.

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse, ResponseKind};

use super::RequestCtx;
use crate::broker::Broker;

pub(crate) fn handle(b: &mut Broker, ctx: RequestCtx, req: HeartbeatRequest) {
    let now_ms = b.now_ms();
    let instance_id = req.group_instance_id.as_ref().map(|s| s.as_str());
    let error = b.groups_mut().heartbeat(
        now_ms,
        req.group_id.0.as_str(),
        req.generation_id,
        req.member_id.as_str(),
        instance_id,
    );
    let code = error.map_or(0, |e| e.code());
    b.respond(
        &ctx,
        ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code)),
    );
}
