//! Unit tests of the disk log. An in-test `Disk` (the simulator's, strict
//! about what a power cut keeps) applies the `DiskOp`s the log emits and
//! serves the reads its searches and its recovery ask for, so that what is
//! checked is what a driver would see: the bytes on disk, the ranges read,
//! and the answers given from them.

use super::index::{self, OffsetEntry, TimeEntry};
use super::recovery::{LogCheckpoint, LogRecovery, ScannedBatch};
use super::*;
use crate::batch::testing::{batch, TestBatch};
use crate::control as marker;
use crate::io::{FileRange, FileStage, IoId, RecoveredSegment, SyncScope};
use crate::simdisk::{live_key, SimDisk};
use bytes::BytesMut;
use rand::rngs::ChaCha8Rng;
use rand::SeedableRng;

fn dir() -> PartitionDir {
    PartitionDir::new("t", 0)
}

// ---- the disk ----

type FileKey = (PartitionDir, i64, SegmentFile);

/// The simulator's disk (`crate::simdisk`, simdisk/src/disk.rs) as a
/// driver drives it: ops applied in order, each `Sync` completed at once
/// (it covers what came before it), and the segments adopted recorded.
/// Tests damage files on purpose through `tamper` and `remove`.
struct Disk {
    sim: SimDisk,
    /// Draws for the disk (only a full disk's short writes draw).
    rng: ChaCha8Rng,
    /// Names the syncs issued.
    syncs: IoId,
    /// Segments adopted by recoveries, in order.
    adopted: Vec<i64>,
}

impl Default for Disk {
    fn default() -> Self {
        Self {
            sim: SimDisk::default(),
            rng: ChaCha8Rng::seed_from_u64(0),
            syncs: 0,
            adopted: Vec::new(),
        }
    }
}

impl Disk {
    fn apply(&mut self, ops: &[DiskOp]) {
        for op in ops {
            self.apply_one(op);
        }
    }

    fn apply_one(&mut self, op: &DiskOp) {
        match op {
            DiskOp::Read { .. } => panic!("reads are served by the test, not applied"),
            DiskOp::AppendCleaned { .. } | DiskOp::Rename { .. } | DiskOp::DiscardStaged { .. } => {
                panic!("the log alone never cleans (the broker's cleaner does)")
            }
            DiskOp::Sync { scope, .. } => {
                // The log's own ops name no sync; the test numbers its own.
                self.syncs += 1;
                let io = self.syncs;
                let sync = DiskOp::Sync { io, scope: *scope };
                self.sim.apply(sync, &mut self.rng);
                self.sim
                    .complete_sync(io, false, false)
                    .expect("nothing failed since the last sync");
            }
            DiskOp::Adopt { segment_base, .. } => {
                self.adopted.push(*segment_base);
                self.sim.apply(op.clone(), &mut self.rng);
            }
            _ => {
                self.sim.apply(op.clone(), &mut self.rng);
            }
        }
    }

    /// A power cut that write-back reached nothing of: every file loses
    /// what was never synced, and a file never synced is gone.
    fn crash(&mut self) {
        self.sim.power_cut_losing_all();
    }

    /// The live files, by name.
    fn files(&self) -> BTreeMap<FileKey, &[u8]> {
        self.sim
            .files()
            .iter()
            .filter(|((_, _, (_, stage)), _)| *stage == FileStage::Live)
            .map(|((dir, base, (kind, _)), f)| ((dir.clone(), *base, *kind), &f.data[..]))
            .collect()
    }

    /// Exactly the bytes of `range`, or an error as a driver would report.
    fn read(&self, range: &FileRange) -> Result<Bytes, String> {
        let key = (range.dir.clone(), range.segment_base, range.file);
        let files = self.files();
        let f = files.get(&key).ok_or_else(|| format!("no file {key:?}"))?;
        let start = range.position as usize;
        let end = start + range.len as usize;
        f.get(start..end)
            .map(Bytes::copy_from_slice)
            .ok_or_else(|| format!("{range:?} past the end ({} bytes)", f.len()))
    }

    fn has(&self, base: i64, kind: SegmentFile) -> bool {
        self.sim.files().contains_key(&live_key(dir(), base, kind))
    }

    fn file(&self, base: i64, kind: SegmentFile) -> &[u8] {
        &self
            .sim
            .files()
            .get(&live_key(dir(), base, kind))
            .unwrap_or_else(|| panic!("no {kind:?} file for segment {base}"))
            .data
    }

    /// Changes a file's bytes behind the log's back (durably); returns
    /// what `change` returns.
    fn tamper<T>(
        &mut self,
        base: i64,
        kind: SegmentFile,
        change: impl FnOnce(&mut Vec<u8>) -> T,
    ) -> T {
        let mut out = None;
        let found = self.sim.tamper(&live_key(dir(), base, kind), |data| {
            out = Some(change(data));
        });
        assert!(found, "no {kind:?} file for segment {base}");
        out.expect("changed")
    }

    fn remove(&mut self, base: i64, kind: SegmentFile) {
        assert!(
            self.sim.remove_file(&live_key(dir(), base, kind)),
            "present"
        );
    }

    /// Bases of the segments with any file on disk.
    fn bases(&self) -> Vec<i64> {
        let mut bases: Vec<i64> = self
            .files()
            .keys()
            .filter(|(d, _, _)| *d == dir())
            .map(|(_, base, _)| *base)
            .collect();
        bases.dedup();
        bases
    }

    /// What the driver lists at start-up: the `.log` lengths and the index
    /// files whole (in reverse order: the core sorts them).
    fn listed(&self) -> Vec<RecoveredSegment> {
        let files = self.files();
        let contents = |base, kind| {
            files
                .get(&(dir(), base, kind))
                .map(|f| Bytes::copy_from_slice(f))
        };
        self.bases()
            .into_iter()
            .rev()
            .map(|base| RecoveredSegment {
                base_offset: base,
                log_bytes: contents(base, SegmentFile::Log).map(|b| b.len() as u64),
                offset_index: contents(base, SegmentFile::OffsetIndex),
                time_index: contents(base, SegmentFile::TimeIndex),
                txn_index: contents(base, SegmentFile::TxnIndex),
            })
            .collect()
    }

    /// The index files (not the `.log`s), by segment and kind.
    fn index_files(&self) -> BTreeMap<(i64, SegmentFile), Vec<u8>> {
        self.files()
            .into_iter()
            .filter(|((_, _, kind), _)| *kind != SegmentFile::Log)
            .map(|((_, base, kind), f)| ((base, kind), f.to_vec()))
            .collect()
    }
}

// ---- searches: run to their answer, reading what they ask ----

/// A search step that may ask for a read.
trait Step {
    fn need(&self) -> Option<&FileRange>;
}

impl<T> Step for Locate<T> {
    fn need(&self) -> Option<&FileRange> {
        match self {
            Locate::Need(range) => Some(range),
            _ => None,
        }
    }
}

impl Step for TimeSearch {
    fn need(&self) -> Option<&FileRange> {
        match self {
            TimeSearch::Need(range) => Some(range),
            _ => None,
        }
    }
}

const ROUNDS_MAX: usize = 16;

/// Runs a search again and again, each time with the range it asked for read
/// from `disk`, until it answers; returns the answer and the ranges read.
fn resolve<S: Step>(disk: &Disk, mut search: impl FnMut(&Reads) -> S) -> (S, Vec<FileRange>) {
    let mut reads = Reads::new();
    let mut ranges = Vec::new();
    for _ in 0..ROUNDS_MAX {
        let step = search(&reads);
        let Some(range) = step.need().cloned() else {
            return (step, ranges);
        };
        assert!(!reads.contains_key(&range), "asked twice for {range:?}");
        let bytes = disk
            .read(&range)
            .unwrap_or_else(|e| panic!("the search asked for a bad range: {e}"));
        reads.insert(range.clone(), bytes);
        ranges.push(range);
    }
    panic!("the search did not answer in {ROUNDS_MAX} rounds: {ranges:?}")
}

/// The batch holding `offset`, and the ranges read to find it.
fn locate(log: &PartitionLog, disk: &Disk, offset: i64) -> (BatchPos, Vec<FileRange>) {
    match resolve(disk, |reads| log.locate(offset, reads)) {
        (Locate::Found(pos), ranges) => (pos, ranges),
        (other, _) => panic!("offset {offset}: {other:?}"),
    }
}

/// What `locate` answers once it has read what it needs.
fn locate_result(log: &PartitionLog, disk: &Disk, offset: i64) -> Locate {
    resolve(disk, |reads| log.locate(offset, reads)).0
}

/// A fetch from `offset` up to the high watermark, read from the disk.
fn fetch(log: &PartitionLog, disk: &Disk, offset: i64, max_bytes: usize, min_one: bool) -> Bytes {
    let (first, _) = locate(log, disk, offset);
    let range = log.fetch_range(&first, log.high_watermark_position(), max_bytes, min_one);
    disk.read(&range).expect("a fetch range lies in its file")
}

fn time_search(
    log: &PartitionLog,
    disk: &Disk,
    ts: i64,
    upper: i64,
) -> (TimeSearch, Vec<FileRange>) {
    resolve(disk, |reads| log.offset_for_timestamp(ts, upper, reads))
}

fn max_ts(log: &PartitionLog, disk: &Disk, upper: i64) -> TimeSearch {
    resolve(disk, |reads| log.max_timestamp(upper, reads)).0
}

// ---- recovery: driven to the end against the disk ----

struct Recovered {
    log: PartitionLog,
    from_checkpoint: bool,
    aborted: Vec<AbortedTxn>,
    /// Every op emitted, in order (already applied to the disk).
    ops: Vec<DiskOp>,
    /// The ops emitted after the first read (repairs found by the scan, and
    /// the index entries of the batches read).
    scan_ops: Vec<DiskOp>,
    reads: Vec<FileRange>,
    scanned: Vec<ScannedBatch>,
}

fn recover(disk: &mut Disk, segment_bytes: u64, checkpoint: Option<&LogCheckpoint>) -> Recovered {
    let mut recovery = LogRecovery::start(dir(), segment_bytes, disk.listed(), checkpoint, false);
    let from_checkpoint = recovery.from_checkpoint();
    let aborted = recovery.take_aborted();
    let mut ops = recovery.take_ops();
    disk.apply(&ops);
    let mut scan_ops = Vec::new();
    let mut reads: Vec<FileRange> = Vec::new();
    let mut scanned = Vec::new();
    while let Some(range) = recovery.next_read() {
        assert!(
            reads.last() != Some(&range),
            "the scan asks for {range:?} again: no progress"
        );
        assert!(reads.len() < 10_000, "the scan does not end");
        let bytes = disk.read(&range).expect("the scan reads within the files");
        scanned.extend(recovery.on_read(&range, &bytes));
        reads.push(range);
        let more = recovery.take_ops();
        disk.apply(&more);
        scan_ops.extend(more.iter().cloned());
        ops.extend(more);
    }
    Recovered {
        log: recovery.finish(),
        from_checkpoint,
        aborted,
        ops,
        scan_ops,
        reads,
        scanned,
    }
}

/// The repairs among ops: cuts of a `.log`, segment deletions.
fn repairs(ops: &[DiskOp]) -> Vec<DiskOp> {
    ops.iter()
        .filter(|op| {
            matches!(
                op,
                DiskOp::Truncate {
                    file: SegmentFile::Log,
                    ..
                } | DiskOp::DeleteSegment { .. }
            )
        })
        .cloned()
        .collect()
}

// ---- building logs ----

fn append(log: &mut PartitionLog, disk: &mut Disk, bytes: Bytes) -> AppendInfo {
    let info = log.append(bytes, 0, false);
    disk.apply(&info.ops);
    info
}

/// Appends batches of these record counts.
fn append_counts(log: &mut PartitionLog, disk: &mut Disk, counts: &[usize]) -> Vec<AppendInfo> {
    counts
        .iter()
        .map(|count| append(log, disk, batch(*count)))
        .collect()
}

/// Emits a sync, lets it complete OK.
fn sync(log: &mut PartitionLog, disk: &mut Disk) {
    let point = log.sync_point(SyncScope::All);
    disk.apply_one(&DiskOp::Sync {
        io: 0,
        scope: SyncScope::All,
    });
    log.mark_durable(point, SyncScope::All);
}

/// A batch whose records are stamped `base + delta` for each delta.
fn stamped(base: i64, deltas: &[i64]) -> Bytes {
    TestBatch {
        base_timestamp: base,
        timestamp_deltas: deltas.to_vec(),
        ..TestBatch::default()
    }
    .encode()
}

/// A batch of one record of about a KiB, stamped `ts`: four of them pass the
/// index interval, three do not.
fn kib(ts: i64) -> Bytes {
    TestBatch {
        base_timestamp: ts,
        value_bytes: 1_000,
        ..TestBatch::default()
    }
    .encode()
}

fn kib_bytes() -> u64 {
    let size = kib(0).len() as u64;
    assert!(3 * size <= INDEX_INTERVAL_BYTES && 4 * size > INDEX_INTERVAL_BYTES);
    size
}

/// The timestamp of the `i`th batch of `kib_log`: growing.
fn kib_ts(i: usize) -> i64 {
    10_000 + 100 * i as i64
}

/// `count` batches of a KiB with growing timestamps, in segments of ten
/// batches (bases 0, 10, 20, ...), not synced.
fn kib_log(count: usize) -> (PartitionLog, Disk, Vec<AppendInfo>) {
    let mut log = PartitionLog::new(dir(), 10 * kib_bytes());
    let mut disk = Disk::default();
    let infos = (0..count)
        .map(|i| append(&mut log, &mut disk, kib(kib_ts(i))))
        .collect();
    (log, disk, infos)
}

/// A log of batches of 2 records in segments of two batches (bases 0, 4, 8),
/// synced; and the size of one batch.
fn three_segments() -> (PartitionLog, Disk, u64) {
    let one = batch(2).len() as u64;
    let mut log = PartitionLog::new(dir(), 2 * one);
    let mut disk = Disk::default();
    append_counts(&mut log, &mut disk, &[2, 2, 2, 2, 2, 2]);
    sync(&mut log, &mut disk);
    assert_eq!(disk.bases(), vec![0, 4, 8]);
    (log, disk, one)
}

// ---- reading results ----

/// The bytes of the `.log` append among ops (what the batch became on disk).
fn log_bytes_of(ops: &[DiskOp]) -> Bytes {
    let appended: Vec<Bytes> = ops
        .iter()
        .filter_map(|op| match op {
            DiskOp::AppendBatch {
                base_offset, batch, ..
            } => Some(batch::with_base_offset(batch, *base_offset)),
            _ => None,
        })
        .collect();
    assert_eq!(appended.len(), 1, "one batch per append: {ops:?}");
    appended[0].clone()
}

/// The files the non-empty Appends among ops write to, in order.
fn appended_files(ops: &[DiskOp]) -> Vec<SegmentFile> {
    ops.iter()
        .filter_map(|op| match op {
            DiskOp::Append { file, bytes, .. } if !bytes.is_empty() => Some(*file),
            DiskOp::AppendBatch { .. } => Some(SegmentFile::Log),
            _ => None,
        })
        .collect()
}

/// The ops that create a segment's four files.
fn creates(base: i64) -> Vec<DiskOp> {
    SegmentFile::ALL
        .into_iter()
        .map(|file| DiskOp::Append {
            dir: dir(),
            segment_base: base,
            file,
            bytes: Bytes::new(),
        })
        .collect()
}

/// The ops that cut a segment's four files to these lengths.
fn cuts(base: i64, lens: [u64; 4]) -> Vec<DiskOp> {
    SegmentFile::ALL
        .into_iter()
        .zip(lens)
        .map(|(file, len)| DiskOp::Truncate {
            dir: dir(),
            segment_base: base,
            file,
            len,
        })
        .collect()
}

fn time_entry_bytes(timestamp_ms: i64, relative_offset: u32) -> Bytes {
    let mut buf = BytesMut::new();
    TimeEntry {
        timestamp_ms,
        relative_offset,
    }
    .encode(&mut buf);
    buf.freeze()
}

/// Base offsets of the batches of `bytes`, each checked; the bytes must hold
/// whole batches only.
fn bases(bytes: &[u8]) -> Vec<i64> {
    let (bases, partial) = bases_partial(bytes);
    assert_eq!(partial, 0, "a partial batch at the end");
    bases
}

/// Base offsets of the whole batches at the start of `bytes`, and the bytes
/// of a partial batch after them (a fetch range may end inside a batch).
fn bases_partial(mut bytes: &[u8]) -> (Vec<i64>, usize) {
    let mut out = Vec::new();
    while let Ok(header) = batch::parse_header(bytes) {
        if bytes.len() < header.total_bytes() {
            break;
        }
        batch::check_batch(bytes).expect("a whole batch is valid");
        out.push(header.base_offset);
        bytes = &bytes[header.total_bytes()..];
    }
    (out, bytes.len())
}

fn segment_bases(log: &PartitionLog) -> Vec<i64> {
    log.segments().map(|s| s.base_offset).collect()
}

fn segment(log: &PartitionLog, base: i64) -> &Segment {
    log.segments()
        .find(|s| s.base_offset == base)
        .unwrap_or_else(|| panic!("no segment {base}"))
}

/// The segments as recovery can know them: the last append time is not on
/// disk, and the bytes since the last index entry matter only to the active
/// segment.
fn shape(log: &PartitionLog) -> Vec<Segment> {
    let last = log.segments().last().map(|s| s.base_offset);
    log.segments()
        .map(|s| Segment {
            last_append_ms: -1,
            bytes_since_index_entry: if Some(s.base_offset) == last {
                s.bytes_since_index_entry
            } else {
                0
            },
            ..s.clone()
        })
        .collect()
}

/// Every offset of every batch at or above the log start is located where it
/// was appended, and reads back as the bytes appended.
fn check_every_offset(log: &PartitionLog, disk: &Disk, infos: &[AppendInfo]) {
    for info in infos {
        if info.last_offset < log.log_start_offset() {
            continue;
        }
        for offset in info.base_offset..=info.last_offset {
            assert_eq!(locate(log, disk, offset).0, info.pos, "offset {offset}");
        }
        let range = log.fetch_range(&info.pos, log.high_watermark_position(), 0, true);
        assert_eq!(
            disk.read(&range).unwrap(),
            log_bytes_of(&info.ops),
            "batch {}",
            info.base_offset
        );
    }
}

// ---- append ----

#[test]
fn append_assigns_offsets_and_reads_back_the_bytes_it_wrote() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    assert!(
        log.segments().next().is_none(),
        "the first segment is created lazily"
    );
    let infos = append_counts(&mut log, &mut disk, &[3, 1, 2]);
    let ranges: Vec<_> = infos
        .iter()
        .map(|i| (i.base_offset, i.last_offset))
        .collect();
    assert_eq!(ranges, vec![(0, 2), (3, 3), (4, 5)]);
    assert!(infos.iter().all(|i| i.log_append_time_ms == -1));
    // The first append creates the segment's four files, then appends.
    assert_eq!(infos[0].ops[..4], creates(0)[..]);
    assert_eq!(appended_files(&infos[0].ops), vec![SegmentFile::Log]);
    match &infos[1].ops[..] {
        [DiskOp::AppendBatch {
            dir: d,
            segment_base: 0,
            base_offset: 3,
            batch: sent,
        }] => {
            assert_eq!(d, &dir());
            assert_eq!(sent, &batch(1), "the batch as sent, not a copy");
            let written = batch::with_base_offset(sent, 3);
            let header = batch::check_batch(&written).unwrap();
            assert_eq!((header.base_offset, header.last_offset()), (3, 3));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        infos[1].pos,
        BatchPos {
            base_offset: 3,
            last_offset: 3,
            segment_base: 0,
            position: batch(3).len() as u64,
            size_bytes: batch(1).len() as u64,
            max_timestamp_ms: 1_000,
        }
    );
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.high_watermark()
        ),
        (0, 6, 0)
    );
    assert_eq!(log.durable_bytes(), 0);
    sync(&mut log, &mut disk);
    assert_eq!(log.high_watermark(), 6);
    assert_eq!(log.high_watermark_position(), log.end_position());
    assert_eq!(log.durable_bytes(), log.size_bytes());
    // Each batch reads back as the bytes of its Append, found without a read.
    for info in &infos {
        for offset in info.base_offset..=info.last_offset {
            let (pos, reads) = locate(&log, &disk, offset);
            assert_eq!(pos, info.pos);
            assert!(reads.is_empty(), "a recent batch is known");
        }
        let range = log.fetch_range(
            &info.pos,
            log.high_watermark_position(),
            info.pos.size_bytes as usize,
            false,
        );
        assert_eq!(disk.read(&range).unwrap(), log_bytes_of(&info.ops));
    }
    // And the whole log in one fetch is the Appends one after the other.
    let all = fetch(&log, &disk, 0, usize::MAX, false);
    assert_eq!(bases(&all), vec![0, 3, 4]);
    assert_eq!(all.len() as u64, log.size_bytes());
    let appended: Vec<u8> = infos
        .iter()
        .flat_map(|i| log_bytes_of(&i.ops).to_vec())
        .collect();
    assert_eq!(all.to_vec(), appended);
    assert_eq!(disk.file(0, SegmentFile::Log), &appended[..]);
}

#[test]
fn log_append_time_stamps_the_batch() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    let info = log.append(batch(2), 77_000, true);
    disk.apply(&info.ops);
    assert_eq!(info.log_append_time_ms, 77_000);
    assert_eq!(info.pos.max_timestamp_ms, 77_000);
    sync(&mut log, &mut disk);
    let bytes = fetch(&log, &disk, 0, usize::MAX, false);
    let header = batch::check_batch(&bytes).unwrap();
    assert!(header.has_log_append_time());
    assert_eq!(header.max_timestamp, 77_000);
    assert_eq!(segment(&log, 0).max_timestamp_ms, 77_000);
    let (found, _) = time_search(&log, &disk, 50_000, 2);
    assert_eq!(found, TimeSearch::Found(0, 77_000));
}

#[test]
fn rolls_segments_by_size_and_creates_each_segments_files() {
    let one = batch(1).len() as u64;
    let mut log = PartitionLog::new(dir(), 2 * one + 1);
    let mut disk = Disk::default();
    let infos = append_counts(&mut log, &mut disk, &[1, 1, 1, 1, 1]);
    assert_eq!(segment_bases(&log), vec![0, 2, 4]);
    assert_eq!(disk.bases(), vec![0, 2, 4]);
    for base in [0, 2, 4] {
        for kind in SegmentFile::ALL {
            assert!(disk.has(base, kind), "segment {base} has its {kind:?}");
        }
    }
    assert_eq!(disk.file(2, SegmentFile::Log).len() as u64, 2 * one);
    let positions: Vec<_> = infos
        .iter()
        .map(|i| (i.pos.segment_base, i.pos.position))
        .collect();
    assert_eq!(positions, vec![(0, 0), (0, one), (2, 0), (2, one), (4, 0)]);
    // A roll: the old segment's final time index entry (its largest
    // timestamp, first reached by offset 0), the new segment's four files,
    // then the batch.
    let roll = &infos[2].ops;
    assert_eq!(roll.len(), 6, "{roll:?}");
    assert_eq!(
        roll[0],
        DiskOp::Append {
            dir: dir(),
            segment_base: 0,
            file: SegmentFile::TimeIndex,
            bytes: time_entry_bytes(1_000, 0),
        }
    );
    assert_eq!(roll[1..5], creates(2)[..]);
    assert!(matches!(
        roll[5],
        DiskOp::AppendBatch {
            segment_base: 2,
            ..
        }
    ));
    let next: Vec<_> = log
        .segments()
        .map(|s| (s.next_offset, s.size_bytes))
        .collect();
    assert_eq!(next, vec![(2, 2 * one), (4, 2 * one), (5, one)]);
    // segment.bytes changes for the segments rolled from now on.
    log.set_segment_bytes(1 << 20);
    append_counts(&mut log, &mut disk, &[1, 1, 1]);
    assert_eq!(segment_bases(&log), vec![0, 2, 4]);
    assert_eq!(segment(&log, 4).size_bytes, 4 * one);
}

#[test]
fn oversized_batch_gets_a_segment_of_its_own() {
    let small = batch(1).len() as u64;
    let mut log = PartitionLog::new(dir(), small + 1);
    let mut disk = Disk::default();
    let infos = append_counts(&mut log, &mut disk, &[1, 50, 1]);
    assert_eq!(segment_bases(&log), vec![0, 1, 51]);
    assert_eq!(infos[1].ops[1..5], creates(1)[..]);
    assert_eq!(segment(&log, 1).size_bytes, batch(50).len() as u64);
    // An oversized first batch goes into the first segment.
    let mut log = PartitionLog::new(dir(), small + 1);
    let info = log.append(batch(50), 0, false);
    assert_eq!(info.ops[..4], creates(0)[..]);
    assert_eq!(segment_bases(&log), vec![0]);
}

#[test]
fn index_entries_follow_kafkas_interval_rule() {
    // Two records per batch: offsets 2i and 2i+1 for batch i. Timestamps grow
    // up to batch 5, then fall back.
    let spec = |i: i64| {
        let ts = if i <= 5 { 10_000 + 100 * i } else { 10_000 };
        TestBatch {
            base_timestamp: ts,
            timestamp_deltas: vec![0, 1],
            value_bytes: 480,
            ..TestBatch::default()
        }
        .encode()
    };
    let size2 = spec(0).len() as u64;
    assert!(3 * size2 <= INDEX_INTERVAL_BYTES && 4 * size2 > INDEX_INTERVAL_BYTES);
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    let infos: Vec<_> = (0..14)
        .map(|i| append(&mut log, &mut disk, spec(i)))
        .collect();
    // An entry for the batch that comes after more than 4096 bytes since the
    // last entry: batches 4, 8 and 12, named by their last offsets.
    let entry = |batch: u64| OffsetEntry {
        relative_offset: (2 * batch + 1) as u32,
        position: (batch * size2) as u32,
    };
    let s = segment(&log, 0);
    assert_eq!(s.offset_index, vec![entry(4), entry(8), entry(12)]);
    // A time entry beside the first two (the largest timestamp grew: batch 4's
    // own, then batch 5's), none beside the third.
    let times = vec![
        TimeEntry {
            timestamp_ms: 10_401,
            relative_offset: 9,
        },
        TimeEntry {
            timestamp_ms: 10_501,
            relative_offset: 11,
        },
    ];
    assert_eq!(s.time_index, times);
    assert_eq!(
        (s.max_timestamp_ms, s.offset_of_max_timestamp),
        (10_501, 11)
    );
    for (i, info) in infos.iter().enumerate() {
        let expected = match i {
            4 | 8 => vec![
                SegmentFile::Log,
                SegmentFile::OffsetIndex,
                SegmentFile::TimeIndex,
            ],
            12 => vec![SegmentFile::Log, SegmentFile::OffsetIndex],
            _ => vec![SegmentFile::Log],
        };
        assert_eq!(appended_files(&info.ops), expected, "batch {i}");
    }
    // The files hold what the segment holds.
    let on_disk = |log: &PartitionLog, disk: &Disk| {
        let s = segment(log, 0);
        assert_eq!(
            index::decode_offset_index(disk.file(0, SegmentFile::OffsetIndex)),
            Some(s.offset_index.clone())
        );
        assert_eq!(
            index::decode_time_index(disk.file(0, SegmentFile::TimeIndex)),
            Some(s.time_index.clone())
        );
    };
    on_disk(&log, &disk);
    // A larger timestamp between index points gets its entry at the roll.
    append(&mut log, &mut disk, stamped(20_000, &[0, 1]));
    assert_eq!(segment(&log, 0).time_index.len(), 2);
    log.set_segment_bytes(1);
    let roll = append(&mut log, &mut disk, batch(1));
    assert_eq!(roll.pos.segment_base, 30);
    assert_eq!(
        segment(&log, 0).time_index.last(),
        Some(&TimeEntry {
            timestamp_ms: 20_001,
            relative_offset: 29,
        })
    );
    on_disk(&log, &disk);
    // A roll with no larger timestamp since the last entry writes none.
    let mut log = PartitionLog::new(dir(), 14 * size2);
    let mut disk = Disk::default();
    let infos: Vec<_> = (0..15)
        .map(|i| append(&mut log, &mut disk, spec(i)))
        .collect();
    assert_eq!(infos[14].pos.segment_base, 28);
    assert_eq!(
        infos[14].ops[..4],
        creates(28)[..],
        "no time entry at the roll"
    );
    assert_eq!(infos[14].ops.len(), 5);
    assert_eq!(segment(&log, 0).time_index, times);
    on_disk(&log, &disk);
}

// ---- fetch ----

#[test]
fn fetch_honours_max_bytes_and_min_one_batch() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append_counts(&mut log, &mut disk, &[2, 2, 2]);
    sync(&mut log, &mut disk);
    let one = batch(2).len();
    assert_eq!(bases(&fetch(&log, &disk, 0, 2 * one, false)), vec![0, 2]);
    // The range may end inside a batch: clients drop the partial one.
    let cut = fetch(&log, &disk, 0, 3 * one - 1, false);
    assert_eq!(cut.len(), 3 * one - 1);
    assert_eq!(bases_partial(&cut), (vec![0, 2], one - 1));
    let short = fetch(&log, &disk, 0, one - 1, false);
    assert_eq!(bases_partial(&short), (vec![], one - 1));
    // KIP-74: the first batch goes whole whatever max_bytes says.
    assert_eq!(bases(&fetch(&log, &disk, 0, one - 1, true)), vec![0]);
    assert_eq!(bases(&fetch(&log, &disk, 0, 0, true)), vec![0]);
    assert!(fetch(&log, &disk, 0, 0, false).is_empty());
    assert_eq!(
        bases_partial(&fetch(&log, &disk, 2, one + 1, true)),
        (vec![2], 1)
    );
}

/// A fetch over `next_fetch_range` too: the ranges of consecutive
/// segments a fetch answer carries, read one after the other.
fn fetch_spanning(log: &PartitionLog, disk: &Disk, offset: i64, max_bytes: usize) -> Bytes {
    let (first, _) = locate(log, disk, offset);
    let upper = log.high_watermark_position();
    let mut ranges = vec![log.fetch_range(&first, upper, max_bytes, false)];
    let mut left = max_bytes - ranges[0].len as usize;
    while let Some(next) = log.next_fetch_range(ranges.last().unwrap(), upper, left) {
        assert_eq!(next.position, 0, "a next segment is read from its start");
        left -= next.len as usize;
        ranges.push(next);
    }
    let mut out = Vec::new();
    for r in &ranges {
        out.extend_from_slice(&disk.read(r).expect("a fetch range lies in its file"));
    }
    Bytes::from(out)
}

#[test]
fn a_fetch_goes_on_into_the_next_segments_while_it_has_room() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    let one = batch(2).len();
    log.set_segment_bytes(2 * one as u64);
    append_counts(&mut log, &mut disk, &[2, 2, 2, 2, 2]);
    sync(&mut log, &mut disk);
    append_counts(&mut log, &mut disk, &[2]);
    let bases_of_segments: Vec<i64> = log.segments().map(|s| s.base_offset).collect();
    assert_eq!(bases_of_segments, vec![0, 4, 8]);
    // Whole segments, then the one holding the high watermark up to it.
    assert_eq!(
        bases(&fetch_spanning(&log, &disk, 0, usize::MAX)),
        vec![0, 2, 4, 6, 8]
    );
    assert_eq!(
        bases(&fetch_spanning(&log, &disk, 2, usize::MAX)),
        vec![2, 4, 6, 8]
    );
    // max_bytes still bounds it: a cut inside the second segment's batch.
    let cut = fetch_spanning(&log, &disk, 0, 3 * one + 1);
    assert_eq!(bases_partial(&cut), (vec![0, 2, 4], 1));
    // A range that ends inside its segment (max_bytes) goes no further.
    let (first, _) = locate(&log, &disk, 0);
    let upper = log.high_watermark_position();
    let short = log.fetch_range(&first, upper, one, false);
    assert_eq!(log.next_fetch_range(&short, upper, usize::MAX), None);
    // Nothing past the bound: from the segment holding it, no next range.
    let (last, _) = locate(&log, &disk, 8);
    let tail = log.fetch_range(&last, upper, usize::MAX, false);
    assert_eq!(log.next_fetch_range(&tail, upper, usize::MAX), None);
}

#[test]
fn fetch_starts_at_the_batch_holding_the_offset() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append_counts(&mut log, &mut disk, &[3, 3]);
    sync(&mut log, &mut disk);
    assert_eq!(bases(&fetch(&log, &disk, 1, usize::MAX, false)), vec![0, 3]);
    assert_eq!(bases(&fetch(&log, &disk, 2, usize::MAX, false)), vec![0, 3]);
    assert_eq!(bases(&fetch(&log, &disk, 5, usize::MAX, false)), vec![3]);
}

#[test]
fn fetch_stops_at_the_upper_bound() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append_counts(&mut log, &mut disk, &[2, 2, 2]);
    sync(&mut log, &mut disk);
    append_counts(&mut log, &mut disk, &[2]);
    assert_eq!((log.high_watermark(), log.log_end_offset()), (6, 8));
    assert_eq!(
        bases(&fetch(&log, &disk, 0, usize::MAX, true)),
        vec![0, 2, 4],
        "nothing above the high watermark"
    );
    // At or above the high watermark nothing is located (the fetch answers
    // empty between it and the log end, without asking the log).
    for offset in [6, 7, 8] {
        assert_eq!(
            locate_result(&log, &disk, offset),
            Locate::Failed(ReadError::OffsetOutOfRange)
        );
    }
    // A last stable offset: the position of the batch holding it.
    let (lso_batch, _) = locate(&log, &disk, 4);
    let lso = LogPosition {
        segment_base: lso_batch.segment_base,
        position: lso_batch.position,
    };
    let (first, _) = locate(&log, &disk, 1);
    let range = log.fetch_range(&first, lso, usize::MAX, false);
    assert_eq!(bases(&disk.read(&range).unwrap()), vec![0, 2]);
    let range = log.fetch_range(&first, lso, 0, true);
    assert_eq!(bases(&disk.read(&range).unwrap()), vec![0]);
}

#[test]
fn fetch_reads_within_one_segment() {
    let (mut log, mut disk, one) = three_segments();
    log.set_segment_bytes(3 * one);
    append_counts(&mut log, &mut disk, &[2]);
    assert_eq!(bases(&fetch(&log, &disk, 0, usize::MAX, false)), vec![0, 2]);
    assert_eq!(bases(&fetch(&log, &disk, 5, usize::MAX, false)), vec![4, 6]);
    // The high watermark's segment: up to it, not to the segment's end.
    assert_eq!(segment(&log, 8).size_bytes, 3 * one);
    assert_eq!(
        bases(&fetch(&log, &disk, 8, usize::MAX, false)),
        vec![8, 10]
    );
    // A bound in a later segment ends the range at the segment's end.
    let (first, _) = locate(&log, &disk, 2);
    let upper = LogPosition {
        segment_base: 8,
        position: one,
    };
    let range = log.fetch_range(&first, upper, usize::MAX, false);
    assert_eq!(
        (range.segment_base, range.position, range.len),
        (0, one, one)
    );
}

#[test]
fn locate_out_of_range() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    let out = Locate::Failed(ReadError::OffsetOutOfRange);
    assert_eq!(locate_result(&log, &disk, 0), out, "an empty log");
    append_counts(&mut log, &mut disk, &[2]);
    sync(&mut log, &mut disk);
    assert_eq!(locate_result(&log, &disk, -1), out);
    assert_eq!(locate_result(&log, &disk, 2), out);
    assert_eq!(locate_result(&log, &disk, 3), out);
    assert_eq!(locate(&log, &disk, 1).0.base_offset, 0);
    // Below the log start, after retention.
    let (mut log, disk, _) = three_segments();
    log.apply_retention(0, -1, 0);
    assert_eq!(log.log_start_offset(), 8);
    assert_eq!(locate_result(&log, &disk, 7), out);
    assert_eq!(locate_result(&log, &disk, 0), out);
    assert_eq!(locate(&log, &disk, 8).0.base_offset, 8);
}

#[test]
fn known_batches_spare_reads_and_old_offsets_are_read() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    let count = limits::KNOWN_BATCHES_MAX + 100;
    let infos = append_counts(&mut log, &mut disk, &vec![1; count]);
    sync(&mut log, &mut disk);
    let index_entries: usize = log.segments().map(Segment::index_entries).sum();
    assert_eq!(
        log.memory_entries() - index_entries,
        limits::KNOWN_BATCHES_MAX,
        "the known batches are bounded"
    );
    let last = infos.last().unwrap();
    let (pos, reads) = locate(&log, &disk, last.base_offset);
    assert_eq!((pos, reads.len()), (last.pos, 0));
    let oldest_known = infos[count - limits::KNOWN_BATCHES_MAX].base_offset;
    assert_eq!(locate(&log, &disk, oldest_known).1.len(), 0);
    assert!(log.known_batch(oldest_known - 1).is_none());
    for offset in [0, 1, 50, oldest_known - 1] {
        let (pos, reads) = locate(&log, &disk, offset);
        assert_eq!(pos, infos[offset as usize].pos);
        assert!(!reads.is_empty(), "offset {offset} is not known");
        assert!(reads.iter().all(|r| r.file == SegmentFile::Log));
    }
}

#[test]
fn every_offset_of_a_long_log_is_located_with_at_most_one_read() {
    let mut log = PartitionLog::new(dir(), 256 * 1024);
    let mut disk = Disk::default();
    let infos: Vec<_> = (0..2_000usize)
        .map(|i| {
            let spec = TestBatch {
                timestamp_deltas: (0..(i % 3 + 1) as i64).collect(),
                value_bytes: 50 + (i * 37) % 400,
                ..TestBatch::default()
            };
            append(&mut log, &mut disk, spec.encode())
        })
        .collect();
    sync(&mut log, &mut disk);
    assert!(log.segments().count() >= 4, "{:?}", segment_bases(&log));
    assert!(log.segments().all(|s| s.index_entries() > 0));
    let known_from = infos.len() - limits::KNOWN_BATCHES_MAX;
    for (i, info) in infos.iter().enumerate() {
        for offset in info.base_offset..=info.last_offset {
            let (pos, reads) = locate(&log, &disk, offset);
            assert_eq!(pos, info.pos, "offset {offset}");
            if i >= known_from {
                assert!(reads.is_empty(), "offset {offset} is known");
            } else {
                // The sparse index puts the batch within one header window.
                assert_eq!(reads.len(), 1, "offset {offset}: {reads:?}");
                assert_eq!(reads[0].segment_base, info.pos.segment_base);
                assert!(reads[0].len <= limits::LOCATE_READ_BYTES as u64);
            }
        }
    }
    check_every_offset(&log, &disk, &infos);
}

// ---- durability ----

#[test]
fn high_watermark_moves_only_on_mark_durable() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append_counts(&mut log, &mut disk, &[1]);
    let first = log.sync_point(SyncScope::All);
    append_counts(&mut log, &mut disk, &[1]);
    let second = log.sync_point(SyncScope::All);
    assert_eq!(log.high_watermark(), 0);
    log.mark_durable(second, SyncScope::All);
    assert_eq!(log.high_watermark(), 2);
    log.mark_durable(first, SyncScope::All);
    assert_eq!(log.high_watermark(), 2, "never backwards");
    assert_eq!(log.high_watermark_position(), log.end_position());
}

#[test]
fn a_sync_point_from_before_a_truncation_is_ignored() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append_counts(&mut log, &mut disk, &[1]);
    sync(&mut log, &mut disk);
    append_counts(&mut log, &mut disk, &[1]);
    let lost = log.sync_point(SyncScope::All);
    // That sync failed.
    disk.apply(&log.truncate_to_durable(&[]));
    assert_eq!(log.log_end_offset(), 1);
    append_counts(&mut log, &mut disk, &[1]);
    assert_eq!(log.log_end_offset(), 2, "the same end as the lost point");
    log.mark_durable(lost, SyncScope::All);
    assert_eq!(
        log.high_watermark(),
        1,
        "a sync in flight at the failure proves nothing"
    );
    sync(&mut log, &mut disk);
    assert_eq!(log.high_watermark(), 2);
}

#[test]
fn truncate_to_durable_cuts_the_log_and_deletes_later_segments() {
    let one = batch(1).len() as u64;
    let mut log = PartitionLog::new(dir(), 2 * one);
    let mut disk = Disk::default();
    append_counts(&mut log, &mut disk, &[1]);
    sync(&mut log, &mut disk);
    // Offset 1 lands in segment 0 after the durable batch; 2..=4 roll on.
    append_counts(&mut log, &mut disk, &[1, 1, 1, 1]);
    assert_eq!(segment_bases(&log), vec![0, 2, 4]);
    let ops = log.truncate_to_durable(&[]);
    let mut expected = vec![
        DiskOp::DeleteSegment {
            dir: dir(),
            segment_base: 4,
        },
        DiskOp::DeleteSegment {
            dir: dir(),
            segment_base: 2,
        },
    ];
    expected.push(cuts(0, [one, 0, 0, 0])[0].clone());
    assert_eq!(ops[..3], expected[..]);
    disk.apply(&ops);
    // Segment 0 keeps its final time entry (offset 0's timestamp): the roll
    // wrote it after the last good sync, so the repair cuts the file back to
    // what was synced and writes it again.
    assert_eq!(
        index::decode_time_index(disk.file(0, SegmentFile::TimeIndex)).map(|e| e.len()),
        Some(1)
    );
    assert_eq!(disk.bases(), vec![0]);
    assert_eq!(disk.file(0, SegmentFile::Log).len() as u64, one);
    assert_eq!((log.log_end_offset(), log.high_watermark()), (1, 1));
    assert_eq!(segment_bases(&log), vec![0]);
    assert!(log.known_batch(1).is_none(), "cut batches are forgotten");
    let again = log.truncate_to_durable(&[]);
    assert!(
        again
            .iter()
            .all(|op| !matches!(op, DiskOp::DeleteSegment { .. })
                && !matches!(
                    op,
                    DiskOp::Truncate {
                        file: SegmentFile::Log,
                        ..
                    }
                )),
        "nothing above the high watermark: only the index files are repaired"
    );
    disk.apply(&again);
    // Offsets are handed out again from the durable end, and a restart finds
    // the same log.
    let info = append(&mut log, &mut disk, batch(1));
    assert_eq!((info.base_offset, info.pos.segment_base), (1, 0));
    sync(&mut log, &mut disk);
    let recovered = recover(&mut disk, 2 * one, None);
    assert!(repairs(&recovered.ops).is_empty());
    assert_eq!(recovered.log.log_end_offset(), 2);
}

#[test]
fn truncate_to_durable_cuts_the_index_files_with_the_log() {
    let size = kib_bytes();
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    for i in 0..6 {
        append(&mut log, &mut disk, kib(kib_ts(i)));
    }
    sync(&mut log, &mut disk);
    for i in 6..12 {
        append(&mut log, &mut disk, kib(kib_ts(i)));
    }
    assert_eq!(
        segment(&log, 0).offset_index.len(),
        2,
        "entries at batches 4 and 8"
    );
    let ops = log.truncate_to_durable(&[]);
    assert_eq!(ops, cuts(0, [6 * size, 8, 12, 0]));
    disk.apply(&ops);
    let s = segment(&log, 0);
    assert_eq!(
        s.offset_index,
        vec![OffsetEntry {
            relative_offset: 4,
            position: (4 * size) as u32,
        }]
    );
    assert_eq!(
        index::decode_offset_index(disk.file(0, SegmentFile::OffsetIndex)),
        Some(s.offset_index.clone())
    );
    assert_eq!(
        index::decode_time_index(disk.file(0, SegmentFile::TimeIndex)),
        Some(s.time_index.clone())
    );
    // Appending the same batches again writes the same files as a log that
    // never failed (the interval counts from the kept entry).
    for i in 6..12 {
        append(&mut log, &mut disk, kib(kib_ts(i)));
    }
    let mut fresh_log = PartitionLog::new(dir(), 1 << 20);
    let mut fresh = Disk::default();
    for i in 0..12 {
        append(&mut fresh_log, &mut fresh, kib(kib_ts(i)));
    }
    assert_eq!(disk.index_files(), fresh.index_files());
    assert_eq!(
        disk.file(0, SegmentFile::Log),
        fresh.file(0, SegmentFile::Log)
    );
}

fn abort_of(producer_id: i64, first_offset: i64, marker: &AppendInfo) -> AbortedTxn {
    AbortedTxn {
        producer_id,
        first_offset,
        last_offset: marker.base_offset,
        last_stable_offset: first_offset,
    }
}

fn txn_data(producer_id: i64) -> Bytes {
    TestBatch {
        attributes: 0x10,
        producer_id,
        producer_epoch: 0,
        base_sequence: 0,
        ..TestBatch::default()
    }
    .encode()
}

#[test]
fn truncate_to_durable_cuts_the_txnindex_entries_of_cut_markers() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append(&mut log, &mut disk, txn_data(7));
    let m1 = append(&mut log, &mut disk, marker::build(7, 0, false, 0, 5));
    let a1 = abort_of(7, 0, &m1);
    disk.apply_one(&log.append_aborted(&a1));
    sync(&mut log, &mut disk);
    append(&mut log, &mut disk, txn_data(8));
    let m2 = append(&mut log, &mut disk, marker::build(8, 0, false, 0, 5));
    let a2 = abort_of(8, 2, &m2);
    disk.apply_one(&log.append_aborted(&a2));
    assert_eq!(
        index::decode_txn_index(disk.file(0, SegmentFile::TxnIndex)),
        Some(vec![a1, a2])
    );
    let ops = log.truncate_to_durable(&[a2]);
    assert!(ops.contains(&DiskOp::Truncate {
        dir: dir(),
        segment_base: 0,
        file: SegmentFile::TxnIndex,
        len: index::TXN_ENTRY_BYTES as u64,
    }));
    disk.apply(&ops);
    assert_eq!(
        index::decode_txn_index(disk.file(0, SegmentFile::TxnIndex)),
        Some(vec![a1])
    );
    // A cut marker in a later, deleted segment leaves this segment's entries.
    log.set_segment_bytes(1);
    append(&mut log, &mut disk, txn_data(8));
    let m3 = append(&mut log, &mut disk, marker::build(8, 0, false, 0, 5));
    assert_eq!(m3.pos.segment_base, 3);
    let a3 = abort_of(8, 2, &m3);
    disk.apply_one(&log.append_aborted(&a3));
    let ops = log.truncate_to_durable(&[a3]);
    assert_eq!(
        ops[0],
        DiskOp::DeleteSegment {
            dir: dir(),
            segment_base: 3
        }
    );
    assert!(ops.contains(&DiskOp::Truncate {
        dir: dir(),
        segment_base: 0,
        file: SegmentFile::TxnIndex,
        len: index::TXN_ENTRY_BYTES as u64,
    }));
    disk.apply(&ops);
    assert_eq!(
        index::decode_txn_index(disk.file(0, SegmentFile::TxnIndex)),
        Some(vec![a1])
    );
}

#[test]
fn truncate_to_durable_deletes_a_segment_left_empty() {
    let one = batch(1).len() as u64;
    let mut log = PartitionLog::new(dir(), one);
    let mut disk = Disk::default();
    append_counts(&mut log, &mut disk, &[1]);
    sync(&mut log, &mut disk);
    append_counts(&mut log, &mut disk, &[1]);
    let ops = log.truncate_to_durable(&[]);
    let mut expected = vec![DiskOp::DeleteSegment {
        dir: dir(),
        segment_base: 1,
    }];
    expected.push(cuts(0, [one, 0, 0, 0])[0].clone());
    assert_eq!(ops[..2], expected[..]);
    disk.apply(&ops);
    assert_eq!(
        disk.file(0, SegmentFile::TimeIndex).len(),
        12,
        "the roll's entry, repaired"
    );
    assert_eq!(segment_bases(&log), vec![0]);
    // The first segment stays, even empty, because its name is the log start.
    let mut fresh = PartitionLog::new(dir(), one);
    let mut disk = Disk::default();
    append_counts(&mut fresh, &mut disk, &[1]);
    let ops = fresh.truncate_to_durable(&[]);
    assert_eq!(ops, cuts(0, [0; 4]));
    disk.apply(&ops);
    assert_eq!(fresh.log_end_offset(), 0);
    let again = append(&mut fresh, &mut disk, batch(1));
    assert_eq!(again.base_offset, 0);
    assert_eq!(appended_files(&again.ops), vec![SegmentFile::Log]);
    assert_eq!(again.ops.len(), 1, "the segment's files are there");
}

#[test]
fn truncate_to_durable_deletes_the_segment_rolled_past_the_high_watermark() {
    // The high watermark ends segment 1; segment 2 was rolled after it and
    // holds nothing durable: the cut deletes it, and a restart agrees.
    let one = batch(1).len() as u64;
    let mut disk = Disk::default();
    let mut log = PartitionLog::new(dir(), one);
    append_counts(&mut log, &mut disk, &[1, 1]);
    sync(&mut log, &mut disk);
    assert_eq!(segment_bases(&log), vec![0, 1]);
    let info = append(&mut log, &mut disk, batch(1));
    assert_eq!((info.base_offset, info.pos.segment_base), (2, 2));
    let ops = log.truncate_to_durable(&[]);
    assert!(ops.contains(&DiskOp::DeleteSegment {
        dir: dir(),
        segment_base: 2
    }));
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(log.high_watermark(), 2);
    disk.apply(&ops);
    let again = recover(&mut disk, one, None).log;
    assert_eq!(
        again.log_end_offset(),
        2,
        "a restart finds the same log end"
    );
}

#[test]
fn recovery_drops_an_empty_segment_after_a_gap() {
    // A later segment's empty file survived a power cut that took the
    // previous segment's unsynced tail (offsets 1..4): the log ends at 1.
    let mut disk = Disk::default();
    let mut log = PartitionLog::new(dir(), 1 << 20);
    append_counts(&mut log, &mut disk, &[1]);
    disk.apply(&creates(5));
    let log = recover(&mut disk, 1 << 20, None).log;
    assert_eq!(log.log_end_offset(), 1);
    assert_eq!(segment_bases(&log), vec![0]);
}

#[test]
fn delete_all_removes_the_partition() {
    let (log, mut disk, _) = three_segments();
    let other = PartitionDir::new("t", 1);
    disk.apply_one(&DiskOp::Append {
        dir: other.clone(),
        segment_base: 0,
        file: SegmentFile::Log,
        bytes: batch(1),
    });
    let op = log.delete_all();
    assert_eq!(op, DiskOp::DeletePartition { dir: dir() });
    disk.apply_one(&op);
    assert!(disk.bases().is_empty());
    assert_eq!(
        disk.files().len(),
        1,
        "only the other partition's file is left"
    );
}

// ---- recovery ----

#[test]
fn recovery_without_checkpoint_reads_everything_and_rebuilds_the_indexes() {
    let (mut log, mut disk, infos) = kib_log(30);
    sync(&mut log, &mut disk);
    assert_eq!(segment_bases(&log), vec![0, 10, 20]);
    let written = disk.index_files();
    // Lose the index files' contents: they are rebuilt from the batches.
    for base in [0, 10, 20] {
        disk.tamper(base, SegmentFile::OffsetIndex, |f| f.clear());
        disk.tamper(base, SegmentFile::TimeIndex, |f| f.truncate(5));
    }
    let r = recover(&mut disk, 10 * kib_bytes(), None);
    assert!(!r.from_checkpoint);
    let size = 10 * kib_bytes();
    let read: Vec<_> = r
        .reads
        .iter()
        .map(|r| (r.segment_base, r.position, r.len))
        .collect();
    assert_eq!(read, vec![(0, 0, size), (10, 0, size), (20, 0, size)]);
    assert_eq!(disk.adopted, vec![0, 10, 20]);
    assert!(repairs(&r.ops).is_empty());
    assert_eq!(disk.index_files(), written, "byte-identical index files");
    assert_eq!(shape(&r.log), shape(&log));
    assert_eq!(
        (
            r.log.log_start_offset(),
            r.log.high_watermark(),
            r.log.log_end_offset()
        ),
        (0, 30, 30)
    );
    assert_eq!(r.log.durable_bytes(), log.size_bytes());
    let scanned: Vec<_> = r.scanned.iter().map(|b| b.pos).collect();
    let appended: Vec<_> = infos.iter().map(|i| i.pos).collect();
    assert_eq!(scanned, appended);
    check_every_offset(&r.log, &disk, &infos);
}

#[test]
fn recovery_from_a_checkpoint_reads_only_above_it() {
    let size = kib_bytes();
    // Checkpoints: an empty log, inside segment 0, at the end of segment 0
    // (rolled afterwards), inside segment 20, at the very end.
    for at in [0, 5, 10, 25, 35] {
        let (mut log, mut disk, mut infos) = kib_log(at);
        sync(&mut log, &mut disk);
        let checkpoint = log.checkpoint();
        assert_eq!(checkpoint.offset, at as i64);
        for i in at..35 {
            infos.push(append(&mut log, &mut disk, kib(kib_ts(i))));
        }
        sync(&mut log, &mut disk);
        let written = disk.index_files();
        let r = recover(&mut disk, 10 * size, Some(&checkpoint));
        assert!(r.from_checkpoint, "checkpoint at {at}");
        let recovery_point = PartitionLog::recovery_position(&checkpoint);
        for range in &r.reads {
            let start = LogPosition {
                segment_base: range.segment_base,
                position: range.position,
            };
            assert!(
                start >= recovery_point,
                "{range:?} is below {recovery_point:?}"
            );
        }
        let read_bytes: u64 = r.reads.iter().map(|r| r.len).sum();
        assert_eq!(read_bytes, (35 - at) as u64 * size, "checkpoint at {at}");
        let scanned: Vec<_> = r.scanned.iter().map(|b| b.pos.base_offset).collect();
        assert_eq!(scanned, (at as i64..35).collect::<Vec<_>>());
        assert!(repairs(&r.ops).is_empty());
        assert_eq!(disk.index_files(), written, "checkpoint at {at}");
        assert_eq!(shape(&r.log), shape(&log), "checkpoint at {at}");
        assert_eq!(r.log.log_end_offset(), 35);
        assert_eq!(r.log.checkpoint(), log.checkpoint());
        check_every_offset(&r.log, &disk, &infos);
        // Timestamps are found in segments taken from their index files alone.
        let (found, _) = time_search(&r.log, &disk, kib_ts(3), 35);
        assert_eq!(found, TimeSearch::Found(3, kib_ts(3)));
        assert_eq!(max_ts(&r.log, &disk, 35), TimeSearch::Found(34, kib_ts(34)));
    }
}

/// Retention deleted the checkpoint's segment, and the batches after its
/// recovery point with it: the checkpoint's producer and transaction
/// snapshot never saw those batches (a marker there would leave its
/// transaction open for good), so recovery rebuilds from what remains, as
/// Kafka drops producer snapshots at or below the log start
/// (ProducerStateManager.truncateAndReload). Found by the simulator
/// (retention-under-faults seeds 59, 67, 121 and 249: the LSO stuck at the
/// log start after a restart).
#[test]
fn recovery_does_not_use_a_checkpoint_whose_segment_retention_deleted() {
    let size = kib_bytes();
    let (mut log, mut disk, mut infos) = kib_log(5);
    sync(&mut log, &mut disk);
    let checkpoint = log.checkpoint();
    assert_eq!((checkpoint.segment_base, checkpoint.offset), (0, 5));
    for i in 5..35 {
        infos.push(append(&mut log, &mut disk, kib(kib_ts(i))));
    }
    sync(&mut log, &mut disk);
    // Keep 15 KiB: segments 0 and 10 go, 20 and the active 30 stay.
    let deleted = log.apply_retention(kib_ts(35), -1, 15 * size as i64);
    disk.apply(&deleted);
    assert_eq!(log.log_start_offset(), 20);
    let r = recover(&mut disk, 10 * size, Some(&checkpoint));
    assert!(
        !r.from_checkpoint,
        "a checkpoint inside a deleted segment gives no snapshot"
    );
    let scanned: Vec<_> = r.scanned.iter().map(|b| b.pos.base_offset).collect();
    assert_eq!(scanned, (20..35).collect::<Vec<_>>());
    assert!(repairs(&r.ops).is_empty());
    assert_eq!(r.log.log_start_offset(), 20);
    assert_eq!(r.log.log_end_offset(), 35);
    check_every_offset(&r.log, &disk, &infos);
}

#[test]
fn recovery_of_a_clean_checkpoint_reads_nothing() {
    let (mut log, mut disk, infos) = kib_log(35);
    sync(&mut log, &mut disk);
    let r = recover(&mut disk, 10 * kib_bytes(), Some(&log.checkpoint()));
    assert!(r.reads.is_empty());
    // Only the checkpoint's segment is adopted (its index files may hold a
    // roll's final time entry written after the checkpoint), no data is read.
    assert_eq!(disk.adopted.len(), 1, "only the checkpoint's segment");
    assert!(r.scanned.is_empty());
    assert_eq!(shape(&r.log), shape(&log));
    check_every_offset(&r.log, &disk, &infos);
}

#[test]
fn recovery_from_a_checkpoint_cuts_a_torn_tail_above_it() {
    let (mut log, mut disk, _) = kib_log(25);
    sync(&mut log, &mut disk);
    let checkpoint = log.checkpoint();
    for i in 25..30 {
        append(&mut log, &mut disk, kib(kib_ts(i)));
    }
    // Half of batch 27 reached the disk.
    let size = kib_bytes();
    disk.tamper(20, SegmentFile::Log, |f| {
        f.truncate((7 * size + size / 2) as usize)
    });
    let r = recover(&mut disk, 10 * size, Some(&checkpoint));
    assert!(r.from_checkpoint);
    assert_eq!(
        repairs(&r.ops),
        vec![DiskOp::Truncate {
            dir: dir(),
            segment_base: 20,
            file: SegmentFile::Log,
            len: 7 * size,
        }]
    );
    assert_eq!(r.log.log_end_offset(), 27);
    assert_eq!(segment(&r.log, 20).offset_index.len(), 1);
}

#[test]
fn recovery_cuts_a_batch_torn_in_half() {
    let (_, mut disk, one) = three_segments();
    disk.tamper(8, SegmentFile::Log, |f| {
        f.truncate((one + one / 2) as usize)
    });
    let r = recover(&mut disk, 2 * one, None);
    assert_eq!(
        repairs(&r.scan_ops),
        vec![DiskOp::Truncate {
            dir: dir(),
            segment_base: 8,
            file: SegmentFile::Log,
            len: one,
        }]
    );
    assert_eq!(disk.file(8, SegmentFile::Log).len() as u64, one);
    let mut log = r.log;
    assert_eq!(log.log_end_offset(), 10);
    assert_eq!(bases(&fetch(&log, &disk, 0, usize::MAX, false)), vec![0, 2]);
    assert_eq!(bases(&fetch(&log, &disk, 8, usize::MAX, false)), vec![8]);
    // The active segment carries on from the valid prefix.
    let info = append(&mut log, &mut disk, batch(1));
    assert_eq!(
        (info.base_offset, info.pos.segment_base, info.pos.position),
        (10, 8, one)
    );
}

#[test]
fn recovery_cuts_at_a_flipped_crc_byte_and_deletes_later_segments() {
    let (_, mut disk, one) = three_segments();
    // A byte of the CRC field of segment 4's second batch.
    disk.tamper(4, SegmentFile::Log, |f| f[one as usize + 18] ^= 0xff);
    let r = recover(&mut disk, 2 * one, None);
    assert_eq!(
        repairs(&r.scan_ops),
        vec![
            DiskOp::Truncate {
                dir: dir(),
                segment_base: 4,
                file: SegmentFile::Log,
                len: one,
            },
            DiskOp::DeleteSegment {
                dir: dir(),
                segment_base: 8,
            },
        ]
    );
    assert_eq!(segment_bases(&r.log), vec![0, 4]);
    assert_eq!(disk.bases(), vec![0, 4]);
    assert_eq!(r.log.log_end_offset(), 6);
    assert_eq!(
        locate_result(&r.log, &disk, 7),
        Locate::Failed(ReadError::OffsetOutOfRange)
    );
    let again = recover(&mut disk, 2 * one, None);
    assert!(
        repairs(&again.ops).is_empty(),
        "the repaired files recover cleanly"
    );
    assert_eq!(again.log.log_end_offset(), 6);
}

#[test]
fn recovery_cuts_garbage_after_valid_batches() {
    for junk in [0xab, 0x00] {
        // Garbage, or zeros (a file extended but not written).
        let (_, mut disk, one) = three_segments();
        disk.tamper(8, SegmentFile::Log, |f| f.extend_from_slice(&[junk; 100]));
        let r = recover(&mut disk, 2 * one, None);
        assert_eq!(
            repairs(&r.ops),
            vec![DiskOp::Truncate {
                dir: dir(),
                segment_base: 8,
                file: SegmentFile::Log,
                len: 2 * one,
            }],
            "junk {junk:#x}"
        );
        assert_eq!(r.log.log_end_offset(), 12);
    }
}

#[test]
fn recovery_cuts_a_later_segment_torn_at_its_start() {
    let (_, mut disk, one) = three_segments();
    // Base offset 4 becomes 0, below the end of segment 0 (the CRC does not
    // cover it, so only the offset check can tell).
    disk.tamper(4, SegmentFile::Log, |f| f[7] ^= 0x04);
    let r = recover(&mut disk, 2 * one, None);
    assert_eq!(
        repairs(&r.scan_ops),
        vec![
            DiskOp::Truncate {
                dir: dir(),
                segment_base: 4,
                file: SegmentFile::Log,
                len: 0,
            },
            DiskOp::DeleteSegment {
                dir: dir(),
                segment_base: 8,
            },
        ]
    );
    // Segment 4 stays, empty and active: segment 0's batches end at its base.
    assert_eq!(segment_bases(&r.log), vec![0, 4]);
    assert_eq!(r.log.log_end_offset(), 4);
    assert_eq!(
        bases(&fetch(&r.log, &disk, 0, usize::MAX, false)),
        vec![0, 2]
    );
}

#[test]
fn recovery_never_appends_to_a_segment_below_the_recovery_point() {
    // The recovery point is the start of segment 10 (just rolled); its first
    // batch is torn. Found by the simulator (swarm seed 7342 with a disk
    // whose unsynced removals a power cut undoes): dropping the empty
    // segment made segment 0, trusted from its index files, active again;
    // a marker appended to it was torn by a power cut that also brought
    // segment 10 back, and the next start cut acknowledged data after the
    // torn bytes it had never read.
    let size = kib_bytes();
    let (mut log, mut disk, _) = kib_log(11);
    sync(&mut log, &mut disk);
    assert_eq!(disk.bases(), vec![0, 10]);
    let checkpoint = LogCheckpoint {
        offset: 10,
        segment_base: 10,
        position: 0,
        max_timestamp_ms: batch::NO_TIMESTAMP,
        offset_of_max_timestamp: -1,
    };
    disk.tamper(10, SegmentFile::Log, |f| f[18] ^= 0xff);
    let segment_0 = disk.file(0, SegmentFile::Log).to_vec();
    let mut r = recover(&mut disk, 10 * size, Some(&checkpoint));
    assert!(r.from_checkpoint);
    assert_eq!(
        repairs(&r.ops),
        vec![DiskOp::Truncate {
            dir: dir(),
            segment_base: 10,
            file: SegmentFile::Log,
            len: 0,
        }]
    );
    assert_eq!(segment_bases(&r.log), vec![0, 10]);
    assert_eq!(r.log.log_end_offset(), 10);
    let info = append(&mut r.log, &mut disk, kib(kib_ts(10)));
    assert_eq!(info.base_offset, 10);
    let targets: Vec<i64> = info
        .ops
        .iter()
        .filter_map(|op| match op {
            DiskOp::Append { segment_base, .. } | DiskOp::AppendBatch { segment_base, .. } => {
                Some(*segment_base)
            }
            _ => None,
        })
        .collect();
    assert!(
        !targets.is_empty() && targets.iter().all(|base| *base == 10),
        "appends go to segment 10, not below the recovery point: {targets:?}"
    );
    assert_eq!(disk.file(0, SegmentFile::Log).to_vec(), segment_0);
}

#[test]
fn recovery_treats_offsets_going_back_as_corruption() {
    let mut disk = Disk::default();
    disk.apply(&creates(0));
    for base in [0, 5, 3] {
        disk.tamper(0, SegmentFile::Log, |f| {
            f.extend_from_slice(&batch::with_base_offset(&batch(1), base))
        });
    }
    let one = batch(1).len() as u64;
    let r = recover(&mut disk, 1 << 20, None);
    assert_eq!(
        repairs(&r.ops),
        vec![DiskOp::Truncate {
            dir: dir(),
            segment_base: 0,
            file: SegmentFile::Log,
            len: 2 * one,
        }]
    );
    assert_eq!(r.log.log_end_offset(), 6);
    assert_eq!(
        bases(&fetch(&r.log, &disk, 0, usize::MAX, false)),
        vec![0, 5]
    );
    assert_eq!(locate(&r.log, &disk, 5).0.position, one);
}

#[test]
fn recovery_of_nothing_and_of_an_empty_segment() {
    let mut disk = Disk::default();
    let r = recover(&mut disk, 1 << 20, None);
    // Only the directory is adopted (a crashed process may have removed
    // files there unsynced); nothing is read.
    assert!(r.reads.is_empty());
    assert!(r.ops.iter().all(|op| matches!(
        op,
        DiskOp::Adopt {
            segment_base: 0,
            ..
        }
    )));
    assert_eq!((r.log.log_start_offset(), r.log.log_end_offset()), (0, 0));
    let mut log = r.log;
    let info = append(&mut log, &mut disk, batch(1));
    assert_eq!(info.ops[..4], creates(0)[..]);

    let mut disk = Disk::default();
    disk.apply(&creates(40));
    let r = recover(&mut disk, 1 << 20, None);
    assert!(repairs(&r.ops).is_empty());
    assert!(r.scanned.is_empty());
    let mut log = r.log;
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.high_watermark()
        ),
        (40, 40, 40)
    );
    let info = append(&mut log, &mut disk, batch(1));
    assert_eq!(info.base_offset, 40);
    assert_eq!(appended_files(&info.ops), vec![SegmentFile::Log]);
    assert!(matches!(
        info.ops[0],
        DiskOp::AppendBatch {
            segment_base: 40,
            ..
        }
    ));
    // A first segment torn at its start is cut, not deleted: its name
    // carries the log start offset.
    let mut disk = Disk::default();
    disk.apply(&creates(40));
    disk.tamper(40, SegmentFile::Log, |f| {
        f.extend_from_slice(&batch(1)[..30])
    });
    let r = recover(&mut disk, 1 << 20, None);
    assert_eq!(
        repairs(&r.ops),
        vec![DiskOp::Truncate {
            dir: dir(),
            segment_base: 40,
            file: SegmentFile::Log,
            len: 0,
        }]
    );
    assert_eq!(r.log.log_end_offset(), 40);
}

#[test]
fn recovery_reads_everything_when_an_index_below_the_checkpoint_is_bad() {
    type Damage = fn(&mut Disk);
    let damages: [(&str, Damage); 5] = [
        ("offset index missing", |d| {
            d.remove(0, SegmentFile::OffsetIndex)
        }),
        ("time index torn", |d| {
            d.tamper(10, SegmentFile::TimeIndex, |f| f.truncate(5))
        }),
        ("txn index garbled", |d| {
            d.tamper(0, SegmentFile::TxnIndex, |f| f.push(1))
        }),
        ("offset entry past the log", |d| {
            let entry = OffsetEntry {
                relative_offset: 9,
                position: 1 << 30,
            };
            let mut buf = BytesMut::new();
            entry.encode(&mut buf);
            d.tamper(10, SegmentFile::OffsetIndex, |f| f.extend_from_slice(&buf));
        }),
        ("checkpoint segment's index garbled", |d| {
            d.tamper(20, SegmentFile::OffsetIndex, |f| f.push(0))
        }),
    ];
    for (what, damage) in damages {
        let (mut log, mut disk, infos) = kib_log(30);
        sync(&mut log, &mut disk);
        let written = disk.index_files();
        let checkpoint = log.checkpoint();
        damage(&mut disk);
        let r = recover(&mut disk, 10 * kib_bytes(), Some(&checkpoint));
        assert!(!r.from_checkpoint, "{what}");
        let starts: Vec<_> = r
            .reads
            .iter()
            .map(|r| (r.segment_base, r.position))
            .collect();
        assert_eq!(starts, vec![(0, 0), (10, 0), (20, 0)], "{what}");
        assert_eq!(disk.index_files(), written, "{what}: rebuilt");
        assert_eq!(shape(&r.log), shape(&log), "{what}");
        check_every_offset(&r.log, &disk, &infos);
    }
    // Synced bytes missing from the checkpoint's segment: read everything too.
    let (mut log, mut disk, _) = kib_log(25);
    sync(&mut log, &mut disk);
    let checkpoint = log.checkpoint();
    disk.tamper(20, SegmentFile::Log, |f| f.truncate(kib_bytes() as usize));
    let r = recover(&mut disk, 10 * kib_bytes(), Some(&checkpoint));
    assert!(!r.from_checkpoint);
    assert_eq!(r.log.log_end_offset(), 21);
}

#[test]
fn recovery_deletes_orphan_index_files_and_segments_after_a_hole() {
    let (_, mut disk, one) = three_segments();
    // Retention deleted segment 0's .log, then the process died.
    disk.remove(0, SegmentFile::Log);
    let r = recover(&mut disk, 2 * one, None);
    assert_eq!(
        r.ops[0],
        DiskOp::DeleteSegment {
            dir: dir(),
            segment_base: 0,
        }
    );
    assert_eq!(disk.bases(), vec![4, 8]);
    assert_eq!((r.log.log_start_offset(), r.log.log_end_offset()), (4, 12));
    assert_eq!(locate(&r.log, &disk, 4).0.position, 0);
    // A .log missing further on: the log ends before it.
    let (_, mut disk, one) = three_segments();
    disk.remove(4, SegmentFile::Log);
    let r = recover(&mut disk, 2 * one, None);
    assert_eq!(
        repairs(&r.ops),
        vec![
            DiskOp::DeleteSegment {
                dir: dir(),
                segment_base: 4,
            },
            DiskOp::DeleteSegment {
                dir: dir(),
                segment_base: 8,
            },
        ]
    );
    assert_eq!(disk.bases(), vec![0]);
    assert_eq!(r.log.log_end_offset(), 4);
}

#[test]
fn recovery_returns_the_scanned_batches_in_order_with_their_markers() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append(&mut log, &mut disk, txn_data(7));
    append(&mut log, &mut disk, marker::build(7, 0, true, 0, 5));
    append(&mut log, &mut disk, txn_data(8));
    let abort = append(&mut log, &mut disk, marker::build(8, 0, false, 0, 5));
    let a = abort_of(8, 2, &abort);
    disk.apply_one(&log.append_aborted(&a));
    append(&mut log, &mut disk, batch(2));
    sync(&mut log, &mut disk);
    let checkpoint = log.checkpoint();
    let r = recover(&mut disk, 1 << 20, None);
    let scanned: Vec<_> = r
        .scanned
        .iter()
        .map(|b| {
            let commit = b.marker.map(|m| m.commit);
            (b.pos.base_offset, b.header.producer_id, commit)
        })
        .collect();
    assert_eq!(
        scanned,
        vec![
            (0, 7, None),
            (1, 7, Some(true)),
            (2, 8, None),
            (3, 8, Some(false)),
            (4, -1, None),
        ]
    );
    // Without a checkpoint the txnindex is rebuilt by the caller from the
    // markers (it is emptied); from a checkpoint, the entries below it are
    // handed back.
    assert!(r.aborted.is_empty());
    assert!(disk.file(0, SegmentFile::TxnIndex).is_empty());
    let mut recovered = r.log;
    disk.apply_one(&recovered.append_aborted(&a));
    let r = recover(&mut disk, 1 << 20, Some(&checkpoint));
    assert!(r.from_checkpoint);
    assert_eq!(r.aborted, vec![a]);
    assert!(r.reads.is_empty());
}

#[test]
fn recovery_reads_a_big_segment_in_chunks() {
    // A segment of more than one read, with a batch across the chunk edge.
    let mut log = PartitionLog::new(dir(), 1 << 30);
    let mut disk = Disk::default();
    let big = TestBatch {
        value_bytes: 100_000,
        ..TestBatch::default()
    }
    .encode();
    let count = limits::RECOVERY_READ_BYTES / big.len() + 3;
    let infos: Vec<_> = (0..count)
        .map(|_| append(&mut log, &mut disk, big.clone()))
        .collect();
    sync(&mut log, &mut disk);
    let written = disk.index_files();
    let r = recover(&mut disk, 1 << 30, None);
    assert!(r.reads.len() >= 2);
    assert!(r
        .reads
        .iter()
        .all(|r| r.len <= limits::RECOVERY_READ_BYTES as u64));
    for pair in r.reads.windows(2) {
        let end = pair[0].position + pair[0].len;
        assert!(pair[1].position <= end && pair[1].position > pair[0].position);
    }
    assert_eq!(r.scanned.len(), count);
    assert!(repairs(&r.ops).is_empty());
    assert_eq!(disk.index_files(), written);
    assert_eq!(shape(&r.log), shape(&log));
    check_every_offset(&r.log, &disk, &infos);
}

#[test]
fn recovery_reads_a_batch_larger_than_one_read() {
    // Found by these tests: a batch larger than RECOVERY_READ_BYTES (one
    // max.message.bytes allows) made the scan ask for the same range forever.
    let mut log = PartitionLog::new(dir(), 1 << 30);
    let mut disk = Disk::default();
    let huge = TestBatch {
        value_bytes: limits::RECOVERY_READ_BYTES + 1_000,
        ..TestBatch::default()
    }
    .encode();
    let infos = vec![
        append(&mut log, &mut disk, batch(1)),
        append(&mut log, &mut disk, huge),
        append(&mut log, &mut disk, batch(1)),
    ];
    sync(&mut log, &mut disk);
    let r = recover(&mut disk, 1 << 30, None);
    assert!(repairs(&r.ops).is_empty(), "{:?}", repairs(&r.ops));
    assert_eq!(r.scanned.len(), 3);
    assert_eq!(r.log.log_end_offset(), 3);
    check_every_offset(&r.log, &disk, &infos);
}

// ---- retention ----

#[test]
fn retention_by_bytes_deletes_oldest_whole_segments() {
    let (mut log, mut disk, one) = three_segments();
    let total = log.size_bytes() as i64;
    assert!(log.apply_retention(0, -1, -1).is_empty());
    assert!(
        log.apply_retention(0, -1, total - 2 * one as i64 + 1)
            .is_empty(),
        "dropping one would go below"
    );
    assert!(log.known_batch(0).is_some());
    let ops = log.apply_retention(0, -1, total - 2 * one as i64);
    assert_eq!(
        ops,
        vec![DiskOp::DeleteSegment {
            dir: dir(),
            segment_base: 0,
        }]
    );
    disk.apply(&ops);
    assert_eq!(disk.bases(), vec![4, 8]);
    assert_eq!(log.log_start_offset(), 4);
    assert!(
        log.known_batch(3).is_none(),
        "batches below the log start are forgotten"
    );
    assert!(log.known_batch(4).is_some());
    assert_eq!(
        locate_result(&log, &disk, 0),
        Locate::Failed(ReadError::OffsetOutOfRange)
    );
    assert_eq!(bases(&fetch(&log, &disk, 4, usize::MAX, false)), vec![4, 6]);
    // Size 0 deletes all but the active segment.
    let ops = log.apply_retention(0, -1, 0);
    assert_eq!(
        ops,
        vec![DiskOp::DeleteSegment {
            dir: dir(),
            segment_base: 4,
        }]
    );
    assert_eq!(segment_bases(&log), vec![8]);
    assert_eq!(log.log_start_offset(), 8);
    assert_eq!(log.size_bytes(), 2 * one);
}

#[test]
fn retention_by_time_follows_the_largest_timestamp() {
    let one = batch(1).len() as u64;
    let mut log = PartitionLog::new(dir(), one);
    let mut disk = Disk::default();
    for ts in [1_000, 5_000, 2_000, 9_000] {
        append(&mut log, &mut disk, stamped(ts, &[0]));
    }
    sync(&mut log, &mut disk);
    assert_eq!(segment_bases(&log), vec![0, 1, 2, 3]);
    assert!(
        log.apply_retention(2_000, 1_000, -1).is_empty(),
        "1000 is not older than 1000 ms"
    );
    let ops = log.apply_retention(2_001, 1_000, -1);
    assert_eq!(
        ops,
        vec![DiskOp::DeleteSegment {
            dir: dir(),
            segment_base: 0,
        }]
    );
    // Segment 1 (5000) holds segment 2 (2000) back, as in Kafka.
    assert!(log.apply_retention(5_500, 1_000, -1).is_empty());
    let ops = log.apply_retention(6_001, 1_000, -1);
    assert_eq!(
        ops,
        vec![
            DiskOp::DeleteSegment {
                dir: dir(),
                segment_base: 1,
            },
            DiskOp::DeleteSegment {
                dir: dir(),
                segment_base: 2,
            },
        ]
    );
    assert_eq!(log.log_start_offset(), 3);
    // The active segment stays however old.
    assert!(log.apply_retention(1_000_000, 0, 0).is_empty());
    assert_eq!(log.log_end_offset(), 4);
}

#[test]
fn retention_spares_data_that_is_not_durable() {
    let one = batch(1).len() as u64;
    let mut log = PartitionLog::new(dir(), one);
    let mut disk = Disk::default();
    append_counts(&mut log, &mut disk, &[1, 1, 1]);
    assert!(
        log.apply_retention(1 << 40, 0, 0).is_empty(),
        "nothing is durable"
    );
    let point = log.sync_point(SyncScope::All);
    append_counts(&mut log, &mut disk, &[1]);
    log.mark_durable(point, SyncScope::All);
    // Segments 0 and 1 go; 2 stays because segment 3 holds nothing durable.
    let ops = log.apply_retention(1 << 40, 0, -1);
    assert_eq!(ops.len(), 2);
    assert_eq!(log.log_start_offset(), 2);
    assert!(log.log_start_offset() <= log.high_watermark());
}

#[test]
fn retention_of_recovered_segments_without_timestamps_starts_at_first_check() {
    let one = batch(1).len() as u64;
    let mut log = PartitionLog::new(dir(), one);
    let mut disk = Disk::default();
    append(&mut log, &mut disk, stamped(-1, &[0]));
    append(&mut log, &mut disk, stamped(-1, &[0]));
    sync(&mut log, &mut disk);
    let mut log = recover(&mut disk, one, None).log;
    assert_eq!(segment(&log, 0).retention_timestamp_ms(), None);
    assert!(
        log.apply_retention(10_000, 500, -1).is_empty(),
        "the first check starts the clock"
    );
    assert!(log.apply_retention(10_500, 500, -1).is_empty());
    assert_eq!(log.apply_retention(10_501, 500, -1).len(), 1);
}

// ---- timestamps ----

#[test]
fn offset_for_timestamp_finds_the_exact_record() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    for deltas in [&[0, 10, 20][..], &[5, 50, 30], &[100]] {
        append(&mut log, &mut disk, stamped(1_000, deltas));
    }
    sync(&mut log, &mut disk);
    let end = log.high_watermark();
    let search = |ts| time_search(&log, &disk, ts, end).0;
    assert_eq!(search(0), TimeSearch::Found(0, 1_000));
    assert_eq!(search(1_010), TimeSearch::Found(1, 1_010));
    assert_eq!(search(1_011), TimeSearch::Found(2, 1_020));
    assert_eq!(search(1_021), TimeSearch::Found(4, 1_050));
    assert_eq!(search(1_051), TimeSearch::Found(6, 1_100));
    assert_eq!(search(1_101), TimeSearch::NotFound);
    assert_eq!(
        time_search(&log, &disk, 1_051, 6).0,
        TimeSearch::NotFound,
        "found at or above the bound"
    );
    assert_eq!(
        time_search(&log, &disk, 1_021, 6).0,
        TimeSearch::Found(4, 1_050)
    );
    // Nothing durable: nothing found.
    append(&mut log, &mut disk, stamped(5_000, &[0]));
    assert_eq!(time_search(&log, &disk, 2_000, 8).0, TimeSearch::NotFound);
}

/// A batch as an idempotent client would send it, compressed with lz4
/// (consecutive sequences, or the encoder splits it into several batches).
fn lz4_batch(timestamps: &[i64]) -> Bytes {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let records: Vec<Record> = timestamps
        .iter()
        .enumerate()
        .map(|(i, ts)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: 9,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32,
            timestamp: *ts,
            key: None,
            value: Some(Bytes::from(vec![b'x'; 200])),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::Lz4,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
    let bytes = buf.freeze();
    let header = batch::check_batch(&bytes).unwrap();
    assert_eq!(header.total_bytes(), bytes.len(), "one batch");
    assert_eq!(header.compression_code(), 3);
    bytes
}

#[test]
fn offset_for_timestamp_in_a_compressed_batch_is_its_base() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append(&mut log, &mut disk, batch(2));
    let compressed = append(&mut log, &mut disk, lz4_batch(&[1_000, 1_007, 1_003]));
    assert!(compressed.pos.size_bytes < 600, "the values compressed");
    sync(&mut log, &mut disk);
    assert_eq!(
        time_search(&log, &disk, 1_002, 5).0,
        TimeSearch::Found(2, 1_007)
    );
    assert_eq!(max_ts(&log, &disk, 5), TimeSearch::Found(2, 1_007));
    assert_eq!(bases(&fetch(&log, &disk, 3, usize::MAX, false)), vec![2]);
}

#[test]
fn offset_for_timestamp_skips_segments_and_starts_at_the_time_index() {
    let size = kib_bytes();
    let (mut log, mut disk, infos) = kib_log(100);
    sync(&mut log, &mut disk);
    assert_eq!(log.segments().count(), 10);
    // Batch 99, in the last segment: segments 0..90 are passed over by their
    // largest timestamp, and the search starts at the index entry of batch 98.
    let (found, reads) = time_search(&log, &disk, kib_ts(99), 100);
    assert_eq!(found, TimeSearch::Found(99, kib_ts(99)));
    assert!(!reads.is_empty());
    assert!(reads.iter().all(|r| r.segment_base == 90), "{reads:?}");
    assert_eq!(
        reads[0].position,
        8 * size,
        "from the index entry of batch 98"
    );
    // Every batch is found, each with a read or two.
    for (i, info) in infos.iter().enumerate() {
        let (found, reads) = time_search(&log, &disk, kib_ts(i) - 50, 100);
        assert_eq!(
            found,
            TimeSearch::Found(info.base_offset, kib_ts(i)),
            "batch {i}"
        );
        assert!(reads.len() <= 2, "batch {i}: {reads:?}");
        assert!(reads
            .iter()
            .all(|r| r.segment_base == info.pos.segment_base));
    }
    assert_eq!(
        time_search(&log, &disk, kib_ts(99) + 1, 100).0,
        TimeSearch::NotFound
    );
    // The upper offset: batch 50 and later are not searched.
    let (found, reads) = time_search(&log, &disk, kib_ts(60), 50);
    assert_eq!(found, TimeSearch::NotFound);
    assert!(reads.is_empty(), "segment 50 is past the bound");
    assert_eq!(
        time_search(&log, &disk, kib_ts(48), 49).0,
        TimeSearch::Found(48, kib_ts(48))
    );
    assert_eq!(
        time_search(&log, &disk, kib_ts(49), 49).0,
        TimeSearch::NotFound
    );
}

#[test]
fn offset_for_timestamp_reads_a_batch_larger_than_a_header_window() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    let big = TestBatch {
        base_timestamp: 1_000,
        timestamp_deltas: vec![0, 5, 9],
        value_bytes: limits::LOCATE_READ_BYTES,
        ..TestBatch::default()
    }
    .encode();
    let info = append(&mut log, &mut disk, big);
    sync(&mut log, &mut disk);
    let (found, reads) = time_search(&log, &disk, 1_004, 3);
    assert_eq!(found, TimeSearch::Found(1, 1_005));
    assert_eq!(reads.len(), 2, "a header window, then the whole batch");
    assert_eq!((reads[1].position, reads[1].len), (0, info.pos.size_bytes));
}

#[test]
fn max_timestamp_finds_the_record() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    assert_eq!(max_ts(&log, &disk, 0), TimeSearch::NotFound);
    append(&mut log, &mut disk, stamped(1_000, &[0, 9, 2]));
    append(&mut log, &mut disk, stamped(1_000, &[9, 1]));
    sync(&mut log, &mut disk);
    assert_eq!(
        max_ts(&log, &disk, 5),
        TimeSearch::Found(1, 1_009),
        "first batch wins the tie, and in it the first record"
    );
    append(&mut log, &mut disk, stamped(1_000, &[50]));
    sync(&mut log, &mut disk);
    assert_eq!(max_ts(&log, &disk, 6), TimeSearch::Found(5, 1_050));
    assert_eq!(
        max_ts(&log, &disk, 5),
        TimeSearch::NotFound,
        "a segment whose largest timestamp lies at or above the bound is passed over"
    );
    // Across segments: the earlier segment wins a tie, and one whose largest
    // timestamp lies at or above the bound is passed over.
    log.set_segment_bytes(1);
    append(&mut log, &mut disk, stamped(1_040, &[10]));
    append(&mut log, &mut disk, stamped(1_000, &[0, 99]));
    sync(&mut log, &mut disk);
    assert_eq!(segment_bases(&log), vec![0, 6, 7]);
    assert_eq!(max_ts(&log, &disk, 9), TimeSearch::Found(8, 1_099));
    assert_eq!(max_ts(&log, &disk, 8), TimeSearch::Found(5, 1_050));
    assert_eq!(max_ts(&log, &disk, 7), TimeSearch::Found(5, 1_050));
    assert_eq!(max_ts(&log, &disk, 6), TimeSearch::Found(5, 1_050));
}

// ---- the largest timestamp below the high watermark ----

/// Batches stamped 100 and 300 (synced; small, so no time index entry) and
/// 500 (not synced): the segment's largest timestamp lies above the high
/// watermark.
fn largest_timestamp_not_durable() -> (PartitionLog, Disk) {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append(&mut log, &mut disk, stamped(100, &[0]));
    append(&mut log, &mut disk, stamped(300, &[0]));
    sync(&mut log, &mut disk);
    append(&mut log, &mut disk, stamped(500, &[0]));
    assert!(segment(&log, 0).time_index.is_empty());
    assert_eq!(segment(&log, 0).offset_of_max_timestamp, 2);
    (log, disk)
}

#[test]
fn truncate_to_durable_keeps_the_largest_durable_timestamp() {
    // Found by these tests: the truncation fell back to the time index's last
    // entry (here none), so the segment was skipped by timestamp searches.
    let (mut log, mut disk) = largest_timestamp_not_durable();
    disk.apply(&log.truncate_to_durable(&[]));
    let s = segment(&log, 0);
    assert_eq!((s.max_timestamp_ms, s.offset_of_max_timestamp), (300, 1));
    let hw = log.high_watermark();
    assert_eq!(
        time_search(&log, &disk, 200, hw).0,
        TimeSearch::Found(1, 300)
    );
    assert_eq!(max_ts(&log, &disk, hw), TimeSearch::Found(1, 300));
    // A cut back to nothing durable leaves no timestamp.
    let mut fresh = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append(&mut fresh, &mut disk, stamped(100, &[0]));
    disk.apply(&fresh.truncate_to_durable(&[]));
    let s = segment(&fresh, 0);
    assert_eq!((s.max_timestamp_ms, s.offset_of_max_timestamp), (-1, -1));
}

#[test]
fn a_checkpoint_records_the_largest_timestamp_below_it() {
    // Found by these tests: a checkpoint taken while the segment's largest
    // timestamp lay above the high watermark recorded none, and a recovery
    // that lost that batch underestimated the segment's largest timestamp.
    let (log, mut disk) = largest_timestamp_not_durable();
    let checkpoint = log.checkpoint();
    assert_eq!(
        (
            checkpoint.offset,
            checkpoint.max_timestamp_ms,
            checkpoint.offset_of_max_timestamp
        ),
        (2, 300, 1)
    );
    disk.crash();
    let r = recover(&mut disk, 1 << 20, Some(&checkpoint));
    assert!(r.from_checkpoint);
    assert!(r.reads.is_empty());
    assert_eq!(r.log.log_end_offset(), 2);
    assert_eq!(
        time_search(&r.log, &disk, 200, 2).0,
        TimeSearch::Found(1, 300)
    );
    assert_eq!(r.log.checkpoint(), checkpoint);
}

#[test]
fn recovery_ends_the_log_before_a_gap_left_by_a_lost_tail() {
    // A power cut lost the unsynced tail of a rolled segment (offsets 1..4)
    // but not the next segment, whose name says 5. Nothing in segment 5 was
    // ever synced (a sync covers all that came before it), so recovery ends
    // the log at offset 1 rather than leave a gap no batch holds.
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append_counts(&mut log, &mut disk, &[1]);
    let mut later = PartitionLog::new(dir(), 1 << 20);
    let mut later_disk = Disk::default();
    for _ in 0..5 {
        append_counts(&mut later, &mut later_disk, &[1]);
    }
    later.set_segment_bytes(1);
    let next = append(&mut later, &mut later_disk, batch(2));
    assert_eq!(next.pos.segment_base, 5);
    // Segment 0 holds offset 0 only; segment 5 holds 5 and 6.
    assert_eq!(later_disk.file(5, SegmentFile::TimeIndex).len(), 0);
    for kind in SegmentFile::ALL {
        let bytes = later_disk.file(5, kind).to_vec();
        // Written, never synced.
        disk.apply_one(&DiskOp::Append {
            dir: dir(),
            segment_base: 5,
            file: kind,
            bytes: Bytes::from(bytes),
        });
    }
    let r = recover(&mut disk, 1 << 20, None);
    assert_eq!(r.log.log_end_offset(), 1);
    assert_eq!(r.log.segments().count(), 1);
    assert!(
        disk.files().keys().all(|(_, base, _)| *base == 0),
        "segment 5 is deleted"
    );
}

// ---- markers the cleaner rewrote ----

/// A marker the cleaner gave a delete horizon (a negative, multi-byte
/// timestamp delta) still reads as one (`crate::control::read`).
#[test]
fn a_marker_with_a_delete_horizon_still_reads() {
    for commit in [true, false] {
        let mut b = BytesMut::from(&marker::build(42, 7, commit, 0, 1_000)[..]);
        b[0..8].copy_from_slice(&90i64.to_be_bytes());
        let h = crate::batch::check_batch(&b).unwrap();
        let body = super::clean::records::records_bytes(&b, &h).unwrap();
        let records = super::clean::records::records(&body, 1);
        let moved = super::clean::records::rebuild(&h, records, Some(1_000 + 86_400_000)).unwrap();
        let h = crate::batch::check_batch(&moved).expect("valid batch");
        assert_eq!(marker::is_commit(&h, &moved), Some(commit));
    }
}
