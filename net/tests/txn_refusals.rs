//! Refusals of transactional produce, over the wire against the real binary
//! with kafka-protocol: no AddPartitionsToTxn, a stale epoch, an unknown
//! producer id. Error codes as Kafka's partition verification answers
//! Produce v9 (TransactionCoordinator.handleVerifyPartitionsInTransaction and
//! ReplicaManager's translation).

mod common;

use bytes::{Bytes, BytesMut};
use common::{Broker, Client};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;

fn topic(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn txn_batch(pid: i64, epoch: i16, seq: i32) -> Bytes {
    let record = Record {
        transactional: true,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: pid,
        producer_epoch: epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: seq,
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(Bytes::from_static(b"v")),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        [&record],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
}

fn produce(c: &mut Client, pid: i64, epoch: i16, seq: i32) -> i16 {
    let req = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("t"))))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic("a"))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(txn_batch(pid, epoch, seq)))])]);
    match c.request(9, &req) {
        ResponseKind::Produce(r) => r.responses[0].partition_responses[0].error_code,
        other => panic!("{other:?}"),
    }
}

#[test]
fn transactional_produce_is_refused_unless_owned_and_added() {
    let broker = Broker::start("txn-refusals");
    let mut c = broker.connect();
    let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(topic("a"))
        .with_num_partitions(1)
        .with_replication_factor(1)]);
    match c.request(7, &req) {
        ResponseKind::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0),
        other => panic!("{other:?}"),
    }
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("t"))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let (pid, epoch) = match c.request(4, &init) {
        ResponseKind::InitProducerId(r) => {
            assert_eq!(r.error_code, 0);
            (r.producer_id.0, r.producer_epoch)
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(
        produce(&mut c, pid, epoch, 0),
        INVALID_TXN_STATE,
        "partition not added to the transaction"
    );
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_static_str("t")))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(topic("a"))
            .with_partitions(vec![0])]);
    match c.request(3, &add) {
        ResponseKind::AddPartitionsToTxn(r) => {
            assert_eq!(
                r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
                0
            )
        }
        other => panic!("{other:?}"),
    }
    // A second owner fences the first and aborts its open transaction,
    // answering CONCURRENT_TRANSACTIONS (51) until the abort is carried out;
    // it retries as a client does.
    let mut epoch2 = -1;
    for _ in 0..200 {
        match c.request(4, &init) {
            ResponseKind::InitProducerId(r) if r.error_code == 0 => {
                epoch2 = r.producer_epoch;
                break;
            }
            ResponseKind::InitProducerId(r) => assert_eq!(r.error_code, 51),
            other => panic!("{other:?}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(epoch2 > epoch, "the second owner has a higher epoch");
    assert_eq!(
        produce(&mut c, pid, epoch, 0),
        INVALID_PRODUCER_EPOCH,
        "stale epoch"
    );
    assert_eq!(
        produce(&mut c, pid + 4242, 0, 0),
        INVALID_PRODUCER_ID_MAPPING,
        "unknown producer id"
    );
    // Nothing was written by any of them: the log holds only the abort
    // marker of the transaction the second InitProducerId fenced.
    let list = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(topic("a"))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-1),
            ])]);
    match c.request(7, &list) {
        ResponseKind::ListOffsets(r) => assert_eq!(r.topics[0].partitions[0].offset, 1),
        other => panic!("{other:?}"),
    }
}
