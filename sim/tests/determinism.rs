//! Same seed, same history: two runs of one seed give the same trace hash,
//! line for line; different seeds give different histories.

use doze_sim::{replay_command, run_one, Scenario};

#[test]
fn same_seed_twice_gives_the_same_trace() {
    for (name, seed) in [
        ("swarm", 3),
        ("swarm", 11),
        ("power-cut-mid-produce", 7),
        ("full-disk", 2),
        ("copier-restarts", 1),
        ("zombie-producer", 4),
        ("group-rebalance-during-transaction", 2),
        ("power-cut-during-recovery", 1),
        ("read-error-during-fetch", 3),
    ] {
        let a = run_one(Scenario::builtin(name).unwrap(), seed, true, None);
        let b = run_one(Scenario::builtin(name).unwrap(), seed, false, None);
        assert!(
            a.trace_count > 100,
            "{name}/{seed}: a run has a history ({} lines)",
            a.trace_count
        );
        assert_eq!(
            a.trace_hash,
            b.trace_hash,
            "{name} seed {seed} is not deterministic; replay: {}",
            replay_command(name, seed, None)
        );
        assert_eq!(a.trace_count, b.trace_count);
        assert_eq!(a.violations, b.violations);
        println!(
            "{name} seed {seed}: trace hash {:016x}, {} lines",
            a.trace_hash, a.trace_count
        );
    }
}

#[test]
fn different_seeds_give_different_histories() {
    let a = run_one(Scenario::builtin("swarm").unwrap(), 1, false, None);
    let b = run_one(Scenario::builtin("swarm").unwrap(), 2, false, None);
    assert_ne!(a.trace_hash, b.trace_hash);
}
