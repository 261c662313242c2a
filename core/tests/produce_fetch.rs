//! Produce, fetch, long polling, group commit and durability, driven by hand.

mod support;

use bytes::Bytes;
use doze_core::{BrokerConfig, PartitionDir, SegmentFile};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use support::requests::*;
use support::*;

#[test]
fn produce_is_answered_only_after_sync_and_offsets_follow() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    w.auto_io = false;
    w.send(
        1,
        9,
        &produce_req("t", 0, batch(&[b"a", b"b", b"c"], T0_MS), -1),
    );
    assert!(w.recv(1).is_none(), "acks=all answered before the fsync");
    assert_eq!(w.pending_syncs.len(), 1);
    // A second produce while the sync is in flight rides the next sync.
    w.send(1, 9, &produce_req("t", 0, batch(&[b"d"], T0_MS), 1));
    assert_eq!(w.pending_syncs.len(), 1, "one sync in flight at a time");
    w.complete_io();
    assert_eq!(produce_answer(&mut w, 1), Some((0, 0)));
    assert!(w.recv(1).is_none(), "second produce not yet durable");
    assert_eq!(
        w.pending_syncs.len(),
        1,
        "the second append gets its own sync"
    );
    w.complete_io();
    assert_eq!(produce_answer(&mut w, 1), Some((0, 3)));
    let log = w.broker.partition("t", 0).unwrap();
    assert_eq!(log.high_watermark(), 4);
}

#[test]
fn many_produces_share_one_sync() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 2);
    w.auto_io = false;
    w.send(1, 9, &produce_req("t", 0, batch(&[b"x"], T0_MS), -1));
    for i in 0..10 {
        w.send(
            2 + i,
            9,
            &produce_req("t", (i % 2) as i32, batch(&[b"y"], T0_MS), -1),
        );
    }
    assert_eq!(w.pending_syncs.len(), 1);
    w.complete_io(); // covers the first
    assert_eq!(
        w.pending_syncs.len(),
        1,
        "all ten later appends wait on one sync"
    );
    w.complete_io();
    for i in 0..10 {
        assert_eq!(produce_answer(&mut w, 2 + i).unwrap().0, 0);
    }
    assert!(w.pending_syncs.is_empty());
}

#[test]
fn acks_zero_gets_no_response_but_is_stored() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    w.send(1, 9, &produce_req("t", 0, batch(&[b"a"], T0_MS), 0));
    assert!(w.raw_response(1).is_none());
    assert_eq!(w.no_responses, vec![1], "said done, for a driver's count");
    w.send(1, 12, &fetch_req("t", 0, 0, 0, 1));
    let p = fetch_answer(&mut w, 1).unwrap();
    assert_eq!(
        decode_values(p.records.unwrap()),
        vec![(0, Bytes::from_static(b"a"))]
    );
}

#[test]
fn fetch_returns_compressed_batches_as_stored_in_order() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let mut expected = Vec::new();
    for (i, c) in [Compression::None, Compression::Lz4, Compression::Zstd]
        .into_iter()
        .enumerate()
    {
        let values: Vec<Vec<u8>> = (0..5).map(|j| format!("v{i}-{j}").into_bytes()).collect();
        let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
        w.send(1, 9, &produce_req("t", 0, batch_with(&refs, T0_MS, c), -1));
        assert_eq!(produce_answer(&mut w, 1), Some((0, (i * 5) as i64)));
        expected.extend(values);
    }
    w.send(1, 12, &fetch_req("t", 0, 0, 0, 1));
    let p = fetch_answer(&mut w, 1).unwrap();
    assert_eq!(p.high_watermark, 15);
    let got = decode_values(p.records.unwrap());
    let offsets: Vec<i64> = got.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, (0..15).collect::<Vec<_>>());
    let values: Vec<Vec<u8>> = got.into_iter().map(|(_, v)| v.to_vec()).collect();
    assert_eq!(values, expected);
}

/// A client asking for more than Kafka's broker `fetch.max.bytes` (55 MiB by
/// default) gets 55 MiB at most, as from Kafka: librdkafka's consumer, asked
/// for 64 MiB, was sent 64 MiB answers here.
#[test]
fn a_fetch_answer_carries_at_most_55_mib_whatever_the_client_asks() {
    const MIB: usize = 1024 * 1024;
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    // 70 batches of 7 x 128 KiB: 61 MiB of values, each batch under the
    // 1 MiB a batch may have.
    let values: Vec<Vec<u8>> = (0..7).map(|j| vec![j as u8; 128 * 1024]).collect();
    let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    for i in 0..70 {
        w.send(1, 9, &produce_req("t", 0, batch(&refs, T0_MS + i), -1));
        assert_eq!(produce_answer(&mut w, 1), Some((0, i * 7)));
    }
    let mut req = fetch_req("t", 0, 0, 0, 1);
    req.topics[0].partitions[0].partition_max_bytes = i32::MAX;
    req.max_bytes = i32::MAX;
    w.send(2, 12, &req);
    let p = fetch_answer(&mut w, 2).expect("fetch answered");
    assert_eq!(p.error_code, 0);
    let records = p.records.expect("records");
    assert!(
        records.len() <= 55 * MIB && records.len() > 54 * MIB,
        "{} bytes answered",
        records.len()
    );
    // Whole batches but for the last: 62 of them (55 MiB / 896 KiB and a bit).
    let got = decode_values(records);
    assert_eq!(got.len(), 62 * 7);
    assert_eq!(got.last().map(|(o, _)| *o), Some(62 * 7 - 1));
}

/// The sizes a fetch asks for bound the answer as Kafka's ReplicaManager
/// bounds it (KIP-74): each partition gets at most partition_max_bytes and
/// the answer at most max_bytes, cut inside a batch if need be (Kafka's
/// LogSegment.read sends the partial batch too, and clients drop it), except
/// that the first batch of the first partition with records goes whole
/// whatever its size, so that a consumer always makes progress. A consumer
/// asking for less (librdkafka's max.partition.fetch.bytes) must never be
/// sent more: a large answer is one the client waits for whole before it
/// asks again.
#[test]
fn a_fetch_answer_keeps_to_the_sizes_asked_for() {
    const KIB: usize = 1024;
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 3);
    // Ten batches of 4 x 16 KiB per partition: 64 KiB and a header each.
    let values: Vec<Vec<u8>> = (0..4).map(|j| vec![j as u8; 16 * KIB]).collect();
    let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    let batch_bytes = batch(&refs, T0_MS).len();
    assert!(
        batch_bytes > 64 * KIB && batch_bytes < 65 * KIB,
        "{batch_bytes}"
    );
    for p in 0..3 {
        for i in 0..10 {
            w.send(1, 9, &produce_req("t", p, batch(&refs, T0_MS + i), -1));
            assert_eq!(produce_answer(&mut w, 1), Some((0, i * 4)));
        }
    }
    let fetch = |w: &mut World, max_bytes: usize, partition_max_bytes: usize| {
        let mut req = fetch_req("t", 0, 0, 0, 1);
        req.max_bytes = max_bytes as i32;
        let partition = req.topics[0].partitions[0].clone();
        req.topics[0].partitions = (0..3)
            .map(|p| {
                partition
                    .clone()
                    .with_partition(p)
                    .with_partition_max_bytes(partition_max_bytes as i32)
            })
            .collect();
        w.send(2, 12, &req);
        let Some((_, ResponseKind::Fetch(r))) = w.recv(2) else {
            panic!("no fetch answer");
        };
        (r.responses[0].partitions.iter())
            .map(|p| {
                assert_eq!(p.error_code, 0);
                p.records.clone().expect("records")
            })
            .collect::<Vec<_>>()
    };
    let whole_batches = |records: &Bytes| decode_values(records.clone()).len() / 4;

    // Each partition to its own bound: one whole batch and a partial one.
    let got = fetch(&mut w, 50 * 1024 * KIB, 100 * KIB);
    for records in &got {
        assert_eq!(records.len(), 100 * KIB);
        assert_eq!(whole_batches(records), 1);
    }

    // The answer to its bound: 100 KiB, 100 KiB, and the 50 KiB left.
    let got = fetch(&mut w, 250 * KIB, 100 * KIB);
    let lens: Vec<usize> = got.iter().map(Bytes::len).collect();
    assert_eq!(lens, [100 * KIB, 100 * KIB, 50 * KIB]);
    assert_eq!(whole_batches(&got[2]), 0, "a partial batch only");

    // Bounds below one batch: the first partition's first batch goes
    // whole, the others keep to their bounds.
    let got = fetch(&mut w, 2 * KIB, KIB);
    assert_eq!(got[0].len(), batch_bytes);
    assert_eq!(whole_batches(&got[0]), 1);
    assert!(got[1].is_empty() && got[2].is_empty(), "nothing left");
    let got = fetch(&mut w, 50 * 1024 * KIB, KIB);
    let lens: Vec<usize> = got.iter().map(Bytes::len).collect();
    assert_eq!(lens, [batch_bytes, KIB, KIB]);
}

/// A batch whose header disagrees with its records about time is stored
/// as Kafka's LogValidator stores it on a CreateTime topic: the timestamp
/// type CreateTime, the max timestamp the records' own (with a client's
/// LogAppendTime bit, every record's time is the header's, as Kafka reads
/// it), and a CRC that checks; compressed or not, as Kafka decompresses
/// every batch.
#[test]
fn a_wrong_max_timestamp_is_stored_as_the_records_say() {
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        wrong_max_timestamps_stored_as_the_records_say(codec);
    }
}

fn wrong_max_timestamps_stored_as_the_records_say(codec: Compression) {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    // (the header's max timestamp, the LogAppendTime bit, what is stored)
    let cases = [
        (T0_MS + 1_000_000, false, T0_MS),
        (T0_MS - 7, false, T0_MS),
        (T0_MS + 3, true, T0_MS + 3),
        (T0_MS, false, T0_MS),
    ];
    for (i, (header_max_ms, log_append_bit, _)) in cases.iter().enumerate() {
        let mut b = batch_with(&[b"a", b"b"], T0_MS, codec).to_vec();
        b[35..43].copy_from_slice(&header_max_ms.to_be_bytes());
        if *log_append_bit {
            b[22] |= 0x08;
        }
        doze_core::batch::write_crc(&mut b);
        w.send(1, 9, &produce_req("t", 0, Bytes::from(b), -1));
        assert_eq!(
            produce_answer(&mut w, 1),
            Some((0, 2 * i as i64)),
            "{codec:?}"
        );
    }
    w.send(1, 12, &fetch_req("t", 0, 0, 0, 1));
    let records = fetch_answer(&mut w, 1).unwrap().records.unwrap();
    let mut at = 0;
    for (header_max_ms, _, stored_ms) in cases {
        let h = doze_core::batch::parse_header(&records[at..]).unwrap();
        let whole = &records[at..at + h.total_bytes()];
        doze_core::batch::verify_crc(whole).unwrap();
        assert_eq!(
            (h.max_timestamp, h.has_log_append_time()),
            (stored_ms, false),
            "{codec:?} sent with max timestamp {header_max_ms}"
        );
        at += h.total_bytes();
    }
    assert_eq!(at, records.len());
    assert_eq!(decode_values(records).len(), 8);
}

/// A client may not mark a batch LogAppendTime (Kafka's
/// LogValidator.validateTimestamp): on a LogAppendTime topic such a batch
/// is refused INVALID_TIMESTAMP with each record listed, and so it is on a
/// CreateTime topic when its time is -1; unmarked batches are stamped or
/// taken as ever.
#[test]
fn a_batch_marked_log_append_time_is_refused_where_kafka_refuses_it() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "c", 1);
    let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name("l"))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("message.timestamp.type"))
            .with_value(Some(StrBytes::from_static_str("LogAppendTime")))])]);
    w.send(99, 7, &req);
    w.recv(99).unwrap();
    let marked = |max_ms: i64, codec: Compression| {
        let mut b = batch_with(&[b"a", b"b"], T0_MS, codec).to_vec();
        b[35..43].copy_from_slice(&max_ms.to_be_bytes());
        b[22] |= 0x08;
        doze_core::batch::write_crc(&mut b);
        Bytes::from(b)
    };
    let answer = |w: &mut World| {
        let p = produce_partition_answer(w, 1).unwrap();
        let indexes: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
        (p.error_code, p.base_offset, indexes)
    };
    for codec in [Compression::None, Compression::Zstd] {
        w.send(1, 9, &produce_req("l", 0, marked(T0_MS, codec), -1));
        assert_eq!(answer(&mut w), (32, -1, vec![0, 1]), "{codec:?}");
        w.send(1, 9, &produce_req("c", 0, marked(-1, codec), -1));
        assert_eq!(answer(&mut w), (32, -1, vec![0, 1]), "{codec:?}");
    }
    w.send(1, 9, &produce_req("l", 0, batch(&[b"a"], T0_MS), -1));
    assert_eq!(answer(&mut w), (0, 0, vec![]));
    w.send(
        1,
        9,
        &produce_req("c", 0, marked(T0_MS, Compression::Lz4), -1),
    );
    assert_eq!(answer(&mut w), (0, 0, vec![]));
}

/// A compressed batch is decompressed to be read, but never past
/// `limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX`: one that would grow
/// larger (a few KiB of zstd holding 65 MiB of zeros) is answered
/// MESSAGE_TOO_LARGE, and the broker goes on serving.
#[test]
fn a_batch_decompressing_past_the_bound_is_message_too_large() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let limit = doze_core::limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX;
    let zeros = vec![0u8; limit + (1 << 20)];
    let bomb = batch_with(&[zeros.as_slice()], T0_MS, Compression::Zstd);
    assert!(bomb.len() < 64 * 1024, "{} bytes", bomb.len());
    w.send(1, 9, &produce_req("t", 0, bomb, -1));
    assert_eq!(produce_answer(&mut w, 1), Some((10, -1)));
    // Just under the bound is read and taken.
    let big = vec![0u8; limit - (1 << 20)];
    let under = batch_with(&[big.as_slice()], T0_MS, Compression::Zstd);
    w.send(1, 9, &produce_req("t", 0, under, -1));
    assert_eq!(produce_answer(&mut w, 1), Some((0, 0)));
    w.send(1, 9, &produce_req("t", 0, batch(&[b"after"], T0_MS), -1));
    assert_eq!(produce_answer(&mut w, 1), Some((0, 1)));
}

/// A partition named many times in one Produce (here across two entries
/// of its topic) is appended once, from its last entry, and answered once
/// under one entry of its topic, as Kafka keys a Produce's entries by
/// partition (KafkaApis.handleProduceRequest): a request repeating one
/// partition thousands of times costs one batch's checks, not thousands.
#[test]
fn a_partition_named_many_times_in_one_produce_is_appended_once_from_its_last_entry() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 2);
    let entry = |index: i32, value: &str| {
        produce_request::PartitionProduceData::default()
            .with_index(index)
            .with_records(Some(batch(&[value.as_bytes()], T0_MS)))
    };
    let mut parts: Vec<_> = (0..1000).map(|i| entry(0, &format!("dup-{i}"))).collect();
    parts.insert(10, entry(1, "other"));
    let topic = |parts: &[produce_request::PartitionProduceData]| {
        produce_request::TopicProduceData::default()
            .with_name(name("t"))
            .with_partition_data(parts.to_vec())
    };
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![topic(&parts[..500]), topic(&parts[500..])]);
    w.send(1, 9, &req);
    let Some((_, ResponseKind::Produce(r))) = w.recv(1) else {
        panic!("expected a produce answer");
    };
    assert_eq!(r.responses.len(), 1, "one entry for the topic");
    let answered: Vec<(i32, i16, i64)> = r.responses[0]
        .partition_responses
        .iter()
        .map(|p| (p.index, p.error_code, p.base_offset))
        .collect();
    assert_eq!(answered, [(0, 0, 0), (1, 0, 0)]);
    assert_eq!(w.broker.partition("t", 0).unwrap().high_watermark(), 1);
    w.send(1, 12, &fetch_req("t", 0, 0, 0, 1));
    let stored = decode_values(fetch_answer(&mut w, 1).unwrap().records.unwrap());
    assert_eq!(stored, [(0, Bytes::from_static(b"dup-999"))]);
}

/// A batch whose CRC checks but whose records do not read as its header
/// says is refused INVALID_RECORD with the log start offset, as Kafka's
/// LogValidator and record iterators refuse it (conformance:
/// scripts/batch-shapes.json), and nothing of it is stored: a consumer
/// would fail on it.
#[test]
fn a_batch_whose_records_do_not_read_as_its_header_says_is_invalid_record() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    // (codec, records count, last offset delta, bytes added at the end)
    let shapes = [
        (Compression::None, 2, 2, 0),
        (Compression::None, 2, 1, 0),
        (Compression::None, 3, 2, 2),
        (Compression::Gzip, 4, 3, 0),
        (Compression::Zstd, 2, 1, 0),
    ];
    for (codec, count, last_offset_delta, extra) in shapes {
        let mut b = batch_with(&[b"a", b"b", b"c"], T0_MS, codec).to_vec();
        b.extend(std::iter::repeat_n(0u8, extra));
        let length = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&length.to_be_bytes());
        b[23..27].copy_from_slice(&i32::to_be_bytes(last_offset_delta));
        b[57..61].copy_from_slice(&i32::to_be_bytes(count));
        doze_core::batch::write_crc(&mut b);
        w.send(1, 9, &produce_req("t", 0, Bytes::from(b), -1));
        let p = produce_partition_answer(&mut w, 1).unwrap();
        assert_eq!(
            (p.error_code, p.base_offset, p.log_start_offset),
            (87, -1, 0),
            "{codec:?} count {count} last offset delta {last_offset_delta} +{extra} bytes"
        );
    }
    w.send(1, 9, &produce_req("t", 0, batch(&[b"whole"], T0_MS), -1));
    assert_eq!(produce_answer(&mut w, 1), Some((0, 0)));
}

#[test]
fn unsynced_data_is_never_served() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    w.auto_io = false;
    w.send(1, 9, &produce_req("t", 0, batch(&[b"a"], T0_MS), -1));
    w.send(2, 12, &fetch_req("t", 0, 0, 0, 1));
    let p = fetch_answer(&mut w, 2).unwrap();
    assert_eq!(p.error_code, 0);
    assert_eq!(p.high_watermark, 0);
    assert!(p.records.unwrap().is_empty());
}

#[test]
fn long_poll_wakes_on_new_data_and_times_out_otherwise() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    w.send(2, 12, &fetch_req("t", 0, 0, 5_000, 1));
    assert!(w.recv(2).is_none(), "no data: the fetch waits");
    assert_eq!(w.broker.poll_timeout(), Some(w.now_ms + 5_000));
    w.advance(1_000);
    assert!(w.recv(2).is_none());
    w.send(1, 9, &produce_req("t", 0, batch(&[b"hello"], T0_MS), -1));
    let p = fetch_answer(&mut w, 2).expect("woken by durable data");
    assert_eq!(
        decode_values(p.records.unwrap()),
        vec![(0, Bytes::from_static(b"hello"))]
    );
    // A fetch at the end waits out its max_wait_ms and returns empty.
    w.send(2, 12, &fetch_req("t", 0, 1, 5_000, 1));
    w.advance(4_999);
    assert!(w.recv(2).is_none());
    w.advance(1);
    let p = fetch_answer(&mut w, 2).expect("answered at the deadline");
    assert!(p.records.unwrap().is_empty());
}

#[test]
fn fetch_errors() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    w.send(1, 9, &produce_req("t", 0, batch(&[b"a"], T0_MS), -1));
    produce_answer(&mut w, 1).unwrap();
    w.send(1, 12, &fetch_req("t", 0, 7, 0, 1));
    assert_eq!(
        fetch_answer(&mut w, 1).unwrap().error_code,
        1,
        "OFFSET_OUT_OF_RANGE"
    );
    w.send(1, 12, &fetch_req("nope", 0, 0, 0, 1));
    assert_eq!(
        fetch_answer(&mut w, 1).unwrap().error_code,
        3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    w.send(1, 12, &fetch_req("t", 5, 0, 0, 1));
    assert_eq!(fetch_answer(&mut w, 1).unwrap().error_code, 3);
}

#[test]
fn produce_refusals() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    w.send(1, 9, &produce_req("nope", 0, batch(&[b"a"], T0_MS), -1));
    assert_eq!(
        produce_answer(&mut w, 1).unwrap().0,
        3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    let mut corrupt = batch(&[b"abc"], T0_MS).to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    w.send(1, 9, &produce_req("t", 0, Bytes::from(corrupt), -1));
    assert_eq!(produce_answer(&mut w, 1).unwrap().0, 2, "CORRUPT_MESSAGE");
    let big = vec![0u8; 2 * 1024 * 1024];
    w.send(1, 9, &produce_req("t", 0, batch(&[&big], T0_MS), -1));
    assert_eq!(
        produce_answer(&mut w, 1).unwrap().0,
        10,
        "MESSAGE_TOO_LARGE"
    );
    w.send(1, 9, &produce_req("t", 0, batch(&[b"a"], T0_MS), 2));
    assert_eq!(
        produce_answer(&mut w, 1).unwrap().0,
        21,
        "INVALID_REQUIRED_ACKS"
    );
    assert_eq!(
        w.broker.partition("t", 0).unwrap().log_end_offset(),
        0,
        "nothing was written"
    );
}

#[test]
fn failed_sync_fails_the_produce_and_cuts_the_log() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    w.send(1, 9, &produce_req("t", 0, batch(&[b"a"], T0_MS), -1));
    assert_eq!(produce_answer(&mut w, 1), Some((0, 0)));
    w.fail_next_sync = true;
    w.send(1, 9, &produce_req("t", 0, batch(&[b"b"], T0_MS), -1));
    assert_eq!(
        produce_answer(&mut w, 1).unwrap().0,
        56,
        "KAFKA_STORAGE_ERROR"
    );
    let log = w.broker.partition("t", 0).unwrap();
    assert_eq!(log.log_end_offset(), 1, "the unsynced batch is cut away");
    let dir = PartitionDir::new("t", 0);
    let on_disk: usize = w
        .files()
        .iter()
        .filter(|((d, _, _), _)| *d == dir)
        .map(|(_, f)| f.data.len())
        .sum();
    assert_eq!(
        on_disk,
        w.durable_len(&dir),
        "the file was truncated back to its synced length"
    );
    // The retry lands at the offset the failed one would have had.
    w.send(1, 9, &produce_req("t", 0, batch(&[b"b"], T0_MS), -1));
    assert_eq!(produce_answer(&mut w, 1), Some((0, 1)));
}

#[test]
fn acknowledged_records_survive_a_power_cut() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    for i in 0..20u8 {
        w.send(1, 9, &produce_req("t", 0, batch(&[&[i]], T0_MS), -1));
        assert_eq!(produce_answer(&mut w, 1), Some((0, i as i64)));
    }
    // One more appended but never synced: lost at the cut, never acknowledged.
    w.auto_io = false;
    w.send(1, 9, &produce_req("t", 0, batch(&[b"lost"], T0_MS), -1));
    assert!(w.recv(1).is_none());
    w.restart(true);
    w.auto_io = true;
    w.send(1, 12, &fetch_req("t", 0, 0, 0, 1));
    let got = decode_values(fetch_answer(&mut w, 1).unwrap().records.unwrap());
    assert_eq!(got.len(), 20);
    for (i, (offset, value)) in got.iter().enumerate() {
        assert_eq!(*offset, i as i64);
        assert_eq!(value.as_ref(), &[i as u8]);
    }
}

#[test]
fn torn_tail_is_truncated_at_boot_and_never_served() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    for i in 0..3u8 {
        w.send(1, 9, &produce_req("t", 0, batch(&[&[i; 100]], T0_MS), -1));
        produce_answer(&mut w, 1).unwrap();
    }
    let dir = PartitionDir::new("t", 0);
    let full = w.files()[&(dir.clone(), 0, SegmentFile::Log)].data.len();
    // A torn last write: half a batch of garbage-free but incomplete bytes.
    let half = batch(&[&[9u8; 100]], T0_MS);
    w.tamper((dir.clone(), 0, SegmentFile::Log), |data| {
        data.extend_from_slice(&half[..half.len() / 2])
    });
    w.restart(false);
    assert_eq!(
        w.files()[&(dir.clone(), 0, SegmentFile::Log)].data.len(),
        full,
        "the torn tail is cut off the file"
    );
    let log = w.broker.partition("t", 0).unwrap();
    assert_eq!(log.log_end_offset(), 3);
    assert_eq!(log.high_watermark(), 3);
    // New data goes after the valid prefix.
    w.send(1, 9, &produce_req("t", 0, batch(&[b"next"], T0_MS), -1));
    assert_eq!(produce_answer(&mut w, 1), Some((0, 3)));
    // A flipped byte inside the last batch: CRC catches it.
    w.tamper((dir.clone(), 0, SegmentFile::Log), |data| {
        let n = data.len();
        data[n - 2] ^= 0x55;
    });
    w.restart(false);
    assert_eq!(w.broker.partition("t", 0).unwrap().log_end_offset(), 3);
    w.send(1, 12, &fetch_req("t", 0, 0, 0, 1));
    let got = decode_values(fetch_answer(&mut w, 1).unwrap().records.unwrap());
    assert_eq!(got.len(), 3);
}

#[test]
fn responses_keep_request_order_on_a_connection() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    w.auto_io = false;
    let c1 = w.send(1, 9, &produce_req("t", 0, batch(&[b"a"], T0_MS), -1));
    let c2 = w.send(1, 12, &MetadataRequest::default().with_topics(None));
    assert!(w.recv(1).is_none(), "metadata waits behind the produce");
    w.complete_io();
    assert_eq!(w.recv(1).unwrap().0, c1);
    assert_eq!(w.recv(1).unwrap().0, c2);
}

#[test]
fn retention_deletes_old_segments_by_size_and_time() {
    let config = BrokerConfig {
        segment_bytes: 1024,
        retention_check_interval_ms: 1_000,
        ..Default::default()
    };
    let mut w = World::new(config);
    let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name("r"))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("retention.bytes"))
            .with_value(Some(StrBytes::from_static_str("2048")))])]);
    w.send(99, 7, &req);
    w.recv(99).unwrap();
    for _ in 0..20 {
        w.send(
            1,
            9,
            &produce_req("r", 0, batch(&[&[7u8; 400]], w.now_ms), -1),
        );
        produce_answer(&mut w, 1).unwrap();
    }
    assert_eq!(w.broker.partition("r", 0).unwrap().log_start_offset(), 0);
    w.advance(1_000);
    let log = w.broker.partition("r", 0).unwrap();
    assert!(
        log.log_start_offset() > 0,
        "retention.bytes moved the log start"
    );
    assert!(
        log.size_bytes() <= 2048 + 1024,
        "at most retention.bytes plus the active segment"
    );
    let start = log.log_start_offset();
    w.send(1, 12, &fetch_req("r", 0, 0, 0, 1));
    assert_eq!(
        fetch_answer(&mut w, 1).unwrap().error_code,
        1,
        "below the log start is out of range"
    );
    let files = w
        .files()
        .keys()
        .filter(|(d, _, kind)| &*d.topic == "r" && *kind == SegmentFile::Log)
        .count();
    assert!(files <= 4, "deleted segments left the disk ({files} files)");
    let live = w.files();
    let orphans = live
        .keys()
        .filter(|(d, base, _)| {
            &*d.topic == "r" && !live.contains_key(&(d.clone(), *base, SegmentFile::Log))
        })
        .count();
    assert_eq!(orphans, 0, "a segment's index files go with its .log");
    assert!(start <= 20);
}

/// Every ListOffsets and Metadata version gets an answer (kafka-protocol
/// refuses to encode a field set at a version that lacks it: leader_epoch
/// below ListOffsets v4 once closed aiokafka's and kafkajs's connections).
#[test]
fn list_offsets_and_metadata_answer_at_every_version() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    w.send(1, 9, &produce_req("t", 0, batch(&[b"a"], T0_MS), -1));
    assert_eq!(produce_answer(&mut w, 1), Some((0, 0)));
    let (min, max) = doze_core::versions::range(ApiKey::ListOffsets).unwrap();
    for version in min..=max {
        for timestamp in [-1, -2, T0_MS] {
            let req = ListOffsetsRequest::default().with_topics(vec![
                list_offsets_request::ListOffsetsTopic::default()
                    .with_name(name("t"))
                    .with_partitions(vec![list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(timestamp)]),
            ]);
            w.send(1, version, &req);
            match w.recv(1) {
                Some((_, ResponseKind::ListOffsets(r))) => {
                    let p = &r.topics[0].partitions[0];
                    assert_eq!(p.error_code, 0, "v{version} ts {timestamp}");
                    let want_epoch = if version >= 4 { 0 } else { -1 };
                    assert_eq!(p.leader_epoch, want_epoch, "v{version}");
                }
                other => panic!("ListOffsets v{version} ts {timestamp}: {other:?}"),
            }
        }
    }
    let (min, max) = doze_core::versions::range(ApiKey::Metadata).unwrap();
    for version in min..=max {
        let topic = metadata_request::MetadataRequestTopic::default().with_name(Some(name("t")));
        w.send(
            1,
            version,
            &MetadataRequest::default().with_topics(Some(vec![topic])),
        );
        match w.recv(1) {
            Some((_, ResponseKind::Metadata(r))) => {
                assert_eq!(r.topics[0].error_code, 0, "v{version}");
                assert_eq!(r.topics[0].partitions.len(), 1, "v{version}");
            }
            other => panic!("Metadata v{version}: {other:?}"),
        }
    }
}

#[test]
fn acks_zero_is_said_done_in_its_turn() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    w.auto_io = false;
    w.send(1, 9, &produce_req("t", 0, batch(&[b"a"], T0_MS), -1));
    w.send(1, 9, &produce_req("t", 0, batch(&[b"b"], T0_MS), 0));
    // Done, but behind a produce waiting for its fsync: a driver counting
    // the requests unanswered still counts both.
    assert!(w.no_responses.is_empty());
    w.complete_io();
    assert_eq!(produce_answer(&mut w, 1), Some((0, 0)));
    assert_eq!(w.no_responses, vec![1]);
}

#[test]
fn a_driver_that_does_not_pause_is_closed_at_the_bound() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    w.auto_io = false;
    // Each waits for an fsync that does not come.
    let bound = doze_core::limits::CONN_REQUESTS_IN_FLIGHT_MAX;
    for _ in 0..bound {
        w.send(1, 9, &produce_req("t", 0, batch(&[b"a"], T0_MS), -1));
    }
    assert!(
        w.closed.is_empty(),
        "{bound} requests in flight are allowed"
    );
    w.send(1, 9, &produce_req("t", 0, batch(&[b"a"], T0_MS), -1));
    assert_eq!(w.closed, vec![1], "one more closes the connection");
}
