//! Bad input on the wire: garbage, a huge length, an unknown API key, a
//! truncated request and an unsupported version. The broker answers as Kafka
//! does or closes that connection, and keeps serving the others.

mod common;

use common::Broker;
use doze_testkit::frame::raw_header_v1;
use kafka_protocol::messages::*;

fn still_serves(broker: &Broker) {
    let mut c = broker.connect();
    match c.request(3, &ApiVersionsRequest::default()) {
        ResponseKind::ApiVersions(r) => {
            assert_eq!(r.error_code, 0);
            assert!(
                r.api_keys.iter().any(|k| k.api_key == 0),
                "Produce is listed"
            );
        }
        other => panic!("{other:?}"),
    }
    match c.request(12, &MetadataRequest::default().with_topics(None)) {
        ResponseKind::Metadata(r) => assert_eq!(r.brokers.len(), 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn garbage_frames_close_only_their_connection() {
    let broker = Broker::start("garbage");
    let mut bystander = broker.connect();
    bystander.request(3, &ApiVersionsRequest::default());

    let mut c = broker.connect();
    c.send_frame(&[
        0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09,
    ])
    .unwrap();
    assert!(
        c.is_closed(),
        "garbage (unknown api key 0xdead) closes the connection"
    );

    let mut c = broker.connect();
    use std::io::Write;
    c.stream.write_all(&i32::MAX.to_be_bytes()).unwrap();
    assert!(
        c.is_closed(),
        "a 2 GiB frame length closes the connection before any read"
    );

    let mut c = broker.connect();
    c.stream.write_all(&(-5i32).to_be_bytes()).unwrap();
    assert!(c.is_closed(), "a negative length closes the connection");

    let mut c = broker.connect();
    // Api key 9999, version 0, correlation 7, client id null.
    let frame = raw_header_v1(9999, 0, 7);
    c.send_frame(&frame).unwrap();
    assert!(c.is_closed(), "an unknown api key closes the connection");

    let mut c = broker.connect();
    // A Metadata v1 request cut after its header: the topic array is missing.
    let mut frame = raw_header_v1(3, 1, 8);
    frame.extend_from_slice(&[0x00, 0x00]); // half of the array length
    c.send_frame(&frame).unwrap();
    assert!(c.is_closed(), "a truncated request closes the connection");

    let mut c = broker.connect();
    // A Produce v1: below what we serve (Kafka closes for unsupported versions).
    let frame = raw_header_v1(0, 1, 9);
    c.send_frame(&frame).unwrap();
    assert!(
        c.is_closed(),
        "an unsupported version closes the connection"
    );

    // The connection opened before all this still works, and new ones too.
    match bystander.request(12, &MetadataRequest::default().with_topics(None)) {
        ResponseKind::Metadata(_) => {}
        other => panic!("{other:?}"),
    }
    still_serves(&broker);
}

#[test]
fn unsupported_api_versions_version_gets_a_v0_answer() {
    let broker = Broker::start("apiversions");
    let mut c = broker.connect();
    let frame = raw_header_v1(18, 99, 42);
    c.send_frame(&frame).unwrap();
    let mut resp = c.read_frame().expect("answered, not closed");
    use kafka_protocol::protocol::Decodable;
    let h = ResponseHeader::decode(&mut resp, 0).unwrap();
    assert_eq!(h.correlation_id, 42);
    let body = ApiVersionsResponse::decode(&mut resp, 0).unwrap();
    assert_eq!(body.error_code, 35, "UNSUPPORTED_VERSION");
    assert!(!body.api_keys.is_empty(), "with the versions we do serve");
    still_serves(&broker);
}

#[test]
fn many_random_frames_never_take_the_broker_down() {
    let broker = Broker::start("fuzz");
    // A fixed-seed xorshift: deterministic, no extra crates.
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..2000 {
        let mut c = broker.connect();
        let key = (next() % 70) as i16;
        let version = (next() % 14) as i16;
        let len = (next() % 64) as usize;
        let mut frame = raw_header_v1(key, version, 1);
        frame.extend((0..len).map(|_| next() as u8));
        let _ = c.send_frame(&frame);
        // Either an answer or a close; never a hang (the reads time out at 10 s).
        let answered = c.read_frame().is_some();
        assert!(
            answered || c.is_closed(),
            "random frame {i}: neither an answer nor a close within the timeout"
        );
    }
    still_serves(&broker);
}
