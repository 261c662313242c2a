//! A partition alone, without a broker: appends, a sync that fails and the
//! cut back to what is durable, with the producer and transaction state
//! following the log, and the last stable offset it answers then.

use bytes::Bytes;

use super::Partition;
use crate::batch::{self, testing::TestBatch};
use crate::boundary::Output;
use crate::io::{DiskOp, FileRange, PartitionDir, SegmentFile, SyncScope};
use crate::log::PartitionLog;
use crate::outbox::Outbox;
use crate::producer::AppendCheck;

const TRANSACTIONAL: i16 = 0x10;
const NOW_MS: i64 = 1_000_000;

fn partition() -> Partition {
    Partition::new(PartitionLog::new(PartitionDir::new("t", 0), 1 << 20))
}

/// A transactional batch of `records` records of `producer_id` at epoch 0.
fn txn_batch(producer_id: i64, base_sequence: i32, records: usize) -> Bytes {
    TestBatch {
        attributes: TRANSACTIONAL,
        producer_id,
        producer_epoch: 0,
        base_sequence,
        ..TestBatch::records(records)
    }
    .encode()
}

/// Checks and appends a producer's batch as the produce path does.
fn produce(p: &mut Partition, bytes: Bytes, outbox: &mut Outbox) -> (i64, i64) {
    let header = batch::parse_header(&bytes).expect("a valid batch");
    assert_eq!(p.check_producer(&header), Ok(AppendCheck::Append));
    let appended = p.append_batch(&header, bytes, NOW_MS, false, outbox);
    (appended.base_offset, appended.last_offset)
}

/// One sync of `scope` over the partition, completing OK or not.
fn sync(p: &mut Partition, scope: SyncScope, ok: bool, outbox: &mut Outbox) {
    p.start_sync(scope);
    assert!(!p.is_dirty(), "a started sync takes the dirty flag");
    if ok {
        assert!(p.sync_done(scope), "the sync covered the partition");
    } else if p.sync_failed() {
        p.truncate_to_durable(outbox);
    }
}

fn disk_ops(outbox: &mut Outbox) -> Vec<DiskOp> {
    outbox
        .drain()
        .into_iter()
        .map(|o| match o {
            Output::Disk(op) => op,
            other => panic!("a partition emits disk operations only, not {other:?}"),
        })
        .collect()
}

#[test]
fn a_failed_sync_cuts_the_log_and_its_state_back_and_the_lso_follows() {
    let mut outbox = Outbox::default();
    let mut p = partition();

    // Producer 1 opens a transaction, made durable: the LSO stays at its
    // first offset while the high watermark moves past it.
    assert_eq!(produce(&mut p, txn_batch(1, 0, 2), &mut outbox), (0, 1));
    assert!(p.is_dirty());
    assert!(!disk_ops(&mut outbox).is_empty(), "the append is written");
    sync(&mut p, SyncScope::Logs, true, &mut outbox);
    assert_eq!(p.log().high_watermark(), 2);
    assert_eq!(p.last_stable_offset(), 0);
    assert_eq!(p.read_bound(true), 0);
    assert_eq!(p.read_bound(false), 2);

    // Its commit marker, and producer 2's transaction after it, are
    // appended; the sync that would cover them fails.
    let marker = p.append_marker(1, 0, 0, true, NOW_MS, &mut outbox);
    assert_eq!(marker, Ok(2));
    assert!(
        !p.txn_closed_at(1, 0),
        "a marker no sync covered closes nothing"
    );
    assert_eq!(produce(&mut p, txn_batch(2, 0, 3), &mut outbox), (3, 5));
    assert!(p.has_ongoing_txn(2));
    let _ = disk_ops(&mut outbox);
    sync(&mut p, SyncScope::Logs, false, &mut outbox);

    // Cut back to the high watermark: the marker and producer 2's batch
    // are gone from the log, and so are they from the producer and
    // transaction state; producer 1's transaction is open again.
    assert_eq!(p.log().log_end_offset(), 2);
    assert_eq!(p.log().high_watermark(), 2);
    assert!(p.has_ongoing_txn(1));
    assert!(!p.has_ongoing_txn(2));
    assert_eq!(p.last_stable_offset(), 0);
    let cut = disk_ops(&mut outbox);
    assert!(
        cut.iter().any(|op| matches!(
            op,
            DiskOp::Truncate { file: SegmentFile::Log, len, .. } if *len > 0
        )),
        "the cut is written: {cut:?}"
    );
    assert!(p.is_dirty(), "the next sync covers the cut");
    // Producer 2 may send its batch again (sequence 0), which is no
    // duplicate of one cut away; producer 1's durable batch still is one.
    let again = batch::parse_header(&txn_batch(2, 0, 3)).unwrap();
    assert_eq!(p.check_producer(&again), Ok(AppendCheck::Append));
    let dup = batch::parse_header(&txn_batch(1, 0, 2)).unwrap();
    assert_eq!(
        p.check_producer(&dup),
        Ok(AppendCheck::Duplicate {
            first_offset: 0,
            last_offset: 1
        })
    );

    // The coordinator writes the marker again; once durable, the
    // transaction is closed and the LSO reaches the high watermark.
    sync(&mut p, SyncScope::Logs, true, &mut outbox);
    assert_eq!(p.append_marker(1, 0, 0, true, NOW_MS, &mut outbox), Ok(2));
    sync(&mut p, SyncScope::All, true, &mut outbox);
    assert!(
        !p.is_index_lagging(),
        "an All sync covers the index appends"
    );
    assert_eq!(p.log().high_watermark(), 3);
    assert!(p.txn_closed_at(1, 0));
    assert_eq!(p.last_stable_offset(), 3);
}

#[test]
fn a_logs_sync_leaves_the_index_lagging_until_an_all_sync() {
    let mut outbox = Outbox::default();
    let mut p = partition();
    produce(&mut p, txn_batch(1, 0, 1), &mut outbox);
    sync(&mut p, SyncScope::Logs, true, &mut outbox);
    assert!(p.is_index_lagging());
    // An `All` sync covers it though nothing is dirty.
    p.start_sync(SyncScope::All);
    assert!(p.sync_done(SyncScope::All));
    assert!(!p.is_index_lagging());
    // With nothing dirty or lagging, a sync passes it by.
    p.start_sync(SyncScope::All);
    assert!(!p.sync_done(SyncScope::All));
}

#[test]
fn an_offline_partition_takes_no_marker_and_a_read_it_does_not_hold_is_a_race() {
    let mut outbox = Outbox::default();
    let mut p = partition();
    produce(&mut p, txn_batch(1, 0, 1), &mut outbox);
    let past_the_end = FileRange {
        dir: PartitionDir::new("t", 0),
        segment_base: 0,
        file: SegmentFile::Log,
        position: 1 << 30,
        len: 10,
    };
    assert!(!p.read_failed(&past_the_end));
    assert!(!p.is_offline());
    p.set_offline();
    assert!(p.is_offline());
    assert!(!p.txn_closed_at(1, 0));
    let refused = p.append_marker(1, 0, 0, false, NOW_MS, &mut outbox);
    assert_eq!(refused, Err(super::MarkerRefused::Offline));
}
