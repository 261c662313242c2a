//! What can go wrong, and how a run decides when it does.
//!
//! A scenario names faults at times (`FaultSpec`); the swarm draws a
//! `FaultMix` from the seed instead (each seed its own rates, so a sweep
//! covers calm runs, storms, and everything between: "swarm testing").

use doze_core::BrokerConfig;
use rand::RngExt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// The broker process dies; the disk keeps its page cache.
    Crash,
    /// The machine loses power: unsynced bytes are lost or torn.
    PowerCut,
    /// Armed: a crash at a random moment while the next sync is in flight.
    CrashDuringSync,
    /// Armed: a power cut while the next sync is in flight.
    PowerCutDuringSync,
    /// Armed: a crash right after the next successful sync is reported,
    /// before the answers it released reach the clients (so idempotent
    /// producers resend batches that are already durable).
    CrashAfterSync,
    /// Armed: the next fsync fails.
    FailSync,
    /// Armed: the next meta.db write fails.
    FailMeta,
    /// Appends fail (short write, ENOSPC) for a while.
    DiskFull,
    /// Every fsync takes 0.1–3 s for a while.
    SlowSync,
    /// Every client connection drops (a network blip; the broker stays up).
    DropConnections,
    /// Armed: the power goes right after a transaction's decision
    /// (PrepareCommit / PrepareAbort) is stored, before its markers are durable.
    PowerCutAfterDecision,
    /// Armed: the power goes as the Complete record is issued, after the
    /// markers are durable and EndTxn answered, before the transaction is
    /// recorded complete (start-up carries the stored decision out again).
    PowerCutAfterMarkers,
    /// Armed: a crash while the next fsync covering a marker is in flight.
    CrashDuringMarkerSync,
    /// Armed: the next fsync covering a marker fails (EndTxn answers
    /// CONCURRENT_TRANSACTIONS; the coordinator retries on its own).
    FailMarkerSync,
    /// Armed: the next meta.db write of a decision fails (NOT_COORDINATOR).
    FailMetaEndTxn,
    /// Armed: the power goes the moment a client reads an EndTxn success.
    PowerCutAfterEndTxn,
    /// Armed: the next `DiskOp::Read` fails (EIO). Outside start-up, the
    /// partition answers KAFKA_STORAGE_ERROR until a restart, which the
    /// operator does a little later (a clean stop).
    FailRead,
    /// Armed: the next file range of a response cannot be read (EIO): the
    /// frame is not sent, the connection closes, the partition goes offline
    /// until the operator's restart.
    FailResponseRead,
    /// Armed: while the broker is next down, some `.index`, `.timeindex`
    /// and `.txnindex` files are deleted; the core rebuilds them from the
    /// batch headers.
    LoseIndexFiles,
    /// Armed: the next start is killed while it recovers (during its
    /// recovery reads, or before its boot sync completes).
    CrashDuringRecovery,
    /// Armed: the power goes while the next start recovers.
    PowerCutDuringRecovery,
    /// The broker is stopped cleanly (`Input::Shutdown` until
    /// `Output::Stopped`), then started again.
    CleanStop,
    /// Armed: the power goes right after the next clean stop.
    PowerCutAfterStop,
    /// Armed: the process dies at one of the log cleaner's disk ops
    /// (`AppendCleaned`, `Rename`, `DiscardStaged`; at start-up too, where
    /// the core finishes or discards a cleaning), just before or just after
    /// it, and the ops the core emitted after it are never carried out (a
    /// driver killed with ops still queued): a crash, or by a coin a power
    /// cut. Which op is the one is drawn op by op, renames likelier than
    /// appends, so every step of a swap gets its turn.
    KillDuringClean,
    /// Armed: the power goes just before or just after one of the renames
    /// that swap a cleaned segment in (or finish a swap at start-up), with
    /// the renames before it not yet synced.
    PowerCutDuringSwap,
    /// Armed: the sync after the next rename of a cleaned `.log` into place
    /// fails, so the swap may or may not be durable while the cleaner goes
    /// on, and so does every sync after it for a while
    /// (`FAILED_SWAP_SPELL_MS`); when the cleaner writes a `.cleaned` file
    /// under that base again meanwhile, the power goes just after it.
    /// Scripted only (the swarm meets it through its random sync failures).
    FailSwapSync,
}

impl FaultKind {
    pub const ALL: [FaultKind; 26] = [
        FaultKind::Crash,
        FaultKind::PowerCut,
        FaultKind::CrashDuringSync,
        FaultKind::PowerCutDuringSync,
        FaultKind::CrashAfterSync,
        FaultKind::FailSync,
        FaultKind::FailMeta,
        FaultKind::DiskFull,
        FaultKind::SlowSync,
        FaultKind::DropConnections,
        FaultKind::PowerCutAfterDecision,
        FaultKind::PowerCutAfterMarkers,
        FaultKind::CrashDuringMarkerSync,
        FaultKind::FailMarkerSync,
        FaultKind::FailMetaEndTxn,
        FaultKind::PowerCutAfterEndTxn,
        FaultKind::FailRead,
        FaultKind::FailResponseRead,
        FaultKind::LoseIndexFiles,
        FaultKind::CrashDuringRecovery,
        FaultKind::PowerCutDuringRecovery,
        FaultKind::CleanStop,
        FaultKind::PowerCutAfterStop,
        FaultKind::KillDuringClean,
        FaultKind::PowerCutDuringSwap,
        FaultKind::FailSwapSync,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Crash => "crash",
            FaultKind::PowerCut => "power-cut",
            FaultKind::CrashDuringSync => "crash-during-sync",
            FaultKind::PowerCutDuringSync => "power-cut-during-sync",
            FaultKind::CrashAfterSync => "crash-after-sync",
            FaultKind::FailSync => "fail-sync",
            FaultKind::FailMeta => "fail-meta",
            FaultKind::DiskFull => "disk-full",
            FaultKind::SlowSync => "slow-sync",
            FaultKind::DropConnections => "drop-connections",
            FaultKind::PowerCutAfterDecision => "power-cut-after-decision",
            FaultKind::PowerCutAfterMarkers => "power-cut-after-markers",
            FaultKind::CrashDuringMarkerSync => "crash-during-marker-sync",
            FaultKind::FailMarkerSync => "fail-marker-sync",
            FaultKind::FailMetaEndTxn => "fail-meta-end-txn",
            FaultKind::PowerCutAfterEndTxn => "power-cut-after-end-txn",
            FaultKind::FailRead => "fail-read",
            FaultKind::FailResponseRead => "fail-response-read",
            FaultKind::LoseIndexFiles => "lose-index-files",
            FaultKind::CrashDuringRecovery => "crash-during-recovery",
            FaultKind::PowerCutDuringRecovery => "power-cut-during-recovery",
            FaultKind::CleanStop => "clean-stop",
            FaultKind::PowerCutAfterStop => "power-cut-after-stop",
            FaultKind::KillDuringClean => "kill-during-clean",
            FaultKind::PowerCutDuringSwap => "power-cut-during-swap",
            FaultKind::FailSwapSync => "fail-swap-sync",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Kinds the swarm draws from a generator of their own (`FaultMix::
    /// draw_own`, `World::own_rng`), not the run's: added after the sweep's
    /// seeds were in use, they leave every other draw of a seed as it was
    /// (the planted-bug tests name the first seed that fails), and change a
    /// run only when they strike.
    pub fn own_draws(self) -> bool {
        matches!(
            self,
            FaultKind::KillDuringClean | FaultKind::PowerCutDuringSwap
        )
    }

    /// Kinds only a scenario names: the swarm never draws them, so adding
    /// one leaves every seed's run as it was.
    pub fn scripted_only(self) -> bool {
        matches!(self, FaultKind::FailSwapSync)
    }

    /// Faults that last a while (`for` applies).
    pub fn has_duration(self) -> bool {
        matches!(self, FaultKind::DiskFull | FaultKind::SlowSync)
    }
}

/// An inclusive range of ms, drawn from by the seed (`100..400`), or one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsRange {
    pub min_ms: i64,
    pub max_ms: i64,
}

impl MsRange {
    pub fn parse(text: &str) -> Result<Self, String> {
        let num = |s: &str| {
            s.trim()
                .trim_end_matches("ms")
                .parse::<i64>()
                .map_err(|_| format!("bad time {s:?}"))
        };
        let (min_ms, max_ms) = match text.split_once("..") {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(text)?, num(text)?),
        };
        if min_ms < 0 || min_ms > max_ms {
            return Err(format!("bad time range {text:?}"));
        }
        Ok(Self { min_ms, max_ms })
    }

    pub fn draw(self, rng: &mut impl rand::Rng) -> i64 {
        rng.random_range(self.min_ms..=self.max_ms)
    }
}

/// One fault of a scenario: `<kind> at <ms> [for <ms>]`, times from the
/// start of the workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSpec {
    pub kind: FaultKind,
    pub at: MsRange,
    pub lasting: MsRange,
}

impl FaultSpec {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut words = text.split_whitespace();
        let kind_name = words.next().ok_or("empty fault")?;
        let kind =
            FaultKind::parse(kind_name).ok_or_else(|| format!("unknown fault {kind_name:?}"))?;
        let mut spec = Self {
            kind,
            at: MsRange {
                min_ms: 0,
                max_ms: 0,
            },
            lasting: MsRange {
                min_ms: 1000,
                max_ms: 1000,
            },
        };
        while let Some(word) = words.next() {
            let value = words
                .next()
                .ok_or_else(|| format!("{word:?} needs a time in {text:?}"))?;
            match word {
                "at" => spec.at = MsRange::parse(value)?,
                "for" if kind.has_duration() => spec.lasting = MsRange::parse(value)?,
                _ => return Err(format!("unexpected {word:?} in fault {text:?}")),
            }
        }
        Ok(spec)
    }
}

/// Random fault rates for the swarm, drawn per seed.
#[derive(Clone, Debug)]
pub struct FaultMix {
    /// Mean ms between injections, per fault kind that this seed uses.
    pub mean_interval_ms: Vec<(FaultKind, i64)>,
    /// Chance that any one fsync fails / is slow, and any meta write fails.
    pub sync_fail_p: f64,
    pub sync_slow_p: f64,
    pub meta_fail_p: f64,
    /// Chance that any one read (a `DiskOp::Read`, or a file range of a
    /// response) fails with EIO. Each failure outside start-up takes a
    /// partition offline until the operator restarts the broker, so the
    /// rates are lower than the others'.
    pub read_fail_p: f64,
    /// Random faults stop this long after the workload starts, so that the
    /// run can show it recovers and finishes (liveness) however hard the storm.
    pub heal_after_ms: i64,
}

impl FaultMix {
    pub fn none() -> Self {
        Self {
            mean_interval_ms: Vec::new(),
            sync_fail_p: 0.0,
            sync_slow_p: 0.0,
            meta_fail_p: 0.0,
            read_fail_p: 0.0,
            heal_after_ms: i64::MAX,
        }
    }

    /// Each kind is on for about half the seeds, at a rate of its own
    /// (but the kinds with `own_draws`: `draw_own`).
    pub fn draw(rng: &mut impl rand::Rng) -> Self {
        let mut mean_interval_ms = Vec::new();
        for kind in FaultKind::ALL
            .into_iter()
            .filter(|k| !k.own_draws() && !k.scripted_only())
        {
            if rng.random_bool(0.5) {
                mean_interval_ms.push((kind, rng.random_range(300..=8000)));
            }
        }
        // Most seeds get no per-operation failures at all, some a storm.
        const CHANCES: [f64; 5] = [0.0, 0.0, 0.01, 0.05, 0.2];
        let sync_fail_p = CHANCES[rng.random_range(0..CHANCES.len())];
        let sync_slow_p = CHANCES[rng.random_range(0..CHANCES.len())];
        let meta_fail_p = CHANCES[rng.random_range(0..CHANCES.len())];
        const READ_CHANCES: [f64; 5] = [0.0, 0.0, 0.0, 0.005, 0.03];
        let read_fail_p = READ_CHANCES[rng.random_range(0..READ_CHANCES.len())];
        let heal_after_ms = rng.random_range(2_000..=60_000);
        Self {
            mean_interval_ms,
            sync_fail_p,
            sync_slow_p,
            meta_fail_p,
            read_fail_p,
            heal_after_ms,
        }
    }

    /// The kinds with `own_draws`, from their own generator, as `draw`
    /// does the others.
    pub fn draw_own(&mut self, rng: &mut impl rand::Rng) {
        for kind in FaultKind::ALL
            .into_iter()
            .filter(|k| k.own_draws() && !k.scripted_only())
        {
            if rng.random_bool(0.5) {
                self.mean_interval_ms
                    .push((kind, rng.random_range(300..=8000)));
            }
        }
    }

    pub fn describe(&self) -> String {
        let kinds: Vec<String> = self
            .mean_interval_ms
            .iter()
            .map(|(k, ms)| format!("{}~{}ms", k.name(), ms))
            .collect();
        format!(
            "[{}] sync_fail_p={} sync_slow_p={} meta_fail_p={} read_fail_p={} heal_after={}",
            kinds.join(" "),
            self.sync_fail_p,
            self.sync_slow_p,
            self.meta_fail_p,
            self.read_fail_p,
            if self.heal_after_ms == i64::MAX {
                "never".to_string()
            } else {
                format!("{}ms", self.heal_after_ms)
            }
        )
    }
}

/// A bug planted on purpose, to show that the sweep catches what it should.
/// Never on unless asked for (`--plant-bug`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// Harness side: the disk answers some fsyncs (one in four) Ok at once
    /// without making anything durable, as a drive with a lying write cache
    /// does. The core then acknowledges acks=all records that a power cut
    /// takes away.
    AckBeforeSync,
    /// Core side (`doze_core::PlantedBug`): EndTxn answered before its
    /// markers are durable; a power cut then takes an answered commit back.
    EndTxnBeforeMarkersDurable,
    /// Core side: read_committed served up to the high watermark, not the
    /// LSO; read_committed readers see records of open transactions.
    ServeAboveLso,
    /// Harness side: the disk ignores `DiskOp::Adopt`, as a driver that
    /// never fsyncs what it found at start-up. Bytes a crashed process left
    /// in the page cache are served (and resends answered from them) though
    /// a power cut can still take them.
    IgnoreAdopt,
    /// Core side: recovery checkpoints written after any sync, though most
    /// syncs leave index appends unsynced (`SyncScope::Logs`). A power cut
    /// then takes index entries a checkpoint vouched for, and the next start
    /// trusts what is left: aborted transactions dropped from the
    /// `.txnindex` are served to read_committed readers.
    CheckpointBeforeIndexesDurable,
    /// Core side: a Produce waiting for its sync whose partition is deleted
    /// meanwhile is never answered, and neither is what follows it on its
    /// connection (responses leave in order): the churner's transactional
    /// batch raced by its topic's DeleteTopics hangs until a fault drops
    /// the connection, or for good.
    HoldProduceOfDeletedPartition,
}

impl PlantedBug {
    pub const ALL: [PlantedBug; 6] = [
        PlantedBug::AckBeforeSync,
        PlantedBug::EndTxnBeforeMarkersDurable,
        PlantedBug::ServeAboveLso,
        PlantedBug::IgnoreAdopt,
        PlantedBug::CheckpointBeforeIndexesDurable,
        PlantedBug::HoldProduceOfDeletedPartition,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PlantedBug::AckBeforeSync => "ack-before-sync",
            PlantedBug::EndTxnBeforeMarkersDurable => "end-txn-before-markers-durable",
            PlantedBug::ServeAboveLso => "serve-above-lso",
            PlantedBug::IgnoreAdopt => "ignore-adopt",
            PlantedBug::CheckpointBeforeIndexesDurable => "checkpoint-before-indexes-durable",
            PlantedBug::HoldProduceOfDeletedPartition => "hold-produce-of-deleted-partition",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Switches a core-side bug on in the broker's config (the test-only
    /// `BrokerConfig::planted_bug`); harness-side bugs change nothing there.
    pub fn configure(self, config: &mut BrokerConfig) {
        config.planted_bug = match self {
            PlantedBug::AckBeforeSync | PlantedBug::IgnoreAdopt => None,
            PlantedBug::EndTxnBeforeMarkersDurable => {
                Some(doze_core::PlantedBug::EndTxnBeforeMarkersDurable)
            }
            PlantedBug::ServeAboveLso => Some(doze_core::PlantedBug::ServeAboveLso),
            PlantedBug::CheckpointBeforeIndexesDurable => {
                Some(doze_core::PlantedBug::CheckpointBeforeIndexesDurable)
            }
            PlantedBug::HoldProduceOfDeletedPartition => {
                Some(doze_core::PlantedBug::HoldProduceOfDeletedPartition)
            }
        };
    }

    /// Chance that one fsync lies under this bug.
    pub fn lying_fsync_p(self) -> f64 {
        match self {
            PlantedBug::AckBeforeSync => 0.25,
            PlantedBug::EndTxnBeforeMarkersDurable
            | PlantedBug::ServeAboveLso
            | PlantedBug::IgnoreAdopt
            | PlantedBug::CheckpointBeforeIndexesDurable
            | PlantedBug::HoldProduceOfDeletedPartition => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_faults() {
        let f = FaultSpec::parse("disk-full at 100..200 for 500").unwrap();
        assert_eq!(f.kind, FaultKind::DiskFull);
        assert_eq!(
            f.at,
            MsRange {
                min_ms: 100,
                max_ms: 200
            }
        );
        assert_eq!(
            f.lasting,
            MsRange {
                min_ms: 500,
                max_ms: 500
            }
        );
        assert!(
            FaultSpec::parse("crash for 10").is_err(),
            "a crash has no duration"
        );
        assert!(FaultSpec::parse("meteor at 1").is_err());
    }
}
