//! The world: one broker (the real `doze_core::Broker`), its SimDisk and
//! meta.db, the simulated clients, the network between them, a simulated
//! clock and a seeded PRNG. Nothing here reads the wall clock or the OS's
//! randomness: a seed determines the whole history.
//!
//! A run goes through phases: *setup* (an admin client creates the topic),
//! *workload* (producers and consumers run, faults fire), *drain* (faults
//! stop, consumers catch up), *verify* (a last power cut, a restart, and a
//! verifier reads every partition back for the oracle).
//!
//! The broker goes down by a crash, a power cut, or a clean stop
//! (`Input::Shutdown` until `Output::Stopped`), and comes back after a
//! restart delay; each start recovers (reads above its recovery points)
//! before it serves, and faults may strike then too.
//!
//! Split by concern: `broker.rs` carries out the core's outputs and feeds it
//! completions, `faults.rs` injects faults, `net.rs` moves frames and keeps
//! connections, `events.rs` is the queue.

mod broker;
mod events;
mod faults;
mod net;
mod workload;

use std::collections::{BTreeMap, BTreeSet};

use doze_core::log::recovery::LogCheckpoint;
use doze_core::{Broker, BrokerConfig, ConnId, IoId, PartitionDir};
use kafka_protocol::messages::ApiKey;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

use crate::client::admin::Admin;
use crate::client::churner::Churner;
use crate::client::consumer::{Consumer, Isolation, Mode};
use crate::client::offset_keeper::OffsetKeeper;
use crate::client::producer::{Producer, ProducerConfig};
use crate::client::truncator::Truncator;
use crate::client::wire::Wire;
use crate::client::{Client, Cx};
use crate::disk::SimDisk;
use crate::faults::{FaultKind, FaultMix, PlantedBug};
use crate::history::History;
use crate::metadb::SimMeta;
use crate::scenario::Scenario;
use crate::trace::Trace;
pub use events::{Event, EventQueue};

/// The simulated clock starts here (ms since the UNIX epoch), like a real one.
pub const T0_MS: i64 = 1_700_000_000_000;
/// A workload that has not finished by then is stuck: a liveness failure.
const WORKLOAD_MS_MAX: i64 = 15 * 60 * 1000;
/// A request unanswered this long on a live connection is a hang: Kafka's
/// clients give up on it after request.timeout.ms (30 s by default). A
/// crash or a dropped connection ends the wait (the client asks again), so
/// only a broker that holds a request it will never answer reaches it.
const REQUEST_ANSWER_MS_MAX: i64 = 30_000;
/// JoinGroup waits for the rebalance, up to the group's rebalance timeout
/// (Kafka's clients wait that long and 5 s more).
const JOIN_ANSWER_MS_MAX: i64 = 5 * 60 * 1000;
/// How often the requests waiting are looked at.
const HANG_CHECK_EVERY_MS: i64 = 1000;
/// Consumers keep reading this long after the producers are done.
const DRAIN_MS: i64 = 1500;
/// The whole run, verification included, ends by then.
const RUN_MS_MAX: i64 = 20 * 60 * 1000;
const TOPIC: &str = "sim-topic";
pub const MAIN_TOPIC: &str = TOPIC;
/// The copier's output topic (created in every run, used when one runs).
const OUTPUT_TOPIC: &str = "sim-out";
/// The group copiers' output topic (created in every run, like the above).
const GROUP_OUTPUT_TOPIC: &str = "sim-group-out";
/// transaction.abort.timed.out.transaction.cleanup.interval.ms: small, so
/// that timeouts of a few seconds are found quickly.
const TXN_CHECK_INTERVAL_MS: i64 = 200;

#[derive(Clone, Debug)]
pub struct RunConfig {
    pub scenario: Scenario,
    pub seed: u64,
    pub keep_trace: bool,
    /// Print each trace line as it happens (the binary's `--trace`), so a
    /// run that panics still shows its history up to the panic.
    pub echo_trace: bool,
    pub plant: Option<PlantedBug>,
}

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub events: u64,
    pub acked_records: u64,
    /// Committed offsets the offset keeper saw expire.
    pub offsets_expired_seen: u64,
    /// The churner's transactions ended across a deletion of their topic,
    /// and of those, ended after its re-creation.
    pub churn_txns_ended: u64,
    pub churn_txns_ended_recreated: u64,
    /// The churner's transactional batches answered with their topic's
    /// deletion racing them: acknowledged, and refused (lost).
    pub churn_batches_raced_acked: u64,
    pub churn_batches_raced_lost: u64,
    pub crashes: u64,
    pub power_cuts: u64,
    pub failed_syncs: u64,
    pub lying_syncs: u64,
    pub syncs: u64,
    pub bytes_appended: u64,
    /// `DiskOp::Read`s carried out, and response file ranges read.
    pub reads: u64,
    pub response_ranges: u64,
    /// Injected read errors: of `DiskOp::Read`s, of response ranges.
    pub failed_reads: u64,
    pub failed_response_reads: u64,
    /// Index files deleted while the broker was down.
    pub index_files_lost: u64,
    /// Kills (crash or power cut) that struck while the broker recovered.
    pub recovery_kills: u64,
    /// Kills (crash or power cut) at one of the log cleaner's disk ops.
    pub cleaner_kills: u64,
    /// Cleaned segments swapped in (their `.log` renamed live).
    pub cleaned_segments: u64,
    /// Clean stops that ended with `Output::Stopped`.
    pub clean_stops: u64,
    /// Restarts after a read error (a clean stop by the operator).
    pub operator_restarts: u64,
    /// Starts, and the `.log` bytes their recovery read.
    pub boots: u64,
    pub boot_log_bytes_read: u64,
    /// Starts right after a clean stop (disk untouched since), and the
    /// `.log` bytes their recovery read (none is expected).
    pub clean_boots: u64,
    pub clean_boot_log_bytes_read: u64,
    /// Starts that found the clean-shutdown file (and trusted the files).
    pub trusted_boots: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Admin,
    Producer,
    Consumer,
    Copier,
    Verifier,
}

struct Slot {
    client: Box<dyn Client>,
    wire: Wire,
    role: Role,
    /// The connection the world knows this client holds or is opening.
    conn: Option<ConnId>,
    /// The earliest wake-up queued, so a busy client does not flood the queue.
    wake_at_ms: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Setup,
    Workload,
    Drain,
    Verify,
    Done,
}

/// Fates decided when an I/O is issued, carried out at its completion.
#[derive(Clone, Copy, Debug)]
struct SyncFate {
    fail: bool,
    lie: bool,
}

/// How the broker process is doing, as the world (its driver) knows it.
#[derive(Clone, Debug, Default)]
struct Process {
    /// Started and not serving yet (recovering, or waiting for its boot
    /// sync): `poll_timeout` is `None` until the core serves.
    booting: bool,
    /// `Input::Shutdown` was sent; no frames go in until it is stopped.
    stopping: bool,
    /// `Output::Stopped` came out of the input being handled.
    stopped: bool,
    /// The broker last went down by a clean stop, and nothing touched the
    /// disk since: the next start is a clean one.
    clean_down: bool,
    /// This start follows a clean stop: it must read no `.log` byte below
    /// the recovery points (`boot_checkpoints`).
    clean_boot: bool,
    /// The recovery points in meta.db when this process started.
    boot_checkpoints: BTreeMap<PartitionDir, LogCheckpoint>,
    /// `.log` bytes this start's recovery read.
    boot_log_bytes: u64,
    /// An operator restart is on its way for this incarnation.
    operator_restart: bool,
    /// What the core told this process of the topics that store a codec
    /// (`Output::TopicCompression`), for the driver's preparing of Produce
    /// requests (`frame_to_broker`), as net's `TopicCodecs`.
    topic_codecs: BTreeMap<String, doze_core::topic_config::ProducePrep>,
}

pub struct World {
    cfg: RunConfig,
    rng: ChaCha8Rng,
    /// The generator of the fault kinds with `FaultKind::own_draws` (their
    /// rates, times and strikes), seeded from the seed too.
    own_rng: ChaCha8Rng,
    now_ms: i64,
    queue: EventQueue,
    pub trace: Trace,
    pub history: History,
    pub stats: Stats,
    broker_config: BrokerConfig,
    broker: Option<Broker>,
    /// Broker incarnation: bumped at every crash, so that completions and
    /// timers of a dead process are dropped.
    gen: u64,
    start_pending: bool,
    tick_at_ms: Option<i64>,
    disk: SimDisk,
    meta: SimMeta,
    sync_fates: BTreeMap<IoId, SyncFate>,
    meta_fates: BTreeMap<IoId, bool>,
    slots: Vec<Slot>,
    conns: BTreeMap<ConnId, usize>,
    next_conn: ConnId,
    /// Per connection and direction, when the last frame arrives: TCP keeps order.
    last_arrival_ms: BTreeMap<(ConnId, bool), i64>,
    phase: Phase,
    topic_partitions: i32,
    /// The main topic is compacted: its records carry keys, the oracle
    /// holds it to compaction's promises, and no copier reads it (a copy
    /// of a log the cleaner thins is not exactly-once checkable).
    compacted: bool,
    /// The main topic's retention, when the run has it: the broker deletes
    /// its oldest segments, the oracle lets records below the final log
    /// start go, and no copier reads it (as on a compacted topic).
    retention: Option<Retention>,
    /// An operator trims the main topic with DeleteRecords during the
    /// workload (`client::truncator`).
    delete_records: bool,
    /// An operator deletes and re-creates a scratch topic of this many
    /// partitions during the workload (`client::churner`).
    churn_partitions: Option<i32>,
    /// A consumer commits offsets with retention times of their own and
    /// reads them back while the broker expires them
    /// (`client::offset_keeper`).
    offset_expiry: bool,
    /// The main topic's segment.ms: its segments roll by age too.
    segment_ms: Option<i64>,
    workload_start_ms: i64,
    /// When the requests waiting are next looked at (`check_hangs`).
    hang_check_at_ms: i64,
    faults_on: bool,
    armed: BTreeSet<FaultKind>,
    mix: FaultMix,
    slow_sync: bool,
    /// A marker was appended since the last sync was issued.
    marker_unsynced: bool,
    /// The segment whose cleaned `.log` was renamed into place since the
    /// last sync was issued.
    swap_unsynced: Option<(PartitionDir, i64)>,
    /// `FailSwapSync` struck on this segment's swap and its spell is on:
    /// every sync fails, and the power goes just after the cleaner's next
    /// `.cleaned` write under its base.
    failed_swap: Option<(PartitionDir, i64)>,
    /// Meta writes (decisions) after whose completion the power goes.
    cut_after_meta: BTreeSet<IoId>,
    process: Process,
}

/// What a run produced: the oracle's verdict and the figures.
#[derive(Clone, Debug)]
pub struct RunResult {
    pub scenario: String,
    pub seed: u64,
    pub trace_hash: u64,
    pub trace_lines: Vec<String>,
    pub trace_count: u64,
    pub sim_ms: i64,
    pub violations: Vec<String>,
    pub stats: Stats,
    pub setup: String,
}

/// Chance that a swarm run's main topic is compacted.
const SWARM_COMPACTED_P: f64 = 0.25;
/// log.cleaner.backoff.ms when the main topic is compacted: passes often.
const CLEANER_BACKOFF_MS: i64 = 300;
/// Recovery checkpoints a run may be given: (bytes, interval). A run lasts
/// tens of simulated seconds and writes little, so with the broker's
/// defaults (the last pair) a start almost never finds a checkpoint taken
/// on the way; the others make starts from checkpoints, and the index
/// syncs they wait for, common.
const CHECKPOINT_CHOICES: [(u64, i64); 3] = [
    (16 * 1024, 500),
    (256 * 1024, 3_000),
    (
        doze_core::limits::CHECKPOINT_BYTES,
        doze_core::limits::CHECKPOINT_INTERVAL_MS,
    ),
];

/// The main topic's configs: when it is compacted, every closed segment is
/// worth a pass, and markers and tombstones may go soon after; with
/// retention too, the policy is `compact,delete`; `segment_ms` rolls its
/// segments by age.
fn main_topic_configs(
    compacted: bool,
    retention: Option<Retention>,
    segment_ms: Option<i64>,
) -> Vec<(String, String)> {
    let policy = if retention.is_some() {
        "compact,delete"
    } else {
        "compact"
    };
    let compaction = [
        ("cleanup.policy", policy),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("delete.retention.ms", "1000"),
        ("min.compaction.lag.ms", "0"),
    ]
    .into_iter()
    .filter(|_| compacted)
    .map(|(k, v)| (k.to_string(), v.to_string()));
    let roll = segment_ms.map(|ms| ("segment.ms".to_string(), ms.to_string()));
    compaction
        .chain(retention.into_iter().flat_map(Retention::topic_configs))
        .chain(roll)
        .collect()
}

/// Seeds `World::own_rng` apart from the run's generator.
const OWN_RNG_SALT: u64 = 0x0c1e_a4e2_0000_0001;

/// Chance that a swarm run gives its main topic retention (beside
/// compaction when it drew that: `compact,delete`).
const SWARM_RETENTION_P: f64 = 0.2;
/// Chance that a swarm run with retention (not compacted) also has an
/// operator trimming the main topic with DeleteRecords.
const SWARM_DELETE_RECORDS_P: f64 = 0.5;
/// Chance that a swarm run has an operator deleting and re-creating a
/// scratch topic.
const SWARM_CHURN_P: f64 = 0.2;
/// Seeds the churn draw apart from the other generators, as retention's.
const CHURN_RNG_SALT: u64 = 0x0c1e_a4e2_0000_0004;
/// Chance that a swarm run has offsets expiring (`client::offset_keeper`).
const SWARM_OFFSET_EXPIRY_P: f64 = 0.2;
/// Seeds the offset expiry draw apart from the other generators.
const OFFSET_EXPIRY_RNG_SALT: u64 = 0x0c1e_a4e2_0000_0006;
/// offsets.retention.check.interval.ms when offsets expire (the broker's
/// default is ten minutes; a run lasts tens of seconds). The broker's
/// offsets.retention.minutes stays a week: the group copiers' and
/// transactions' offsets must outlive the run.
const OFFSET_EXPIRY_CHECK_INTERVAL_MS: i64 = 100;
/// Chance that a swarm run gives its main topic a segment.ms of a second
/// or so (the broker's default is 7 days): segments then roll by age, at
/// an append, whatever their size.
const SWARM_SEGMENT_MS_P: f64 = 0.25;
/// The segment.ms a run may draw.
const SEGMENT_MS_CHOICES: [i64; 3] = [200, 600, 1_500];
/// Seeds the segment.ms draw apart from the other generators.
const SEGMENT_MS_RNG_SALT: u64 = 0x0c1e_a4e2_0000_0005;
/// Seeds the retention draw apart from the other generators: a run that
/// does not draw retention goes as it did before retention came.
const RETENTION_RNG_SALT: u64 = 0x0c1e_a4e2_0000_0003;
/// log.retention.check.interval.ms in a run with retention (the broker's
/// default is five minutes; a run lasts tens of seconds).
const RETENTION_CHECK_INTERVAL_MS: i64 = 250;
/// log.segment.bytes in a run with retention: retention deletes closed
/// segments only, so they must close often.
const RETENTION_SEGMENT_BYTES: u64 = 4096;

/// The main topic's retention in a run that has it; `None` leaves a rule
/// at the broker's default (7 days, unlimited bytes).
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    pub bytes: Option<i64>,
    pub ms: Option<i64>,
}

impl Retention {
    /// By size, by time, or both: a few segments' worth, or a second or so
    /// (a workload lasts a few simulated seconds).
    fn draw(rng: &mut ChaCha8Rng) -> Self {
        let segment = RETENTION_SEGMENT_BYTES as i64;
        let bytes = [None, Some(2 * segment), Some(4 * segment)][rng.random_range(0..3)];
        let ms = [None, Some(500), Some(1_500)][rng.random_range(0..3)];
        // At least one rule: by size when the draw gave neither.
        let bytes = if bytes.is_none() && ms.is_none() {
            Some(2 * segment)
        } else {
            bytes
        };
        Self { bytes, ms }
    }

    fn topic_configs(self) -> Vec<(String, String)> {
        let bytes = self.bytes.map(|b| ("retention.bytes", b.to_string()));
        let ms = self.ms.map(|ms| ("retention.ms", ms.to_string()));
        [bytes, ms]
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    fn describe(self) -> String {
        let rule = |v: Option<i64>| v.map_or("default".to_string(), |v| v.to_string());
        format!(" retention bytes={} ms={}", rule(self.bytes), rule(self.ms))
    }
}

impl World {
    pub fn new(cfg: RunConfig) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let mut broker_config = BrokerConfig::default();
        let segments = &cfg.scenario.segment_bytes;
        broker_config.segment_bytes = segments[rng.random_range(0..segments.len())];
        broker_config.transaction_abort_check_interval_ms = TXN_CHECK_INTERVAL_MS;
        if let Some(bug) = cfg.plant {
            bug.configure(&mut broker_config);
        }
        let mut own_rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ OWN_RNG_SALT);
        let mix = if cfg.scenario.swarm {
            let mut mix = FaultMix::draw(&mut rng);
            mix.draw_own(&mut own_rng);
            mix
        } else {
            FaultMix::none()
        };
        // Compaction from the own generator too (it came later).
        let compacted = cfg.scenario.compacted
            || (cfg.scenario.swarm && own_rng.random_bool(SWARM_COMPACTED_P));
        if compacted {
            broker_config.cleaner_backoff_ms = CLEANER_BACKOFF_MS;
        }
        let (bytes, interval_ms) =
            CHECKPOINT_CHOICES[own_rng.random_range(0..CHECKPOINT_CHOICES.len())];
        broker_config.checkpoint_bytes = bytes;
        broker_config.checkpoint_interval_ms = interval_ms;
        // Retention from a generator of its own (it came later still).
        let mut retention_rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ RETENTION_RNG_SALT);
        let retention = (cfg.scenario.retention
            || (cfg.scenario.swarm && retention_rng.random_bool(SWARM_RETENTION_P)))
        .then(|| Retention::draw(&mut retention_rng));
        // DeleteRecords beside retention (the oracle's log start floors
        // serve both), on a topic that is not compacted.
        let delete_records = retention.is_some()
            && !compacted
            && (cfg.scenario.delete_records
                || (cfg.scenario.swarm && retention_rng.random_bool(SWARM_DELETE_RECORDS_P)));
        let mut churn_rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ CHURN_RNG_SALT);
        let churn_partitions = (cfg.scenario.churn
            || (cfg.scenario.swarm && churn_rng.random_bool(SWARM_CHURN_P)))
        .then(|| churn_rng.random_range(1..=2));
        let mut expiry_rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ OFFSET_EXPIRY_RNG_SALT);
        let offset_expiry = cfg.scenario.offset_expiry
            || (cfg.scenario.swarm && expiry_rng.random_bool(SWARM_OFFSET_EXPIRY_P));
        if offset_expiry {
            broker_config.offsets_retention_check_interval_ms = OFFSET_EXPIRY_CHECK_INTERVAL_MS;
        }
        let mut segment_ms_rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ SEGMENT_MS_RNG_SALT);
        let segment_ms = (cfg.scenario.swarm && segment_ms_rng.random_bool(SWARM_SEGMENT_MS_P))
            .then(|| SEGMENT_MS_CHOICES[segment_ms_rng.random_range(0..SEGMENT_MS_CHOICES.len())]);
        if retention.is_some() {
            broker_config.segment_bytes = RETENTION_SEGMENT_BYTES;
            broker_config.retention_check_interval_ms = RETENTION_CHECK_INTERVAL_MS;
        }
        let trace = Trace::new(cfg.keep_trace, cfg.echo_trace);
        let ignore_adopt = cfg.plant == Some(PlantedBug::IgnoreAdopt);
        Self {
            cfg,
            rng,
            own_rng,
            now_ms: T0_MS,
            queue: EventQueue::default(),
            trace,
            history: History {
                compacted,
                retention: retention.is_some(),
                ..History::default()
            },
            stats: Stats::default(),
            broker_config,
            broker: None,
            gen: 0,
            start_pending: false,
            tick_at_ms: None,
            disk: SimDisk::new(ignore_adopt),
            meta: SimMeta::default(),
            sync_fates: BTreeMap::new(),
            meta_fates: BTreeMap::new(),
            slots: Vec::new(),
            conns: BTreeMap::new(),
            next_conn: 1,
            last_arrival_ms: BTreeMap::new(),
            phase: Phase::Setup,
            topic_partitions: 1,
            compacted,
            retention,
            delete_records,
            churn_partitions,
            offset_expiry,
            segment_ms,
            workload_start_ms: T0_MS,
            hang_check_at_ms: T0_MS,
            faults_on: false,
            armed: BTreeSet::new(),
            mix,
            slow_sync: false,
            marker_unsynced: false,
            swap_unsynced: None,
            failed_swap: None,
            cut_after_meta: BTreeSet::new(),
            process: Process::default(),
        }
    }

    /// Runs to the end and returns the verdict.
    pub fn run(mut self) -> RunResult {
        let setup = format!(
            "scenario {} seed {} segment_bytes {}{}{}{}{}{}{} faults {}{}",
            self.cfg.scenario.name,
            self.cfg.seed,
            self.broker_config.segment_bytes,
            self.segment_ms
                .map(|ms| format!(" segment_ms {ms}"))
                .unwrap_or_default(),
            if self.compacted { " compacted" } else { "" },
            self.retention.map(Retention::describe).unwrap_or_default(),
            if self.delete_records {
                " delete-records"
            } else {
                ""
            },
            self.churn_partitions
                .map(|p| format!(" churn partitions={p}"))
                .unwrap_or_default(),
            if self.offset_expiry {
                " offset-expiry"
            } else {
                ""
            },
            self.mix.describe(),
            self.cfg
                .plant
                .map(|b| format!(" PLANTED BUG {}", b.name()))
                .unwrap_or_default()
        );
        self.note(setup.clone());
        self.start_broker();
        self.topic_partitions = self.draw_count(self.cfg.scenario.partitions) as i32;
        let topics = vec![
            (TOPIC.to_string(), self.topic_partitions),
            (OUTPUT_TOPIC.to_string(), self.topic_partitions),
            (GROUP_OUTPUT_TOPIC.to_string(), self.topic_partitions),
        ];
        let topics = topics
            .into_iter()
            .map(|(name, partitions)| {
                let configs = if name == TOPIC {
                    main_topic_configs(self.compacted, self.retention, self.segment_ms)
                } else {
                    Vec::new()
                };
                (name, partitions, configs)
            })
            .collect();
        let admin = Admin::new(topics);
        self.add_client(Box::new(admin), Role::Admin, 0);
        while let Some((at_ms, event)) = self.queue.pop() {
            assert!(at_ms >= self.now_ms, "the clock never runs backwards");
            self.now_ms = at_ms;
            self.stats.events += 1;
            if self.elapsed_ms() > RUN_MS_MAX {
                let what = format!(
                    "the run did not finish in {RUN_MS_MAX} ms: {}",
                    self.statuses()
                );
                self.history.violation(self.elapsed_ms(), what);
                break;
            }
            self.handle(event);
            self.check_hangs();
            self.advance_phase();
            if self.phase == Phase::Done {
                break;
            }
        }
        if self.phase != Phase::Done && self.history.violations.is_empty() {
            let what = format!(
                "nothing left to happen before the run ended: {}",
                self.statuses()
            );
            self.history.violation(self.elapsed_ms(), what);
        }
        self.stats.bytes_appended = self.disk.bytes_appended;
        self.stats.acked_records = self.history.acks.len() as u64;
        self.stats.offsets_expired_seen = self.history.offsets_expired_seen;
        self.stats.churn_txns_ended = self.history.churn_txns_ended;
        self.stats.churn_txns_ended_recreated = self.history.churn_txns_ended_recreated;
        self.stats.churn_batches_raced_acked = self.history.churn_batches_raced_acked;
        self.stats.churn_batches_raced_lost = self.history.churn_batches_raced_lost;
        let violations = crate::oracle::check(&self.history);
        for v in &violations {
            self.note(format!("ORACLE {v}"));
        }
        RunResult {
            scenario: self.cfg.scenario.name.clone(),
            seed: self.cfg.seed,
            trace_hash: self.trace.hash(),
            trace_count: self.trace.count(),
            trace_lines: self.trace.lines().to_vec(),
            sim_ms: self.elapsed_ms(),
            violations,
            stats: self.stats,
            setup,
        }
    }

    fn elapsed_ms(&self) -> i64 {
        self.now_ms - T0_MS
    }

    fn note(&mut self, line: String) {
        let elapsed_ms = self.elapsed_ms();
        self.trace.record(elapsed_ms, &line);
    }

    /// The main topic loses records on purpose (compaction or retention):
    /// no copier reads it, as its copy could not be checked exactly once.
    fn main_topic_thins(&self) -> bool {
        self.compacted || self.retention.is_some()
    }

    fn draw_count(&mut self, count: crate::scenario::Count) -> u64 {
        count.draw(&mut self.rng)
    }

    /// Every request on a live connection is answered in time
    /// (`REQUEST_ANSWER_MS_MAX`): a violation names the first one that
    /// is not, once.
    fn check_hangs(&mut self) {
        if self.now_ms < self.hang_check_at_ms {
            return;
        }
        self.hang_check_at_ms = self.now_ms + HANG_CHECK_EVERY_MS;
        if self.find_hang(REQUEST_ANSWER_MS_MAX) {
            // Said once: the run goes on to its end as it would.
            self.hang_check_at_ms = i64::MAX;
        }
    }

    /// A violation for the first request (JoinGroup aside, which waits for
    /// its rebalance: `JOIN_ANSWER_MS_MAX`) unanswered for more than
    /// `limit_ms` on a live connection; whether there was one.
    fn find_hang(&mut self, limit_ms: i64) -> bool {
        for client in 0..self.slots.len() {
            let Some((corr, key, sent_ms)) = self.slots[client].wire.oldest_asked() else {
                continue;
            };
            let limit_ms = if key == ApiKey::JoinGroup {
                JOIN_ANSWER_MS_MAX
            } else {
                limit_ms
            };
            if self.now_ms - sent_ms > limit_ms {
                let what = format!(
                    "c{client}: {key:?} (correlation id {corr}) sent at t={}ms is unanswered {} ms later on a live connection: {}",
                    sent_ms - T0_MS,
                    self.now_ms - sent_ms,
                    self.slots[client].client.status()
                );
                self.note(format!("VIOLATION {what}"));
                self.history.violation(self.elapsed_ms(), what);
                return true;
            }
        }
        false
    }

    fn statuses(&self) -> String {
        self.slots
            .iter()
            .map(|s| s.client.status())
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::ClientWake(client) => {
                if self.slots[client].wake_at_ms == Some(self.now_ms) {
                    self.slots[client].wake_at_ms = None;
                    self.drive(client, |c, cx| c.on_wake(cx));
                }
            }
            Event::ToBroker { conn, frame } => self.frame_to_broker(conn, frame),
            Event::ToClient { conn, frame } => self.frame_to_client(conn, frame),
            Event::Connected { client, conn } => self.connected(client, conn),
            Event::ClientDisconnected { client, conn } => self.client_disconnected(client, conn),
            Event::SyncDone { gen, io } if gen == self.gen => self.sync_done(io),
            Event::MetaDone { gen, io } if gen == self.gen => self.meta_done(io),
            Event::CleanShutdownDone { gen, io } if gen == self.gen => self.clean_shutdown_done(io),
            Event::Tick { gen } if gen == self.gen => {
                if self.tick_at_ms == Some(self.now_ms) {
                    self.tick_at_ms = None;
                    self.broker_input(doze_core::Input::Tick);
                }
            }
            Event::ReadDone { gen, io, result } if gen == self.gen => {
                self.broker_input(doze_core::Input::ReadDone { io, result })
            }
            Event::CleanerDone { gen, io, outcome } if gen == self.gen => {
                self.broker_input(doze_core::Input::CleanerDone { io, outcome })
            }
            Event::ResponseReadFailed {
                gen,
                conn,
                range,
                error,
            } if gen == self.gen => {
                self.broker_input(doze_core::Input::ResponseReadFailed { conn, range, error })
            }
            Event::KillDuringRecovery { gen, power } if gen == self.gen => {
                self.kill_during_recovery(power)
            }
            Event::OperatorRestart { gen } if gen == self.gen => {
                self.note("the operator restarts the broker after a read error".into());
                self.stats.operator_restarts += 1;
                self.clean_stop();
            }
            Event::StopTimeout { gen } if gen == self.gen => self.stop_timed_out(),
            Event::SyncDone { .. }
            | Event::MetaDone { .. }
            | Event::CleanShutdownDone { .. }
            | Event::Tick { .. }
            | Event::ReadDone { .. }
            | Event::CleanerDone { .. }
            | Event::ResponseReadFailed { .. }
            | Event::KillDuringRecovery { .. }
            | Event::OperatorRestart { .. }
            | Event::StopTimeout { .. } => {}
            Event::BrokerStart => self.start_broker(),
            Event::Fault(kind) => self.inject(kind, false),
            Event::FaultEnd(kind) => self.end_fault(kind),
            Event::SwarmFault(kind) => self.inject(kind, true),
            Event::EndDrain => self.end_drain(),
        }
    }

    fn advance_phase(&mut self) {
        match self.phase {
            Phase::Setup if self.role_done(Role::Admin) => self.start_workload(),
            Phase::Workload if self.role_done(Role::Producer) && !self.history.inputs_done => {
                // The copier's input is complete: it may finish now.
                self.history.inputs_done = true;
                self.note("every producer is done".into());
                for i in 0..self.slots.len() {
                    if self.slots[i].role == Role::Copier {
                        self.wake(i, self.now_ms);
                    }
                }
                self.advance_phase();
            }
            Phase::Workload if self.history.inputs_done && self.role_done(Role::Copier) => {
                self.note("workload done: faults off, draining".into());
                self.phase = Phase::Drain;
                self.faults_on = false;
                self.armed.clear();
                self.disk.full = false;
                self.slow_sync = false;
                self.queue.push(self.now_ms + DRAIN_MS, Event::EndDrain);
            }
            Phase::Workload if self.now_ms - self.workload_start_ms > WORKLOAD_MS_MAX => {
                let what = format!(
                    "the workload did not finish in {WORKLOAD_MS_MAX} ms: {}",
                    self.statuses()
                );
                self.history.violation(self.elapsed_ms(), what);
                self.phase = Phase::Done;
            }
            Phase::Verify if self.role_done(Role::Verifier) => self.phase = Phase::Done,
            _ => {}
        }
    }

    fn role_done(&self, role: Role) -> bool {
        self.slots
            .iter()
            .filter(|s| s.role == role)
            .all(|s| s.client.is_done())
    }

    fn start_workload(&mut self) {
        self.phase = Phase::Workload;
        self.workload_start_ms = self.now_ms;
        self.faults_on = true;
        self.note("workload starts".into());
        let s = self.cfg.scenario.clone();
        let partitions = self.topic_partitions;
        let idempotent = self.draw_count(s.idempotent_producers);
        let plain = self.draw_count(s.plain_producers);
        let consumers = self.draw_count(s.consumers);
        for i in 0..idempotent + plain {
            let records = self.draw_count(s.records);
            let idem = i < idempotent;
            let acks = if idem { -1 } else { s.plain_acks };
            let client = self.slots.len() as u32;
            let cfg = ProducerConfig {
                topic: TOPIC.into(),
                partitions,
                records,
                idempotent: idem,
                acks,
                keyed: self.compacted,
            };
            if idem {
                self.history.idempotent.insert(client);
            }
            let producer = Producer::new(client, cfg, &mut self.rng);
            let delay_ms = self.rng.random_range(0..=10);
            self.add_client(Box::new(producer), Role::Producer, delay_ms);
        }
        let rc_consumers = self.draw_count(s.rc_consumers);
        for i in 0..consumers + rc_consumers {
            let client = self.slots.len() as u32;
            let isolation = if i < consumers {
                Isolation::ReadUncommitted
            } else {
                Isolation::ReadCommitted
            };
            let consumer = Consumer::new(
                client,
                TOPIC.into(),
                partitions,
                Mode::Follow,
                isolation,
                &mut self.rng,
            );
            let delay_ms = self.rng.random_range(0..=10);
            self.add_client(Box::new(consumer), Role::Consumer, delay_ms);
        }
        if self.delete_records {
            let client = self.slots.len() as u32;
            let truncator = Truncator::new(client, TOPIC.into(), partitions);
            self.add_client(Box::new(truncator), Role::Consumer, 100);
        }
        if let Some(partitions) = self.churn_partitions {
            let client = self.slots.len() as u32;
            let churner = Churner::new(client, partitions);
            self.add_client(Box::new(churner), Role::Consumer, 50);
        }
        if self.offset_expiry {
            let client = self.slots.len() as u32;
            let keeper = OffsetKeeper::new(client, TOPIC, partitions);
            self.add_client(Box::new(keeper), Role::Consumer, 20);
        }
        self.start_transactional_clients();
        self.schedule_faults();
    }

    fn end_drain(&mut self) {
        self.note("drain over: consumers stop; final power cut, restart, read back".into());
        // The drain ran without faults: a request sent before it began
        // (a fetch waits at most its max_wait_ms, far less) is answered by
        // now, or the broker holds it for good. Unless the disk still
        // works on a sync or a meta.db write: one issued during a spell of
        // slow fsyncs takes up to 3 s, and what waits for it waits longer
        // than the drain.
        let disk_busy = !self.sync_fates.is_empty() || !self.meta_fates.is_empty();
        if self.hang_check_at_ms != i64::MAX && !disk_busy {
            self.find_hang(DRAIN_MS);
        }
        for i in 0..self.slots.len() {
            self.slots[i].client.finish();
        }
        self.drop_connections(false);
        self.phase = Phase::Verify;
        // The harshest end: only what is durable survives. Every acknowledged
        // record must be in what the verifier reads after the restart.
        self.crash(true);
        self.start_verifiers();
    }

    fn add_client(&mut self, client: Box<dyn Client>, role: Role, delay_ms: i64) {
        let index = self.slots.len();
        let wire = Wire::new(format!("sim-c{index}"));
        self.note(format!("client c{index}: {}", client.name()));
        self.slots.push(Slot {
            client,
            wire,
            role,
            conn: None,
            wake_at_ms: None,
        });
        self.wake(index, self.now_ms + delay_ms);
    }

    fn wake(&mut self, client: usize, at_ms: i64) {
        let slot = &mut self.slots[client];
        if slot.wake_at_ms.is_some_and(|t| t <= at_ms) {
            return;
        }
        slot.wake_at_ms = Some(at_ms);
        self.queue.push(at_ms, Event::ClientWake(client));
    }

    /// Runs one client callback and carries out what it asked for.
    fn drive(&mut self, client: usize, f: impl FnOnce(&mut dyn Client, &mut Cx)) {
        let elapsed_ms = self.elapsed_ms();
        let slot = &mut self.slots[client];
        slot.wire.now_ms = self.now_ms;
        let mut cx = Cx::new(
            self.now_ms,
            elapsed_ms,
            &mut self.rng,
            &mut slot.wire,
            &mut self.history,
        );
        f(slot.client.as_mut(), &mut cx);
        let (notes, wake_at_ms, want_connect, want_disconnect) = (
            std::mem::take(&mut cx.notes),
            cx.wake_at_ms,
            cx.want_connect,
            cx.want_disconnect,
        );
        for line in notes {
            self.note(format!("c{client}: {line}"));
        }
        if want_disconnect {
            // Before the outbox: a dying process sends nothing more.
            self.hang_up(client);
        }
        let outbox = std::mem::take(&mut self.slots[client].wire.outbox);
        for (conn, frame) in outbox {
            self.send_to_broker(client, conn, frame);
        }
        if let Some(at_ms) = wake_at_ms {
            self.wake(client, at_ms);
        }
        if want_connect {
            self.connect(client);
        }
    }
}
