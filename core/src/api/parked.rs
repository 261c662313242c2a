//! Requests parked until something happens, and what wakes them: admin
//! requests until a topic's meta.db change is stored, produces and
//! WriteTxnMarkers until their appends are durable, fetches until data
//! arrives or their deadline, reads of the log, topic creations until a
//! removal is durable, InitProducerId until a new block of ids is stored,
//! and the handlers' own meta.db writes until they complete. What a parked
//! request is and how it is answered stays in its API's file.
//!
//! The core (`crate::core_state::Core`) knows nothing of them. A handler reaches
//! both through its context, `Cx`: the core's methods through `cx.core`,
//! and the parked requests through `Cx`'s own.

use std::collections::BTreeMap;

use kafka_protocol::messages::{InitProducerIdRequest, RequestKind};

use super::create_topics::PendingCreate;
use super::fetch::WaitingFetch;
use super::produce::PendingProduce;
use super::reads::{Reading, ReadingRequests};
use super::write_txn_markers::PendingMarkers;
use super::ApiWrite;
use crate::core_state::{Core, MetaAction};
use crate::io::{ConnId, IoId, MetaOp};
use crate::meta;
use crate::produce_checks::ProduceChecks;
use crate::producer::ids::META_KEY;
use crate::request::RequestCtx;

/// The parked requests (see the module docs). The broker holds them beside
/// the core; a handler reaches them through `Cx`.
#[derive(Default)]
pub(crate) struct Parked {
    /// Requests waiting for a meta.db change in flight.
    deferred: Vec<(RequestCtx, RequestKind)>,
    /// Topic creations waiting for a removal to become durable.
    creates: Vec<PendingCreate>,
    /// Produce requests waiting for their data to be durable.
    produces: Vec<PendingProduce>,
    /// WriteTxnMarkers requests waiting for their markers to be durable.
    markers: Vec<PendingMarkers>,
    /// Fetch requests waiting for data or their max_wait_ms.
    fetches: Vec<WaitingFetch>,
    /// Requests waiting for reads of the log (`api::reads`).
    reading: ReadingRequests,
    /// InitProducerId requests waiting for a new id block in meta.db.
    init_waiting: Vec<(RequestCtx, InitProducerIdRequest)>,
    /// The handlers' own meta.db writes in flight, by their I/O id.
    writes: BTreeMap<IoId, ApiWrite>,
}

impl Parked {
    /// The earliest deadline of a waiting fetch.
    pub fn fetch_deadline_ms(&self) -> Option<i64> {
        self.fetches.iter().map(|f| f.deadline_ms).min()
    }

    /// The client went away: what it had parked goes.
    pub fn disconnected(&mut self, conn: ConnId) {
        self.reading.forget_conn(conn);
        self.fetches.retain(|f| f.ctx.conn != conn);
        self.deferred.retain(|(ctx, _)| ctx.conn != conn);
    }
}

/// A handler's context: the core, the parked requests, and what the driver
/// read of the frame being handled.
pub(crate) struct Cx<'a> {
    pub core: &'a mut Core,
    parked: &'a mut Parked,
    checks: Option<ProduceChecks>,
}

impl<'a> Cx<'a> {
    /// A context for one step of the top. What the core closed or replaced
    /// since the last step is dropped from the parked requests first, as if
    /// at the moment it happened.
    pub fn new(core: &'a mut Core, parked: &'a mut Parked) -> Self {
        let mut cx = Self {
            core,
            parked,
            checks: None,
        };
        cx.catch_up();
        cx
    }

    /// Drops what connections the core closed had parked, and what parked
    /// requests read of segments the cleaner replaced.
    pub fn catch_up(&mut self) {
        for conn in self.core.take_closed() {
            self.parked.fetches.retain(|f| f.ctx.conn != conn);
        }
        for (dir, segment_base) in self.core.take_replaced_segments() {
            self.parked.reading.forget_segment(&dir, segment_base);
        }
    }

    /// What the driver read of the request frame being handled.
    pub fn set_produce_checks(&mut self, checks: Option<ProduceChecks>) {
        self.checks = checks;
    }

    /// The client went away: what the core and the parked requests hold
    /// for it goes.
    pub fn disconnected(&mut self, conn: ConnId) {
        self.core.disconnected(conn);
        self.parked.disconnected(conn);
    }

    /// The handler's meta.db write that `io` was, now complete.
    pub fn take_write(&mut self, io: IoId) -> ApiWrite {
        let writes = &mut self.parked.writes;
        writes
            .remove(&io)
            .expect("a handler's meta.db write is parked")
    }

    /// What the driver read of the Produce request being handled, once.
    pub fn take_produce_checks(&mut self) -> Option<ProduceChecks> {
        self.checks.take()
    }

    /// Writes a batch to meta.db; the handler finishes with `write` when it
    /// completes (`api::apply_meta`).
    pub fn emit_meta(&mut self, ops: Vec<MetaOp>, write: ApiWrite) {
        let io = self.core.emit_meta(ops, MetaAction::Request);
        self.parked.writes.insert(io, write);
    }

    // ---- requests waiting for a meta.db change --------------------------------

    /// Parks a request until a meta.db change in flight is stored: an admin
    /// request for a topic being changed, or a transactional request for an
    /// id whose Complete record is being stored.
    pub fn defer_until_stored(&mut self, ctx: RequestCtx, request: RequestKind) {
        self.parked.deferred.push((ctx, request));
    }

    /// Dispatches again, in arrival order, the requests that waited.
    pub fn run_deferred(&mut self) {
        for (ctx, request) in std::mem::take(&mut self.parked.deferred) {
            super::dispatch(self, ctx, request);
        }
    }

    // ---- topic creations waiting for a removal --------------------------------

    /// Parks a topic creation until the removals it waits for are durable
    /// (`api::create_topics::store`).
    pub fn park_create(&mut self, pending: PendingCreate) {
        self.parked.creates.push(pending);
    }

    /// The parked topic creations, for `api::create_topics` to run again.
    pub fn take_parked_creates(&mut self) -> Vec<PendingCreate> {
        std::mem::take(&mut self.parked.creates)
    }

    // ---- produces and markers waiting for durability ------------------------

    /// Parks a produce until its data is durable.
    pub fn park_produce(&mut self, pending: PendingProduce) {
        self.parked.produces.push(pending);
    }

    /// Parks a WriteTxnMarkers until its markers are durable.
    pub fn park_markers(&mut self, pending: PendingMarkers) {
        self.parked.markers.push(pending);
    }

    /// Answers every pending produce and WriteTxnMarkers whose appends are
    /// now durable (or whose partition is gone).
    pub fn complete_durable_writes(&mut self) {
        let hold_deleted = self.core.config().planted_bug
            == Some(crate::config::PlantedBug::HoldProduceOfDeletedPartition);
        let produces = &mut self.parked.produces;
        let mut i = 0;
        while i < produces.len() {
            if produces[i].settle(self.core.topics(), hold_deleted) {
                let (ctx, response) = produces.remove(i).answer();
                self.core.respond(&ctx, response);
            } else {
                i += 1;
            }
        }
        let markers = &mut self.parked.markers;
        let mut i = 0;
        while i < markers.len() {
            if markers[i].settle(self.core.topics()) {
                let (ctx, response) = markers.remove(i).answer();
                self.core.respond(&ctx, response);
            } else {
                i += 1;
            }
        }
    }

    /// After a failed sync truncated the logs: every wait whose append was
    /// cut away fails (the client sends it again).
    pub fn fail_undurable_writes(&mut self) {
        for pending in self.parked.produces.iter_mut() {
            pending.fail_cut(self.core.topics());
        }
        for pending in self.parked.markers.iter_mut() {
            pending.fail_cut(self.core.topics());
        }
    }

    // ---- fetches waiting for data -------------------------------------------

    /// Parks a fetch until data arrives or its deadline passes.
    pub fn park_fetch(&mut self, waiting: WaitingFetch) {
        self.catch_up();
        self.parked.fetches.push(waiting);
    }

    /// The waiting fetch at `index`, if there is one (after `catch_up`).
    pub fn waiting_fetch(&self, index: usize) -> Option<&WaitingFetch> {
        self.parked.fetches.get(index)
    }

    /// Takes the waiting fetch at `index` out; the last one takes its place.
    pub fn unpark_fetch(&mut self, index: usize) -> WaitingFetch {
        self.catch_up();
        self.parked.fetches.swap_remove(index)
    }

    // ---- requests waiting for reads of the log ------------------------------

    /// Parks a request until the reads it awaits are in.
    pub fn park_reading(&mut self, reading: Reading) {
        self.catch_up();
        self.parked.reading.park(reading);
    }

    /// Request read `io` completed: the requests that now have all they
    /// asked for, in arrival order. A failed read takes its partition
    /// offline.
    pub fn request_read_done(
        &mut self,
        io: crate::io::IoId,
        result: Result<bytes::Bytes, crate::io::IoError>,
    ) -> Vec<Reading> {
        self.catch_up();
        let (range, stale) = self.core.request_read_done(io, &result);
        self.parked.reading.complete(io, range, stale, &result)
    }

    // ---- InitProducerId waiting for a block of ids --------------------------

    /// Parks an InitProducerId until the next id block is stored, asking
    /// meta.db for one unless it is on its way.
    pub fn await_id_block(&mut self, ctx: RequestCtx, req: InitProducerIdRequest) {
        self.parked.init_waiting.push((ctx, req));
        if let Some(record) = self.core.start_id_block() {
            let op = MetaOp::Put {
                key: META_KEY.to_vec(),
                value: meta::encode(&record),
            };
            self.core
                .emit_meta(vec![op], MetaAction::ProducerIdBlock(record));
        }
    }

    /// The id block's write completed: the requests that waited for it.
    pub fn take_init_waiting(&mut self) -> Vec<(RequestCtx, InitProducerIdRequest)> {
        std::mem::take(&mut self.parked.init_waiting)
    }
}
