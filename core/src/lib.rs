//! doze-core: the sans-IO heart of doze-kafka.
//!
//! `Broker::handle(now_ms, Input)` takes what happened, `poll_output()` hands out
//! what must be done (responses, disk work, meta.db writes) and
//! `poll_timeout()` says when to come back with `Input::Tick`. No sockets,
//! files, clocks or OS randomness live here: the same inputs give the same
//! outputs, byte for byte, which is what lets the simulator replay a seed.

pub mod api;
pub mod batch;
pub mod boundary;
mod broker;
pub mod checkpoint;
pub mod config;
mod conn;
pub mod control;
mod core_state;
pub mod fetch_sessions;
pub mod group;
pub mod io;
pub mod limits;
pub mod log;
pub mod meta;
pub mod metrics;
mod outbox;
mod partition;
mod partition_key;
pub mod produce_checks;
pub mod producer;
mod properties;
pub mod recompress;
pub mod record;
pub mod request;
pub mod security;
pub mod topic_config;
mod topics;
pub mod txn;
pub mod versions;

// The unit tests run the log on the simulator's disk, whose source
// (simdisk/src/disk.rs, the doze-simdisk crate) is compiled into them: that
// crate depends on doze-core, so as a dependency here it would bring a
// second doze-core whose types are not the ones under test. The disk names
// the core `doze_core`, which inside the tests is this crate. (Its own
// tests run here too: a second run, under these types.)
#[cfg(test)]
extern crate self as doze_core;
#[cfg(test)]
#[path = "../../simdisk/src/disk.rs"]
#[allow(dead_code)]
mod simdisk;

pub use boundary::{Input, Output};
pub use broker::{Broker, CleanerProgress};
pub use config::{BrokerConfig, PlantedBug};
pub use core_state::meta_entry;
pub use io::{
    BootState, ConnId, DiskOp, FileRange, FileStage, FramePart, IoError, IoId, MetaOp,
    PartitionDir, SegmentFile, SyncScope,
};
pub use partition_key::PartitionKey;
