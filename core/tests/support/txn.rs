//! Transactional request helpers for the core tests.
#![allow(dead_code)]

use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;

use super::requests::name;
use super::{producer_batch, Producer, World, T0_MS};

pub fn tid(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_string()))
}

/// InitProducerId for a transactional id: (error, producer id, epoch).
pub fn init_txn(w: &mut World, conn: u64, id: &str, timeout_ms: i32) -> (i16, i64, i16) {
    init_txn_v(w, conn, id, timeout_ms, 4, None)
}

pub fn init_txn_v(
    w: &mut World,
    conn: u64,
    id: &str,
    timeout_ms: i32,
    version: i16,
    expected: Option<(i64, i16)>,
) -> (i16, i64, i16) {
    let (pid, epoch) = expected.unwrap_or((-1, -1));
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(tid(id)))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch);
    w.send(conn, version, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::InitProducerId(r))) => {
            (r.error_code, r.producer_id.0, r.producer_epoch)
        }
        other => panic!("expected InitProducerId answer, got {other:?}"),
    }
}

/// AddPartitionsToTxn v3: the error of each partition, in request order.
pub fn add_partitions(
    w: &mut World,
    conn: u64,
    id: &str,
    pid: i64,
    epoch: i16,
    parts: &[(&str, i32)],
) -> Vec<i16> {
    let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
    for (t, p) in parts {
        match topics.iter_mut().find(|x| x.name.0.as_str() == *t) {
            Some(x) => x.partitions.push(*p),
            None => topics.push(
                AddPartitionsToTxnTopic::default()
                    .with_name(name(t))
                    .with_partitions(vec![*p]),
            ),
        }
    }
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(tid(id))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(topics);
    w.send(conn, 3, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::AddPartitionsToTxn(r))) => r
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| {
                t.results_by_partition
                    .iter()
                    .map(|p| p.partition_error_code)
            })
            .collect(),
        other => panic!("expected AddPartitionsToTxn answer, got {other:?}"),
    }
}

pub fn add_offsets(w: &mut World, conn: u64, id: &str, pid: i64, epoch: i16, group: &str) -> i16 {
    let req = AddOffsetsToTxnRequest::default()
        .with_transactional_id(tid(id))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())));
    w.send(conn, 3, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::AddOffsetsToTxn(r))) => r.error_code,
        other => panic!("expected AddOffsetsToTxn answer, got {other:?}"),
    }
}

#[allow(clippy::too_many_arguments)] // mirrors the request's fields
pub fn txn_offset_commit(
    w: &mut World,
    conn: u64,
    id: &str,
    pid: i64,
    epoch: i16,
    group: &str,
    topic: &str,
    partition: i32,
    offset: i64,
) -> i16 {
    let req = TxnOffsetCommitRequest::default()
        .with_transactional_id(tid(id))
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_generation_id(-1)
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(-1)])]);
    w.send(conn, 3, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::TxnOffsetCommit(r))) => r.topics[0].partitions[0].error_code,
        other => panic!("expected TxnOffsetCommit answer, got {other:?}"),
    }
}

pub fn send_end_txn(
    w: &mut World,
    conn: u64,
    id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
    version: i16,
) {
    let req = EndTxnRequest::default()
        .with_transactional_id(tid(id))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    w.send(conn, version, &req);
}

/// The EndTxn answer on `conn`, if there is one yet.
pub fn end_txn_answer(w: &mut World, conn: u64) -> Option<i16> {
    match w.recv(conn)? {
        (_, ResponseKind::EndTxn(r)) => Some(r.error_code),
        other => panic!("expected EndTxn answer, got {other:?}"),
    }
}

pub fn end_txn(
    w: &mut World,
    conn: u64,
    id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> Option<i16> {
    send_end_txn(w, conn, id, pid, epoch, commit, 3);
    end_txn_answer(w, conn)
}

pub fn txn_batch(values: &[&[u8]], pid: i64, epoch: i16, sequence: i32) -> Bytes {
    producer_batch(
        values,
        T0_MS,
        Compression::None,
        Producer {
            id: pid,
            epoch,
            sequence,
            transactional: true,
        },
    )
}

pub fn fetch_isolated(
    topic: &str,
    partition: i32,
    offset: i64,
    read_committed: bool,
) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(50 * 1024 * 1024)
        .with_isolation_level(if read_committed { 1 } else { 0 })
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1024 * 1024)])])
}

/// ListOffsets latest: (offset) under the given isolation.
pub fn latest_offset(
    w: &mut World,
    conn: u64,
    topic: &str,
    partition: i32,
    read_committed: bool,
) -> i64 {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(if read_committed { 1 } else { 0 })
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(-1)])]);
    w.send(conn, 7, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::ListOffsets(r))) => {
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0);
            p.offset
        }
        other => panic!("expected ListOffsets answer, got {other:?}"),
    }
}

/// AddOffsetsToTxn of `group`, then TxnOffsetCommit of `offset` for
/// `topic` partition 0, on connection 1, each answered without error.
#[allow(clippy::too_many_arguments)]
pub fn stage_offset(
    w: &mut World,
    id: &str,
    pid: i64,
    epoch: i16,
    group: &str,
    topic: &str,
    offset: i64,
) {
    assert_eq!(add_offsets(w, 1, id, pid, epoch, group), 0);
    assert_eq!(
        txn_offset_commit(w, 1, id, pid, epoch, group, topic, 0, offset),
        0
    );
}
