//! `doze-sim`: replay one seeded run, or sweep many.
//!
//!   doze-sim --scenario power-cut-mid-produce --seed 42 [--trace]
//!   doze-sim --sweep --seeds 10000 [--start 0]
//!   doze-sim --list
//!   doze-sim --hashes --seeds 2000 --scenario-seeds 200 --start 1 > sim/trace-hashes.txt
//!   doze-sim --hashes-check sim/trace-hashes.txt
//!
//! Exits non-zero when any run breaks a promise, after printing the command
//! that replays it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use doze_sim::hashes;
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
    /// Print `scenario seed trace-hash` for `--seeds` seeds of the swarm
    /// and `--scenario-seeds` of every other scenario, from `--start`
    /// (`make trace-hashes`).
    #[arg(long)]
    hashes: bool,
    /// Seeds of each scenario but the swarm in `--hashes`.
    #[arg(long, default_value_t = 200)]
    scenario_seeds: u64,
    /// Run every line of this `--hashes` file again and fail at the first
    /// trace hash that differs (every one with --keep-going), printing its
    /// replay command (`make trace-hashes-check`).
    #[arg(long, value_name = "FILE")]
    hashes_check: Option<std::path::PathBuf>,
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
    if args.hashes || args.hashes_check.is_some() {
        if plant.is_some() {
            eprintln!("--hashes records the runs as they are: no --plant-bug");
            return ExitCode::from(2);
        }
        return match &args.hashes_check {
            Some(file) => check_hashes(file, !args.keep_going),
            None => record_hashes(&args),
        };
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

/// `--hashes`: the lines on stdout, progress and the time taken on stderr.
fn record_hashes(args: &Args) -> ExitCode {
    let seeds = args.start..args.start + args.seeds;
    let scenario_seeds = args.start..args.start + args.scenario_seeds;
    let runs = hashes::plan(seeds, scenario_seeds);
    println!(
        "# doze-sim trace hashes: scenario seed hash (`panic`: the run panicked); {} seeds of the swarm and {} of every other scenario from seed {}",
        args.seeds, args.scenario_seeds, args.start
    );
    println!("# recorded with `make trace-hashes`, checked with `make trace-hashes-check`");
    let started = Instant::now();
    let every = (runs.len() / 10).max(1);
    let mut panics = 0;
    for (i, (scenario, seed)) in runs.iter().enumerate() {
        let line = hashes::record(scenario, *seed);
        panics += usize::from(line.hash.is_none());
        println!("{}", line.format());
        if (i + 1) % every == 0 {
            eprintln!(
                "  ... {} of {} runs, {:.0} s",
                i + 1,
                runs.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "trace hashes: {} runs ({panics} panicked) in {secs:.1} s, {:.1} runs/s",
        runs.len(),
        runs.len() as f64 / secs.max(1e-9)
    );
    ExitCode::SUCCESS
}

/// `--hashes-check FILE`.
fn check_hashes(file: &std::path::Path, stop_at_first: bool) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("{}: {e} (`make trace-hashes` records it)", file.display());
            return ExitCode::from(2);
        }
    };
    let expected = match hashes::parse(&text) {
        Ok(lines) if !lines.is_empty() => lines,
        Ok(_) => {
            eprintln!("{}: no runs recorded", file.display());
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    for name in hashes::unrecorded_scenarios(&expected) {
        println!(
            "note: scenario {name} has no line in {} (new since it was recorded?)",
            file.display()
        );
    }
    let started = Instant::now();
    let every = (expected.len() as u64 / 10).max(1);
    let report = hashes::check(&expected, stop_at_first, |r| {
        if r.runs % every == 0 {
            eprintln!(
                "  ... {} of {} runs, {} differ, {:.0} s",
                r.runs,
                expected.len(),
                r.differences.len(),
                started.elapsed().as_secs_f64()
            );
        }
    });
    let secs = started.elapsed().as_secs_f64();
    for d in report.differences.iter().take(20) {
        let got = match &d.problem {
            Some(problem) => format!("no hash: {problem}"),
            None => d.got.format(),
        };
        println!("DIFFERS: recorded {}, now {got}", d.expected.format());
    }
    println!(
        "trace hashes: {} of {} runs checked in {secs:.1} s, {} differ",
        report.runs,
        expected.len(),
        report.differences.len()
    );
    let Some(first) = report.differences.first() else {
        println!("ok: every trace hash is the recorded one");
        return ExitCode::SUCCESS;
    };
    println!(
        "replay: {}",
        replay_command(&first.expected.scenario, first.expected.seed, None)
    );
    ExitCode::FAILURE
}
