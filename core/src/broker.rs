//! The broker state machine: `handle` / `poll_output` / `poll_timeout`.
//!
//! Methods are grouped as in quinn-proto: construction and getters, `handle_*`
//! for each input, helpers the API handlers call (`respond`, `emit_disk`,
//! `request_sync`, `emit_meta`), and `poll_*`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::api::{self, RequestCtx};
use crate::checkpoint::{self, Checkpoints};
use crate::config::BrokerConfig;
use crate::conn::{Conn, Frame};
use crate::io::{
    BootState, ConnId, DiskOp, FileRange, FramePart, Input, IoError, IoId, MetaOp, Output,
};
use crate::log::{PartitionLog, SyncPoint};
use crate::producer::{ProducerIds, ProducerStates};
use crate::recovery;
use crate::topics::{PartitionKey, Topics};
use crate::versions;

/// A sync in flight: the durability point each dirty partition will reach.
struct SyncInFlight {
    io: IoId,
    points: Vec<(PartitionKey, SyncPoint)>,
}

/// The broker. See the crate docs.
pub struct Broker {
    pub(crate) config: BrokerConfig,
    /// The time of the input being handled (ms since the UNIX epoch).
    pub(crate) now_ms: i64,
    booted: bool,
    outputs: VecDeque<Output>,
    conns: BTreeMap<ConnId, Conn>,
    pub(crate) topics: Topics,
    next_io: IoId,
    /// Partitions with disk operations not yet covered by a sync.
    dirty: BTreeSet<PartitionKey>,
    sync_in_flight: Option<SyncInFlight>,
    /// Meta.db writes in flight and what to do when each completes.
    pub(crate) pending_meta: BTreeMap<IoId, api::MetaAction>,
    /// Admin requests waiting for a topic's meta.db change in flight.
    pub(crate) deferred_admin: Vec<(RequestCtx, RequestKind)>,
    /// Produce requests waiting for their data to be durable.
    pub(crate) pending_produces: Vec<api::produce::PendingProduce>,
    /// Fetch requests waiting for data or their max_wait_ms.
    pub(crate) waiting_fetches: Vec<api::fetch::WaitingFetch>,
    /// The group coordinator (consumer groups and committed offsets).
    pub(crate) groups: crate::group::Coordinator,
    next_retention_check_ms: i64,
    /// The producer id allocator (InitProducerId).
    pub(crate) producer_ids: ProducerIds,
    /// InitProducerId requests waiting for a new id block in meta.db.
    pub(crate) init_waiting: Vec<(RequestCtx, kafka_protocol::messages::InitProducerIdRequest)>,
    /// The transaction coordinator's ids.
    pub(crate) txns: crate::txn::Txns,
    /// Open and aborted transactions per partition (absent: none ever).
    pub(crate) partition_txns: BTreeMap<PartitionKey, crate::txn::PartitionTxns>,
    /// Producer state per partition; a missing entry is rebuilt from the
    /// log's tail on first use (after a restart or a cut log).
    pub(crate) producer_states: BTreeMap<PartitionKey, ProducerStates>,
    next_producer_expiry_ms: i64,
    /// The start-up until the broker serves (`crate::recovery`).
    pub(crate) booting: Option<recovery::Boot>,
    /// Partitions whose files failed a read: KAFKA_STORAGE_ERROR until a restart.
    pub(crate) offline: BTreeSet<PartitionKey>,
    /// Recovery checkpoints (`crate::checkpoint`).
    pub(crate) checkpoints: Checkpoints,
    /// Requests waiting for reads of the log (`api::reads`).
    pub(crate) reading: api::reads::ReadingRequests,
    /// `Input::Shutdown` came; `Output::Stopped` once all is durable.
    shutting_down: bool,
    stopped: bool,
}

impl Broker {
    pub fn new(config: BrokerConfig) -> Self {
        Self {
            groups: crate::group::Coordinator::new(&config),
            config,
            now_ms: 0,
            booted: false,
            outputs: VecDeque::new(),
            conns: BTreeMap::new(),
            topics: Topics::default(),
            next_io: 1,
            dirty: BTreeSet::new(),
            sync_in_flight: None,
            pending_meta: BTreeMap::new(),
            deferred_admin: Vec::new(),
            pending_produces: Vec::new(),
            waiting_fetches: Vec::new(),
            next_retention_check_ms: 0,
            producer_ids: ProducerIds::default(),
            init_waiting: Vec::new(),
            producer_states: BTreeMap::new(),
            next_producer_expiry_ms: 0,
            txns: crate::txn::Txns::default(),
            partition_txns: BTreeMap::new(),
            booting: None,
            offline: BTreeSet::new(),
            checkpoints: Checkpoints::default(),
            reading: Default::default(),
            shutting_down: false,
            stopped: false,
        }
    }

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

    // ---- inputs -----------------------------------------------------------

    pub fn handle(&mut self, now_ms: i64, input: Input) {
        // Time never runs backwards inside the core, even if the wall clock does.
        self.now_ms = self.now_ms.max(now_ms);
        match input {
            Input::Boot(state) => self.handle_boot(state),
            Input::Frame { conn, frame } => {
                assert!(self.booted, "a request arrived before Input::Boot");
                match self.booting.as_mut() {
                    Some(boot) => boot.park(conn, frame),
                    None => self.handle_frame_now(conn, frame),
                }
            }
            Input::Disconnected { conn } => self.handle_disconnected(conn),
            Input::SyncDone { io, result } => self.handle_sync_done(io, result),
            Input::MetaDone { io, result } => self.handle_meta_done(io, result),
            Input::ReadDone { io, result } => self.handle_read_done(io, result),
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
        self.check_stopped();
    }

    fn handle_boot(&mut self, state: BootState) {
        assert!(!self.booted, "Input::Boot sent twice");
        self.booted = true;
        self.next_retention_check_ms = self.now_ms + self.config.retention_check_interval_ms;
        self.next_producer_expiry_ms =
            self.now_ms + self.config.producer_id_expiration_check_interval_ms;
        recovery::start(self, state);
    }

    /// Handles one request frame (after start-up: frames that came during it
    /// were parked and come here in order).
    pub(crate) fn handle_frame_now(&mut self, conn: ConnId, frame: Bytes) {
        let state = self.conns.entry(conn).or_default();
        if state.in_flight() >= crate::limits::CONN_REQUESTS_IN_FLIGHT_MAX as u64 {
            tracing::warn!(conn, "too many requests in flight; closing");
            return self.close(conn);
        }
        // The first 8 bytes are api key, api version and correlation id in every
        // header version; read them raw so an unsupported version can be answered.
        if frame.len() < 8 {
            return self.close(conn);
        }
        let key_raw = i16::from_be_bytes([frame[0], frame[1]]);
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let Ok(api_key) = ApiKey::try_from(key_raw) else {
            tracing::debug!(conn, key_raw, "unknown api key; closing");
            return self.close(conn);
        };
        let seq = self
            .conns
            .get_mut(&conn)
            .expect("entry made above")
            .take_seq();
        let mut ctx = RequestCtx {
            conn,
            seq,
            api_key,
            version,
            correlation_id,
            client_id: Default::default(),
        };
        if !versions::is_supported(api_key, version) {
            if api_key == ApiKey::ApiVersions {
                // Kafka answers an unknown ApiVersions version with a v0 body
                // carrying UNSUPPORTED_VERSION and the versions it does serve.
                return api::api_versions::respond_unsupported(self, ctx);
            }
            tracing::debug!(conn, ?api_key, version, "unsupported version; closing");
            return self.close(conn);
        }
        let mut buf = frame;
        let header_version = api_key.request_header_version(version);
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let header = RequestHeader::decode(&mut buf, header_version)?;
            let request = RequestKind::decode(api_key, &mut buf, version)?;
            anyhow::Ok((header, request))
        }));
        match decoded {
            Ok(Ok((header, request))) => {
                // Kafka names members after their client id.
                ctx.client_id = header.client_id.unwrap_or_default();
                api::dispatch(self, ctx, request)
            }
            Ok(Err(e)) => {
                tracing::debug!(
                    conn,
                    ?api_key,
                    version,
                    "undecodable request ({e}); closing"
                );
                self.close(conn)
            }
            Err(_) => {
                tracing::warn!(conn, ?api_key, version, "decoder panicked; closing");
                self.close(conn)
            }
        }
    }

    fn handle_disconnected(&mut self, conn: ConnId) {
        self.conns.remove(&conn);
        if let Some(boot) = self.booting.as_mut() {
            boot.forget_conn(conn);
        }
        self.reading.forget_conn(conn);
        self.waiting_fetches.retain(|f| f.ctx.conn != conn);
        self.deferred_admin.retain(|(ctx, _)| ctx.conn != conn);
    }

    fn handle_sync_done(&mut self, io: IoId, result: Result<(), IoError>) {
        let inflight = self.sync_in_flight.take();
        let inflight = inflight.expect("SyncDone without a sync in flight");
        assert_eq!(
            inflight.io, io,
            "SyncDone for a sync that is not the one in flight"
        );
        let ok = result.is_ok();
        match result {
            Ok(()) => {
                let mut moved = Vec::with_capacity(inflight.points.len());
                for (key, point) in inflight.points {
                    let Some(log) = self.topics.partition_mut_by_key(&key) else {
                        continue;
                    };
                    log.mark_durable(point);
                    let hw = log.high_watermark();
                    if let Some(txns) = self.partition_txns.get_mut(&key) {
                        txns.mark_durable(hw);
                    }
                    moved.push(key);
                }
                checkpoint::write_due(self, moved, checkpoint::Due::Bytes);
            }
            Err(e) => {
                // After a failed fsync the page cache cannot be trusted
                // (fsyncgate): cut every partition back to what is known durable,
                // fail whoever waited on the rest, and sync the cut itself.
                tracing::error!("sync failed: {}; truncating to the durable point", e.0);
                let mut keys: BTreeSet<PartitionKey> =
                    inflight.points.into_iter().map(|(k, _)| k).collect();
                keys.extend(self.dirty.iter().cloned());
                for key in keys {
                    crate::partition::truncate_to_durable(self, &key);
                }
                api::produce::fail_undurable(self);
            }
        }
        if self.booting.as_ref().is_some_and(|b| b.is_boot_sync(io)) {
            recovery::sync_done(self, ok);
        }
        api::produce::complete_durable(self);
        crate::txn::complete::on_sync(self);
        api::fetch::wake(self, true);
        // What was appended meanwhile rides the next sync (the calls above
        // may have started it already).
        self.request_sync();
    }

    fn handle_read_done(&mut self, io: IoId, result: Result<Bytes, IoError>) {
        if self.booting.as_ref().is_some_and(|b| b.is_boot_read(io)) {
            return recovery::read_done(self, io, result);
        }
        assert!(
            self.reading.is_request_read(io),
            "ReadDone for a read nobody issued"
        );
        api::reads::done(self, io, result);
    }

    fn handle_meta_done(&mut self, io: IoId, result: Result<(), IoError>) {
        let action = self
            .pending_meta
            .remove(&io)
            .expect("MetaDone for an unknown write");
        if let Err(e) = &result {
            tracing::error!("meta.db write failed: {}", e.0);
        }
        api::apply_meta(self, action, result.is_ok());
    }

    fn handle_timers(&mut self) {
        if !self.booted || self.booting.is_some() {
            return; // nothing runs on a log still being recovered
        }
        if self.now_ms >= self.next_retention_check_ms {
            self.next_retention_check_ms =
                self.now_ms + self.config.retention_check_interval_ms.max(1);
            let ops = self.topics.apply_retention(&self.config, self.now_ms);
            for (key, op) in ops {
                self.emit_disk(key, op);
            }
            // Aborted transactions below the new log starts are no longer fetched.
            for (key, txns) in self.partition_txns.iter_mut() {
                if let Some(log) = self.topics.partition_by_key(key) {
                    txns.forget_below(log.log_start_offset());
                }
            }
        }
        if self.now_ms >= self.next_producer_expiry_ms {
            let interval_ms = self.config.producer_id_expiration_check_interval_ms.max(1);
            self.next_producer_expiry_ms = self.now_ms + interval_ms;
            let expiration_ms = self.config.producer_id_expiration_ms;
            for states in self.producer_states.values_mut() {
                states.expire(self.now_ms, expiration_ms);
            }
        }
        self.groups.tick(self.now_ms);
        crate::group::flush(self);
        crate::txn::timers::tick(self);
        checkpoint::tick(self);
        api::fetch::wake(self, false);
    }

    /// After `Input::Shutdown`: once nothing waits for a sync, every
    /// partition is checkpointed; once those are stored, `Output::Stopped`.
    fn check_stopped(&mut self) {
        if !self.shutting_down || self.stopped || self.booting.is_some() {
            return;
        }
        if self.sync_in_flight.is_some() || !self.dirty.is_empty() {
            return;
        }
        if !self.checkpoints.in_flight() {
            let keys = self.topics.keys();
            checkpoint::write_due(self, keys, checkpoint::Due::Now);
        }
        if !self.checkpoints.in_flight() {
            self.stopped = true;
            self.outputs.push_back(Output::Stopped);
        }
    }

    /// A partition whose files failed a read answers KAFKA_STORAGE_ERROR
    /// until a restart (Kafka takes the failed log dir offline). A read of a
    /// segment the log no longer holds (retention or a topic deletion got
    /// there first) is a race, not a failed disk: the reader was answered
    /// with an error or a closed connection, and nothing goes offline.
    pub(crate) fn take_offline(&mut self, range: &FileRange) {
        let dir = &range.dir;
        let Some(topic) = self.topics.get(&dir.topic) else {
            return;
        };
        let key = topic.key(&dir.topic, dir.partition);
        let held = self
            .topics
            .partition_by_key(&key)
            .is_some_and(|log| log.holds(range));
        if held && self.offline.insert(key) {
            tracing::error!(dir = %dir.dir_name(), "partition offline until restart");
        }
    }

    // ---- helpers for API handlers ------------------------------------------

    /// Sends `response` for request `ctx`, after every earlier request of the
    /// same connection has been answered.
    pub(crate) fn respond(&mut self, ctx: &RequestCtx, response: ResponseKind) {
        let mut buf = BytesMut::new();
        let header = ResponseHeader::default().with_correlation_id(ctx.correlation_id);
        let header_version = ctx.api_key.response_header_version(ctx.version);
        let encoded = header
            .encode(&mut buf, header_version)
            .and_then(|_| response.encode(&mut buf, ctx.version));
        if let Err(e) = encoded {
            // A response we cannot encode is our bug, but the client must not
            // hang waiting: close the connection and say why.
            tracing::error!(?ctx.api_key, ctx.version, "cannot encode response: {e}");
            return self.close(ctx.conn);
        }
        self.release(ctx, Some(buf.freeze()));
    }

    /// Marks request `ctx` as answered with no response (acks=0 produce).
    pub(crate) fn respond_none(&mut self, ctx: &RequestCtx) {
        self.release(ctx, None);
    }

    /// Sends a raw, already encoded body (ApiVersions' v0 fallback).
    pub(crate) fn respond_raw(&mut self, ctx: &RequestCtx, body: Bytes) {
        let mut buf = BytesMut::with_capacity(4 + body.len());
        buf.extend_from_slice(&ctx.correlation_id.to_be_bytes());
        buf.extend_from_slice(&body);
        self.release(ctx, Some(buf.freeze()));
    }

    /// Sends a response made of parts (a Fetch whose records are file ranges).
    pub(crate) fn respond_parts(&mut self, ctx: &RequestCtx, parts: Vec<FramePart>) {
        self.release_frame(ctx, Some(Frame::Parts(parts)));
    }

    fn release(&mut self, ctx: &RequestCtx, frame: Option<Bytes>) {
        self.release_frame(ctx, frame.map(Frame::Bytes));
    }

    fn release_frame(&mut self, ctx: &RequestCtx, frame: Option<Frame>) {
        let Some(conn) = self.conns.get_mut(&ctx.conn) else {
            return; // the connection is gone; nobody to answer
        };
        for frame in conn.finish(ctx.seq, frame) {
            let conn = ctx.conn;
            self.outputs.push_back(match frame {
                Frame::Bytes(frame) => Output::Response { conn, frame },
                Frame::Parts(parts) => Output::ResponseParts { conn, parts },
            });
        }
    }

    /// Asks the driver for a range of a segment file; `Input::ReadDone` answers.
    pub(crate) fn emit_read(&mut self, range: FileRange) -> IoId {
        let io = self.take_io();
        self.outputs
            .push_back(Output::Disk(DiskOp::Read { io, range }));
        io
    }

    /// The sync in flight, if any.
    pub(crate) fn sync_in_flight_io(&self) -> Option<IoId> {
        self.sync_in_flight.as_ref().map(|s| s.io)
    }

    pub(crate) fn close(&mut self, conn: ConnId) {
        if self.conns.remove(&conn).is_some() {
            self.waiting_fetches.retain(|f| f.ctx.conn != conn);
            self.outputs.push_back(Output::Close { conn });
        }
    }

    /// Emits a disk operation for a partition; it becomes durable with the
    /// next sync.
    pub(crate) fn emit_disk(&mut self, key: PartitionKey, op: DiskOp) {
        assert!(
            !matches!(op, DiskOp::Sync { .. } | DiskOp::Read { .. }),
            "syncs are started by request_sync, reads by emit_read"
        );
        self.dirty.insert(key);
        self.outputs.push_back(Output::Disk(op));
    }

    /// Asks for everything emitted so far to become durable. One sync is in
    /// flight at a time; appends made meanwhile ride the next one together
    /// (group commit).
    pub(crate) fn request_sync(&mut self) {
        if self.sync_in_flight.is_none() && !self.dirty.is_empty() {
            self.start_sync();
        }
    }

    fn start_sync(&mut self) {
        assert!(
            self.sync_in_flight.is_none(),
            "one sync in flight at a time"
        );
        let io = self.take_io();
        let mut points = Vec::with_capacity(self.dirty.len());
        for key in std::mem::take(&mut self.dirty) {
            if let Some(log) = self.topics.partition_mut_by_key(&key) {
                points.push((key, log.sync_point()));
            }
        }
        self.sync_in_flight = Some(SyncInFlight { io, points });
        self.outputs.push_back(Output::Disk(DiskOp::Sync { io }));
    }

    /// Writes a batch to meta.db; `action` runs when it completes.
    pub(crate) fn emit_meta(&mut self, ops: Vec<MetaOp>, action: api::MetaAction) {
        let io = self.take_io();
        self.pending_meta.insert(io, action);
        self.outputs.push_back(Output::Meta { io, ops });
    }

    fn take_io(&mut self) -> IoId {
        let io = self.next_io;
        self.next_io += 1;
        io
    }

    // ---- polls --------------------------------------------------------------

    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
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
        Some(deadline_ms)
    }
}
