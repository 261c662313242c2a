//! Requests waiting for reads of the log (Fetch, ListOffsets).
//!
//! A handler that needs bytes from disk (batch headers to find where a fetch
//! starts, a batch to find a timestamp in) names the ranges; the request is
//! parked here with the bytes it has gathered so far, the reads go out as
//! `DiskOp::Read`s (one per distinct range in flight), and when the last one
//! is in the handler runs again from the start with everything gathered. The
//! gathered bytes belong to the request, so no other request can evict them
//! between two rounds, and each round gets further.
//!
//! A read that fails is remembered as failed for the request: the partition
//! answers KAFKA_STORAGE_ERROR and goes offline until a restart, as Kafka
//! takes a log dir that failed a read offline.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use kafka_protocol::messages::{FetchRequest, ListOffsetsRequest};

use super::RequestCtx;
use crate::broker::Broker;
use crate::io::{FileRange, IoError, IoId};
use crate::log::Reads;

/// What a parked request is.
pub(crate) enum Parked {
    Fetch { req: FetchRequest, deadline_ms: i64 },
    ListOffsets(ListOffsetsRequest),
}

/// What a request has read so far.
#[derive(Default)]
pub(crate) struct Gathered {
    pub reads: Reads,
    pub failed: BTreeSet<FileRange>,
}

impl Gathered {
    /// Whether a range this request needed failed to read.
    pub fn has_failed(&self, range: &FileRange) -> bool {
        self.failed.contains(range)
    }
}

struct Reading {
    ctx: RequestCtx,
    parked: Parked,
    gathered: Gathered,
    awaiting: BTreeSet<IoId>,
}

/// The requests waiting for reads, and the reads in flight.
#[derive(Default)]
pub(crate) struct ReadingRequests {
    requests: Vec<Reading>,
    in_flight: BTreeMap<IoId, FileRange>,
    by_range: BTreeMap<FileRange, IoId>,
}

impl ReadingRequests {
    pub fn is_request_read(&self, io: IoId) -> bool {
        self.in_flight.contains_key(&io)
    }

    pub fn forget_conn(&mut self, conn: crate::io::ConnId) {
        self.requests.retain(|r| r.ctx.conn != conn);
    }
}

/// Parks a request until `needs` are read.
pub(crate) fn park(
    b: &mut Broker,
    ctx: RequestCtx,
    parked: Parked,
    gathered: Gathered,
    needs: Vec<FileRange>,
) {
    assert!(!needs.is_empty(), "a request parks for some read");
    let mut awaiting = BTreeSet::new();
    for range in needs {
        let io = match b.reading.by_range.get(&range) {
            Some(io) => *io,
            None => {
                let io = b.emit_read(range.clone());
                b.reading.in_flight.insert(io, range.clone());
                b.reading.by_range.insert(range, io);
                io
            }
        };
        awaiting.insert(io);
    }
    b.reading.requests.push(Reading {
        ctx,
        parked,
        gathered,
        awaiting,
    });
}

/// A request read completed: every request waiting for it takes the bytes,
/// and those that have all they asked for run again, in arrival order.
pub(crate) fn done(b: &mut Broker, io: IoId, result: Result<Bytes, IoError>) {
    let range = b.reading.in_flight.remove(&io).expect("a request read");
    b.reading.by_range.remove(&range);
    if let Err(e) = &result {
        tracing::error!(dir = %range.dir.dir_name(), segment = range.segment_base, "read failed: {}", e.0);
    }
    let mut ready = Vec::new();
    let mut i = 0;
    while i < b.reading.requests.len() {
        let r = &mut b.reading.requests[i];
        if r.awaiting.remove(&io) {
            match &result {
                Ok(bytes) => {
                    r.gathered.reads.insert(range.clone(), bytes.clone());
                }
                Err(_) => {
                    r.gathered.failed.insert(range.clone());
                }
            }
        }
        if r.awaiting.is_empty() {
            ready.push(b.reading.requests.remove(i));
        } else {
            i += 1;
        }
    }
    if result.is_err() {
        b.take_offline(&range);
    }
    for r in ready {
        match r.parked {
            Parked::Fetch { req, deadline_ms } => {
                super::fetch::resume(b, r.ctx, req, deadline_ms, r.gathered)
            }
            Parked::ListOffsets(req) => super::list_offsets::resume(b, r.ctx, req, r.gathered),
        }
    }
}
