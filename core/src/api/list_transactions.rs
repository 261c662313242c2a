//! ListTransactions (key 66), v0–v1.
//!
//! Every transactional id, filtered as TransactionStateManager.listTransactionStates
//! does: by state names (unknown names are returned in unknown_state_filters),
//! by producer ids, and (v1) by duration: only transactions running for at
//! least duration_filter ms.
//!
//! ACL: only the ids the principal may DESCRIBE are listed.

use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, ResponseKind, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use super::RequestCtx;
use crate::api::Cx;
use crate::security::acl::{resource, Op};
use crate::txn::record::TxnState;

const STATES: [TxnState; 6] = [
    TxnState::Empty,
    TxnState::Ongoing,
    TxnState::PrepareCommit,
    TxnState::PrepareAbort,
    TxnState::CompleteCommit,
    TxnState::CompleteAbort,
];

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: ListTransactionsRequest) {
    let mut response = ListTransactionsResponse::default();
    let mut wanted_states = Vec::new();
    for name in &req.state_filters {
        match STATES.iter().find(|s| s.name() == name.as_str()) {
            Some(s) => wanted_states.push(*s),
            None => response.unknown_state_filters.push(name.clone()),
        }
    }
    let duration_ms = if ctx.version >= 1 {
        req.duration_filter
    } else {
        -1
    };
    let now_ms = b.core.now_ms();
    for (id, entry) in b.core.txns().iter() {
        if !b
            .core
            .authorized(&ctx, Op::Describe, resource::TRANSACTIONAL_ID, id)
        {
            continue;
        }
        let r = &entry.record;
        if !wanted_states.is_empty() && !wanted_states.contains(&r.state) {
            continue;
        }
        if !req.producer_id_filters.is_empty()
            && !req.producer_id_filters.iter().any(|p| p.0 == r.producer_id)
        {
            continue;
        }
        if duration_ms >= 0 && (r.start_ms < 0 || now_ms - r.start_ms < duration_ms) {
            continue;
        }
        response.transaction_states.push(
            TransactionState::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(id.clone())))
                .with_producer_id(ProducerId(r.producer_id))
                .with_transaction_state(StrBytes::from_static_str(r.state.name())),
        );
    }
    b.core
        .respond(&ctx, ResponseKind::ListTransactions(response));
}
