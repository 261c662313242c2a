//! The clean-shutdown file (`core_state::clean_shutdown`): a clean stop
//! leaves it, a start that finds it removes it durably before anything else
//! and then adopts and boot-syncs nothing; a start after a kill does both.
//! Power cuts at each step around it lose no acknowledged write and leave
//! no start trusting a file that is not durable.

mod support;

use doze_core::{BrokerConfig, DiskOp, Input};
use support::requests::*;
use support::*;

const PARTITIONS: i32 = 4;

fn config() -> BrokerConfig {
    BrokerConfig {
        segment_bytes: 2048,
        ..Default::default()
    }
}

/// One acknowledged record of 100 bytes on each partition of t, `rounds`
/// times.
fn produce_rounds(w: &mut World, rounds: usize) {
    for round in 0..rounds {
        for partition in 0..PARTITIONS {
            let value = vec![round as u8; 100];
            let records = batch(&[&value], T0_MS + round as i64);
            w.send(1, 9, &produce_req("t", partition, records, -1));
            assert_eq!(produce_answer(w, 1).map(|a| a.0), Some(0));
        }
    }
}

fn end_offsets(w: &World) -> Vec<i64> {
    (0..PARTITIONS)
        .map(|p| w.broker.partition("t", p).unwrap().log_end_offset())
        .collect()
}

fn adopts(w: &World) -> usize {
    w.ops_log
        .iter()
        .filter(|op| matches!(op, DiskOp::Adopt { .. }))
        .count()
}

fn syncs(w: &World) -> usize {
    w.ops_log
        .iter()
        .filter(|op| matches!(op, DiskOp::Sync { .. }))
        .count()
}

fn is_removal(op: &DiskOp) -> bool {
    matches!(op, DiskOp::RemoveCleanShutdown { .. })
}

/// A world with t's partitions, `rounds` records each, all acknowledged.
fn world_with_records(rounds: usize) -> World {
    let mut w = World::new(config());
    create_topic(&mut w, "t", PARTITIONS);
    produce_rounds(&mut w, rounds);
    w
}

#[test]
fn a_clean_stop_then_start_skips_the_boot_sync_and_a_kill_then_start_does_not() {
    let mut w = world_with_records(30);
    w.input(Input::Shutdown);
    assert!(w.stopped);
    assert_eq!(
        w.disk.clean_shutdown_file(),
        (true, true),
        "a clean stop leaves the file, durable"
    );
    assert!(
        matches!(w.ops_log.last(), Some(DiskOp::WriteCleanShutdown { .. })),
        "nothing is written after the file: {:?}",
        w.ops_log.last()
    );
    w.ops_log.clear();
    w.restart(false);
    assert!(is_removal(&w.ops_log[0]), "the removal comes first");
    assert_eq!(adopts(&w), 0, "nothing adopted after a clean stop");
    assert_eq!(
        syncs(&w),
        0,
        "no boot sync after a clean stop: {:?}",
        w.ops_log
    );
    assert_eq!(w.disk.clean_shutdown_file(), (false, false));
    assert_eq!(end_offsets(&w), vec![30; PARTITIONS as usize]);

    // Records, then a kill: no file, and the start adopts and syncs.
    produce_rounds(&mut w, 5);
    w.ops_log.clear();
    w.restart(false);
    assert!(!w.ops_log.iter().any(is_removal), "no file to remove");
    assert_eq!(
        adopts(&w),
        PARTITIONS as usize,
        "every partition's active segment is adopted"
    );
    assert!(syncs(&w) >= 1, "the boot sync runs");
    assert_eq!(end_offsets(&w), vec![35; PARTITIONS as usize]);
    assert_eq!(w.disk.clean_shutdown_file(), (false, false));
}

#[test]
fn a_start_waits_for_the_removal_and_a_power_cut_before_its_fsync_brings_the_file_back() {
    let mut w = world_with_records(10);
    w.input(Input::Shutdown);
    assert!(w.stopped);
    w.auto_io = false;
    w.ops_log.clear();
    w.restart(false);
    assert_eq!(w.ops_log.len(), 1, "only the removal: {:?}", w.ops_log);
    assert!(is_removal(&w.ops_log[0]));
    assert!(w.pending_meta.is_empty() && w.pending_reads.is_empty());
    // Unlinked, not yet durable: a request waits.
    assert_eq!(w.disk.clean_shutdown_file(), (false, true));
    w.send(2, 12, &fetch_req("t", 0, 0, 0, 1));
    assert!(w.recv(2).is_none(), "requests wait for the removal");
    assert_eq!(w.ops_log.len(), 1, "nothing else is emitted meanwhile");

    // Power goes before the fsync of logs/: the file is back, and rightly
    // so (nothing was written since the clean stop): the next start finds
    // it and trusts the files again.
    w.auto_io = true;
    w.ops_log.clear();
    w.restart(true);
    assert!(is_removal(&w.ops_log[0]), "the file came back");
    assert_eq!(adopts(&w), 0);
    assert_eq!(w.disk.clean_shutdown_file(), (false, false));
    assert_eq!(end_offsets(&w), vec![10; PARTITIONS as usize]);
}

#[test]
fn a_power_cut_after_the_removal_and_before_the_first_acknowledged_write_loses_nothing_acknowledged(
) {
    let mut w = world_with_records(10);
    w.input(Input::Shutdown);
    w.restart(false);
    assert_eq!(w.disk.clean_shutdown_file(), (false, false));
    // A write appended, its sync not complete: not acknowledged.
    w.auto_io = false;
    let value = vec![9u8; 100];
    w.send(1, 9, &produce_req("t", 0, batch(&[&value], T0_MS), -1));
    assert!(produce_answer(&mut w, 1).is_none(), "not acknowledged yet");
    w.auto_io = true;
    w.ops_log.clear();
    w.restart(true);
    // No file: the start recovers as after a crash, and the record that was
    // never acknowledged may be lost (here it is: no write-back).
    assert!(!w.ops_log.iter().any(is_removal), "no file to remove");
    assert!(adopts(&w) > 0, "a start without the file adopts");
    assert_eq!(end_offsets(&w), vec![10; PARTITIONS as usize]);

    // The first acknowledged write after a trusted start survives a power cut.
    w.input(Input::Shutdown);
    w.restart(false);
    w.send(1, 9, &produce_req("t", 0, batch(&[&value], T0_MS), -1));
    assert_eq!(produce_answer(&mut w, 1).map(|a| a.0), Some(0));
    w.restart(true);
    assert_eq!(w.disk.clean_shutdown_file(), (false, false));
    assert_eq!(end_offsets(&w)[0], 11);
}

#[test]
fn a_power_cut_or_a_kill_while_the_file_is_written_leaves_a_true_claim_or_none() {
    for power in [true, false] {
        let mut w = world_with_records(10);
        w.auto_io = false;
        w.input(Input::Shutdown);
        for _ in 0..100 {
            if w.pending_clean_shutdown.is_some() {
                break;
            }
            w.complete_io();
        }
        assert!(w.pending_clean_shutdown.is_some(), "the write is issued");
        assert!(!w.stopped, "Stopped waits for the file");
        // Whatever comes in now writes nothing (a timer due, say); a
        // request is not taken: its connection is closed, no write, no panic.
        w.advance(3_600_000);
        w.send(1, 9, &produce_req("t", 0, batch(&[b"late"], T0_MS), -1));
        assert!(
            w.closed.contains(&1),
            "a request after the file closes its connection"
        );
        assert!(w.recv(1).is_none());
        assert!(
            matches!(w.ops_log.last(), Some(DiskOp::WriteCleanShutdown { .. })),
            "nothing written after the file: {:?}",
            w.ops_log.last()
        );
        // A power cut that write-back reached nothing of loses the file; a
        // kill leaves it in the page cache, and the files are durable.
        let (unsynced_bytes, files) = w.disk.unsynced();
        assert_eq!((unsynced_bytes, files.len()), (0, 0), "{files:?}");
        w.auto_io = true;
        w.ops_log.clear();
        w.restart(power);
        let trusted = w.ops_log.first().is_some_and(is_removal);
        assert_eq!(trusted, !power, "the file is found after a kill only");
        assert_eq!(adopts(&w) == 0, !power);
        assert_eq!(end_offsets(&w), vec![10; PARTITIONS as usize]);
    }
}
