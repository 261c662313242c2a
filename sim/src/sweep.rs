//! The sweep: many seeds, each running the scenario its seed picks (mostly
//! the swarm, with its own fault rates), every failure reported with the
//! command that replays it. A panic in the core (a broken invariant) is a
//! failure like any oracle violation.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

use crate::{replay_command, run_with, PlantedBug, RunConfig, RunResult, Scenario};

#[derive(Clone, Debug)]
pub struct SweepConfig {
    pub start_seed: u64,
    pub seeds: u64,
    pub plant: Option<PlantedBug>,
    /// Only this scenario, instead of the seed's pick.
    pub scenario: Option<String>,
    /// Stop at the first failing seed.
    pub stop_at_first: bool,
}

#[derive(Clone, Debug)]
pub struct Failure {
    pub scenario: String,
    pub seed: u64,
    pub problems: Vec<String>,
    pub replay: String,
}

#[derive(Clone, Debug, Default)]
pub struct SweepReport {
    pub runs: u64,
    pub failures: Vec<Failure>,
    pub sim_ms: i64,
    pub acked_records: u64,
    pub offsets_expired_seen: u64,
    pub churn_txns_ended: u64,
    pub crashes: u64,
    pub power_cuts: u64,
    /// The disk faults of the on-disk log, summed over the runs.
    pub disk: DiskFigures,
    pub wall_secs: f64,
}

/// What the runs did to and with the on-disk log.
#[derive(Clone, Debug, Default)]
pub struct DiskFigures {
    pub reads: u64,
    pub response_ranges: u64,
    pub failed_reads: u64,
    pub failed_response_reads: u64,
    pub index_files_lost: u64,
    pub recovery_kills: u64,
    pub cleaner_kills: u64,
    pub cleaned_segments: u64,
    pub clean_stops: u64,
    pub operator_restarts: u64,
    pub boots: u64,
    pub boot_log_bytes_read: u64,
    pub clean_boots: u64,
    pub clean_boot_log_bytes_read: u64,
    pub trusted_boots: u64,
}

impl DiskFigures {
    pub fn add(&mut self, s: &crate::world::Stats) {
        self.reads += s.reads;
        self.response_ranges += s.response_ranges;
        self.failed_reads += s.failed_reads;
        self.failed_response_reads += s.failed_response_reads;
        self.index_files_lost += s.index_files_lost;
        self.recovery_kills += s.recovery_kills;
        self.cleaner_kills += s.cleaner_kills;
        self.cleaned_segments += s.cleaned_segments;
        self.clean_stops += s.clean_stops;
        self.operator_restarts += s.operator_restarts;
        self.boots += s.boots;
        self.boot_log_bytes_read += s.boot_log_bytes_read;
        self.clean_boots += s.clean_boots;
        self.clean_boot_log_bytes_read += s.clean_boot_log_bytes_read;
        self.trusted_boots += s.trusted_boots;
    }

    pub fn summary(&self) -> String {
        format!(
            "{} reads and {} response ranges, {} of them failed ({} reads, {} ranges), {} index files lost, {} kills during recovery, {} cleaned segments swapped in and {} kills at cleaner ops, {} clean stops ({} by the operator after a read error); {} starts read {} KiB of .log in all, the {} right after a clean stop {} B; {} found the clean-shutdown file",
            self.reads,
            self.response_ranges,
            self.failed_reads + self.failed_response_reads,
            self.failed_reads,
            self.failed_response_reads,
            self.index_files_lost,
            self.recovery_kills,
            self.cleaned_segments,
            self.cleaner_kills,
            self.clean_stops,
            self.operator_restarts,
            self.boots,
            self.boot_log_bytes_read / 1024,
            self.clean_boots,
            self.clean_boot_log_bytes_read,
            self.trusted_boots
        )
    }
}

impl SweepReport {
    pub fn seeds_per_sec(&self) -> f64 {
        self.runs as f64 / self.wall_secs.max(1e-9)
    }

    pub fn sim_hours(&self) -> f64 {
        self.sim_ms as f64 / 3_600_000.0
    }

    pub fn summary(&self) -> String {
        format!(
            "{} seeds, {} failed; {:.1} seeds/s; {:.3} simulated hours ({:.1} s per seed); {} records acknowledged, {} offsets seen expire, {} transactions ended across their topic's deletion, {} crashes, {} power cuts; {}",
            self.runs,
            self.failures.len(),
            self.seeds_per_sec(),
            self.sim_hours(),
            self.sim_ms as f64 / 1000.0 / self.runs.max(1) as f64,
            self.acked_records,
            self.offsets_expired_seen,
            self.churn_txns_ended,
            self.crashes,
            self.power_cuts,
            self.disk.summary()
        )
    }
}

/// The scenario a seed runs in a sweep: three in four the swarm, else one of
/// the named stories (so each keeps being exercised with fresh seeds).
pub fn scenario_for_seed(seed: u64) -> &'static str {
    let names = Scenario::builtin_names();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_5ce4_a710_0000);
    if rng.random_range(0..4) > 0 && names.contains(&"swarm") {
        return "swarm";
    }
    names[rng.random_range(0..names.len())]
}

/// Runs one seed; a panic becomes the failure's message.
pub fn run_guarded(
    scenario: &str,
    seed: u64,
    plant: Option<PlantedBug>,
) -> Result<RunResult, String> {
    let scenario =
        Scenario::builtin(scenario).ok_or_else(|| format!("no scenario named {scenario:?}"))?;
    let cfg = RunConfig {
        scenario,
        seed,
        keep_trace: false,
        echo_trace: false,
        plant,
    };
    catch_unwind(AssertUnwindSafe(|| run_with(cfg))).map_err(|payload| panic_problem(&*payload))
}

/// A caught panic as a failure's problem: `PANIC: <its message>`.
pub fn panic_problem(payload: &(dyn std::any::Any + Send)) -> String {
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into());
    format!("PANIC: {message}")
}

/// Runs the sweep, calling `progress` after every seed.
pub fn sweep(
    cfg: &SweepConfig,
    mut progress: impl FnMut(&SweepReport, Option<&Failure>),
) -> SweepReport {
    let started = Instant::now();
    let mut report = SweepReport::default();
    for seed in cfg.start_seed..cfg.start_seed + cfg.seeds {
        let scenario = cfg
            .scenario
            .clone()
            .unwrap_or_else(|| scenario_for_seed(seed).to_string());
        let outcome = run_guarded(&scenario, seed, cfg.plant);
        report.runs += 1;
        let problems = match outcome {
            Ok(result) => {
                report.sim_ms += result.sim_ms;
                report.acked_records += result.stats.acked_records;
                report.offsets_expired_seen += result.stats.offsets_expired_seen;
                report.churn_txns_ended += result.stats.churn_txns_ended;
                report.crashes += result.stats.crashes;
                report.power_cuts += result.stats.power_cuts;
                report.disk.add(&result.stats);
                result.violations
            }
            Err(panic) => vec![panic],
        };
        report.wall_secs = started.elapsed().as_secs_f64();
        if problems.is_empty() {
            progress(&report, None);
            continue;
        }
        let replay = replay_command(&scenario, seed, cfg.plant);
        report.failures.push(Failure {
            scenario,
            seed,
            problems,
            replay,
        });
        progress(&report, report.failures.last());
        if cfg.stop_at_first {
            break;
        }
    }
    report.wall_secs = started.elapsed().as_secs_f64();
    report
}
