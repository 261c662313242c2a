//! ListGroups (key 16), v0–v5.
//!
//! Every group this broker coordinates (all of them), with its protocol type
//! ("" for a group only used to store offsets). v4 filters by state and v5
//! by type, both case-insensitively as Kafka; every group here is "classic".
//! A group being deleted is not listed (Kafka's Dead groups are gone).
//!
//! ACL: DESCRIBE on the cluster lists every group; otherwise only the groups
//! the principal may DESCRIBE are listed.

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::RequestCtx;
use crate::api::Cx;
use crate::security::acl::{resource, Op};

const GROUP_TYPE: &str = "classic";

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: ListGroupsRequest) {
    let wanted = |filter: &[StrBytes], value: &str| {
        filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value))
    };
    let sees_all = b
        .core
        .authorized(&ctx, Op::Describe, resource::CLUSTER, "kafka-cluster");
    let groups = b
        .core
        .groups()
        .groups()
        .filter(|g| !g.deleting)
        .filter(|g| {
            sees_all
                || b.core
                    .authorized(&ctx, Op::Describe, resource::GROUP, &g.id)
        })
        .filter(|g| {
            wanted(&req.states_filter, g.state.name()) && wanted(&req.types_filter, GROUP_TYPE)
        })
        .map(|g| {
            ListedGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(g.id.clone())))
                .with_protocol_type(StrBytes::from_string(
                    g.protocol_type.clone().unwrap_or_default(),
                ))
                .with_group_state(StrBytes::from_static_str(g.state.name()))
                .with_group_type(StrBytes::from_static_str(GROUP_TYPE))
        })
        .collect();
    b.core.respond(
        &ctx,
        ResponseKind::ListGroups(ListGroupsResponse::default().with_groups(groups)),
    );
}
