//! The CI sweep: a few hundred seeds over the swarm and the named stories.
//! `make sim SEEDS=n` runs the same sweep, bigger, in release.

use doze_sim::sweep::{sweep, SweepConfig};

const CI_SEEDS: u64 = 200;

#[test]
fn sweep_of_random_seeds_keeps_every_promise() {
    let cfg = SweepConfig {
        start_seed: 1_000_000,
        seeds: CI_SEEDS,
        plant: None,
        scenario: None,
        stop_at_first: false,
    };
    let report = sweep(&cfg, |_, failure| {
        if let Some(f) = failure {
            println!(
                "FAILED seed {} ({}): {:?}\n  replay: {}",
                f.seed,
                f.scenario,
                &f.problems[..f.problems.len().min(5)],
                f.replay
            );
        }
    });
    println!(
        "CI sweep: {} seeds covering {:.2} simulated hours; {}",
        report.runs,
        report.sim_hours(),
        report.summary()
    );
    let replays: Vec<&str> = report.failures.iter().map(|f| f.replay.as_str()).collect();
    assert!(
        report.failures.is_empty(),
        "{} seeds failed; replay with:\n{}",
        replays.len(),
        replays.join("\n")
    );
    assert_eq!(report.runs, CI_SEEDS);
    assert!(
        report.power_cuts > CI_SEEDS,
        "the sweep cuts the power (more than the final cut per seed)"
    );
}
