//! What the cleaner keeps, batch by batch, as Kafka's `LogCleaner` decides
//! it (core/src/main/scala/kafka/log/LogCleaner.scala: `buildOffsetMap`,
//! `cleanInto`'s `RecordFilter`, `shouldRetainRecord`, and
//! `CleanedTransactionMetadata`):
//!
//! - a record stays when it is its key's latest (the offset map, built over
//!   the dirty range, says which offset that is), or lies past the map;
//!   a record without a key goes;
//! - a tombstone (a null value) stays until its batch's delete horizon has
//!   passed; the first cleaning that keeps it sets that horizon to now plus
//!   `delete.retention.ms` (KIP-534);
//! - the batches of aborted transactions go whole; an abort marker stays
//!   while this pass saw a batch of its transaction, a commit marker while
//!   it saw one of its records; after that a marker goes once its own delete
//!   horizon has passed;
//! - a batch emptied by all that stays as an empty batch when it is the last
//!   one of a producer still known (its sequence and epoch fence zombies and
//!   find duplicates), the last batch of the pass, or (not in Kafka) the
//!   last batch of its segment; in the last two cases, unless it is also its
//!   producer's last, it stays as a placeholder without its producer
//!   (`records::placeholder`).

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{Hash, Hasher};

use bytes::Bytes;

use super::records::{self, RebuildError, RecordsError};
use crate::batch::BatchHeader;
use crate::log::AbortedTxn;

/// A key's identity in the offset map: 128 bits of two SipHashes, as Kafka
/// keeps a 16-byte MD5 of each key rather than the key (a collision, at
/// 2^-128 per pair, would drop a record; the map stays small and bounded).
pub type KeyHash = u128;

pub fn key_hash(key: &[u8]) -> KeyHash {
    let half = |salt: u8| {
        let mut h = std::hash::DefaultHasher::new();
        salt.hash(&mut h);
        key.hash(&mut h);
        h.finish()
    };
    (u128::from(half(0)) << 64) | u128::from(half(1))
}

/// Each key's latest offset in the dirty range (Kafka's SkimpyOffsetMap).
#[derive(Clone, Debug, PartialEq)]
pub struct OffsetMap {
    latest: HashMap<KeyHash, i64>,
    entries_max: usize,
    /// The last offset the map covers (-1: none): records past it stay.
    latest_offset: i64,
}

impl OffsetMap {
    pub fn new(entries_max: usize) -> Self {
        Self {
            latest: HashMap::new(),
            entries_max,
            latest_offset: -1,
        }
    }

    /// Whether a new key would not fit.
    pub fn is_full(&self) -> bool {
        self.latest.len() >= self.entries_max
    }

    /// Books `offset` as `key`'s latest (`map_batch` keeps the map within
    /// its size, a batch at a time).
    pub fn put(&mut self, key: &[u8], offset: i64) {
        let latest = self.latest.entry(key_hash(key)).or_insert(offset);
        *latest = (*latest).max(offset);
    }

    pub fn latest_offset(&self) -> i64 {
        self.latest_offset
    }

    /// The map covers offsets up to `offset` (a batch mapped, or a segment's end).
    pub fn covers_up_to(&mut self, offset: i64) {
        self.latest_offset = self.latest_offset.max(offset);
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    fn get(&self, key: &[u8]) -> Option<i64> {
        self.latest.get(&key_hash(key)).copied()
    }
}

/// Kafka's CleanedTransactionMetadata: which transactions are open as the
/// cleaner walks the log, to tell aborted batches and needless markers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TxnWalk {
    /// Aborted transactions not reached yet, by first offset.
    aborted: VecDeque<AbortedTxn>,
    /// Aborted transactions reached, by producer: and whether a batch of
    /// theirs was seen in this walk.
    ongoing_aborted: BTreeMap<i64, (AbortedTxn, bool)>,
    /// Producers with a committed (not aborted) transaction seen open.
    ongoing_committed: BTreeSet<i64>,
}

impl TxnWalk {
    /// A walk knowing these aborted transactions (any order, duplicates ok).
    pub fn new(mut aborted: Vec<AbortedTxn>) -> Self {
        aborted.sort_by_key(|a| (a.first_offset, a.producer_id, a.last_offset));
        aborted.dedup();
        Self {
            aborted: aborted.into(),
            ..Self::default()
        }
    }

    /// Takes in the aborted transactions that began at or before `offset`.
    /// A producer's transactions never overlap, so one taken in replaces
    /// an earlier one of its producer that ended before it began: that one's
    /// marker was never walked over (below where the walk started, as the
    /// map's walk starts at the first dirty segment, or removed by an
    /// earlier pass), and keeping it would hide the later one, whose
    /// batches would then pass for committed.
    fn reach(&mut self, offset: i64) {
        while self
            .aborted
            .front()
            .is_some_and(|a| a.first_offset <= offset)
        {
            let a = self.aborted.pop_front().expect("checked");
            match self.ongoing_aborted.entry(a.producer_id) {
                Entry::Vacant(v) => {
                    v.insert((a, false));
                }
                Entry::Occupied(mut o) => {
                    if o.get().0.last_offset < a.first_offset {
                        o.insert((a, false));
                    }
                }
            }
        }
    }

    /// Drops the producer's aborted transaction if it ended before `offset`
    /// (its marker was never walked over: below the walk's start, or
    /// removed by an earlier pass): later batches are not part of it.
    fn forget_ended(&mut self, producer_id: i64, offset: i64) {
        if self
            .ongoing_aborted
            .get(&producer_id)
            .is_some_and(|(a, _)| a.last_offset < offset)
        {
            self.ongoing_aborted.remove(&producer_id);
        }
    }

    /// A data batch: true when it belongs to an aborted transaction.
    /// An empty batch (emptied by an earlier pass and kept for its
    /// producer's or its segment's sake) holds nothing of a transaction:
    /// it neither keeps a marker nor is dropped for one.
    pub fn on_batch(&mut self, header: &BatchHeader) -> bool {
        self.reach(header.last_offset());
        if !header.is_transactional() || header.records_count == 0 {
            return false;
        }
        self.forget_ended(header.producer_id, header.base_offset);
        match self.ongoing_aborted.get_mut(&header.producer_id) {
            Some((_, seen)) => {
                *seen = true;
                true
            }
            None => {
                self.ongoing_committed.insert(header.producer_id);
                false
            }
        }
    }

    /// A marker: whether it may go (its transaction has nothing left in this
    /// walk), and the aborted transaction whose entry the cleaned segment's
    /// `.txnindex` keeps (an abort marker that stays for its batches).
    pub fn on_marker(
        &mut self,
        header: &BatchHeader,
        is_commit: bool,
    ) -> (bool, Option<AbortedTxn>) {
        self.reach(header.last_offset());
        let producer_id = header.producer_id;
        self.forget_ended(producer_id, header.base_offset);
        if is_commit {
            return (!self.ongoing_committed.remove(&producer_id), None);
        }
        match self.ongoing_aborted.remove(&producer_id) {
            Some((aborted, true)) => (false, Some(aborted)),
            _ => (true, None),
        }
    }
}

/// A producer's last entry in the log (Kafka's LastRecord): the last
/// offset of its last data batch, or none when its last entry is a marker,
/// and its epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastRecord {
    pub last_data_offset: Option<i64>,
    pub epoch: i16,
}

/// What becomes of one batch.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Written as it was.
    Keep,
    /// Written as these bytes (some records gone, or a delete horizon set).
    Replace(Bytes),
    Drop,
}

/// One pass's decisions over the segments it rewrites.
pub struct Filter<'a> {
    pub map: &'a OffsetMap,
    pub walk: TxnWalk,
    pub last_records: &'a BTreeMap<i64, LastRecord>,
    pub now_ms: i64,
    pub delete_retention_ms: i64,
    /// The pass's end: the batch ending there stays, even emptied.
    pub end_offset: i64,
    /// The end of the segment being cleaned (the next one's base): the
    /// batch ending there stays too, even emptied, so that every segment
    /// still ends where the next begins. Kafka does not keep it; here the
    /// start-up scan takes a segment that begins after a gap for the sign
    /// of a power cut that lost the end of the one before (`log::recovery`),
    /// and a cleaned log must not look like one. It costs a batch header
    /// per segment.
    pub segment_end_offset: i64,
}

/// The control record's type: 0 abort, 1 commit (ControlRecordType).
fn marker_is_commit(batch: &[u8], header: &BatchHeader) -> Result<bool, RecordsError> {
    let bytes = records::records_bytes(batch, header)?;
    let first = records::records(&bytes, header.records_count).next();
    let key = first
        .transpose()?
        .and_then(|r| r.key)
        .filter(|k| k.len() >= 4)
        .ok_or_else(|| RecordsError("a marker without its control key".into()))?;
    Ok(i16::from_be_bytes([key[2], key[3]]) == 1)
}

impl Filter<'_> {
    /// Decides one batch, and names the aborted transaction the cleaned
    /// `.txnindex` keeps when the batch is a marker that stays for it.
    pub fn batch(
        &mut self,
        header: &BatchHeader,
        bytes: &[u8],
    ) -> Result<(Verdict, Option<AbortedTxn>), RecordsError> {
        let control = header.is_control();
        let horizon = records::delete_horizon_ms(header);
        let mut kept_abort = None;
        let can_discard = if control {
            // An empty control batch (a producer's last, emptied before)
            // has no type left; it goes by the same rules as an empty marker.
            if header.records_count == 0 {
                true // emptied by an earlier pass: nothing left to mark
            } else {
                let is_commit = marker_is_commit(bytes, header)?;
                let (discard, aborted) = self.walk.on_marker(header, is_commit);
                kept_abort = aborted;
                discard
            }
        } else {
            self.walk.on_batch(header)
        };
        let discard_records = if control {
            can_discard && horizon.is_some_and(|h| h <= self.now_ms)
        } else {
            can_discard
        };
        let last_of_producer = header.has_producer_id()
            && self
                .last_records
                .get(&header.producer_id)
                .is_some_and(|last| match last.last_data_offset {
                    Some(offset) => header.last_offset() == offset,
                    None => control && header.producer_epoch == last.epoch,
                });
        let next_offset = header.last_offset() + 1;
        let retain_empty = last_of_producer
            || next_offset == self.end_offset
            || next_offset == self.segment_end_offset;
        if discard_records && !retain_empty {
            return Ok((Verdict::Drop, None));
        }
        // Two passes over the records, one at a time, holding nothing per
        // record: the first counts what stays, the second (only for a
        // batch that changes) writes it.
        let body = records::records_bytes(bytes, header)?;
        let keep = |r: &records::Record<'_>| {
            if discard_records {
                false
            } else if control {
                true
            } else {
                self.keep_record(header, r, horizon)
            }
        };
        let (mut all, mut kept) = (0usize, 0usize);
        let mut tombstones = false;
        for r in records::records(&body, header.records_count) {
            let r = r?;
            all += 1;
            if keep(&r) {
                kept += 1;
                tombstones |= r.value.is_none() && !control;
            }
        }
        let marker_of_empty_txn = control && can_discard;
        let needs_horizon = (tombstones || marker_of_empty_txn) && horizon.is_none();
        let verdict = if kept == 0 {
            if !retain_empty {
                Verdict::Drop
            } else if !last_of_producer && (header.has_producer_id() || all > 0) {
                // Kept only for its offsets: nothing of its producer.
                Verdict::Replace(records::placeholder(header)?)
            } else if all == 0 {
                Verdict::Keep
            } else {
                Verdict::Replace(records::rebuild(header, std::iter::empty(), None)?)
            }
        } else if kept == all && !needs_horizon {
            Verdict::Keep
        } else {
            let new_horizon =
                needs_horizon.then(|| self.now_ms.saturating_add(self.delete_retention_ms));
            let stays = records::records(&body, header.records_count)
                .filter(|r| r.as_ref().map_or(true, &keep));
            match records::rebuild(header, stays, new_horizon) {
                Ok(rebuilt) => Verdict::Replace(rebuilt),
                // The delete horizon lengthens every timestamp delta: a
                // batch near the readers' bound could pass it. Kept as it
                // was rather than written unreadable; its superseded
                // records and tombstones wait (what stays is still right:
                // each key's latest record is among them).
                Err(RebuildError::TooLarge(_)) => Verdict::Keep,
                Err(RebuildError::Failed(e)) => return Err(e),
            }
        };
        let kept_abort = if matches!(verdict, Verdict::Drop) {
            None
        } else {
            kept_abort
        };
        Ok((verdict, kept_abort))
    }

    fn keep_record(
        &self,
        header: &BatchHeader,
        r: &records::Record<'_>,
        horizon: Option<i64>,
    ) -> bool {
        let offset = header.base_offset + i64::from(r.offset_delta);
        if offset > self.map.latest_offset() {
            return true;
        }
        let Some(key) = r.key else {
            return false;
        };
        let latest = self.map.get(key).is_none_or(|found| offset >= found);
        let keep_deletes = horizon.is_none_or(|h| self.now_ms < h);
        latest && (r.value.is_some() || keep_deletes)
    }
}

/// Books a data batch's keys in the map, as Kafka's buildOffsetMapForSegment:
/// aborted batches and markers add nothing; records below `from` are not
/// dirty. Returns false when the map filled before the batch's end (the
/// pass then ends before this batch).
pub fn map_batch(
    map: &mut OffsetMap,
    walk: &mut TxnWalk,
    header: &BatchHeader,
    bytes: &[u8],
    from: i64,
) -> Result<bool, RecordsError> {
    if header.is_control() {
        if header.records_count > 0 {
            let is_commit = marker_is_commit(bytes, header)?;
            walk.on_marker(header, is_commit);
        }
    } else if !walk.on_batch(header) && header.last_offset() >= from {
        // Two passes, one record at a time: count the keys, then book them.
        let body = records::records_bytes(bytes, header)?;
        let mut new_keys = 0;
        for r in records::records(&body, header.records_count) {
            new_keys += usize::from(r?.key.is_some());
        }
        if map.len() + new_keys > map.entries_max && !map.is_empty() {
            return Ok(false);
        }
        for r in records::records(&body, header.records_count) {
            let r = r?;
            let offset = header.base_offset + i64::from(r.offset_delta);
            if let (Some(key), true) = (r.key, offset >= from) {
                map.put(key, offset);
            }
        }
    }
    if header.last_offset() >= from {
        map.covers_up_to(header.last_offset());
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn_batch(producer_id: i64, base_offset: i64, records: i32) -> BatchHeader {
        BatchHeader {
            base_offset,
            batch_length: 100,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0x10, // transactional
            last_offset_delta: records - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id,
            producer_epoch: 0,
            base_sequence: 0,
            records_count: records,
        }
    }

    fn aborted(producer_id: i64, first_offset: i64, last_offset: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id,
            first_offset,
            last_offset,
            last_stable_offset: first_offset,
        }
    }

    /// The map's walk starts at the first dirty segment: an aborted
    /// transaction of the producer whose marker lies below it must not hide
    /// the producer's next aborted transaction (found by the simulator:
    /// `compaction-with-open-transaction` seed 2 lost a key's latest
    /// committed record to an aborted one the map took for committed).
    #[test]
    fn an_earlier_aborted_transaction_does_not_hide_the_next() {
        let mut walk = TxnWalk::new(vec![aborted(7, 10, 14), aborted(7, 30, 33)]);
        assert!(!walk.on_batch(&txn_batch(8, 20, 2)), "another producer");
        assert!(
            walk.on_batch(&txn_batch(7, 30, 2)),
            "the second abort's batch"
        );
        assert!(
            !walk.on_batch(&txn_batch(7, 40, 1)),
            "after its marker at 33"
        );
    }

    #[test]
    fn an_empty_batch_keeps_no_marker() {
        let mut walk = TxnWalk::new(vec![aborted(7, 10, 14)]);
        assert!(
            !walk.on_batch(&txn_batch(7, 10, 0)),
            "emptied: nothing to drop"
        );
        let mut marker = txn_batch(7, 14, 1);
        marker.attributes |= 0x20;
        assert_eq!(
            walk.on_marker(&marker, false),
            (true, None),
            "the marker may go"
        );
    }
}
