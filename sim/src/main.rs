//! `doze-sim`: replay one seeded run, or sweep many.
//!
//!   doze-sim --scenario power-cut-mid-produce --seed 42 [--trace]
//!   doze-sim --sweep --seeds 10000 [--start 0]
//!   doze-sim --list
//!
//! Exits non-zero when any run breaks a promise, after printing the command
//! that replays it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;

use clap::Parser;
use doze_sim::sweep::{panic_problem, sweep, SweepConfig};
use doze_sim::{replay_command, run_with, PlantedBug, RunConfig, Scenario};

#[derive(Parser, Debug)]
#[command(name = "doze-sim", about = "Deterministic simulation of doze-kafka")]
struct Args {
    /// Scenario to replay (a file stem in scenarios/), or to sweep alone.
    #[arg(long)]
    scenario: Option<String>,
    /// Seed of the run to replay.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the whole history of the run.
    #[arg(long)]
    trace: bool,
    /// Sweep many seeds instead of replaying one.
    #[arg(long)]
    sweep: bool,
    /// Seeds in the sweep.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// First seed of the sweep.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Keep sweeping after a failure (default: stop at the first).
    #[arg(long)]
    keep_going: bool,
    /// Test only: plant a known bug to see that it is caught (ack-before-sync,
    /// end-txn-before-markers-durable, serve-above-lso, ignore-adopt,
    /// checkpoint-before-indexes-durable).
    #[arg(long)]
    plant_bug: Option<String>,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let plant = match args.plant_bug.as_deref().map(|n| (n, PlantedBug::parse(n))) {
        None => None,
        Some((_, Some(bug))) => Some(bug),
        Some((name, None)) => {
            let known: Vec<&str> = PlantedBug::ALL.iter().map(|b| b.name()).collect();
            eprintln!("unknown planted bug {name:?}; known: {}", known.join(", "));
            return ExitCode::from(2);
        }
    };
    if args.list {
        for name in Scenario::builtin_names() {
            let s = Scenario::builtin(name).expect("listed");
            println!("{name:32} {}", s.description);
        }
        return ExitCode::SUCCESS;
    }
    if args.sweep {
        return run_sweep(&args, plant);
    }
    let Some(name) = args.scenario.as_deref() else {
        eprintln!("give --scenario NAME --seed N, or --sweep, or --list");
        return ExitCode::from(2);
    };
    let Some(scenario) = Scenario::builtin(name) else {
        eprintln!("no scenario {name:?}; --list shows them");
        return ExitCode::from(2);
    };
    let cfg = RunConfig {
        scenario,
        seed: args.seed,
        keep_trace: false,
        echo_trace: args.trace,
        plant,
    };
    let replay = replay_command(name, args.seed, plant);
    let result = match catch_unwind(AssertUnwindSafe(|| run_with(cfg))) {
        Ok(result) => result,
        Err(payload) => {
            // A broken invariant; the panic hook printed where (stderr).
            println!("FAILED: 1 violations");
            println!("  {}", panic_problem(&*payload));
            println!("replay: {replay}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", result.setup);
    println!(
        "trace hash {:016x} ({} lines), {:.1} simulated s, {} records acknowledged, {} offsets seen expire, {} transactions ended across their topic's deletion ({} after its re-creation; batches raced by the deletion: {} acknowledged, {} refused), {} crashes, {} power cuts, {} syncs ({} failed, {} lied)",
        result.trace_hash,
        result.trace_count,
        result.sim_ms as f64 / 1000.0,
        result.stats.acked_records,
        result.stats.offsets_expired_seen,
        result.stats.churn_txns_ended,
        result.stats.churn_txns_ended_recreated,
        result.stats.churn_batches_raced_acked,
        result.stats.churn_batches_raced_lost,
        result.stats.crashes,
        result.stats.power_cuts,
        result.stats.syncs,
        result.stats.failed_syncs,
        result.stats.lying_syncs
    );
    let mut disk = doze_sim::sweep::DiskFigures::default();
    disk.add(&result.stats);
    println!("disk: {}", disk.summary());
    if result.violations.is_empty() {
        println!("ok: every promise kept");
        return ExitCode::SUCCESS;
    }
    println!("FAILED: {} violations", result.violations.len());
    for v in result.violations.iter().take(20) {
        println!("  {v}");
    }
    println!("replay: {replay}");
    ExitCode::FAILURE
}

fn run_sweep(args: &Args, plant: Option<PlantedBug>) -> ExitCode {
    let cfg = SweepConfig {
        start_seed: args.start,
        seeds: args.seeds,
        plant,
        scenario: args.scenario.clone(),
        stop_at_first: !args.keep_going,
    };
    let every = (args.seeds / 10).max(1);
    let report = sweep(&cfg, |r, failure| {
        if let Some(f) = failure {
            println!("FAILED seed {} ({}):", f.seed, f.scenario);
            for p in f.problems.iter().take(10) {
                println!("  {p}");
            }
            println!("  replay: {}", f.replay);
        } else if r.runs % every == 0 {
            println!("  ... {}", r.summary());
        }
    });
    println!("sweep: {}", report.summary());
    if report.failures.is_empty() {
        return ExitCode::SUCCESS;
    }
    for f in &report.failures {
        println!("replay: {}", f.replay);
    }
    ExitCode::FAILURE
}
