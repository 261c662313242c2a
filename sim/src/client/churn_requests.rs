//! The requests of the churner (`churner.rs`), built with kafka-protocol's
//! structs as AdminClient and the Java consumer and producer send them, for
//! one topic and one group. Which version goes is the churner's draw.

use bytes::Bytes;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::fetch_request::FetchTopic;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

/// AdminClient's default request timeout.
const TIMEOUT_MS: i32 = 30_000;

fn topic_name(topic: &'static str) -> TopicName {
    TopicName(StrBytes::from_static_str(topic))
}

fn group_id(group: &'static str) -> GroupId {
    GroupId(StrBytes::from_static_str(group))
}

/// Metadata of one topic, never auto-created (a field of v4 and later).
pub fn metadata(topic: &'static str) -> MetadataRequest {
    let asked = MetadataRequestTopic::default().with_name(Some(topic_name(topic)));
    MetadataRequest::default()
        .with_topics(Some(vec![asked]))
        .with_allow_auto_topic_creation(false)
}

pub fn create(topic: &'static str, partitions: i32) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)])
        .with_timeout_ms(TIMEOUT_MS)
}

/// Grows the topic to `count` partitions; no assignments (null, as
/// AdminClient sends: an empty list is INVALID_REPLICA_ASSIGNMENT).
pub fn grow(topic: &'static str, count: i32) -> CreatePartitionsRequest {
    CreatePartitionsRequest::default()
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(topic_name(topic))
            .with_count(count)
            .with_assignments(None)])
        .with_timeout_ms(TIMEOUT_MS)
}

/// By name at every version, or by id at v6 (`id` given).
pub fn delete(topic: &'static str, version: i16, id: Option<Uuid>) -> DeleteTopicsRequest {
    let req = if version < 6 {
        DeleteTopicsRequest::default().with_topic_names(vec![topic_name(topic)])
    } else {
        let named = match id {
            Some(id) => DeleteTopicState::default().with_topic_id(id),
            None => DeleteTopicState::default().with_name(Some(topic_name(topic))),
        };
        DeleteTopicsRequest::default().with_topics(vec![named])
    };
    req.with_timeout_ms(TIMEOUT_MS)
}

/// One batch to one partition, acks=all.
pub fn produce(topic: &'static str, partition: i32, records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(TIMEOUT_MS)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

/// Every partition from its position (index = partition), at `isolation`
/// (0 read_uncommitted, 1 read_committed), answered at once (max_wait 0,
/// min_bytes 0): no fetch session.
pub fn fetch(topic: &'static str, positions: &[i64], isolation: i8) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(isolation)
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1024 * 1024)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(super::fetch_partitions(positions))])
}

/// A simple group's commit (generation -1, no member) of `offsets`
/// (index = partition).
pub fn commit(group: &'static str, topic: &'static str, offsets: &[i64]) -> OffsetCommitRequest {
    let partitions = offsets
        .iter()
        .enumerate()
        .map(|(p, &offset)| {
            OffsetCommitRequestPartition::default()
                .with_partition_index(p as i32)
                .with_committed_offset(offset)
        })
        .collect();
    OffsetCommitRequest::default()
        .with_group_id(group_id(group))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(partitions)])
}

/// One group's offsets of partitions 0..`partitions` (the v1-v7 form).
pub fn offset_fetch(
    group: &'static str,
    topic: &'static str,
    partitions: i32,
) -> OffsetFetchRequest {
    OffsetFetchRequest::default()
        .with_group_id(group_id(group))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partition_indexes((0..partitions).collect())]))
}
