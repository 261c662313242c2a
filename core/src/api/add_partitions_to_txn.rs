//! AddPartitionsToTxn (key 24), v0–v3 (the client versions; v4+ is the
//! brokers' batched verification, not offered).
//!
//! As TransactionCoordinator.handleAddPartitionsToTransaction: the owner
//! checks (see `txn::coordinator`), then CONCURRENT_TRANSACTIONS while a
//! change is in flight or a decision is being carried out; partitions already
//! in an Ongoing transaction are answered at once; otherwise the transaction
//! becomes (or stays) Ongoing with the partitions added, stored in meta.db
//! before the answer. Partitions of unknown topics get
//! UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as
//! KafkaApis answers. (Each partition's transaction state is rebuilt at
//! start-up from its own log, `core_state::recovery`.)
//!
//! ACL: WRITE on the transactional id (else every partition
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic: a topic
//! without it fails its partitions with TOPIC_AUTHORIZATION_FAILED and,
//! as for unknown topics, nothing is added (the rest OPERATION_NOT_ATTEMPTED).

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, ResponseKind,
};
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::security::acl::{resource, Op};
use crate::txn::coordinator::check_owner;
use crate::txn::record::TxnState;
use crate::txn::write::{self, Then};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: AddPartitionsToTxnRequest) {
    let id = req.v3_and_below_transactional_id.0.to_string();
    let asked: Vec<(String, i32)> = req
        .v3_and_below_topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p)))
        .collect();
    if !b
        .core
        .authorized(&ctx, Op::Write, resource::TRANSACTIONAL_ID, &id)
    {
        let e = ResponseError::TransactionalIdAuthorizationFailed;
        return b.core.respond(
            &ctx,
            ResponseKind::AddPartitionsToTxn(response(&asked, |_| Some(e))),
        );
    }
    let unwritable =
        b.core
            .unauthorized_topics(&ctx, Op::Write, asked.iter().map(|(t, _)| t.as_str()));
    let refused: Vec<Option<ResponseError>> = asked
        .iter()
        .map(|(t, p)| {
            let unknown = b
                .core
                .topics()
                .get(t)
                .is_none_or(|topic| *p < 0 || *p as usize >= topic.partitions.len());
            if unwritable.contains(t) {
                Some(ResponseError::TopicAuthorizationFailed)
            } else if unknown {
                Some(ResponseError::UnknownTopicOrPartition)
            } else {
                None
            }
        })
        .collect();
    if refused.iter().any(Option::is_some) {
        let not_attempted = |i: usize| refused[i].or(Some(ResponseError::OperationNotAttempted));
        return b.core.respond(
            &ctx,
            ResponseKind::AddPartitionsToTxn(response(&asked, not_attempted)),
        );
    }
    let pid = req.v3_and_below_producer_id.0;
    let epoch = req.v3_and_below_producer_epoch;
    let entry = match check_owner(
        b.core.txns(),
        &id,
        pid,
        epoch,
        ApiKey::AddPartitionsToTxn,
        ctx.version,
    ) {
        Ok(entry) => entry,
        Err(e) => {
            return b.core.respond(
                &ctx,
                ResponseKind::AddPartitionsToTxn(response(&asked, |_| Some(e))),
            )
        }
    };
    let current = entry.record.clone();
    if entry.busy() || current.state.is_prepare() {
        let e = ResponseError::ConcurrentTransactions;
        return b.core.respond(
            &ctx,
            ResponseKind::AddPartitionsToTxn(response(&asked, |_| Some(e))),
        );
    }
    let ok = response(&asked, |_| None);
    if current.state == TxnState::Ongoing && asked.iter().all(|tp| current.partitions.contains(tp))
    {
        return b.core.respond(&ctx, ResponseKind::AddPartitionsToTxn(ok));
    }
    let next = current.prepare_add_partitions(asked.iter().cloned(), b.core.now_ms());
    write::store(b.core, &id, next, Vec::new(), answer_stored(ctx, ok));
}

/// Once the record is stored: `ok`; not stored: NOT_COORDINATOR for every
/// partition.
fn answer_stored(ctx: RequestCtx, ok: AddPartitionsToTxnResponse) -> Then {
    Then::Answer(Box::new(move |stored| {
        let mut response = ok;
        if stored.is_none() {
            let not_coordinator = ResponseError::NotCoordinator.code();
            for topic in response.results_by_topic_v3_and_below.iter_mut() {
                for p in topic.results_by_partition.iter_mut() {
                    p.partition_error_code = not_coordinator;
                }
            }
        }
        (ctx, ResponseKind::AddPartitionsToTxn(response))
    }))
}

fn response(
    asked: &[(String, i32)],
    error: impl Fn(usize) -> Option<ResponseError>,
) -> AddPartitionsToTxnResponse {
    let mut topics: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
    for (i, (t, p)) in asked.iter().enumerate() {
        let result = AddPartitionsToTxnPartitionResult::default()
            .with_partition_index(*p)
            .with_partition_error_code(error(i).map_or(0, |e| e.code()));
        match topics.iter_mut().find(|r| r.name.0.as_str() == t) {
            Some(r) => r.results_by_partition.push(result),
            None => topics.push(
                AddPartitionsToTxnTopicResult::default()
                    .with_name(super::metadata::topic_name(t))
                    .with_results_by_partition(vec![result]),
            ),
        }
    }
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics)
}
