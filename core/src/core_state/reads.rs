//! Reads of the log that parked requests wait for (Fetch, ListOffsets: see
//! `api::reads`): one `DiskOp::Read` per distinct range in flight, shared by
//! every request that needs it. The requests themselves are the top's.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::Core;
use crate::io::{FileRange, IoError, IoId, PartitionDir};

/// The reads in flight for requests.
#[derive(Default)]
pub(crate) struct RequestReads {
    in_flight: BTreeMap<IoId, FileRange>,
    by_range: BTreeMap<FileRange, IoId>,
    /// Reads in flight of a segment the cleaner has since replaced: their
    /// bytes are of the old file and are not handed to anyone.
    stale: BTreeSet<IoId>,
}

impl RequestReads {
    /// The cleaner swapped a new file in for a segment: the reads of the
    /// old one in flight are not given out when they complete.
    pub fn forget_segment(&mut self, dir: &PartitionDir, segment_base: i64) {
        for (io, range) in &self.in_flight {
            if range.dir == *dir && range.segment_base == segment_base {
                self.stale.insert(*io);
                self.by_range.remove(range);
            }
        }
    }
}

impl Core {
    /// The read of `range` for parked requests: the one in flight, or a new one.
    pub(crate) fn read_for_request(&mut self, range: FileRange) -> IoId {
        if let Some(io) = self.reads.by_range.get(&range) {
            return *io;
        }
        let io = self.emit_read(range.clone());
        self.reads.in_flight.insert(io, range.clone());
        self.reads.by_range.insert(range, io);
        io
    }

    /// Whether `io` is a read requests wait for.
    pub(crate) fn is_request_read(&self, io: IoId) -> bool {
        self.reads.in_flight.contains_key(&io)
    }

    /// A request read completed: the range it read, and whether it was of
    /// a segment replaced since (its bytes go to nobody). A failed read
    /// takes its partition offline.
    pub(crate) fn request_read_done(
        &mut self,
        io: IoId,
        result: &Result<Bytes, IoError>,
    ) -> (FileRange, bool) {
        let range = self.reads.in_flight.remove(&io).expect("a request read");
        let stale = self.reads.stale.remove(&io);
        if !stale {
            self.reads.by_range.remove(&range);
        }
        if let Err(e) = result {
            tracing::error!(dir = %range.dir.dir_name(), segment = range.segment_base, "read failed: {}", e.0);
            if !stale {
                self.take_offline(&range);
            }
        }
        (range, stale)
    }
}
