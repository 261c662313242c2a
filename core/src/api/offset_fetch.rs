//! OffsetFetch (key 9), v1–v9.
//!
//! The committed offset of each asked partition, or -1 with empty metadata
//! when there is none (also for unknown groups and topics, as Kafka). A null
//! topic list (v2+) asks for every offset the group has. v8+ asks for many
//! groups at once. Only stored commits are visible.
//!
//! v7+ `require_stable`: a partition with an offset staged by an open
//! transaction (TxnOffsetCommit not yet committed or aborted) answers
//! UNSTABLE_OFFSET_COMMIT, as Kafka's OffsetMetadataManager does.
//! v9's member id and epoch belong to the KIP-848 protocol and are ignored
//! for classic groups, as Kafka does.
//!
//! ACL: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED: the group's error
//! from v8, the response's before; no topics), and DESCRIBE on each topic: an
//! asked topic without it answers TOPIC_AUTHORIZATION_FAILED for its
//! partitions (listed last, as Kafka), and "all topics" leaves it out.

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::core_state::Core;
use crate::group::Coordinator;
use crate::security::acl::{resource, Op};
use crate::txn::Txns;

/// One partition's answer: (partition, offset, leader epoch, metadata, error code).
type Answer = (i32, i64, i32, String, i16);

/// The answers for one group: per topic, per partition; `None` topics means all.
/// An empty group id gets INVALID_GROUP_ID and nothing else.
fn fetch_group(
    groups: &Coordinator,
    txns: &Txns,
    group_id: &str,
    topics: Option<Vec<(TopicName, Vec<i32>)>>,
    require_stable: bool,
) -> Vec<(TopicName, Vec<Answer>)> {
    if group_id.is_empty() {
        return Vec::new();
    }
    let Some(topics) = topics else {
        let mut all: Vec<(TopicName, Vec<Answer>)> = Vec::new();
        for ((topic, partition), r) in groups.all_committed(group_id) {
            let answer = (partition, r.offset, r.leader_epoch, r.metadata, 0);
            match all.last_mut() {
                Some((name, answers)) if name.0.as_str() == topic => answers.push(answer),
                _ => all.push((TopicName(StrBytes::from_string(topic)), vec![answer])),
            }
        }
        return all;
    };
    topics
        .into_iter()
        .map(|(name, partitions)| {
            let answers = partitions
                .into_iter()
                .map(|p| {
                    if require_stable && txns.has_staged_offset(group_id, name.0.as_str(), p) {
                        return (
                            p,
                            -1,
                            -1,
                            String::new(),
                            ResponseError::UnstableOffsetCommit.code(),
                        );
                    }
                    match groups.committed(group_id, name.0.as_str(), p) {
                        Some(r) => (p, r.offset, r.leader_epoch, r.metadata.clone(), 0),
                        None => (p, -1, -1, String::new(), 0),
                    }
                })
                .collect();
            (name, answers)
        })
        .collect()
}

/// One group's answer as KafkaApis gives it: the group's error code and
/// the answers the principal may see.
fn answer_group(
    b: &Core,
    ctx: &RequestCtx,
    group_id: &str,
    topics: Option<Vec<(TopicName, Vec<i32>)>>,
    require_stable: bool,
) -> (i16, Vec<(TopicName, Vec<Answer>)>) {
    if !b.authorized(ctx, Op::Describe, resource::GROUP, group_id) {
        return (ResponseError::GroupAuthorizationFailed.code(), Vec::new());
    }
    if group_id.is_empty() {
        return (ResponseError::InvalidGroupId.code(), Vec::new());
    }
    let describable =
        |name: &TopicName| b.authorized(ctx, Op::Describe, resource::TOPIC, name.0.as_str());
    let Some(topics) = topics else {
        let mut all = fetch_group(b.groups(), b.txns(), group_id, None, require_stable);
        all.retain(|(name, _)| describable(name));
        return (0, all);
    };
    let (allowed, refused): (Vec<_>, Vec<_>) =
        topics.into_iter().partition(|(name, _)| describable(name));
    let mut answers = fetch_group(
        b.groups(),
        b.txns(),
        group_id,
        Some(allowed),
        require_stable,
    );
    let denied = ResponseError::TopicAuthorizationFailed.code();
    answers.extend(refused.into_iter().map(|(name, partitions)| {
        let parts = partitions
            .into_iter()
            .map(|p| (p, -1, -1, String::new(), denied))
            .collect();
        (name, parts)
    }));
    (0, answers)
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: OffsetFetchRequest) {
    let mut response = OffsetFetchResponse::default();
    if ctx.version >= 8 {
        for g in req.groups {
            let topics = g.topics.map(|ts| {
                ts.into_iter()
                    .map(|t| (t.name, t.partition_indexes))
                    .collect()
            });
            let (code, answers) = answer_group(
                b.core,
                &ctx,
                g.group_id.0.as_str(),
                topics,
                req.require_stable,
            );
            let topics = answers
                .into_iter()
                .map(|(name, parts)| {
                    let partitions = parts
                        .into_iter()
                        .map(|(p, offset, epoch, metadata, code)| {
                            OffsetFetchResponsePartitions::default()
                                .with_partition_index(p)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(epoch)
                                .with_metadata(Some(StrBytes::from_string(metadata)))
                                .with_error_code(code)
                        })
                        .collect();
                    OffsetFetchResponseTopics::default()
                        .with_name(name)
                        .with_partitions(partitions)
                })
                .collect();
            response.groups.push(
                OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_topics(topics)
                    .with_error_code(code),
            );
        }
    } else {
        let topics = req.topics.map(|ts| {
            ts.into_iter()
                .map(|t| (t.name, t.partition_indexes))
                .collect()
        });
        let (code, answers) = answer_group(
            b.core,
            &ctx,
            req.group_id.0.as_str(),
            topics,
            req.require_stable,
        );
        response.error_code = code;
        response.topics = answers
            .into_iter()
            .map(|(name, parts)| {
                let partitions = parts
                    .into_iter()
                    .map(|(p, offset, epoch, metadata, code)| {
                        OffsetFetchResponsePartition::default()
                            .with_partition_index(p)
                            .with_committed_offset(offset)
                            .with_committed_leader_epoch(epoch)
                            .with_metadata(Some(StrBytes::from_string(metadata)))
                            .with_error_code(code)
                    })
                    .collect();
                OffsetFetchResponseTopic::default()
                    .with_name(name)
                    .with_partitions(partitions)
            })
            .collect();
    }
    b.core.respond(&ctx, ResponseKind::OffsetFetch(response));
}
