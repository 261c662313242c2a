//! The broker host: starts the core on what the disk holds, feeds it inputs,
//! carries out its outputs (responses onto the network, disk ops onto the
//! SimDisk, meta.db writes), completes I/O after a simulated latency, keeps
//! its timer, and kills it (crash or power cut).

use doze_core::{Broker, DiskOp, Input, IoId, Output};
use rand::RngExt;

use super::{Event, SyncFate, World};
use crate::faults::FaultKind;

const SYNC_LATENCY_MS: std::ops::RangeInclusive<i64> = 1..=10;
const SLOW_SYNC_LATENCY_MS: std::ops::RangeInclusive<i64> = 100..=3000;
const META_LATENCY_MS: std::ops::RangeInclusive<i64> = 1..=10;
const RESTART_DELAY_MS: std::ops::RangeInclusive<i64> = 20..=500;

impl World {
    pub(super) fn start_broker(&mut self) {
        assert!(self.broker.is_none(), "one broker process at a time");
        self.start_pending = false;
        if self.cfg.boot_fsync {
            let synced_bytes = self.disk.sync_everything();
            self.note(format!(
                "driver fsyncs every segment before boot ({synced_bytes}B were unsynced)"
            ));
        }
        let state = self.disk.boot_state(self.meta.entries());
        let bytes: usize = state
            .partitions
            .iter()
            .flat_map(|p| &p.segments)
            .map(|s| s.bytes.len())
            .sum();
        self.note(format!(
            "broker starts (gen {}): {} meta keys, {} partitions, {bytes}B of segments",
            self.gen,
            state.meta.len(),
            state.partitions.len()
        ));
        self.broker = Some(Broker::new(self.broker_config.clone()));
        self.broker_input(Input::Boot(state));
    }

    /// Hands one input to the core and carries out everything it asks for.
    pub(super) fn broker_input(&mut self, input: Input) {
        let summary = describe_input(&input);
        self.note(format!("broker <- {summary}"));
        let broker = self.broker.as_mut().expect("inputs go to a live broker");
        broker.handle(self.now_ms, input);
        while let Some(output) = self.broker.as_mut().and_then(|b| b.poll_output()) {
            self.carry_out(output);
        }
        self.arm_tick();
    }

    fn carry_out(&mut self, output: Output) {
        match output {
            Output::Response { conn, frame } => self.send_to_client(conn, frame),
            Output::Close { conn } => self.broker_closed(conn),
            Output::Disk(op) => {
                let sync_io = match &op {
                    DiskOp::Sync { io } => Some(*io),
                    _ => None,
                };
                if let DiskOp::Append { bytes, .. } = &op {
                    self.marker_unsynced |= holds_control_batch(bytes);
                }
                let summary = self.disk.apply(op, &mut self.rng);
                self.note(format!("disk {summary}"));
                if let Some(io) = sync_io {
                    self.schedule_sync(io);
                }
            }
            Output::Meta { io, ops } => {
                let decision = txn_state_written(&ops, b"\"state\":\"Prepare");
                let complete = txn_state_written(&ops, b"\"state\":\"Complete");
                let fail = self.armed.remove(&FaultKind::FailMeta)
                    || (decision && self.armed.remove(&FaultKind::FailMetaEndTxn))
                    || self.chance(self.mix.meta_fail_p);
                if !fail && decision && self.armed.remove(&FaultKind::PowerCutAfterDecision) {
                    self.cut_after_meta.insert(io);
                }
                if complete && self.armed.remove(&FaultKind::PowerCutAfterMarkers) {
                    // Markers are durable; the Complete record is not yet.
                    self.queue
                        .push(self.now_ms, Event::Fault(FaultKind::PowerCut));
                }
                self.note(format!(
                    "meta#{io} write of {} ops issued{}",
                    ops.len(),
                    if fail { " (will fail)" } else { "" }
                ));
                self.meta.begin(io, ops);
                self.meta_fates.insert(io, fail);
                let at_ms = self.now_ms + self.rng.random_range(META_LATENCY_MS);
                self.queue
                    .push(at_ms, Event::MetaDone { gen: self.gen, io });
            }
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.swarm_active() && self.rng.random_bool(p)
    }

    /// Decides how a sync will end, and when.
    fn schedule_sync(&mut self, io: IoId) {
        self.stats.syncs += 1;
        let marker = std::mem::take(&mut self.marker_unsynced);
        let fail = self.armed.remove(&FaultKind::FailSync)
            || (marker && self.armed.remove(&FaultKind::FailMarkerSync))
            || self.chance(self.mix.sync_fail_p);
        let lie = !fail
            && self
                .cfg
                .plant
                .is_some_and(|b| self.rng.random_bool(b.lying_fsync_p()));
        let slow = self.slow_sync || self.chance(self.mix.sync_slow_p);
        let latency_ms = match (lie, slow) {
            (true, _) => 0,
            (false, true) => self.rng.random_range(SLOW_SYNC_LATENCY_MS),
            (false, false) => self.rng.random_range(SYNC_LATENCY_MS),
        };
        self.sync_fates.insert(io, SyncFate { fail, lie });
        self.queue.push(
            self.now_ms + latency_ms,
            Event::SyncDone { gen: self.gen, io },
        );
        // A fault armed for "during a sync" lands strictly before it completes.
        for (armed, kind, needs_marker) in [
            (FaultKind::CrashDuringSync, FaultKind::Crash, false),
            (FaultKind::PowerCutDuringSync, FaultKind::PowerCut, false),
            (FaultKind::CrashDuringMarkerSync, FaultKind::Crash, true),
        ] {
            if latency_ms > 0 && (marker || !needs_marker) && self.armed.remove(&armed) {
                let at_ms = self.now_ms + self.rng.random_range(0..latency_ms);
                self.queue.push(at_ms, Event::Fault(kind));
            }
        }
    }

    pub(super) fn sync_done(&mut self, io: IoId) {
        let fate = self
            .sync_fates
            .remove(&io)
            .expect("a sync completion has a fate");
        let result = self.disk.complete_sync(io, fate.fail, fate.lie);
        if result.is_err() {
            self.stats.failed_syncs += 1;
        }
        if fate.lie {
            self.stats.lying_syncs += 1;
        }
        let ok = result.is_ok();
        self.broker_input(Input::SyncDone { io, result });
        if ok && self.armed.remove(&FaultKind::CrashAfterSync) {
            // The answers this sync released are on the wire (>= 1 ms away).
            self.note("fault: crash right after a successful sync".into());
            self.crash(false);
        }
    }

    pub(super) fn meta_done(&mut self, io: IoId) {
        let fail = self
            .meta_fates
            .remove(&io)
            .expect("a meta completion has a fate");
        let result = self.meta.complete(io, fail);
        self.broker_input(Input::MetaDone { io, result });
        if self.cut_after_meta.remove(&io) {
            // The decision is stored; its markers are at best in the page cache.
            self.note("fault: power cut right after a decision was stored".into());
            self.crash(true);
        }
    }

    /// Keeps one Tick queued for the core's next deadline.
    fn arm_tick(&mut self) {
        let Some(deadline_ms) = self.broker.as_ref().and_then(|b| b.poll_timeout()) else {
            return;
        };
        // A deadline already due is handled by the next input anyway; never
        // queue a tick for now, or a core that keeps asking would spin.
        let at_ms = deadline_ms.max(self.now_ms + 1);
        if self.tick_at_ms == Some(at_ms) {
            return;
        }
        self.tick_at_ms = Some(at_ms);
        self.queue.push(at_ms, Event::Tick { gen: self.gen });
    }

    /// The broker process dies; with `power`, the machine too. It comes back
    /// after a restart delay.
    pub(super) fn crash(&mut self, power: bool) {
        if power {
            self.stats.power_cuts += 1;
            let lost_bytes = self.disk.power_cut(&mut self.rng);
            self.note(format!("POWER CUT: {lost_bytes}B of unsynced data lost"));
        }
        if self.broker.is_none() {
            return; // already down; a restart is on its way
        }
        self.stats.crashes += 1;
        self.note(if power {
            "broker down (power)".into()
        } else {
            "CRASH: broker process dies".into()
        });
        self.broker = None;
        self.gen += 1;
        self.tick_at_ms = None;
        self.disk.crash();
        self.meta.crash(&mut self.rng);
        self.sync_fates.clear();
        self.meta_fates.clear();
        self.cut_after_meta.clear();
        self.marker_unsynced = false;
        self.drop_connections(false);
        assert!(!self.start_pending, "a live broker has no restart pending");
        self.start_pending = true;
        let at_ms = self.now_ms + self.rng.random_range(RESTART_DELAY_MS);
        self.queue.push(at_ms, Event::BrokerStart);
    }
}

/// Whether an append holds a control batch (a transaction marker): byte 22
/// of a v2 batch is the low byte of its attributes, bit 5 the control flag.
fn holds_control_batch(bytes: &[u8]) -> bool {
    let mut at = 0usize;
    while at + 23 <= bytes.len() {
        if bytes[at + 22] & 0x20 != 0 {
            return true;
        }
        let len =
            i32::from_be_bytes([bytes[at + 8], bytes[at + 9], bytes[at + 10], bytes[at + 11]]);
        at += 12 + len.max(0) as usize;
    }
    false
}

/// Whether a meta.db write stores a transactional id's record in a state
/// (meta.db holds JSON: `"state":"PrepareCommit"`).
fn txn_state_written(ops: &[doze_core::MetaOp], state: &[u8]) -> bool {
    ops.iter().any(|op| match op {
        doze_core::MetaOp::Put { key, value } => {
            key.starts_with(b"txn/") && value.windows(state.len()).any(|w| w == state)
        }
        doze_core::MetaOp::Delete { .. } => false,
    })
}

fn describe_input(input: &Input) -> String {
    match input {
        Input::Boot(_) => "Boot".into(),
        Input::Frame { conn, frame } => format!("frame #{conn} {}B", frame.len()),
        Input::Disconnected { conn } => format!("disconnected #{conn}"),
        Input::SyncDone { io, result } => format!("SyncDone#{io} {result:?}"),
        Input::MetaDone { io, result } => format!("MetaDone#{io} {result:?}"),
        Input::Tick => "Tick".into(),
    }
}
