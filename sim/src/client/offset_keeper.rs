//! A consumer outside group management that commits offsets of the main
//! topic to a simple group now and then, most of them with a retention time
//! of their own (OffsetCommit v2-v4: a second or so, in a run whose broker
//! checks for expired offsets every 100 ms), and reads them back with
//! OffsetFetch, while the faults strike. It holds the broker to Kafka's
//! expiry (`OffsetExpirationConditionImpl`):
//!
//! - an acknowledged offset is there until its retention could have run
//!   out: read back before the first send of its commit plus its retention,
//!   it must be the committed value (a commit made while the expiry's
//!   deletion is in flight, or in flight when the check runs, is not lost
//!   to it);
//! - after that it is that value or gone (-1), never another;
//! - an offset seen gone stays gone until committed again (a crash or a
//!   power cut does not bring it back).
//!
//! Now and then it deletes one partition's offset (OffsetDelete) or the
//! whole group (DeleteGroups), as an operator resetting a consumer would:
//! an offset whose deletion was answered is gone until committed again.
//!
//! A request whose answer is lost with its connection is sent again (a
//! commit with the same value: its first send bounds when it could have
//! landed; a lost deletion may have landed, so until the next commit the
//! offset may be gone). Offsets
//! seen expire are counted (`History::offsets_expired_seen`), so a run in
//! which none expire shows.

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, GroupId, OffsetCommitRequest, OffsetCommitResponse,
    OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchResponse, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rand::RngExt;

use super::{backoff_ms, churn_requests, is_retriable, Client, Cx};

/// The simple group the keeper commits to.
pub const KEEPER_GROUP: &str = "sim-keeper";
/// The retention times a commit may carry (ms); -1 is the broker's, a week.
const RETENTIONS_MS: [i64; 5] = [-1, 100, 400, 900, 1_500];
/// Between two requests (ms).
const PAUSE_MS: std::ops::RangeInclusive<i64> = 0..=250;
/// Chances, per request, of an OffsetDelete and of a DeleteGroups (the
/// rest are commits and read-backs, half each).
const OFFSET_DELETE_P: f64 = 0.07;
const GROUP_DELETE_P: f64 = 0.03;
/// The group is gone (all its offsets expired or deleted): nothing to delete.
const GROUP_ID_NOT_FOUND: i16 = 69;

/// An offset the broker acknowledged.
#[derive(Clone, Copy, Debug)]
struct Committed {
    value: i64,
    /// When its commit was first sent: it cannot have landed before.
    first_sent_ms: i64,
    /// Its own retention time; None: the broker's (a week).
    retention_ms: Option<i64>,
}

impl Committed {
    /// The earliest time it may be gone.
    fn may_expire_at_ms(&self) -> i64 {
        self.retention_ms
            .map_or(i64::MAX, |r| self.first_sent_ms.saturating_add(r))
    }
}

/// A commit being made (sent, or to send again).
#[derive(Clone, Copy, Debug)]
struct Commit {
    partition: i32,
    value: i64,
    retention_ms: i64,
    first_sent_ms: Option<i64>,
}

/// What the keeper knows of one partition's offset, once committed.
#[derive(Clone, Copy, Debug)]
struct Known {
    committed: Committed,
    /// Read back as gone since.
    seen_gone: bool,
    /// A deletion of it went unanswered: it may have landed.
    maybe_deleted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Commit,
    Fetch,
    /// OffsetDelete of one partition.
    DeleteOffset(i32),
    DeleteGroup,
}

pub struct OffsetKeeper {
    client: u32,
    topic: &'static str,
    partitions: i32,
    stage: Stage,
    asked: Option<i32>,
    commit: Option<Commit>,
    next_value: i64,
    /// Per partition, the last acknowledged offset (None: none, or deleted).
    acked: Vec<Option<Known>>,
    attempts: u32,
    stopped: bool,
}

impl OffsetKeeper {
    pub fn new(client: u32, topic: &'static str, partitions: i32) -> Self {
        Self {
            client,
            topic,
            partitions,
            stage: Stage::Commit,
            asked: None,
            commit: None,
            next_value: 1,
            acked: vec![None; partitions as usize],
            attempts: 0,
            stopped: false,
        }
    }

    fn broken(&mut self, cx: &mut Cx, what: String) {
        cx.violation(format!("c{} {KEEPER_GROUP}: {what}", self.client));
        self.stopped = true;
    }

    fn retry(&mut self, cx: &mut Cx, code: i16, what: &str) {
        if !is_retriable(code) {
            return self.broken(cx, format!("{what} failed with error {code}"));
        }
        self.attempts += 1;
        let delay_ms = backoff_ms(cx.rng, self.attempts);
        cx.wake_in(delay_ms);
    }

    /// The next request after a pause: a commit or a read-back, now and
    /// then a deletion.
    fn pause(&mut self, cx: &mut Cx) {
        self.attempts = 0;
        let draw: f64 = cx.rng.random();
        self.stage = if draw < GROUP_DELETE_P {
            Stage::DeleteGroup
        } else if draw < GROUP_DELETE_P + OFFSET_DELETE_P {
            Stage::DeleteOffset(cx.rng.random_range(0..self.partitions))
        } else if cx.rng.random_bool(0.5) {
            Stage::Commit
        } else {
            Stage::Fetch
        };
        let delay_ms = cx.rng.random_range(PAUSE_MS);
        cx.wake_in(delay_ms);
    }

    fn send(&mut self, cx: &mut Cx) {
        if self.stopped || self.asked.is_some() {
            return;
        }
        if cx.wire.conn().is_none() {
            return cx.connect();
        }
        self.asked = match self.stage {
            Stage::Commit => self.send_commit(cx),
            Stage::Fetch => {
                let req = churn_requests::offset_fetch(KEEPER_GROUP, self.topic, self.partitions);
                let version = cx.rng.random_range(1..=7);
                cx.wire.send(version, &req)
            }
            Stage::DeleteOffset(p) => {
                let partition = OffsetDeleteRequestPartition::default().with_partition_index(p);
                let req = OffsetDeleteRequest::default()
                    .with_group_id(group_id())
                    .with_topics(vec![OffsetDeleteRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str(self.topic)))
                        .with_partitions(vec![partition])]);
                cx.wire.send(0, &req)
            }
            Stage::DeleteGroup => {
                let req = DeleteGroupsRequest::default().with_groups_names(vec![group_id()]);
                let version = cx.rng.random_range(0..=2);
                cx.wire.send(version, &req)
            }
        };
    }

    /// The partitions the deletion in flight names.
    fn deleting(&self) -> Vec<usize> {
        match self.stage {
            Stage::DeleteOffset(p) => vec![p as usize],
            Stage::DeleteGroup => (0..self.partitions as usize).collect(),
            Stage::Commit | Stage::Fetch => Vec::new(),
        }
    }

    /// A deletion was answered: its partitions' offsets are gone.
    fn deleted(&mut self, partitions: &[usize]) {
        for &p in partitions {
            self.acked[p] = None;
        }
    }

    fn on_offset_deleted(&mut self, cx: &mut Cx, r: &OffsetDeleteResponse) {
        match r.error_code {
            0 => {}
            // Forgotten: a read-back says whether that was its due.
            GROUP_ID_NOT_FOUND => return self.pause(cx),
            code => return self.retry(cx, code, "OffsetDelete"),
        }
        for part in r.topics.iter().flat_map(|t| t.partitions.iter()) {
            if part.error_code != 0 {
                return self.retry(cx, part.error_code, "OffsetDelete");
            }
        }
        self.deleted(&self.deleting());
        self.pause(cx);
    }

    fn on_group_deleted(&mut self, cx: &mut Cx, r: &DeleteGroupsResponse) {
        let Some(result) = r.results.first() else {
            return self.broken(cx, "DeleteGroups answered no group".into());
        };
        match result.error_code {
            0 => self.deleted(&self.deleting()),
            GROUP_ID_NOT_FOUND => {}
            code => return self.retry(cx, code, "DeleteGroups"),
        }
        self.pause(cx);
    }

    fn send_commit(&mut self, cx: &mut Cx) -> Option<i32> {
        let mut commit = match self.commit {
            Some(c) => c,
            None => {
                let value = self.next_value;
                self.next_value += 1;
                Commit {
                    partition: cx.rng.random_range(0..self.partitions),
                    value,
                    retention_ms: RETENTIONS_MS[cx.rng.random_range(0..RETENTIONS_MS.len())],
                    first_sent_ms: None,
                }
            }
        };
        // v2-v4 carry the retention time; a commit at the broker's may go
        // at any version.
        let version = if commit.retention_ms == -1 {
            cx.rng.random_range(2..=8)
        } else {
            cx.rng.random_range(2..=4)
        };
        let req = commit_request(self.topic, &commit);
        let asked = cx.wire.send(version, &req);
        if asked.is_some() {
            commit.first_sent_ms.get_or_insert(cx.now_ms);
        }
        self.commit = Some(commit);
        asked
    }

    fn on_committed(&mut self, cx: &mut Cx, r: &OffsetCommitResponse) {
        for part in r.topics.iter().flat_map(|t| t.partitions.iter()) {
            if part.error_code != 0 {
                return self.retry(cx, part.error_code, "OffsetCommit");
            }
        }
        let commit = self.commit.take().expect("a commit was in flight");
        let committed = Committed {
            value: commit.value,
            first_sent_ms: commit.first_sent_ms.expect("it was sent"),
            retention_ms: (commit.retention_ms != -1).then_some(commit.retention_ms),
        };
        self.acked[commit.partition as usize] = Some(Known {
            committed,
            seen_gone: false,
            maybe_deleted: false,
        });
        self.pause(cx);
    }

    fn on_fetched(&mut self, cx: &mut Cx, r: &OffsetFetchResponse) {
        if r.error_code != 0 {
            return self.retry(cx, r.error_code, "OffsetFetch");
        }
        let parts = r.topics.iter().flat_map(|t| t.partitions.iter());
        if let Some(part) = parts.clone().find(|p| p.error_code != 0) {
            return self.retry(cx, part.error_code, "OffsetFetch");
        }
        for part in parts {
            let p = part.partition_index as usize;
            let got = part.committed_offset;
            let Some(known) = self.acked[p] else {
                if got != -1 {
                    let what = format!("p{p} has offset {got}, not committed since its deletion");
                    return self.broken(cx, what);
                }
                continue;
            };
            let (committed, seen_gone) = (known.committed, known.seen_gone);
            if got == committed.value && !seen_gone {
                continue;
            }
            let expired = cx.now_ms >= committed.may_expire_at_ms();
            if got == -1 && (expired || known.maybe_deleted) {
                if !seen_gone && !known.maybe_deleted {
                    cx.history.offsets_expired_seen += 1;
                }
                self.acked[p] = Some(Known {
                    seen_gone: true,
                    ..known
                });
                continue;
            }
            let what = if got == -1 {
                format!(
                    "p{p}'s offset {} is gone {} ms after its commit was first sent, \
                     before its retention of {:?} ms",
                    committed.value,
                    cx.now_ms - committed.first_sent_ms,
                    committed.retention_ms
                )
            } else if seen_gone && got == committed.value {
                format!("p{p}'s offset {got} came back after it was seen expired")
            } else {
                format!(
                    "p{p} has offset {got}, but {} was the last committed",
                    committed.value
                )
            };
            return self.broken(cx, what);
        }
        self.pause(cx);
    }
}

fn group_id() -> GroupId {
    GroupId(StrBytes::from_static_str(KEEPER_GROUP))
}

/// One partition's commit from outside group management (generation -1),
/// with the commit's retention time (a field of v2-v4; -1 elsewhere).
fn commit_request(topic: &'static str, commit: &Commit) -> OffsetCommitRequest {
    let partition = OffsetCommitRequestPartition::default()
        .with_partition_index(commit.partition)
        .with_committed_offset(commit.value);
    OffsetCommitRequest::default()
        .with_group_id(group_id())
        .with_generation_id_or_member_epoch(-1)
        .with_retention_time_ms(commit.retention_ms)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(topic)))
            .with_partitions(vec![partition])])
}

impl Client for OffsetKeeper {
    fn name(&self) -> String {
        format!(
            "c{} (commits expiring offsets to {KEEPER_GROUP})",
            self.client
        )
    }

    fn on_wake(&mut self, cx: &mut Cx) {
        self.send(cx);
    }

    fn on_response(&mut self, cx: &mut Cx, corr: i32, response: ResponseKind) {
        assert_eq!(self.asked, Some(corr), "one request in flight");
        self.asked = None;
        match (self.stage, response) {
            (Stage::Commit, ResponseKind::OffsetCommit(r)) => self.on_committed(cx, &r),
            (Stage::Fetch, ResponseKind::OffsetFetch(r)) => self.on_fetched(cx, &r),
            (Stage::DeleteOffset(_), ResponseKind::OffsetDelete(r)) => {
                self.on_offset_deleted(cx, &r)
            }
            (Stage::DeleteGroup, ResponseKind::DeleteGroups(r)) => self.on_group_deleted(cx, &r),
            (stage, other) => panic!("c{}: {other:?} answered in {stage:?}", self.client),
        }
    }

    fn on_disconnect(&mut self, cx: &mut Cx) {
        // A commit in flight may have landed; it goes again, the same value.
        // So does a deletion, which may have landed too.
        if self.asked.take().is_some() {
            for p in self.deleting() {
                if let Some(known) = &mut self.acked[p] {
                    known.maybe_deleted = true;
                }
            }
        }
        let delay_ms = backoff_ms(cx.rng, self.attempts);
        cx.wake_in(delay_ms);
    }

    fn finish(&mut self) {
        self.stopped = true;
    }

    fn is_done(&self) -> bool {
        self.stopped && self.asked.is_none()
    }

    fn status(&self) -> String {
        format!(
            "c{} ({KEEPER_GROUP}): {:?} next value {} stopped={}",
            self.client, self.stage, self.next_value, self.stopped
        )
    }
}
