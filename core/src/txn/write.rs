//! Storing a transactional id's record: the one way the coordinator changes
//! state, and only with a record one of `state`'s transitions made from the
//! id's current one. The record goes to meta.db with whatever else must change with it;
//! memory changes, and the request is answered, only when the write
//! completes. A failed write changes nothing and answers NOT_COORDINATOR,
//! which every client retries (the seed's rule). The answers are built by
//! the handler that asked (a `Reply`), and EndTxn's by `complete`: nothing
//! here names an API's response.

use super::complete;
use super::record::{self, TxnRecord};
use super::state::{self, Next};
use super::TxnHost;
use crate::group::OffsetRecord;
use crate::io::MetaOp;
use crate::meta;
use crate::request::RequestCtx;
use kafka_protocol::messages::ResponseKind;

/// A handler's answer once the write is done: given the stored record, or
/// None when the write failed (the handler answers NOT_COORDINATOR), the
/// request to answer and its response.
pub(crate) type Reply = Box<dyn FnOnce(Option<&TxnRecord>) -> (RequestCtx, ResponseKind) + Send>;

/// What to do once the record is stored.
pub(crate) enum Then {
    /// InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit:
    /// answer.
    Answer(Reply),
    /// A fence-and-abort (InitProducerId on an open transaction, or a
    /// timeout): answer first, if a request asked; then, if stored, carry
    /// out the abort.
    Fenced { reply: Option<Reply> },
    /// EndTxn's decision is stored: carry it out, then answer `ctx`.
    Decided { ctx: RequestCtx },
    /// The Complete record (with a commit's offsets) is stored.
    Completed {
        applied: Vec<(String, (String, i32), OffsetRecord)>,
    },
    /// An owed Complete record, written on its own, is stored.
    Owed,
    /// An idle id was removed (transactional.id.expiration.ms).
    Expired,
}

pub struct TxnWrite {
    id: String,
    /// None: the id is deleted.
    record: Option<TxnRecord>,
    then: Then,
}

/// Stores `next` for `id` (with `extra` ops in the same batch).
pub(crate) fn store(b: &mut dyn TxnHost, id: &str, next: Next, extra: Vec<MetaOp>, then: Then) {
    let current = b.txns().get(id).map(|e| e.record.state);
    assert_eq!(
        current,
        next.from(),
        "{:?} of {id:?} made from another record than its current one",
        next.transition()
    );
    let record = next.into_record();
    let mut ops = vec![MetaOp::Put {
        key: record::key(id),
        value: meta::encode(&record),
    }];
    ops.extend(extra);
    begin(b, id);
    b.emit_txn_meta(
        ops,
        TxnWrite {
            id: id.to_string(),
            record: Some(record),
            then,
        },
    );
}

/// Deletes `id` from meta.db.
pub(crate) fn delete(b: &mut dyn TxnHost, id: &str) {
    let current = b.txns().get(id).map(|e| e.record.state);
    assert!(
        current.is_some_and(state::may_expire),
        "only an id with no transaction is removed, not one in {current:?}"
    );
    begin(b, id);
    let ops = vec![MetaOp::Delete {
        key: record::key(id),
    }];
    b.emit_txn_meta(
        ops,
        TxnWrite {
            id: id.to_string(),
            record: None,
            then: Then::Expired,
        },
    );
}

fn begin(b: &mut dyn TxnHost, id: &str) {
    match b.txns_mut().get_mut(id) {
        Some(entry) => {
            assert!(
                !entry.write_in_flight,
                "one write per transactional id at a time"
            );
            entry.write_in_flight = true;
        }
        None => b.txns_mut().mark_creating(id),
    }
}

pub(crate) fn done(b: &mut dyn TxnHost, w: TxnWrite, stored: bool) {
    match b.txns_mut().get_mut(&w.id) {
        Some(entry) => entry.write_in_flight = false,
        None => b.txns_mut().unmark_creating(&w.id),
    }
    if stored {
        match &w.record {
            Some(record) => {
                b.txns_mut().set_record(&w.id, record.clone());
                // Whatever it is, the stored record supersedes the decision
                // an owed Complete record was to replace.
                b.txns_mut().clear_owed(&w.id);
            }
            None => b.txns_mut().remove(&w.id),
        }
    }
    let stored_record = w.record.as_ref().filter(|_| stored);
    match w.then {
        Then::Answer(reply) => {
            let (ctx, response) = reply(stored_record);
            b.respond(&ctx, response);
        }
        Then::Fenced { reply } => {
            if let Some(reply) = reply {
                let (ctx, response) = reply(stored_record);
                b.respond(&ctx, response);
            }
            if stored {
                complete::start(b, &w.id, None);
            }
        }
        Then::Decided { ctx } => {
            if stored {
                complete::start(b, &w.id, Some(ctx));
            } else {
                complete::not_decided(b, &ctx);
            }
        }
        Then::Completed { applied } => complete::completed(b, &w.id, applied, stored),
        Then::Owed => {
            if !stored {
                complete::owed_write_failed(b, &w.id);
            }
        }
        Then::Expired => {}
    }
}
