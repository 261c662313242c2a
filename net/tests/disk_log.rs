//! The log on disk, through the real binary: Fetch responses whose records
//! the driver reads from the segment files itself (`Output::ResponseParts`),
//! a clean stop on SIGTERM (exit 0) and a restart that serves the same log,
//! a restart after SIGKILL that scans the log's tail, and a segment file that cannot be read: that connection is closed without
//! the response, and the partition answers KAFKA_STORAGE_ERROR from then on.

mod common;

use bytes::Bytes;
use common::{create_topic, topic, Broker, Client};
use doze_testkit::frame::request_frame;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::*;
use kafka_protocol::records::RecordBatchDecoder;

const KAFKA_STORAGE_ERROR: i16 = 56;

/// One batch of `values`, acks=all, no producer id; returns its base offset.
fn produce(c: &mut Client, name: &str, values: &[String]) -> i64 {
    let values: Vec<Bytes> = values.iter().map(|v| Bytes::from(v.clone())).collect();
    common::produce(c, name, &values)
}

/// One Fetch of partition 0 from `offset`: (error code, high watermark,
/// (offset, value) of every record at or above `offset`).
fn fetch(c: &mut Client, version: i16, name: &str, offset: i64) -> (i16, i64, Vec<(i64, String)>) {
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic(name))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(4096)])]);
    let r = match c.request(version, &req) {
        ResponseKind::Fetch(r) => r,
        other => panic!("{other:?}"),
    };
    let data = &r.responses[0].partitions[0];
    let mut records = whole_batches(data.records.clone().unwrap_or_default());
    let mut out = Vec::new();
    if !records.is_empty() {
        for set in RecordBatchDecoder::decode_all(&mut records).expect("records decode") {
            for record in set.records {
                if record.offset >= offset {
                    let value = record.value.expect("a value");
                    out.push((record.offset, String::from_utf8(value.to_vec()).unwrap()));
                }
            }
        }
    }
    (data.error_code, data.high_watermark, out)
}

/// The whole batches of a fetch answer: a range that ends inside a batch
/// (max_bytes reached, maybe in the next segment) ends with a partial one,
/// which clients drop, as with Kafka.
fn whole_batches(records: bytes::Bytes) -> bytes::Bytes {
    let mut end = 0;
    while let Some(len) = records.get(end + 8..end + 12) {
        let total = 12 + i32::from_be_bytes(len.try_into().unwrap()) as usize;
        if end + total > records.len() {
            break;
        }
        end += total;
    }
    records.slice(..end)
}

/// Every record of partition 0, fetched from offset 0 to the high watermark.
fn fetch_all(c: &mut Client, version: i16, name: &str) -> Vec<(i64, String)> {
    let mut all = Vec::new();
    loop {
        let next = all.last().map_or(0, |(offset, _)| offset + 1);
        let (code, high_watermark, records) = fetch(c, version, name, next);
        assert_eq!(code, 0, "fetch at {next}");
        if next >= high_watermark {
            return all;
        }
        assert!(!records.is_empty(), "progress below the high watermark");
        all.extend(records);
    }
}

fn values(batch: usize, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| format!("batch-{batch}-record-{i}-{}", "x".repeat(40)))
        .collect()
}

#[test]
fn fetch_reads_the_files_and_a_clean_restart_serves_the_same_log() {
    // Small segments, so that the log spans several and fetches cross them.
    let broker = Broker::start_with("disk-log", &["--set", "log.segment.bytes=2048"]);
    let mut c = broker.connect();
    create_topic(&mut c, "kept");
    let mut expected = Vec::new();
    for batch in 0..30 {
        let vals = values(batch, 1 + batch % 4);
        let base = produce(&mut c, "kept", &vals);
        assert_eq!(base, expected.len() as i64);
        expected.extend(vals);
    }
    let expected: Vec<(i64, String)> = expected
        .into_iter()
        .enumerate()
        .map(|(i, v)| (i as i64, v))
        .collect();
    // v4 (records last in the frame) and v12 (flexible, tagged fields after).
    for version in [4, 12] {
        assert_eq!(fetch_all(&mut c, version, "kept"), expected, "v{version}");
    }
    let segments = std::fs::read_dir(broker.data_dir.join("logs").join("kept-0"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert!(segments > 2, "the log rolled ({segments} segments)");

    // A crash before any checkpoint: the whole log is scanned.
    let broker = broker.crash_restart();
    let mut c = broker.connect();
    for version in [4, 12] {
        assert_eq!(fetch_all(&mut c, version, "kept"), expected, "v{version}");
    }

    let broker = broker.restart();
    let mut c = broker.connect();
    for version in [4, 12] {
        assert_eq!(fetch_all(&mut c, version, "kept"), expected, "v{version}");
    }
    // It goes on from where it was; after a crash (SIGKILL) the start-up
    // scans what lies above the last checkpoint, and serves it all again.
    let mut expected = expected;
    for batch in 30..40 {
        for value in values(batch, 3) {
            let offset = produce(&mut c, "kept", std::slice::from_ref(&value));
            assert_eq!(offset, expected.len() as i64);
            expected.push((offset, value));
        }
    }
    let broker = broker.crash_restart();
    let mut c = broker.connect();
    for version in [4, 12] {
        assert_eq!(fetch_all(&mut c, version, "kept"), expected, "v{version}");
    }
    let value = "after the crash".to_string();
    assert_eq!(
        produce(&mut c, "kept", std::slice::from_ref(&value)),
        expected.len() as i64
    );
}

#[test]
fn a_response_whose_file_cannot_be_read_closes_only_its_connection() {
    let broker = Broker::start("disk-log-eio");
    let mut c = broker.connect();
    create_topic(&mut c, "fragile");
    create_topic(&mut c, "sound");
    for batch in 0..3 {
        produce(&mut c, "fragile", &values(batch, 2));
        produce(&mut c, "sound", &values(batch, 2));
    }
    assert_eq!(fetch_all(&mut c, 12, "fragile").len(), 6);

    // The segment is cut behind the broker's back: the positions it knows
    // now lie past the end of the file, so the read of the response fails.
    let log = broker
        .data_dir
        .join("logs")
        .join("fragile-0")
        .join("00000000000000000000.log");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(0)
        .unwrap();
    let mut victim = broker.connect();
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic("fragile"))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(4096)])]);
    let frame = request_frame(12, 1, None, &req).unwrap();
    victim.send_frame(&frame).unwrap();
    assert!(
        victim.is_closed(),
        "closed, with nothing of the response sent"
    );

    // The partition is offline from then on; the broker, and its other
    // partitions, are not.
    let mut other = broker.connect();
    let (code, _, records) = fetch(&mut other, 12, "fragile", 0);
    assert_eq!(code, KAFKA_STORAGE_ERROR);
    assert!(records.is_empty());
    assert_eq!(fetch_all(&mut other, 12, "sound").len(), 6);
}

/// The clean-shutdown file (`core_state::clean_shutdown`): a clean stop
/// leaves it in `logs/`, durably; the next start removes it before it
/// serves, and a start after SIGKILL finds none.
#[test]
fn a_clean_stop_leaves_the_clean_shutdown_file_and_the_next_start_removes_it() {
    let mut broker = Broker::start("clean-shutdown-file");
    let mut c = broker.connect();
    create_topic(&mut c, "kept");
    let vals = values(0, 3);
    assert_eq!(produce(&mut c, "kept", &vals), 0);
    drop(c);
    let file = broker
        .data_dir
        .join("logs")
        .join(doze_core::io::CLEAN_SHUTDOWN_FILE_NAME);
    assert!(!file.exists(), "none while the broker runs");
    assert!(broker.stop().success());
    assert!(file.exists(), "a clean stop leaves it");
    let data_dir = std::mem::take(&mut broker.data_dir);
    drop(broker);
    let broker = Broker::start_on(data_dir, &[]);
    let mut c = broker.connect();
    assert_eq!(fetch_all(&mut c, 12, "kept").len(), 3);
    assert!(!file.exists(), "the start removed it");
    assert_eq!(produce(&mut c, "kept", &vals), 3);
    let broker = broker.crash_restart();
    let mut c = broker.connect();
    assert_eq!(fetch_all(&mut c, 12, "kept").len(), 6);
    assert!(!file.exists());
}
