//! Every named scenario keeps every promise for a few seeds.

use doze_sim::sweep::run_guarded;
use doze_sim::{replay_command, Scenario};

const SEEDS: std::ops::Range<u64> = 0..3;

#[test]
fn every_scenario_passes_for_a_few_seeds() {
    let failures: Vec<String> = Scenario::builtin_names()
        .into_iter()
        .flat_map(|name| SEEDS.map(move |seed| (name, seed)))
        .filter_map(|(name, seed)| failure(name, seed))
        .collect();
    assert!(
        failures.is_empty(),
        "scenarios failed:\n{}",
        failures.join("\n")
    );
}

/// Runs `name` with `seed`: `None` if every promise held, else what broke
/// and the command that replays it.
fn failure(name: &str, seed: u64) -> Option<String> {
    let problems = match run_guarded(name, seed, None) {
        Ok(result) if result.violations.is_empty() => {
            println!(
                "{name} seed {seed}: ok, {:.1} simulated s, {} acked, {} crashes, {} power cuts, {} failed syncs",
                result.sim_ms as f64 / 1000.0,
                result.stats.acked_records,
                result.stats.crashes,
                result.stats.power_cuts,
                result.stats.failed_syncs
            );
            Vec::new()
        }
        Ok(result) => result.violations,
        Err(panic) => vec![panic],
    };
    if problems.is_empty() {
        return None;
    }
    let shown: Vec<&String> = problems.iter().take(5).collect();
    Some(format!(
        "{name} seed {seed}: {shown:#?}\n  replay: {}",
        replay_command(name, seed, None)
    ))
}

#[test]
fn the_faults_each_scenario_names_really_happen() {
    // A story that silently injects nothing would pass for the wrong reason.
    let cases = [
        ("power-cut-mid-produce", "POWER CUT"),
        ("crash-during-fsync", "CRASH"),
        ("failed-fsync-then-retry", "EIO: injected fsync failure"),
        (
            "duplicate-resent-across-crash",
            "crash right after a successful sync",
        ),
        ("full-disk", "ENOSPC"),
        (
            "fail-meta-init-producer-id",
            "injected meta.db write failure",
        ),
        ("network-drops", "fault: drop-connections"),
        (
            "power-cut-between-decision-and-markers",
            "power cut right after a decision was stored",
        ),
        ("power-cut-after-markers", "fault: power-cut"),
        (
            "swarm",
            "EndTxn lost with the connection; the application starts over",
        ),
        ("crash-during-marker-fsync", "CRASH"),
        ("fail-marker-fsync", "EIO: injected fsync failure"),
        ("fail-meta-end-txn", "(will fail)"),
        ("zombie-producer", "a zombie keeps sending"),
        (
            "timeout-abort-races-late-commit",
            "silent past the transaction timeout",
        ),
        (
            "restart-with-open-transaction",
            "dies with its transaction open",
        ),
        ("copier-restarts", "copier process crashes"),
        ("power-cut-after-end-txn", "EndTxn success was read"),
        ("group-rebalance-during-transaction", "abort and rejoin"),
        ("read-error-during-fetch", "EIO: injected read failure"),
        (
            "read-error-during-fetch",
            "the operator restarts the broker",
        ),
        (
            "lost-index-files",
            "index files lost while the broker was down",
        ),
        (
            "power-cut-during-recovery",
            "fault: power cut while the broker recovers",
        ),
        (
            "power-cut-during-recovery",
            "fault: crash while the broker recovers",
        ),
        (
            "clean-stop-then-power-cut",
            "broker stopped cleanly (Output::Stopped)",
        ),
        (
            "clean-stop-then-power-cut",
            "fault: power cut right after a clean stop",
        ),
        (
            "compaction-power-cut-mid-swap",
            "fault: a power cut just before rename",
        ),
        ("compaction-power-cut-mid-swap", ".log.swap ->"),
        (
            "compaction-with-open-transaction",
            "dies with its transaction open",
        ),
        ("compaction-with-open-transaction", ".log.cleaned ->"),
    ];
    // Some strike only when the workload's timing meets them (a producer
    // restarting because its EndTxn was lost): the first of a few seeds to
    // show it will do.
    const SEEDS: u64 = 4;
    for (name, needle) in cases {
        let shown = (0..SEEDS).any(|seed| {
            let r = doze_sim::run_one(Scenario::builtin(name).unwrap(), seed, true, None);
            r.trace_lines.iter().any(|l| l.contains(needle))
        });
        assert!(
            shown,
            "{name}: no {needle:?} in the traces of seeds 0..{SEEDS}; replay: {}",
            replay_command(name, 0, None)
        );
    }
}

/// Seeds that once broke a promise, kept as they were found. Swarm seeds
/// 32, 156, 172 and 247: stored decisions carried out at start-up before
/// the boot sync skipped markers that were in the log but only in the page
/// cache of the killed process; a failed boot sync then lost them, and the
/// copier's output stayed open for good (NOT EXACTLY ONCE, LSO stuck).
/// retention-under-faults 67 and 249: a start used a checkpoint whose
/// segment retention had deleted, and the transaction snapshot in it kept
/// open a transaction whose marker went with that segment (LSO stuck at
/// the log start). Swarm 4260 and 2484 (they drew retention): a clean stop
/// waited for ever for the sync of a retention deletion made during it.
/// Swarm 470 (it drew DeleteRecords): a low watermark answered from a log
/// start retention had moved, never stored, went back after a power cut;
/// swarm 76112353: the same, retention moving the start while the
/// DeleteRecords write was in flight. topic-churn-under-faults 14: a topic
/// created again was stored before the removal of the deleted one's
/// directories was durable, and a power cut gave it the old files; 457:
/// the same after a crash, whose removal no later process made durable.
#[test]
fn seeds_that_once_failed_keep_every_promise() {
    let failures: Vec<String> = [
        ("swarm", 32),
        ("swarm", 156),
        ("swarm", 172),
        ("swarm", 247),
        ("retention-under-faults", 67),
        ("retention-under-faults", 249),
        ("swarm", 2484),
        ("swarm", 4260),
        ("swarm", 470),
        ("swarm", 76112353),
        ("topic-churn-under-faults", 14),
        ("topic-churn-under-faults", 457),
    ]
    .into_iter()
    .filter_map(|(name, seed)| failure(name, seed))
    .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The churn story's transactions must really end across their topic's
/// deletion, both before and after its re-creation, or it would pass for
/// the wrong reason.
#[test]
fn transactions_end_across_deletions_in_the_churn_story() {
    let name = "topic-churn-under-faults";
    let (mut ended, mut recreated) = (0, 0);
    let (mut raced_acked, mut raced_lost) = (0, 0);
    for seed in 0..3 {
        let r = doze_sim::run_one(Scenario::builtin(name).unwrap(), seed, false, None);
        assert!(
            r.violations.is_empty(),
            "{name} seed {seed}: {:?}; replay: {}",
            r.violations,
            replay_command(name, seed, None)
        );
        ended += r.stats.churn_txns_ended;
        recreated += r.stats.churn_txns_ended_recreated;
        raced_acked += r.stats.churn_batches_raced_acked;
        raced_lost += r.stats.churn_batches_raced_lost;
    }
    assert!(
        recreated > 0 && ended > recreated,
        "{name} seeds 0-2: {ended} transactions ended across a deletion, {recreated} of them after the re-creation"
    );
    // Batches raced by their topic's deletion, both ways: acknowledged
    // (their sync came first) and refused (the partition went first).
    assert!(
        raced_acked > 0 && raced_lost > 0,
        "{name} seeds 0-2: of the batches raced by their topic's deletion, {raced_acked} acknowledged and {raced_lost} refused"
    );
}

/// A story about expiring offsets that saw none expire would pass for the
/// wrong reason.
#[test]
fn offsets_really_expire_in_the_offset_expiry_story() {
    let name = "offset-expiry-under-faults";
    for seed in 0..3 {
        let r = doze_sim::run_one(Scenario::builtin(name).unwrap(), seed, false, None);
        assert!(
            r.stats.offsets_expired_seen > 0,
            "{name} seed {seed}: the keeper saw no offset expire; replay: {}",
            replay_command(name, seed, None)
        );
    }
}
