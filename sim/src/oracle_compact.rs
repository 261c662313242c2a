//! The oracle's view of a compacted main topic (`compacted = true`, or a
//! swarm run that drew it). The log cleaner may take a record out of the
//! log when a later committed record of its key is there, or when its
//! transaction aborted; it never changes a record, moves one, or takes a
//! key's latest committed record (the sim writes no tombstones). So where
//! the other checks say a record must still be in the final log, on a
//! compacted topic it must be there unless `may_be_gone` says the cleaner
//! had the right to remove it:
//!
//! - an acknowledged record is in the final log at its offset, or a later
//!   committed record of its key is, or its transaction did not answer
//!   commit (`oracle::check_acks`);
//! - a record a consumer was given likewise (`oracle::check_seen`);
//! - a transaction answered commit has each of its records committed in
//!   the final log or overwritten by a later committed record of its key,
//!   and none aborted; one answered abort has none committed
//!   (`oracle_txn::check_atomic`).
//!
//! Whatever the cleaner keeps must read as before: one record per offset,
//! offsets increasing, only records some producer made, at the offset they
//! were acknowledged with (the checks shared with uncompacted runs).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::client::values::{self, RecordId};
use crate::history::History;
use crate::oracle_txn::{Fate, View};

pub struct Compaction {
    /// (partition, key) -> offset of the key's last committed record in
    /// the final log (records outside transactions count as committed).
    latest: BTreeMap<(i32, Bytes), i64>,
    /// Records of transactions not answered commit: aborted, unknown, or
    /// never asked to commit; the cleaner may have removed them.
    not_known_committed: BTreeSet<RecordId>,
}

impl Compaction {
    pub fn new(h: &History, main_topic: &str, view: &View) -> Self {
        let mut latest: BTreeMap<(i32, Bytes), i64> = BTreeMap::new();
        for ((topic, p, offset), (value, fate)) in view {
            if topic != main_topic || *fate != Fate::Committed {
                continue;
            }
            if let Some(id) = values::decode(value) {
                let last = latest.entry((*p, values::key(id))).or_insert(*offset);
                *last = (*last).max(*offset);
            }
        }
        let not_known_committed = h
            .txns
            .iter()
            .filter(|t| t.answered != Some(true))
            .flat_map(|t| t.ids.iter().copied())
            .collect();
        Self {
            latest,
            not_known_committed,
        }
    }

    /// A later committed record of `id`'s key is in partition `p`'s final log.
    pub fn overwritten(&self, p: i32, offset: i64, id: RecordId) -> bool {
        self.latest
            .get(&(p, values::key(id)))
            .is_some_and(|&last| last > offset)
    }

    /// Whether the cleaner had the right to take out the record `id` that
    /// was at `offset` of partition `p`.
    pub fn may_be_gone(&self, p: i32, offset: i64, id: RecordId) -> bool {
        self.not_known_committed.contains(&id) || self.overwritten(p, offset, id)
    }
}
