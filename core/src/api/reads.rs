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

use std::collections::BTreeSet;

use bytes::Bytes;
use kafka_protocol::messages::{FetchRequest, ListOffsetsRequest};

use super::{Cx, RequestCtx};
use crate::fetch_sessions::SessionUse;
use crate::io::{FileRange, IoError, IoId};
use crate::log::Reads;

/// What a parked request is.
pub(crate) enum Parked {
    Fetch {
        req: FetchRequest,
        session: SessionUse,
        deadline_ms: i64,
    },
    ListOffsets(ListOffsetsRequest),
}

/// What a request has read so far, and the topics it may not read.
#[derive(Default)]
pub(crate) struct Gathered {
    pub reads: Reads,
    pub failed: BTreeSet<FileRange>,
    /// Topics the ACLs refused when the request came in (decided once, as
    /// Kafka does): answered TOPIC_AUTHORIZATION_FAILED, never read.
    pub refused: BTreeSet<String>,
}

impl Gathered {
    /// Nothing read yet; `refused` topics are never read.
    pub fn refusing(refused: BTreeSet<String>) -> Self {
        Self {
            refused,
            ..Self::default()
        }
    }

    /// Whether a range this request needed failed to read.
    pub fn has_failed(&self, range: &FileRange) -> bool {
        self.failed.contains(range)
    }
}

/// A request parked for reads.
pub(crate) struct Reading {
    ctx: RequestCtx,
    parked: Parked,
    gathered: Gathered,
    awaiting: BTreeSet<IoId>,
}

/// The requests waiting for reads (the reads in flight are the core's:
/// `core_state::RequestReads`).
#[derive(Default)]
pub(crate) struct ReadingRequests {
    requests: Vec<Reading>,
}

impl ReadingRequests {
    pub fn forget_conn(&mut self, conn: crate::io::ConnId) {
        self.requests.retain(|r| r.ctx.conn != conn);
    }

    /// The cleaner swapped a new file in for a segment: what requests read
    /// of the old one is dropped (they read again, at the new positions).
    pub fn forget_segment(&mut self, dir: &crate::io::PartitionDir, segment_base: i64) {
        let of_segment = |r: &FileRange| r.dir == *dir && r.segment_base == segment_base;
        for r in &mut self.requests {
            r.gathered.reads.retain(|range, _| !of_segment(range));
            r.gathered.failed.retain(|range| !of_segment(range));
        }
    }

    pub fn park(&mut self, reading: Reading) {
        self.requests.push(reading);
    }

    /// Read `io` of `range` completed: every request waiting for it takes
    /// the bytes (or notes the failure), unless the read was `stale` (of a
    /// segment replaced since). Returns the requests that now have all
    /// they asked for, in arrival order.
    pub fn complete(
        &mut self,
        io: IoId,
        range: FileRange,
        stale: bool,
        result: &Result<Bytes, IoError>,
    ) -> Vec<Reading> {
        let mut ready = Vec::new();
        let mut i = 0;
        while i < self.requests.len() {
            let r = &mut self.requests[i];
            if r.awaiting.remove(&io) && !stale {
                match result {
                    Ok(bytes) => {
                        r.gathered.reads.insert(range.clone(), bytes.clone());
                    }
                    Err(_) => {
                        r.gathered.failed.insert(range.clone());
                    }
                }
            }
            if r.awaiting.is_empty() {
                ready.push(self.requests.remove(i));
            } else {
                i += 1;
            }
        }
        ready
    }
}

/// Parks a request until `needs` are read.
pub(crate) fn park(
    b: &mut Cx,
    ctx: RequestCtx,
    parked: Parked,
    gathered: Gathered,
    needs: Vec<FileRange>,
) {
    assert!(!needs.is_empty(), "a request parks for some read");
    let awaiting = needs
        .into_iter()
        .map(|range| b.core.read_for_request(range))
        .collect();
    b.park_reading(Reading {
        ctx,
        parked,
        gathered,
        awaiting,
    });
}

/// Requests whose reads are all in run again from the start, in arrival order.
pub(crate) fn resume(b: &mut Cx, ready: Vec<Reading>) {
    for r in ready {
        match r.parked {
            Parked::Fetch {
                req,
                session,
                deadline_ms,
            } => super::fetch::resume(b, r.ctx, req, session, deadline_ms, r.gathered),
            Parked::ListOffsets(req) => super::list_offsets::resume(b, r.ctx, req, r.gathered),
        }
    }
}
