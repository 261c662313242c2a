//! The transactional requests, built with kafka-protocol's structs as the
//! Java client's TransactionManager sends them, and the error codes the
//! clients tell apart. Shared by the transactional producer and the copier.

use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
pub const INVALID_TXN_STATE: i16 = 48;
pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
pub const CONCURRENT_TRANSACTIONS: i16 = 51;
pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;
pub const PRODUCER_FENCED: i16 = 90;

/// The answers that say another instance (or the timeout) took the
/// transactional id over: this producer's epoch is dead.
pub fn is_fenced(code: i16) -> bool {
    matches!(
        code,
        INVALID_PRODUCER_EPOCH | PRODUCER_FENCED | INVALID_PRODUCER_ID_MAPPING
    )
}

/// Worth asking again unchanged: a transition in flight, or a retriable error.
pub fn is_retry(code: i16) -> bool {
    code == CONCURRENT_TRANSACTIONS || super::is_retriable(code)
}

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn tid(s: &str) -> TransactionalId {
    TransactionalId(text(s))
}

fn topic_name(s: &str) -> TopicName {
    TopicName(text(s))
}

pub fn init(transactional_id: &str, timeout_ms: i32) -> InitProducerIdRequest {
    // A new instance: no producer id or epoch of its own yet (KIP-360's
    // fields are for bumping one's own epoch, which a restart cannot).
    InitProducerIdRequest::default()
        .with_transactional_id(Some(tid(transactional_id)))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

pub fn add_partitions(
    transactional_id: &str,
    (pid, epoch): (i64, i16),
    topic: &str,
    partitions: &[i32],
) -> AddPartitionsToTxnRequest {
    AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(tid(transactional_id))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(partitions.to_vec())])
}

/// The first error of an AddPartitionsToTxn answer, or 0.
pub fn add_partitions_error(r: &AddPartitionsToTxnResponse) -> i16 {
    let codes = r
        .results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| t.results_by_partition.iter())
        .map(|p| p.partition_error_code);
    codes.into_iter().find(|&c| c != 0).unwrap_or(r.error_code)
}

pub fn add_offsets(
    transactional_id: &str,
    (pid, epoch): (i64, i16),
    group: &str,
) -> AddOffsetsToTxnRequest {
    AddOffsetsToTxnRequest::default()
        .with_transactional_id(tid(transactional_id))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_group_id(GroupId(text(group)))
}

/// Offsets of a standalone consumer (generation -1, no member), as
/// `sendOffsetsToTransaction(offsets, new ConsumerGroupMetadata(group))`.
pub fn txn_offset_commit(
    transactional_id: &str,
    (pid, epoch): (i64, i16),
    group: &str,
    topic: &str,
    offsets: &[i64],
) -> TxnOffsetCommitRequest {
    let partitions = offsets
        .iter()
        .enumerate()
        .map(|(p, &offset)| {
            TxnOffsetCommitRequestPartition::default()
                .with_partition_index(p as i32)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(-1)
        })
        .collect();
    TxnOffsetCommitRequest::default()
        .with_transactional_id(tid(transactional_id))
        .with_group_id(GroupId(text(group)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_generation_id(-1)
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(partitions)])
}

pub fn txn_offset_commit_error(r: &TxnOffsetCommitResponse) -> i16 {
    r.topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.error_code)
        .find(|&c| c != 0)
        .unwrap_or(0)
}

pub fn end_txn(transactional_id: &str, (pid, epoch): (i64, i16), commit: bool) -> EndTxnRequest {
    EndTxnRequest::default()
        .with_transactional_id(tid(transactional_id))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit)
}

/// OffsetFetch v7 with require_stable: offsets staged by an open
/// transaction answer UNSTABLE_OFFSET_COMMIT instead of a stale offset.
pub fn offset_fetch(group: &str, topic: &str, partitions: i32) -> OffsetFetchRequest {
    OffsetFetchRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partition_indexes((0..partitions).collect())]))
        .with_require_stable(true)
}

/// One Produce request holding one batch for each (partition, bytes).
pub fn produce(transactional_id: &str, topic: &str, batches: Vec<(i32, Bytes)>) -> ProduceRequest {
    let data = batches
        .into_iter()
        .map(|(p, records)| {
            PartitionProduceData::default()
                .with_index(p)
                .with_records(Some(records))
        })
        .collect();
    ProduceRequest::default()
        .with_transactional_id(Some(tid(transactional_id)))
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(data)])
}

/// (partition, error code, base offset) of each partition answered.
pub fn produce_answers(r: &ProduceResponse) -> Vec<(i32, i16, i64)> {
    r.responses
        .iter()
        .flat_map(|t| {
            t.partition_responses
                .iter()
                .map(|p| (p.index, p.error_code, p.base_offset))
        })
        .collect()
}
