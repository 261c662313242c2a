//! AddOffsetsToTxn (key 25), v0–v3.
//!
//! Adds a consumer group to the transaction, so that TxnOffsetCommit may
//! stage its offsets (Kafka adds the group's __consumer_offsets partition).
//! The same checks and state change as AddPartitionsToTxn: the transaction
//! becomes Ongoing, stored in meta.db before the answer.
//!
//! ACL: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
//! then READ on the group (GROUP_AUTHORIZATION_FAILED).

use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, ApiKey, ResponseKind,
};
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::core_state::Core;
use crate::security::acl::{resource, Op};
use crate::txn::coordinator::check_owner;
use crate::txn::record::TxnState;
use crate::txn::write::{self, Reply, Then};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: AddOffsetsToTxnRequest) {
    let id = req.transactional_id.0.to_string();
    let group = req.group_id.0.to_string();
    if !b
        .core
        .authorized(&ctx, Op::Write, resource::TRANSACTIONAL_ID, &id)
    {
        return answer(
            b.core,
            &ctx,
            Some(ResponseError::TransactionalIdAuthorizationFailed),
        );
    }
    if !b.core.authorized(&ctx, Op::Read, resource::GROUP, &group) {
        return answer(b.core, &ctx, Some(ResponseError::GroupAuthorizationFailed));
    }
    let entry = match check_owner(
        b.core.txns(),
        &id,
        req.producer_id.0,
        req.producer_epoch,
        ApiKey::AddOffsetsToTxn,
        ctx.version,
    ) {
        Ok(entry) => entry,
        Err(e) => return answer(b.core, &ctx, Some(e)),
    };
    let current = entry.record.clone();
    if group.is_empty() {
        return answer(b.core, &ctx, Some(ResponseError::InvalidGroupId));
    }
    if entry.busy() || current.state.is_prepare() {
        return answer(b.core, &ctx, Some(ResponseError::ConcurrentTransactions));
    }
    if current.state == TxnState::Ongoing && current.groups.contains(&group) {
        return answer(b.core, &ctx, None);
    }
    let next = current.prepare_add_group(group, b.core.now_ms());
    let reply: Reply = Box::new(move |stored| {
        let error = stored.is_none().then_some(ResponseError::NotCoordinator);
        (ctx, response(error))
    });
    write::store(b.core, &id, next, Vec::new(), Then::Answer(reply));
}

fn answer(b: &mut Core, ctx: &RequestCtx, error: Option<ResponseError>) {
    b.respond(ctx, response(error));
}

fn response(error: Option<ResponseError>) -> ResponseKind {
    let response =
        AddOffsetsToTxnResponse::default().with_error_code(error.map_or(0, |e| e.code()));
    ResponseKind::AddOffsetsToTxn(response)
}
