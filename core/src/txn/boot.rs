//! Start-up of the transaction coordinator, as the seed requires:
//! - every stored id is loaded; an Ongoing transaction stays open and its
//!   timeout starts again from now (aborting it would fence a live producer
//!   for good);
//! - a stored decision (PrepareCommit / PrepareAbort) is carried out again:
//!   markers (where the log does not hold them already), fsync, offsets,
//!   complete;
//! - per-partition transaction state comes with each partition's log
//!   recovery (`core_state::recovery`).

use super::record::{TxnRecord, TxnState};
use super::TxnHost;

/// Loads every stored transactional id (in meta.db's order).
pub(crate) fn load(b: &mut dyn TxnHost, stored: Vec<(String, TxnRecord)>) {
    let now_ms = b.now_ms();
    for (id, mut record) in stored {
        if record.state == TxnState::Ongoing {
            record.last_update_ms = now_ms;
        }
        b.txns_mut().set_record(&id, record);
    }
}

/// Once the logs are recovered: the timers start, and the decisions stored
/// before the stop are carried out.
pub(crate) fn resume(b: &mut dyn TxnHost) {
    let now_ms = b.now_ms();
    b.txns_mut().next_timeout_check_ms = now_ms + b.config().transaction_abort_check_interval_ms;
    b.txns_mut().next_expiry_check_ms =
        now_ms + b.config().transactional_id_expiration_check_interval_ms;
    for id in b.txns().prepared() {
        super::complete::resume(b, &id);
    }
}
