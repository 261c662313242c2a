//! The log cleaner's work function (`log::clean::work::run`), which a driver
//! runs beside the core: over a segment in memory, it maps keys and writes
//! the cleaned copy, reads in bounded chunks, hands the offset map back
//! without copying it, and reports damage and failed reads as outcomes.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::Compression;

use doze_core::batch;
use doze_core::io::{IoError, PartitionDir};
use doze_core::limits::CLEANER_IO_BUFFER_BYTES;
use doze_core::log::clean::filter::{OffsetMap, TxnWalk};
use doze_core::log::clean::records;
use doze_core::log::clean::work::{
    self, CleanRules, CleanerDone, CleanerError, CleanerFiles, CleanerOutcome, CleanerTask,
    CleanerWork,
};
use support::*;

const PLAIN: Producer = Producer {
    id: -1,
    epoch: -1,
    sequence: -1,
    transactional: false,
};

/// A segment's `.log` and its `.log.cleaned`, in memory; the reads made.
#[derive(Default)]
struct MemFiles {
    log: Vec<u8>,
    cleaned: Vec<u8>,
    reads: Vec<(u64, u64)>,
    fail_reads: bool,
}

impl CleanerFiles for MemFiles {
    fn read(&mut self, position: u64, len: u64) -> Result<Bytes, IoError> {
        self.reads.push((position, len));
        if self.fail_reads {
            return Err(IoError("EIO".into()));
        }
        let (start, end) = (position as usize, (position + len) as usize);
        self.log
            .get(start..end)
            .map(Bytes::copy_from_slice)
            .ok_or_else(|| IoError("short read".into()))
    }

    fn append_cleaned(&mut self, bytes: Bytes) -> Result<(), IoError> {
        self.cleaned.extend_from_slice(&bytes);
        Ok(())
    }
}

/// A batch's records: (key, value).
type Records<'a> = Vec<(&'a [u8], Option<&'a [u8]>)>;

/// Appends keyed batches (offsets assigned in order); returns the next offset.
fn segment(batches: &[Records<'_>]) -> (Vec<u8>, i64) {
    let mut log = BytesMut::new();
    let mut offset = 0;
    for records in batches {
        let b = keyed_batch(records, T0_MS, Compression::None, PLAIN);
        log.extend_from_slice(&batch::with_base_offset(&b, offset));
        offset += records.len() as i64;
    }
    (log.to_vec(), offset)
}

fn dir() -> PartitionDir {
    PartitionDir::new("c", 0)
}

fn map_job(files: &mut MemFiles, map: OffsetMap) -> CleanerOutcome {
    let work = CleanerWork {
        dir: dir(),
        segment_base: 0,
        size_bytes: files.log.len() as u64,
        task: CleanerTask::Map {
            map: Arc::new(map),
            walk: TxnWalk::new(Vec::new()),
            from: 0,
        },
    };
    work::run(work, files)
}

fn clean_job(files: &mut MemFiles, map: Arc<OffsetMap>, end_offset: i64) -> CleanerOutcome {
    let work = CleanerWork {
        dir: dir(),
        segment_base: 0,
        size_bytes: files.log.len() as u64,
        task: CleanerTask::Clean {
            map,
            walk: TxnWalk::new(Vec::new()),
            rules: Arc::new(CleanRules {
                last_records: BTreeMap::new(),
                delete_retention_ms: 60_000,
                end_offset,
            }),
            now_ms: T0_MS,
            segment_end_offset: end_offset,
        },
    };
    work::run(work, files)
}

/// Every record of a `.log`: (offset, key, value).
type Stored = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

fn stored(log: &[u8]) -> Vec<Stored> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < log.len() {
        let h = batch::parse_header(&log[at..]).expect("a whole batch");
        let one = &log[at..at + h.total_bytes()];
        batch::check_stored_batch(one).expect("a sound batch");
        let body = records::records_bytes(one, &h).unwrap();
        for r in records::records(&body, h.records_count) {
            let r = r.unwrap();
            out.push((
                h.base_offset + i64::from(r.offset_delta),
                r.key.map(<[u8]>::to_vec),
                r.value.map(<[u8]>::to_vec),
            ));
        }
        at += h.total_bytes();
    }
    out
}

#[test]
fn a_segment_is_mapped_then_cleaned_to_each_keys_latest_record() {
    let (log, end) = segment(&[
        vec![
            (b"k1", Some(b"a")),
            (b"k2", Some(b"b")),
            (b"k3", Some(b"c")),
        ],
        vec![(b"k1", Some(b"d")), (b"k2", None)],
        vec![(b"k1", Some(b"e"))],
    ]);
    let mut files = MemFiles {
        log,
        ..MemFiles::default()
    };
    let size = files.log.len() as u64;
    let outcome = map_job(&mut files, OffsetMap::new(100));
    assert_eq!(outcome.bytes_read, size, "the segment read once");
    let Ok(CleanerDone::Mapped { mut map, full, .. }) = outcome.result else {
        panic!("mapped: {:?}", outcome.result)
    };
    assert!(!full);
    assert_eq!((map.len(), map.latest_offset()), (3, end - 1));
    // The core's part between the phases: the map is handed back unshared.
    Arc::get_mut(&mut map)
        .expect("the job kept no reference")
        .covers_up_to(end - 1);
    assert!(files.cleaned.is_empty(), "mapping writes nothing");

    let outcome = clean_job(&mut files, Arc::clone(&map), end);
    let Ok(CleanerDone::Cleaned {
        copy,
        bytes_written,
        ..
    }) = outcome.result
    else {
        panic!("cleaned: {:?}", outcome.result)
    };
    assert_eq!(bytes_written, files.cleaned.len() as u64);
    assert_eq!(
        copy.size_bytes(),
        bytes_written,
        "the copy books what it wrote"
    );
    assert_eq!(copy.base_offset(), 0);
    let kept = stored(&files.cleaned);
    assert_eq!(
        kept,
        vec![
            (2, Some(b"k3".to_vec()), Some(b"c".to_vec())),
            (4, Some(b"k2".to_vec()), None),
            (5, Some(b"k1".to_vec()), Some(b"e".to_vec())),
        ],
        "each key's latest record, the tombstone within delete.retention.ms"
    );
}

#[test]
fn a_large_segment_is_read_in_bounded_chunks_and_a_large_batch_whole() {
    // Batches of about 100 KiB, then one of 1.5 MiB: larger than a buffer.
    let value = vec![b'v'; 100 * 1024];
    let big = vec![b'w'; CLEANER_IO_BUFFER_BYTES * 3 / 2];
    let mut batches: Vec<Records<'_>> = (0..30)
        .map(|_| vec![(&b"k"[..], Some(&value[..]))])
        .collect();
    batches.push(vec![(&b"big"[..], Some(&big[..]))]);
    batches.push(vec![(&b"k"[..], Some(&b"last"[..]))]);
    let (log, end) = segment(&batches);
    let mut files = MemFiles {
        log,
        ..MemFiles::default()
    };
    let size = files.log.len() as u64;
    let outcome = map_job(&mut files, OffsetMap::new(100));
    let Ok(CleanerDone::Mapped { mut map, .. }) = outcome.result else {
        panic!("mapped: {:?}", outcome.result)
    };
    Arc::get_mut(&mut map).unwrap().covers_up_to(end - 1);
    // Where the big batch lies: the one read allowed past a buffer's size.
    let mut at = 0;
    let mut big_batch = None;
    while at < files.log.len() {
        let h = batch::parse_header(&files.log[at..]).unwrap();
        if h.total_bytes() > CLEANER_IO_BUFFER_BYTES {
            big_batch = Some((at as u64, h.total_bytes() as u64));
        }
        at += h.total_bytes();
    }
    let big_batch = big_batch.expect("a batch larger than a buffer");
    assert!(files.reads.len() > 3, "read in chunks: {:?}", files.reads);
    assert!(
        files.reads.contains(&big_batch),
        "read whole: {:?}",
        files.reads
    );
    for &read in &files.reads {
        assert!(
            read.1 <= CLEANER_IO_BUFFER_BYTES as u64 || read == big_batch,
            "a read of {read:?}"
        );
    }
    // Every byte is covered by a read, each batch whole in one of them.
    let read_to = files.reads.iter().map(|&(p, l)| p + l).max().unwrap();
    assert_eq!(read_to, size);

    files.reads.clear();
    let outcome = clean_job(&mut files, map, end);
    assert!(matches!(outcome.result, Ok(CleanerDone::Cleaned { .. })));
    assert!(outcome.bytes_read >= size);
    let kept = stored(&files.cleaned);
    let offsets: Vec<i64> = kept.iter().map(|s| s.0).collect();
    assert_eq!(offsets, vec![30, 31], "the big batch and k's latest");
}

#[test]
fn a_full_map_stops_the_job_where_it_filled() {
    let (log, _) = segment(&[
        vec![(b"a", Some(b"1")), (b"b", Some(b"1"))],
        vec![(b"c", Some(b"1"))],
        vec![(b"d", Some(b"1"))],
    ]);
    let mut files = MemFiles {
        log,
        ..MemFiles::default()
    };
    let outcome = map_job(&mut files, OffsetMap::new(2));
    let Ok(CleanerDone::Mapped { map, full, .. }) = outcome.result else {
        panic!("mapped: {:?}", outcome.result)
    };
    assert!(full, "a third key does not fit");
    assert_eq!((map.len(), map.latest_offset()), (2, 1));
}

#[test]
fn damage_and_failed_reads_are_outcomes() {
    let (log, end) = segment(&[vec![(b"a", Some(b"1"))], vec![(b"a", Some(b"2"))]]);
    let mut damaged = MemFiles {
        log: log.clone(),
        ..MemFiles::default()
    };
    let last = damaged.log.len() - 1;
    damaged.log[last] ^= 0xff;
    let outcome = map_job(&mut damaged, OffsetMap::new(10));
    assert!(
        matches!(outcome.result, Err(CleanerError::Damaged(_))),
        "{:?}",
        outcome.result
    );

    let mut cut = MemFiles {
        log: log[..log.len() - 5].to_vec(),
        ..MemFiles::default()
    };
    let outcome = clean_job(&mut cut, Arc::new(OffsetMap::new(10)), end);
    assert!(
        matches!(outcome.result, Err(CleanerError::Damaged(_))),
        "a batch past the segment's end: {:?}",
        outcome.result
    );

    let mut failing = MemFiles {
        log,
        fail_reads: true,
        ..MemFiles::default()
    };
    let outcome = clean_job(&mut failing, Arc::new(OffsetMap::new(10)), end);
    assert_eq!(
        outcome.result.unwrap_err(),
        CleanerError::Read(IoError("EIO".into()))
    );
    assert!(failing.cleaned.is_empty());
}
