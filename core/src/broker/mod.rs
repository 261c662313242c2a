//! The broker: `handle` / `poll_output` / `poll_timeout`, on top of the core
//! state (`crate::core_state::Core`) and the requests parked for later
//! (`api::Parked`).
//!
//! The core decides everything below the API handlers and knows nothing of
//! them. The broker hands each input to the core, and then wakes what the
//! input may have let go on: the API handlers' parked requests
//! (`wake`). Dependencies run one way: `broker → api → {core_state, txn, group,
//! partition, topics, security} → {log, producer, batch, io, limits}`.

mod wake;

use crate::api::{self, Cx, Parked};
use crate::boundary::{Input, Output};
use crate::config::BrokerConfig;
use crate::core_state::Core;
use crate::log::PartitionLog;
use crate::topic_config::CleanupConfig;

pub use crate::core_state::CleanerProgress;

/// The broker. See the module docs.
pub struct Broker {
    core: Core,
    parked: Parked,
}

impl Broker {
    pub fn new(config: BrokerConfig) -> Self {
        Self {
            core: Core::new(config),
            parked: Parked::default(),
        }
    }

    // ---- getters, for drivers, tests and tools --------------------------------

    pub fn config(&self) -> &BrokerConfig {
        self.core.config()
    }

    /// One partition's log.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionLog> {
        self.core.partition(topic, partition)
    }

    pub fn topic_names(&self) -> Vec<String> {
        self.core.topic_names()
    }

    /// Counters and gauges for operators (a driver's `/metrics`). Reads
    /// only: taking a snapshot changes nothing.
    pub fn metrics_snapshot(&self) -> crate::metrics::Snapshot {
        self.core.metrics_snapshot()
    }

    /// What the cleaner has done for one partition.
    pub fn cleaner_progress(&self, topic: &str, partition: i32) -> Option<CleanerProgress> {
        self.core.cleaner_progress(topic, partition)
    }

    /// What the log cleaner and retention need of a topic's configs (its
    /// overrides, else the broker's defaults); `None` for a topic that does
    /// not exist.
    pub fn cleanup_config(&self, topic: &str) -> Option<CleanupConfig> {
        self.core.cleanup_config(topic)
    }

    // ---- inputs ---------------------------------------------------------------

    pub fn handle(&mut self, now_ms: i64, input: Input) {
        self.core.advance_clock(now_ms);
        let cx = &mut Cx::new(&mut self.core, &mut self.parked);
        match input {
            Input::Boot(state) => {
                cx.core.handle_boot(state);
                wake::run_early_frames(cx);
            }
            Input::Frame { conn, frame } => wake::frame(cx, conn, frame, None),
            Input::CheckedFrame {
                conn,
                frame,
                checks,
            } => wake::frame(cx, conn, frame, Some(checks)),
            Input::Disconnected { conn } => cx.disconnected(conn),
            Input::Connected {
                conn,
                client_host,
                listener,
            } => cx.core.handle_connected(conn, client_host, listener),
            Input::SyncDone { io, result } => wake::sync_done(cx, io, result),
            Input::MetaDone { io, result } => wake::meta_done(cx, io, result),
            Input::ReadDone { io, result } => wake::read_done(cx, io, result),
            Input::CleanerDone { io, outcome } => cx.core.cleaner_work_done(io, outcome),
            Input::CleanShutdownDone { io, result } => {
                cx.core.clean_shutdown_done(io, result);
                wake::run_early_frames(cx);
            }
            Input::ResponseReadFailed { conn, range, error } => {
                tracing::error!(conn, dir = %range.dir.dir_name(), "response read failed: {}", error.0);
                cx.core.take_offline(&range);
                cx.disconnected(conn);
            }
            Input::Shutdown => cx.core.shut_down(),
            Input::Tick => {}
        }
        // Nothing runs on a log still being recovered.
        if cx.core.is_serving() {
            cx.core.handle_timers();
            api::fetch::wake(cx, false);
        }
        cx.core.offer_compression_changes();
        cx.core.check_stopped();
        cx.catch_up();
    }

    // ---- polls ------------------------------------------------------------------

    /// Whether start-up is done and requests are served.
    pub fn is_serving(&self) -> bool {
        self.core.is_serving()
    }

    pub fn poll_output(&mut self) -> Option<Output> {
        self.core.poll_output()
    }

    /// The absolute time (ms since the UNIX epoch) at which the driver must
    /// send `Input::Tick`; `None` before it serves.
    pub fn poll_timeout(&self) -> Option<i64> {
        let core_ms = self.core.poll_timeout()?;
        Some(match self.parked.fetch_deadline_ms() {
            Some(fetch_ms) => core_ms.min(fetch_ms),
            None => core_ms,
        })
    }
}
