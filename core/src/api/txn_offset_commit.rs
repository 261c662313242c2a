//! TxnOffsetCommit (key 28), v0–v3.
//!
//! Stages consumer offsets in the transaction; they are applied to the group
//! when the transaction commits and dropped when it aborts. Checks: the owner
//! checks of `txn::coordinator` (an old epoch is INVALID_PRODUCER_EPOCH, as a
//! write to the offsets partition is refused in Kafka); a change in flight or
//! a decision being carried out CONCURRENT_TRANSACTIONS; a transaction that is
//! not Ongoing or has not added the group (AddOffsetsToTxn) INVALID_TXN_STATE;
//! then the group checks Kafka's GroupCoordinator makes for v3+ (generation,
//! member, group.instance.id) through the group coordinator. Unknown
//! partitions get UNKNOWN_TOPIC_OR_PARTITION. The staged offsets are stored
//! in the transaction's meta.db record before the answer.
//!
//! ACL: WRITE on the transactional id and READ on the group (each failing
//! every partition: TRANSACTIONAL_ID_ / GROUP_AUTHORIZATION_FAILED), then
//! READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions; when no
//! topic is left the transaction is not consulted, as in KafkaApis).

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, ResponseKind, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::security::acl::{resource, Op};
use crate::txn::coordinator::check_owner;
use crate::txn::record::{StagedOffset, TxnState};
use crate::txn::write::{self, Then};

/// OffsetCommit version whose group errors TxnOffsetCommit v3 shares.
const GROUP_CHECK_VERSION: i16 = 8;

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: TxnOffsetCommitRequest) {
    let id = req.transactional_id.0.to_string();
    let group = req.group_id.0.to_string();
    if !b
        .core
        .authorized(&ctx, Op::Write, resource::TRANSACTIONAL_ID, &id)
    {
        let response = every_partition(&req, ResponseError::TransactionalIdAuthorizationFailed);
        return b
            .core
            .respond(&ctx, ResponseKind::TxnOffsetCommit(response));
    }
    if !b.core.authorized(&ctx, Op::Read, resource::GROUP, &group) {
        let response = every_partition(&req, ResponseError::GroupAuthorizationFailed);
        return b
            .core
            .respond(&ctx, ResponseKind::TxnOffsetCommit(response));
    }
    let unreadable =
        b.core
            .unauthorized_topics(&ctx, Op::Read, req.topics.iter().map(|t| t.name.0.as_str()));
    let readable_left = req
        .topics
        .iter()
        .any(|t| !unreadable.contains(t.name.0.as_str()));
    if !req.topics.is_empty() && !readable_left {
        // KafkaApis answers at once when no topic is left to commit.
        let response = every_partition(&req, ResponseError::TopicAuthorizationFailed);
        return b
            .core
            .respond(&ctx, ResponseKind::TxnOffsetCommit(response));
    }
    let owner = check_owner(
        b.core.txns(),
        &id,
        req.producer_id.0,
        req.producer_epoch,
        ApiKey::TxnOffsetCommit,
        ctx.version,
    );
    let checked = owner.and_then(|entry| {
        if entry.busy() || entry.record.state.is_prepare() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        if entry.record.state != TxnState::Ongoing || !entry.record.groups.contains(&group) {
            return Err(ResponseError::InvalidTxnState);
        }
        Ok(entry.record.clone())
    });
    let checked = checked.and_then(|record| {
        let (generation, member) = if ctx.version >= 3 {
            (req.generation_id, req.member_id.to_string())
        } else {
            (-1, String::new())
        };
        let instance = req.group_instance_id.as_ref().map(|s| s.to_string());
        let now_ms = b.core.now_ms();
        b.core
            .groups_mut()
            .check_commit(
                now_ms,
                &group,
                generation,
                &member,
                instance.as_deref(),
                GROUP_CHECK_VERSION,
                true,
            )
            .map(|_| record)
    });
    let mut response = TxnOffsetCommitResponse::default();
    let (current, error) = match checked {
        Ok(record) => (Some(record), None),
        Err(e) => (None, Some(e)),
    };
    let mut staged = Vec::new();
    for topic in &req.topics {
        let name = topic.name.0.to_string();
        let readable = !unreadable.contains(&name);
        let mut partitions = Vec::new();
        for p in &topic.partitions {
            let mut code = error.map_or(0, |e| e.code());
            if !readable {
                code = ResponseError::TopicAuthorizationFailed.code();
            } else if current.is_some() && error.is_none() {
                let known = b
                    .core
                    .topics()
                    .partition(&name, p.partition_index)
                    .is_some();
                if known {
                    staged.push(StagedOffset {
                        topic: name.clone(),
                        topic_id: b.core.topic_id_text(&name),
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                    });
                } else {
                    code = ResponseError::UnknownTopicOrPartition.code();
                }
            }
            partitions.push(
                TxnOffsetCommitResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code),
            );
        }
        response.topics.push(
            TxnOffsetCommitResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    match current {
        Some(current) if error.is_none() => write::store(
            b.core,
            &id,
            current.prepare_stage_offsets(&group, staged),
            Vec::new(),
            answer_stored(ctx, response),
        ),
        _ => b
            .core
            .respond(&ctx, ResponseKind::TxnOffsetCommit(response)),
    }
}

/// Once the record is stored: `response`; not stored: NOT_COORDINATOR for
/// every partition.
fn answer_stored(ctx: RequestCtx, response: TxnOffsetCommitResponse) -> Then {
    Then::Answer(Box::new(move |stored| {
        let mut response = response;
        if stored.is_none() {
            let not_coordinator = ResponseError::NotCoordinator.code();
            for t in response.topics.iter_mut() {
                for p in t.partitions.iter_mut() {
                    p.error_code = not_coordinator;
                }
            }
        }
        (ctx, ResponseKind::TxnOffsetCommit(response))
    }))
}

/// The answer failing every asked partition with `error`.
fn every_partition(req: &TxnOffsetCommitRequest, error: ResponseError) -> TxnOffsetCommitResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error.code())
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}
