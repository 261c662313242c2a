//! ListOffsets (key 2), v1–v7.
//!
//! Per partition, by the timestamp asked:
//! - -2 (EARLIEST): the log start offset;
//! - -1 (LATEST): the high watermark, or the last stable offset under
//!   read_committed (v2+ isolation level);
//! - -3 (MAX_TIMESTAMP, v7): the offset and timestamp of the largest timestamp;
//! - t >= 0: the first offset whose timestamp is >= t, or offset -1 and
//!   timestamp -1 when there is none (Kafka's answer).
//!
//! Only durable data (below the high watermark) is ever reported. A search
//! by timestamp reads batch headers from disk (`log::read`): the request is
//! parked until the reads are in (`reads`).
//!
//! ACL: DESCRIBE on each topic (else TOPIC_AUTHORIZATION_FAILED).

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, ResponseKind};
use kafka_protocol::ResponseError;

use super::reads::{self, Gathered, Parked};
use super::RequestCtx;
use crate::api::Cx;
use crate::io::FileRange;
use crate::log::{ReadError, TimeSearch};
use crate::security::acl::{resource, Op};

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const READ_COMMITTED: i8 = 1;

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: ListOffsetsRequest) {
    let undescribable = req
        .topics
        .iter()
        .map(|t| t.name.0.to_string())
        .filter(|name| !b.core.authorized(&ctx, Op::Describe, resource::TOPIC, name))
        .collect();
    resume(b, ctx, req, Gathered::refusing(undescribable));
}

/// Answers with what the request has read so far, or parks it for more.
pub(crate) fn resume(b: &mut Cx, ctx: RequestCtx, req: ListOffsetsRequest, gathered: Gathered) {
    let read_committed = req.isolation_level == READ_COMMITTED;
    let mut needs: Vec<FileRange> = Vec::new();
    let mut topics = Vec::with_capacity(req.topics.len());
    for topic in &req.topics {
        let name = topic.name.0.as_str();
        let refused = gathered.refused.contains(name);
        let partitions = topic
            .partitions
            .iter()
            .map(|p| {
                let base = ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_timestamp(-1)
                    .with_offset(-1)
                    .with_leader_epoch(-1);
                if refused {
                    return base.with_error_code(ResponseError::TopicAuthorizationFailed.code());
                }
                let part = match b.core.partition_view(name, p.partition_index) {
                    Ok(part) => part,
                    Err(e) => return base.with_error_code(e.code()),
                };
                // An offset found carries the leader epoch; nothing found
                // keeps -1, as Kafka answers (seen in conformance). The field
                // exists from v4 (kafka-protocol refuses to encode it below).
                let epoch = if ctx.version >= 4 {
                    crate::batch::LEADER_EPOCH
                } else {
                    -1
                };
                let found = base.clone().with_leader_epoch(epoch);
                let log = part.log();
                let upper = part.read_bound(read_committed);
                let search = match p.timestamp {
                    LATEST => return found.with_offset(upper),
                    EARLIEST => return found.with_offset(log.log_start_offset()),
                    MAX_TIMESTAMP => log.max_timestamp(upper, &gathered.reads),
                    ts if ts >= 0 => log.offset_for_timestamp(ts, upper, &gathered.reads),
                    _ => return base.with_error_code(ResponseError::InvalidRequest.code()),
                };
                match search {
                    TimeSearch::Found(offset, ts) => found.with_offset(offset).with_timestamp(ts),
                    TimeSearch::NotFound => base,
                    TimeSearch::Need(range) if gathered.has_failed(&range) => {
                        base.with_error_code(ResponseError::KafkaStorageError.code())
                    }
                    TimeSearch::Need(range) => {
                        needs.push(range);
                        base
                    }
                    TimeSearch::Failed(ReadError::OffsetOutOfRange) => base,
                    TimeSearch::Failed(ReadError::Corrupt) => {
                        base.with_error_code(ResponseError::KafkaStorageError.code())
                    }
                }
            })
            .collect();
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    if !needs.is_empty() {
        return reads::park(b, ctx, Parked::ListOffsets(req), gathered, needs);
    }
    b.core.respond(
        &ctx,
        ResponseKind::ListOffsets(ListOffsetsResponse::default().with_topics(topics)),
    );
}
