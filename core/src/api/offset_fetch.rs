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

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::broker::Broker;
use crate::group::Coordinator;
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

pub(crate) fn handle(b: &mut Broker, ctx: RequestCtx, req: OffsetFetchRequest) {
    let mut response = OffsetFetchResponse::default();
    if ctx.version >= 8 {
        for g in req.groups {
            let group_id = g.group_id.0.to_string();
            let topics = g.topics.map(|ts| {
                ts.into_iter()
                    .map(|t| (t.name, t.partition_indexes))
                    .collect()
            });
            let answers = fetch_group(b.groups(), b.txns(), &group_id, topics, req.require_stable);
            let code = if group_id.is_empty() {
                ResponseError::InvalidGroupId.code()
            } else {
                0
            };
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
        let group_id = req.group_id.0.to_string();
        let topics = req.topics.map(|ts| {
            ts.into_iter()
                .map(|t| (t.name, t.partition_indexes))
                .collect()
        });
        let answers = fetch_group(b.groups(), b.txns(), &group_id, topics, req.require_stable);
        if group_id.is_empty() {
            response.error_code = ResponseError::InvalidGroupId.code();
        }
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
    b.respond(&ctx, ResponseKind::OffsetFetch(response));
}
