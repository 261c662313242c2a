//! DescribeGroups (key 15), v0–v6.
//!
//! State, protocol type, the chosen protocol and the members (client id,
//! instance id, assignment; metadata only once Stable, as Kafka). A group
//! this broker does not have is reported in state "Dead"; from v6 with
//! GROUP_ID_NOT_FOUND too (KIP-1043). With include_authorized_operations
//! (v3+) the field lists the group operations (READ, DELETE, DESCRIBE) the
//! principal may do (all of them without an authorizer); otherwise it
//! carries Kafka's "not asked" value.
//!
//! ACL: DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED in that group's
//! entry, with empty state and protocol; Kafka lists these first).

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::core_state::Core;
use crate::group::State;
use crate::security::acl::{resource, Op};

/// The group operations answered (Kafka's AclOperation codes as bits):
/// READ (3), DELETE (6), DESCRIBE (8).
const GROUP_OPERATIONS: [Op; 3] = [Op::Read, Op::Delete, Op::Describe];
/// Kafka's value for "authorized operations not requested".
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// The bits of the group operations the principal may do on `group`.
fn authorized_operations(b: &Core, ctx: &RequestCtx, group: &str) -> i32 {
    GROUP_OPERATIONS
        .iter()
        .filter(|op| b.authorized(ctx, **op, resource::GROUP, group))
        .fold(0, |bits, op| bits | (1 << op.code()))
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: DescribeGroupsRequest) {
    let mut refused = Vec::new();
    let mut groups = Vec::with_capacity(req.groups.len());
    for id in req.groups {
        if !b
            .core
            .authorized(&ctx, Op::Describe, resource::GROUP, id.0.as_str())
        {
            // DescribeGroupsResponse.groupError: "" state and protocol.
            refused.push(
                DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(ResponseError::GroupAuthorizationFailed.code())
                    .with_authorized_operations(OPERATIONS_NOT_ASKED),
            );
            continue;
        }
        let operations = if req.include_authorized_operations {
            authorized_operations(b.core, &ctx, id.0.as_str())
        } else {
            OPERATIONS_NOT_ASKED
        };
        let described = DescribedGroup::default()
            .with_group_id(id.clone())
            .with_authorized_operations(operations);
        let Some(g) = b.core.groups().group(id.0.as_str()).filter(|g| !g.deleting) else {
            let mut dead = described.with_group_state(StrBytes::from_static_str("Dead"));
            if ctx.version >= 6 {
                dead.error_code = ResponseError::GroupIdNotFound.code();
                dead.error_message = Some(text(&format!("Group {} not found.", id.0.as_str())));
            }
            groups.push(dead);
            continue;
        };
        let stable = g.state == State::Stable;
        let protocol = g.protocol_name.clone().unwrap_or_default();
        let members = g
            .members
            .values()
            .map(|m| {
                let metadata = if stable {
                    m.metadata(&protocol)
                } else {
                    Default::default()
                };
                DescribedGroupMember::default()
                    .with_member_id(text(&m.id))
                    .with_group_instance_id(m.instance_id.as_deref().map(text))
                    .with_client_id(text(&m.client_id))
                    .with_client_host(text(&m.client_host))
                    .with_member_metadata(metadata)
                    .with_member_assignment(m.assignment.clone())
            })
            .collect();
        groups.push(
            described
                .with_group_state(StrBytes::from_static_str(g.state.name()))
                .with_protocol_type(text(g.protocol_type.as_deref().unwrap_or_default()))
                .with_protocol_data(text(if stable { &protocol } else { "" }))
                .with_members(members),
        );
    }
    refused.extend(groups);
    b.core.respond(
        &ctx,
        ResponseKind::DescribeGroups(DescribeGroupsResponse::default().with_groups(refused)),
    );
}
