//! DescribeGroups (key 15), v0–v6.
//!
//! State, protocol type, the chosen protocol and the members (client id,
//! instance id, assignment; metadata only once Stable, as Kafka). A group
//! this broker does not have is reported in state "Dead"; from v6 with
//! GROUP_ID_NOT_FOUND too (KIP-1043). With include_authorized_operations
//! (v3+) every group operation is allowed (no ACLs yet); otherwise the field
//! carries Kafka's "not asked" value.

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::broker::Broker;
use crate::group::State;

/// Kafka's AclOperation codes allowed on a group: READ (3), DELETE (6), DESCRIBE (8).
const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);
/// Kafka's value for "authorized operations not requested".
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub(crate) fn handle(b: &mut Broker, ctx: RequestCtx, req: DescribeGroupsRequest) {
    let operations = if req.include_authorized_operations {
        GROUP_OPERATIONS
    } else {
        OPERATIONS_NOT_ASKED
    };
    let mut groups = Vec::with_capacity(req.groups.len());
    for id in req.groups {
        let described = DescribedGroup::default()
            .with_group_id(id.clone())
            .with_authorized_operations(operations);
        let Some(g) = b.groups().group(id.0.as_str()).filter(|g| !g.deleting) else {
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
    b.respond(
        &ctx,
        ResponseKind::DescribeGroups(DescribeGroupsResponse::default().with_groups(groups)),
    );
}
