//! doze-core: the sans-IO heart of doze-kafka.
//!
//! `Broker::handle(now_ms, Input)` takes what happened, `poll_output()` hands out
//! what must be done (responses, disk work, meta.db writes) and
//! `poll_timeout()` says when to come back with `Input::Tick`. No sockets,
//! files, clocks or OS randomness live here: the same inputs give the same
//! outputs, byte for byte, which is what lets the simulator replay a seed.

pub mod api;
pub mod batch;
mod broker;
pub mod checkpoint;
pub mod config;
mod conn;
pub mod group;
pub mod io;
pub mod limits;
pub mod log;
pub mod meta;
pub mod metrics;
mod outbox;
mod partition;
pub mod produce_checks;
pub mod producer;
pub mod recompress;
pub mod record;
pub mod request;
pub mod security;
pub mod topic_config;
mod topics;
pub mod txn;
pub mod versions;

pub use broker::{Broker, CleanerProgress};
pub use config::{BrokerConfig, PlantedBug};
pub use io::{
    BootState, ConnId, DiskOp, FileRange, FileStage, FramePart, Input, IoError, IoId, MetaOp,
    Output, PartitionDir, SegmentFile, SyncScope,
};
pub use topics::PartitionKey;
