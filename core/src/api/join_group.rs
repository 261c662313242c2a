//! JoinGroup (key 11), v0–v9.
//!
//! Classic group membership (see `group::rebalance`): a member joins, waits
//! until the join phase ends (every known member rejoined, the rebalance
//! timeout, or for a new group group.initial.rebalance.delay.ms), and gets
//! the generation; the leader also gets every member's metadata. From v4 a
//! member without an id is first answered MEMBER_ID_REQUIRED with its new id.
//! v0 has no rebalance timeout: the session timeout stands in for it, as in
//! Kafka. A static member (group.instance.id, v5+) rejoining replaces its old
//! id; v9 lets its leader skip the assignment.
//!
//! ACL: READ on the group (GROUP_AUTHORIZATION_FAILED, generation -1).

use kafka_protocol::messages::{JoinGroupRequest, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::group::{join_error, JoinArgs, Protocol};
use crate::security::acl::{resource, Op};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: JoinGroupRequest) {
    if !b
        .core
        .authorized(&ctx, Op::Read, resource::GROUP, req.group_id.0.as_str())
    {
        // JoinGroupRequest.getErrorResponse: the protocol name is "" before v7.
        let response = join_error("", ResponseError::GroupAuthorizationFailed)
            .with_protocol_name((ctx.version < 7).then(StrBytes::default));
        return b.core.respond(&ctx, ResponseKind::JoinGroup(response));
    }
    let rebalance_timeout_ms = if ctx.version == 0 || req.rebalance_timeout_ms < 0 {
        req.session_timeout_ms
    } else {
        req.rebalance_timeout_ms
    };
    let args = JoinArgs {
        group_id: req.group_id.0.to_string(),
        member_id: req.member_id.to_string(),
        instance_id: req.group_instance_id.map(|s| s.to_string()),
        client_id: ctx.client_id.to_string(),
        client_host: b.core.client_host(ctx.conn),
        session_timeout_ms: req.session_timeout_ms,
        rebalance_timeout_ms,
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .into_iter()
            .map(|p| Protocol {
                name: p.name.to_string(),
                metadata: p.metadata,
            })
            .collect(),
    };
    let now_ms = b.core.now_ms();
    b.core.groups_mut().join(now_ms, ctx, args);
    b.core.flush_group_answers();
}
