//! The core state: everything the broker knows and decides below the API
//! handlers (topics and their partitions, durability, transactions, groups,
//! security, checkpoints, the cleaner, start-up), and nothing of `api/`.
//! Requests parked for later and their wake-ups belong to the top
//! (`crate::broker`); what the core has for them to pick up (frames that
//! waited for start-up, connections closed, segments the cleaner replaced)
//! it keeps until the top takes it.
//!
//! Methods are grouped as in quinn-proto, in the child that owns the concern:
//! - `conns`: responses out, in each connection's order; closing;
//! - `disk`: disk and meta.db writes, syncs, reads, and their completions;
//! - `partition`: one partition by its key, for the handlers (the state is
//!   `crate::partition::Partition`'s, held by its topic);
//! - `topics`: topics created, grown and deleted with all they hold;
//! - `checkpoint`: when recovery checkpoints are written;
//! - `recovery`: the start-up until the broker serves;
//! - `cleaner`: the log cleaner's passes;
//! - `security`: SASL and ACLs.

pub(crate) mod cleaner;
pub use cleaner::CleanerProgress;
mod checkpoint;
mod clean_shutdown;
mod conns;
mod disk;
pub mod meta_entry;
mod metrics;
mod partition;
mod reads;
mod recovery;
mod security;
mod topics;
mod txn_host;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use crate::boundary::Output;
use crate::checkpoint::Checkpoints;
use crate::config::BrokerConfig;
use crate::conn::Conn;
use crate::group::Coordinator;
use crate::io::{BootState, ConnId, IoId, PartitionDir};
use crate::log::PartitionLog;
use crate::outbox::Outbox;
use crate::produce_checks::ProduceChecks;
use crate::producer::ProducerIds;
use crate::topics::Topics;
use crate::txn::Txns;

pub(crate) use crate::partition::MarkerRefused;
pub(crate) use disk::{MetaAction, MetaDone};
pub(crate) use reads::RequestReads;

/// A sync in flight; each partition it covers holds the durability point
/// it brings it to (`Partition::start_sync`).
struct SyncInFlight {
    io: IoId,
    scope: crate::io::SyncScope,
}

/// A frame that came before the broker served, with what the driver read
/// of it: run in order once start-up is done.
pub(crate) type EarlyFrame = (ConnId, Bytes, Option<ProduceChecks>);

/// The core state. See the module docs.
pub(crate) struct Core {
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
    /// Meta.db writes in flight the core started, and what to do when each
    /// completes (the handlers' own are the top's: `api::Parked`).
    pending_meta: BTreeMap<IoId, MetaAction>,
    /// The group coordinator (consumer groups and committed offsets).
    groups: Coordinator,
    /// Fetch sessions (KIP-227): broker-wide, as a client may use its
    /// session over any of its connections.
    fetch_sessions: crate::fetch_sessions::FetchSessions,
    next_retention_check_ms: i64,
    /// The producer id allocator (InitProducerId).
    producer_ids: ProducerIds,
    /// The transaction coordinator's ids.
    txns: Txns,
    next_producer_expiry_ms: i64,
    /// The start-up until the broker serves (`recovery`).
    booting: Option<recovery::Boot>,
    /// Frames that waited for start-up, once it is done: the top runs them.
    early_frames: VecDeque<EarlyFrame>,
    /// Recovery checkpoints (`crate::checkpoint`).
    checkpoints: Checkpoints,
    /// Reads of the log that requests wait for (`reads`).
    reads: RequestReads,
    /// The log cleaner (`cleaner`).
    cleaner: cleaner::Cleaner,
    /// `Input::Shutdown` came; `Output::Stopped` once all is durable.
    shutting_down: bool,
    /// The clean-shutdown file's write, emitted at the stop's point where
    /// everything is durable (`clean_shutdown`); `Output::Stopped` follows
    /// its completion.
    clean_shutdown_io: Option<IoId>,
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
    /// Connections the core closed, for the top to drop what they had
    /// parked (`take_closed`).
    closed: Vec<ConnId>,
    /// Segments the cleaner replaced, for the top to drop what parked
    /// requests read of the old files (`take_replaced_segments`).
    replaced_segments: Vec<(PartitionDir, i64)>,
    /// Broker-wide counters for operators (`crate::metrics`); never read
    /// by anything the broker decides.
    metrics: crate::metrics::Counters,
}

impl Core {
    pub fn new(config: BrokerConfig) -> Self {
        let checkpoints = Checkpoints::new(config.checkpoint_bytes, config.checkpoint_interval_ms);
        Self {
            groups: Coordinator::new(&config),
            fetch_sessions: Default::default(),
            config,
            now_ms: 0,
            booted: false,
            outbox: Outbox::default(),
            conns: BTreeMap::new(),
            topics: Topics::default(),
            sync_in_flight: None,
            gone_dirty: false,
            unsynced_removals: BTreeMap::new(),
            all_sync_wanted: false,
            pending_meta: BTreeMap::new(),
            next_retention_check_ms: 0,
            producer_ids: ProducerIds::default(),
            next_producer_expiry_ms: 0,
            txns: Txns::default(),
            booting: None,
            early_frames: VecDeque::new(),
            checkpoints,
            reads: Default::default(),
            cleaner: Default::default(),
            shutting_down: false,
            clean_shutdown_io: None,
            stopped: false,
            security: Default::default(),
            entropy: [0; 32],
            nonces_made: 0,
            sasl_deadlines: BTreeSet::new(),
            closed: Vec::new(),
            replaced_segments: Vec::new(),
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

    /// The fetch sessions (KIP-227).
    pub(crate) fn fetch_sessions(&self) -> &crate::fetch_sessions::FetchSessions {
        &self.fetch_sessions
    }

    /// The fetch sessions, to open, answer and close.
    pub(crate) fn fetch_sessions_mut(&mut self) -> &mut crate::fetch_sessions::FetchSessions {
        &mut self.fetch_sessions
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

    /// Whether `Input::Boot` came.
    pub(crate) fn is_booted(&self) -> bool {
        self.booted
    }

    /// A fresh producer id, or None while a new block must be stored first.
    pub(crate) fn take_producer_id(&mut self) -> Option<i64> {
        self.producer_ids.take()
    }

    /// The next block of producer ids to store, unless one is on its way.
    pub(crate) fn start_id_block(&mut self) -> Option<crate::producer::ids::ProducerIdsRecord> {
        self.producer_ids.start_block()
    }

    /// Whether the broker still recovers its logs (requests wait).
    pub(crate) fn is_booting(&self) -> bool {
        self.booting.is_some()
    }

    /// Whether it serves: booted and recovered.
    pub(crate) fn is_serving(&self) -> bool {
        self.booted && self.booting.is_none()
    }

    // ---- inputs -----------------------------------------------------------

    /// The time of the next input; it never runs backwards inside the core,
    /// even if the wall clock does.
    pub(crate) fn advance_clock(&mut self, now_ms: i64) {
        self.now_ms = self.now_ms.max(now_ms);
    }

    /// A frame that came during start-up waits for it.
    pub(crate) fn park_early_frame(&mut self, frame: EarlyFrame) {
        let (conn, frame, checks) = frame;
        self.booting
            .as_mut()
            .expect("parked only while booting")
            .park(conn, frame, checks);
    }

    /// The frames that waited for start-up, once it is done, in order.
    pub(crate) fn take_early_frames(&mut self) -> VecDeque<EarlyFrame> {
        std::mem::take(&mut self.early_frames)
    }

    /// The connections the core closed since the last call.
    pub(crate) fn take_closed(&mut self) -> Vec<ConnId> {
        std::mem::take(&mut self.closed)
    }

    /// The segments the cleaner replaced since the last call.
    pub(crate) fn take_replaced_segments(&mut self) -> Vec<(PartitionDir, i64)> {
        std::mem::take(&mut self.replaced_segments)
    }

    pub(crate) fn handle_boot(&mut self, state: BootState) {
        assert!(!self.booted, "Input::Boot sent twice");
        self.booted = true;
        self.next_retention_check_ms = self.now_ms + self.config.retention_check_interval_ms;
        self.next_producer_expiry_ms =
            self.now_ms + self.config.producer_id_expiration_check_interval_ms;
        self.entropy = state.entropy;
        self.fetch_sessions.set_entropy(state.entropy);
        clean_shutdown::boot(self, state);
    }

    /// `Input::CleanShutdownDone`.
    pub(crate) fn clean_shutdown_done(&mut self, io: IoId, result: Result<(), crate::io::IoError>) {
        clean_shutdown::done(self, io, result);
    }

    /// Whether the stop reached its point where everything is durable and
    /// the clean-shutdown file went out: from then on nothing may be
    /// written (`Outbox::seal`), so no request is taken.
    pub(crate) fn past_stop_point(&self) -> bool {
        self.clean_shutdown_io.is_some() || self.stopped
    }

    /// `Input::Shutdown`.
    pub(crate) fn shut_down(&mut self) {
        self.shutting_down = true;
        // A recovering broker stops once recovery and its boot sync are
        // done (`check_stopped`); a sync started now would not cover what
        // recovery still writes, yet would be taken for the boot sync.
        if self.booting.is_none() {
            self.request_sync();
        }
    }

    /// Offers the driver the compression changes of topics (`Output::TopicCompression`).
    pub(crate) fn offer_compression_changes(&mut self) {
        for (topic, prep) in self.topics.take_compression_changes() {
            let offer = Output::TopicCompression { topic, prep };
            self.outbox.push(offer);
        }
    }

    /// The timers of the log and the coordinators, up to the sasl
    /// deadlines; the top's own (waiting fetches) follow.
    pub(crate) fn handle_timers(&mut self) {
        if self.clean_shutdown_io.is_some() {
            // The stop reached the point where everything is durable and
            // the clean-shutdown file is being written: nothing more is.
            return;
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
    }

    /// After `Input::Shutdown`: once nothing waits for a sync, every
    /// partition is checkpointed; once those are stored and nothing is in
    /// flight, the clean-shutdown file is written, and `Output::Stopped`
    /// follows its completion (`clean_shutdown`).
    pub(crate) fn check_stopped(&mut self) {
        let writing = self.clean_shutdown_io.is_some();
        if !self.shutting_down || self.stopped || writing || self.booting.is_some() {
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
        // A meta.db write in flight (a transaction's record, a request's)
        // may set off disk writes when it completes: the stop waits for it,
        // so that nothing is written after the clean-shutdown file.
        if !self.checkpoint_in_flight()
            && self.sync_in_flight.is_none()
            && self.pending_meta.is_empty()
        {
            clean_shutdown::write(self);
        }
    }

    // ---- polls --------------------------------------------------------------

    pub fn poll_output(&mut self) -> Option<Output> {
        self.outbox.pop()
    }

    /// The earliest time (ms since the UNIX epoch) a timer of the core is
    /// due; `None` before it serves.
    pub fn poll_timeout(&self) -> Option<i64> {
        if !self.is_serving() {
            return None;
        }
        let mut deadline_ms = self
            .next_retention_check_ms
            .min(self.next_producer_expiry_ms);
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
