//! DeleteRecords: the log start moves inside a segment, durably before the
//! answer; what readers see below it; the segments wholly below it go; the
//! start survives restarts; errors; producer and transaction state.

mod support;

use doze_core::{BrokerConfig, MetaOp, PartitionDir, SegmentFile};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use support::requests::*;
use support::txn::*;
use support::*;

const OFFSET_OUT_OF_RANGE: i16 = 1;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const KAFKA_STORAGE_ERROR: i16 = 56;
const POLICY_VIOLATION: i16 = 44;

fn small_segments() -> BrokerConfig {
    BrokerConfig {
        segment_bytes: 2048,
        ..Default::default()
    }
}

fn delete_req(parts: &[(&str, i32, i64)]) -> DeleteRecordsRequest {
    let mut topics: Vec<DeleteRecordsTopic> = Vec::new();
    for (t, p, offset) in parts {
        let partition = DeleteRecordsPartition::default()
            .with_partition_index(*p)
            .with_offset(*offset);
        match topics.iter_mut().find(|x| x.name.0.as_str() == *t) {
            Some(x) => x.partitions.push(partition),
            None => topics.push(
                DeleteRecordsTopic::default()
                    .with_name(name(t))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    DeleteRecordsRequest::default()
        .with_topics(topics)
        .with_timeout_ms(30_000)
}

/// The answer of a DeleteRecords: (error, low watermark) per partition.
fn delete_answer(w: &mut World, conn: u64) -> Option<Vec<(i16, i64)>> {
    match w.recv(conn)? {
        (_, ResponseKind::DeleteRecords(r)) => Some(
            r.topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (p.error_code, p.low_watermark)))
                .collect(),
        ),
        other => panic!("expected a DeleteRecords answer, got {other:?}"),
    }
}

/// DeleteRecords of one partition with only meta.db writes completed: the
/// syncs in flight (of the segments' removals) are left so, for a power cut
/// to undo the removals.
fn delete_records_unsynced(w: &mut World, topic: &str, offset: i64) -> (i16, i64) {
    assert!(!w.auto_io);
    w.send(5, 2, &delete_req(&[(topic, 0, offset)]));
    loop {
        if let Some(answer) = delete_answer(w, 5) {
            assert_eq!(answer.len(), 1);
            return answer[0];
        }
        w.complete_first_meta();
    }
}

/// DeleteRecords of one partition at `version`: (error, low watermark).
fn delete_records(w: &mut World, topic: &str, partition: i32, offset: i64) -> (i16, i64) {
    w.send(5, 2, &delete_req(&[(topic, partition, offset)]));
    let answer = delete_answer(w, 5).expect("DeleteRecords answered");
    assert_eq!(answer.len(), 1);
    answer[0]
}

fn earliest(w: &mut World, topic: &str, partition: i32) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(-2)])]);
    w.send(6, 7, &req);
    match w.recv(6) {
        Some((_, ResponseKind::ListOffsets(r))) => {
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0);
            p.offset
        }
        other => panic!("expected ListOffsets answer, got {other:?}"),
    }
}

/// Produces `batches` batches of `per_batch` 100-byte records to `topic`-0.
fn produce_batches(w: &mut World, topic: &str, batches: usize, per_batch: usize) {
    for i in 0..batches {
        let values: Vec<Vec<u8>> = (0..per_batch).map(|_| vec![(i % 251) as u8; 100]).collect();
        let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
        w.send(1, 9, &produce_req(topic, 0, batch(&refs, T0_MS), -1));
        assert_eq!(produce_answer(w, 1).map(|a| a.0), Some(0));
    }
}

fn log_start_key_present(w: &World) -> bool {
    w.meta.keys().any(|k| k.starts_with(b"logstart/"))
}

fn segment_bases(w: &World, topic: &str) -> Vec<i64> {
    let dir = PartitionDir::new(topic, 0);
    w.files()
        .keys()
        .filter(|(d, _, kind)| *d == dir && *kind == SegmentFile::Log)
        .map(|(_, base, _)| *base)
        .collect()
}

#[test]
fn the_start_moves_inside_a_batch_and_readers_see_it() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 4, 5); // offsets 0..20, batches of 5
    assert_eq!(delete_records(&mut w, "t", 0, 7), (0, 7));
    let log = w.broker.partition("t", 0).unwrap();
    assert_eq!(log.log_start_offset(), 7);
    assert_eq!(earliest(&mut w, "t", 0), 7);
    // Below the start: out of range, and, as from Kafka, no offsets at
    // all in the answer (the consumer asks ListOffsets, above, instead).
    w.send(2, 12, &fetch_req("t", 0, 6, 0, 1));
    let p = fetch_answer(&mut w, 2).unwrap();
    assert_eq!(p.error_code, OFFSET_OUT_OF_RANGE);
    assert_eq!(
        (p.high_watermark, p.last_stable_offset, p.log_start_offset),
        (-1, -1, -1)
    );
    // At the start: the whole batch holding it, as Kafka sends it (clients
    // skip the records below the offset they asked for).
    w.send(2, 12, &fetch_req("t", 0, 7, 0, 1));
    let p = fetch_answer(&mut w, 2).unwrap();
    assert_eq!(p.error_code, 0);
    assert_eq!(p.log_start_offset, 7);
    let offsets: Vec<i64> = decode_values(p.records.unwrap())
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    assert_eq!(offsets.first(), Some(&5), "sent from the batch's base");
    assert_eq!(offsets.last(), Some(&19));
    // A produce answer carries the new start too.
    w.send(1, 9, &produce_req("t", 0, batch(&[b"x"], T0_MS), -1));
    match w.recv(1) {
        Some((_, ResponseKind::Produce(r))) => {
            assert_eq!(r.responses[0].partition_responses[0].log_start_offset, 7)
        }
        other => panic!("expected a produce answer, got {other:?}"),
    }
}

#[test]
fn the_start_is_durable_before_the_answer() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 2, 5);
    w.auto_io = false;
    w.send(5, 0, &delete_req(&[("t", 0, 3)]));
    assert!(w.recv(5).is_none(), "answered before meta.db has the start");
    assert_eq!(
        w.broker.partition("t", 0).unwrap().log_start_offset(),
        0,
        "memory moved before meta.db"
    );
    assert_eq!(w.pending_meta.len(), 1);
    let (_, ops) = &w.pending_meta[0];
    let id = {
        let topics = w.broker.topic_names();
        assert_eq!(topics, vec!["t".to_string()]);
        // The key names the topic id; the value is JSON.
        match &ops[0] {
            MetaOp::Put { key, value } => {
                let key = String::from_utf8(key.clone()).unwrap();
                assert!(key.starts_with("logstart/") && key.ends_with("/0"), "{key}");
                assert_eq!(value.as_slice(), br#"{"offset":3}"#);
                key
            }
            other => panic!("expected a put, got {other:?}"),
        }
    };
    w.complete_io();
    assert_eq!(delete_answer(&mut w, 5), Some(vec![(0, 3)]));
    assert!(w.meta.contains_key(id.as_bytes()));
    assert_eq!(w.broker.partition("t", 0).unwrap().log_start_offset(), 3);
}

#[test]
fn a_failed_meta_write_changes_nothing() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 2, 5);
    w.fail_next_meta = true;
    assert_eq!(delete_records(&mut w, "t", 0, 4), (KAFKA_STORAGE_ERROR, -1));
    assert_eq!(w.broker.partition("t", 0).unwrap().log_start_offset(), 0);
    assert!(!log_start_key_present(&w));
    assert_eq!(earliest(&mut w, "t", 0), 0);
    // The client retries; this time it lands.
    assert_eq!(delete_records(&mut w, "t", 0, 4), (0, 4));
}

#[test]
fn offsets_out_of_range_and_the_high_watermark() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 2, 5); // high watermark 10
    assert_eq!(
        delete_records(&mut w, "t", 0, 11),
        (OFFSET_OUT_OF_RANGE, -1)
    );
    assert_eq!(
        delete_records(&mut w, "t", 0, -2),
        (OFFSET_OUT_OF_RANGE, -1)
    );
    assert!(!log_start_key_present(&w));
    // -1 is the high watermark; the high watermark itself is allowed.
    assert_eq!(delete_records(&mut w, "t", 0, -1), (0, 10));
    assert_eq!(earliest(&mut w, "t", 0), 10);
    w.send(2, 12, &fetch_req("t", 0, 10, 0, 1));
    let p = fetch_answer(&mut w, 2).unwrap();
    assert_eq!(p.error_code, 0);
    assert!(p.records.unwrap().is_empty());
    // New records land after it and are read.
    produce_batches(&mut w, "t", 1, 2);
    w.send(2, 12, &fetch_req("t", 0, 10, 0, 1));
    let p = fetch_answer(&mut w, 2).unwrap();
    let offsets: Vec<i64> = decode_values(p.records.unwrap())
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    assert_eq!(offsets, vec![10, 11]);
}

#[test]
fn at_or_below_the_start_answers_it_without_a_write() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 2, 5);
    assert_eq!(delete_records(&mut w, "t", 0, 6), (0, 6));
    w.auto_io = false;
    for offset in [6, 2, 0] {
        w.send(5, 1, &delete_req(&[("t", 0, offset)]));
        assert_eq!(delete_answer(&mut w, 5), Some(vec![(0, 6)]), "at {offset}");
        assert!(w.pending_meta.is_empty());
    }
    // An empty log: -1 is its high watermark, 0, the start already.
    w.auto_io = true;
    create_topic(&mut w, "empty", 1);
    assert_eq!(delete_records(&mut w, "empty", 0, -1), (0, 0));
}

#[test]
fn unknown_topics_and_partitions() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 2);
    produce_batches(&mut w, "t", 1, 5);
    w.send(
        5,
        2,
        &delete_req(&[("t", 0, 2), ("nope", 0, 1), ("t", 7, 1), ("t", 1, 0)]),
    );
    let answer = delete_answer(&mut w, 5).unwrap();
    assert_eq!(
        answer,
        vec![
            (0, 2),
            (UNKNOWN_TOPIC_OR_PARTITION, -1),
            (0, 0),
            (UNKNOWN_TOPIC_OR_PARTITION, -1),
        ],
        "t (0, 7, 1), then nope"
    );
}

#[test]
fn a_partition_named_twice_counts_once_with_its_last_offset() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 2, 5);
    w.send(5, 2, &delete_req(&[("t", 0, 8), ("t", 0, 3)]));
    assert_eq!(delete_answer(&mut w, 5), Some(vec![(0, 3)]));
}

#[test]
fn requests_on_one_topic_wait_for_the_write_in_flight() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 2, 5);
    w.auto_io = false;
    w.send(5, 2, &delete_req(&[("t", 0, 8)]));
    w.send(7, 2, &delete_req(&[("t", 0, 3)]));
    assert_eq!(w.pending_meta.len(), 1, "the second waits for the first");
    w.complete_io();
    assert_eq!(delete_answer(&mut w, 5), Some(vec![(0, 8)]));
    // The second ran once the first was stored: 3 is below the start now.
    assert_eq!(delete_answer(&mut w, 7), Some(vec![(0, 8)]));
    assert!(w.pending_meta.is_empty());
}

#[test]
fn segments_wholly_below_the_start_are_deleted_never_the_active_one() {
    let mut w = World::new(small_segments());
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 30, 1); // ~170 bytes each: about 11 a segment
    let before = segment_bases(&w, "t");
    assert!(before.len() >= 3, "{before:?}");
    // Inside the second segment: the first goes, the second stays.
    let start = before[1] + 2;
    assert_eq!(delete_records(&mut w, "t", 0, start), (0, start));
    assert_eq!(segment_bases(&w, "t"), before[1..].to_vec());
    let log = w.broker.partition("t", 0).unwrap();
    assert_eq!(log.segments().next().unwrap().base_offset, before[1]);
    assert_eq!(log.log_start_offset(), start);
    // At the start of the active segment (the high watermark's): every
    // older segment goes; the active one stays though nothing of it is left.
    assert_eq!(delete_records(&mut w, "t", 0, -1), (0, 30));
    let after = segment_bases(&w, "t");
    assert_eq!(after, vec![*before.last().unwrap()]);
    assert_eq!(earliest(&mut w, "t", 0), 30);
}

#[test]
fn the_start_survives_restarts() {
    let mut w = World::new(small_segments());
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 30, 1);
    let bases = segment_bases(&w, "t");
    let start = bases[1] + 3;
    assert_eq!(delete_records(&mut w, "t", 0, start), (0, start));
    w.stop_and_restart();
    assert_eq!(
        w.broker.partition("t", 0).unwrap().log_start_offset(),
        start
    );
    assert_eq!(earliest(&mut w, "t", 0), start);
    w.restart(true);
    assert_eq!(
        w.broker.partition("t", 0).unwrap().log_start_offset(),
        start
    );
    w.send(2, 12, &fetch_req("t", 0, start - 1, 0, 1));
    assert_eq!(
        fetch_answer(&mut w, 2).unwrap().error_code,
        OFFSET_OUT_OF_RANGE
    );
    w.send(2, 12, &fetch_req("t", 0, start, 0, 1));
    let p = fetch_answer(&mut w, 2).unwrap();
    assert_eq!(p.error_code, 0);
    assert_eq!(decode_values(p.records.unwrap())[0].0, start);
}

#[test]
fn segments_a_crash_brought_back_go_on_the_next_retention_check() {
    let mut w = World::new(small_segments());
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 30, 1);
    let bases = segment_bases(&w, "t");
    let start = bases[2] + 1;
    w.auto_io = false;
    assert_eq!(delete_records_unsynced(&mut w, "t", start), (0, start));
    assert_eq!(segment_bases(&w, "t"), bases[2..].to_vec());
    assert!(!w.pending_syncs.is_empty(), "the deletions' sync in flight");
    // A power cut undoes the deletions (never synced).
    w.auto_io = true;
    w.restart(true);
    assert_eq!(segment_bases(&w, "t"), bases, "the power cut undid them");
    let log = w.broker.partition("t", 0).unwrap();
    assert_eq!(log.log_start_offset(), start, "the stored start wins");
    assert_eq!(log.segments().next().unwrap().base_offset, 0);
    assert_eq!(earliest(&mut w, "t", 0), start);
    w.send(2, 12, &fetch_req("t", 0, 0, 0, 1));
    assert_eq!(
        fetch_answer(&mut w, 2).unwrap().error_code,
        OFFSET_OUT_OF_RANGE
    );
    w.advance(w.config.retention_check_interval_ms + 1);
    assert_eq!(segment_bases(&w, "t"), bases[2..].to_vec());
    assert_eq!(
        w.broker.partition("t", 0).unwrap().log_start_offset(),
        start
    );
}

#[test]
fn retention_moves_the_start_past_a_stored_one() {
    let mut w = World::new(BrokerConfig {
        retention_bytes: 4096,
        ..small_segments()
    });
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 40, 1);
    assert_eq!(delete_records(&mut w, "t", 0, 1), (0, 1));
    w.advance(w.config.retention_check_interval_ms + 1);
    let first = segment_bases(&w, "t")[0];
    assert!(first > 1);
    w.stop_and_restart();
    assert_eq!(
        earliest(&mut w, "t", 0),
        first,
        "max(stored, first segment)"
    );
}

#[test]
fn deleting_the_topic_removes_the_stored_start() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 2, 5);
    assert_eq!(delete_records(&mut w, "t", 0, 4), (0, 4));
    assert!(log_start_key_present(&w));
    let req = DeleteTopicsRequest::default()
        .with_topics(vec![DeleteTopicState::default().with_name(Some(name("t")))])
        .with_timeout_ms(30_000);
    w.send(9, 6, &req);
    match w.recv(9) {
        Some((_, ResponseKind::DeleteTopics(r))) => assert_eq!(r.responses[0].error_code, 0),
        other => panic!("expected a DeleteTopics answer, got {other:?}"),
    }
    assert!(!log_start_key_present(&w));
    // A topic of the same name starts at 0.
    create_topic(&mut w, "t", 1);
    w.stop_and_restart();
    assert_eq!(earliest(&mut w, "t", 0), 0);
}

#[test]
fn idempotent_producers_keep_their_state() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let send = |w: &mut World, seq: i32| {
        w.send(
            1,
            9,
            &produce_req("t", 0, idem_batch(&[b"a", b"b"], 7, 0, seq), -1),
        );
        produce_answer(w, 1).unwrap()
    };
    assert_eq!(send(&mut w, 0), (0, 0));
    assert_eq!(send(&mut w, 2), (0, 2));
    assert_eq!(delete_records(&mut w, "t", 0, -1), (0, 4));
    // As Kafka since KIP-360: the producer is still known, so a retry is a
    // duplicate and a gap is out of order.
    assert_eq!(send(&mut w, 2), (0, 2), "a retry of the last batch");
    assert_eq!(
        send(&mut w, 6).0,
        ResponseError::OutOfOrderSequenceNumber.code()
    );
    assert_eq!(send(&mut w, 4), (0, 4));
    let req = DescribeProducersRequest::default().with_topics(vec![
        describe_producers_request::TopicRequest::default()
            .with_name(name("t"))
            .with_partition_indexes(vec![0]),
    ]);
    w.send(3, 0, &req);
    match w.recv(3) {
        Some((_, ResponseKind::DescribeProducers(r))) => {
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.active_producers.len(), 1);
            assert_eq!(p.active_producers[0].last_sequence, 5);
        }
        other => panic!("expected DescribeProducers, got {other:?}"),
    }
}

#[test]
fn an_open_transaction_below_the_start_stays_open_and_the_lso_counts_from_the_start() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 1, 2); // 0, 1
    let (e, pid, epoch) = init_txn(&mut w, 1, "x", 60_000);
    assert_eq!(e, 0);
    assert_eq!(
        add_partitions(&mut w, 1, "x", pid, epoch, &[("t", 0)]),
        vec![0]
    );
    w.send(
        1,
        9,
        &produce_req("t", 0, txn_batch(&[b"t1", b"t2"], pid, epoch, 0), -1),
    );
    assert_eq!(produce_answer(&mut w, 1), Some((0, 2))); // 2, 3
    produce_batches(&mut w, "t", 1, 2); // 4, 5
    assert_eq!(latest_offset(&mut w, 3, "t", 0, true), 2);
    // Past the transaction's first offset: Kafka refuses only past the
    // high watermark.
    assert_eq!(delete_records(&mut w, "t", 0, 5), (0, 5));
    assert_eq!(
        latest_offset(&mut w, 3, "t", 0, true),
        5,
        "LSO counts from the start"
    );
    w.send(2, 12, &fetch_isolated("t", 0, 5, true));
    let p = fetch_answer(&mut w, 2).unwrap();
    assert_eq!(p.error_code, 0);
    assert_eq!(p.last_stable_offset, 5);
    assert!(p.records.unwrap().is_empty(), "nothing stable yet");
    // The transaction is still open here: it commits, and the LSO moves on.
    assert_eq!(end_txn(&mut w, 1, "x", pid, epoch, true), Some(0));
    assert_eq!(latest_offset(&mut w, 3, "t", 0, true), 7);
    w.send(2, 12, &fetch_isolated("t", 0, 5, true));
    let p = fetch_answer(&mut w, 2).unwrap();
    let offsets: Vec<i64> = decode_values(p.records.unwrap())
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    assert_eq!(
        offsets,
        vec![4, 5, 6],
        "the batch holding 5, then the marker"
    );
}

#[test]
fn a_compact_only_topic_refuses_as_kafka_does() {
    let mut w = World::new(BrokerConfig::default());
    // Kafka 4.3.1 refuses `compact` alone and allows an empty policy and
    // `compact,delete` (seen against it).
    for (topic, policy, want) in [
        ("c", "compact", (POLICY_VIOLATION, -1)),
        ("e", "", (0, 2)),
        ("cd", "compact,delete", (0, 2)),
    ] {
        let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(vec![CreatableTopicConfig::default()
                .with_name(StrBytes::from_static_str("cleanup.policy"))
                .with_value(Some(StrBytes::from_string(policy.to_string())))])]);
        w.send(99, 7, &req);
        match w.recv(99) {
            Some((_, ResponseKind::CreateTopics(r))) => {
                assert_eq!(r.topics[0].error_code, 0, "{policy:?}: {r:?}")
            }
            other => panic!("expected a CreateTopics answer, got {other:?}"),
        }
        for i in 0..5 {
            let key = format!("k{i}");
            let records = keyed_batch(key.as_bytes(), b"v");
            w.send(1, 9, &produce_req(topic, 0, records, -1));
            assert_eq!(produce_answer(&mut w, 1).map(|a| a.0), Some(0));
        }
        assert_eq!(delete_records(&mut w, topic, 0, 2), want, "{policy:?}");
    }
}

/// One record with a key (a compacted topic refuses records without one).
fn keyed_batch(key: &[u8], value: &[u8]) -> bytes::Bytes {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let record = Record {
        transactional: false,
        control: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: T0_MS,
        key: Some(bytes::Bytes::copy_from_slice(key)),
        value: Some(bytes::Bytes::copy_from_slice(value)),
        headers: Default::default(),
        delete_horizon: false,
    };
    let mut buf = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &[record],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
}

/// A retention deletion is synced at once, not with the next append (on
/// an idle partition there may be none, and until the sync a power cut
/// brings the segments back, the log start with them); and a clean stop
/// that a retention check lands in still ends: it waited for the
/// deletion's sync, which only an append would have started, for ever.
/// Found by the simulator (swarm seeds 2484, 4260 and six more, once runs
/// drew retention).
#[test]
fn a_retention_deletion_is_synced_without_an_append_and_a_stop_ends() {
    // No checkpoint falls due on its own: its sync would hide the lack.
    let mut w = World::new(BrokerConfig {
        retention_bytes: 4096,
        checkpoint_bytes: u64::MAX,
        checkpoint_interval_ms: i64::MAX / 4,
        ..small_segments()
    });
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 40, 1);
    let bases = segment_bases(&w, "t");
    w.auto_io = false;
    w.advance(w.config.retention_check_interval_ms + 1);
    assert_ne!(segment_bases(&w, "t"), bases, "retention deleted segments");
    assert_eq!(
        w.pending_syncs.len(),
        1,
        "the deletions are synced without waiting for an append"
    );
    w.auto_io = true;
    w.drain();
    produce_batches(&mut w, "t", 40, 1);
    let bases = segment_bases(&w, "t");
    // The stop's syncs done, its checkpoints still being stored: then the
    // retention check comes.
    w.auto_io = false;
    w.input(doze_core::Input::Shutdown);
    while !w.pending_syncs.is_empty() || w.pending_meta.is_empty() {
        assert!(!w.stopped, "the stop waits for its checkpoints");
        w.complete_io();
    }
    w.advance(w.config.retention_check_interval_ms + 1);
    assert_ne!(
        segment_bases(&w, "t"),
        bases,
        "retention deleted segments during the stop"
    );
    w.auto_io = true;
    w.drain();
    assert!(w.stopped, "the stop ended");
}

/// DeleteRecords at or below a log start that retention moved (past the
/// stored one) stores that start before answering it: a power cut that
/// brings the deleted segments back (their deletion not yet synced) must
/// not take the answered low watermark back with them. Found by the
/// simulator (swarm seed 470, once runs drew DeleteRecords).
#[test]
fn a_start_retention_moved_is_stored_before_delete_records_answers_it() {
    let mut w = World::new(BrokerConfig {
        retention_bytes: 4096,
        ..small_segments()
    });
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 40, 1);
    let bases = segment_bases(&w, "t");
    w.auto_io = false;
    w.advance(w.config.retention_check_interval_ms + 1);
    let first = segment_bases(&w, "t")[0];
    assert!(first > 1, "retention moved the start");
    assert!(!log_start_key_present(&w), "retention stores no start");
    assert_eq!(delete_records_unsynced(&mut w, "t", 1), (0, first));
    assert!(log_start_key_present(&w), "the start answered is stored");
    // Asked again, it is stored already: no write.
    w.send(5, 1, &delete_req(&[("t", 0, 1)]));
    assert_eq!(delete_answer(&mut w, 5), Some(vec![(0, first)]));
    assert!(w.pending_meta.is_empty());
    assert!(!w.pending_syncs.is_empty(), "the deletions' sync in flight");
    // A power cut undoes the deletions (never synced).
    w.auto_io = true;
    w.restart(true);
    assert_eq!(segment_bases(&w, "t"), bases, "the power cut undid them");
    assert_eq!(earliest(&mut w, "t", 0), first, "the stored start wins");
}

/// Retention leaves a topic alone while a DeleteRecords write is in
/// flight: the low watermark answered is the start stored, never one
/// retention moved past it meanwhile (which a power cut could undo).
/// Found by the simulator (swarm seed 76112353).
#[test]
fn retention_waits_for_a_delete_records_write_in_flight() {
    let mut w = World::new(BrokerConfig {
        retention_bytes: 4096,
        ..small_segments()
    });
    create_topic(&mut w, "t", 1);
    produce_batches(&mut w, "t", 40, 1);
    let bases = segment_bases(&w, "t");
    w.auto_io = false;
    w.send(5, 1, &delete_req(&[("t", 0, 1)]));
    w.advance(w.config.retention_check_interval_ms + 1);
    assert_eq!(segment_bases(&w, "t"), bases, "retention waits");
    w.auto_io = true;
    w.drain();
    assert_eq!(delete_answer(&mut w, 5), Some(vec![(0, 1)]));
    w.advance(w.config.retention_check_interval_ms + 1);
    assert_ne!(segment_bases(&w, "t"), bases, "then it runs");
}
