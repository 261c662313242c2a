//! OffsetDelete (key 47), v0.
//!
//! Deletes committed offsets of some partitions of a group. The group must
//! exist (GROUP_ID_NOT_FOUND) and be Empty unless it uses the consumer
//! protocol (NON_EMPTY_GROUP); a topic its members subscribe to is refused
//! per partition with GROUP_SUBSCRIBED_TO_TOPIC, and a partition this
//! broker does not have gets UNKNOWN_TOPIC_OR_PARTITION. The deletion is
//! answered once meta.db has it; a failed write changes nothing and answers
//! COORDINATOR_NOT_AVAILABLE.
//!
//! ACL: DELETE on the group (GROUP_AUTHORIZATION_FAILED, the response's
//! error), then READ on each topic (TOPIC_AUTHORIZATION_FAILED for its
//! partitions).

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse, ResponseKind};
use kafka_protocol::ResponseError;

use super::{ApiWrite, RequestCtx};
use crate::api::Cx;
use crate::group::{offset_key, TopicPartition};
use crate::io::MetaOp;
use crate::security::acl::{resource, Op};

pub struct PendingOffsetDelete {
    ctx: RequestCtx,
    response: OffsetDeleteResponse,
    group_id: String,
    deleted: Vec<TopicPartition>,
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: OffsetDeleteRequest) {
    let group_id = req.group_id.0.to_string();
    let refusal = if !b
        .core
        .authorized(&ctx, Op::Delete, resource::GROUP, &group_id)
    {
        Err(ResponseError::GroupAuthorizationFailed)
    } else {
        b.core.groups().check_offset_delete(&group_id)
    };
    if let Err(error) = refusal {
        let response = OffsetDeleteResponse::default().with_error_code(error.code());
        return b.core.respond(&ctx, ResponseKind::OffsetDelete(response));
    }
    let unreadable =
        b.core
            .unauthorized_topics(&ctx, Op::Read, req.topics.iter().map(|t| t.name.0.as_str()));
    let mut response = OffsetDeleteResponse::default();
    let mut deleted = Vec::new();
    for topic in &req.topics {
        let name = topic.name.0.to_string();
        let subscribed = b.core.groups().is_subscribed_to(&group_id, &name);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let tp = (name.clone(), p.partition_index);
            let code = if unreadable.contains(&name) {
                ResponseError::TopicAuthorizationFailed.code()
            } else if subscribed {
                ResponseError::GroupSubscribedToTopic.code()
            } else if b
                .core
                .topics()
                .partition(&name, p.partition_index)
                .is_none()
            {
                ResponseError::UnknownTopicOrPartition.code()
            } else {
                if b.core.groups().has_offset(&group_id, &tp) {
                    deleted.push(tp);
                }
                0
            };
            partitions.push(
                OffsetDeleteResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code),
            );
        }
        response.topics.push(
            OffsetDeleteResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    if deleted.is_empty() {
        return b.core.respond(&ctx, ResponseKind::OffsetDelete(response));
    }
    let ops = deleted
        .iter()
        .map(|(t, p)| MetaOp::Delete {
            key: offset_key(&group_id, t, *p),
        })
        .collect();
    b.emit_meta(
        ops,
        ApiWrite::OffsetDelete(PendingOffsetDelete {
            ctx,
            response,
            group_id,
            deleted,
        }),
    );
}

pub(crate) fn apply(b: &mut Cx, pending: PendingOffsetDelete, stored: bool) {
    let PendingOffsetDelete {
        ctx,
        mut response,
        group_id,
        deleted,
    } = pending;
    b.core
        .groups_mut()
        .end_offset_delete(&group_id, &deleted, stored);
    if !stored {
        response.error_code = ResponseError::CoordinatorNotAvailable.code();
    }
    b.core.respond(&ctx, ResponseKind::OffsetDelete(response));
}
