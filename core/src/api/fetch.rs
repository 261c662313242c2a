//! Fetch (key 1), v4–v12.
//!
//! Returns whole stored batches, as the producer sent them, from the batch
//! holding the fetch offset up to the high watermark (the durable end), or up
//! to the last stable offset under read_committed. Sizes follow KIP-74: the
//! response stops at max_bytes and each partition at partition_max_bytes,
//! except that the first batch of the first non-empty partition is sent whole
//! so a consumer can always make progress.
//!
//! Long polling: a fetch with less than min_bytes available waits until new
//! data becomes durable or max_wait_ms passes (clamped to FETCH_WAIT_MS_MAX).
//!
//! Fetch sessions (KIP-227, v7+) as Kafka serves them (`crate::fetch_sessions`):
//! a full fetch with epoch 0 opens one; an incremental fetch reads all of its
//! session's partitions, and its answer leaves out those with nothing new. A
//! session error (unknown id, wrong epoch) is answered at once, with no
//! partitions. A fetch with no partition to read is answered at once, as
//! Kafka's ReplicaManager.fetchMessages answers an empty fetchInfos.
//!
//! read_committed readers are never sent anything at or above the last
//! stable offset, and get the aborted transactions overlapping what they were
//! sent (`PartitionTxns::aborted_overlapping`); read_uncommitted readers get
//! no list (null), as Kafka (a list there was Redpanda #18852).
//!
//! ACL: READ on each topic (else TOPIC_AUTHORIZATION_FAILED, no records, no wait).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId, ResponseKind};
use kafka_protocol::ResponseError;

use super::reads::{self, Gathered, Parked};
use super::RequestCtx;
use crate::api::Cx;
use crate::core_state::Core;
use crate::fetch_sessions::{Answered, SessionUse};
use crate::io::FileRange;
use crate::limits;
use crate::log::{Locate, LogPosition, ReadError};
use crate::security::acl::{resource, Op};

const READ_COMMITTED: i8 = 1;

/// A fetch parked until data arrives or its deadline.
pub struct WaitingFetch {
    pub ctx: RequestCtx,
    pub deadline_ms: i64,
    req: FetchRequest,
    session: SessionUse,
    gathered: Gathered,
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, mut req: FetchRequest) {
    let now_ms = b.core.now_ms();
    let session = match b.core.fetch_sessions_mut().open(now_ms, &mut req) {
        Ok(session) => session,
        Err(e) => {
            let response = FetchResponse::default()
                .with_error_code(e.code())
                .with_session_id(0);
            return b.core.respond(&ctx, ResponseKind::Fetch(response));
        }
    };
    if let SessionUse::Incremental { .. } = session {
        b.core.metrics_mut().fetches_incremental += 1;
    }
    let filled = filled(b.core, &req, session);
    let read = filled.as_ref().unwrap_or(&req);
    let unreadable = unreadable_topics(b.core, &ctx, read);
    let refused_whole = !read.topics.is_empty()
        && (read.topics.iter()).all(|t| unreadable.contains(t.topic.0.as_str()));
    let nothing_to_read = read.topics.iter().all(|t| t.partitions.is_empty());
    let wait_ms = if refused_whole || nothing_to_read {
        0 // nothing to wait for: Kafka answers at once
    } else {
        (req.max_wait_ms as i64).clamp(0, limits::FETCH_WAIT_MS_MAX)
    };
    let deadline_ms = now_ms + wait_ms;
    let gathered = Gathered::refusing(unreadable);
    run(b, ctx, req, filled, session, deadline_ms, gathered);
}

/// The topics the principal may not READ.
fn unreadable_topics(b: &Core, ctx: &RequestCtx, req: &FetchRequest) -> BTreeSet<String> {
    let names: BTreeSet<&str> = req.topics.iter().map(|t| t.topic.0.as_str()).collect();
    names
        .into_iter()
        .filter(|name| !b.authorized(ctx, Op::Read, resource::TOPIC, name))
        .map(str::to_string)
        .collect()
}

/// Builds the response with what the request has read so far: answers it,
/// parks it for more reads, or lets it wait for data.
pub(crate) fn resume(
    b: &mut Cx,
    ctx: RequestCtx,
    req: FetchRequest,
    session: SessionUse,
    deadline_ms: i64,
    gathered: Gathered,
) {
    let filled = filled(b.core, &req, session);
    run(b, ctx, req, filled, session, deadline_ms, gathered)
}

/// `resume` with an incremental fetch's session partitions already filled
/// in (`filled`), so that a fetch coming in fills them once.
fn run(
    b: &mut Cx,
    ctx: RequestCtx,
    req: FetchRequest,
    filled: Option<FetchRequest>,
    session: SessionUse,
    deadline_ms: i64,
    gathered: Gathered,
) {
    let read = filled.as_ref().unwrap_or(&req);
    match build(b.core, read, &gathered) {
        Err(needs) => {
            let parked = Parked::Fetch {
                req,
                session,
                deadline_ms,
            };
            reads::park(b, ctx, parked, gathered, needs)
        }
        Ok(built) if built.satisfies(&req) || b.core.now_ms() >= deadline_ms => {
            respond(b, &ctx, read, session, built)
        }
        Ok(_) => b.park_fetch(WaitingFetch {
            ctx,
            deadline_ms,
            req,
            session,
            gathered,
        }),
    }
}

fn respond(b: &mut Cx, ctx: &RequestCtx, req: &FetchRequest, session: SessionUse, built: Built) {
    let built = match with_session(b.core, req, session, built) {
        Ok(built) => built,
        Err(response) => return b.core.respond(ctx, ResponseKind::Fetch(response)),
    };
    if built.files.is_empty() {
        return b.core.respond(ctx, ResponseKind::Fetch(built.response));
    }
    match super::fetch_frame::encode(
        ctx.correlation_id,
        ctx.version,
        &built.response,
        &built.files,
    ) {
        Ok(parts) => {
            for (ti, bytes, records) in built.sent {
                b.core
                    .count_fetched(&req.topics[ti].topic.0, bytes, records);
            }
            b.core.respond_parts(ctx, parts)
        }
        Err(e) => {
            // Our bug, but the client must not hang: close and say why.
            tracing::error!(version = ctx.version, "cannot encode fetch response: {e:#}");
            b.core.close(ctx.conn);
        }
    }
}

/// Answers waiting fetches that now have enough data (`data_changed`) or
/// whose deadline has passed.
pub(crate) fn wake(b: &mut Cx, data_changed: bool) {
    let mut i = 0;
    loop {
        // A response may close its connection, and what that connection
        // had parked goes at once.
        b.catch_up();
        let Some(waiting) = b.waiting_fetch(i) else {
            break;
        };
        let expired = b.core.now_ms() >= waiting.deadline_ms;
        if !expired && !data_changed {
            i += 1;
            continue;
        }
        let read = filled(b.core, &waiting.req, waiting.session);
        match build(
            b.core,
            read.as_ref().unwrap_or(&waiting.req),
            &waiting.gathered,
        ) {
            Ok(built) if expired || built.satisfies(&waiting.req) => {
                let waiting = b.unpark_fetch(i);
                let req = read.as_ref().unwrap_or(&waiting.req);
                respond(b, &waiting.ctx, req, waiting.session, built);
            }
            Ok(_) => i += 1,
            Err(needs) => {
                let w = b.unpark_fetch(i);
                let parked = Parked::Fetch {
                    req: w.req,
                    session: w.session,
                    deadline_ms: w.deadline_ms,
                };
                reads::park(b, w.ctx, parked, w.gathered, needs);
            }
        }
    }
    // swap_remove reorders; keep deadlines found by poll_timeout's min().
}

/// An incremental fetch with its session's partitions, as they are now,
/// filled in (`FetchSessions::open`); None for any other, which reads its
/// own.
fn filled(b: &Core, req: &FetchRequest, session: SessionUse) -> Option<FetchRequest> {
    match session {
        SessionUse::Incremental { id, .. } => {
            Some(req.clone().with_topics(b.fetch_sessions().topics(id)))
        }
        _ => None,
    }
}

/// The answer as the fetch's session shapes it: a new session's id, or an
/// incremental answer without the partitions that have nothing new. Err is
/// the whole answer when the session went or moved on while the fetch
/// waited.
fn with_session(
    b: &mut Core,
    req: &FetchRequest,
    session: SessionUse,
    mut built: Built,
) -> Result<Built, FetchResponse> {
    match session {
        SessionUse::Sessionless => Ok(built),
        SessionUse::Open => {
            let now_ms = b.now_ms();
            built.response.session_id =
                (b.fetch_sessions_mut()).create(now_ms, req, &built.response);
            Ok(built)
        }
        SessionUse::Incremental { id, epoch } => {
            let answered = built.answered();
            match b.fetch_sessions_mut().answer(id, epoch, req, &answered) {
                Ok(keep) => {
                    built.keep_only(&keep);
                    built.response.session_id = id;
                    Ok(built)
                }
                Err(e) => {
                    // Kafka names the session with a moved epoch, not a gone one.
                    let named = if e == ResponseError::InvalidFetchSessionEpoch {
                        id
                    } else {
                        0
                    };
                    Err(FetchResponse::default()
                        .with_error_code(e.code())
                        .with_session_id(named))
                }
            }
        }
    }
}

struct Built {
    response: FetchResponse,
    /// The record sets sent as file ranges, by (topic, partition) index.
    files: BTreeMap<(usize, usize), Vec<FileRange>>,
    /// What each partition with file ranges sends, for the topic's
    /// counters: (topic index, bytes, offsets sent whole).
    sent: Vec<(usize, u64, u64)>,
    bytes: usize,
    /// A partition error ends the wait at once, as in Kafka.
    has_error: bool,
}

impl Built {
    /// What each partition's answer says, for its session.
    fn answered(&self) -> Vec<Vec<Answered>> {
        (self.response.responses.iter().enumerate())
            .map(|(ti, topic)| {
                (topic.partitions.iter().enumerate())
                    .map(|(pi, pd)| Answered {
                        high_watermark: pd.high_watermark,
                        log_start_offset: pd.log_start_offset,
                        error_code: pd.error_code,
                        has_records: self.files.contains_key(&(ti, pi)),
                    })
                    .collect()
            })
            .collect()
    }

    /// Leaves out the partitions `keep` says not to send, and topics left
    /// with none; the file ranges follow their partitions' new places.
    fn keep_only(&mut self, keep: &[Vec<bool>]) {
        let mut files = BTreeMap::new();
        let mut responses = Vec::new();
        for (ti, mut topic) in std::mem::take(&mut self.response.responses)
            .into_iter()
            .enumerate()
        {
            let mut partitions = Vec::new();
            for (pi, pd) in std::mem::take(&mut topic.partitions)
                .into_iter()
                .enumerate()
            {
                if !keep[ti][pi] {
                    continue;
                }
                if let Some(ranges) = self.files.remove(&(ti, pi)) {
                    files.insert((responses.len(), partitions.len()), ranges);
                }
                partitions.push(pd);
            }
            if !partitions.is_empty() {
                topic.partitions = partitions;
                responses.push(topic);
            }
        }
        assert!(
            self.files.is_empty(),
            "a partition with records is always sent"
        );
        self.files = files;
        self.response.responses = responses;
    }

    fn satisfies(&self, req: &FetchRequest) -> bool {
        self.has_error || self.bytes >= req.min_bytes.max(0) as usize
    }
}

/// What one partition sends.
enum Records {
    Empty,
    /// Ranges of consecutive segments, whole batches but for the last,
    /// and how many offsets they send whole (`PartitionLog::offsets_sent`).
    File(Vec<FileRange>, u64),
    Error(ResponseError),
}

/// The response, or the ranges to read before it can be built.
fn build(b: &Core, req: &FetchRequest, gathered: &Gathered) -> Result<Built, Vec<FileRange>> {
    let read_committed = req.isolation_level == READ_COMMITTED;
    let max_bytes = (req.max_bytes.max(0) as usize).min(limits::FETCH_RESPONSE_BYTES_MAX);
    let mut total = 0usize;
    let mut has_error = false;
    let mut needs = Vec::new();
    let mut files = BTreeMap::new();
    let mut sent = Vec::new();
    let mut responses = Vec::with_capacity(req.topics.len());
    for (ti, topic) in req.topics.iter().enumerate() {
        let name = topic.topic.0.as_str();
        let refused = gathered.refused.contains(name);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for (pi, p) in topic.partitions.iter().enumerate() {
            let mut pd = PartitionData::default()
                .with_partition_index(p.partition)
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1)
                .with_preferred_read_replica(BrokerId(-1));
            if refused {
                // Kafka's FetchResponse.partitionResponse; not an error
                // that ends the wait: Kafka never hands it to the read.
                pd.error_code = ResponseError::TopicAuthorizationFailed.code();
                partitions.push(pd);
                continue;
            }
            let part = match b.partition_view(name, p.partition) {
                Ok(part) => part,
                Err(e) => {
                    pd.error_code = e.code();
                    has_error = true;
                    partitions.push(pd);
                    continue;
                }
            };
            let log = part.log();
            let hw = log.high_watermark();
            pd.high_watermark = hw;
            pd.last_stable_offset = part.last_stable_offset();
            pd.log_start_offset = log.log_start_offset();
            let serve_above_lso =
                b.config().planted_bug == Some(crate::config::PlantedBug::ServeAboveLso);
            let upper = part.read_bound(read_committed && !serve_above_lso);
            pd.aborted_transactions = None;
            if read_committed {
                let aborted = part
                    .txns()
                    .map(|t| t.aborted_overlapping(p.fetch_offset, upper))
                    .unwrap_or_default();
                pd.aborted_transactions = Some(
                    aborted
                        .into_iter()
                        .map(|a| {
                            AbortedTransaction::default()
                                .with_producer_id(ProducerId(a.producer_id))
                                .with_first_offset(a.first_offset)
                        })
                        .collect(),
                );
            }
            let room = max_bytes
                .saturating_sub(total)
                .min(p.partition_max_bytes.max(0) as usize);
            let first = total == 0;
            let records = if p.fetch_offset >= upper && p.fetch_offset <= log.log_end_offset() {
                // Between the stable/durable end and the log end: nothing yet.
                Records::Empty
            } else if p.fetch_offset < log.log_start_offset()
                || p.fetch_offset > log.log_end_offset()
            {
                Records::Error(ResponseError::OffsetOutOfRange)
            } else {
                let located = log
                    .locate(p.fetch_offset, &gathered.reads)
                    .and_then(|first_batch| {
                        let upper_position = if upper == hw {
                            Locate::Found(log.high_watermark_position())
                        } else {
                            log.locate(upper, &gathered.reads)
                                .map_found(|pos| LogPosition {
                                    segment_base: pos.segment_base,
                                    position: pos.position,
                                })
                        };
                        upper_position.map_found(|end| (first_batch, end))
                    });
                match located {
                    Locate::Found((first_batch, end)) => {
                        let range = log.fetch_range(&first_batch, end, room, first);
                        if range.len == 0 {
                            Records::Empty
                        } else {
                            let mut ranges = vec![range];
                            let mut left = room.saturating_sub(ranges[0].len as usize);
                            while ranges.len() < limits::FETCH_SEGMENTS_MAX {
                                let prev = ranges.last().expect("one at least");
                                let Some(next) = log.next_fetch_range(prev, end, left) else {
                                    break;
                                };
                                left = left.saturating_sub(next.len as usize);
                                ranges.push(next);
                            }
                            let offsets =
                                log.offsets_sent(p.fetch_offset, &first_batch, &ranges, upper, end);
                            Records::File(ranges, offsets)
                        }
                    }
                    Locate::Need(range) if gathered.has_failed(&range) => {
                        Records::Error(ResponseError::KafkaStorageError)
                    }
                    Locate::Need(range) => {
                        needs.push(range);
                        Records::Empty
                    }
                    Locate::Failed(ReadError::OffsetOutOfRange) => {
                        Records::Error(ResponseError::OffsetOutOfRange)
                    }
                    Locate::Failed(ReadError::Corrupt) => {
                        Records::Error(ResponseError::KafkaStorageError)
                    }
                }
            };
            match records {
                Records::Empty => pd.records = Some(bytes::Bytes::new()),
                Records::File(ranges, offsets) => {
                    let bytes = ranges.iter().map(|r| r.len).sum::<u64>();
                    total += bytes as usize;
                    sent.push((ti, bytes, offsets));
                    pd.records = None;
                    files.insert((ti, pi), ranges);
                }
                Records::Error(e) => {
                    // As Kafka's ReplicaManager answers a failed read
                    // (createLogReadResult): no high watermark, stable
                    // offset, log start or aborted list (seen in
                    // conformance). A consumer out of range asks ListOffsets
                    // where to start again.
                    pd.error_code = e.code();
                    pd.records = Some(bytes::Bytes::new());
                    pd.high_watermark = -1;
                    pd.last_stable_offset = -1;
                    pd.log_start_offset = -1;
                    pd.aborted_transactions = None;
                    has_error = true;
                }
            }
            partitions.push(pd);
        }
        responses.push(
            FetchableTopicResponse::default()
                .with_topic(topic.topic.clone())
                .with_partitions(partitions),
        );
    }
    if !needs.is_empty() {
        return Err(needs);
    }
    let response = FetchResponse::default()
        .with_session_id(0)
        .with_responses(responses);
    Ok(Built {
        response,
        files,
        sent,
        bytes: total,
        has_error,
    })
}
