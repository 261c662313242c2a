//! EndTxn (key 26), v0–v4 (v5, transaction v2, is not offered, so clients
//! stay on the classic protocol).
//!
//! Checks as TransactionCoordinator.endTransaction: empty id INVALID_REQUEST;
//! unknown id or another producer id INVALID_PRODUCER_ID_MAPPING; another
//! epoch PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2). Then the
//! decision table of the seed (shared/seeds/000_…, conformance/recordings/
//! endtxn-decisions.json, endtxn-while-preparing.json):
//!
//! | state                         | commit                  | abort                   |
//! |-------------------------------|-------------------------|-------------------------|
//! | Ongoing                       | store PrepareCommit     | store PrepareAbort      |
//! | a decision being carried out  | CONCURRENT_TRANSACTIONS | CONCURRENT_TRANSACTIONS |
//! | CompleteCommit                | NONE (a retry)          | INVALID_TXN_STATE       |
//! | CompleteAbort                 | INVALID_TXN_STATE       | NONE (a retry)          |
//! | Empty                         | INVALID_TXN_STATE       | INVALID_TXN_STATE       |
//!
//! A stored decision is carried out by `txn::complete`, which answers this
//! request only when every marker is durable and a commit's offsets are stored.
//!
//! ACL: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED).

use kafka_protocol::messages::{ApiKey, EndTxnRequest, EndTxnResponse, ProducerId, ResponseKind};
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::security::acl::{resource, Op};
use crate::txn::coordinator::check_owner;
use crate::txn::record::TxnState;
use crate::txn::write::{self, Then};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: EndTxnRequest) {
    let id = req.transactional_id.0.to_string();
    if !b
        .core
        .authorized(&ctx, Op::Write, resource::TRANSACTIONAL_ID, &id)
    {
        return answer(
            b,
            &ctx,
            ResponseError::TransactionalIdAuthorizationFailed,
            None,
        );
    }
    let entry = match check_owner(
        b.core.txns(),
        &id,
        req.producer_id.0,
        req.producer_epoch,
        ApiKey::EndTxn,
        ctx.version,
    ) {
        Ok(entry) => entry,
        Err(e) => return answer(b, &ctx, e, None),
    };
    if entry.busy() {
        return answer(b, &ctx, ResponseError::ConcurrentTransactions, None);
    }
    let record = entry.record.clone();
    let ids = Some((record.producer_id, record.producer_epoch));
    match (record.state, req.committed) {
        (TxnState::Ongoing, commit) => {
            let decided = record.prepare_decision(commit, b.core.now_ms());
            write::store(b.core, &id, decided, Vec::new(), Then::Decided { ctx });
        }
        (TxnState::PrepareCommit | TxnState::PrepareAbort, _) => {
            // Not busy yet prepared cannot be: a stored decision is always being carried out.
            answer(b, &ctx, ResponseError::ConcurrentTransactions, None)
        }
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
            answer_ok(b, &ctx, ids)
        }
        (TxnState::CompleteCommit, false)
        | (TxnState::CompleteAbort, true)
        | (TxnState::Empty, _) => answer(b, &ctx, ResponseError::InvalidTxnState, None),
    }
}

fn answer_ok(b: &mut Cx, ctx: &RequestCtx, ids: Option<(i64, i16)>) {
    let (pid, epoch) = ids.unwrap_or((-1, -1));
    let response = EndTxnResponse::default()
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch);
    b.core.respond(ctx, ResponseKind::EndTxn(response));
}

fn answer(b: &mut Cx, ctx: &RequestCtx, error: ResponseError, ids: Option<(i64, i16)>) {
    let (pid, epoch) = ids.unwrap_or((-1, -1));
    let response = EndTxnResponse::default()
        .with_error_code(error.code())
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch);
    b.core.respond(ctx, ResponseKind::EndTxn(response));
}
