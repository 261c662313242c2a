//! DeleteGroups (key 42), v0–v2.
//!
//! Deletes Empty groups with their committed offsets: INVALID_GROUP_ID for an
//! empty name, GROUP_ID_NOT_FOUND for a group this broker does not have (or
//! is deleting already), NON_EMPTY_GROUP while it has members. The offsets
//! are deleted from meta.db first, in one batch for the whole request; the
//! groups go away, and the request is answered, when that write completes.
//! Meanwhile the groups answer as Kafka's Dead groups do. A failed write
//! keeps them and answers COORDINATOR_NOT_AVAILABLE for each.
//!
//! ACL: DELETE on each group (GROUP_AUTHORIZATION_FAILED, listed after the
//! others as Kafka does).

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse, ResponseKind};
use kafka_protocol::ResponseError;

use super::{ApiWrite, RequestCtx};
use crate::api::Cx;
use crate::group::{offset_key, TopicPartition};
use crate::io::MetaOp;
use crate::security::acl::{resource, Op};

pub struct PendingDeleteGroups {
    ctx: RequestCtx,
    response: DeleteGroupsResponse,
    /// The groups being deleted and the offset keys deleted with each.
    groups: Vec<(String, Vec<TopicPartition>)>,
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: DeleteGroupsRequest) {
    let mut response = DeleteGroupsResponse::default();
    let mut deleting = Vec::new();
    let mut refused = Vec::new();
    for name in req.groups_names {
        let group_id = name.0.to_string();
        if !b
            .core
            .authorized(&ctx, Op::Delete, resource::GROUP, &group_id)
        {
            refused.push(
                DeletableGroupResult::default()
                    .with_group_id(name)
                    .with_error_code(ResponseError::GroupAuthorizationFailed.code()),
            );
            continue;
        }
        let code = match b.core.groups().check_delete_group(&group_id) {
            Ok(()) => {
                let keys = b.core.groups_mut().begin_delete_group(&group_id);
                deleting.push((group_id, keys));
                0
            }
            Err(e) => e.code(),
        };
        response.results.push(
            DeletableGroupResult::default()
                .with_group_id(name)
                .with_error_code(code),
        );
    }
    response.results.extend(refused);
    let ops: Vec<MetaOp> = deleting
        .iter()
        .flat_map(|(g, keys)| {
            keys.iter().map(move |(t, p)| MetaOp::Delete {
                key: offset_key(g, t, *p),
            })
        })
        .collect();
    let pending = PendingDeleteGroups {
        ctx,
        response,
        groups: deleting,
    };
    if ops.is_empty() {
        // Nothing stored to delete: the groups go now.
        return apply(b, pending, true);
    }
    b.emit_meta(ops, ApiWrite::DeleteGroups(pending));
}

pub(crate) fn apply(b: &mut Cx, pending: PendingDeleteGroups, stored: bool) {
    let PendingDeleteGroups {
        ctx,
        mut response,
        groups,
    } = pending;
    for (group_id, keys) in &groups {
        b.core.groups_mut().end_delete_group(group_id, keys, stored);
        if !stored {
            for r in response
                .results
                .iter_mut()
                .filter(|r| r.group_id.0.as_str() == group_id)
            {
                r.error_code = ResponseError::CoordinatorNotAvailable.code();
            }
        }
    }
    b.core.respond(&ctx, ResponseKind::DeleteGroups(response));
}
