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
//! Fetch sessions (KIP-227) are refused the way Kafka allows: a request for a
//! new session gets session id 0, so the client keeps sending full fetches.
//! A request naming a session we never gave gets FETCH_SESSION_ID_NOT_FOUND.
//!
//! read_committed readers are never sent anything at or above the last
//! stable offset, and get the aborted transactions overlapping what they were
//! sent (`PartitionTxns::aborted_overlapping`); read_uncommitted readers get
//! no list (null), as Kafka (a list there was Redpanda #18852).

use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId, ResponseKind};
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::broker::Broker;
use crate::limits;
use crate::log::ReadError;

const READ_COMMITTED: i8 = 1;

/// A fetch parked until data arrives or its deadline.
pub struct WaitingFetch {
    pub ctx: RequestCtx,
    pub deadline_ms: i64,
    req: FetchRequest,
}

pub(crate) fn handle(b: &mut Broker, ctx: RequestCtx, req: FetchRequest) {
    if req.session_id != 0 {
        let response = FetchResponse::default()
            .with_error_code(ResponseError::FetchSessionIdNotFound.code())
            .with_session_id(0);
        return b.respond(&ctx, ResponseKind::Fetch(response));
    }
    if req.session_epoch > 0 {
        let response = FetchResponse::default()
            .with_error_code(ResponseError::InvalidFetchSessionEpoch.code())
            .with_session_id(0);
        return b.respond(&ctx, ResponseKind::Fetch(response));
    }
    let built = build(b, &req);
    let wait_ms = (req.max_wait_ms as i64).clamp(0, limits::FETCH_WAIT_MS_MAX);
    if built.satisfies(&req) || wait_ms == 0 {
        return b.respond(&ctx, ResponseKind::Fetch(built.response));
    }
    let deadline_ms = b.now_ms + wait_ms;
    b.waiting_fetches.push(WaitingFetch {
        ctx,
        deadline_ms,
        req,
    });
}

/// Answers waiting fetches that now have enough data (`data_changed`) or
/// whose deadline has passed.
pub(crate) fn wake(b: &mut Broker, data_changed: bool) {
    let mut i = 0;
    while i < b.waiting_fetches.len() {
        let expired = b.now_ms >= b.waiting_fetches[i].deadline_ms;
        if !expired && !data_changed {
            i += 1;
            continue;
        }
        let built = build(b, &b.waiting_fetches[i].req);
        if expired || built.satisfies(&b.waiting_fetches[i].req) {
            let waiting = b.waiting_fetches.swap_remove(i);
            b.respond(&waiting.ctx, ResponseKind::Fetch(built.response));
        } else {
            i += 1;
        }
    }
    // swap_remove reorders; keep deadlines found by poll_timeout's min().
}

/// The first offset of the oldest open transaction, or the high watermark.
pub(crate) fn last_stable_offset(txns: Option<&crate::txn::PartitionTxns>, hw: i64) -> i64 {
    txns.and_then(|t| t.first_unstable_offset())
        .map_or(hw, |first| first.min(hw))
}

struct Built {
    response: FetchResponse,
    bytes: usize,
    /// A partition error ends the wait at once, as in Kafka.
    has_error: bool,
}

impl Built {
    fn satisfies(&self, req: &FetchRequest) -> bool {
        self.has_error || self.bytes >= req.min_bytes.max(0) as usize
    }
}

fn build(b: &Broker, req: &FetchRequest) -> Built {
    let read_committed = req.isolation_level == READ_COMMITTED;
    let max_bytes = (req.max_bytes.max(0) as usize).min(limits::FETCH_RESPONSE_BYTES_MAX);
    let mut total = 0usize;
    let mut has_error = false;
    let mut responses = Vec::with_capacity(req.topics.len());
    for topic in &req.topics {
        let name = topic.topic.0.as_str();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let mut pd = PartitionData::default()
                .with_partition_index(p.partition)
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1)
                .with_preferred_read_replica(BrokerId(-1));
            let Some(log) = b.topics.partition(name, p.partition) else {
                pd.error_code = ResponseError::UnknownTopicOrPartition.code();
                has_error = true;
                partitions.push(pd);
                continue;
            };
            let hw = log.high_watermark();
            let key = b
                .topics
                .get(name)
                .expect("partition found above")
                .key(name, p.partition);
            let txns = b.partition_txns.get(&key);
            let lso = last_stable_offset(txns, hw);
            pd.high_watermark = hw;
            pd.last_stable_offset = lso;
            pd.log_start_offset = log.log_start_offset();
            let serve_above_lso =
                b.config.planted_bug == Some(crate::config::PlantedBug::ServeAboveLso);
            let upper = if read_committed && !serve_above_lso {
                lso
            } else {
                hw
            };
            pd.aborted_transactions = None;
            if read_committed {
                let aborted = txns
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
            if p.fetch_offset >= upper && p.fetch_offset <= log.log_end_offset() {
                // Between the stable/durable end and the log end: nothing yet.
                pd.records = Some(bytes::Bytes::new());
            } else {
                match log.read(p.fetch_offset, room, upper, first) {
                    Ok(records) => {
                        total += records.len();
                        pd.records = Some(records);
                    }
                    Err(ReadError::OffsetOutOfRange) => {
                        pd.error_code = ResponseError::OffsetOutOfRange.code();
                        has_error = true;
                    }
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
    let response = FetchResponse::default()
        .with_session_id(0)
        .with_responses(responses);
    Built {
        response,
        bytes: total,
        has_error,
    }
}
