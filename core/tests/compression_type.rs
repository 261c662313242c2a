//! A topic's compression.type, as Kafka's LogValidator applies it: a batch
//! sent with another codec is stored with the topic's (at its level), one
//! whose compressed records' inner offsets are not 0, 1, 2, … is rebuilt,
//! and everything a consumer reads of the records stays as sent.

mod support;

use bytes::{Bytes, BytesMut};
use doze_core::batch::{self, BatchHeader};
use doze_core::BrokerConfig;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use support::requests::*;
use support::*;

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// Records as a producer sends them: keys, values, headers and timestamps
/// that differ record to record, with these offsets (deltas from the first).
fn records(offsets: &[i64], producer_id: i64, sequence: i32) -> Vec<Record> {
    offsets
        .iter()
        .enumerate()
        .map(|(i, &offset)| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: sequence + offset as i32,
            timestamp: T0_MS + 10 * i as i64,
            key: (i % 2 == 0).then(|| Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::from(format!("value-{i}-{}", "x".repeat(40 * i)))),
            headers: [(
                format!("h{i}").into(),
                Some(Bytes::from(format!("header-{i}"))),
            )]
            .into_iter()
            .collect(),
            delete_horizon: false,
        })
        .collect()
}

fn encode(records: &[Record], compression: Compression) -> Bytes {
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut buf, records, &options).unwrap();
    buf.freeze()
}

/// What a consumer reads of a record.
type Seen = (
    i64,
    i64,
    Option<Bytes>,
    Option<Bytes>,
    Vec<(String, Option<Bytes>)>,
);

fn seen(records: &[Record]) -> Vec<Seen> {
    records
        .iter()
        .map(|r| {
            let headers = r
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            (
                r.offset,
                r.timestamp,
                r.key.clone(),
                r.value.clone(),
                headers,
            )
        })
        .collect()
}

/// The stored batches of a fetch from offset 0, each with its header, and
/// every record as a consumer decodes it.
fn fetch_all(w: &mut World, topic: &str) -> (Vec<BatchHeader>, Vec<Record>) {
    w.send(1, 12, &fetch_req(topic, 0, 0, 0, 1));
    let bytes = fetch_answer(w, 1).unwrap().records.unwrap();
    let mut headers = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let h = batch::parse_header(&bytes[at..]).unwrap();
        batch::verify_crc(&bytes[at..at + h.total_bytes()]).unwrap();
        at += h.total_bytes();
        headers.push(h);
    }
    let mut buf = bytes.clone();
    let records = RecordBatchDecoder::decode_all(&mut buf)
        .unwrap()
        .into_iter()
        .flat_map(|set| set.records)
        .collect();
    (headers, records)
}

fn code(c: Compression) -> u8 {
    match c {
        Compression::None => 0,
        Compression::Gzip => 1,
        Compression::Snappy => 2,
        Compression::Lz4 => 3,
        Compression::Zstd => 4,
    }
}

/// Every codec a producer may send, to a topic of every compression.type:
/// stored with the topic's codec (the batch's own under `producer`), the
/// producer's id, epoch and sequences kept (a retry is still a duplicate),
/// offsets 0.. in order, and every key, value, header and timestamp as sent.
#[test]
fn every_codec_is_stored_as_the_topic_says_and_reads_back_the_same() {
    let targets = [
        ("producer", None),
        ("uncompressed", Some(0)),
        ("gzip", Some(1)),
        ("snappy", Some(2)),
        ("lz4", Some(3)),
        ("zstd", Some(4)),
    ];
    for (target, target_code) in targets {
        let mut w = World::new(BrokerConfig::default());
        let topic = format!("t-{target}");
        assert_eq!(
            create_with(&mut w, &topic, &[("compression.type", target)]).0,
            0
        );
        let mut sent = Vec::new();
        for (i, codec) in CODECS.into_iter().enumerate() {
            let offsets: Vec<i64> = (0..4).collect();
            let mut rs = records(&offsets, 7, 4 * i as i32);
            let b = encode(&rs, codec);
            w.send(1, 9, &produce_req(&topic, 0, b.clone(), -1));
            assert_eq!(
                produce_answer(&mut w, 1),
                Some((0, 4 * i as i64)),
                "{target} {codec:?}"
            );
            // A retry of the same batch is answered with the first offsets.
            w.send(1, 9, &produce_req(&topic, 0, b, -1));
            assert_eq!(
                produce_answer(&mut w, 1),
                Some((0, 4 * i as i64)),
                "{target} {codec:?}"
            );
            for r in &mut rs {
                r.offset += 4 * i as i64;
            }
            sent.extend(rs);
        }
        let (headers, got) = fetch_all(&mut w, &topic);
        assert_eq!(headers.len(), CODECS.len(), "{target}: no duplicate stored");
        for (h, codec) in headers.iter().zip(CODECS) {
            let expected = target_code.unwrap_or(code(codec));
            assert_eq!(h.compression_code(), expected, "{target} from {codec:?}");
            assert_eq!((h.producer_id, h.producer_epoch), (7, 0));
            assert_eq!(h.records_count, 4);
            assert_eq!(h.max_timestamp, T0_MS + 30);
            assert_eq!(
                h.base_timestamp, T0_MS,
                "the first record's, as Kafka's builder"
            );
        }
        let base_sequences: Vec<i32> = headers.iter().map(|h| h.base_sequence).collect();
        assert_eq!(base_sequences, [0, 4, 8, 12, 16], "{target}");
        assert_eq!(seen(&got), seen(&sent), "{target}");
    }
}

/// A compressed batch whose records' offsets are not 0, 1, 2, … (deltas
/// 0, 0, 3 in a batch of count 4 and last delta 3) is rebuilt, as Kafka
/// rebuilds it for old clients, so each record gets its own offset; an
/// uncompressed one is stored as sent, as Kafka's uncompressed path does.
#[test]
fn compressed_records_out_of_order_are_given_their_own_offsets() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let odd = records(&[0, 0, 1, 3], -1, -1);
    for codec in [Compression::Zstd, Compression::Gzip] {
        let b = encode(&odd, codec);
        let h = batch::parse_header(&b).unwrap();
        assert_eq!((h.records_count, h.last_offset_delta), (4, 3));
        w.send(1, 9, &produce_req("t", 0, b, -1));
        assert_eq!(produce_answer(&mut w, 1).map(|a| a.0), Some(0), "{codec:?}");
    }
    let (headers, got) = fetch_all(&mut w, "t");
    let codecs: Vec<u8> = headers.iter().map(|h| h.compression_code()).collect();
    assert_eq!(codecs, [4, 1], "the codec stays under `producer`");
    let offsets: Vec<i64> = got.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (0..8).collect::<Vec<_>>());
    let values: Vec<_> = got.iter().map(|r| r.value.clone()).collect();
    let sent: Vec<_> = odd.iter().chain(&odd).map(|r| r.value.clone()).collect();
    assert_eq!(values, sent);

    // Uncompressed, it is stored as it came (Kafka too leaves it).
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "u", 1);
    let b = encode(&odd, Compression::None);
    w.send(1, 9, &produce_req("u", 0, b.clone(), -1));
    assert_eq!(produce_answer(&mut w, 1).map(|a| a.0), Some(0));
    w.send(1, 12, &fetch_req("u", 0, 0, 0, 1));
    let stored = fetch_answer(&mut w, 1).unwrap().records.unwrap();
    assert_eq!(
        stored[batch::STORED_PREFIX_BYTES..],
        b[batch::STORED_PREFIX_BYTES..]
    );
}

/// A batch that recompression makes larger than max.message.bytes is
/// MESSAGE_TOO_LARGE, as Kafka checks the size again after a rebuild; the
/// same batch kept compressed is taken.
#[test]
fn a_batch_too_large_once_decompressed_is_message_too_large() {
    let mut w = World::new(BrokerConfig::default());
    let limit = [("max.message.bytes", "20000")];
    let plain = [("compression.type", "uncompressed"), limit[0]];
    assert_eq!(create_with(&mut w, "plain", &plain).0, 0);
    assert_eq!(create_with(&mut w, "kept", &limit).0, 0);
    let zeros = vec![0u8; 60_000];
    let b = batch_with(&[zeros.as_slice()], T0_MS, Compression::Zstd);
    assert!(b.len() < 20_000);
    w.send(1, 9, &produce_req("plain", 0, b.clone(), -1));
    assert_eq!(
        produce_answer(&mut w, 1).map(|a| a.0),
        Some(10),
        "MESSAGE_TOO_LARGE"
    );
    w.send(1, 9, &produce_req("kept", 0, b, -1));
    assert_eq!(produce_answer(&mut w, 1).map(|a| a.0), Some(0));
}

/// The broker property compression.type is every topic's default, and a
/// topic's own value wins over it.
#[test]
fn the_broker_default_applies_where_the_topic_sets_none() {
    let mut config = BrokerConfig::default();
    config.set("compression.type", "lz4").unwrap();
    let mut w = World::new(config);
    create_topic(&mut w, "t", 1);
    assert_eq!(
        create_with(&mut w, "own", &[("compression.type", "producer")]).0,
        0
    );
    for topic in ["t", "own"] {
        let b = batch_with(&[b"a", b"b"], T0_MS, Compression::Gzip);
        w.send(1, 9, &produce_req(topic, 0, b, -1));
        assert_eq!(produce_answer(&mut w, 1).map(|a| a.0), Some(0));
    }
    assert_eq!(fetch_all(&mut w, "t").0[0].compression_code(), 3);
    assert_eq!(fetch_all(&mut w, "own").0[0].compression_code(), 1);
    assert!(BrokerConfig::default()
        .set("compression.type", "brotli")
        .is_err());
}

/// The driver is told which topics store a codec, so that it can
/// recompress their batches beside the core: when one is created, its
/// setting changes, it is deleted, and when the broker starts again.
#[test]
fn the_driver_is_offered_each_topics_codec_as_it_changes() {
    use doze_core::topic_config::StoredCompression::Codec;
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::{
        DeleteTopicsRequest, IncrementalAlterConfigsRequest, ResponseKind,
    };
    use kafka_protocol::protocol::StrBytes;
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "plain", 1);
    assert_eq!(
        create_with(&mut w, "z", &[("compression.type", "zstd")]).0,
        0
    );
    let zstd = Codec { code: 4, level: 3 };
    assert_eq!(w.topic_codecs, [("z".to_string(), zstd)].into());
    // Set on the other topic, and the level of the first.
    let set = |topic: &str, key: &str, value: &str| {
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(topic))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s(key))
                .with_config_operation(0)
                .with_value(Some(s(value)))])
    };
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        set("plain", "compression.type", "gzip"),
        set("z", "compression.zstd.level", "9"),
    ]);
    w.send(5, 1, &req);
    match w.recv(5) {
        Some((_, ResponseKind::IncrementalAlterConfigs(r))) => {
            assert!(r.responses.iter().all(|a| a.error_code == 0), "{r:?}")
        }
        other => panic!("expected an IncrementalAlterConfigs answer, got {other:?}"),
    }
    let gzip = Codec { code: 1, level: -1 };
    let zstd9 = Codec { code: 4, level: 9 };
    let expected = [("plain".to_string(), gzip), ("z".to_string(), zstd9)].into();
    assert_eq!(w.topic_codecs, expected);
    w.stop_and_restart();
    assert_eq!(w.topic_codecs, expected, "told again at start-up");
    let req = DeleteTopicsRequest::default()
        .with_topics(vec![DeleteTopicState::default().with_name(Some(name("z")))])
        .with_timeout_ms(30_000);
    w.send(9, 6, &req);
    match w.recv(9) {
        Some((_, ResponseKind::DeleteTopics(r))) => assert_eq!(r.responses[0].error_code, 0),
        other => panic!("expected a DeleteTopics answer, got {other:?}"),
    }
    assert_eq!(w.topic_codecs, [("plain".to_string(), gzip)].into());
}
