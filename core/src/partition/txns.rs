//! Per-partition transaction state: which producers have a transaction open
//! here (and its first offset), and the aborted transactions that fetches
//! under read_committed must be told about. Kafka keeps the same in
//! ProducerStateManager (ongoing) and the per-segment .txnindex (aborted).
//!
//! The last stable offset (LSO) is the first offset of the oldest open
//! transaction, or the high watermark when none is open.
//!
//! At start-up the aborted list comes from the `.txnindex` files below the
//! recovery point and the open transactions from the recovery checkpoint;
//! the batch headers read above the recovery point continue both. Markers not
//! yet durable are remembered (`unsynced`) so that a failed sync that cuts
//! them off reopens their transactions (`truncate_above`), as rebuilding from
//! the batch headers left would.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub use crate::log::AbortedTxn;

/// A marker appended and not yet known durable.
#[derive(Clone, Copy, Debug)]
struct Completion {
    producer_id: i64,
    first_offset: i64,
    marker_offset: i64,
    commit: bool,
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
    /// Completions whose marker is at or above the last durable point seen.
    unsynced: VecDeque<Completion>,
}

impl PartitionTxns {
    /// The state at start-up: the open transactions of the checkpoint and the
    /// aborted transactions of the `.txnindex` files, in marker order.
    pub fn from_boot(ongoing: &[(i64, i64)], aborted: Vec<AbortedTxn>) -> Self {
        let mut s = Self::default();
        for &(producer_id, first_offset) in ongoing {
            s.on_data(producer_id, first_offset);
        }
        for a in aborted {
            s.push_aborted(a);
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

    /// A marker of `producer_id` was appended at `marker_offset`. Returns the
    /// aborted transaction to book in the `.txnindex` when it aborts one
    /// that wrote here.
    pub fn on_marker(
        &mut self,
        producer_id: i64,
        commit: bool,
        marker_offset: i64,
    ) -> Option<AbortedTxn> {
        let first_offset = self.ongoing.remove(&producer_id)?; // wrote nothing here
        self.ongoing_by_offset.remove(&(first_offset, producer_id));
        assert!(
            first_offset < marker_offset,
            "a marker follows its transaction's data"
        );
        // Kafka's AbortedTxn keeps the LSO once this one is over.
        let last_stable_offset = self
            .ongoing_by_offset
            .first()
            .map_or(marker_offset + 1, |(offset, _)| *offset);
        self.unsynced.push_back(Completion {
            producer_id,
            first_offset,
            marker_offset,
            commit,
        });
        if commit {
            return None;
        }
        let aborted = AbortedTxn {
            producer_id,
            first_offset,
            last_offset: marker_offset,
            last_stable_offset,
        };
        self.push_aborted(aborted);
        Some(aborted)
    }

    fn push_aborted(&mut self, aborted: AbortedTxn) {
        if let Some(last) = self.aborted.last() {
            assert!(
                last.last_offset < aborted.last_offset,
                "markers are appended in offset order"
            );
        }
        self.aborted_span_max = self
            .aborted_span_max
            .max(aborted.last_offset - aborted.first_offset);
        self.aborted.push(aborted);
    }

    /// Everything below `offset` is durable: forget the completions there.
    pub fn mark_durable(&mut self, offset: i64) {
        while self
            .unsynced
            .front()
            .is_some_and(|c| c.marker_offset < offset)
        {
            self.unsynced.pop_front();
        }
    }

    /// The log was cut at `offset` (a failed sync): transactions that began
    /// there or later are gone, and those whose marker was cut are open
    /// again. Returns the aborted entries removed (their `.txnindex` entries
    /// go with the cut).
    pub fn truncate_above(&mut self, offset: i64) -> Vec<AbortedTxn> {
        let gone: Vec<(i64, i64)> = self
            .ongoing_by_offset
            .range((offset, i64::MIN)..)
            .copied()
            .collect();
        for (first_offset, producer_id) in gone {
            self.ongoing_by_offset.remove(&(first_offset, producer_id));
            self.ongoing.remove(&producer_id);
        }
        let mut removed = Vec::new();
        while let Some(c) = self.unsynced.back().copied() {
            if c.marker_offset < offset {
                break;
            }
            self.unsynced.pop_back();
            if !c.commit {
                let a = self.aborted.pop().expect("an unsynced abort is listed");
                assert_eq!(a.last_offset, c.marker_offset, "aborts are listed in order");
                removed.push(a);
            }
            if c.first_offset < offset {
                self.on_data(c.producer_id, c.first_offset);
            }
        }
        removed.reverse();
        removed
    }

    /// The open transactions as of `offset` (everything above it left out,
    /// markers above it undone): what a recovery checkpoint at `offset` keeps.
    pub fn ongoing_at(&self, offset: i64) -> Vec<(i64, i64)> {
        let mut view = self.clone();
        view.truncate_above(offset);
        view.ongoing().collect()
    }

    /// First offset of the oldest transaction not known to be over: open,
    /// or ended by a marker not yet durable (Kafka moves the LSO past a
    /// transaction only once its marker is below the high watermark; a
    /// failed sync can still take a marker back).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        let open = self.ongoing_by_offset.first().map(|(offset, _)| *offset);
        let unsynced = self.unsynced.iter().map(|c| c.first_offset).min();
        open.into_iter().chain(unsynced).min()
    }

    /// Aborted transactions whose marker lies in `[from, to)` (a segment's
    /// `.txnindex` entries).
    pub fn aborted_in(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        let start = self.aborted.partition_point(|a| a.last_offset < from);
        self.aborted[start..]
            .iter()
            .take_while(|a| a.last_offset < to)
            .copied()
            .collect()
    }

    /// A cleaned segment `[from, to)` went live with these `.txnindex`
    /// entries: the aborted transactions whose marker the cleaner removed
    /// are no longer listed to fetches. (Kafka reads the list from the
    /// segments' `.txnindex` files, so its cleaner's swap does the same;
    /// a listed transaction without its marker would make a read_committed
    /// consumer skip the producer's later records for good.)
    pub fn replace_aborted_in(&mut self, from: i64, to: i64, kept: &[AbortedTxn]) {
        let start = self.aborted.partition_point(|a| a.last_offset < from);
        let end = self.aborted.partition_point(|a| a.last_offset < to);
        assert!(
            kept.iter().all(|k| self.aborted[start..end].contains(k)),
            "a cleaned segment keeps only aborted transactions it had"
        );
        assert!(
            self.unsynced.iter().all(|c| c.marker_offset >= to),
            "the cleaner works below the durable, stable log"
        );
        self.aborted.splice(start..end, kept.iter().copied());
    }

    pub fn is_ongoing(&self, producer_id: i64) -> bool {
        self.ongoing.contains_key(&producer_id)
    }

    /// Whether a marker of `producer_id` here is not yet known durable (a
    /// failed sync could still cut it away and reopen its transaction).
    pub fn has_unsynced_marker(&self, producer_id: i64) -> bool {
        self.unsynced.iter().any(|c| c.producer_id == producer_id)
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
        assert!(t.on_marker(1, false, 6).is_some());
        assert_eq!(
            t.first_unstable_offset(),
            Some(0),
            "held until the marker is durable"
        );
        t.mark_durable(7);
        assert_eq!(t.first_unstable_offset(), Some(3));
        assert_eq!(t.on_marker(2, true, 7), None);
        t.mark_durable(8);
        assert_eq!(t.first_unstable_offset(), None);
        assert_eq!(
            t.aborted_overlapping(0, 10),
            vec![AbortedTxn {
                producer_id: 1,
                first_offset: 0,
                last_offset: 6,
                last_stable_offset: 3,
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
        assert_eq!(t.on_marker(9, false, 0), None);
        assert_eq!(t.aborted_count(), 0);
    }

    #[test]
    fn a_cut_marker_reopens_its_transaction() {
        let mut t = PartitionTxns::default();
        t.on_data(1, 0);
        t.on_data(2, 2);
        t.on_marker(1, false, 4);
        t.mark_durable(3);
        t.on_data(3, 5);
        t.on_marker(2, true, 6);
        assert_eq!(t.ongoing_at(4), vec![(1, 0), (2, 2)]);
        let removed = t.truncate_above(4);
        assert_eq!(removed.len(), 1);
        assert_eq!(t.aborted_count(), 0);
        assert_eq!(t.first_unstable_offset(), Some(0));
        assert!(t.is_ongoing(1) && t.is_ongoing(2) && !t.is_ongoing(3));
    }
}
