//! InitProducerId (key 22), v0–v5.
//!
//! Without a transactional id (an idempotent producer): a fresh producer id
//! with epoch 0, taken from the allocator (`producer::ids`); when its block is
//! used up the request waits for the next block to be stored in meta.db (a
//! failed write answers NOT_COORDINATOR, which clients retry). A v3+ request
//! carrying its current producer id/epoch (KIP-360) also gets a fresh id, as
//! Kafka's TransactionCoordinator.handleInitProducerId does when
//! transactionalId is null.
//!
//! With a transactional id: the transaction coordinator (a later issue).
//! Until then such a request is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED
//! so that a transactional client stops with a clear error instead of retrying.

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId, ResponseKind};
use kafka_protocol::ResponseError;

use super::{MetaAction, RequestCtx};
use crate::broker::Broker;
use crate::io::MetaOp;
use crate::meta;
use crate::producer::ids::{ProducerIdsRecord, META_KEY};

pub(crate) fn handle(b: &mut Broker, ctx: RequestCtx, req: InitProducerIdRequest) {
    if req.transactional_id.as_ref().is_some_and(|t| !t.0.is_empty()) {
        let response = InitProducerIdResponse::default()
            .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        return b.respond(&ctx, ResponseKind::InitProducerId(response));
    }
    give_id(b, ctx);
}

/// Answers with a fresh id, or parks the request until a block is stored.
fn give_id(b: &mut Broker, ctx: RequestCtx) {
    if let Some(id) = b.producer_ids.take() {
        let response = InitProducerIdResponse::default().with_producer_id(ProducerId(id)).with_producer_epoch(0);
        return b.respond(&ctx, ResponseKind::InitProducerId(response));
    }
    b.init_waiting.push(ctx);
    if let Some(record) = b.producer_ids.start_block() {
        let op = MetaOp::Put { key: META_KEY.to_vec(), value: meta::encode(&record) };
        b.emit_meta(vec![op], MetaAction::ProducerIdBlock(record));
    }
}

pub(crate) fn block_stored(b: &mut Broker, record: ProducerIdsRecord, stored: bool) {
    b.producer_ids.block_done(&record, stored);
    for ctx in std::mem::take(&mut b.init_waiting) {
        if stored {
            give_id(b, ctx);
        } else {
            let response = InitProducerIdResponse::default()
                .with_error_code(ResponseError::NotCoordinator.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            b.respond(&ctx, ResponseKind::InitProducerId(response));
        }
    }
}
