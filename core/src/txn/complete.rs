//! Carrying out a stored decision (PrepareCommit / PrepareAbort), in the
//! order the seed requires:
//!
//! 1. a marker is appended to every partition the transaction added;
//! 2. every one of those partitions is synced (whoever appended what: the
//!    broker's one sync covers every partition dirtied before it);
//! 3. the waiting EndTxn requests are answered with success, and the
//!    Complete record is stored, with a commit's staged offsets in the same
//!    meta.db batch.
//!
//! A decision with no offsets to store (an abort, or a commit of produces
//! only) does not write its Complete record at once: it is owed
//! (`Txns::owed`), memory holds it, and the id's next stored
//! record (the producer's next AddPartitionsToTxn) supersedes the decision
//! in meta.db, so a transaction costs two meta.db writes, not three. An id
//! whose next record does not come within `TXN_COMPLETE_OWED_MS` has its
//! Complete record written on its own, and so does every owed id when the
//! broker stops. A crash while it is owed finds the decision at start-up and
//! carries it out again, as for a crash before an immediate Complete record
//! lands: the markers are appended a second time, which a reader ignores (no
//! transaction of that producer is open on the partition), and nothing the
//! next transaction wrote can be between them, because its first
//! AddPartitionsToTxn stores a record first. A commit with offsets still
//! stores them at once: left in the decision, they would be applied again
//! at start-up over a later OffsetCommit of the same partition.
//!
//! Why the answer does not wait for step 3: everything the answer promises
//! is already on disk. The stored decision carries the commit's staged
//! offsets (TxnOffsetCommit stores them in the id's record, as Kafka stages
//! them in `__consumer_offsets` before the marker), and the markers are
//! synced; a crash before the Complete record lands finds the decision at
//! start-up and carries it out again (`txn::boot`), offsets included. So one
//! commit costs two durable steps (the decision, the markers), not three.
//! Until the Complete record is stored the id stays busy: its next request
//! (the producer's AddPartitionsToTxn, InitProducerId, ...) waits for the
//! write instead of being refused (`TxnEntry::settling`, api::dispatch), so
//! the id's next state change is stored after it, and the meta.db queue keeps
//! them in that order. OffsetFetch with require_stable answers
//! UNSTABLE_OFFSET_COMMIT for the staged offsets meanwhile, as Kafka does
//! while a commit's markers are pending.
//!
//! A commit whose staged offsets name a topic with a meta.db change in
//! flight (its deletion) answers EndTxn once the markers are durable, but
//! writes its Complete record only once that change is stored, trying again
//! every `TXN_RETRY_BACKOFF_MS` (the id's next request is refused with
//! CONCURRENT_TRANSACTIONS meanwhile): written before, its offsets would
//! land after the deletion that removes every group's offsets of the topic.
//!
//! A marker cut away by a failed sync, a partition offline after a failed
//! read, or a failed meta.db write, leaves the decision standing: the waiting EndTxn requests are answered
//! CONCURRENT_TRANSACTIONS (what Kafka answers while markers are written),
//! and the coordinator tries again after `TXN_RETRY_BACKOFF_MS` on its own.
//! The other decision is never carried out instead.

use std::collections::BTreeMap;

use kafka_protocol::messages::{EndTxnResponse, ProducerId, ResponseKind};
use kafka_protocol::ResponseError;

use super::record::TxnState;
use super::write::{self, Then};
use super::TxnHost;
use crate::control;
use crate::group::{offset_key, OffsetRecord};
use crate::io::MetaOp;
use crate::limits::{TXN_COMPLETE_OWED_MS, TXN_RETRY_BACKOFF_MS};
use crate::meta;
use crate::partition::MarkerRefused;
use crate::request::RequestCtx;
use crate::topics::PartitionKey;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Markers appended (or to append); waiting for them to be durable.
    Markers,
    /// The markers are durable and EndTxn answered; the Complete record
    /// (and a commit's offsets) is being stored.
    Storing,
    /// Something failed; try again at this time.
    RetryAt(i64),
}

pub struct Completion {
    pub commit: bool,
    /// EndTxn requests answered when the decision is carried out.
    pub responders: Vec<RequestCtx>,
    /// Each added partition and the offset of its marker, once appended.
    /// The transaction's own state, not the partitions': which of its
    /// partitions still wait for a marker, as Kafka's
    /// `TransactionMetadata.topicPartitions` (each removed when its marker
    /// is written, `TransactionMarkerRequestCompletionHandler`); the
    /// partition's side (the transaction closed at the marker, the LSO) is
    /// `partition::PartitionTxns`.
    markers: BTreeMap<PartitionKey, Option<i64>>,
    phase: Phase,
    /// Counted in the broker's metrics (once, when the outcome first became
    /// durable; a failed Complete write retried does not count it again).
    counted: bool,
}

impl Completion {
    /// Answered, with the Complete record still being stored: the id's next
    /// request waits for that write rather than being refused.
    pub fn settling(&self) -> bool {
        self.phase == Phase::Storing
    }

    /// The time of the next retry, if one is scheduled.
    pub fn retry_at_ms(&self) -> Option<i64> {
        match self.phase {
            Phase::RetryAt(t) => Some(t),
            _ => None,
        }
    }
}

/// The completion of `id`, which must be under way.
fn completion_mut<'a>(b: &'a mut dyn TxnHost, id: &str) -> &'a mut Completion {
    b.txns_mut()
        .get_mut(id)
        .and_then(|e| e.completion.as_mut())
        .unwrap_or_else(|| panic!("transaction {id} is not being completed"))
}

/// Starts carrying out the decision stored in `id`'s record.
pub(crate) fn start(b: &mut dyn TxnHost, id: &str, responder: Option<RequestCtx>) {
    begin(b, id, responder, false);
}

/// At start-up: carries out a decision found stored, skipping the
/// partitions whose marker is already in the log (recovered, and made
/// durable by the boot sync). A process killed after the markers were
/// written and before the Complete record was stored (it may be owed for
/// up to `TXN_COMPLETE_OWED_MS`) so does not get every marker twice.
pub(crate) fn resume(b: &mut dyn TxnHost, id: &str) {
    begin(b, id, None, true);
}

fn begin(b: &mut dyn TxnHost, id: &str, responder: Option<RequestCtx>, skip_present: bool) {
    let entry = b.txns().get(id).expect("a decided transaction");
    let record = &entry.record;
    assert!(
        record.state.is_prepare(),
        "only a stored decision is carried out"
    );
    let commit = record.state == TxnState::PrepareCommit;
    let (pid, epoch) = (record.producer_id, record.producer_epoch);
    let mut markers = BTreeMap::new();
    for (topic, partition) in &record.partitions {
        // A partition whose topic was deleted has nothing left to mark.
        if let Some(t) = b.topics().get(topic) {
            if (*partition as usize) < t.partitions.len() {
                let key = t.key(*partition);
                if skip_present && b.txn_closed_at(&key, pid, epoch) {
                    continue;
                }
                markers.insert(key, None);
            }
        }
    }
    let responders = responder.into_iter().collect();
    let completion = Completion {
        commit,
        responders,
        markers,
        phase: Phase::Markers,
        counted: false,
    };
    b.txns_mut().begin_completion(id, completion);
    write_markers(b, id);
}

/// Appends the markers not yet appended, then checks progress.
fn write_markers(b: &mut dyn TxnHost, id: &str) {
    let entry = b.txns().get(id).expect("a transaction being completed");
    let (pid, epoch) = (entry.record.producer_id, entry.record.producer_epoch);
    let completion = entry.completion.as_ref().expect("being completed");
    let commit = completion.commit;
    let missing: Vec<PartitionKey> = completion
        .markers
        .iter()
        .filter(|(_, o)| o.is_none())
        .map(|(k, _)| k.clone())
        .collect();
    let mut unavailable = false;
    for key in missing {
        match b.append_marker(&key, pid, epoch, control::COORDINATOR_EPOCH, commit) {
            Ok(offset) => {
                completion_mut(b, id).markers.insert(key, Some(offset));
            }
            // The partition is gone: nothing to mark.
            Err(MarkerRefused::Gone) => {
                completion_mut(b, id).markers.remove(&key);
            }
            // Offline: the decision stands; the marker is written later.
            Err(MarkerRefused::Offline) => unavailable = true,
        }
    }
    b.request_sync();
    if unavailable {
        return retry_later(b, id);
    }
    completion_mut(b, id).phase = Phase::Markers;
    progress(b, id);
}

/// Moves `id`'s completion forward as far as durability allows.
fn progress(b: &mut dyn TxnHost, id: &str) {
    let Some(entry) = b.txns().get(id) else {
        return;
    };
    let Some(completion) = entry.completion.as_ref() else {
        return;
    };
    if completion.phase != Phase::Markers {
        return;
    }
    let mut lost = false;
    let mut durable = true;
    let planted_early_end =
        b.config().planted_bug == Some(crate::config::PlantedBug::EndTxnBeforeMarkersDurable);
    for (key, offset) in &completion.markers {
        let offset = offset.expect("markers are appended before progress is checked");
        match b.topics().partition_by_key(key) {
            None => {} // deleted since: nothing to wait for
            Some(log) if log.log_end_offset() <= offset => lost = true,
            Some(log) if log.high_watermark() <= offset && !planted_early_end => durable = false,
            Some(_) => {}
        }
    }
    if lost {
        // A failed sync cut the marker away: the decision stands; retry.
        let gone: Vec<PartitionKey> = completion
            .markers
            .iter()
            .filter(|(key, offset)| {
                let offset = offset.expect("appended");
                b.topics()
                    .partition_by_key(key)
                    .is_some_and(|l| l.log_end_offset() <= offset)
            })
            .map(|(key, _)| key.clone())
            .collect();
        let c = completion_mut(b, id);
        for key in gone {
            c.markers.insert(key, None);
        }
        return retry_later(b, id);
    }
    if durable {
        store_complete(b, id);
    }
}

/// Stores the Complete record and, for a commit, the staged offsets, in one batch.
fn store_complete(b: &mut dyn TxnHost, id: &str) {
    if offsets_wait_for_a_topic_change(b, id) {
        return answer_and_store_later(b, id);
    }
    let entry = b.txns_mut().get_mut(id).expect("exists");
    let completion = entry.completion.as_mut().expect("completing");
    completion.phase = Phase::Storing;
    let commit = completion.commit;
    // The outcome is durable from here on and EndTxn is answered below: an
    // operator scraping /metrics right after the answer sees it counted.
    let count = !std::mem::replace(&mut completion.counted, true);
    let old = entry.record.clone();
    let now_ms = b.now_ms();
    let next = old.prepare_complete(now_ms);
    assert_eq!(
        next.record().state == TxnState::CompleteCommit,
        commit,
        "the decision carried out is the one stored"
    );
    let (pid, epoch) = (old.producer_id, old.producer_epoch);
    if count {
        b.metrics_mut().txn_completed(commit);
    }
    if !commit || old.staged_offsets.is_empty() {
        // Nothing to store that the decision does not already say: owed.
        b.txns_mut().set_record(id, next.into_record());
        let completion = b.txns_mut().end_completion(id);
        b.txns_mut().owe_complete(id, now_ms + TXN_COMPLETE_OWED_MS);
        return answer(b, completion.responders, pid, epoch);
    }
    let mut ops = Vec::new();
    let mut applied = Vec::new();
    if commit {
        for (group, offsets) in &old.staged_offsets {
            for staged in offsets {
                let (topic, partition) = (&staged.topic, &staged.partition);
                // Its topic was deleted since it was staged (and perhaps
                // created again): the offset went with it. (A deletion still
                // in meta.db was waited for: `offsets_wait_for_a_topic_change`.)
                if staged.topic_id.is_some() && staged.topic_id != b.topic_id_text(topic) {
                    continue;
                }
                let rec = OffsetRecord {
                    offset: staged.offset,
                    leader_epoch: staged.leader_epoch,
                    metadata: staged.metadata.clone().unwrap_or_default(),
                    commit_timestamp_ms: now_ms,
                    expire_timestamp_ms: None,
                };
                ops.push(MetaOp::Put {
                    key: offset_key(group, topic, *partition),
                    value: meta::encode(&rec),
                });
                applied.push((group.clone(), (topic.clone(), *partition), rec));
            }
        }
    }
    for (group, tp, _) in &applied {
        b.groups_mut().offsets.begin_write(group, tp);
    }
    write::store(b, id, next, ops, Then::Completed { applied });
    let responders = std::mem::take(&mut completion_mut(b, id).responders);
    answer(b, responders, pid, epoch);
}

/// Whether a commit's staged offset names a topic with a meta.db change in
/// flight (its deletion, say). The Complete record then waits for it:
/// written now, it would land after a deletion that removes every group's
/// offsets of the topic, and put this one back, for a topic created again
/// under the name to start from.
fn offsets_wait_for_a_topic_change(b: &dyn TxnHost, id: &str) -> bool {
    let entry = b.txns().get(id).expect("exists");
    let completion = entry.completion.as_ref().expect("completing");
    completion.commit
        && entry
            .record
            .staged_offsets
            .values()
            .flatten()
            .any(|staged| b.topics().is_busy(&staged.topic))
}

/// The outcome is durable (the decision with its offsets, the markers):
/// EndTxn is answered, and the Complete record is tried again after
/// `TXN_RETRY_BACKOFF_MS`.
fn answer_and_store_later(b: &mut dyn TxnHost, id: &str) {
    let entry = b.txns_mut().get_mut(id).expect("exists");
    let (pid, epoch) = (entry.record.producer_id, entry.record.producer_epoch);
    let completion = entry.completion.as_mut().expect("completing");
    let count = !std::mem::replace(&mut completion.counted, true);
    let commit = completion.commit;
    let responders = std::mem::take(&mut completion.responders);
    if count {
        b.metrics_mut().txn_completed(commit);
    }
    answer(b, responders, pid, epoch);
    retry_later(b, id);
}

/// EndTxn's decision could not be stored: NOT_COORDINATOR, which clients
/// retry.
pub(crate) fn not_decided(b: &mut dyn TxnHost, ctx: &RequestCtx) {
    let response = EndTxnResponse::default()
        .with_error_code(ResponseError::NotCoordinator.code())
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    b.respond(ctx, ResponseKind::EndTxn(response));
}

/// Markers durable, decision (and a commit's offsets) stored: the outcome
/// survives any crash from here on, so EndTxn is answered now.
fn answer(b: &mut dyn TxnHost, responders: Vec<RequestCtx>, pid: i64, epoch: i16) {
    for ctx in responders {
        let response = EndTxnResponse::default()
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch);
        b.respond(&ctx, ResponseKind::EndTxn(response));
    }
}

/// The Complete record is stored (or not): finish, or retry.
pub(crate) fn completed(
    b: &mut dyn TxnHost,
    id: &str,
    applied: Vec<(String, (String, i32), OffsetRecord)>,
    stored: bool,
) {
    let now_ms = b.now_ms();
    for (group, tp, rec) in applied {
        b.groups_mut().offsets.end_write(&group, &tp);
        if stored {
            // Recreates the group if it was deleted meanwhile, as Kafka's
            // replay of an offset record does.
            b.groups_mut().store_offset(now_ms, &group, tp, rec);
        }
    }
    if !stored {
        // Markers are durable; only the record failed: retry storing it.
        return retry_later(b, id);
    }
    let completion = b.txns_mut().end_completion(id);
    assert!(
        completion.counted,
        "counted when the outcome became durable"
    );
    assert!(
        completion.responders.is_empty(),
        "EndTxn is answered when the Complete record is submitted"
    );
}

fn retry_later(b: &mut dyn TxnHost, id: &str) {
    let at_ms = b.now_ms() + TXN_RETRY_BACKOFF_MS;
    let c = completion_mut(b, id);
    c.phase = Phase::RetryAt(at_ms);
    let responders = std::mem::take(&mut c.responders);
    for ctx in responders {
        let response = EndTxnResponse::default()
            .with_error_code(ResponseError::ConcurrentTransactions.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        b.respond(&ctx, ResponseKind::EndTxn(response));
    }
}

/// After every sync completion: completions waiting on markers move on.
pub(crate) fn on_sync(b: &mut dyn TxnHost) {
    let ids: Vec<String> = b
        .txns()
        .completing()
        .filter(|(_, c)| c.phase == Phase::Markers)
        .map(|(id, _)| id.clone())
        .collect();
    for id in ids {
        progress(b, &id);
    }
}

/// Timer: retries whose time has come.
pub(crate) fn on_tick(b: &mut dyn TxnHost) {
    let now_ms = b.now_ms();
    let due: Vec<(String, bool)> = b
        .txns()
        .completing()
        .filter_map(|(id, c)| {
            let at = c.retry_at_ms()?;
            let markers_done = c.markers.values().all(|o| o.is_some());
            (at <= now_ms).then(|| (id.clone(), markers_done))
        })
        .collect();
    for (id, markers_done) in due {
        if markers_done {
            let c = completion_mut(b, &id);
            c.phase = Phase::Markers;
            progress(b, &id);
        } else {
            write_markers(b, &id);
        }
    }
}

/// The earliest retry time of any completion.
pub(crate) fn next_retry_ms(b: &dyn TxnHost) -> Option<i64> {
    b.txns()
        .completing()
        .filter_map(|(_, c)| c.retry_at_ms())
        .min()
}

/// Timer: owed Complete records whose time has come are written, each on
/// its own (the meta worker flushes a queue of them once). An id with a
/// write in flight is left: that write supersedes the decision, or, if it
/// fails, the id is looked at again next time.
pub(crate) fn write_owed(b: &mut dyn TxnHost, now_ms: i64) {
    if b.txns().next_owed_write_ms.is_none_or(|at| at > now_ms) {
        return;
    }
    b.txns_mut().next_owed_write_ms = None;
    for id in b.txns().owed_idle() {
        write_owed_one(b, &id);
    }
    if b.txns().owed_waiting() {
        b.txns_mut().next_owed_write_ms = Some(now_ms + TXN_COMPLETE_OWED_MS);
    }
}

/// A stopping broker writes every owed Complete record it can (so the next
/// start does not carry those decisions out again); returns whether any is
/// still being written.
pub(crate) fn write_owed_for_stop(b: &mut dyn TxnHost) -> bool {
    for id in b.txns().owed_idle() {
        write_owed_one(b, &id);
    }
    b.txns().any_flushing()
}

fn write_owed_one(b: &mut dyn TxnHost, id: &str) {
    b.txns_mut().owed_write_started(id);
    let next = b
        .txns()
        .get(id)
        .expect("owed ids are known")
        .record
        .owed_complete();
    write::store(b, id, next, Vec::new(), Then::Owed);
}

/// An owed Complete record could not be stored: it stays owed and is
/// tried again later, or, if the broker is stopping, left to start-up.
pub(crate) fn owed_write_failed(b: &mut dyn TxnHost, id: &str) {
    let now_ms = b.now_ms();
    if b.is_stopping() {
        b.txns_mut().clear_owed(id);
        return;
    }
    if b.txns().get(id).is_some() {
        b.txns_mut().owed_write_done(id);
        b.txns_mut().owe_complete(id, now_ms + TXN_COMPLETE_OWED_MS);
    }
}
