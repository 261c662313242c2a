//! `doze-kafka dump-log`, through the real binary: a segment with a plain
//! batch, a transactional one, its commit marker, a gzip batch and an abort
//! marker, printed in Kafka's lines (with and without the records) and as
//! JSON; a truncated segment, a flipped CRC byte, garbage, a missing file
//! and a file that is not a segment.

use std::path::{Path, PathBuf};

use std::time::Duration;

mod common;

use bytes::{Bytes, BytesMut};
use common::{run_binary, Run};
use doze_core::batch;
use doze_core::control as marker;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const T0: i64 = 1_700_000_000_000;
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("doze-dump-log-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Producer {
    id: i64,
    epoch: i16,
    sequence: i32,
    transactional: bool,
}

const PLAIN: Producer = Producer {
    id: -1,
    epoch: -1,
    sequence: -1,
    transactional: false,
};

/// A batch of `(key, value)` records at `base_offset`, the first record
/// with a header `h1`.
fn batch_of(
    base_offset: i64,
    records: &[(Option<&str>, &[u8])],
    p: Producer,
    compression: Compression,
) -> Bytes {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: p.transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: p.id,
            producer_epoch: p.epoch,
            timestamp_type: TimestampType::Creation,
            offset: base_offset + i as i64,
            // The encoder keeps records in one batch while offset - sequence
            // stays constant; a plain producer's batch has base sequence -1.
            sequence: p.sequence.wrapping_add(i as i32),
            timestamp: T0 + i as i64,
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: Some(Bytes::copy_from_slice(value)),
            headers: if i == 0 {
                [(
                    StrBytes::from_static_str("h1"),
                    Some(Bytes::from_static(b"x")),
                )]
                .into_iter()
                .collect()
            } else {
                Default::default()
            },
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
    buf.freeze()
}

/// The segment's batches, in order: offsets 0-2 plain, 3-4 transactional
/// (producer 7), 5 its commit, 6-8 gzip, 9 an abort of producer 8.
fn batches() -> Vec<Bytes> {
    vec![
        batch_of(
            0,
            &[
                (Some("k0"), b"v0"),
                (Some("k1"), b"red \x1b[31m!"),
                (None, b"v2"),
            ],
            PLAIN,
            Compression::None,
        ),
        batch_of(
            3,
            &[(Some("t0"), b"tx0"), (Some("t1"), b"tx1")],
            Producer {
                id: 7,
                epoch: 0,
                sequence: 0,
                transactional: true,
            },
            Compression::None,
        ),
        batch::with_base_offset(&marker::build(7, 0, true, 0, T0 + 10), 5),
        batch_of(
            6,
            &[
                (Some("g0"), b"zipped-0"),
                (Some("g1"), b"zipped-1"),
                (Some("g2"), b"zipped-2"),
            ],
            PLAIN,
            Compression::Gzip,
        ),
        batch::with_base_offset(&marker::build(8, 2, false, 0, T0 + 20), 9),
    ]
}

fn segment() -> Vec<u8> {
    batches().concat()
}

/// `doze-kafka dump-log <args>`, killed if it takes longer than `RUN_LIMIT`.
fn dump_log(args: &[&str]) -> Run {
    let args: Vec<&str> = std::iter::once("dump-log")
        .chain(args.iter().copied())
        .collect();
    run_binary(&args, RUN_LIMIT)
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn batch_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with("baseOffset: "))
        .collect()
}

#[test]
fn batches_in_kafkas_lines() {
    let dir = Scratch::new("lines");
    let path = dir.write("00000000000000000000.log", &segment());
    let run = dump_log(&["--files", s(&path)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines[0], format!("Dumping {}", path.display()));
    assert_eq!(lines[1], "Log starting offset: 0");
    assert_eq!(lines.len(), 2 + 5, "{}", run.stdout);

    let sizes: Vec<usize> = batches().iter().map(|b| b.len()).collect();
    let position = |i: usize| sizes[..i].iter().sum::<usize>();
    let crc = |i: usize| batch::parse_header(&batches()[i]).unwrap().crc;
    assert_eq!(
        lines[2],
        format!(
            "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 \
             producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false \
             isControl: false deleteHorizonMs: OptionalLong.empty position: 0 \
             CreateTime: {} size: {} magic: 2 compresscodec: none crc: {} isvalid: true",
            T0 + 2,
            sizes[0],
            crc(0)
        )
    );
    assert_eq!(
        lines[3],
        format!(
            "baseOffset: 3 lastOffset: 4 count: 2 baseSequence: 0 lastSequence: 1 \
             producerId: 7 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true \
             isControl: false deleteHorizonMs: OptionalLong.empty position: {} \
             CreateTime: {} size: {} magic: 2 compresscodec: none crc: {} isvalid: true",
            position(1),
            T0 + 1,
            sizes[1],
            crc(1)
        )
    );
    assert_eq!(
        lines[4],
        format!(
            "baseOffset: 5 lastOffset: 5 count: 1 baseSequence: -1 lastSequence: -1 \
             producerId: 7 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true \
             isControl: true deleteHorizonMs: OptionalLong.empty position: {} \
             CreateTime: {} size: {} magic: 2 compresscodec: none crc: {} isvalid: true \
             endTxnMarker: COMMIT coordinatorEpoch: 0",
            position(2),
            T0 + 10,
            sizes[2],
            crc(2)
        )
    );
    assert!(
        lines[5].starts_with(&format!(
            "baseOffset: 6 lastOffset: 8 count: 3 baseSequence: -1 lastSequence: -1 \
             producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false \
             isControl: false deleteHorizonMs: OptionalLong.empty position: {} ",
            position(3)
        )),
        "{}",
        lines[5]
    );
    assert!(
        lines[5].contains(" magic: 2 compresscodec: gzip crc: ")
            && lines[5].ends_with("isvalid: true"),
        "{}",
        lines[5]
    );
    assert!(
        lines[6].starts_with("baseOffset: 9 lastOffset: 9 count: 1")
            && lines[6].contains("producerId: 8 producerEpoch: 2")
            && lines[6].ends_with("isvalid: true endTxnMarker: ABORT coordinatorEpoch: 0"),
        "{}",
        lines[6]
    );
    // No records without --print-data-log or --deep-iteration.
    assert!(!run.stdout.contains("| offset"), "{}", run.stdout);
}

#[test]
fn records_with_print_data_log() {
    let dir = Scratch::new("records");
    let path = dir.write("00000000000000000000.log", &segment());
    let run = dump_log(&["--files", s(&path), "--print-data-log"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let records: Vec<&str> = run.stdout.lines().filter(|l| l.starts_with("| ")).collect();
    let expected = [
        format!("| offset: 0 CreateTime: {T0} keySize: 2 valueSize: 2 sequence: -1 headerKeys: [h1] key: k0 payload: v0"),
        // An escape sequence is printed escaped, not sent to the terminal.
        format!("| offset: 1 CreateTime: {} keySize: 2 valueSize: 10 sequence: -1 headerKeys: [] key: k1 payload: red \\u{{1b}}[31m!", T0 + 1),
        format!("| offset: 2 CreateTime: {} keySize: -1 valueSize: 2 sequence: -1 headerKeys: [] payload: v2", T0 + 2),
        format!("| offset: 3 CreateTime: {T0} keySize: 2 valueSize: 3 sequence: 0 headerKeys: [h1] key: t0 payload: tx0"),
        format!("| offset: 4 CreateTime: {} keySize: 2 valueSize: 3 sequence: 1 headerKeys: [] key: t1 payload: tx1", T0 + 1),
        format!("| offset: 5 CreateTime: {} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 0", T0 + 10),
        format!("| offset: 6 CreateTime: {T0} keySize: 2 valueSize: 8 sequence: -1 headerKeys: [h1] key: g0 payload: zipped-0"),
        format!("| offset: 7 CreateTime: {} keySize: 2 valueSize: 8 sequence: -1 headerKeys: [] key: g1 payload: zipped-1", T0 + 1),
        format!("| offset: 8 CreateTime: {} keySize: 2 valueSize: 8 sequence: -1 headerKeys: [] key: g2 payload: zipped-2", T0 + 2),
        format!("| offset: 9 CreateTime: {} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 0", T0 + 20),
    ];
    assert_eq!(records, expected, "{}", run.stdout);
    assert!(!run.stdout.contains('\x1b'));
    // Each batch line comes before its records.
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(lines[2].starts_with("baseOffset: 0 "));
    assert!(lines[6].starts_with("baseOffset: 3 "));

    // --deep-iteration: the same lines without keys and values.
    let run = dump_log(&["--files", s(&path), "--deep-iteration"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains(&format!(
        "| offset: 0 CreateTime: {T0} keySize: 2 valueSize: 2 sequence: -1 headerKeys: [h1]\n"
    )));
    assert!(!run.stdout.contains("payload:"), "{}", run.stdout);
    assert!(run
        .stdout
        .contains("endTxnMarker: COMMIT coordinatorEpoch: 0\n"));
}

#[test]
fn json_has_the_batches_and_records() {
    let dir = Scratch::new("json");
    let path = dir.write("00000000000000000005.log", &segment());
    let run = dump_log(&["--files", s(&path), "--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.lines().count(), 1, "{}", run.stdout);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["file"], s(&path));
    assert_eq!(v["logStartOffset"], 5);
    assert_eq!(v["size"], segment().len());
    assert!(v.get("invalidBytes").is_none());
    let b = v["batches"].as_array().unwrap();
    assert_eq!(b.len(), 5);
    let offsets: Vec<(i64, i64)> = b
        .iter()
        .map(|b| {
            (
                b["baseOffset"].as_i64().unwrap(),
                b["lastOffset"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(offsets, [(0, 2), (3, 4), (5, 5), (6, 8), (9, 9)]);
    assert_eq!(b[1]["producerId"], 7);
    assert_eq!(b[1]["isTransactional"], true);
    assert_eq!(b[1]["lastSequence"], 1);
    assert_eq!(b[2]["isControl"], true);
    assert_eq!(b[2]["endTxnMarker"], "COMMIT");
    assert_eq!(b[2]["coordinatorEpoch"], 0);
    assert_eq!(b[4]["endTxnMarker"], "ABORT");
    assert_eq!(b[3]["compressCodec"], "gzip");
    assert!(b[0]["deleteHorizonMs"].is_null());
    assert!(b.iter().all(|b| b["isValid"] == true && b["magic"] == 2));
    assert!(b[0].get("endTxnMarker").is_none());
    // No records without --print-data-log.
    assert!(b.iter().all(|b| b.get("records").is_none()));

    let run = dump_log(&["--files", s(&path), "--output", "json", "--print-data-log"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let b = v["batches"].as_array().unwrap();
    let r0 = &b[0]["records"][1];
    assert_eq!(r0["offset"], 1);
    assert_eq!(r0["key"], "k1");
    assert_eq!(r0["payload"], "red \x1b[31m!");
    assert_eq!(b[0]["records"][0]["headerKeys"], serde_json::json!(["h1"]));
    assert!(b[0]["records"][2].get("key").is_none());
    assert_eq!(b[3]["records"][2]["payload"], "zipped-2");
    assert_eq!(b[2]["records"][0]["endTxnMarker"], "COMMIT");
    assert!(b[2]["records"][0].get("payload").is_none());
}

#[test]
fn a_truncated_segment_reports_its_tail() {
    let dir = Scratch::new("truncated");
    let good = segment();
    let sizes: Vec<usize> = batches().iter().map(|b| b.len()).collect();
    // Cut 30 bytes into the transactional batch.
    let cut = sizes[0] + 30;
    let path = dir.write("00000000000000000000.log", &good[..cut]);
    let run = dump_log(&["--files", s(&path), "--print-data-log"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(batch_lines(&run.stdout).len(), 1, "{}", run.stdout);
    assert!(
        run.stdout.contains(&format!(
            "Found 30 invalid bytes at the end of 00000000000000000000.log (position {}: a batch of {} bytes starts there but only 30 bytes are left)",
            sizes[0], sizes[1]
        )),
        "{}",
        run.stdout
    );
    // Fewer bytes than a header's start.
    let path = dir.write("00000000000000000001.log", &good[..sizes[0] + 5]);
    let run = dump_log(&["--files", s(&path)]);
    assert_eq!(run.code, 0);
    assert!(
        run.stdout.contains(&format!(
            "Found 5 invalid bytes at the end of 00000000000000000001.log (position {}: 5 bytes are too few for a batch header)",
            sizes[0]
        )),
        "{}",
        run.stdout
    );
    // JSON says the same.
    let run = dump_log(&["--files", s(&path), "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["batches"].as_array().unwrap().len(), 1);
    assert_eq!(v["invalidBytes"]["position"], sizes[0]);
    assert_eq!(v["invalidBytes"]["bytes"], 5);
}

#[test]
fn a_flipped_crc_byte_is_invalid_and_the_dump_goes_on() {
    let dir = Scratch::new("crc");
    let mut bytes = segment();
    let sizes: Vec<usize> = batches().iter().map(|b| b.len()).collect();
    // A byte of the transactional batch's records, and one of the gzip batch's.
    bytes[sizes[0] + 70] ^= 0x01;
    let gzip_at = sizes[..3].iter().sum::<usize>();
    bytes[gzip_at + 80] ^= 0x01;
    let path = dir.write("00000000000000000000.log", &bytes);
    let run = dump_log(&["--files", s(&path), "--print-data-log"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = batch_lines(&run.stdout);
    assert_eq!(lines.len(), 5, "{}", run.stdout);
    let valid: Vec<bool> = lines.iter().map(|l| l.contains("isvalid: true")).collect();
    assert_eq!(valid, [true, false, true, false, true], "{}", run.stdout);
    assert!(run
        .stdout
        .contains("| error: records not decompressed: the batch's CRC does not match"));
    assert!(!run.stdout.contains("Found "), "{}", run.stdout);

    let run = dump_log(&["--files", s(&path), "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let b = &v["batches"][1];
    assert_eq!(b["isValid"], false);
    assert!(b["computedCrc"].as_u64().unwrap() != b["crc"].as_u64().unwrap());
}

#[test]
fn bad_files_do_not_stop_the_others() {
    let dir = Scratch::new("bad");
    let good = dir.write("00000000000000000000.log", &segment());
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let garbage = dir.write("00000000000000000100.log", &garbage);
    let index = dir.write("00000000000000000000.index", &[0; 16]);
    let missing = dir.0.join("00000000000000000200.log");
    let empty = dir.write("00000000000000000300.log", &[]);

    let run = dump_log(&[
        "--files",
        s(&missing),
        s(&index),
        s(&garbage),
        s(&empty),
        s(&good),
        "--print-data-log",
    ]);
    // The missing file fails the run; the others are dumped.
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("cannot read"), "{}", run.stderr);
    assert!(
        run.stderr.contains("00000000000000000200.log"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("skipping") && run.stderr.contains("00000000000000000000.index"),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout.contains(
            "Found 4096 invalid bytes at the end of 00000000000000000100.log (position 0: "
        ),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("Log starting offset: 300\n"));
    assert!(run.stdout.contains(&format!(
        "Dumping {}\nLog starting offset: 0\n",
        good.display()
    )));
    assert_eq!(batch_lines(&run.stdout).len(), 5);

    // All readable: 0. A comma-separated list, as Kafka's --files takes.
    let list = format!("{},{}", s(&good), s(&garbage));
    let run = dump_log(&["--files", &list]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.matches("Dumping ").count(), 2);

    // JSON: one line per file, each parses.
    let run = dump_log(&[
        "--output",
        "json",
        "--files",
        s(&missing),
        s(&index),
        s(&good),
    ]);
    assert_eq!(run.code, 1);
    let objects: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(objects.len(), 3, "{}", run.stdout);
    assert!(objects[0]["error"]
        .as_str()
        .unwrap()
        .contains("cannot read"));
    assert!(objects[1]["skipped"].is_string());
    assert_eq!(objects[2]["batches"].as_array().unwrap().len(), 5);

    // No files: a usage error.
    let run = dump_log(&[]);
    assert_eq!(run.code, 2);
}

/// Records in the batch of `every_mode_streams_a_batch_of_a_million_records`.
const MANY_RECORDS: i32 = 1_000_000;
/// The most dump-log may take (peak RSS) to print that batch, in any mode.
/// When a batch's records were held whole, it took 342 MiB with
/// `--deep-iteration` and 303 MiB with `--print-data-log`, human or JSON
/// (debug build); read one at a time, 26 MiB in each.
const MANY_RECORDS_RSS_KIB_MAX: u64 = 48 * 1024;

/// What a run printed, seen as it came (100 MB of it) without keeping it.
#[derive(Default)]
struct Seen {
    bytes: u64,
    /// The first and the last few KiB.
    head: Vec<u8>,
    tail: Vec<u8>,
    /// How many times `pattern` occurs.
    matches: usize,
}

const SEEN_ENDS_BYTES: usize = 4096;

/// Runs `doze-kafka dump-log <args>`, counting `pattern` in what it prints
/// and sampling its peak RSS (VmHWM) as it runs: (exit status, stderr,
/// what it printed, the last peak sampled in KiB).
fn dump_log_streamed(args: &[&str], pattern: &'static [u8]) -> (i32, String, Seen, u64) {
    use std::io::Read;
    use std::process::{Command, Stdio};

    let mut child = Command::new(env!("CARGO_BIN_EXE_doze-kafka"))
        .arg("dump-log")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut seen = Seen::default();
        let mut chunk = vec![0u8; 64 * 1024];
        // The end of the previous chunk, where a match may have begun.
        let mut window = Vec::new();
        loop {
            let n = stdout.read(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            let got = &chunk[..n];
            seen.bytes += n as u64;
            if seen.head.len() < SEEN_ENDS_BYTES {
                let take = (SEEN_ENDS_BYTES - seen.head.len()).min(n);
                seen.head.extend_from_slice(&got[..take]);
            }
            seen.tail.extend_from_slice(got);
            let cut = seen.tail.len().saturating_sub(SEEN_ENDS_BYTES);
            seen.tail.drain(..cut);
            window.extend_from_slice(got);
            seen.matches += window
                .windows(pattern.len())
                .filter(|w| *w == pattern)
                .count();
            let keep = window.len().min(pattern.len() - 1);
            window.drain(..window.len() - keep);
        }
        seen
    });
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).unwrap();
        s
    });
    let limit = Duration::from_secs(120);
    let start = std::time::Instant::now();
    let mut peak_kib = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("dump-log {args:?} ran longer than {limit:?}");
        }
        // VmHWM only grows: the last sample is nearly the whole run's peak.
        if let Some(kib) = common::try_peak_rss_kib(pid) {
            peak_kib = peak_kib.max(kib);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let seen = reader.join().unwrap();
    let stderr = errors.join().unwrap();
    eprintln!(
        "dump-log {args:?}: {} bytes printed, peak RSS sampled {peak_kib} KiB, {:?}",
        seen.bytes,
        start.elapsed()
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    (status.code().expect("exited"), stderr, seen, peak_kib)
}

/// A way to run dump-log, and what its output must hold.
struct Mode<'a> {
    args: &'a [&'a str],
    /// What it prints once per record.
    per_record: &'static [u8],
    /// How its output starts, its first record, how it ends.
    starts: String,
    first: String,
    ends: String,
}

/// A batch of a million tiny records (10 MB plain, zstd'd into 0.8 MB):
/// every mode prints every record, in order, and takes a bounded amount
/// of memory (a record at a time), not one grown with the count.
#[test]
fn every_mode_streams_a_batch_of_a_million_records() {
    let dir = Scratch::new("many");
    let batch = common::tiny_records_batch(0, MANY_RECORDS, 4, T0);
    let path = dir.write("00000000000000000000.log", &batch);
    let last = MANY_RECORDS - 1;
    let head = format!(
        "Dumping {}\nLog starting offset: 0\nbaseOffset: 0 lastOffset: {last} count: {MANY_RECORDS} ",
        path.display()
    );
    let record = |offset: i32| {
        format!(
            "| offset: {offset} CreateTime: {T0} keySize: -1 valueSize: 1 sequence: -1 headerKeys: []"
        )
    };
    let json_record = |offset: i32| {
        format!(
            "{{\"offset\":{offset},\"timestamp\":{T0},\"keySize\":-1,\"valueSize\":1,\
             \"sequence\":-1,\"headerKeys\":[],\"payload\":\"v\"}}"
        )
    };
    let file = s(&path);
    let modes = [
        Mode {
            args: &["--deep-iteration", "--files", file],
            per_record: b"\n| offset: ",
            starts: head.clone(),
            first: format!("isvalid: true\n{}\n", record(0)),
            ends: format!("\n{}\n", record(last)),
        },
        Mode {
            args: &["--print-data-log", "--files", file],
            per_record: b"\n| offset: ",
            starts: head.clone(),
            first: format!("isvalid: true\n{} payload: v\n", record(0)),
            ends: format!("\n{} payload: v\n", record(last)),
        },
        Mode {
            args: &["--print-data-log", "--output", "json", "--files", file],
            per_record: b"{\"offset\":",
            starts: format!("{{\"file\":{}", serde_json::to_string(file).unwrap()),
            first: format!("\"isValid\":true,\"records\":[{},", json_record(0)),
            ends: format!(",{}]}}]}}\n", json_record(last)),
        },
    ];
    let mut peaks = Vec::new();
    for mode in modes {
        let args = mode.args;
        let (code, stderr, seen, peak_kib) = dump_log_streamed(args, mode.per_record);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        assert_eq!(seen.matches, MANY_RECORDS as usize, "{args:?}");
        let head = String::from_utf8_lossy(&seen.head);
        let tail = String::from_utf8_lossy(&seen.tail);
        assert!(head.starts_with(&mode.starts), "{args:?}: {head}");
        assert!(head.contains(&mode.first), "{args:?}: {head}");
        assert!(tail.ends_with(&mode.ends), "{args:?}: {tail}");
        peaks.push(peak_kib);
    }
    // And the exact peak of them all: the largest of the children this
    // test process has waited for (the other tests' runs are small).
    // SAFETY: getrusage fills the struct it is given.
    let peak_kib = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage), 0);
        u64::try_from(usage.ru_maxrss).unwrap()
    };
    eprintln!("peak RSS of the runs {peaks:?} KiB sampled, {peak_kib} KiB exact");
    for peak in peaks.into_iter().chain([peak_kib]) {
        assert!(
            peak < MANY_RECORDS_RSS_KIB_MAX,
            "dump-log took {peak} KiB at its peak (at most {MANY_RECORDS_RSS_KIB_MAX} expected)"
        );
    }
}
