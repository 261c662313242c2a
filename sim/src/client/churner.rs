//! An operator who deletes a scratch topic and creates it again, round
//! after round, while the faults strike: CreateTopics, OffsetFetch of the
//! reading group's offsets (there must be none), one round in two
//! CreatePartitions (one more partition), a few records produced
//! (acks=all) to every partition, a read-back from offset 0, OffsetCommit
//! of where the read-back ended, DeleteTopics, and then a Metadata request
//! that must not find it. Every record names the
//! incarnation of the topic it was produced to, so the read-back tells a
//! record of an earlier incarnation, which a deleted topic's files come
//! back would hold. The operator holds the broker to these promises itself:
//!
//! - a topic whose deletion was answered stays gone until it is created
//!   again: no crash or power cut brings it back;
//! - a topic whose creation was answered exists, and holds nothing but what
//!   was produced to it since; so does a partition CreatePartitions added;
//! - every record acknowledged to it is read back;
//! - a group's committed offsets of a deleted topic go with it (Kafka's
//!   OffsetMetadataManager.onPartitionsDeleted): a topic created again
//!   under the name has none;
//! - a transaction open on the topic when it is deleted ends, and leaves
//!   nothing behind in the next incarnation (`churn_txn`): a read_committed
//!   read-back finds the last stable offset at the high watermark;
//! - a transactional batch whose topic's DeleteTopics came right behind it
//!   on the connection is answered, acknowledged or refused
//!   UNKNOWN_TOPIC_OR_PARTITION, and the deletion too (`churn_txn`).
//!
//! Retries are AdminClient's: an answer may be lost with the connection, so
//! TOPIC_ALREADY_EXISTS after a CreateTopics went unanswered,
//! INVALID_PARTITIONS (the count is already there) after a CreatePartitions
//! went unanswered, and
//! UNKNOWN_TOPIC_OR_PARTITION (or UNKNOWN_TOPIC_ID) after a DeleteTopics
//! went unanswered, mean that one landed. The broker answers
//! UNKNOWN_SERVER_ERROR when its meta.db write fails, and nothing changed:
//! the operator runs the command again, as a script around AdminClient
//! would.

use std::collections::BTreeSet;

use kafka_protocol::messages::{
    CreatePartitionsResponse, CreateTopicsResponse, DeleteTopicsResponse, FetchResponse,
    MetadataResponse, OffsetCommitResponse, OffsetFetchResponse, ProduceResponse, ResponseKind,
};
use rand::RngExt;
use uuid::Uuid;

use super::churn_requests as requests;
use super::churn_txn::{ChurnTxn, EndAt, Outcome};
use super::values::{self, RecordId};
use super::{backoff_ms, is_retriable, Client, Cx};

/// The scratch topic's name.
pub const CHURN_TOPIC: &str = "sim-churn";
/// The group whose offsets the read-back commits (a simple group: no
/// members, generation -1).
const CHURN_GROUP: &str = "sim-churn-readers";

/// What the broker answers an admin change whose meta.db write failed.
const UNKNOWN_SERVER_ERROR: i16 = -1;
pub(super) const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const TOPIC_ALREADY_EXISTS: i16 = 36;
const INVALID_PARTITIONS: i16 = 37;
const UNKNOWN_TOPIC_ID: i16 = 100;
/// Records produced to each incarnation.
const RECORDS: std::ops::RangeInclusive<u32> = 3..=12;
/// Records in one produce request.
const BATCH_RECORDS_MAX: u32 = 4;
/// Between two rounds (ms).
const PAUSE_MS: std::ops::RangeInclusive<i64> = 0..=300;
/// Chance that a round opens a transaction before its deletion.
const TXN_P: f64 = 0.4;
/// Chance that a round's read-back is read_committed when no transaction
/// touched the topic since the last one (after one, it always is).
const READ_COMMITTED_P: f64 = 0.3;
const READ_UNCOMMITTED: i8 = 0;
const READ_COMMITTED: i8 = 1;

/// Where the operator is in one incarnation's round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Metadata: the topic must not exist.
    CheckGone,
    Create,
    /// OffsetFetch: the reading group has no offset of this incarnation.
    CheckOffsets,
    /// CreatePartitions to one partition more.
    Grow,
    Produce,
    ReadBack,
    /// OffsetCommit of where the read-back ended.
    Commit,
    Delete,
    /// The churner's transaction (`churn_txn`) asks; then `txn_then`.
    Txn,
}

pub struct Churner {
    client: u32,
    /// Partitions each incarnation is created with.
    created_partitions: i32,
    /// Partitions the current incarnation has (one more once grown).
    partitions: i32,
    /// The topic's incarnation this round creates (1 for the first).
    incarnation: u32,
    stage: Stage,
    /// The request in flight.
    asked: Option<i32>,
    /// The DeleteTopics sent right behind the transaction's Produce, not
    /// answered yet (`churn_txn`); answered after the Produce. Nothing
    /// else is sent while it is out.
    delete_behind: Option<i32>,
    /// A request of this stage went unanswered (its connection dropped): it
    /// may have landed, so an answer that the change is already made may be
    /// its doing.
    lost: bool,
    /// The incarnation's id, when CreateTopics (v7) answered it.
    topic_id: Uuid,
    /// Records to produce to this incarnation, and how many are acknowledged.
    records: u32,
    produced: u32,
    /// The batch in flight or to resend: partition, first record, count.
    batch: Option<(i32, u32, u32)>,
    /// Per partition, the records acknowledged to it.
    acked: Vec<BTreeSet<u32>>,
    /// Read-back: per partition the next offset to fetch and the records read.
    position: Vec<i64>,
    read: Vec<BTreeSet<u32>>,
    attempts: u32,
    /// Rounds finished (deletion answered).
    rounds: u32,
    stopped: bool,
    txn: ChurnTxn,
    /// The stage after the transaction's requests.
    txn_then: Stage,
    /// A transaction was opened since the last read-back.
    txn_touched: bool,
    /// This incarnation's read-back reads committed records only.
    read_committed: bool,
}

impl Churner {
    pub fn new(client: u32, partitions: i32) -> Self {
        // Room for the partition CreatePartitions adds.
        let slots = partitions as usize + 1;
        Self {
            client,
            created_partitions: partitions,
            partitions,
            incarnation: 1,
            stage: Stage::CheckGone,
            asked: None,
            delete_behind: None,
            lost: false,
            topic_id: Uuid::nil(),
            records: 0,
            produced: 0,
            batch: None,
            acked: vec![BTreeSet::new(); slots],
            position: vec![0; slots],
            read: vec![BTreeSet::new(); slots],
            attempts: 0,
            rounds: 0,
            stopped: false,
            txn: ChurnTxn::new(),
            txn_then: Stage::Delete,
            txn_touched: false,
            read_committed: false,
        }
    }

    /// The value of record `n` of the current incarnation.
    fn value(&self, n: u32) -> bytes::Bytes {
        values::encode(RecordId {
            client: self.client,
            n: u64::from(self.incarnation) << 32 | u64::from(n),
        })
    }

    /// Ends the open transaction if it is to end `at` this point, then goes
    /// on to `then`; false if there is none to end here.
    fn end_txn_at(&mut self, cx: &mut Cx, at: EndAt, then: Stage) -> bool {
        if !self.txn.open.as_ref().is_some_and(|o| o.end_at == at) {
            return false;
        }
        self.txn.end();
        self.txn_stage(cx, then);
        true
    }

    /// The transaction's requests, then `then`.
    fn txn_stage(&mut self, cx: &mut Cx, then: Stage) {
        self.txn_then = then;
        self.next_stage(cx, Stage::Txn);
    }

    fn next_stage(&mut self, cx: &mut Cx, stage: Stage) {
        self.stage = stage;
        self.lost = false;
        self.attempts = 0;
        self.send(cx);
    }

    fn retry(&mut self, cx: &mut Cx, code: i16, what: &str) {
        if !is_retriable(code) {
            return self.broken(cx, format!("{what} failed with error {code}"));
        }
        self.back_off(cx);
    }

    /// An admin change answered an error: a failed meta.db write changed
    /// nothing, and the operator runs the command again.
    fn retry_admin(&mut self, cx: &mut Cx, code: i16, what: &str) {
        if code != UNKNOWN_SERVER_ERROR {
            return self.retry(cx, code, what);
        }
        self.back_off(cx);
    }

    fn back_off(&mut self, cx: &mut Cx) {
        self.attempts += 1;
        let delay_ms = backoff_ms(cx.rng, self.attempts);
        cx.wake_in(delay_ms);
    }

    /// A promise broken: said once, and the operator stops (what follows
    /// would only repeat it).
    fn broken(&mut self, cx: &mut Cx, what: String) {
        cx.violation(format!(
            "c{} {CHURN_TOPIC} incarnation {}: {what}",
            self.client, self.incarnation
        ));
        self.stopped = true;
    }

    fn send(&mut self, cx: &mut Cx) {
        if self.stopped || self.asked.is_some() || self.delete_behind.is_some() {
            return;
        }
        if cx.wire.conn().is_none() {
            return cx.connect();
        }
        let asked = match self.stage {
            Stage::CheckGone => self.send_metadata(cx),
            Stage::Create => self.send_create(cx),
            Stage::CheckOffsets => self.send_offset_fetch(cx),
            Stage::Grow => self.send_grow(cx),
            Stage::Produce => self.send_produce(cx),
            Stage::ReadBack => self.send_fetch(cx),
            Stage::Commit => self.send_commit(cx),
            Stage::Delete => self.send_delete(cx),
            Stage::Txn => {
                let behind = self.txn.wants_delete_behind();
                let asked = self.txn.send(cx, self.client, CHURN_TOPIC, CHURN_GROUP);
                if behind && asked.is_some() {
                    self.delete_behind = self.send_delete(cx);
                    self.txn.delete_sent();
                    cx.note(format!(
                        "{CHURN_TOPIC} incarnation {}: DeleteTopics sent behind the transaction's Produce",
                        self.incarnation
                    ));
                }
                asked
            }
        };
        self.asked = asked;
    }

    fn send_metadata(&mut self, cx: &mut Cx) -> Option<i32> {
        let version = cx.rng.random_range(4..=12);
        cx.wire.send(version, &requests::metadata(CHURN_TOPIC))
    }

    fn send_create(&mut self, cx: &mut Cx) -> Option<i32> {
        let req = requests::create(CHURN_TOPIC, self.created_partitions);
        let version = cx.rng.random_range(2..=7);
        cx.wire.send(version, &req)
    }

    fn send_offset_fetch(&mut self, cx: &mut Cx) -> Option<i32> {
        let req = requests::offset_fetch(CHURN_GROUP, CHURN_TOPIC, self.partitions);
        let version = cx.rng.random_range(1..=7);
        cx.wire.send(version, &req)
    }

    fn send_commit(&mut self, cx: &mut Cx) -> Option<i32> {
        let offsets = &self.position[..self.partitions as usize];
        let req = requests::commit(CHURN_GROUP, CHURN_TOPIC, offsets);
        let version = cx.rng.random_range(2..=8);
        cx.wire.send(version, &req)
    }

    fn send_grow(&mut self, cx: &mut Cx) -> Option<i32> {
        let req = requests::grow(CHURN_TOPIC, self.created_partitions + 1);
        let version = cx.rng.random_range(0..=3);
        cx.wire.send(version, &req)
    }

    fn send_produce(&mut self, cx: &mut Cx) -> Option<i32> {
        let (partition, first, count) = match self.batch {
            Some(b) => b,
            None => {
                let partition = cx.rng.random_range(0..self.partitions);
                let left = self.records - self.produced;
                let count = cx.rng.random_range(1..=left.min(BATCH_RECORDS_MAX));
                (partition, self.produced, count)
            }
        };
        self.batch = Some((partition, first, count));
        let values: Vec<_> = (first..first + count).map(|n| self.value(n)).collect();
        let records = super::batches::encode(&values, -1, -1, -1, false, cx.now_ms, false);
        let version = cx.rng.random_range(3..=9);
        cx.wire
            .send(version, &requests::produce(CHURN_TOPIC, partition, records))
    }

    fn send_fetch(&mut self, cx: &mut Cx) -> Option<i32> {
        let isolation = if self.read_committed {
            READ_COMMITTED
        } else {
            READ_UNCOMMITTED
        };
        let positions = &self.position[..self.partitions as usize];
        let req = requests::fetch(CHURN_TOPIC, positions, isolation);
        let version = cx.rng.random_range(4..=12);
        cx.wire.send(version, &req)
    }

    fn send_delete(&mut self, cx: &mut Cx) -> Option<i32> {
        let version = cx.rng.random_range(1..=6);
        let by_id = version >= 6 && !self.topic_id.is_nil() && cx.rng.random_bool(0.5);
        let req = requests::delete(CHURN_TOPIC, version, by_id.then_some(self.topic_id));
        cx.wire.send(version, &req)
    }

    fn on_metadata(&mut self, cx: &mut Cx, r: &MetadataResponse) {
        let Some(topic) = r.topics.first() else {
            return self.broken(cx, "Metadata answered no topic".into());
        };
        match topic.error_code {
            UNKNOWN_TOPIC_OR_PARTITION => self.next_stage(cx, Stage::Create),
            0 => {
                let what = if self.incarnation == 1 {
                    "Metadata found the topic before it was ever created".to_string()
                } else {
                    format!(
                        "Metadata found the topic (id {}) after its deletion was answered",
                        topic.topic_id
                    )
                };
                self.broken(cx, what)
            }
            c => self.retry(cx, c, "Metadata"),
        }
    }

    fn on_created(&mut self, cx: &mut Cx, r: &CreateTopicsResponse) {
        let Some(topic) = r.topics.first() else {
            return self.broken(cx, "CreateTopics answered no topic".into());
        };
        match topic.error_code {
            0 => self.topic_id = topic.topic_id,
            TOPIC_ALREADY_EXISTS if self.lost => self.topic_id = Uuid::nil(),
            TOPIC_ALREADY_EXISTS => {
                let what = "CreateTopics found the topic there after Metadata did not";
                return self.broken(cx, what.into());
            }
            c => return self.retry_admin(cx, c, "CreateTopics"),
        }
        cx.note(format!(
            "{CHURN_TOPIC} incarnation {} created (id {})",
            self.incarnation, self.topic_id
        ));
        self.partitions = self.created_partitions;
        self.records = cx.rng.random_range(RECORDS);
        self.produced = 0;
        self.batch = None;
        for p in 0..self.position.len() {
            self.acked[p].clear();
            self.read[p].clear();
            self.position[p] = 0;
        }
        self.read_committed =
            std::mem::take(&mut self.txn_touched) || cx.rng.random_bool(READ_COMMITTED_P);
        // A transaction of the last incarnation ends now: its markers go to
        // this one's partitions of the same numbers.
        if self.end_txn_at(cx, EndAt::Recreated, Stage::CheckOffsets) {
            return;
        }
        self.next_stage(cx, Stage::CheckOffsets);
    }

    fn on_offsets(&mut self, cx: &mut Cx, r: &OffsetFetchResponse) {
        if r.error_code != 0 {
            return self.retry(cx, r.error_code, "OffsetFetch");
        }
        for part in r.topics.iter().flat_map(|t| t.partitions.iter()) {
            if part.error_code != 0 {
                return self.retry(cx, part.error_code, "OffsetFetch");
            }
            if part.committed_offset != -1 {
                let what = format!(
                    "{CHURN_GROUP} has offset {} of p{}, committed before the topic was deleted",
                    part.committed_offset, part.partition_index
                );
                return self.broken(cx, what);
            }
        }
        let next = if cx.rng.random_bool(0.5) {
            Stage::Grow
        } else {
            Stage::Produce
        };
        self.next_stage(cx, next);
    }

    fn on_committed(&mut self, cx: &mut Cx, r: &OffsetCommitResponse) {
        for part in r.topics.iter().flat_map(|t| t.partitions.iter()) {
            if part.error_code != 0 {
                return self.retry(cx, part.error_code, "OffsetCommit");
            }
        }
        if cx.rng.random_bool(TXN_P) {
            assert!(self.txn.open.is_none(), "the last transaction ended");
            let offsets = &self.position[..self.partitions as usize];
            self.txn
                .begin(cx, self.incarnation, self.partitions, offsets);
            self.txn_touched = true;
            return self.txn_stage(cx, Stage::Delete);
        }
        self.next_stage(cx, Stage::Delete);
    }

    fn on_grown(&mut self, cx: &mut Cx, r: &CreatePartitionsResponse) {
        let Some(topic) = r.results.first() else {
            return self.broken(cx, "CreatePartitions answered no topic".into());
        };
        match topic.error_code {
            0 => {}
            INVALID_PARTITIONS if self.lost => {}
            UNKNOWN_TOPIC_OR_PARTITION => {
                let what = "CreatePartitions found no such topic after its creation was answered";
                return self.broken(cx, what.into());
            }
            c => return self.retry_admin(cx, c, "CreatePartitions"),
        }
        self.partitions = self.created_partitions + 1;
        cx.note(format!(
            "{CHURN_TOPIC} incarnation {} grown to {} partitions",
            self.incarnation, self.partitions
        ));
        self.next_stage(cx, Stage::Produce);
    }

    fn on_produced(&mut self, cx: &mut Cx, r: &ProduceResponse) {
        let (partition, first, count) = self.batch.expect("a batch was sent");
        let Some(part) = r
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter())
            .next()
        else {
            return self.broken(cx, "Produce answered no partition".into());
        };
        match part.error_code {
            0 => {}
            UNKNOWN_TOPIC_OR_PARTITION => {
                let what = format!(
                    "Produce to p{partition} found no such topic after its creation was answered"
                );
                return self.broken(cx, what);
            }
            c => return self.retry(cx, c, "Produce"),
        }
        self.acked[partition as usize].extend(first..first + count);
        self.produced = first + count;
        self.batch = None;
        self.attempts = 0;
        if self.produced < self.records {
            return self.send(cx);
        }
        self.next_stage(cx, Stage::ReadBack);
    }

    fn on_fetched(&mut self, cx: &mut Cx, r: &FetchResponse) {
        if r.error_code != 0 {
            return self.retry(cx, r.error_code, "Fetch");
        }
        let mut caught_up = true;
        for part in r.responses.iter().flat_map(|t| t.partitions.iter()) {
            let p = part.partition_index;
            let Some(slot) = usize::try_from(p)
                .ok()
                .filter(|&s| s < self.partitions as usize)
            else {
                return self.broken(cx, format!("Fetch answered partition {p}, never asked"));
            };
            match part.error_code {
                0 => {}
                UNKNOWN_TOPIC_OR_PARTITION => {
                    let what = format!(
                        "Fetch of p{p} found no such topic after its creation was answered"
                    );
                    return self.broken(cx, what);
                }
                c => return self.retry(cx, c, "Fetch"),
            }
            if self.read_committed && part.last_stable_offset != part.high_watermark {
                let what = format!(
                    "read_committed: p{p}'s last stable offset {} is not its high watermark {}, with no transaction open on this incarnation",
                    part.last_stable_offset, part.high_watermark
                );
                return self.broken(cx, what);
            }
            if part.log_start_offset > 0 {
                let what = format!(
                    "p{p} starts at {}: nothing deleted its records",
                    part.log_start_offset
                );
                return self.broken(cx, what);
            }
            let records = part.records.clone().unwrap_or_default();
            let batches = match super::batches::decode(records) {
                Ok(b) => b,
                Err(e) => return self.broken(cx, format!("p{p}: undecodable records: {e}")),
            };
            for batch in batches.iter().filter(|b| b.control.is_none()) {
                for (offset, value) in batch
                    .records
                    .iter()
                    .filter(|(o, _)| *o >= self.position[slot])
                {
                    let id = values::decode(value).filter(|id| id.client == self.client);
                    let of_this = id.filter(|id| id.n >> 32 == u64::from(self.incarnation));
                    let Some(id) = of_this else {
                        let found = id.map_or("a value not ours".to_string(), |id| {
                            format!(
                                "record {} of incarnation {}",
                                id.n & 0xffff_ffff,
                                id.n >> 32
                            )
                        });
                        return self.broken(cx, format!("p{p}@{offset} holds {found}"));
                    };
                    self.read[slot].insert(id.n as u32);
                }
                self.position[slot] = self.position[slot].max(batch.last_offset + 1);
            }
            if self.position[slot] < part.high_watermark {
                caught_up = false;
            }
        }
        if !caught_up {
            return self.send(cx);
        }
        for p in 0..self.partitions as usize {
            let lost: Vec<_> = self.acked[p].difference(&self.read[p]).collect();
            if !lost.is_empty() {
                let what = format!(
                    "p{p}: acknowledged records {lost:?} not read back (read {:?})",
                    self.read[p]
                );
                return self.broken(cx, what);
            }
        }
        self.next_stage(cx, Stage::Commit);
    }

    fn on_deleted(&mut self, cx: &mut Cx, r: &DeleteTopicsResponse) {
        let Some(topic) = r.responses.first() else {
            return self.broken(cx, "DeleteTopics answered no topic".into());
        };
        match topic.error_code {
            0 => {}
            UNKNOWN_TOPIC_OR_PARTITION | UNKNOWN_TOPIC_ID if self.lost => {}
            UNKNOWN_TOPIC_OR_PARTITION | UNKNOWN_TOPIC_ID => {
                let what = "DeleteTopics found no such topic after its creation was answered";
                return self.broken(cx, what.into());
            }
            c => return self.retry_admin(cx, c, "DeleteTopics"),
        }
        cx.note(format!(
            "{CHURN_TOPIC} incarnation {} deleted",
            self.incarnation
        ));
        self.rounds += 1;
        self.incarnation += 1;
        self.topic_id = Uuid::nil();
        // A transaction open on the deleted incarnation ends now: its
        // partitions are gone.
        if self.end_txn_at(cx, EndAt::Deleted, Stage::CheckGone) {
            return;
        }
        self.stage = Stage::CheckGone;
        self.lost = false;
        self.attempts = 0;
        let pause_ms = cx.rng.random_range(PAUSE_MS);
        cx.wake_in(pause_ms);
    }

    fn on_txn(&mut self, cx: &mut Cx, response: ResponseKind) {
        match self.txn.on_response(cx, response) {
            Outcome::Again { backoff: true } => self.back_off(cx),
            Outcome::Again { backoff: false } => {
                self.attempts = 0;
                self.send(cx);
            }
            // The deletion is out already: its answer moves on.
            Outcome::Done if self.delete_behind.is_some() => {
                assert_eq!(self.txn_then, Stage::Delete, "only the writes race it");
                self.stage = Stage::Delete;
                self.lost = false;
                self.attempts = 0;
            }
            Outcome::Done => self.next_stage(cx, self.txn_then),
            Outcome::Broken(what) => self.broken(cx, what),
        }
    }

    /// The answer to the DeleteTopics sent behind the transaction's
    /// Produce (the Produce's answer came first). If the Produce is still
    /// to be asked again, a deletion that landed leaves its batches lost;
    /// one refused changed nothing, and the Produce goes again first, then
    /// a DeleteTopics of its own (`Stage::Delete`).
    fn on_deleted_behind(&mut self, cx: &mut Cx, r: &DeleteTopicsResponse) {
        if self.stage == Stage::Txn {
            let code = r.responses.first().map_or(0, |t| t.error_code);
            if !matches!(code, 0 | UNKNOWN_TOPIC_OR_PARTITION | UNKNOWN_TOPIC_ID) {
                return self.retry_admin(cx, code, "DeleteTopics");
            }
            self.txn.abandon_unacked(cx);
        }
        self.stage = Stage::Delete;
        self.on_deleted(cx, r);
    }
}

impl Client for Churner {
    fn name(&self) -> String {
        format!("c{} (deletes and re-creates {CHURN_TOPIC})", self.client)
    }

    fn on_wake(&mut self, cx: &mut Cx) {
        self.send(cx);
    }

    fn on_response(&mut self, cx: &mut Cx, corr: i32, response: ResponseKind) {
        if self.delete_behind == Some(corr) {
            assert!(self.asked.is_none(), "answered in order, after the Produce");
            self.delete_behind = None;
            let ResponseKind::DeleteTopics(r) = response else {
                panic!("c{}: {response:?} answered a DeleteTopics", self.client);
            };
            return self.on_deleted_behind(cx, &r);
        }
        assert_eq!(self.asked, Some(corr), "one request in flight");
        self.asked = None;
        match (self.stage, response) {
            (Stage::CheckGone, ResponseKind::Metadata(r)) => self.on_metadata(cx, &r),
            (Stage::Create, ResponseKind::CreateTopics(r)) => self.on_created(cx, &r),
            (Stage::CheckOffsets, ResponseKind::OffsetFetch(r)) => self.on_offsets(cx, &r),
            (Stage::Grow, ResponseKind::CreatePartitions(r)) => self.on_grown(cx, &r),
            (Stage::Produce, ResponseKind::Produce(r)) => self.on_produced(cx, &r),
            (Stage::ReadBack, ResponseKind::Fetch(r)) => self.on_fetched(cx, &r),
            (Stage::Commit, ResponseKind::OffsetCommit(r)) => self.on_committed(cx, &r),
            (Stage::Delete, ResponseKind::DeleteTopics(r)) => self.on_deleted(cx, &r),
            (Stage::Txn, r) => self.on_txn(cx, r),
            (stage, other) => panic!("c{}: {other:?} answered in {stage:?}", self.client),
        }
    }

    fn on_disconnect(&mut self, cx: &mut Cx) {
        // Whatever was in flight is lost; it may have landed.
        self.lost |= self.asked.take().is_some();
        if self.delete_behind.take().is_some() {
            // The deletion may have landed, and with it the batches'
            // partitions: what is not acknowledged is lost, and the
            // operator deletes again (an unknown topic then means it did).
            self.txn.abandon_unacked(cx);
            self.stage = Stage::Delete;
            self.lost = true;
        }
        let delay_ms = backoff_ms(cx.rng, self.attempts);
        cx.wake_in(delay_ms);
    }

    fn finish(&mut self) {
        self.stopped = true;
    }

    fn is_done(&self) -> bool {
        self.stopped && self.asked.is_none() && self.delete_behind.is_none()
    }

    fn status(&self) -> String {
        format!(
            "c{} ({CHURN_TOPIC}): incarnation {} {:?} rounds {} transactions ended {} open {:?} stopped={}",
            self.client,
            self.incarnation,
            self.stage,
            self.rounds,
            self.txn.ended,
            self.txn.open,
            self.stopped
        )
    }
}
