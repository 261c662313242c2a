//! DeleteRecords (key 21), v0–v2.
//!
//! Moves each named partition's log start offset up to the offset asked,
//! which may lie inside a segment; records below it are gone for readers
//! (Fetch below it is OFFSET_OUT_OF_RANGE, ListOffsets EARLIEST answers it).
//! As Kafka's ReplicaManager.deleteRecords and Partition.deleteRecordsOnLeader
//! (core/src/main/scala/kafka/server/ReplicaManager.scala,
//! core/src/main/scala/kafka/cluster/Partition.scala) and
//! UnifiedLog.maybeIncrementLogStartOffset
//! (storage/src/main/java/org/apache/kafka/storage/internals/log/UnifiedLog.java),
//! per partition:
//! - an unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION; an offline
//!   one: KAFKA_STORAGE_ERROR; a topic whose cleanup.policy is `compact`
//!   alone: POLICY_VIOLATION (all with low watermark -1);
//! - offset -1 means the high watermark; any other negative offset, or one
//!   above the high watermark: OFFSET_OUT_OF_RANGE;
//! - an offset at or below the log start changes nothing and answers the log
//!   start as the low watermark; when retention moved that start past the
//!   one stored, it is stored first (as below), so that the answer
//!   survives a power cut that brings deleted segments back;
//! - otherwise the new start is stored in meta.db (`logstart/<topic
//!   id>/<partition>`, one atomic batch for the request) and only once it is
//!   durable does the log start move, the segments wholly below it go, and
//!   the answer (the new start as low watermark) leave. A failed write
//!   changes nothing and answers KAFKA_STORAGE_ERROR, as Kafka answers a
//!   failed write of its log dir.
//!
//! One node, so nothing waits for replicas: timeout_ms is not used. A
//! partition named twice counts once, its last offset winning, as Kafka
//! gathers the request into a map. While the write is in flight the topics
//! are busy: admin requests naming them (another DeleteRecords among them)
//! wait, so meta.db never holds an older start than memory.
//!
//! The producer state is kept (see `Core::move_log_start`). franz-go's kfake
//! (pkg/kfake/21_delete_records.go) answers OFFSET_OUT_OF_RANGE below the
//! current start and keeps the start in memory only; Kafka does neither.
//!
//! ACL: DELETE on each topic (else TOPIC_AUTHORIZATION_FAILED).

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{ApiWrite, RequestCtx};
use crate::api::Cx;
use crate::core_state::Core;
use crate::io::MetaOp;
use crate::meta::{self, LogStartRecord};
use crate::security::acl::{resource, Op};
use crate::topic_config;
use crate::topics::PartitionKey;

/// DeleteRecordsRequest.HIGH_WATERMARK: delete up to the high watermark.
const HIGH_WATERMARK: i64 = -1;
/// DeleteRecordsResponse.INVALID_LOW_WATERMARK: what an error answers.
const INVALID_LOW_WATERMARK: i64 = -1;

/// A request waiting for its log starts to be stored.
pub struct PendingDeleteRecords {
    ctx: RequestCtx,
    response: DeleteRecordsResponse,
    /// The topics marked busy.
    topics: BTreeSet<String>,
    /// (topic index, partition index) in the response, the partition, and
    /// the offset stored for it.
    moves: Vec<(usize, usize, PartitionKey, i64)>,
}

/// What one partition asks for, once checked.
enum Decision {
    /// An error, answered with low watermark -1.
    Refused(ResponseError),
    /// Nothing to move: the log start already is at or above the offset.
    Already(i64),
    /// Store and move the log start to this offset.
    Move(PartitionKey, i64),
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: DeleteRecordsRequest) {
    let asked = gather(&req);
    let mut response = DeleteRecordsResponse::default();
    let mut moves = Vec::new();
    for (ti, (name, partitions)) in asked.iter().enumerate() {
        let deletable = b.core.authorized(&ctx, Op::Delete, resource::TOPIC, name);
        let mut results = Vec::with_capacity(partitions.len());
        for (pi, &(partition, offset)) in partitions.iter().enumerate() {
            let result = DeleteRecordsPartitionResult::default()
                .with_partition_index(partition)
                .with_low_watermark(INVALID_LOW_WATERMARK);
            let decision = if deletable {
                decide(b.core, name, partition, offset)
            } else {
                Decision::Refused(ResponseError::TopicAuthorizationFailed)
            };
            let result = match decision {
                Decision::Refused(e) => result.with_error_code(e.code()),
                Decision::Already(start) => result.with_low_watermark(start),
                Decision::Move(key, offset) => {
                    moves.push((ti, pi, key, offset));
                    result
                }
            };
            results.push(result);
        }
        response.topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(TopicName(StrBytes::from_string(name.clone())))
                .with_partitions(results),
        );
    }
    if moves.is_empty() {
        return b.core.respond(&ctx, ResponseKind::DeleteRecords(response));
    }
    let topics: BTreeSet<String> = moves
        .iter()
        .map(|(_, _, k, _)| k.topic.to_string())
        .collect();
    for name in &topics {
        b.core.mark_topic_busy(name);
    }
    let ops = moves
        .iter()
        .map(|(_, _, key, offset)| MetaOp::Put {
            key: meta::log_start_key(&key.id, key.partition),
            value: meta::encode(&LogStartRecord { offset: *offset }),
        })
        .collect();
    b.emit_meta(
        ops,
        ApiWrite::DeleteRecords(PendingDeleteRecords {
            ctx,
            response,
            topics,
            moves,
        }),
    );
}

pub(crate) fn apply(b: &mut Cx, pending: PendingDeleteRecords, stored: bool) {
    let PendingDeleteRecords {
        ctx,
        mut response,
        topics,
        moves,
    } = pending;
    for name in &topics {
        b.core.unmark_topic_busy(name);
    }
    for (ti, pi, key, offset) in moves {
        let result = &mut response.topics[ti].partitions[pi];
        if !stored {
            result.error_code = ResponseError::KafkaStorageError.code();
            continue;
        }
        // The topic was busy, so it is still there (a partition gone offline
        // meanwhile has its start stored, and moves in memory too).
        let start = b
            .core
            .move_log_start(&key, offset)
            .expect("a busy topic is not deleted");
        result.low_watermark = start;
    }
    if stored {
        // The deleted segments ride the next sync (the stored start is what
        // matters: a deletion a crash undoes is redone by the next
        // retention check after the restart).
        b.core.request_sync();
        // A fetch waiting below the new start is answered OFFSET_OUT_OF_RANGE.
        super::fetch::wake(b, true);
    }
    b.core.respond(&ctx, ResponseKind::DeleteRecords(response));
}

/// The request's partitions by topic, in first-seen order; a partition
/// named twice keeps its last offset. Indexed by maps: a request may name
/// hundreds of thousands of partitions, and a quadratic search over them
/// would stall the broker.
fn gather(req: &DeleteRecordsRequest) -> Vec<(String, Vec<(i32, i64)>)> {
    let mut asked: Vec<(String, Vec<(i32, i64)>)> = Vec::new();
    let mut topic_at: BTreeMap<&str, usize> = BTreeMap::new();
    let mut partition_at: BTreeMap<(usize, i32), usize> = BTreeMap::new();
    for topic in &req.topics {
        let name = topic.name.0.as_str();
        let ti = *topic_at.entry(name).or_insert_with(|| {
            asked.push((name.to_string(), Vec::new()));
            asked.len() - 1
        });
        let partitions = &mut asked[ti].1;
        for p in &topic.partitions {
            match partition_at.entry((ti, p.partition_index)) {
                Entry::Occupied(at) => partitions[*at.get()].1 = p.offset,
                Entry::Vacant(v) => {
                    v.insert(partitions.len());
                    partitions.push((p.partition_index, p.offset));
                }
            }
        }
    }
    asked
}

/// Checks one partition's offset, as Partition.deleteRecordsOnLeader and
/// UnifiedLog.maybeIncrementLogStartOffset do.
fn decide(b: &Core, topic: &str, partition: i32, offset: i64) -> Decision {
    let part = match b.partition_view(topic, partition) {
        Ok(part) => part,
        Err(e) => return Decision::Refused(e),
    };
    let Some(t) = b.topics().get(topic) else {
        return Decision::Refused(ResponseError::UnknownTopicOrPartition);
    };
    // Kafka 4.3.1 refuses only a compact-only topic (seen against it: an
    // empty cleanup.policy and `compact,delete` are both allowed).
    let policy = t
        .config(b.config(), topic_config::CLEANUP_POLICY)
        .unwrap_or_default();
    let (compact, delete) = topic_config::cleanup_policy(&policy);
    if compact && !delete {
        return Decision::Refused(ResponseError::PolicyViolation);
    }
    let log = part.log();
    let hw = log.high_watermark();
    let offset = if offset == HIGH_WATERMARK { hw } else { offset };
    if offset < 0 || offset > hw {
        return Decision::Refused(ResponseError::OffsetOutOfRange);
    }
    let start = log.log_start_offset();
    if offset <= start {
        if start > log.stored_log_start() {
            // Nothing to move, but the start answered is not stored:
            // retention moved it, and until its deletions are synced a
            // power cut brings the segments back, the log start with them.
            // Stored, the low watermark answered survives a power cut as
            // one asked for does (Kafka answers from memory and checkpoints
            // its log start once a minute). Found by the simulator (swarm
            // seed 470).
            return Decision::Move(t.key(partition), start);
        }
        return Decision::Already(start);
    }
    Decision::Move(t.key(partition), offset)
}
