//! Request builders and answer readers shared by the core tests.
#![allow(dead_code)]

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::World;

pub fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

pub fn create_topic(w: &mut World, topic: &str, partitions: i32) {
    let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(partitions)
        .with_replication_factor(1)]);
    w.send(99, 7, &req);
    let Some((_, ResponseKind::CreateTopics(r))) = w.recv(99) else {
        panic!("no CreateTopics answer")
    };
    assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0].error_message);
}

/// CreateTopics of one partition with topic configs: (error code, message).
pub fn create_with(w: &mut World, topic: &str, configs: &[(&str, &str)]) -> (i16, Option<String>) {
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    CreatableTopicConfig::default()
                        .with_name(s(k))
                        .with_value(Some(s(v)))
                })
                .collect(),
        )]);
    w.send(99, 7, &req);
    let Some((_, ResponseKind::CreateTopics(r))) = w.recv(99) else {
        panic!("no CreateTopics answer")
    };
    let t = &r.topics[0];
    (
        t.error_code,
        t.error_message.as_ref().map(|m| m.to_string()),
    )
}

pub fn produce_req(topic: &str, partition: i32, records: Bytes, acks: i16) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

pub fn fetch_req(
    topic: &str,
    partition: i32,
    offset: i64,
    max_wait_ms: i32,
    min_bytes: i32,
) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(50 * 1024 * 1024)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1024 * 1024)])])
}

pub fn produce_answer(w: &mut World, conn: u64) -> Option<(i16, i64)> {
    match w.recv(conn)? {
        (_, ResponseKind::Produce(r)) => {
            let p = &r.responses[0].partition_responses[0];
            Some((p.error_code, p.base_offset))
        }
        other => panic!("expected a produce answer, got {other:?}"),
    }
}

/// The whole answer for the one partition of a produce.
pub fn produce_partition_answer(
    w: &mut World,
    conn: u64,
) -> Option<produce_response::PartitionProduceResponse> {
    match w.recv(conn)? {
        (_, ResponseKind::Produce(r)) => Some(r.responses[0].partition_responses[0].clone()),
        other => panic!("expected a produce answer, got {other:?}"),
    }
}

pub fn fetch_answer(w: &mut World, conn: u64) -> Option<fetch_response::PartitionData> {
    match w.recv(conn)? {
        (_, ResponseKind::Fetch(r)) => Some(r.responses[0].partitions[0].clone()),
        other => panic!("expected a fetch answer, got {other:?}"),
    }
}
