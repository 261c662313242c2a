//! InitProducerId (key 22), v0–v5 (aiokafka sends v0, kafkajs v1).
//!
//! Without a transactional id (an idempotent producer): a fresh producer id
//! with epoch 0 from the allocator (`producer::ids`). A request that finds
//! the allocator's block used up waits for the next block to be stored in
//! meta.db; a failed write answers NOT_COORDINATOR, which clients retry.
//!
//! With a transactional id, as TransactionCoordinator.handleInitProducerId
//! and prepareInitProducerIdTransit (core/src/main/scala/kafka/coordinator/
//! transaction/TransactionCoordinator.scala) do:
//! - an empty id is INVALID_REQUEST; a timeout outside 1..=transaction.max.timeout.ms
//!   is INVALID_TRANSACTION_TIMEOUT;
//! - a new id gets a producer id and epoch 0;
//! - a change in flight (a write, or a decision being carried out) is
//!   CONCURRENT_TRANSACTIONS;
//! - KIP-360 (v3+): a request carrying a producer id and epoch must name the
//!   current producer id (or the previous one with an exhausted epoch), else
//!   PRODUCER_FENCED; a retry naming the last epoch gets the current one back;
//! - Empty / Complete*: the epoch is raised (fencing the previous owner), or a
//!   new producer id is taken when the epoch is exhausted;
//! - Ongoing: the previous owner is fenced (epoch + 1) and its transaction
//!   aborted; the answer is CONCURRENT_TRANSACTIONS and the client retries;
//! - Prepare*: CONCURRENT_TRANSACTIONS.
//!
//! Every change is stored in meta.db before it is answered.
//!
//! ACL, checked first: WRITE on the transactional id
//! (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without one, IDEMPOTENT_WRITE on
//! the cluster or WRITE on some topic (CLUSTER_AUTHORIZATION_FAILED).

use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId, ResponseKind,
};
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::core_state::Core;
use crate::security::acl::{resource, Op};
use crate::txn::coordinator::fenced_error;
use crate::txn::record::{epoch_exhausted, TxnRecord, TxnState};
use crate::txn::write::{self, Reply, Then};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: InitProducerIdRequest) {
    let Some(id) = req.transactional_id.as_ref().map(|t| t.0.to_string()) else {
        let may_write = b.core.authorized(
            &ctx,
            Op::IdempotentWrite,
            resource::CLUSTER,
            "kafka-cluster",
        ) || b
            .core
            .authorized_by_resource_type(&ctx, Op::Write, resource::TOPIC);
        if !may_write {
            return error(b.core, &ctx, ResponseError::ClusterAuthorizationFailed);
        }
        return give_id(b, ctx, req);
    };
    if !b
        .core
        .authorized(&ctx, Op::Write, resource::TRANSACTIONAL_ID, &id)
    {
        return error(
            b.core,
            &ctx,
            ResponseError::TransactionalIdAuthorizationFailed,
        );
    }
    if id.is_empty() {
        return error(b.core, &ctx, ResponseError::InvalidRequest);
    }
    if req.transaction_timeout_ms <= 0
        || req.transaction_timeout_ms > b.core.config().transaction_max_timeout_ms
    {
        return error(b.core, &ctx, ResponseError::InvalidTransactionTimeout);
    }
    if b.core.txns().is_creating(&id) {
        return error(b.core, &ctx, ResponseError::ConcurrentTransactions);
    }
    let expected = (ctx.version >= 3 && req.producer_id.0 != -1)
        .then_some((req.producer_id.0, req.producer_epoch));
    let now_ms = b.core.now_ms();
    let Some(entry) = b.core.txns().get(&id) else {
        let Some(pid) = b.core.take_producer_id() else {
            return b.await_id_block(ctx, req);
        };
        let next = TxnRecord::create(pid, req.transaction_timeout_ms, now_ms);
        return write::store(b.core, &id, next, Vec::new(), answer_stored(ctx));
    };
    if entry.busy() {
        return error(b.core, &ctx, ResponseError::ConcurrentTransactions);
    }
    let current = entry.record.clone();
    if let Some((pid, epoch)) = expected {
        let valid = current.producer_epoch == -1
            || pid == current.producer_id
            || (pid == current.previous_producer_id && epoch_exhausted(epoch));
        if !valid {
            return error(
                b.core,
                &ctx,
                fenced_error(ApiKey::InitProducerId, ctx.version),
            );
        }
    }
    match current.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => {
            error(b.core, &ctx, ResponseError::ConcurrentTransactions)
        }
        TxnState::Ongoing => {
            let next = current.prepare_fence_and_abort(now_ms);
            // Stored, the abort is under way: the client retries.
            let reply: Reply = Box::new(move |stored| {
                let e = match stored {
                    Some(_) => ResponseError::ConcurrentTransactions,
                    None => ResponseError::NotCoordinator,
                };
                (ctx, error_response(e))
            });
            let then = Then::Fenced { reply: Some(reply) };
            write::store(b.core, &id, next, Vec::new(), then);
        }
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
            let timeout_ms = req.transaction_timeout_ms;
            let next = if epoch_exhausted(current.producer_epoch)
                && expected.is_none_or(|(_, e)| e == current.producer_epoch)
            {
                // TransactionMetadata.prepareProducerIdRotation.
                let Some(pid) = b.core.take_producer_id() else {
                    return b.await_id_block(ctx, req);
                };
                let last_epoch = if expected.is_some() {
                    current.producer_epoch
                } else {
                    -1
                };
                current.prepare_rotation(pid, timeout_ms, last_epoch, now_ms)
            } else {
                // TransactionMetadata.prepareIncrementProducerEpoch.
                let (epoch, last) = match expected {
                    None => (current.producer_epoch + 1, -1),
                    Some((_, e)) if current.producer_epoch == -1 || e == current.producer_epoch => {
                        (current.producer_epoch + 1, current.producer_epoch)
                    }
                    Some((_, e)) if e == current.last_producer_epoch => {
                        (current.producer_epoch, current.last_producer_epoch)
                    }
                    Some(_) => {
                        return error(
                            b.core,
                            &ctx,
                            fenced_error(ApiKey::InitProducerId, ctx.version),
                        )
                    }
                };
                current.prepare_epoch_bump(timeout_ms, epoch, last, now_ms)
            };
            write::store(b.core, &id, next, Vec::new(), answer_stored(ctx));
        }
    }
}

/// Once the record is stored: its producer id and epoch; not stored:
/// NOT_COORDINATOR.
fn answer_stored(ctx: RequestCtx) -> Then {
    Then::Answer(Box::new(move |stored| match stored {
        Some(r) => {
            let response = InitProducerIdResponse::default()
                .with_producer_id(ProducerId(r.producer_id))
                .with_producer_epoch(r.producer_epoch);
            (ctx, ResponseKind::InitProducerId(response))
        }
        None => (ctx, error_response(ResponseError::NotCoordinator)),
    }))
}

fn error(b: &mut Core, ctx: &RequestCtx, error: ResponseError) {
    b.respond(ctx, error_response(error));
}

fn error_response(error: ResponseError) -> ResponseKind {
    let response = InitProducerIdResponse::default()
        .with_error_code(error.code())
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    ResponseKind::InitProducerId(response)
}

/// Answers an idempotent producer with a fresh id, or waits for a block.
fn give_id(b: &mut Cx, ctx: RequestCtx, req: InitProducerIdRequest) {
    let Some(id) = b.core.take_producer_id() else {
        return b.await_id_block(ctx, req);
    };
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(id))
        .with_producer_epoch(0);
    b.core.respond(&ctx, ResponseKind::InitProducerId(response));
}

/// The id block the waiting requests asked for is stored: they run again;
/// or it is not: they fail with NOT_COORDINATOR, which clients retry.
pub(crate) fn block_stored(
    b: &mut Cx,
    waiting: Vec<(RequestCtx, InitProducerIdRequest)>,
    stored: bool,
) {
    for (ctx, req) in waiting {
        if stored {
            handle(b, ctx, req);
        } else {
            error(b.core, &ctx, ResponseError::NotCoordinator);
        }
    }
}
