//! LeaveGroup (key 13), v0–v5.
//!
//! v0–v2 name one member; v3+ a batch (`members`), each with its own error,
//! and a static member may be removed by group.instance.id alone (an admin).
//! The group rebalances without those who left. For v0–v2 the one member's
//! error is the response's error. An unknown group answers every member
//! UNKNOWN_MEMBER_ID, as Kafka does.
//!
//! ACL: READ on the group (GROUP_AUTHORIZATION_FAILED, the response's error,
//! no members).

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse, ResponseKind};
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::security::acl::{resource, Op};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: LeaveGroupRequest) {
    if !b
        .core
        .authorized(&ctx, Op::Read, resource::GROUP, req.group_id.0.as_str())
    {
        let code = ResponseError::GroupAuthorizationFailed.code();
        let response = LeaveGroupResponse::default().with_error_code(code);
        return b.core.respond(&ctx, ResponseKind::LeaveGroup(response));
    }
    let leaving: Vec<(String, Option<String>)> = if ctx.version < 3 {
        vec![(req.member_id.to_string(), None)]
    } else {
        req.members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|s| s.to_string()),
                )
            })
            .collect()
    };
    let now_ms = b.core.now_ms();
    let result = b
        .core
        .groups_mut()
        .leave(now_ms, req.group_id.0.as_str(), &leaving);
    b.core.flush_group_answers();
    let mut response = LeaveGroupResponse::default();
    match result {
        Err(error) => response.error_code = error.code(),
        Ok(errors) if ctx.version < 3 => response.error_code = errors[0].map_or(0, |e| e.code()),
        Ok(errors) => {
            response.members = req
                .members
                .iter()
                .zip(errors)
                .map(|(m, error)| {
                    MemberResponse::default()
                        .with_member_id(m.member_id.clone())
                        .with_group_instance_id(m.group_instance_id.clone())
                        .with_error_code(error.map_or(0, |e| e.code()))
                })
                .collect();
        }
    }
    b.core.respond(&ctx, ResponseKind::LeaveGroup(response));
}
