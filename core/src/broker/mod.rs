//! The broker state machine: `handle` / `poll_output` / `poll_timeout`.
//!
//! Methods are grouped as in quinn-proto: construction and getters, `handle_*`
//! for each input, helpers the API handlers call, and `poll_*`. The fields
//! are private to this module: a handler asks through methods, and what
//! changes several of the broker's stores at once is one method here, in the
//! child that owns the concern:
//! - `requests`: frames in, responses out, in each connection's order;
//! - `waiting`: requests parked until something happens (their data or
//!   markers are durable, data arrives, a read is in, a topic change or an id block is
//!   stored);
//! - `disk`: disk and meta.db writes, syncs, reads, and their completions;
//! - `partition`: one partition by its key, for the handlers (the state is
//!   `crate::partition::Partition`'s, held by its topic);
//! - `topics`: topics created, grown and deleted with all they hold;
//! - `checkpoint`: when recovery checkpoints are written;
//! - `recovery`: the start-up until the broker serves.

pub(crate) mod cleaner;
pub use cleaner::CleanerProgress;
mod checkpoint;
mod disk;
pub mod meta_entry;
mod metrics;
mod partition;
mod recovery;
mod requests;
mod security;
mod topics;
mod waiting;

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::{InitProducerIdRequest, RequestKind};

use crate::api;
use crate::boundary::{Input, Output};
use crate::checkpoint::Checkpoints;
use crate::config::BrokerConfig;
use crate::conn::Conn;
use crate::group::Coordinator;
use crate::io::{BootState, ConnId, IoId};
use crate::log::PartitionLog;
use crate::outbox::Outbox;
use crate::producer::ProducerIds;
use crate::request::RequestCtx;
use crate::topics::Topics;
use crate::txn::Txns;

pub(crate) use crate::partition::MarkerRefused;
pub(crate) use disk::MetaAction;

/// A sync in flight; each partition it covers holds the durability point
/// it brings it to (`Partition::start_sync`).
struct SyncInFlight {
    io: IoId,
    scope: crate::io::SyncScope,
}

/// The broker. See the crate docs.
pub struct Broker {
    config: BrokerConfig,
    /// The time of the input being handled (ms since the UNIX epoch).
    now_ms: i64,
    booted: bool,
    /// Outputs for the driver, and the I/O ids.
    outbox: Outbox,
    conns: BTreeMap<ConnId, Conn>,
    /// The topics, which hold their partitions and all their state.
    topics: Topics,
    sync_in_flight: Option<SyncInFlight>,
    /// A disk operation of a partition that no longer exists (a deleted
    /// topic's directories, one no topic owns) that no started sync covers:
    /// a sync is wanted. A deleted partition's own flags go with it: its
    /// deletion is such an operation, and the next sync to start would have
    /// forgotten them.
    gone_dirty: bool,
    /// The next sync is a `SyncScope::All` one, even with nothing dirty;
    /// until one completes OK.
    all_sync_wanted: bool,
    /// Deleted topics whose directories' removal no completed sync covers
    /// yet, by name, each with the sync that covers it once one is started
    /// after the removal. A topic of that name is not stored again until
    /// then (`api::create_topics::store`).
    unsynced_removals: BTreeMap<String, Option<IoId>>,
    /// Topic creations waiting for such a removal to become durable.
    parked_creates: Vec<api::create_topics::PendingCreate>,
    /// Meta.db writes in flight and what to do when each completes.
    pending_meta: BTreeMap<IoId, MetaAction>,
    /// Admin requests waiting for a topic's meta.db change in flight.
    deferred: Vec<(RequestCtx, RequestKind)>,
    /// What the driver read of the Produce frame being handled
    /// (`Input::CheckedFrame`), for Produce to take.
    produce_checks: Option<crate::produce_checks::ProduceChecks>,
    /// Produce requests waiting for their data to be durable.
    pending_produces: Vec<api::produce::PendingProduce>,
    /// WriteTxnMarkers requests waiting for their markers to be durable.
    pending_markers: Vec<api::write_txn_markers::PendingMarkers>,
    /// Fetch requests waiting for data or their max_wait_ms.
    waiting_fetches: Vec<api::fetch::WaitingFetch>,
    /// The group coordinator (consumer groups and committed offsets).
    groups: Coordinator,
    next_retention_check_ms: i64,
    /// The producer id allocator (InitProducerId).
    producer_ids: ProducerIds,
    /// InitProducerId requests waiting for a new id block in meta.db.
    init_waiting: Vec<(RequestCtx, InitProducerIdRequest)>,
    /// The transaction coordinator's ids.
    txns: Txns,
    next_producer_expiry_ms: i64,
    /// The start-up until the broker serves (`recovery`).
    booting: Option<recovery::Boot>,
    /// Recovery checkpoints (`crate::checkpoint`).
    checkpoints: Checkpoints,
    /// Requests waiting for reads of the log (`api::reads`).
    reading: api::reads::ReadingRequests,
    /// The log cleaner (`cleaner`).
    cleaner: cleaner::Cleaner,
    /// `Input::Shutdown` came; `Output::Stopped` once all is durable.
    shutting_down: bool,
    stopped: bool,
    /// SCRAM credentials and ACLs (`crate::security::store`).
    security: crate::security::store::SecurityStore,
    /// The driver's random bytes (`BootState::entropy`) and how many SCRAM
    /// nonces were made from them.
    entropy: [u8; 32],
    nonces_made: u64,
    /// Connections on SASL listeners not yet authenticated, by the time
    /// they are closed if they still are not.
    sasl_deadlines: BTreeSet<(i64, ConnId)>,
    /// Broker-wide counters for operators (`crate::metrics`); never read
    /// by anything the broker decides.
    metrics: crate::metrics::Counters,
}

impl Broker {
    pub fn new(config: BrokerConfig) -> Self {
        let checkpoints = Checkpoints::new(config.checkpoint_bytes, config.checkpoint_interval_ms);
        Self {
            groups: Coordinator::new(&config),
            config,
            now_ms: 0,
            booted: false,
            outbox: Outbox::default(),
            conns: BTreeMap::new(),
            topics: Topics::default(),
            sync_in_flight: None,
            gone_dirty: false,
            unsynced_removals: BTreeMap::new(),
            parked_creates: Vec::new(),
            all_sync_wanted: false,
            pending_meta: BTreeMap::new(),
            deferred: Vec::new(),
            produce_checks: None,
            pending_produces: Vec::new(),
            pending_markers: Vec::new(),
            waiting_fetches: Vec::new(),
            next_retention_check_ms: 0,
            producer_ids: ProducerIds::default(),
            init_waiting: Vec::new(),
            next_producer_expiry_ms: 0,
            txns: Txns::default(),
            booting: None,
            checkpoints,
            reading: Default::default(),
            cleaner: Default::default(),
            shutting_down: false,
            stopped: false,
            security: Default::default(),
            entropy: [0; 32],
            nonces_made: 0,
            sasl_deadlines: BTreeSet::new(),
            metrics: Default::default(),
        }
    }

    // ---- getters ------------------------------------------------------------

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// One partition's log, for tests and tools.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionLog> {
        self.topics.partition(topic, partition)
    }

    pub fn topic_names(&self) -> Vec<String> {
        self.topics.names()
    }

    /// Counters and gauges for operators (a driver's `/metrics`). Reads
    /// only: taking a snapshot changes nothing.
    pub fn metrics_snapshot(&self) -> crate::metrics::Snapshot {
        metrics::snapshot(self, self.metrics)
    }

    /// The broker-wide counters, for the paths that bump them.
    pub(crate) fn metrics_mut(&mut self) -> &mut crate::metrics::Counters {
        &mut self.metrics
    }

    /// Where a connection comes from, as Kafka shows it (`/127.0.0.1`); ""
    /// if the driver did not say (`Input::Connected`).
    pub(crate) fn client_host(&self, conn: ConnId) -> String {
        self.conns
            .get(&conn)
            .map_or_else(String::new, |c| c.client_host.clone())
    }

    /// The time of the input being handled (ms since the UNIX epoch).
    pub(crate) fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// The topics and their partition logs, to read.
    pub(crate) fn topics(&self) -> &Topics {
        &self.topics
    }

    /// The group coordinator, to read.
    pub(crate) fn groups(&self) -> &Coordinator {
        &self.groups
    }

    /// The group coordinator, for a call that changes only its own state.
    pub(crate) fn groups_mut(&mut self) -> &mut Coordinator {
        &mut self.groups
    }

    /// The transaction coordinator's ids, to read.
    pub(crate) fn txns(&self) -> &Txns {
        &self.txns
    }

    /// The transaction coordinator's ids, for a change of theirs alone.
    pub(crate) fn txns_mut(&mut self) -> &mut Txns {
        &mut self.txns
    }

    // ---- inputs -----------------------------------------------------------

    pub fn handle(&mut self, now_ms: i64, input: Input) {
        // Time never runs backwards inside the core, even if the wall clock does.
        self.now_ms = self.now_ms.max(now_ms);
        match input {
            Input::Boot(state) => self.handle_boot(state),
            Input::Frame { conn, frame } => self.handle_frame(conn, frame, None),
            Input::CheckedFrame {
                conn,
                frame,
                checks,
            } => self.handle_frame(conn, frame, Some(checks)),
            Input::Disconnected { conn } => self.handle_disconnected(conn),
            Input::Connected {
                conn,
                client_host,
                listener,
            } => self.handle_connected(conn, client_host, listener),
            Input::SyncDone { io, result } => self.handle_sync_done(io, result),
            Input::MetaDone { io, result } => self.handle_meta_done(io, result),
            Input::ReadDone { io, result } => self.handle_read_done(io, result),
            Input::CleanerDone { io, outcome } => self.cleaner_work_done(io, outcome),
            Input::ResponseReadFailed { conn, range, error } => {
                tracing::error!(conn, dir = %range.dir.dir_name(), "response read failed: {}", error.0);
                self.take_offline(&range);
                self.handle_disconnected(conn);
            }
            Input::Shutdown => {
                self.shutting_down = true;
                // A recovering broker stops once recovery and its boot sync
                // are done (`check_stopped`); a sync started now would not
                // cover what recovery still writes, yet would be taken for
                // the boot sync.
                if self.booting.is_none() {
                    self.request_sync();
                }
            }
            Input::Tick => {}
        }
        self.handle_timers();
        for (topic, prep) in self.topics.take_compression_changes() {
            let offer = Output::TopicCompression { topic, prep };
            self.outbox.push(offer);
        }
        self.check_stopped();
    }

    fn handle_frame(
        &mut self,
        conn: ConnId,
        frame: bytes::Bytes,
        checks: Option<crate::produce_checks::ProduceChecks>,
    ) {
        assert!(self.booted, "a request arrived before Input::Boot");
        match self.booting.as_mut() {
            Some(boot) => boot.park(conn, frame, checks),
            None => self.handle_frame_now(conn, frame, checks),
        }
    }

    /// What the driver read of the Produce request being handled, once.
    pub(crate) fn take_produce_checks(&mut self) -> Option<crate::produce_checks::ProduceChecks> {
        self.produce_checks.take()
    }

    fn handle_boot(&mut self, state: BootState) {
        assert!(!self.booted, "Input::Boot sent twice");
        self.booted = true;
        self.next_retention_check_ms = self.now_ms + self.config.retention_check_interval_ms;
        self.next_producer_expiry_ms =
            self.now_ms + self.config.producer_id_expiration_check_interval_ms;
        self.entropy = state.entropy;
        recovery::start(self, state);
    }

    fn handle_timers(&mut self) {
        if !self.booted || self.booting.is_some() {
            return; // nothing runs on a log still being recovered
        }
        if self.now_ms >= self.next_retention_check_ms {
            self.next_retention_check_ms =
                self.now_ms + self.config.retention_check_interval_ms.max(1);
            let cleaning = self.cleaner.cleaning_key();
            let ops = self
                .topics
                .apply_retention(&self.config, self.now_ms, cleaning.as_ref());
            let deleted = !ops.is_empty();
            for (key, op) in ops {
                self.emit_disk(key, op);
            }
            if deleted {
                // The deletions are made durable now, not with the next
                // append, which on an idle partition may never come: until
                // then a power cut brings the segments back, and the log
                // start with them.
                self.request_sync();
            }
            // Aborted transactions below the new log starts are no longer fetched.
            for (_, partition) in self.topics.partitions_mut() {
                let start = partition.log().log_start_offset();
                if let Some(txns) = partition.txns_mut() {
                    txns.forget_below(start);
                }
            }
        }
        if self.now_ms >= self.next_producer_expiry_ms {
            let interval_ms = self.config.producer_id_expiration_check_interval_ms.max(1);
            self.next_producer_expiry_ms = self.now_ms + interval_ms;
            let expiration_ms = self.config.producer_id_expiration_ms;
            for (_, partition) in self.topics.partitions_mut() {
                if let Some(states) = partition.producers_mut() {
                    states.expire(self.now_ms, expiration_ms);
                }
            }
        }
        self.groups.tick(self.now_ms);
        self.flush_group_answers();
        self.expire_offsets();
        crate::txn::timers::tick(self);
        self.cleaner_tick();
        self.checkpoint_tick();
        self.sasl_tick();
        api::fetch::wake(self, false);
    }

    /// After `Input::Shutdown`: once nothing waits for a sync, every
    /// partition is checkpointed; once those are stored, `Output::Stopped`.
    pub(crate) fn is_stopping(&self) -> bool {
        self.shutting_down
    }

    fn check_stopped(&mut self) {
        if !self.shutting_down || self.stopped || self.booting.is_some() {
            return;
        }
        if self.sync_in_flight.is_some() || self.sync_wanted() {
            // Whatever is still dirty is synced before the stop, whoever
            // left it so (a retention deletion during the stop, say):
            // waiting for an append that never comes would never stop.
            self.request_sync();
            return;
        }
        // A cleaner job may still be writing its staged copy: the stop
        // waits for it, and then discards the copy (`cleaner_stop_pass`).
        if self.cleaner.working() {
            return;
        }
        if crate::txn::complete::write_owed_for_stop(self) {
            return;
        }
        if !self.checkpoint_in_flight() {
            let keys = self.topics.keys();
            self.write_due_checkpoints(keys, crate::checkpoint::Due::Now);
        }
        // Nothing is left unsynced at a clean stop, index appends included
        // (a roll's last time entry may come after the last checkpoint).
        if self.index_lagging() {
            self.request_all_sync();
        }
        if !self.checkpoint_in_flight() && self.sync_in_flight.is_none() {
            self.stopped = true;
            self.outbox.push(Output::Stopped);
        }
    }

    // ---- polls --------------------------------------------------------------

    pub fn poll_output(&mut self) -> Option<Output> {
        self.outbox.pop()
    }

    /// The absolute time (ms since the UNIX epoch) at which the driver must
    /// send `Input::Tick`; `None` before boot.
    pub fn poll_timeout(&self) -> Option<i64> {
        if !self.booted || self.booting.is_some() {
            return None;
        }
        let fetch = self.waiting_fetches.iter().map(|f| f.deadline_ms).min();
        let mut deadline_ms = self
            .next_retention_check_ms
            .min(self.next_producer_expiry_ms);
        if let Some(fetch_ms) = fetch {
            deadline_ms = deadline_ms.min(fetch_ms);
        }
        if let Some(group_ms) = self.groups.next_deadline_ms() {
            deadline_ms = deadline_ms.min(group_ms);
        }
        deadline_ms = deadline_ms.min(crate::txn::timers::next_deadline_ms(self));
        deadline_ms = deadline_ms.min(self.checkpoints.next_deadline_ms());
        if let Some(clean_ms) = self.cleaner.next_deadline_ms() {
            deadline_ms = deadline_ms.min(clean_ms);
        }
        if let Some((sasl_ms, _)) = self.sasl_deadlines.first() {
            deadline_ms = deadline_ms.min(*sasl_ms);
        }
        Some(deadline_ms)
    }
}
