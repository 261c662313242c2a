//! OffsetCommit (key 8), v2–v9.
//!
//! Checks the member and generation as Kafka does (a commit with generation
//! -1 from outside group management goes to an Empty group, creating it),
//! then stores the offsets in meta.db under `offset/<group>/<topic>/<partition>`
//! and answers only once they are stored. A failed write changes nothing and
//! answers COORDINATOR_NOT_AVAILABLE (retriable: the client commits again).
//! Per partition: UNKNOWN_TOPIC_OR_PARTITION for a topic this broker does not
//! have, OFFSET_METADATA_TOO_LARGE past offset.metadata.max.bytes. v2–v4's
//! retention time, when not -1, makes the offsets expire that long after the
//! commit, as in Kafka 4 (`group::expiry`); otherwise the broker's
//! offsets.retention.minutes applies.
//! v9 answers GROUP_ID_NOT_FOUND where older versions get ILLEGAL_GENERATION.
//!
//! ACL: READ on the group (every partition GROUP_AUTHORIZATION_FAILED), then
//! READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions; when no
//! topic is left the group is not consulted, as in KafkaApis).

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse, ResponseKind};
use kafka_protocol::ResponseError;

use super::{ApiWrite, RequestCtx};
use crate::api::Cx;
use crate::group::{offset_key, OffsetRecord, TopicPartition};
use crate::io::MetaOp;
use crate::limits;
use crate::meta;
use crate::security::acl::{resource, Op};

/// A commit waiting for meta.db.
pub struct PendingCommit {
    ctx: RequestCtx,
    response: OffsetCommitResponse,
    group_id: String,
    records: Vec<(TopicPartition, OffsetRecord)>,
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: OffsetCommitRequest) {
    let group_id = req.group_id.0.to_string();
    if !b
        .core
        .authorized(&ctx, Op::Read, resource::GROUP, &group_id)
    {
        let response = every_partition(&req, ResponseError::GroupAuthorizationFailed);
        return b.core.respond(&ctx, ResponseKind::OffsetCommit(response));
    }
    let unreadable =
        b.core
            .unauthorized_topics(&ctx, Op::Read, req.topics.iter().map(|t| t.name.0.as_str()));
    let readable_left = req
        .topics
        .iter()
        .any(|t| !unreadable.contains(t.name.0.as_str()));
    if !req.topics.is_empty() && !readable_left {
        // KafkaApis answers at once when no topic is left to commit.
        let response = every_partition(&req, ResponseError::TopicAuthorizationFailed);
        return b.core.respond(&ctx, ResponseKind::OffsetCommit(response));
    }
    let instance_id = req.group_instance_id.as_ref().map(|s| s.as_str());
    let now_ms = b.core.now_ms();
    let checked = b.core.groups_mut().check_commit(
        now_ms,
        &group_id,
        req.generation_id_or_member_epoch,
        req.member_id.as_str(),
        instance_id,
        ctx.version,
        false,
    );
    // v2-v4's retention time (-1: the broker's) fixes when these offsets
    // expire, as in Kafka's OffsetMetadataManager.expireTimestampMs.
    let expire_timestamp_ms = (req.retention_time_ms != -1 && ctx.version <= 4)
        .then(|| now_ms.saturating_add(req.retention_time_ms));
    let mut response = OffsetCommitResponse::default();
    let mut records = Vec::new();
    for topic in &req.topics {
        let name = topic.name.0.to_string();
        let readable = !unreadable.contains(&name);
        let known = b.core.topics().get(&name).is_some();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let metadata = p
                .committed_metadata
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            let code = match &checked {
                _ if !readable => ResponseError::TopicAuthorizationFailed.code(),
                Err(e) => e.code(),
                Ok(()) if !known => ResponseError::UnknownTopicOrPartition.code(),
                Ok(()) if metadata.len() > limits::OFFSET_METADATA_BYTES_MAX => {
                    ResponseError::OffsetMetadataTooLarge.code()
                }
                Ok(()) => {
                    let record = OffsetRecord {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata,
                        commit_timestamp_ms: now_ms,
                        expire_timestamp_ms,
                    };
                    records.push(((name.clone(), p.partition_index), record));
                    0
                }
            };
            partitions.push(
                OffsetCommitResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code),
            );
        }
        response.topics.push(
            OffsetCommitResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    if records.is_empty() {
        return b.core.respond(&ctx, ResponseKind::OffsetCommit(response));
    }
    let ops = records
        .iter()
        .map(|((topic, partition), record)| MetaOp::Put {
            key: offset_key(&group_id, topic, *partition),
            value: meta::encode(record),
        })
        .collect();
    b.core.groups_mut().begin_commit(&group_id, &records);
    b.emit_meta(
        ops,
        ApiWrite::OffsetCommit(PendingCommit {
            ctx,
            response,
            group_id,
            records,
        }),
    );
}

/// The answer failing every asked partition with `error`.
fn every_partition(req: &OffsetCommitRequest, error: ResponseError) -> OffsetCommitResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error.code())
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

pub(crate) fn apply(b: &mut Cx, pending: PendingCommit, stored: bool) {
    let PendingCommit {
        ctx,
        mut response,
        group_id,
        records,
    } = pending;
    if !stored {
        // Only the partitions that were written fail; the others already had
        // their own error.
        let written: std::collections::BTreeSet<&TopicPartition> =
            records.iter().map(|(tp, _)| tp).collect();
        for t in response.topics.iter_mut() {
            for p in t.partitions.iter_mut() {
                if written.contains(&(t.name.0.to_string(), p.partition_index)) {
                    p.error_code = ResponseError::CoordinatorNotAvailable.code();
                }
            }
        }
    }
    let now_ms = b.core.now_ms();
    b.core
        .groups_mut()
        .end_commit(now_ms, &group_id, records, stored);
    b.core.respond(&ctx, ResponseKind::OffsetCommit(response));
}
