//! doze-sim: deterministic simulation of doze-kafka.
//!
//! It drives the same `doze_core::Broker` the binary runs, under a seed, with
//! simulated time: a SimDisk that loses unsynced bytes at a power cut,
//! meta.db as a map written on completion, simulated clients that speak the
//! Kafka protocol through kafka-protocol's structs, faults, and an oracle
//! that checks the history. Same seed, same history, byte for byte.
//!
//! Entry points: `run_one` (one scenario and seed), `sweep` (many seeds over
//! the swarm), `hashes` (the trace hashes of fixed runs, recorded and
//! checked), and the `doze-sim` binary over them.

pub mod client;
pub mod faults;
pub mod hashes;
pub mod history;
pub mod metadb;
pub mod oracle;
pub mod oracle_compact;
pub mod oracle_group;
pub mod oracle_txn;
pub mod scenario;
pub mod sweep;
pub mod trace;
pub mod world;

/// The simulated disk lives in its own crate (doze-simdisk), shared with the
/// core's tests; `doze_sim::disk` still names it.
pub use doze_simdisk::disk;
pub use faults::PlantedBug;
pub use scenario::Scenario;
pub use world::{RunConfig, RunResult};

/// Runs one scenario under one seed.
pub fn run_one(
    scenario: Scenario,
    seed: u64,
    keep_trace: bool,
    plant: Option<PlantedBug>,
) -> RunResult {
    run_with(RunConfig {
        scenario,
        seed,
        keep_trace,
        echo_trace: false,
        plant,
    })
}

pub fn run_with(cfg: RunConfig) -> RunResult {
    world::World::new(cfg).run()
}

/// The command that replays a run, printed with every failure: the make
/// target and the cargo command it stands for.
pub fn replay_command(scenario: &str, seed: u64, plant: Option<PlantedBug>) -> String {
    let mut make = format!("make replay SCENARIO={scenario} SEED={seed}");
    let mut flags = String::new();
    if let Some(bug) = plant {
        make.push_str(&format!(" PLANT_BUG={}", bug.name()));
        flags.push_str(&format!(" --plant-bug {}", bug.name()));
    }
    format!("{make}   # or: cargo run -p doze-sim --release -- --scenario {scenario} --seed {seed}{flags} --trace")
}
