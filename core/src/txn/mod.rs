//! The transaction coordinator (classic protocol, before KIP-890) and the
//! per-partition transaction state.
//!
//! - `record`: what is stored per transactional id (meta.db `txn/<id>`);
//! - `state`: the transitions of a record, each checked against the states
//!   it may start from;
//! - `coordinator`: the ids in memory and the checks each request makes first;
//! - `complete`: carrying out a decision: markers, fsync, offsets, complete;
//! - `partition`: open and aborted transactions per partition, and the LSO.
//!
//! The marker batch it writes is a record format, `crate::control`.

pub mod boot;
pub mod complete;
pub mod coordinator;
mod host;
pub mod record;
pub mod state;
pub mod timers;
pub mod write;

pub use crate::partition::{AbortedTxn, PartitionTxns};
pub use coordinator::{TxnEntry, Txns};
pub(crate) use host::TxnHost;
pub use record::{TxnRecord, TxnState};
pub use state::Next;
