//! The transaction coordinator (classic protocol, before KIP-890) and the
//! per-partition transaction state.
//!
//! - `record`: what is stored per transactional id (meta.db `txn/<id>`);
//! - `coordinator`: the ids in memory and the rules for each transition;
//! - `complete`: carrying out a decision: markers, fsync, offsets, complete;
//! - `partition`: open and aborted transactions per partition, and the LSO;
//! - `marker`: the control batch bytes.

pub mod boot;
pub mod complete;
pub mod coordinator;
pub mod marker;
pub mod partition;
pub mod record;
pub mod timers;
pub mod write;

pub use coordinator::{TxnEntry, Txns};
pub use partition::{AbortedTxn, PartitionTxns};
pub use record::{TxnRecord, TxnState};
