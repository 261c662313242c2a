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
use doze_core::BrokerConfig;
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
    let ((code, message), peak) = peak_of(|| produce(&mut w, "t", hostile));
    assert_eq!(code, ResponseError::MessageTooLarge.code(), "{message:?}");
    // Past the stored bound, not the count's.
    assert!(message
        .unwrap()
        .contains("rebuilt batch would be too large"));
    // The decompressed records (in a buffer grown by doubling, so up to
    // twice their size) and what was written; a Record per record was
    // 88 MB.
    eprintln!("rebuild past max.message.bytes: {peak} bytes at once, {plain_bytes} of records");
    assert!(
        peak < 2 * plain_bytes + 4 * MIB,
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
    let ((code, message), peak) = peak_of(|| produce(&mut w, "t", hostile));
    assert_eq!(code, ResponseError::MessageTooLarge.code(), "{message:?}");
    assert!(message.unwrap().contains("decompress"));
    // The decompressed records, and what was written of the rebuilt ones
    // (lz4, a few MiB): not the 64 MiB again, nor a structure per record.
    let bound = limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX;
    eprintln!("rebuild past the readers' bound: {peak} bytes at once");
    assert!(peak < bound + 16 * MIB, "{peak} bytes at once");
    w.send(1, 12, &fetch_req("t", 0, 0, 0, 1));
    let stored = fetch_answer(&mut w, 1).unwrap();
    assert_eq!(stored.high_watermark, 0, "nothing stored");
    // A thousand records fewer fit once rebuilt, and are stored.
    let fewer = count - 1000;
    let section = repeated(4, &one, fewer, 4096);
    let (code, message) = produce(&mut w, "t", hostile_batch(4, &section, fewer as i32));
    assert_eq!(code, 0, "{message:?}");
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
