//! Fault injection: the scenario's scripted faults at their times, and the
//! swarm's random ones (each kind at its own mean interval, exponentially
//! distributed, rescheduled after each occurrence). Faults fire only during
//! the workload; the drain and the verification run clean.

use rand::RngExt;

use super::{Event, World};
use crate::faults::FaultKind;

/// How long a random disk-full or slow-sync spell lasts.
const SPELL_MS: std::ops::RangeInclusive<i64> = 100..=2000;
/// How long every sync fails after `FailSwapSync` strikes (unless the power
/// goes first): more than log.cleaner.backoff.ms (`CLEANER_BACKOFF_MS`),
/// so that the cleaner, its passes abandoned, comes back to the base.
pub(super) const FAILED_SWAP_SPELL_MS: i64 = 2_000;

impl World {
    pub(super) fn schedule_faults(&mut self) {
        let specs = self.cfg.scenario.faults.clone();
        for spec in specs {
            let at_ms = self.now_ms + spec.at.draw(&mut self.rng);
            self.queue.push(at_ms, Event::Fault(spec.kind));
            if spec.kind.has_duration() {
                let end_ms = at_ms + spec.lasting.draw(&mut self.rng);
                self.queue.push(end_ms, Event::FaultEnd(spec.kind));
            }
        }
        let kinds: Vec<(FaultKind, i64)> = self.mix.mean_interval_ms.clone();
        for (kind, mean_ms) in kinds {
            let at_ms = self.now_ms + self.exponential_ms(kind, mean_ms);
            self.queue.push(at_ms, Event::SwarmFault(kind));
        }
    }

    /// When a swarm fault of `kind` next strikes, from the generator its
    /// kind draws from.
    fn exponential_ms(&mut self, kind: FaultKind, mean_ms: i64) -> i64 {
        let rng = if kind.own_draws() {
            &mut self.own_rng
        } else {
            &mut self.rng
        };
        let u: f64 = rng.random_range(f64::EPSILON..1.0);
        ((-u.ln()) * mean_ms as f64).round() as i64 + 1
    }

    /// Whether random faults still fire: during the workload, until the
    /// seed's storm heals.
    pub(super) fn swarm_active(&self) -> bool {
        self.faults_on && self.now_ms - self.workload_start_ms < self.mix.heal_after_ms
    }

    pub(super) fn inject(&mut self, kind: FaultKind, swarm: bool) {
        if !self.faults_on || (swarm && !self.swarm_active()) {
            return;
        }
        if swarm {
            let mean_ms = self
                .mix
                .mean_interval_ms
                .iter()
                .find(|(k, _)| *k == kind)
                .map(|&(_, m)| m);
            let mean_ms = mean_ms.expect("a swarm fault has a rate");
            let next_ms = self.now_ms + self.exponential_ms(kind, mean_ms);
            self.queue.push(next_ms, Event::SwarmFault(kind));
        }
        self.note(format!("fault: {}", kind.name()));
        match kind {
            FaultKind::Crash => self.crash(false),
            FaultKind::PowerCut => self.crash(true),
            FaultKind::CrashDuringSync
            | FaultKind::PowerCutDuringSync
            | FaultKind::CrashAfterSync
            | FaultKind::FailSync
            | FaultKind::FailMeta
            | FaultKind::PowerCutAfterDecision
            | FaultKind::PowerCutAfterMarkers
            | FaultKind::CrashDuringMarkerSync
            | FaultKind::FailMarkerSync
            | FaultKind::FailMetaEndTxn
            | FaultKind::PowerCutAfterEndTxn
            | FaultKind::FailRead
            | FaultKind::FailResponseRead
            | FaultKind::LoseIndexFiles
            | FaultKind::CrashDuringRecovery
            | FaultKind::PowerCutDuringRecovery
            | FaultKind::PowerCutAfterStop
            | FaultKind::KillDuringClean
            | FaultKind::PowerCutDuringSwap
            | FaultKind::FailSwapSync => {
                self.armed.insert(kind);
            }
            FaultKind::CleanStop => self.clean_stop(),
            FaultKind::DiskFull => {
                self.disk.full = true;
                if swarm {
                    let end_ms = self.now_ms + self.rng.random_range(SPELL_MS);
                    self.queue.push(end_ms, Event::FaultEnd(kind));
                }
            }
            FaultKind::SlowSync => {
                self.slow_sync = true;
                if swarm {
                    let end_ms = self.now_ms + self.rng.random_range(SPELL_MS);
                    self.queue.push(end_ms, Event::FaultEnd(kind));
                }
            }
            FaultKind::DropConnections => self.drop_connections(true),
        }
    }

    pub(super) fn end_fault(&mut self, kind: FaultKind) {
        if kind == FaultKind::FailSwapSync && self.failed_swap.is_none() {
            return; // its story ended in a power cut (or a crash) before
        }
        self.note(format!("fault over: {}", kind.name()));
        match kind {
            FaultKind::DiskFull => self.disk.full = false,
            FaultKind::SlowSync => self.slow_sync = false,
            FaultKind::FailSwapSync => self.failed_swap = None,
            _ => unreachable!("only lasting faults end"),
        }
    }
}
