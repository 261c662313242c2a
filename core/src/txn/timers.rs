//! The coordinator's timers:
//! - every transaction.abort.timed.out.transaction.cleanup.interval.ms, an
//!   Ongoing transaction idle past its timeout (counted from its last state
//!   change) is aborted and its producer fenced: the epoch is raised and
//!   stored with PrepareAbort, then the abort is carried out with the new
//!   epoch (TransactionCoordinator.abortTimedOutTransactions);
//! - every transaction.remove.expired.transaction.cleanup.interval.ms, ids
//!   with no transaction, idle past transactional.id.expiration.ms, are removed;
//! - retries of decisions whose markers or records could not be stored;
//! - owed Complete records not superseded in time (txn/complete.rs).

use super::coordinator::timed_out;
use super::record::TxnRecord;
use super::state::may_expire;
use super::write::{self, Then};
use super::TxnHost;

pub(crate) fn tick(b: &mut dyn TxnHost) {
    let now_ms = b.now_ms();
    if now_ms >= b.txns().next_timeout_check_ms {
        b.txns_mut().next_timeout_check_ms =
            now_ms + b.config().transaction_abort_check_interval_ms.max(1);
        let expired: Vec<(String, TxnRecord)> = b
            .txns()
            .iter()
            .filter(|(_, e)| !e.busy() && timed_out(&e.record, now_ms))
            .map(|(id, e)| (id.clone(), e.record.clone()))
            .collect();
        for (id, current) in expired {
            tracing::info!(
                id,
                "transaction timed out: aborting and fencing its producer"
            );
            b.metrics_mut().txn_timed_out();
            let next = current.prepare_fence_and_abort(now_ms);
            write::store(b, &id, next, Vec::new(), Then::Fenced { reply: None });
        }
    }
    if now_ms >= b.txns().next_expiry_check_ms {
        b.txns_mut().next_expiry_check_ms = now_ms
            + b.config()
                .transactional_id_expiration_check_interval_ms
                .max(1);
        let expiration_ms = b.config().transactional_id_expiration_ms;
        let idle: Vec<String> = b
            .txns()
            .iter()
            .filter(|(_, e)| {
                !e.busy()
                    && may_expire(e.record.state)
                    && now_ms - e.record.last_update_ms > expiration_ms
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            write::delete(b, &id);
        }
    }
    super::complete::on_tick(b);
    super::complete::write_owed(b, now_ms);
}

pub(crate) fn next_deadline_ms(b: &dyn TxnHost) -> i64 {
    let mut deadline_ms = b
        .txns()
        .next_timeout_check_ms
        .min(b.txns().next_expiry_check_ms);
    if let Some(retry_ms) = super::complete::next_retry_ms(b) {
        deadline_ms = deadline_ms.min(retry_ms);
    }
    if let Some(owed_ms) = b.txns().next_owed_write_ms {
        deadline_ms = deadline_ms.min(owed_ms);
    }
    deadline_ms
}
