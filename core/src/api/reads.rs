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

/// The requests waiting for reads, and the reads in flight.
#[derive(Default)]
pub(crate) struct ReadingRequests {
    requests: Vec<Reading>,
    in_flight: BTreeMap<IoId, FileRange>,
    by_range: BTreeMap<FileRange, IoId>,
    /// Reads in flight of a segment the cleaner has since replaced: their
    /// bytes are of the old file and are not handed to anyone.
    stale: BTreeSet<IoId>,
}

impl ReadingRequests {
    pub fn is_request_read(&self, io: IoId) -> bool {
        self.in_flight.contains_key(&io)
    }

    pub fn forget_conn(&mut self, conn: crate::io::ConnId) {
        self.requests.retain(|r| r.ctx.conn != conn);
    }

    /// The read in flight for `range`, if one is.
    pub fn in_flight_for(&self, range: &FileRange) -> Option<IoId> {
        self.by_range.get(range).copied()
    }

    /// The cleaner swapped a new file in for a segment: what requests read
    /// of the old one is dropped (they read again, at the new positions),
    /// and the reads of it in flight are not given out when they complete.
    pub fn forget_segment(&mut self, dir: &crate::io::PartitionDir, segment_base: i64) {
        let of_segment = |r: &FileRange| r.dir == *dir && r.segment_base == segment_base;
        for r in &mut self.requests {
            r.gathered.reads.retain(|range, _| !of_segment(range));
            r.gathered.failed.retain(|range| !of_segment(range));
        }
        for (io, range) in &self.in_flight {
            if of_segment(range) {
                self.stale.insert(*io);
                self.by_range.remove(range);
            }
        }
    }

    /// Whether read `io` was of a segment replaced since it was issued.
    pub fn is_stale(&self, io: IoId) -> bool {
        self.stale.contains(&io)
    }

    /// A read of `range` was issued as `io`.
    pub fn issued(&mut self, io: IoId, range: FileRange) {
        self.in_flight.insert(io, range.clone());
        self.by_range.insert(range, io);
    }

    pub fn park(&mut self, reading: Reading) {
        self.requests.push(reading);
    }

    /// Read `io` completed: every request waiting for it takes the bytes (or
    /// notes the failure). Returns the range read and the requests that now
    /// have all they asked for, in arrival order.
    pub fn complete(
        &mut self,
        io: IoId,
        result: &Result<Bytes, IoError>,
    ) -> (FileRange, Vec<Reading>) {
        let range = self.in_flight.remove(&io).expect("a request read");
        let stale = self.stale.remove(&io);
        if !stale {
            self.by_range.remove(&range);
        }
        if let Err(e) = result {
            tracing::error!(dir = %range.dir.dir_name(), segment = range.segment_base, "read failed: {}", e.0);
        }
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
        (range, ready)
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
    let awaiting = needs
        .into_iter()
        .map(|range| b.read_for_request(range))
        .collect();
    b.park_reading(Reading {
        ctx,
        parked,
        gathered,
        awaiting,
    });
}

/// Requests whose reads are all in run again from the start, in arrival order.
pub(crate) fn resume(b: &mut Broker, ready: Vec<Reading>) {
    for r in ready {
        match r.parked {
            Parked::Fetch { req, deadline_ms } => {
                super::fetch::resume(b, r.ctx, req, deadline_ms, r.gathered)
            }
            Parked::ListOffsets(req) => super::list_offsets::resume(b, r.ctx, req, r.gathered),
        }
    }
}
