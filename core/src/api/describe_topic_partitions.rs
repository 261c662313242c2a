//! DescribeTopicPartitions (key 75), v0 (Kafka 4.3.1's only version).
//!
//! What a 4.x admin's describeTopics asks first (`kafka-topics --describe`),
//! Metadata being its fallback: each topic's id and partitions, this node
//! leading each as its only replica and ISR, no replica offline, and empty
//! eligible-leader-replica lists (KIP-966: one node never has another replica
//! to elect). `topic_authorized_operations` is always filled, as Kafka does
//! whatever the client asked: the topic operations the principal may do (all
//! eight without an authorizer).
//!
//! Paged as Kafka's DescribeTopicPartitionsRequestHandler and
//! KRaftMetadataCache.describeTopicResponse (apache/kafka
//! core/src/main/java/kafka/server/handlers/DescribeTopicPartitionsRequestHandler.java
//! and metadata/src/main/java/org/apache/kafka/metadata/KRaftMetadataCache.java;
//! the 4.3.1 handler's bytecode adds the negative-partition check and the
//! floor of 1 on the limit):
//! - the topics named (every topic when none is) whose names sort at or
//!   after the cursor's topic, in name order;
//! - at most min(response_partition_limit, `DESCRIBE_TOPIC_PARTITIONS_MAX`)
//!   partitions per answer, and at least 1;
//! - the cursor's topic starts at the cursor's partition, any other at 0;
//! - a topic cut short sets next_cursor to it and its first partition left
//!   out; a limit reached exactly at a topic's end sets next_cursor to the
//!   next topic, partition 0, whether that topic exists or not;
//! - a named topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION
//!   (INVALID_TOPIC_EXCEPTION for an illegal name), taking no partitions of
//!   the limit, with its authorized operations as an existing one (Kafka
//!   fills them for every topic it described); asking for every topic never
//!   names a missing one;
//! - a cursor naming a topic the list does not, or a negative partition:
//!   INVALID_REQUEST for every topic named (Kafka's getErrorResponse).
//!
//! ACL: DESCRIBE on each topic. A named topic refused is
//! TOPIC_AUTHORIZATION_FAILED with no id and no partitions, after the
//! others; asking for every topic leaves it out.

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, ResponseKind,
};
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::metadata::topic_name;
use super::{create_topics, RequestCtx};
use crate::api::Cx;
use crate::core_state::Core;
use crate::limits::DESCRIBE_TOPIC_PARTITIONS_MAX;
use crate::security::acl::{resource, Op};

/// The operations Kafka answers for a topic (AclEntry.supportedOperations(TOPIC)).
const TOPIC_OPERATIONS: [Op; 8] = [
    Op::Read,
    Op::Write,
    Op::Create,
    Op::Delete,
    Op::Alter,
    Op::Describe,
    Op::DescribeConfigs,
    Op::AlterConfigs,
];

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: DescribeTopicPartitionsRequest) {
    let response = match describe(b.core, &ctx, &req) {
        Ok(response) => response,
        Err(()) => invalid_request(&req),
    };
    b.core
        .respond(&ctx, ResponseKind::DescribeTopicPartitions(response));
}

/// The answer, or `Err` for a cursor Kafka refuses.
fn describe(
    b: &Core,
    ctx: &RequestCtx,
    req: &DescribeTopicPartitionsRequest,
) -> Result<DescribeTopicPartitionsResponse, ()> {
    let all_topics = req.topics.is_empty();
    let (cursor_topic, cursor_partition) = req
        .cursor
        .as_ref()
        .map_or(("", 0), |c| (c.topic_name.0.as_str(), c.partition_index));
    let mut names: Vec<String> = if all_topics {
        b.topics().names()
    } else {
        req.topics.iter().map(|t| t.name.0.to_string()).collect()
    };
    names.retain(|name| name.as_str() >= cursor_topic);
    names.sort_unstable();
    names.dedup();
    if req.cursor.is_some() && !all_topics && !names.iter().any(|n| n == cursor_topic) {
        return Err(());
    }
    if cursor_partition < 0 {
        return Err(());
    }
    let (names, mut refused): (Vec<String>, Vec<String>) = names
        .into_iter()
        .partition(|name| b.authorized(ctx, Op::Describe, resource::TOPIC, name));
    if all_topics {
        // Not named, so not told of.
        refused.clear();
    }
    let limit = req
        .response_partition_limit
        .clamp(1, DESCRIBE_TOPIC_PARTITIONS_MAX);
    let mut remaining = limit;
    let mut response = DescribeTopicPartitionsResponse::default();
    for name in names {
        if remaining == 0 {
            // Every partition of the topics before fitted exactly: the next
            // page starts with this one (KRaftMetadataCache does not ask
            // whether it exists).
            response.next_cursor = Some(cursor(&name, 0));
            break;
        }
        let Some(topic) = b.topics().get(&name) else {
            if !all_topics {
                let operations = authorized_operations(b, ctx, &name);
                response
                    .topics
                    .push(missing_topic(&name).with_topic_authorized_operations(operations));
            }
            continue;
        };
        let count = topic.partitions.len() as i32;
        let first = if name == cursor_topic {
            cursor_partition
        } else {
            0
        };
        let end = count.min(first.saturating_add(remaining));
        let partitions: Vec<_> = (first..end).map(|p| partition(b, p)).collect();
        response.topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(topic_name(&name)))
                .with_topic_id(topic.id)
                .with_partitions(partitions)
                .with_topic_authorized_operations(authorized_operations(b, ctx, &name)),
        );
        if end < count {
            response.next_cursor = Some(cursor(&name, end));
            break;
        }
        remaining -= (end - first).max(0);
        assert!(remaining >= 0, "took more partitions than the limit allows");
    }
    response.topics.extend(refused.iter().map(|name| {
        DescribeTopicPartitionsResponseTopic::default()
            .with_name(Some(topic_name(name)))
            .with_error_code(ResponseError::TopicAuthorizationFailed.code())
            .with_topic_id(Uuid::nil())
    }));
    Ok(response)
}

fn cursor(name: &str, partition: i32) -> Cursor {
    Cursor::default()
        .with_topic_name(topic_name(name))
        .with_partition_index(partition)
}

/// A named topic this broker does not have.
fn missing_topic(name: &str) -> DescribeTopicPartitionsResponseTopic {
    let error = match create_topics::validate_name(name) {
        Ok(()) => ResponseError::UnknownTopicOrPartition,
        Err(_) => ResponseError::InvalidTopicException,
    };
    DescribeTopicPartitionsResponseTopic::default()
        .with_name(Some(topic_name(name)))
        .with_error_code(error.code())
        .with_topic_id(Uuid::nil())
}

fn partition(b: &Core, index: i32) -> DescribeTopicPartitionsResponsePartition {
    let node = BrokerId(b.config().node_id);
    DescribeTopicPartitionsResponsePartition::default()
        .with_partition_index(index)
        .with_leader_id(node)
        .with_leader_epoch(crate::batch::LEADER_EPOCH)
        .with_replica_nodes(vec![node])
        .with_isr_nodes(vec![node])
        .with_eligible_leader_replicas(Some(Vec::new()))
        .with_last_known_elr(Some(Vec::new()))
        .with_offline_replicas(Vec::new())
}

/// The bits of the topic operations the principal may do on `name`.
fn authorized_operations(b: &Core, ctx: &RequestCtx, name: &str) -> i32 {
    TOPIC_OPERATIONS
        .iter()
        .filter(|op| b.authorized(ctx, **op, resource::TOPIC, name))
        .fold(0, |bits, op| bits | (1 << op.code()))
}

/// Kafka's answer to a request it refuses whole (DescribeTopicPartitionsRequest.getErrorResponse):
/// every topic named, INVALID_REQUEST, nothing else.
fn invalid_request(req: &DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| {
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(t.name.clone()))
                .with_error_code(ResponseError::InvalidRequest.code())
        })
        .collect();
    DescribeTopicPartitionsResponse::default().with_topics(topics)
}
