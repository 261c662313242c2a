//! Storing a transactional id's record: the one way the coordinator changes
//! state, and only with a record one of `state`'s transitions made from the
//! id's current one. The record goes to meta.db with whatever else must change with it;
//! memory changes, and the request is answered, only when the write
//! completes. A failed write changes nothing and answers NOT_COORDINATOR,
//! which every client retries (the seed's rule).

use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, EndTxnResponse, InitProducerIdResponse,
    ProducerId, ResponseKind, TxnOffsetCommitResponse,
};
use kafka_protocol::ResponseError;

use super::complete;
use super::record::{self, TxnRecord};
use super::state::{self, Next};
use crate::broker::{Broker, MetaAction};
use crate::group::OffsetRecord;
use crate::io::MetaOp;
use crate::meta;
use crate::request::RequestCtx;

/// What to do once the record is stored.
pub enum Then {
    /// InitProducerId: answer with the record's producer id and epoch.
    Init {
        ctx: RequestCtx,
    },
    /// A fence-and-abort (InitProducerId on an open transaction, or a
    /// timeout): carry out the abort; answer `ctx`, if any, CONCURRENT_TRANSACTIONS.
    Fenced {
        ctx: Option<RequestCtx>,
    },
    AddPartitions {
        ctx: RequestCtx,
        response: AddPartitionsToTxnResponse,
    },
    AddOffsets {
        ctx: RequestCtx,
    },
    TxnOffsetCommit {
        ctx: RequestCtx,
        response: TxnOffsetCommitResponse,
    },
    /// EndTxn's decision is stored: carry it out, then answer `ctx`.
    Decided {
        ctx: RequestCtx,
    },
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
pub(crate) fn store(b: &mut Broker, id: &str, next: Next, extra: Vec<MetaOp>, then: Then) {
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
    b.emit_meta(
        ops,
        MetaAction::Txn(TxnWrite {
            id: id.to_string(),
            record: Some(record),
            then,
        }),
    );
}

/// Deletes `id` from meta.db.
pub(crate) fn delete(b: &mut Broker, id: &str) {
    let current = b.txns().get(id).map(|e| e.record.state);
    assert!(
        current.is_some_and(state::may_expire),
        "only an id with no transaction is removed, not one in {current:?}"
    );
    begin(b, id);
    let ops = vec![MetaOp::Delete {
        key: record::key(id),
    }];
    b.emit_meta(
        ops,
        MetaAction::Txn(TxnWrite {
            id: id.to_string(),
            record: None,
            then: Then::Expired,
        }),
    );
}

fn begin(b: &mut Broker, id: &str) {
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

pub(crate) fn done(b: &mut Broker, w: TxnWrite, stored: bool) {
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
    let not_coordinator = ResponseError::NotCoordinator.code();
    match w.then {
        Then::Init { ctx } => {
            let response = match (&w.record, stored) {
                (Some(r), true) => InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(r.producer_id))
                    .with_producer_epoch(r.producer_epoch),
                _ => InitProducerIdResponse::default()
                    .with_error_code(not_coordinator)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            };
            b.respond(&ctx, ResponseKind::InitProducerId(response));
        }
        Then::Fenced { ctx } => {
            if let Some(ctx) = ctx {
                let error = if stored {
                    ResponseError::ConcurrentTransactions
                } else {
                    ResponseError::NotCoordinator
                };
                let response = InitProducerIdResponse::default()
                    .with_error_code(error.code())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1);
                b.respond(&ctx, ResponseKind::InitProducerId(response));
            }
            if stored {
                complete::start(b, &w.id, None);
            }
        }
        Then::AddPartitions { ctx, mut response } => {
            if !stored {
                for topic in response.results_by_topic_v3_and_below.iter_mut() {
                    for p in topic.results_by_partition.iter_mut() {
                        p.partition_error_code = not_coordinator;
                    }
                }
            }
            b.respond(&ctx, ResponseKind::AddPartitionsToTxn(response));
        }
        Then::AddOffsets { ctx } => {
            let mut response = AddOffsetsToTxnResponse::default();
            if !stored {
                response.error_code = not_coordinator;
            }
            b.respond(&ctx, ResponseKind::AddOffsetsToTxn(response));
        }
        Then::TxnOffsetCommit { ctx, mut response } => {
            if !stored {
                for t in response.topics.iter_mut() {
                    for p in t.partitions.iter_mut() {
                        p.error_code = not_coordinator;
                    }
                }
            }
            b.respond(&ctx, ResponseKind::TxnOffsetCommit(response));
        }
        Then::Decided { ctx } => {
            if stored {
                complete::start(b, &w.id, Some(ctx));
            } else {
                let response = EndTxnResponse::default()
                    .with_error_code(not_coordinator)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1);
                b.respond(&ctx, ResponseKind::EndTxn(response));
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
