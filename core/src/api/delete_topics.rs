//! DeleteTopics (key 20), v1–v6.
//!
//! v1–v5 name topics; v6 names them or gives their ids. The topics are
//! removed from meta.db in one batch, with every group's committed offsets
//! of their partitions (as Kafka's OffsetMetadataManager.onPartitionsDeleted);
//! when that is stored they leave memory, their directories are deleted, and
//! the request is answered. A directory
//! left behind by a crash is deleted at the next start (boot finds no topic
//! for it).
//!
//! ACL: DELETE on the cluster or each topic; DESCRIBE on it to be told of it (see `refusal`).

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    DeleteTopicsRequest, DeleteTopicsResponse, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::{ApiWrite, RequestCtx};
use crate::api::Cx;
use crate::core_state::Core;
use crate::group::{offset_key, TopicPartition};
use crate::io::MetaOp;
use crate::meta;
use crate::security::acl::{resource, Op};

pub struct PendingDelete {
    ctx: RequestCtx,
    response: DeleteTopicsResponse,
    /// (name, id) of each topic to remove.
    topics: Vec<(String, Uuid)>,
    /// The committed offsets of their partitions, by group.
    offsets: Vec<(String, TopicPartition)>,
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: DeleteTopicsRequest) {
    // Both forms name topics; v6 may give an id instead of a name.
    let asked: Vec<(Option<String>, Uuid)> = if ctx.version >= 6 {
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), Uuid::nil()))
            .collect()
    };
    let may_delete_any = b
        .core
        .authorized(&ctx, Op::Delete, resource::CLUSTER, "kafka-cluster");
    let mut response = DeleteTopicsResponse::default();
    let mut topics = Vec::new();
    for (name, id) in asked {
        let found = match &name {
            Some(n) => b.core.topics().get(n).map(|t| (n.clone(), t.id)),
            None => b
                .core
                .topics()
                .iter()
                .find(|(_, t)| t.id == id)
                .map(|(n, t)| (n.clone(), t.id)),
        };
        if !may_delete_any {
            if let Some(refused) = refusal(b.core, &ctx, name.as_deref(), found.as_ref(), id) {
                response.responses.push(refused);
                continue;
            }
        }
        let mut result = DeletableTopicResult::default()
            .with_name(name.clone().map(|n| TopicName(StrBytes::from_string(n))))
            .with_topic_id(id);
        match found {
            Some((n, topic_id)) if !topics.iter().any(|(t, _)| *t == n) => {
                result.name = Some(TopicName(StrBytes::from_string(n.clone())));
                result.topic_id = topic_id;
                topics.push((n, topic_id));
            }
            Some(_) => result.error_code = ResponseError::InvalidRequest.code(),
            None if name.is_some() => {
                result.error_code = ResponseError::UnknownTopicOrPartition.code()
            }
            None => result.error_code = ResponseError::UnknownTopicId.code(),
        }
        response.responses.push(result);
    }
    if topics.is_empty() {
        return b.core.respond(&ctx, ResponseKind::DeleteTopics(response));
    }
    for (n, _) in &topics {
        b.core.mark_topic_busy(n);
    }
    let mut ops: Vec<MetaOp> = topics
        .iter()
        .map(|(n, _)| MetaOp::Delete {
            key: meta::topic_key(n),
        })
        .collect();
    // Its partitions' recovery checkpoints, log starts and committed
    // offsets go with it.
    let mut offsets = Vec::new();
    for (n, id) in &topics {
        let partitions = b
            .core
            .topics()
            .get(n)
            .map_or(0, |t| t.partitions.len() as i32);
        ops.extend(crate::checkpoint::delete_ops(id, partitions));
        ops.extend(meta::log_start_delete_ops(id, partitions));
        offsets.extend(b.core.groups().offsets_of_topic(n));
    }
    ops.extend(offsets.iter().map(|(group, (t, p))| MetaOp::Delete {
        key: offset_key(group, t, *p),
    }));
    b.emit_meta(
        ops,
        ApiWrite::DeleteTopics(PendingDelete {
            ctx,
            response,
            topics,
            offsets,
        }),
    );
}

/// The answer for an asked topic the ACLs refuse, if they do; `found` is the
/// topic it names (by `name`, or else by `id`), if it exists. As Kafka's
/// ControllerApis.deleteTopics: by name, a topic the principal may not
/// DESCRIBE is refused whether it exists or not; by id, an unknown id stays
/// UNKNOWN_TOPIC_ID and a refused topic it may not DESCRIBE goes unnamed.
fn refusal(
    b: &Core,
    ctx: &RequestCtx,
    name: Option<&str>,
    found: Option<&(String, Uuid)>,
    id: Uuid,
) -> Option<DeletableTopicResult> {
    let may = |op, topic: &str| b.authorized(ctx, op, resource::TOPIC, topic);
    let refused = |name: Option<&str>, id| {
        DeletableTopicResult::default()
            .with_name(name.map(|n| TopicName(StrBytes::from_string(n.to_string()))))
            .with_topic_id(id)
            .with_error_code(ResponseError::TopicAuthorizationFailed.code())
            .with_error_message(Some(StrBytes::from_static_str(
                "Topic authorization failed.",
            )))
    };
    match (name, found) {
        (Some(n), _) if !may(Op::Describe, n) => Some(refused(Some(n), Uuid::nil())),
        (Some(n), Some(_)) if !may(Op::Delete, n) => Some(refused(Some(n), Uuid::nil())),
        (None, Some((n, _))) if !may(Op::Delete, n) => {
            let shown = may(Op::Describe, n).then_some(n.as_str());
            Some(refused(shown, id))
        }
        _ => None,
    }
}

pub(crate) fn apply(b: &mut Cx, mut pending: PendingDelete, stored: bool) {
    for (name, id) in &pending.topics {
        b.core.unmark_topic_busy(name);
        let still_there = b.core.topics().get(name).is_some_and(|t| t.id == *id);
        if stored && still_there {
            b.core.forget_topic(name, id);
        } else if !stored {
            for r in pending.response.responses.iter_mut() {
                if r.name.as_ref().is_some_and(|n| n.0.as_str() == name) {
                    r.error_code = ResponseError::UnknownServerError.code();
                    r.error_message = Some(StrBytes::from_static_str("meta.db write failed"));
                }
            }
        }
    }
    if stored {
        b.core
            .groups_mut()
            .end_topic_offsets_delete(&pending.offsets);
        b.core.request_sync();
        // Produce and WriteTxnMarkers requests waiting on a deleted
        // partition are answered now.
        b.complete_durable_writes();
    }
    b.core
        .respond(&pending.ctx, ResponseKind::DeleteTopics(pending.response));
}
