//! The transactional ids in memory and the checks every transactional
//! request makes first, in the order Kafka's TransactionCoordinator.scala
//! makes them: unknown id or another producer id → INVALID_PRODUCER_ID_MAPPING;
//! another epoch → PRODUCER_FENCED (INVALID_PRODUCER_EPOCH for request
//! versions from before KIP-588, as KafkaApis maps it); a state change in
//! flight → CONCURRENT_TRANSACTIONS.

use std::collections::BTreeMap;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;

use super::complete::Completion;
use super::record::{TxnRecord, TxnState};

pub struct TxnEntry {
    /// As stored in meta.db: memory never runs ahead of it, but for one
    /// case: for an id in `Txns::owed`, this is the Complete record and
    /// meta.db still holds the decision it completes.
    pub record: TxnRecord,
    /// A meta.db write for this id is in flight (Kafka's pending state).
    pub write_in_flight: bool,
    /// The stored decision being carried out. Boxed: an id spends most of
    /// its life without one, and every id ever seen has an entry: 200 bytes
    /// an entry became 136, and 100,000 ids cost the broker 0.96-0.99 KiB
    /// each instead of 1.10-1.14 (`make bench` section 9).
    pub completion: Option<Box<Completion>>,
    /// The owed Complete record (`Txns::owed`) is being written on its own.
    flushing_complete: bool,
}

impl TxnEntry {
    /// A transition is under way: a write in flight or a decision being carried out.
    pub fn busy(&self) -> bool {
        self.write_in_flight || self.completion.is_some()
    }

    /// EndTxn was answered and the Complete record is being stored: a
    /// request for this id waits for that write (one meta.db write at most)
    /// instead of being answered CONCURRENT_TRANSACTIONS.
    pub fn settling(&self) -> bool {
        self.flushing_complete || self.completion.as_ref().is_some_and(|c| c.settling())
    }
}

#[derive(Default)]
pub struct Txns {
    map: BTreeMap<String, TxnEntry>,
    /// producer id -> transactional id, for produce checks.
    by_producer: BTreeMap<i64, String>,
    /// Ids with a decision being carried out (`completion` is Some): the
    /// only ones sync completions and timers need to look at, so a sync or
    /// a `poll_timeout` costs the transactions in flight, not every id ever
    /// seen.
    completing: std::collections::BTreeSet<String>,
    /// Ids whose first record is being stored (not yet in `map`).
    creating: std::collections::BTreeSet<String>,
    /// Ids whose decision is carried out (markers durable, EndTxn answered)
    /// but whose Complete record is not stored: the id's next stored
    /// record, or a write of its own after `TXN_COMPLETE_OWED_MS`,
    /// supersedes the decision in meta.db; a crash before that carries the
    /// decision out again at start-up (txn/complete.rs says why this is
    /// safe). With the time those writes of their own are due.
    owed: std::collections::BTreeSet<String>,
    /// How many of `owed` are writing their Complete record on its own
    /// (`TxnEntry::flushing_complete`): every request looks at it
    /// (`api::waits_for_settling`), so it is counted, not searched for.
    flushing_count: usize,
    pub next_owed_write_ms: Option<i64>,
    pub next_timeout_check_ms: i64,
    pub next_expiry_check_ms: i64,
}

impl Txns {
    /// Starts carrying out `id`'s decision.
    pub fn begin_completion(&mut self, id: &str, completion: Completion) {
        let entry = self.map.get_mut(id).expect("a decided transaction");
        assert!(entry.completion.is_none(), "one completion at a time");
        entry.completion = Some(Box::new(completion));
        self.completing.insert(id.to_string());
    }

    /// The decision of `id` is carried out; its completion is handed back.
    pub fn end_completion(&mut self, id: &str) -> Completion {
        let was = self.completing.remove(id);
        assert!(was, "transaction {id} was not being completed");
        let entry = self.map.get_mut(id).expect("a transaction being completed");
        *entry.completion.take().expect("being completed")
    }

    /// `id`'s decision is carried out and its Complete record (already its
    /// `record`) is owed to meta.db; written at `write_at_ms` at the latest.
    pub fn owe_complete(&mut self, id: &str, write_at_ms: i64) {
        let entry = self.map.get_mut(id).expect("a completed transaction");
        assert!(
            entry.record.state.is_complete() && entry.completion.is_none(),
            "only a carried-out decision owes its Complete record"
        );
        self.owed.insert(id.to_string());
        let at = self.next_owed_write_ms.get_or_insert(write_at_ms);
        *at = (*at).min(write_at_ms);
    }

    /// Nothing is owed for `id` any more: a record of it was stored (which
    /// supersedes the decision), or a stopping broker could not store its
    /// Complete record and leaves the decision to start-up.
    pub fn clear_owed(&mut self, id: &str) {
        if self.owed.remove(id) {
            self.owed_write_done(id);
        }
    }

    /// `id`'s owed Complete record is being written on its own.
    pub fn owed_write_started(&mut self, id: &str) {
        assert!(
            self.owed.contains(id),
            "only an owed record is written as owed"
        );
        let entry = self.map.get_mut(id).expect("owed ids are known");
        assert!(!entry.flushing_complete, "one owed write at a time");
        entry.flushing_complete = true;
        self.flushing_count += 1;
    }

    /// `id`'s owed Complete record is no longer being written on its own.
    pub fn owed_write_done(&mut self, id: &str) {
        if let Some(entry) = self.map.get_mut(id) {
            if std::mem::take(&mut entry.flushing_complete) {
                self.flushing_count -= 1;
            }
        }
    }

    /// Ids owing their Complete record, with nothing of theirs in flight.
    pub fn owed_idle(&self) -> Vec<String> {
        self.owed
            .iter()
            .filter(|id| !self.map[*id].busy())
            .cloned()
            .collect()
    }

    /// Whether an id owes its Complete record and is not writing it.
    pub fn owed_waiting(&self) -> bool {
        self.owed.iter().any(|id| !self.map[id].flushing_complete)
    }

    /// Whether an owed Complete record is being written.
    pub fn any_flushing(&self) -> bool {
        self.flushing_count > 0
    }

    /// Ids with a decision being carried out, and their completions.
    pub fn completing(&self) -> impl Iterator<Item = (&String, &Completion)> {
        self.completing.iter().map(|id| {
            let c = self.map[id].completion.as_deref();
            (id, c.expect("listed ids are being completed"))
        })
    }

    pub fn mark_creating(&mut self, id: &str) {
        let fresh = self.creating.insert(id.to_string());
        assert!(fresh, "transactional id {id} created twice at once");
    }

    pub fn unmark_creating(&mut self, id: &str) {
        let was = self.creating.remove(id);
        assert!(was, "transactional id {id} was not being created");
    }

    pub fn is_creating(&self, id: &str) -> bool {
        self.creating.contains(id)
    }

    pub fn get(&self, id: &str) -> Option<&TxnEntry> {
        self.map.get(id)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut TxnEntry> {
        self.map.get_mut(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &TxnEntry)> {
        self.map.iter()
    }

    pub fn ids(&self) -> Vec<String> {
        self.map.keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Transactions begun and not yet completed: Ongoing, or decided and
    /// being carried out. Walks every id: for a scrape, not a request.
    /// Transactions begun and not yet ended: one whose EndTxn was answered
    /// (markers durable, the Complete record being stored) is ended.
    pub fn open_count(&self) -> u64 {
        let open = |e: &&TxnEntry| {
            matches!(
                e.record.state,
                TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
            ) && !e.settling()
        };
        self.map.values().filter(open).count() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The transactional id that owns `producer_id`.
    pub fn by_producer(&self, producer_id: i64) -> Option<(&String, &TxnEntry)> {
        let id = self.by_producer.get(&producer_id)?;
        self.map.get_key_value(id)
    }

    /// Stores `record` as the id's state (after meta.db said so).
    pub fn set_record(&mut self, id: &str, record: TxnRecord) {
        let entry = self.map.entry(id.to_string()).or_insert_with(|| TxnEntry {
            record: record.clone(),
            write_in_flight: false,
            completion: None,
            flushing_complete: false,
        });
        if entry.record.producer_id != record.producer_id {
            self.by_producer.remove(&entry.record.producer_id);
        }
        self.by_producer.insert(record.producer_id, id.to_string());
        entry.record = record;
    }

    pub fn remove(&mut self, id: &str) {
        assert!(
            !self.completing.contains(id),
            "transaction {id} removed while being completed"
        );
        self.clear_owed(id);
        if let Some(entry) = self.map.remove(id) {
            self.by_producer.remove(&entry.record.producer_id);
        }
    }

    /// Whether an open or deciding transaction has staged an offset for this
    /// group and partition (OffsetFetch require_stable).
    pub fn has_staged_offset(&self, group: &str, topic: &str, partition: i32) -> bool {
        self.map.values().any(|e| {
            matches!(
                e.record.state,
                TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
            ) && e.record.staged_offsets.get(group).is_some_and(|l| {
                l.iter()
                    .any(|s| s.topic == topic && s.partition == partition)
            })
        })
    }

    /// Every id holding a decision that is stored but not carried out.
    pub fn prepared(&self) -> Vec<String> {
        self.map
            .iter()
            .filter(|(_, e)| e.record.state.is_prepare())
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// The fencing error for `api` at `version`: PRODUCER_FENCED, or
/// INVALID_PRODUCER_EPOCH for clients too old to know it (KafkaApis.scala:
/// InitProducerId < v4, EndTxn / AddPartitionsToTxn / AddOffsetsToTxn < v2;
/// TxnOffsetCommit's epoch is checked like a partition write).
pub fn fenced_error(api: ApiKey, version: i16) -> ResponseError {
    let old = match api {
        ApiKey::InitProducerId => version < 4,
        ApiKey::EndTxn | ApiKey::AddPartitionsToTxn | ApiKey::AddOffsetsToTxn => version < 2,
        _ => true,
    };
    if old {
        ResponseError::InvalidProducerEpoch
    } else {
        ResponseError::ProducerFenced
    }
}

/// The checks every transactional request (AddPartitionsToTxn,
/// AddOffsetsToTxn, TxnOffsetCommit, EndTxn) makes first.
pub fn check_owner<'a>(
    txns: &'a Txns,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    api: ApiKey,
    version: i16,
) -> Result<&'a TxnEntry, ResponseError> {
    if id.is_empty() {
        return Err(ResponseError::InvalidRequest);
    }
    let Some(entry) = txns.get(id) else {
        return Err(ResponseError::InvalidProducerIdMapping);
    };
    if entry.record.producer_id != producer_id {
        return Err(ResponseError::InvalidProducerIdMapping);
    }
    if entry.record.producer_epoch != producer_epoch {
        return Err(fenced_error(api, version));
    }
    Ok(entry)
}

/// Whether an Ongoing transaction has outlived its timeout, counted from its
/// last state change (the seed's rule; Kafka counts from the start).
pub fn timed_out(record: &TxnRecord, now_ms: i64) -> bool {
    record.state == TxnState::Ongoing && now_ms - record.last_update_ms > record.timeout_ms as i64
}
