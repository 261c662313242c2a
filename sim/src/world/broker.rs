//! The broker host: starts the core on what the disk holds, feeds it inputs,
//! carries out its outputs (responses onto the network, with the file ranges
//! of Fetch responses read from the SimDisk; disk ops onto the SimDisk;
//! meta.db writes), completes I/O after a simulated latency, keeps its timer,
//! and takes it down: a crash, a power cut, or a clean stop.

use std::collections::BTreeMap;

use bytes::BytesMut;
use doze_core::log::clean::work::{CleanerError, CleanerOutcome, CleanerTask, CleanerWork};
use doze_core::log::recovery::LogCheckpoint;
use doze_core::meta_entry::MetaEntry;
use doze_core::{
    Broker, ConnId, DiskOp, FileRange, FileStage, FramePart, Input, IoError, IoId, Output,
    PartitionDir, SegmentFile,
};
use rand::RngExt;

use super::faults::FAILED_SWAP_SPELL_MS;
use super::{Event, Process, SyncFate, World};
use crate::faults::FaultKind;

const SYNC_LATENCY_MS: std::ops::RangeInclusive<i64> = 1..=10;
const SLOW_SYNC_LATENCY_MS: std::ops::RangeInclusive<i64> = 100..=3000;
const META_LATENCY_MS: std::ops::RangeInclusive<i64> = 1..=10;
/// At least 1 ms, so that a kill aimed at "while this read is in flight"
/// lands before it completes.
const READ_LATENCY_MS: std::ops::RangeInclusive<i64> = 1..=3;
const RESTART_DELAY_MS: std::ops::RangeInclusive<i64> = 20..=500;
/// How long the operator takes to restart the broker after a read error.
const OPERATOR_DELAY_MS: std::ops::RangeInclusive<i64> = 500..=3000;
/// A clean stop waits for syncs (slow ones take up to 3 s each, failed ones
/// are retried) and checkpoint writes; by then it is stuck.
const STOP_TIMEOUT_MS: i64 = 60_000;
/// Chance that a recovery read is the one an armed kill aims at (the boot
/// sync always is, when no read was).
const RECOVERY_KILL_AT_READ_P: f64 = 0.3;
/// Chance that one index file is lost in a lose-index-files fault.
const INDEX_LOSS_P: f64 = 0.4;
/// Files named in a violation, at most.
const NAMED_MAX: usize = 5;
/// Chance that an armed kill-during-clean strikes at one cleaner op, by
/// kind: a cleaning writes many `.cleaned` chunks, then renames each file
/// twice, so renames are likelier for every step of a swap to get its turn.
const CLEANER_KILL_AT_APPEND_P: f64 = 1.0 / 12.0;
const CLEANER_KILL_AT_RENAME_P: f64 = 1.0 / 3.0;
const CLEANER_KILL_AT_DISCARD_P: f64 = 1.0 / 2.0;

impl World {
    pub(super) fn start_broker(&mut self) {
        assert!(self.broker.is_none(), "one broker process at a time");
        self.start_pending = false;
        let mut clean_boot = std::mem::take(&mut self.process.clean_down);
        if self.faults_on && self.armed.remove(&FaultKind::LoseIndexFiles) {
            let lost = self.disk.lose_index_files(INDEX_LOSS_P, &mut self.rng);
            self.stats.index_files_lost += lost.len() as u64;
            self.note(format!(
                "fault: {} index files lost while the broker was down: {}",
                lost.len(),
                lost.join(" ")
            ));
            // The core must read what the lost indexes described.
            clean_boot &= lost.is_empty();
        }
        self.disk.open_data_dir();
        let state = self.disk.boot_state(self.meta.entries());
        let segments: usize = state.partitions.iter().map(|p| p.segments.len()).sum();
        let log_bytes: u64 = state
            .partitions
            .iter()
            .flat_map(|p| &p.segments)
            .filter_map(|s| s.log_bytes)
            .sum();
        let index_files = state
            .partitions
            .iter()
            .flat_map(|p| &p.segments)
            .flat_map(|s| [&s.offset_index, &s.time_index, &s.txn_index])
            .filter(|f| f.is_some())
            .count();
        self.note(format!(
            "broker starts (gen {}{}): {} meta keys, {} partitions, {segments} segments, {log_bytes}B of .log, {index_files} index files",
            self.gen,
            if clean_boot { ", after a clean stop" } else { "" },
            state.meta.len(),
            state.partitions.len()
        ));
        if state.clean_shutdown {
            self.check_clean_shutdown_claim();
        }
        self.stats.boots += 1;
        self.process = Process {
            booting: true,
            clean_boot,
            boot_checkpoints: recovery_points(&state.meta),
            ..Process::default()
        };
        self.broker = Some(Broker::new(self.broker_config.clone()));
        self.broker_input(Input::Boot(state));
    }

    /// Hands one input to the core and carries out everything it asks for.
    pub(super) fn broker_input(&mut self, input: Input) {
        let summary = describe_input(&input);
        self.note(format!("broker <- {summary}"));
        let broker = self.broker.as_mut().expect("inputs go to a live broker");
        broker.handle(self.now_ms, input);
        // The core has no timer while it recovers (`poll_timeout` is None
        // until it serves): what it reads meanwhile is its recovery. Frames
        // it parked run only once it serves, so no request read is issued
        // by an input after which it still recovers.
        let was_booting = self.process.booting;
        self.process.booting = broker.poll_timeout().is_none();
        if was_booting && !self.process.booting {
            self.booted();
        }
        while let Some(output) = self.broker.as_mut().and_then(|b| b.poll_output()) {
            self.carry_out(output);
        }
        if std::mem::take(&mut self.process.stopped) {
            self.stopped();
            return;
        }
        self.arm_tick();
    }

    /// The core serves: what its recovery read, for the trace and figures.
    fn booted(&mut self) {
        let bytes = self.process.boot_log_bytes;
        self.note(format!(
            "broker serves; its recovery read {bytes}B of .log{}",
            if self.process.clean_boot {
                " (a start after a clean stop)"
            } else {
                ""
            }
        ));
        self.stats.boot_log_bytes_read += bytes;
        if self.process.clean_boot {
            self.stats.clean_boots += 1;
            self.stats.clean_boot_log_bytes_read += bytes;
        }
    }

    fn carry_out(&mut self, output: Output) {
        match output {
            Output::Response { conn, frame } => self.send_to_client(conn, frame),
            Output::ResponseParts { conn, parts } => self.send_parts(conn, parts),
            Output::Close { conn } => self.broker_closed(conn),
            Output::Disk(DiskOp::Read { io, range }) => self.disk_read(io, range),
            Output::Disk(
                op @ (DiskOp::WriteCleanShutdown { .. } | DiskOp::RemoveCleanShutdown { .. }),
            ) => self.clean_shutdown_op(op),
            Output::Disk(op) => {
                // Decided before the op: a kill just before it leaves it
                // (and all after it) undone.
                let kill = self.cleaner_kill(&op);
                if let Some((true, power)) = kill {
                    let what = format!("just before {}", describe_cleaner_op(&op));
                    return self.kill_at_cleaner_op(what, power);
                }
                let sync_io = match &op {
                    DiskOp::Sync { io, .. } => Some(*io),
                    _ => None,
                };
                if let DiskOp::Rename {
                    dir,
                    segment_base,
                    file: SegmentFile::Log,
                    to: FileStage::Live,
                    ..
                } = &op
                {
                    self.stats.cleaned_segments += 1;
                    self.swap_unsynced = Some((dir.clone(), *segment_base));
                }
                let cut_after = match &op {
                    DiskOp::AppendCleaned {
                        dir, segment_base, ..
                    } => self.swap_failed_at(dir, *segment_base),
                    _ => false,
                };
                if let DiskOp::AppendBatch { batch, .. } = &op {
                    self.marker_unsynced |= holds_control_batch(batch);
                }
                let summary = self.disk.apply(op, &mut self.rng);
                self.note(format!("disk {summary}"));
                if let Some(io) = sync_io {
                    self.schedule_sync(io);
                }
                self.after_cleaner_op(kill, cut_after, summary);
            }
            // Carried out in order with the disk ops, as net's driver does;
            // a cleaning job (not a mapping one) is where the copy's appends
            // are, so it is a kill point as `AppendCleaned` is.
            Output::Clean { io, work } => {
                let cleaning = matches!(work.task, CleanerTask::Clean { .. });
                let kill = if cleaning {
                    self.cleaner_kill_with(CLEANER_KILL_AT_APPEND_P)
                } else {
                    None
                };
                if let Some((true, power)) = kill {
                    let what = format!("just before {}", describe_cleaner_job(io, &work));
                    return self.kill_at_cleaner_op(what, power);
                }
                let cut_after = cleaning && self.swap_failed_at(&work.dir, work.segment_base);
                let summary = self.disk_clean(io, work);
                self.note(format!("disk {summary}"));
                self.after_cleaner_op(kill, cut_after, summary);
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
                let latency_ms = self.rng.random_range(META_LATENCY_MS);
                let at_ms = self.meta.completion_ms(self.now_ms + latency_ms);
                self.queue
                    .push(at_ms, Event::MetaDone { gen: self.gen, io });
            }
            Output::Stopped => {
                assert!(
                    self.process.stopping,
                    "Output::Stopped without Input::Shutdown"
                );
                self.process.stopped = true;
            }
            // As net's driver keeps it, for `frame_to_broker`.
            Output::TopicCompression { topic, prep } => {
                let codecs = &mut self.process.topic_codecs;
                match prep.compression {
                    doze_core::topic_config::StoredCompression::Producer => codecs.remove(&topic),
                    _ => codecs.insert(topic, prep),
                };
            }
            // The simulated driver reads every frame the same way.
            Output::Authenticated { .. } => {}
            // Counted by a driver that pauses reading at
            // CONN_REQUESTS_IN_FLIGHT_MAX; this one does not pause: its
            // clients keep a handful of requests in flight (a producer at
            // most 5) and send no acks=0 Produce, so the core's close at
            // the bound is never met.
            Output::NoResponse { .. } => {}
        }
    }

    /// Whether an armed kill-during-clean or power-cut-during-swap strikes
    /// at `op`: `(before, power)`.
    fn cleaner_kill(&mut self, op: &DiskOp) -> Option<(bool, bool)> {
        let swap = FaultKind::PowerCutDuringSwap;
        if matches!(op, DiskOp::Rename { .. })
            && self.armed.contains(&swap)
            && self.own_rng.random_bool(CLEANER_KILL_AT_RENAME_P)
        {
            self.armed.remove(&swap);
            return Some((self.own_rng.random_bool(0.5), true));
        }
        let p = match op {
            DiskOp::AppendCleaned { .. } => CLEANER_KILL_AT_APPEND_P,
            DiskOp::Rename { .. } => CLEANER_KILL_AT_RENAME_P,
            DiskOp::DiscardStaged { .. } => CLEANER_KILL_AT_DISCARD_P,
            _ => return None,
        };
        self.cleaner_kill_with(p)
    }

    /// Whether an armed kill-during-clean strikes at a cleaner op whose
    /// chance is `p`: `(before, power)`.
    fn cleaner_kill_with(&mut self, p: f64) -> Option<(bool, bool)> {
        // From its own generator (`FaultKind::own_draws`).
        if !self.armed.contains(&FaultKind::KillDuringClean) || !self.own_rng.random_bool(p) {
            return None;
        }
        self.armed.remove(&FaultKind::KillDuringClean);
        Some((self.own_rng.random_bool(0.5), self.own_rng.random_bool(0.5)))
    }

    /// Whether a cleaner write at `dir`/`segment_base` is the one
    /// FailSwapSync's story cuts after.
    fn swap_failed_at(&self, dir: &PartitionDir, segment_base: i64) -> bool {
        self.failed_swap
            .as_ref()
            .is_some_and(|(d, b)| d == dir && *b == segment_base)
    }

    /// After a cleaner op (`summary`) was carried out: a kill drawn for
    /// just after it, or FailSwapSync's cut.
    fn after_cleaner_op(&mut self, kill: Option<(bool, bool)>, cut_after: bool, summary: String) {
        if let Some((false, power)) = kill {
            self.kill_at_cleaner_op(format!("just after {summary}"), power);
        } else if cut_after {
            // FailSwapSync's story: the failed swap is not durable,
            // and a new pass stages files under its base.
            self.failed_swap = None;
            let what = format!("just after {summary}, its base's swap not durable");
            self.kill_at_cleaner_op(what, true);
        }
    }

    /// The process dies at a cleaner op (`what`); the outputs the core gave
    /// after it die with it (the loop in `broker_input` finds no broker).
    fn kill_at_cleaner_op(&mut self, what: String, power: bool) {
        self.note(format!(
            "fault: {} {what}",
            if power { "a power cut" } else { "a crash" }
        ));
        self.stats.cleaner_kills += 1;
        self.crash(power);
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.swarm_active() && self.rng.random_bool(p)
    }

    /// Whether the next read fails with an injected EIO (`armed` names the
    /// scripted fault that applies).
    fn read_fails(&mut self, armed: FaultKind) -> bool {
        (self.faults_on && self.armed.remove(&armed)) || self.chance(self.mix.read_fail_p)
    }

    /// Carries out a `DiskOp::Read` now (it sees every op emitted before it,
    /// none after) and delivers the bytes after a latency.
    fn disk_read(&mut self, io: IoId, range: FileRange) {
        self.stats.reads += 1;
        let booting = self.process.booting;
        let injected = self.read_fails(FaultKind::FailRead);
        let result = if injected {
            self.stats.failed_reads += 1;
            Err(IoError("EIO: injected read failure".into()))
        } else {
            self.disk.read(&range)
        };
        self.note(format!(
            "disk read#{io}{} {} -> {}",
            if booting { " (recovery)" } else { "" },
            describe_range(&range),
            match &result {
                Ok(_) => "ok".to_string(),
                Err(e) => format!("FAILED: {}", e.0),
            }
        ));
        if injected {
            // Outside start-up the partition is offline from now on; at
            // start-up a read that keeps failing takes it offline too.
            self.operator_restart();
        } else if let Err(e) = &result {
            // Nothing but the core touches the files it reads (lost index
            // files are never read), so it asked for bytes it never wrote.
            let what = format!(
                "the core read {}, which the disk does not hold: {}",
                describe_range(&range),
                e.0
            );
            self.history.violation(self.elapsed_ms(), what.clone());
            self.note(format!("VIOLATION {what}"));
        }
        if booting && range.file == SegmentFile::Log {
            self.process.boot_log_bytes += range.len;
            self.check_clean_boot_read(&range);
        }
        let latency_ms = self.rng.random_range(READ_LATENCY_MS);
        if booting {
            self.aim_recovery_kill(latency_ms, false);
        }
        let at_ms = self.now_ms + latency_ms;
        let gen = self.gen;
        self.queue.push(at_ms, Event::ReadDone { gen, io, result });
    }

    /// Carries out a cleaner job now (it sees every op emitted before it,
    /// none after; what it writes is unsynced) and delivers its outcome
    /// after a read's latency. Its reads fail as `DiskOp::Read`s do.
    fn disk_clean(&mut self, io: IoId, work: CleanerWork) -> String {
        self.stats.reads += 1;
        let injected = self.read_fails(FaultKind::FailRead);
        let (outcome, summary) = if injected {
            self.stats.failed_reads += 1;
            let what = format!(
                "clean#{io} {}/{}: FAILED: injected EIO",
                work.dir.dir_name(),
                work.segment_base
            );
            let e = IoError("EIO: injected read failure".into());
            let outcome = CleanerOutcome {
                bytes_read: 0,
                result: Err(CleanerError::Read(e)),
            };
            (outcome, what)
        } else {
            self.disk.clean(work, &mut self.rng)
        };
        if injected {
            // As for a `DiskOp::Read` (`disk_read`).
            self.operator_restart();
        } else if let Err(CleanerError::Read(e)) = &outcome.result {
            let what = format!("a cleaner job read what the disk does not hold: {}", e.0);
            self.history.violation(self.elapsed_ms(), what.clone());
            self.note(format!("VIOLATION {what}"));
        }
        let latency_ms = self.rng.random_range(READ_LATENCY_MS);
        let at_ms = self.now_ms + latency_ms;
        let gen = self.gen;
        self.queue
            .push(at_ms, Event::CleanerDone { gen, io, outcome });
        summary
    }

    /// A start after a clean stop reads only indexes: every partition was
    /// checkpointed at its end (`Input::Shutdown`), so no `.log` byte lies
    /// above a recovery point, and the index files below are all there.
    fn check_clean_boot_read(&mut self, range: &FileRange) {
        if !self.process.clean_boot {
            return;
        }
        let point = self.process.boot_checkpoints.get(&range.dir);
        let above = point
            .is_some_and(|c| (range.segment_base, range.position) >= (c.segment_base, c.position));
        if above {
            return;
        }
        let what = match point {
            Some(c) => format!(
                "after a clean stop, the restart read {} below its recovery point (segment {} position {}, offset {}): a clean start reads only indexes",
                describe_range(range),
                c.segment_base,
                c.position,
                c.offset
            ),
            None => format!(
                "after a clean stop, the restart read {}, a partition without a recovery checkpoint: a clean stop checkpoints every partition",
                describe_range(range)
            ),
        };
        self.history.violation(self.elapsed_ms(), what.clone());
        self.note(format!("VIOLATION {what}"));
    }

    /// A response made of parts goes on the wire with its file ranges read
    /// now, in order with the plain responses of its connection. A range
    /// that cannot be read: nothing of the frame is sent, the connection
    /// closes, and the core is told.
    fn send_parts(&mut self, conn: ConnId, parts: Vec<FramePart>) {
        if !self.conns.contains_key(&conn) {
            return; // gone: the driver would not write it
        }
        let mut frame = BytesMut::new();
        for part in parts {
            let range = match part {
                FramePart::Bytes(bytes) => {
                    frame.extend_from_slice(&bytes);
                    continue;
                }
                FramePart::File(range) => range,
            };
            self.stats.response_ranges += 1;
            let injected = self.read_fails(FaultKind::FailResponseRead);
            let result = if injected {
                self.stats.failed_response_reads += 1;
                Err(IoError("EIO: injected read failure".into()))
            } else {
                self.disk.read(&range)
            };
            match result {
                Ok(bytes) => frame.extend_from_slice(&bytes),
                Err(error) => return self.response_read_failed(conn, range, error, injected),
            }
        }
        self.send_to_client(conn, frame.freeze());
    }

    fn response_read_failed(
        &mut self,
        conn: ConnId,
        range: FileRange,
        error: IoError,
        injected: bool,
    ) {
        self.note(format!(
            "response to #{conn}: reading {} FAILED: {}; the connection closes",
            describe_range(&range),
            error.0
        ));
        if injected {
            self.operator_restart();
        } else {
            let what = format!(
                "a response to #{conn} names {}, which the disk does not hold: {}",
                describe_range(&range),
                error.0
            );
            self.history.violation(self.elapsed_ms(), what.clone());
            self.note(format!("VIOLATION {what}"));
        }
        if let Some(client) = self.conns.remove(&conn) {
            self.queue
                .push(self.now_ms + 1, Event::ClientDisconnected { client, conn });
        }
        // After the outputs at hand: the core is in the middle of giving them.
        let gen = self.gen;
        self.queue.push(
            self.now_ms,
            Event::ResponseReadFailed {
                gen,
                conn,
                range,
                error,
            },
        );
    }

    /// A read error may have taken a partition offline until a restart: the
    /// operator restarts the broker (cleanly) a little later.
    fn operator_restart(&mut self) {
        if self.process.operator_restart {
            return;
        }
        self.process.operator_restart = true;
        let at_ms = self.now_ms + self.rng.random_range(OPERATOR_DELAY_MS);
        self.queue
            .push(at_ms, Event::OperatorRestart { gen: self.gen });
    }

    /// An armed kill "while the broker recovers" aims at an I/O of the
    /// recovery that completes `latency_ms` from now: at a read by chance,
    /// at the boot sync always.
    fn aim_recovery_kill(&mut self, latency_ms: i64, boot_sync: bool) {
        if latency_ms < 1 || !self.faults_on {
            return;
        }
        let power = if self.armed.contains(&FaultKind::PowerCutDuringRecovery) {
            true
        } else if self.armed.contains(&FaultKind::CrashDuringRecovery) {
            false
        } else {
            return;
        };
        if !boot_sync && !self.rng.random_bool(RECOVERY_KILL_AT_READ_P) {
            return;
        }
        self.armed.remove(&if power {
            FaultKind::PowerCutDuringRecovery
        } else {
            FaultKind::CrashDuringRecovery
        });
        let at_ms = self.now_ms + self.rng.random_range(0..latency_ms);
        self.note(format!(
            "fault aimed: {} in {} ms, while the broker recovers",
            if power { "a power cut" } else { "a crash" },
            at_ms - self.now_ms
        ));
        let gen = self.gen;
        self.queue
            .push(at_ms, Event::KillDuringRecovery { gen, power });
    }

    pub(super) fn kill_during_recovery(&mut self, power: bool) {
        let booting = self.process.booting;
        self.note(format!(
            "fault: {} while the broker {}",
            if power { "power cut" } else { "crash" },
            if booting {
                "recovers"
            } else {
                "already serves"
            }
        ));
        if booting {
            self.stats.recovery_kills += 1;
        }
        self.crash(power);
    }

    /// Decides how a sync will end, and when.
    fn schedule_sync(&mut self, io: IoId) {
        self.stats.syncs += 1;
        let marker = std::mem::take(&mut self.marker_unsynced);
        let swap = self.swap_unsynced.take();
        if swap.is_some() && self.armed.remove(&FaultKind::FailSwapSync) {
            self.failed_swap = swap;
            self.queue.push(
                self.now_ms + FAILED_SWAP_SPELL_MS,
                Event::FaultEnd(FaultKind::FailSwapSync),
            );
        }
        let fail = self.armed.remove(&FaultKind::FailSync)
            || (marker && self.armed.remove(&FaultKind::FailMarkerSync))
            || self.failed_swap.is_some()
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
        if self.process.booting {
            // The boot sync: the last moment the broker still recovers.
            self.aim_recovery_kill(latency_ms, true);
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
        let gen = self.gen;
        self.broker_input(Input::SyncDone { io, result });
        if ok && gen == self.gen && self.armed.remove(&FaultKind::CrashAfterSync) {
            // The answers this sync released are on the wire (>= 1 ms away).
            self.note("fault: crash right after a successful sync".into());
            self.crash(false);
        }
    }

    /// The clean-shutdown file's write or removal: what a listing shows of
    /// it changes now, what a power cut leaves once it completes. A power
    /// cut armed for after the stop may strike while the write is in
    /// flight, and one armed for the recovery while the removal is.
    fn clean_shutdown_op(&mut self, op: DiskOp) {
        let (io, write) = match op {
            DiskOp::WriteCleanShutdown { io } => (io, true),
            DiskOp::RemoveCleanShutdown { io } => (io, false),
            _ => unreachable!("a clean-shutdown op"),
        };
        let summary = self.disk.apply(op, &mut self.rng);
        self.note(format!("disk {summary}"));
        let latency_ms = self.rng.random_range(SYNC_LATENCY_MS);
        let gen = self.gen;
        self.queue.push(
            self.now_ms + latency_ms,
            Event::CleanShutdownDone { gen, io },
        );
        if write {
            let armed = FaultKind::PowerCutAfterStop;
            if self.faults_on && self.armed.contains(&armed) && self.rng.random_bool(0.5) {
                self.armed.remove(&armed);
                let at_ms = self.now_ms + self.rng.random_range(0..latency_ms);
                self.note(format!(
                    "fault aimed: a power cut in {} ms, while the clean-shutdown file is written",
                    at_ms - self.now_ms
                ));
                self.queue.push(at_ms, Event::Fault(FaultKind::PowerCut));
            }
        } else {
            self.aim_recovery_kill(latency_ms, false);
        }
    }

    pub(super) fn clean_shutdown_done(&mut self, io: IoId) {
        let fail = self.chance(self.mix.sync_fail_p);
        let result = self.disk.complete_clean_shutdown(io, fail);
        self.broker_input(Input::CleanShutdownDone { io, result });
    }

    /// A start found the clean-shutdown file, which claims that every
    /// segment file is durable as listed (`core_state::clean_shutdown`):
    /// anything a power cut could still take is a violation.
    fn check_clean_shutdown_claim(&mut self) {
        self.stats.trusted_boots += 1;
        let (unsynced_bytes, files) = self.disk.unsynced();
        if files.is_empty() {
            return;
        }
        let what = format!(
            "the clean-shutdown file is there, yet {unsynced_bytes}B in {} files are not durable: {}",
            files.len(),
            files.iter().take(NAMED_MAX).cloned().collect::<Vec<_>>().join(", ")
        );
        self.history.violation(self.elapsed_ms(), what.clone());
        self.note(format!("VIOLATION {what}"));
    }

    pub(super) fn meta_done(&mut self, io: IoId) {
        let fail = self
            .meta_fates
            .remove(&io)
            .expect("a meta completion has a fate");
        let result = self.meta.complete(io, fail);
        let gen = self.gen;
        self.broker_input(Input::MetaDone { io, result });
        if self.cut_after_meta.remove(&io) && gen == self.gen {
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
            let (lost_bytes, lost_files) = self.disk.power_cut(&mut self.rng);
            self.note(format!(
                "POWER CUT: {lost_bytes}B of unsynced data lost, {lost_files} files never synced gone"
            ));
            if lost_bytes > 0 || lost_files > 0 {
                self.process.clean_down = false;
            }
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
        self.take_down(false);
    }

    /// The process is gone (killed, or exited after a clean stop): its I/O in
    /// flight never completes, its connections drop, and it starts again
    /// after a restart delay.
    fn take_down(&mut self, clean: bool) {
        self.broker = None;
        self.gen += 1;
        self.tick_at_ms = None;
        self.disk.crash();
        self.meta.crash(&mut self.rng);
        self.sync_fates.clear();
        self.meta_fates.clear();
        self.cut_after_meta.clear();
        self.marker_unsynced = false;
        self.swap_unsynced = None;
        self.failed_swap = None;
        self.process = Process {
            clean_down: clean,
            ..Process::default()
        };
        self.drop_connections(false);
        assert!(!self.start_pending, "a live broker has no restart pending");
        self.start_pending = true;
        let at_ms = self.now_ms + self.rng.random_range(RESTART_DELAY_MS);
        self.queue.push(at_ms, Event::BrokerStart);
    }

    /// Stops the broker cleanly: `Input::Shutdown`, then no more frames go
    /// in; `Output::Stopped` ends the process (`stopped`).
    pub(super) fn clean_stop(&mut self) {
        if self.broker.is_none() || self.process.stopping {
            return;
        }
        self.process.stopping = true;
        let gen = self.gen;
        self.queue
            .push(self.now_ms + STOP_TIMEOUT_MS, Event::StopTimeout { gen });
        self.broker_input(Input::Shutdown);
    }

    /// `Output::Stopped`: everything the core holds must be durable now
    /// (a power cut here may take nothing), and every partition
    /// checkpointed. The process exits.
    fn stopped(&mut self) {
        let (unsynced_bytes, files) = self.disk.unsynced();
        let mut clean = true;
        if !files.is_empty() {
            clean = false;
            let what = format!(
                "after Output::Stopped, {unsynced_bytes}B in {} files are not durable (a power cut now takes them): {}",
                files.len(),
                files.iter().take(NAMED_MAX).cloned().collect::<Vec<_>>().join(", ")
            );
            self.history.violation(self.elapsed_ms(), what.clone());
            self.note(format!("VIOLATION {what}"));
        }
        self.stats.clean_stops += 1;
        self.note("broker stopped cleanly (Output::Stopped); the process exits".into());
        self.take_down(clean);
        if self.faults_on && self.armed.remove(&FaultKind::PowerCutAfterStop) {
            self.note("fault: power cut right after a clean stop".into());
            self.crash(true);
        }
    }

    pub(super) fn stop_timed_out(&mut self) {
        if !self.process.stopping {
            return;
        }
        let what =
            format!("a clean stop (Input::Shutdown) did not end with Output::Stopped in {STOP_TIMEOUT_MS} ms");
        self.history.violation(self.elapsed_ms(), what.clone());
        self.note(format!("VIOLATION {what}"));
        self.crash(false);
    }
}

/// The recovery points meta.db holds, by partition directory (checkpoints
/// are keyed by topic id, directories by topic name).
fn recovery_points(meta: &[(Vec<u8>, Vec<u8>)]) -> BTreeMap<PartitionDir, LogCheckpoint> {
    // Topic ids are hex, hyphenated in some keys and not in others.
    let id = |text: &str| -> String {
        text.chars()
            .filter(|c| *c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let mut names = BTreeMap::new();
    let mut points = Vec::new();
    for (key, value) in meta {
        match doze_core::meta_entry::decode_entry(key, value) {
            Ok(MetaEntry::Topic { name, record }) => {
                names.insert(id(&record.id), name);
            }
            Ok(MetaEntry::Checkpoint {
                topic_id,
                partition,
                record,
            }) => points.push((id(&topic_id), partition, record.log)),
            _ => {}
        }
    }
    points
        .into_iter()
        .filter_map(|(topic_id, partition, log)| {
            let name = names.get(&topic_id)?;
            Some((PartitionDir::new(name.clone(), partition), log))
        })
        .collect()
}

/// `rename sim-topic-0/00000000000000000042.index Cleaned -> Swap`.
fn describe_cleaner_op(op: &DiskOp) -> String {
    let file = |dir: &PartitionDir, base: i64, file: SegmentFile| {
        format!("{}/{}", dir.dir_name(), file.file_name(base))
    };
    match op {
        DiskOp::AppendCleaned {
            dir,
            segment_base,
            file: kind,
            bytes,
        } => format!(
            "append {}.cleaned +{}B",
            file(dir, *segment_base, *kind),
            bytes.len()
        ),
        DiskOp::Rename {
            dir,
            segment_base,
            file: kind,
            from,
            to,
        } => format!(
            "rename {} {from:?} -> {to:?}",
            file(dir, *segment_base, *kind)
        ),
        DiskOp::DiscardStaged { dir, segment_base } => {
            format!("discard staged {}/{segment_base}", dir.dir_name())
        }
        other => format!("{other:?}"),
    }
}

/// `clean#12 sim-topic-0/00000000000000000042.log Clean { .. }`.
fn describe_cleaner_job(io: IoId, work: &CleanerWork) -> String {
    format!(
        "clean#{io} {}/{} {:?}",
        work.dir.dir_name(),
        SegmentFile::Log.file_name(work.segment_base),
        work.task
    )
}

/// `sim-topic-0/00000000000000000042.log [100, +4096)`.
fn describe_range(range: &FileRange) -> String {
    format!(
        "{}/{} [{}, +{})",
        range.dir.dir_name(),
        range.file.file_name(range.segment_base),
        range.position,
        range.len
    )
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
        // The same words for a frame with its Produce checks: the trace
        // tells what the broker was handed, which they do not change.
        Input::Frame { conn, frame } | Input::CheckedFrame { conn, frame, .. } => {
            format!("frame #{conn} {}B", frame.len())
        }
        Input::Disconnected { conn } => format!("disconnected #{conn}"),
        Input::Connected {
            conn,
            client_host,
            listener,
        } => format!(
            "connected #{conn} from {client_host} on {}",
            listener.protocol.name()
        ),
        Input::SyncDone { io, result } => format!("SyncDone#{io} {result:?}"),
        Input::MetaDone { io, result } => format!("MetaDone#{io} {result:?}"),
        Input::CleanShutdownDone { io, result } => format!("CleanShutdownDone#{io} {result:?}"),
        Input::ReadDone { io, result } => match result {
            Ok(bytes) => format!("ReadDone#{io} Ok({}B)", bytes.len()),
            Err(e) => format!("ReadDone#{io} Err({})", e.0),
        },
        Input::CleanerDone { io, outcome } => match &outcome.result {
            Ok(_) => format!("CleanerDone#{io} Ok(read {}B)", outcome.bytes_read),
            Err(e) => format!("CleanerDone#{io} Err({e:?})"),
        },
        Input::ResponseReadFailed { conn, range, error } => format!(
            "ResponseReadFailed #{conn} {}: {}",
            describe_range(range),
            error.0
        ),
        Input::Shutdown => "Shutdown".into(),
        Input::Tick => "Tick".into(),
    }
}
