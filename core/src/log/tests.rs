//! Unit tests of the partition log with hand-made batches and a hand-driven clock.

use super::*;
use crate::batch::testing::{batch, TestBatch};
use crate::io::RecoveredSegment;
use bytes::BytesMut;
use std::collections::BTreeMap;

fn dir() -> PartitionDir {
    PartitionDir::new("t", 0)
}

/// Segment files as the driver would keep them, built by applying DiskOps.
#[derive(Default, Debug, Clone)]
struct Disk {
    files: BTreeMap<i64, Vec<u8>>,
}

impl Disk {
    fn apply(&mut self, ops: &[DiskOp]) {
        for op in ops {
            match op {
                DiskOp::Append {
                    segment_base,
                    bytes,
                    ..
                } => self
                    .files
                    .entry(*segment_base)
                    .or_default()
                    .extend_from_slice(bytes),
                DiskOp::Truncate {
                    segment_base, len, ..
                } => self
                    .files
                    .entry(*segment_base)
                    .or_default()
                    .truncate(*len as usize),
                DiskOp::DeleteSegment { segment_base, .. } => {
                    self.files.remove(segment_base);
                }
                other => panic!("unexpected op {other:?}"),
            }
        }
    }

    fn segments(&self) -> Vec<RecoveredSegment> {
        let files = self.files.iter().rev();
        files
            .map(|(base, bytes)| RecoveredSegment {
                base_offset: *base,
                bytes: Bytes::from(bytes.clone()),
            })
            .collect()
    }
}

/// Appends `counts.len()` batches of those record counts, applying the ops to `disk`.
fn append_all(
    log: &mut PartitionLog,
    disk: &mut Disk,
    counts: &[usize],
    now_ms: i64,
) -> Vec<AppendInfo> {
    counts
        .iter()
        .map(|count| {
            let info = log.append(batch(*count), now_ms, false);
            disk.apply(&info.ops);
            info
        })
        .collect()
}

fn sync(log: &mut PartitionLog) {
    let point = log.sync_point();
    log.mark_durable(point);
}

/// Base offsets of the batches in `bytes`, checking each batch on the way.
fn bases(mut bytes: &[u8]) -> Vec<i64> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let header = batch::check_batch(bytes).unwrap();
        out.push(header.base_offset);
        bytes = &bytes[header.total_bytes()..];
    }
    out
}

fn segment_bases(log: &PartitionLog) -> Vec<i64> {
    log.segments().map(|s| s.base_offset).collect()
}

#[test]
fn append_assigns_offsets_and_reads_back() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    assert!(
        log.segments().next().is_none(),
        "the first segment is created lazily"
    );
    let infos = append_all(&mut log, &mut disk, &[3, 1, 2], 10);
    let ranges: Vec<_> = infos
        .iter()
        .map(|i| (i.base_offset, i.last_offset))
        .collect();
    assert_eq!(ranges, vec![(0, 2), (3, 3), (4, 5)]);
    assert_eq!(infos[0].log_append_time_ms, -1);
    match &infos[1].ops[..] {
        [DiskOp::Append {
            dir: d,
            segment_base: 0,
            bytes,
        }] => {
            assert_eq!(d, &dir());
            assert_eq!(batch::check_batch(bytes).unwrap().base_offset, 3);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(log.log_end_offset(), 6);
    assert_eq!(log.high_watermark(), 0);
    sync(&mut log);
    assert_eq!(log.high_watermark(), 6);
    let all = log.read(0, usize::MAX, 6, false).unwrap();
    assert_eq!(bases(&all), vec![0, 3, 4]);
    assert_eq!(all.len() as u64, log.size_bytes());
    assert_eq!(disk.files[&0], all.to_vec());
}

#[test]
fn log_append_time_stamps_the_batch() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let info = log.append(batch(2), 77_000, true);
    assert_eq!(info.log_append_time_ms, 77_000);
    sync(&mut log);
    let bytes = log.read(0, usize::MAX, 2, false).unwrap();
    let header = batch::check_batch(&bytes).unwrap();
    assert!(header.has_log_append_time());
    assert_eq!(header.max_timestamp, 77_000);
    assert_eq!(log.offset_for_timestamp(50_000, 2), Some((0, 77_000)));
}

#[test]
fn rolls_segments_by_size() {
    let one = batch(1).len() as u64;
    let mut log = PartitionLog::new(dir(), 2 * one + 1);
    let mut disk = Disk::default();
    append_all(&mut log, &mut disk, &[1, 1, 1, 1, 1], 0);
    assert_eq!(segment_bases(&log), vec![0, 2, 4]);
    assert_eq!(
        disk.files.keys().copied().collect::<Vec<_>>(),
        vec![0, 2, 4]
    );
    assert_eq!(disk.files[&2].len() as u64, 2 * one);
    let entries: Vec<_> = log
        .batches_from(0)
        .map(|(e, _)| (e.segment_base, e.position_bytes))
        .collect();
    assert_eq!(entries, vec![(0, 0), (0, one), (2, 0), (2, one), (4, 0)]);
}

#[test]
fn oversized_batch_gets_a_segment_of_its_own() {
    let small = batch(1).len() as u64;
    let mut log = PartitionLog::new(dir(), small + 1);
    let mut disk = Disk::default();
    append_all(&mut log, &mut disk, &[1, 50, 1], 0);
    assert_eq!(segment_bases(&log), vec![0, 1, 51]);
}

#[test]
fn read_honours_max_bytes_and_min_one_batch() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append_all(&mut log, &mut disk, &[2, 2, 2], 0);
    sync(&mut log);
    let one = batch(2).len();
    assert_eq!(bases(&log.read(0, 2 * one, 6, false).unwrap()), vec![0, 2]);
    assert_eq!(
        bases(&log.read(0, 2 * one + one - 1, 6, false).unwrap()),
        vec![0, 2]
    );
    assert!(log.read(0, one - 1, 6, false).unwrap().is_empty());
    assert_eq!(
        bases(&log.read(0, one - 1, 6, true).unwrap()),
        vec![0],
        "KIP-74: first batch whole"
    );
    assert_eq!(bases(&log.read(0, 0, 6, true).unwrap()), vec![0]);
    // A single batch is handed out without a copy.
    let single = log.read(2, one, 6, false).unwrap();
    assert_eq!(
        single.as_ptr(),
        log.batches_from(2).next().unwrap().1.as_ptr()
    );
}

#[test]
fn read_starts_with_the_batch_holding_the_offset() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append_all(&mut log, &mut disk, &[3, 3], 0);
    sync(&mut log);
    assert_eq!(
        bases(&log.read(1, usize::MAX, 6, false).unwrap()),
        vec![0, 3]
    );
    assert_eq!(bases(&log.read(5, usize::MAX, 6, false).unwrap()), vec![3]);
}

#[test]
fn read_stops_at_the_upper_offset() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append_all(&mut log, &mut disk, &[2], 0);
    sync(&mut log);
    append_all(&mut log, &mut disk, &[2], 0);
    assert_eq!(log.high_watermark(), 2);
    assert_eq!(
        bases(&log.read(0, usize::MAX, log.high_watermark(), true).unwrap()),
        vec![0]
    );
    // Above the high watermark but within the log: nothing yet, no error.
    assert!(log.read(2, usize::MAX, 2, true).unwrap().is_empty());
    assert!(log.read(3, usize::MAX, 2, true).unwrap().is_empty());
    // A bound inside a batch hides the whole batch.
    assert!(log.read(0, usize::MAX, 1, true).unwrap().is_empty());
}

#[test]
fn read_out_of_range() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    assert!(
        log.read(0, 100, 0, true).unwrap().is_empty(),
        "an empty log reads empty at 0"
    );
    assert_eq!(log.read(1, 100, 0, true), Err(ReadError::OffsetOutOfRange));
    let mut disk = Disk::default();
    append_all(&mut log, &mut disk, &[2], 0);
    sync(&mut log);
    assert!(log.read(2, 100, 2, true).unwrap().is_empty());
    assert_eq!(log.read(3, 100, 2, true), Err(ReadError::OffsetOutOfRange));
    assert_eq!(log.read(-1, 100, 2, true), Err(ReadError::OffsetOutOfRange));
}

#[test]
fn high_watermark_moves_only_on_mark_durable() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append_all(&mut log, &mut disk, &[1], 0);
    let first = log.sync_point();
    append_all(&mut log, &mut disk, &[1], 0);
    let second = log.sync_point();
    assert_eq!(log.high_watermark(), 0);
    log.mark_durable(second);
    assert_eq!(log.high_watermark(), 2);
    log.mark_durable(first);
    assert_eq!(log.high_watermark(), 2, "never backwards");
}

#[test]
fn truncate_to_durable_cuts_memory_and_files() {
    let one = batch(1).len() as u64;
    let mut log = PartitionLog::new(dir(), 2 * one);
    let mut disk = Disk::default();
    append_all(&mut log, &mut disk, &[1], 0);
    sync(&mut log);
    let lost_point = log.sync_point();
    // Offset 1 lands in segment 0 after the durable batch; 2..=4 roll on.
    append_all(&mut log, &mut disk, &[1, 1, 1, 1], 0);
    assert_eq!(segment_bases(&log), vec![0, 2, 4]);
    let ops = log.truncate_to_durable();
    assert_eq!(
        ops,
        vec![
            DiskOp::Truncate {
                dir: dir(),
                segment_base: 0,
                len: one
            },
            DiskOp::DeleteSegment {
                dir: dir(),
                segment_base: 2
            },
            DiskOp::DeleteSegment {
                dir: dir(),
                segment_base: 4
            },
        ]
    );
    disk.apply(&ops);
    assert_eq!(log.log_end_offset(), 1);
    assert_eq!(log.high_watermark(), 1);
    assert_eq!(segment_bases(&log), vec![0]);
    // A sync that was in flight when the failure happened proves nothing.
    log.mark_durable(lost_point);
    assert_eq!(log.high_watermark(), 1);
    // Offsets are handed out again from the durable end.
    let info = log.append(batch(1), 0, false);
    assert_eq!(info.base_offset, 1);
    disk.apply(&info.ops);
    sync(&mut log);
    let (recovered, repairs) = PartitionLog::recover(dir(), 2 * one, disk.segments());
    assert!(repairs.is_empty());
    assert_eq!(recovered.log_end_offset(), 2);
}

#[test]
fn truncate_to_durable_deletes_a_segment_left_empty() {
    let one = batch(1).len() as u64;
    let mut log = PartitionLog::new(dir(), one);
    let mut disk = Disk::default();
    append_all(&mut log, &mut disk, &[1], 0);
    sync(&mut log);
    append_all(&mut log, &mut disk, &[1], 0);
    let ops = log.truncate_to_durable();
    assert_eq!(
        ops,
        vec![DiskOp::DeleteSegment {
            dir: dir(),
            segment_base: 1
        }]
    );
    assert_eq!(segment_bases(&log), vec![0]);
    assert!(
        log.truncate_to_durable().is_empty(),
        "nothing left above the high watermark"
    );
    // The first segment stays, even empty, because its name is the log start.
    let mut fresh = PartitionLog::new(dir(), one);
    fresh.append(batch(1), 0, false);
    let ops = fresh.truncate_to_durable();
    assert_eq!(
        ops,
        vec![DiskOp::Truncate {
            dir: dir(),
            segment_base: 0,
            len: 0
        }]
    );
    assert_eq!(fresh.log_end_offset(), 0);
    assert_eq!(fresh.append(batch(1), 0, false).base_offset, 0);
}

/// A log of batches of 2 records in segments of two batches: bases 0, 4, 8.
fn three_segments() -> (Disk, u64) {
    let one = batch(2).len() as u64;
    let mut log = PartitionLog::new(dir(), 2 * one);
    let mut disk = Disk::default();
    append_all(&mut log, &mut disk, &[2, 2, 2, 2, 2, 2], 0);
    assert_eq!(
        disk.files.keys().copied().collect::<Vec<_>>(),
        vec![0, 4, 8]
    );
    (disk, one)
}

#[test]
fn recovery_of_a_clean_log_keeps_everything() {
    let (disk, one) = three_segments();
    let (log, ops) = PartitionLog::recover(dir(), 2 * one, disk.segments());
    assert!(ops.is_empty());
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(log.log_end_offset(), 12);
    assert_eq!(log.high_watermark(), 12, "everything recovered is durable");
    assert_eq!(segment_bases(&log), vec![0, 4, 8]);
    assert_eq!(
        bases(&log.read(0, usize::MAX, 12, false).unwrap()),
        vec![0, 2, 4, 6, 8, 10]
    );
}

#[test]
fn recovery_cuts_a_batch_torn_in_half() {
    let (mut disk, one) = three_segments();
    disk.files
        .get_mut(&8)
        .unwrap()
        .truncate((one + one / 2) as usize);
    let (log, ops) = PartitionLog::recover(dir(), 2 * one, disk.segments());
    assert_eq!(
        ops,
        vec![DiskOp::Truncate {
            dir: dir(),
            segment_base: 8,
            len: one
        }]
    );
    assert_eq!(log.log_end_offset(), 10);
    assert_eq!(
        bases(&log.read(0, usize::MAX, 10, false).unwrap()),
        vec![0, 2, 4, 6, 8]
    );
    // The active segment carries on from the valid prefix.
    let mut log = log;
    let info = log.append(batch(1), 0, false);
    assert_eq!(info.base_offset, 10);
    assert!(matches!(
        info.ops[0],
        DiskOp::Append {
            segment_base: 8,
            ..
        }
    ));
}

#[test]
fn recovery_cuts_at_a_flipped_crc_byte_and_deletes_later_segments() {
    let (mut disk, one) = three_segments();
    // Flip a byte in the second batch of segment 4 (its CRC field).
    disk.files.get_mut(&4).unwrap()[one as usize + 18] ^= 0xff;
    let (log, ops) = PartitionLog::recover(dir(), 2 * one, disk.segments());
    assert_eq!(
        ops,
        vec![
            DiskOp::Truncate {
                dir: dir(),
                segment_base: 4,
                len: one
            },
            DiskOp::DeleteSegment {
                dir: dir(),
                segment_base: 8
            },
        ]
    );
    assert_eq!(segment_bases(&log), vec![0, 4]);
    assert_eq!(log.log_end_offset(), 6);
    assert_eq!(log.read(7, 100, 6, true), Err(ReadError::OffsetOutOfRange));
    disk.apply(&ops);
    let (again, repairs) = PartitionLog::recover(dir(), 2 * one, disk.segments());
    assert!(repairs.is_empty(), "the repaired files recover cleanly");
    assert_eq!(again.log_end_offset(), 6);
}

#[test]
fn recovery_cuts_garbage_after_valid_batches() {
    let (mut disk, one) = three_segments();
    disk.files
        .get_mut(&8)
        .unwrap()
        .extend_from_slice(&[0xab; 100]);
    let (log, ops) = PartitionLog::recover(dir(), 2 * one, disk.segments());
    assert_eq!(
        ops,
        vec![DiskOp::Truncate {
            dir: dir(),
            segment_base: 8,
            len: 2 * one
        }]
    );
    assert_eq!(log.log_end_offset(), 12);
    // Zeros (a file extended but not written) are torn too.
    let (mut disk, _) = three_segments();
    disk.files.get_mut(&8).unwrap().extend_from_slice(&[0; 100]);
    let (_, ops) = PartitionLog::recover(dir(), 2 * one, disk.segments());
    assert_eq!(
        ops,
        vec![DiskOp::Truncate {
            dir: dir(),
            segment_base: 8,
            len: 2 * one
        }]
    );
}

#[test]
fn recovery_deletes_a_later_segment_torn_at_its_start() {
    let (mut disk, one) = three_segments();
    // Base offset 4 becomes 0: below the end of segment 0 (the CRC does not
    // cover it, so only the offset check can tell).
    disk.files.get_mut(&4).unwrap()[7] ^= 0x04;
    let (log, ops) = PartitionLog::recover(dir(), 2 * one, disk.segments());
    assert_eq!(
        ops,
        vec![
            DiskOp::DeleteSegment {
                dir: dir(),
                segment_base: 4
            },
            DiskOp::DeleteSegment {
                dir: dir(),
                segment_base: 8
            },
        ]
    );
    assert_eq!(segment_bases(&log), vec![0]);
    assert_eq!(log.log_end_offset(), 4);
    assert_eq!(
        bases(&log.read(0, usize::MAX, 4, false).unwrap()),
        vec![0, 2]
    );
}

#[test]
fn recovery_treats_offsets_going_back_as_corruption() {
    let mut disk = Disk::default();
    let mut file = BytesMut::new();
    for base in [0, 5, 3] {
        file.extend_from_slice(&batch::with_base_offset(&batch(1), base));
    }
    disk.files.insert(0, file.to_vec());
    let one = batch(1).len() as u64;
    let (log, ops) = PartitionLog::recover(dir(), 1 << 20, disk.segments());
    assert_eq!(
        ops,
        vec![DiskOp::Truncate {
            dir: dir(),
            segment_base: 0,
            len: 2 * one
        }]
    );
    assert_eq!(log.log_end_offset(), 6);
    assert_eq!(
        bases(&log.read(0, usize::MAX, 6, false).unwrap()),
        vec![0, 5]
    );
}

#[test]
fn recovery_of_nothing_and_of_an_empty_segment() {
    let (log, ops) = PartitionLog::recover(dir(), 1 << 20, Vec::new());
    assert!(ops.is_empty());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
    let empty = RecoveredSegment {
        base_offset: 40,
        bytes: Bytes::new(),
    };
    let (mut log, ops) = PartitionLog::recover(dir(), 1 << 20, vec![empty]);
    assert!(ops.is_empty());
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.high_watermark()
        ),
        (40, 40, 40)
    );
    let info = log.append(batch(1), 0, false);
    assert_eq!(info.base_offset, 40);
    assert!(matches!(
        info.ops[0],
        DiskOp::Append {
            segment_base: 40,
            ..
        }
    ));
    // A first segment torn at its start is truncated, not deleted: its name
    // carries the log start offset.
    let torn = RecoveredSegment {
        base_offset: 40,
        bytes: batch(1).slice(..30),
    };
    let (log, ops) = PartitionLog::recover(dir(), 1 << 20, vec![torn]);
    assert_eq!(
        ops,
        vec![DiskOp::Truncate {
            dir: dir(),
            segment_base: 40,
            len: 0
        }]
    );
    assert_eq!(log.log_end_offset(), 40);
}

#[test]
fn retention_by_bytes_deletes_oldest_whole_segments() {
    let (disk, one) = three_segments();
    let (mut log, _) = PartitionLog::recover(dir(), 2 * one, disk.segments());
    let total = log.size_bytes() as i64;
    assert!(log.apply_retention(0, -1, -1).is_empty());
    assert!(
        log.apply_retention(0, -1, total - 2 * one as i64 + 1)
            .is_empty(),
        "dropping one would go below"
    );
    let ops = log.apply_retention(0, -1, total - 2 * one as i64);
    assert_eq!(
        ops,
        vec![DiskOp::DeleteSegment {
            dir: dir(),
            segment_base: 0
        }]
    );
    assert_eq!(log.log_start_offset(), 4);
    assert_eq!(log.read(0, 100, 12, true), Err(ReadError::OffsetOutOfRange));
    assert_eq!(
        bases(&log.read(4, usize::MAX, 12, false).unwrap()),
        vec![4, 6, 8, 10]
    );
    // Size 0 deletes all but the active segment.
    let ops = log.apply_retention(0, -1, 0);
    assert_eq!(
        ops,
        vec![DiskOp::DeleteSegment {
            dir: dir(),
            segment_base: 4
        }]
    );
    assert_eq!(segment_bases(&log), vec![8]);
    assert_eq!(log.log_start_offset(), 8);
}

#[test]
fn retention_by_time_follows_the_largest_timestamp() {
    let one = batch(1).len() as u64;
    let mut log = PartitionLog::new(dir(), one);
    let stamps = [1_000, 5_000, 2_000, 9_000];
    for ts in stamps {
        let bytes = TestBatch {
            base_timestamp: ts,
            ..TestBatch::default()
        }
        .encode();
        log.append(bytes, 0, false);
    }
    sync(&mut log);
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
            segment_base: 0
        }]
    );
    // Segment 1 (5000) blocks segment 2 (2000) behind it, as in Kafka.
    assert!(log.apply_retention(5_500, 1_000, -1).is_empty());
    let ops = log.apply_retention(6_001, 1_000, -1);
    let deleted: Vec<_> = ops
        .iter()
        .map(|op| matches!(op, DiskOp::DeleteSegment { .. }))
        .collect();
    assert_eq!(deleted, vec![true, true]);
    assert_eq!(log.log_start_offset(), 3);
    // The active segment stays however old.
    assert!(log.apply_retention(1_000_000, 0, 0).is_empty());
    assert_eq!(log.log_end_offset(), 4);
}

#[test]
fn retention_spares_data_that_is_not_durable() {
    let one = batch(1).len() as u64;
    let mut log = PartitionLog::new(dir(), one);
    log.append(batch(1), 0, false);
    log.append(batch(1), 0, false);
    log.append(batch(1), 0, false);
    assert!(
        log.apply_retention(1 << 40, 0, 0).is_empty(),
        "nothing is durable"
    );
    let point = log.sync_point();
    log.append(batch(1), 0, false);
    log.mark_durable(point);
    // Segments 0 and 1 go; 2 stays because segment 3 holds nothing durable.
    let ops = log.apply_retention(1 << 40, 0, -1);
    assert_eq!(ops.len(), 2);
    assert_eq!(log.log_start_offset(), 2);
}

#[test]
fn retention_of_recovered_segments_without_timestamps_starts_at_first_check() {
    let no_ts = TestBatch {
        base_timestamp: -1,
        ..TestBatch::default()
    }
    .encode();
    let segments = vec![
        RecoveredSegment {
            base_offset: 0,
            bytes: no_ts.clone(),
        },
        RecoveredSegment {
            base_offset: 1,
            bytes: batch::with_base_offset(&no_ts, 1),
        },
    ];
    let (mut log, _) = PartitionLog::recover(dir(), 1 << 20, segments);
    assert!(
        log.apply_retention(10_000, 500, -1).is_empty(),
        "first check starts the clock"
    );
    assert!(log.apply_retention(10_500, 500, -1).is_empty());
    assert_eq!(log.apply_retention(10_501, 500, -1).len(), 1);
}

#[test]
fn offset_for_timestamp_finds_the_exact_record() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let specs = [vec![0, 10, 20], vec![5, 50, 30], vec![100]];
    for deltas in specs {
        log.append(
            TestBatch {
                timestamp_deltas: deltas,
                ..TestBatch::default()
            }
            .encode(),
            0,
            false,
        );
    }
    sync(&mut log);
    let end = log.high_watermark();
    assert_eq!(log.offset_for_timestamp(0, end), Some((0, 1_000)));
    assert_eq!(log.offset_for_timestamp(1_010, end), Some((1, 1_010)));
    assert_eq!(log.offset_for_timestamp(1_011, end), Some((2, 1_020)));
    assert_eq!(log.offset_for_timestamp(1_021, end), Some((4, 1_050)));
    assert_eq!(log.offset_for_timestamp(1_051, end), Some((6, 1_100)));
    assert_eq!(log.offset_for_timestamp(1_101, end), None);
    assert_eq!(
        log.offset_for_timestamp(1_051, 6),
        None,
        "found at or above the bound"
    );
}

#[test]
fn offset_for_timestamp_in_a_compressed_batch_is_its_base() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    log.append(batch(2), 0, false);
    // The compression bits are set; the records are not really compressed,
    // which is fine: the log never decompresses.
    let compressed = TestBatch {
        attributes: 4,
        timestamp_deltas: vec![0, 7, 3],
        ..TestBatch::default()
    };
    log.append(compressed.encode(), 0, false);
    sync(&mut log);
    assert_eq!(log.offset_for_timestamp(1_002, 5), Some((2, 1_007)));
}

#[test]
fn max_timestamp_finds_the_record() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    assert_eq!(log.max_timestamp(0), None);
    log.append(
        TestBatch {
            timestamp_deltas: vec![0, 9, 2],
            ..TestBatch::default()
        }
        .encode(),
        0,
        false,
    );
    log.append(
        TestBatch {
            timestamp_deltas: vec![9, 1],
            ..TestBatch::default()
        }
        .encode(),
        0,
        false,
    );
    log.append(
        TestBatch {
            timestamp_deltas: vec![50],
            ..TestBatch::default()
        }
        .encode(),
        0,
        false,
    );
    sync(&mut log);
    assert_eq!(log.max_timestamp(6), Some((5, 1_050)));
    assert_eq!(
        log.max_timestamp(5),
        Some((1, 1_009)),
        "first batch wins the tie"
    );
}

#[test]
fn batches_from_starts_at_the_batch_holding_the_offset() {
    let mut log = PartitionLog::new(dir(), 1 << 20);
    let mut disk = Disk::default();
    append_all(&mut log, &mut disk, &[3, 3, 3], 0);
    let starts: Vec<_> = log.batches_from(4).map(|(e, _)| e.base_offset()).collect();
    assert_eq!(starts, vec![3, 6]);
    assert_eq!(log.batches_from(9).count(), 0);
    assert_eq!(log.batch_count(), 3);
    assert_eq!(log.delete_all(), DiskOp::DeletePartition { dir: dir() });
}

#[test]
fn truncate_to_durable_keeps_an_empty_segment_that_carries_the_log_end() {
    let segments = vec![
        RecoveredSegment {
            base_offset: 0,
            bytes: batch(1),
        },
        RecoveredSegment {
            base_offset: 5,
            bytes: Bytes::new(),
        },
    ];
    let (mut log, ops) = PartitionLog::recover(dir(), 1 << 20, segments);
    assert!(ops.is_empty());
    assert_eq!(log.log_end_offset(), 5);
    assert_eq!(log.append(batch(1), 0, false).base_offset, 5);
    // Deleting segment 5 would make a restart hand out offsets 1..5 again.
    let ops = log.truncate_to_durable();
    assert_eq!(
        ops,
        vec![DiskOp::Truncate {
            dir: dir(),
            segment_base: 5,
            len: 0
        }]
    );
    assert_eq!(log.log_end_offset(), 5);
}
