//! Planted bugs are caught by the sweep within a bounded number of seeds,
//! and the replay command it prints reproduces the failure through the
//! `doze-sim` binary: a disk whose fsync sometimes lies and a driver that
//! ignores `DiskOp::Adopt` (harness side), and four core bugs (EndTxn
//! answered before its markers are durable; read_committed served above the
//! LSO; a checkpoint written before the index entries below it are
//! durable; a Produce whose partition is deleted while it waits for its
//! sync never answered).

use std::process::Command;

use doze_sim::sweep::{sweep, SweepConfig};
use doze_sim::PlantedBug;

/// The sweep must catch the bug within this many seeds. Each bug is caught
/// at its first failing seed; checkpoint-before-indexes-durable, the
/// rarest, was first caught at seed 58 once the clean-shutdown file and the
/// fetch-session consumers changed the seeds' stories (within 50 before).
const SEEDS_MAX: u64 = 120;

#[test]
fn sweep_catches_the_lying_fsync_and_the_replay_reproduces_it() {
    catch_and_replay(
        PlantedBug::AckBeforeSync,
        &["LOST", "no longer holds", "high watermark"],
    );
}

#[test]
fn sweep_catches_a_driver_that_ignores_adopt() {
    // A crashed process leaves unsynced bytes in the page cache; the next
    // start serves them (and answers resends from them) as durable, so a
    // power cut before anything syncs them again takes served records back:
    // acknowledged or consumed ones, or input a copier already copied. Or
    // the broker stops cleanly first, and the oracle finds the adopted
    // bytes still not durable after `Output::Stopped`. Or a checkpoint
    // taken at start-up vouched for them, and the start after the power cut
    // finds its transaction state ahead of the log: the core's own
    // assertions stop it (a PANIC the sweep reports).
    catch_and_replay(
        PlantedBug::IgnoreAdopt,
        &[
            "not durable",
            "PANIC",
            "LOST",
            "no longer holds",
            "high watermark",
            "WENT BACK",
            "NOT EXACTLY ONCE",
            "TORN",
        ],
    );
}

#[test]
fn sweep_catches_end_txn_before_markers_durable() {
    // A lost marker either reverses an answered decision or leaves the
    // transaction open for good (the LSO, and whoever reads committed, stuck);
    // when the copier's transaction is the one reversed, its output misses
    // input it had committed.
    catch_and_replay(
        PlantedBug::EndTxnBeforeMarkersDurable,
        &[
            "LOST COMMIT",
            "ABORT REVERSED",
            "TORN",
            "LSO",
            "did not finish",
            "NOT EXACTLY ONCE",
        ],
    );
}

#[test]
fn sweep_catches_serve_above_lso() {
    catch_and_replay(
        PlantedBug::ServeAboveLso,
        &[
            "LSO",
            "last stable offset",
            "ABORTED READ",
            "OPEN TRANSACTION",
        ],
    );
}

#[test]
fn sweep_catches_checkpoints_before_the_index_entries_are_durable() {
    // A checkpoint vouches for `.txnindex` entries a power cut then takes:
    // the next start trusts what is left, and records of aborted
    // transactions reach read_committed readers (or a copier, whose output
    // then holds what its input never committed). Or the broker stops
    // cleanly with index appends a crashed process left unsynced.
    catch_and_replay(
        PlantedBug::CheckpointBeforeIndexesDurable,
        &["ABORTED READ", "NOT EXACTLY ONCE", "not durable"],
    );
}

#[test]
fn sweep_catches_a_produce_held_past_its_partitions_deletion() {
    // Only the churner deletes a topic under a waiting batch: its story,
    // where the hang lasts until a fault drops the connection, or to the
    // end of the drain (which ran without faults), where it is reported.
    catch_and_replay_in(
        PlantedBug::HoldProduceOfDeletedPartition,
        Some("topic-churn-under-faults"),
        &["unanswered"],
    );
}

fn catch_and_replay(bug: PlantedBug, names: &[&str]) {
    catch_and_replay_in(bug, None, names)
}

/// `scenario`: the one story swept, or None for the sweep's mix.
fn catch_and_replay_in(bug: PlantedBug, scenario: Option<&str>, names: &[&str]) {
    let cfg = SweepConfig {
        start_seed: 0,
        seeds: SEEDS_MAX,
        plant: Some(bug),
        scenario: scenario.map(String::from),
        stop_at_first: true,
    };
    let report = sweep(&cfg, |_, _| {});
    let failure = report
        .failures
        .first()
        .unwrap_or_else(|| panic!("{} survived {SEEDS_MAX} seeds", bug.name()));
    println!(
        "{} caught after {} seeds: {} seed {}: {:?}",
        bug.name(),
        report.runs,
        failure.scenario,
        failure.seed,
        &failure.problems[..3.min(failure.problems.len())]
    );
    assert!(
        failure
            .problems
            .iter()
            .any(|p| names.iter().any(|n| p.contains(n))),
        "the oracle names what {} broke ({names:?}): {:?}",
        bug.name(),
        failure.problems
    );

    // The printed command, as a user would run it (the cargo half, on the
    // binary this test was built with).
    let cargo_half = failure
        .replay
        .split("cargo run -p doze-sim --release -- ")
        .nth(1)
        .expect("the replay names the binary's flags");
    let args: Vec<&str> = cargo_half.split_whitespace().collect();
    assert!(
        args.contains(&"--plant-bug"),
        "the replay keeps the planted bug: {cargo_half}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_doze-sim"))
        .args(&args)
        .output()
        .expect("doze-sim runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "the replay fails like the sweep did:\n{}",
        tail(&stdout)
    );
    assert!(
        stdout.contains(&failure.problems[0]),
        "the replay reports the same first violation {:?}:\n{}",
        failure.problems[0],
        tail(&stdout)
    );
    assert!(stdout.lines().count() > 100, "--trace prints the history");

    // Without the bug, the same seed passes.
    let clean =
        doze_sim::sweep::run_guarded(&failure.scenario, failure.seed, None).expect("no panic");
    assert!(
        clean.violations.is_empty(),
        "without the planted bug the seed passes: {:?}",
        clean.violations
    );
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
