//! Requests parked until something happens, and what wakes them: admin
//! requests until a topic's meta.db change is stored, produces and
//! WriteTxnMarkers until their appends are durable, fetches until data
//! arrives or their deadline, reads of the log, and InitProducerId until a
//! new block of ids is stored. What a parked request is and how it is
//! answered stays in its API's file.

use bytes::Bytes;
use kafka_protocol::messages::{InitProducerIdRequest, RequestKind};

use super::{Broker, MetaAction};
use crate::api;
use crate::api::fetch::WaitingFetch;
use crate::api::produce::PendingProduce;
use crate::api::reads::Reading;
use crate::api::write_txn_markers::PendingMarkers;
use crate::io::{FileRange, IoError, IoId, MetaOp};
use crate::meta;
use crate::producer::ids::{ProducerIdsRecord, META_KEY};
use crate::request::RequestCtx;

impl Broker {
    // ---- requests waiting for a meta.db change --------------------------------

    /// Parks a request until a meta.db change in flight is stored: an admin
    /// request for a topic being changed, or a transactional request for an
    /// id whose Complete record is being stored.
    pub(crate) fn defer_until_stored(&mut self, ctx: RequestCtx, request: RequestKind) {
        self.deferred.push((ctx, request));
    }

    /// Dispatches again, in arrival order, the admin requests that waited.
    pub(super) fn run_deferred(&mut self) {
        for (ctx, request) in std::mem::take(&mut self.deferred) {
            api::dispatch(self, ctx, request);
        }
    }

    // ---- produces and markers waiting for durability ------------------------

    /// Parks a produce until its data is durable.
    pub(crate) fn park_produce(&mut self, pending: PendingProduce) {
        self.pending_produces.push(pending);
    }

    /// Parks a WriteTxnMarkers until its markers are durable.
    pub(crate) fn park_markers(&mut self, pending: PendingMarkers) {
        self.pending_markers.push(pending);
    }

    /// Answers every pending produce and WriteTxnMarkers whose appends are
    /// now durable (or whose partition is gone).
    pub(crate) fn complete_durable_writes(&mut self) {
        let hold_deleted = self.config.planted_bug
            == Some(crate::config::PlantedBug::HoldProduceOfDeletedPartition);
        let mut i = 0;
        while i < self.pending_produces.len() {
            if self.pending_produces[i].settle(&self.topics, hold_deleted) {
                let (ctx, response) = self.pending_produces.remove(i).answer();
                self.respond(&ctx, response);
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.pending_markers.len() {
            if self.pending_markers[i].settle(&self.topics) {
                let (ctx, response) = self.pending_markers.remove(i).answer();
                self.respond(&ctx, response);
            } else {
                i += 1;
            }
        }
    }

    /// After a failed sync truncated the logs: every wait whose append was
    /// cut away fails (the client sends it again).
    pub(super) fn fail_undurable_writes(&mut self) {
        for pending in self.pending_produces.iter_mut() {
            pending.fail_cut(&self.topics);
        }
        for pending in self.pending_markers.iter_mut() {
            pending.fail_cut(&self.topics);
        }
    }

    // ---- fetches waiting for data -------------------------------------------

    /// Parks a fetch until data arrives or its deadline passes.
    pub(crate) fn park_fetch(&mut self, waiting: WaitingFetch) {
        self.waiting_fetches.push(waiting);
    }

    /// The waiting fetch at `index`, if there is one.
    pub(crate) fn waiting_fetch(&self, index: usize) -> Option<&WaitingFetch> {
        self.waiting_fetches.get(index)
    }

    /// Takes the waiting fetch at `index` out; the last one takes its place.
    pub(crate) fn unpark_fetch(&mut self, index: usize) -> WaitingFetch {
        self.waiting_fetches.swap_remove(index)
    }

    // ---- requests waiting for reads of the log ------------------------------

    /// The read of `range` for parked requests: the one in flight, or a new one.
    pub(crate) fn read_for_request(&mut self, range: FileRange) -> IoId {
        if let Some(io) = self.reading.in_flight_for(&range) {
            return io;
        }
        let io = self.emit_read(range.clone());
        self.reading.issued(io, range);
        io
    }

    /// Parks a request until the reads it awaits are in.
    pub(crate) fn park_reading(&mut self, reading: Reading) {
        self.reading.park(reading);
    }

    /// A request read completed: the requests that now have all they asked
    /// for, in arrival order. A failed read takes its partition offline.
    pub(super) fn request_read_done(
        &mut self,
        io: IoId,
        result: Result<Bytes, IoError>,
    ) -> Vec<Reading> {
        let stale = self.reading.is_stale(io);
        let (range, ready) = self.reading.complete(io, &result);
        if result.is_err() && !stale {
            self.take_offline(&range);
        }
        ready
    }

    // ---- InitProducerId waiting for a block of ids --------------------------

    /// A fresh producer id, or None while a new block must be stored first.
    pub(crate) fn take_producer_id(&mut self) -> Option<i64> {
        self.producer_ids.take()
    }

    /// Parks an InitProducerId until the next id block is stored, asking
    /// meta.db for one unless it is on its way.
    pub(crate) fn await_id_block(&mut self, ctx: RequestCtx, req: InitProducerIdRequest) {
        self.init_waiting.push((ctx, req));
        if let Some(record) = self.producer_ids.start_block() {
            let op = MetaOp::Put {
                key: META_KEY.to_vec(),
                value: meta::encode(&record),
            };
            self.emit_meta(vec![op], MetaAction::ProducerIdBlock(record));
        }
    }

    /// The id block's write completed: the requests that waited for it.
    pub(super) fn id_block_done(
        &mut self,
        record: &ProducerIdsRecord,
        stored: bool,
    ) -> Vec<(RequestCtx, InitProducerIdRequest)> {
        self.producer_ids.block_done(record, stored);
        std::mem::take(&mut self.init_waiting)
    }
}
