//! Producers: the id allocator (`ids`) and, per partition, each producer's
//! epoch and recent sequence numbers (`state`), which make retries of an
//! idempotent producer land once.

pub mod ids;
pub mod state;

pub use ids::ProducerIds;
pub use state::{AppendCheck, MarkerFenced, ProducerError, ProducerStates};
