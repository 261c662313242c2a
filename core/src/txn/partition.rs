//! Per-partition transaction state: which producers have a transaction open
//! here (and its first offset), and the aborted transactions that fetches
//! under read_committed must be told about. Kafka keeps the same in
//! ProducerStateManager (ongoing) and the per-segment .txnindex (aborted).
//!
//! The last stable offset (LSO) is the first offset of the oldest open
//! transaction, or the high watermark when none is open.
//!
//! Rebuilt from batch headers at start-up, only for partitions that ever held
//! a transactional batch (meta.db flags them when first added to a
//! transaction).

use std::collections::{BTreeMap, BTreeSet};

use crate::log::PartitionLog;
use crate::txn::marker;

/// An aborted transaction in one partition, as Kafka's AbortedTxn: its first
/// data offset and its marker's offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
}

#[derive(Clone, Debug, Default)]
pub struct PartitionTxns {
    /// producer id -> first offset of its open transaction here.
    ongoing: BTreeMap<i64, i64>,
    /// The same, ordered by first offset, for the LSO.
    ongoing_by_offset: BTreeSet<(i64, i64)>,
    /// Sorted by `last_offset` (markers are appended in offset order).
    aborted: Vec<AbortedTxn>,
    /// Largest `last_offset - first_offset` among `aborted`: bounds how far
    /// past a fetch's range an overlapping entry can sit.
    aborted_span_max: i64,
}

impl PartitionTxns {
    /// Rebuilds from every retained batch of the log.
    pub fn rebuild(log: &PartitionLog) -> Self {
        let mut s = Self::default();
        for (entry, bytes) in log.batches_from(log.log_start_offset()) {
            let h = &entry.header;
            if !h.is_transactional() {
                continue;
            }
            if h.is_control() {
                if let Some(commit) = marker::is_commit(h, bytes) {
                    s.on_marker(h.producer_id, commit, h.base_offset);
                }
            } else {
                s.on_data(h.producer_id, h.base_offset);
            }
        }
        s
    }

    /// A transactional data batch of `producer_id` was appended at `offset`.
    pub fn on_data(&mut self, producer_id: i64, offset: i64) {
        if let std::collections::btree_map::Entry::Vacant(v) = self.ongoing.entry(producer_id) {
            v.insert(offset);
            self.ongoing_by_offset.insert((offset, producer_id));
        }
    }

    /// A marker of `producer_id` was appended at `marker_offset`.
    pub fn on_marker(&mut self, producer_id: i64, commit: bool, marker_offset: i64) {
        let Some(first_offset) = self.ongoing.remove(&producer_id) else {
            return; // the transaction wrote nothing here
        };
        self.ongoing_by_offset.remove(&(first_offset, producer_id));
        assert!(
            first_offset < marker_offset,
            "a marker follows its transaction's data"
        );
        if !commit {
            if let Some(last) = self.aborted.last() {
                assert!(
                    last.last_offset < marker_offset,
                    "markers are appended in offset order"
                );
            }
            self.aborted.push(AbortedTxn {
                producer_id,
                first_offset,
                last_offset: marker_offset,
            });
            self.aborted_span_max = self.aborted_span_max.max(marker_offset - first_offset);
        }
    }

    /// First offset of the oldest open transaction.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing_by_offset.first().map(|(offset, _)| *offset)
    }

    pub fn is_ongoing(&self, producer_id: i64) -> bool {
        self.ongoing.contains_key(&producer_id)
    }

    /// Aborted transactions with data in `[fetch_offset, upper_offset)`.
    /// Costs a binary search plus the entries whose marker lies within one
    /// longest-transaction span of the range, not the partition's history.
    pub fn aborted_overlapping(&self, fetch_offset: i64, upper_offset: i64) -> Vec<AbortedTxn> {
        let start = self
            .aborted
            .partition_point(|a| a.last_offset < fetch_offset);
        let limit = upper_offset.saturating_add(self.aborted_span_max);
        self.aborted[start..]
            .iter()
            .take_while(|a| a.last_offset <= limit)
            .filter(|a| a.first_offset < upper_offset)
            .copied()
            .collect()
    }

    /// Forgets aborted transactions wholly below the log start (retention).
    pub fn forget_below(&mut self, log_start_offset: i64) {
        let cut = self
            .aborted
            .partition_point(|a| a.last_offset < log_start_offset);
        self.aborted.drain(..cut);
    }

    pub fn aborted_count(&self) -> usize {
        self.aborted.len()
    }

    /// Open transactions here: (producer id, first offset).
    pub fn ongoing(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.ongoing.iter().map(|(p, o)| (*p, *o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lso_and_aborted_ranges() {
        let mut t = PartitionTxns::default();
        t.on_data(1, 0);
        t.on_data(2, 3);
        t.on_data(1, 5); // same transaction, no change
        assert_eq!(t.first_unstable_offset(), Some(0));
        t.on_marker(1, false, 6);
        assert_eq!(t.first_unstable_offset(), Some(3));
        t.on_marker(2, true, 7);
        assert_eq!(t.first_unstable_offset(), None);
        assert_eq!(
            t.aborted_overlapping(0, 10),
            vec![AbortedTxn {
                producer_id: 1,
                first_offset: 0,
                last_offset: 6
            }]
        );
        assert_eq!(t.aborted_overlapping(7, 10), vec![]);
        // A fetch of [0, 3) still learns of the abort whose marker is at 6.
        assert_eq!(t.aborted_overlapping(0, 3).len(), 1);
        t.forget_below(7);
        assert_eq!(t.aborted_count(), 0);
    }

    #[test]
    fn marker_without_data_records_nothing() {
        let mut t = PartitionTxns::default();
        t.on_marker(9, false, 0);
        assert_eq!(t.aborted_count(), 0);
    }
}
