//! Batches of millions of tiny records, as a hostile client builds them
//! (issue 38, rows B, E and F): each is answered as Kafka answers a batch
//! too large, and what the broker allocates for it stays near its bounds,
//! never a per-record structure of the whole batch. A counting allocator
//! (this binary's own) measures the bytes live at once on the test's
//! thread, so tests running beside it do not count.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::Write;

use bytes::Bytes;
use doze_core::batch::{self, BatchHeader};
use doze_core::limits;
use doze_core::log::clean::filter::{self, Filter, OffsetMap, TxnWalk, Verdict};
use doze_core::log::clean::records;
use doze_core::recompress;
use doze_core::topic_config::{ProducePrep, StoredCompression};
use doze_core::{BrokerConfig, Input};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader, ResponseKind};
use kafka_protocol::protocol::Decodable;
use kafka_protocol::ResponseError;
use support::requests::*;
use support::*;

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn charge(bytes: isize) {
    // `try_with`: a thread being torn down has no counters left.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + bytes;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is passed on to the system allocator unchanged; the
// counting only reads and writes this thread's counters.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            charge(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        charge(-(layout.size() as isize));
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            charge(layout.size() as isize);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            charge(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// `f`'s result, and the most bytes it had allocated at once (on this
/// thread) beyond what was live when it began. Decompressed records are
/// read into a buffer that doubles as it fills (up to twice their size):
/// the bounds below allow that, and stay far below the 88 bytes per
/// record that a list of every record cost.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let out = f();
    let peak = PEAK.with(Cell::get) - start;
    (out, usize::try_from(peak).unwrap_or(0))
}

const MIB: usize = 1024 * 1024;

fn varint(out: &mut Vec<u8>, v: i64) {
    let mut raw = ((v << 1) ^ (v >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8 & 0x7f) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

/// A record at offset delta 0 and timestamp delta 0, as the hostile batch
/// repeats it: `key` (none: null), a value of `value_bytes` zeros, no
/// headers. Without a key and with an empty value, 7 bytes.
fn record(key: Option<&[u8]>, value_bytes: usize) -> Vec<u8> {
    let mut body = vec![0u8, 0, 0];
    match key {
        Some(k) => {
            varint(&mut body, k.len() as i64);
            body.extend_from_slice(k);
        }
        None => varint(&mut body, -1),
    }
    varint(&mut body, value_bytes as i64);
    body.resize(body.len() + value_bytes, 0);
    varint(&mut body, 0);
    let mut framed = Vec::new();
    varint(&mut framed, body.len() as i64);
    framed.extend(body);
    framed
}

/// `count` copies of `record`, compressed with `codec` (1 gzip, 4 zstd)
/// as members/frames of `per_chunk` records read back to back (both
/// codecs' readers take them so, as Kafka's do): a few KiB stand for
/// millions of records without the test compressing all of them.
fn repeated(codec: u8, record: &[u8], count: usize, per_chunk: usize) -> Vec<u8> {
    let chunk = |n: usize| {
        let plain = record.repeat(n);
        match codec {
            1 => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
                e.write_all(&plain).unwrap();
                e.finish().unwrap()
            }
            4 => zstd::bulk::compress(&plain, 3).unwrap(),
            _ => unreachable!(),
        }
    };
    let whole = chunk(per_chunk);
    let mut out = whole.repeat(count / per_chunk);
    if !count.is_multiple_of(per_chunk) {
        out.extend(chunk(count % per_chunk));
    }
    out
}

/// A v2 batch of `count` records whose records section is `section`
/// (compressed with `codec`), every record claiming offset delta 0 while
/// the header's offsets run 0..count, as the hostile client sends it.
fn hostile_batch(codec: u8, section: &[u8], count: i32) -> Bytes {
    let mut b = Vec::new();
    b.extend(0i64.to_be_bytes()); // base offset
    b.extend(((batch::BATCH_HEADER_BYTES - 12 + section.len()) as i32).to_be_bytes());
    b.extend((-1i32).to_be_bytes()); // partition leader epoch
    b.push(2); // magic
    b.extend(0u32.to_be_bytes()); // CRC, below
    b.extend(i16::from(codec).to_be_bytes());
    b.extend((count - 1).to_be_bytes()); // last offset delta
    b.extend(T0_MS.to_be_bytes());
    b.extend(T0_MS.to_be_bytes());
    b.extend((-1i64).to_be_bytes()); // producer id
    b.extend((-1i16).to_be_bytes());
    b.extend((-1i32).to_be_bytes());
    b.extend(count.to_be_bytes());
    b.extend_from_slice(section);
    batch::write_crc(&mut b);
    Bytes::from(b)
}

fn produce(w: &mut World, topic: &str, batch: Bytes) -> (i16, Option<String>) {
    w.send(1, 9, &produce_req(topic, 0, batch, -1));
    let p = produce_partition_answer(w, 1).expect("an answer");
    (p.error_code, p.error_message.map(|m| m.to_string()))
}

/// `req` handed in as a driver hands it in (`recompress::prepare_frame`,
/// told `prep` of every topic): every partition's answer, and the frame it
/// handed in with how many batches it rebuilt.
fn produce_prepared(
    w: &mut World,
    req: &ProduceRequest,
    prep: Option<ProducePrep>,
) -> (Vec<PartitionProduceResponse>, Bytes, usize) {
    let mut handed = None;
    w.send_as(1, 9, req, |frame| {
        let p = recompress::prepare_frame(&frame, |_| prep).expect("a Produce request");
        handed = Some((p.frame.clone(), p.rebuilt));
        Input::CheckedFrame {
            conn: 1,
            frame: p.frame,
            checks: p.checks,
        }
    });
    let (frame, rebuilt) = handed.unwrap();
    (answers(w), frame, rebuilt)
}

/// Every partition's answer to the Produce request just sent.
fn answers(w: &mut World) -> Vec<PartitionProduceResponse> {
    match w.recv(1).expect("an answer") {
        (_, ResponseKind::Produce(r)) => r.responses[0].partition_responses.clone(),
        other => panic!("expected a produce answer, got {other:?}"),
    }
}

/// The batch of `partition` in a Produce v9 request frame.
fn batch_in(frame: &Bytes, partition: i32) -> Bytes {
    let mut buf = frame.clone();
    RequestHeader::decode(&mut buf, ApiKey::Produce.request_header_version(9)).unwrap();
    let req = ProduceRequest::decode(&mut buf, 9).unwrap();
    let part = req.topic_data[0]
        .partition_data
        .iter()
        .find(|p| p.index == partition)
        .unwrap();
    part.records.clone().unwrap()
}

/// Whether `stored` is `batch` but for what the log gives a batch as it
/// appends it: its base offset and its partition leader epoch (neither
/// covered by the CRC).
fn stored_as(stored: &[u8], batch: &[u8]) -> bool {
    stored.len() == batch.len() && stored[8..12] == batch[8..12] && stored[16..] == batch[16..]
}

/// The batches stored in `topic`'s `partition`, as a fetch from 0 gives them.
fn stored(w: &mut World, topic: &str, partition: i32) -> Bytes {
    w.send(1, 12, &fetch_req(topic, partition, 0, 0, 1));
    let p = fetch_answer(w, 1).unwrap();
    whole_batches(&p.records.unwrap_or_default())
}

/// A request of one zstd batch for each of `partitions` of `topic`, each
/// `count` keyed records of `value_bytes` all at offset delta 0: inner
/// offsets Kafka's LogValidator rebuilds a compressed batch for.
fn misnumbered_req(
    topic: &str,
    partitions: &[i32],
    count: usize,
    value_bytes: usize,
) -> ProduceRequest {
    let section = repeated(4, &record(Some(b"k"), value_bytes), count, 4096);
    let batch = hostile_batch(4, &section, count as i32);
    let mut req = produce_req(topic, partitions[0], batch.clone(), -1);
    let parts = &mut req.topic_data[0].partition_data;
    for &p in &partitions[1..] {
        parts.push(parts[0].clone().with_index(p));
    }
    req
}

/// Item 4's case (a): a compressed batch whose inner offsets are not 0, 1,
/// 2, … on a topic that stores what the producer sent. The driver rebuilds
/// it beside the core (the same codec, offsets set right), and the core
/// keeps what it is handed in place: the stored bytes are the prepared
/// ones (but for the base offset and leader epoch the log gives every
/// batch). The batch decompresses to more than the core rebuilds per request
/// (`limits::PRODUCE_CORE_REBUILD_BYTES_MAX`), so had the core tried to
/// rebuild it again it would have been refused. Handed in unprepared, the
/// same batch is answered NOT_ENOUGH_REPLICAS, which clients retry, and
/// nothing is stored.
#[test]
fn a_misnumbered_batch_is_rebuilt_by_the_driver_and_kept_in_place() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let count = 2 * limits::PRODUCE_CORE_REBUILD_BYTES_MAX / 1024;
    let req = misnumbered_req("t", &[0], count, 1014);

    w.send(1, 9, &req);
    let p = &answers(&mut w)[0];
    assert_eq!(
        p.error_code,
        ResponseError::NotEnoughReplicas.code(),
        "{:?}",
        p.error_message
    );
    assert!(stored(&mut w, "t", 0).is_empty(), "nothing stored");

    let (answers, frame, rebuilt) = produce_prepared(&mut w, &req, None);
    assert_eq!(rebuilt, 1);
    assert_eq!(answers[0].error_code, 0, "{:?}", answers[0].error_message);
    let prepared = batch_in(&frame, 0);
    let h = header_of(&prepared);
    assert_eq!((h.compression_code(), h.records_count), (4, count as i32));
    let body = records::records_bytes(&prepared, &h).unwrap();
    let deltas: Vec<i32> = records::records(&body, h.records_count)
        .map(|r| r.unwrap().offset_delta)
        .collect();
    assert_eq!(deltas, (0..count as i32).collect::<Vec<_>>());
    assert!(stored_as(&stored(&mut w, "t", 0), &prepared));
}

/// The core's own rebuilding is bounded per request
/// (`limits::PRODUCE_CORE_REBUILD_BYTES_MAX`): of two batches of 600 KiB
/// handed in unprepared, the first is rebuilt on the core (as the driver
/// would have: the same bytes) and the second answered
/// NOT_ENOUGH_REPLICAS; sent again alone, it is rebuilt too. A rebuild the
/// driver found failing is answered as it failed, not tried again on the
/// core, whatever its size.
#[test]
fn the_cores_rebuilding_is_bounded_per_request() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 2);
    let count = 600;
    let two = misnumbered_req("t", &[0, 1], count, 1014);
    w.send(1, 9, &two);
    let got: Vec<i16> = answers(&mut w).iter().map(|p| p.error_code).collect();
    assert_eq!(got, [0, ResponseError::NotEnoughReplicas.code()]);
    let sent = two.topic_data[0].partition_data[0].records.clone().unwrap();
    let by_driver = recompress::rebuilt(&header_of(&sent), &sent, (4, 3), usize::MAX).unwrap();
    assert!(stored_as(&stored(&mut w, "t", 0), &by_driver));
    assert!(stored(&mut w, "t", 1).is_empty());
    w.send(1, 9, &misnumbered_req("t", &[1], count, 1014));
    assert_eq!(answers(&mut w)[0].error_code, 0);
    assert!(stored_as(&stored(&mut w, "t", 1), &by_driver));

    // Rebuilt for a topic storing gzip, 8 KiB at most a batch, these do
    // not fit: the driver's refusal is the answer, with the core's error
    // for it.
    let gzip = [("compression.type", "gzip"), ("max.message.bytes", "8192")];
    assert_eq!(create_with(&mut w, "g", &gzip).0, 0);
    let prep = ProducePrep {
        compression: StoredCompression::Codec { code: 1, level: -1 },
        batch_bytes_max: 8192,
    };
    let small = misnumbered_req("g", &[0], 60, 1014);
    let sent = small.topic_data[0].partition_data[0]
        .records
        .clone()
        .unwrap();
    assert!(sent.len() < 8192);
    let big = misnumbered_req("g", &[0], 4 * count, 1014);
    let (answers, _, rebuilt) = produce_prepared(&mut w, &big, Some(prep));
    assert_eq!(rebuilt, 0);
    assert_eq!(answers[0].error_code, ResponseError::MessageTooLarge.code());
    let message = answers[0].error_message.as_deref().unwrap_or_default();
    assert!(
        message.contains("rebuilt batch would be too large"),
        "{message}"
    );
    let (answers, frame, rebuilt) = produce_prepared(&mut w, &small, Some(prep));
    assert_eq!((rebuilt, answers[0].error_code), (1, 0));
    assert!(stored_as(&stored(&mut w, "g", 0), &batch_in(&frame, 0)));
}

/// Row B: 6.7 M identical 7-byte records at offset delta 0, gzip'd into a
/// few KiB. Before, the rebuild held every record (88 B each, in a doubling
/// Vec: about 1 GiB) and only then found the batch too large. Now the
/// header's count alone refuses it, MESSAGE_TOO_LARGE, nothing decompressed.
#[test]
fn millions_of_tiny_records_are_refused_unread() {
    let count = 6_700_000;
    let section = repeated(1, &record(None, 0), count, 1 << 20);
    assert!(section.len() < 256 * 1024, "{} bytes", section.len());
    eprintln!("{count} records in {} bytes", section.len());
    let hostile = hostile_batch(1, &section, count as i32);
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let ((code, message), peak) = peak_of(|| produce(&mut w, "t", hostile));
    assert_eq!(code, ResponseError::MessageTooLarge.code(), "{message:?}");
    assert!(message.unwrap().contains("records"));
    // The 47 MB the records decompress to were never allocated.
    assert!(peak < 4 * MIB, "{peak} bytes at once");
}

/// Row B, the rebuild: a million identical records at delta 0, gzip'd, to
/// a topic storing them uncompressed. Rebuilt with offset deltas 0, 1, 2, …
/// they would take about 9 MB, far past max.message.bytes (1 MiB). The
/// records are written one at a time and the writing stops past 1 MiB:
/// MESSAGE_TOO_LARGE, having held the decompressed records (7 MB) and about
/// 1 MiB written, not a structure per record (88 MB before).
#[test]
fn a_rebuild_past_max_message_bytes_stops_there() {
    let count = limits::BATCH_RECORDS_MAX;
    let one = record(None, 0);
    let plain_bytes = one.len() * count;
    let section = repeated(1, &one, count, 1 << 18);
    let hostile = hostile_batch(1, &section, count as i32);
    let mut w = World::new(BrokerConfig::default());
    assert_eq!(
        create_with(&mut w, "t", &[("compression.type", "uncompressed")]).0,
        0
    );
    let prep = ProducePrep {
        compression: StoredCompression::Codec { code: 0, level: -1 },
        batch_bytes_max: limits::MESSAGE_BYTES_MAX,
    };
    let req = produce_req("t", 0, hostile, -1);
    let ((answers, _, rebuilt), peak) = peak_of(|| produce_prepared(&mut w, &req, Some(prep)));
    let (code, message) = (answers[0].error_code, &answers[0].error_message);
    assert_eq!(code, ResponseError::MessageTooLarge.code(), "{message:?}");
    assert_eq!(rebuilt, 0);
    // Past the stored bound, not the count's: found by the driver, and
    // answered by the core without rebuilding it again.
    assert!(message
        .as_deref()
        .unwrap()
        .contains("rebuilt batch would be too large"));
    // Read and written as a stream, by the driver and the core: a
    // codec's buffers and what was written, never the decompressed
    // records whole (7 MB) nor a Record per record (88 MB before).
    eprintln!("rebuild past max.message.bytes: {peak} bytes at once, {plain_bytes} of records");
    assert!(
        peak < 4 * MIB,
        "{peak} bytes at once for {plain_bytes} bytes of records"
    );
}

/// Row F: records that decompress to just under the bound the broker's
/// readers take (`BATCH_RECORDS_DECOMPRESSED_BYTES_MAX`) at offset delta 0,
/// to a compacted topic that stores lz4 and takes batches of 64 MiB. The
/// rebuilt records, each with its own (longer) offset delta, would
/// decompress to more than the bound, so that the cleaner could not read
/// them back: refused MESSAGE_TOO_LARGE, as the same records sent that
/// large, and nothing is stored.
#[test]
fn a_rebuild_the_readers_would_refuse_is_not_stored() {
    // 1024 bytes a record (a 2-byte length, 8 bytes of fields, the key and
    // a 1014-byte value): 65,536 of them are the bound exactly.
    let one = record(Some(b"k"), 1014);
    assert_eq!(one.len(), 1024);
    let count = limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX / one.len();
    let section = repeated(4, &one, count, 4096);
    let hostile = hostile_batch(4, &section, count as i32);
    let mut w = World::new(BrokerConfig::default());
    let configs = [
        ("cleanup.policy", "compact"),
        ("compression.type", "lz4"),
        ("max.message.bytes", "67108864"),
    ];
    assert_eq!(create_with(&mut w, "t", &configs).0, 0);
    let prep = ProducePrep {
        compression: StoredCompression::Codec { code: 3, level: 9 },
        batch_bytes_max: 67_108_864,
    };
    let req = produce_req("t", 0, hostile, -1);
    let ((answers, _, rebuilt), peak) = peak_of(|| produce_prepared(&mut w, &req, Some(prep)));
    let (code, message) = (answers[0].error_code, &answers[0].error_message);
    assert_eq!(code, ResponseError::MessageTooLarge.code(), "{message:?}");
    assert_eq!(rebuilt, 0);
    assert!(message.as_deref().unwrap().contains("decompress"));
    // What was written of the rebuilt records (lz4, a few MiB) and a
    // codec's buffers: not the 64 MiB, nor a structure per record.
    eprintln!("rebuild past the readers' bound: {peak} bytes at once");
    assert!(peak < 16 * MIB, "{peak} bytes at once");
    w.send(1, 12, &fetch_req("t", 0, 0, 0, 1));
    let stored = fetch_answer(&mut w, 1).unwrap();
    assert_eq!(stored.high_watermark, 0, "nothing stored");
    // A thousand records fewer fit once rebuilt, and are stored.
    let fewer = count - 1000;
    let section = repeated(4, &one, fewer, 4096);
    let req = produce_req("t", 0, hostile_batch(4, &section, fewer as i32), -1);
    let (answers, _, rebuilt) = produce_prepared(&mut w, &req, Some(prep));
    assert_eq!(rebuilt, 1);
    assert_eq!(answers[0].error_code, 0, "{:?}", answers[0].error_message);
}

fn header_of(batch: &Bytes) -> BatchHeader {
    batch::check_batch(batch).unwrap()
}

/// Row E: the cleaner over a stored batch of a million records of one key
/// (what a client could store before the count bound, or a batch written
/// by an older doze). Mapping its keys and filtering it reads the records
/// one at a time: it keeps the key's latest record only, and holds the
/// decompressed records and the map, not a list of every record (twice,
/// 88 MB, before).
#[test]
fn the_cleaner_streams_a_batch_of_a_million_records() {
    let count = 1_000_000;
    let one = record(Some(b"k"), 0);
    let plain_bytes = one.len() * count;
    let section = repeated(4, &one, count, 1 << 16);
    let stored = hostile_batch(4, &section, count as i32);
    let header = header_of(&stored);
    let mut map = OffsetMap::new(limits::CLEANER_MAP_ENTRIES_MAX);
    let mut walk = TxnWalk::new(Vec::new());
    let (mapped, peak) =
        peak_of(|| filter::map_batch(&mut map, &mut walk, &header, &stored, 0).unwrap());
    assert!(mapped);
    assert_eq!(map.len(), 1, "one key");
    eprintln!("map_batch: {peak} bytes at once, {plain_bytes} of records");
    assert!(
        peak < 2 * plain_bytes + MIB,
        "mapping: {peak} bytes at once for {plain_bytes} of records"
    );
    // Every record claims offset delta 0, the batch's base: the key's
    // latest offset is 0, and every record has it, so all stay.
    let last_records = BTreeMap::new();
    let mut f = Filter {
        map: &map,
        walk: TxnWalk::new(Vec::new()),
        last_records: &last_records,
        now_ms: T0_MS,
        delete_retention_ms: 86_400_000,
        end_offset: header.last_offset() + 1,
        segment_end_offset: header.last_offset() + 1,
    };
    let ((verdict, _), peak) = peak_of(|| f.batch(&header, &stored).unwrap());
    assert_eq!(verdict, Verdict::Keep);
    eprintln!("filter, all kept: {peak} bytes at once");
    assert!(
        peak < 2 * plain_bytes + MIB,
        "filtering: {peak} bytes at once"
    );

    // With real offsets (a batch kept in place): one key, so only the last
    // record stays, and the batch is rebuilt holding it alone.
    let mut plain = Vec::with_capacity(plain_bytes + count * 3);
    for i in 0..count as i64 {
        let mut body = vec![0u8, 0];
        varint(&mut body, i);
        body.extend_from_slice(&[2, b'k', 0, 0]);
        varint(&mut plain, body.len() as i64);
        plain.extend(body);
    }
    let section = zstd::bulk::compress(&plain, 3).unwrap();
    let plain_bytes = plain.len();
    drop(plain);
    let stored = hostile_batch(4, &section, count as i32);
    let header = header_of(&stored);
    let mut map = OffsetMap::new(limits::CLEANER_MAP_ENTRIES_MAX);
    filter::map_batch(&mut map, &mut TxnWalk::new(Vec::new()), &header, &stored, 0).unwrap();
    let mut f = Filter {
        map: &map,
        walk: TxnWalk::new(Vec::new()),
        last_records: &last_records,
        now_ms: T0_MS,
        delete_retention_ms: 86_400_000,
        end_offset: header.last_offset() + 1,
        segment_end_offset: header.last_offset() + 1,
    };
    let ((verdict, _), peak) = peak_of(|| f.batch(&header, &stored).unwrap());
    let Verdict::Replace(rebuilt) = verdict else {
        panic!("expected a rebuilt batch, got {verdict:?}");
    };
    let h = header_of(&rebuilt);
    assert_eq!(
        (h.records_count, h.last_offset()),
        (1, header.last_offset())
    );
    let body = records::records_bytes(&rebuilt, &h).unwrap();
    let kept: Vec<_> = records::records(&body, 1).map(Result::unwrap).collect();
    assert_eq!(kept[0].offset_delta, count as i32 - 1);
    eprintln!("filter, one kept: {peak} bytes at once, {plain_bytes} of records");
    assert!(
        peak < 2 * plain_bytes + MIB,
        "filtering: {peak} bytes at once"
    );
}
