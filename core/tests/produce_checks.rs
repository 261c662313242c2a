//! Produce's records read beside the core (`doze_core::produce_checks`,
//! issue 38 row A): a frame handed in with its checks
//! (`Input::CheckedFrame`) is not decompressed on the core, which trusts
//! what the driver read; one handed in without them is read on the core,
//! with the same answers.

mod support;

use bytes::Bytes;
use doze_core::produce_checks::{check_frame, ProduceChecks};
use doze_core::topic_config::{ProducePrep, StoredCompression};
use doze_core::{batch, limits, recompress};
use doze_core::{BrokerConfig, Input};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{ApiKey, ProduceRequest};
use kafka_protocol::protocol::Encodable;
use kafka_protocol::records::Compression;
use kafka_protocol::ResponseError;
use support::requests::*;
use support::*;

const PRODUCE_VERSION: i16 = 9;

fn frame_of(req: &ProduceRequest) -> Bytes {
    request_frame(ApiKey::Produce, PRODUCE_VERSION, 1, "core-test", |buf| {
        req.encode(buf, PRODUCE_VERSION)
    })
    .unwrap()
}

fn checks_of(req: &ProduceRequest) -> ProduceChecks {
    check_frame(&frame_of(req)).expect("a Produce request")
}

fn produce_as(
    w: &mut World,
    req: &ProduceRequest,
    checks: Option<ProduceChecks>,
) -> PartitionProduceResponse {
    w.send_as(1, PRODUCE_VERSION, req, |frame| match checks {
        Some(checks) => Input::CheckedFrame {
            conn: 1,
            frame,
            checks,
        },
        None => Input::Frame { conn: 1, frame },
    });
    produce_partition_answer(w, 1).expect("an answer")
}

/// `good`, a zstd batch, with its records section replaced by bytes that
/// are no zstd stream (its CRC made right again): the header is the same,
/// the records do not decompress.
fn undecompressable_like(good: &Bytes) -> Bytes {
    let mut b = good[..batch::BATCH_HEADER_BYTES].to_vec();
    let garbage = b"these bytes are not a zstd frame at all";
    b.extend_from_slice(garbage);
    let length = (batch::BATCH_HEADER_BYTES - 12 + garbage.len()) as i32;
    b[8..12].copy_from_slice(&length.to_be_bytes());
    batch::write_crc(&mut b);
    Bytes::from(b)
}

#[test]
fn a_checked_frame_is_not_decompressed_on_the_core() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let values: [&[u8]; 3] = [b"a", b"bb", b"ccc"];
    let good = batch_with(&values, T0_MS, Compression::Zstd);
    let bad = undecompressable_like(&good);
    assert_eq!(
        batch::check_batch(&bad).unwrap().compression_code(),
        4,
        "a valid zstd batch header"
    );
    let bad_req = produce_req("t", 0, bad.clone(), -1);

    // Read on the core (no checks): the codec cannot read it, as Kafka's
    // "Failed to decompress record stream".
    let p = produce_as(&mut w, &bad_req, None);
    assert_eq!(
        p.error_code,
        ResponseError::UnknownServerError.code(),
        "{:?}",
        p.error_message
    );
    // Read by the driver: the same answer, from what it read.
    let p = produce_as(&mut w, &bad_req, Some(checks_of(&bad_req)));
    assert_eq!(p.error_code, ResponseError::UnknownServerError.code());

    // Handed in with the checks of the good batch of the same partition:
    // the core trusts them and never decompresses, so it appends the batch
    // its codec could not read. (A driver never does this; the test does,
    // to see the core reads nothing itself.)
    let good_checks = checks_of(&produce_req("t", 0, good.clone(), -1));
    let p = produce_as(&mut w, &bad_req, Some(good_checks));
    assert_eq!(p.error_code, 0, "{:?}", p.error_message);
    assert_eq!(p.base_offset, 0);
}

#[test]
fn a_rule_the_checks_say_fails_lists_its_records_read_again() {
    let mut w = World::new(BrokerConfig::default());
    assert_eq!(
        create_with(&mut w, "c", &[("cleanup.policy", "compact")]).0,
        0
    );
    let values: [&[u8]; 2] = [b"a", b"b"];
    let keyless = batch_with(&values, T0_MS, Compression::Zstd);
    let req = produce_req("c", 0, keyless, -1);
    for checks in [None, Some(checks_of(&req))] {
        let p = produce_as(&mut w, &req, checks);
        assert_eq!(p.error_code, ResponseError::InvalidRecord.code());
        let listed: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
        assert_eq!(listed, [0, 1], "{:?}", p.error_message);
    }
    // A timestamp past the bound (an hour ahead by default), among good ones.
    create_topic(&mut w, "t", 1);
    let late = batch_with(&values, T0_MS + 2 * 3_600_000, Compression::Zstd);
    let req = produce_req("t", 0, late, -1);
    let p = produce_as(&mut w, &req, Some(checks_of(&req)));
    assert_eq!(p.error_code, ResponseError::InvalidTimestamp.code());
    assert_eq!(p.record_errors.len(), 2);
    // Extremes, some whose distance from now overflows (Java's wrapping
    // arithmetic refuses both ends; before.max.ms is Long.MAX_VALUE by
    // default, so a timestamp long past is taken), each way in.
    let invalid = ResponseError::InvalidTimestamp.code();
    for (timestamp, want) in [
        (i64::MAX, invalid),
        (i64::MIN + 1, invalid),
        (-5, 0),
        (0, 0),
    ] {
        let req = produce_req(
            "t",
            0,
            batch_with(&values, timestamp, Compression::Zstd),
            -1,
        );
        for checks in [None, Some(checks_of(&req))] {
            let p = produce_as(&mut w, &req, checks);
            assert_eq!(
                p.error_code, want,
                "timestamp {timestamp}: {:?}",
                p.error_message
            );
            let listed = if want == 0 { 0 } else { values.len() };
            assert_eq!(p.record_errors.len(), listed, "timestamp {timestamp}");
        }
    }
    // In bounds: accepted, nothing read again.
    let fine = batch_with(&values, T0_MS, Compression::Zstd);
    let req = produce_req("t", 0, fine, -1);
    let p = produce_as(&mut w, &req, Some(checks_of(&req)));
    assert_eq!(p.error_code, 0, "{:?}", p.error_message);
}

/// A batch whose records decompress to more than the core reads again per
/// request (`limits::PRODUCE_RECORD_ERRORS_READ_BYTES_MAX`) is refused with
/// the rule's error and no list: a client cannot make the core decompress
/// it by breaking a rule.
#[test]
fn a_large_batch_that_breaks_a_rule_is_refused_without_reading_it_again() {
    let mut w = World::new(BrokerConfig::default());
    assert_eq!(
        create_with(
            &mut w,
            "c",
            &[
                ("cleanup.policy", "compact"),
                ("max.message.bytes", "8388608")
            ]
        )
        .0,
        0
    );
    let value = vec![0u8; 64 * 1024];
    let values: Vec<&[u8]> = (0..20).map(|_| &value[..]).collect();
    let big = batch_with(&values, T0_MS, Compression::Zstd);
    assert!(big.len() < doze_core::limits::PRODUCE_RECORD_ERRORS_READ_BYTES_MAX);
    let req = produce_req("c", 0, big, -1);
    let p = produce_as(&mut w, &req, Some(checks_of(&req)));
    assert_eq!(p.error_code, ResponseError::InvalidRecord.code());
    assert!(p.record_errors.is_empty());
    let message = p.error_message.unwrap().to_string();
    assert!(message.contains("20 record errors"), "{message}");
}

/// A compression.type the driver was not told of yet (it changed while the
/// request was on its way): the driver hands the batch in as sent, and the
/// core rebuilds it (within its bound per request) into what the driver,
/// once told, makes of it and the core then keeps in place.
#[test]
fn a_batch_the_driver_did_not_prepare_is_rebuilt_on_the_core_alike() {
    let mut w = World::new(BrokerConfig::default());
    let zstd = [("compression.type", "zstd")];
    assert_eq!(create_with(&mut w, "z", &zstd).0, 0);
    let values: [&[u8]; 3] = [b"a", b"bb", b"ccc"];
    let req = produce_req("z", 0, batch_with(&values, T0_MS, Compression::None), -1);
    let prep = ProducePrep {
        compression: StoredCompression::Codec { code: 4, level: 3 },
        batch_bytes_max: limits::MESSAGE_BYTES_MAX,
    };
    let mut handed = Vec::new();
    for told in [None, Some(prep)] {
        w.send_as(1, PRODUCE_VERSION, &req, |frame| {
            let p = recompress::prepare_frame(&frame, |_| told).unwrap();
            assert_eq!(p.rebuilt, usize::from(told.is_some()));
            assert_eq!(p.frame == frame, told.is_none());
            handed.push(p.frame.clone());
            Input::CheckedFrame {
                conn: 1,
                frame: p.frame,
                checks: p.checks,
            }
        });
        let p = produce_partition_answer(&mut w, 1).expect("an answer");
        assert_eq!(p.error_code, 0, "{:?}", p.error_message);
    }
    w.send(1, 12, &fetch_req("z", 0, 0, 0, 1));
    let records = fetch_answer(&mut w, 1).unwrap().records.unwrap();
    let stored = whole_batches(&records);
    let first = batch::check_batch(&stored).unwrap();
    let (by_core, kept) = stored.split_at(first.total_bytes());
    assert_eq!(first.compression_code(), 4, "rebuilt on the core");
    // The same batch but for its base offset (0, then 3).
    assert!(by_core[8..] == kept[8..], "rebuilt alike");
    assert_eq!(kept.len(), by_core.len());
    // And the second is what the driver handed in (but for the base
    // offset and leader epoch, which the log gives every batch).
    let sent = handed[1].windows(kept.len() - 16).any(|w| w == &kept[16..]);
    assert!(sent, "the driver's rebuild, kept in place");
}
