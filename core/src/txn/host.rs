//! What the transaction coordinator needs of the broker around it: its ids,
//! the clock and configs, the partitions' logs (to write markers and check
//! them), the group coordinator (a commit's offsets), meta.db, syncs, and
//! answering the request that waits. The core state implements it
//! (`crate::core_state`); the coordinator's steps take a `&mut dyn TxnHost`, so
//! they name no layer above them and can be driven by a test double.

use kafka_protocol::messages::ResponseKind;

use super::write::TxnWrite;
use super::Txns;
use crate::config::BrokerConfig;
use crate::group::Coordinator;
use crate::io::MetaOp;
use crate::metrics::Counters;
use crate::partition::MarkerRefused;
use crate::request::RequestCtx;
use crate::topics::{PartitionKey, Topics};

pub(crate) trait TxnHost {
    /// The transactional ids and their records.
    fn txns(&self) -> &Txns;
    fn txns_mut(&mut self) -> &mut Txns;
    /// The time of the input being handled (ms since the UNIX epoch).
    fn now_ms(&self) -> i64;
    fn config(&self) -> &BrokerConfig;
    fn topics(&self) -> &Topics;
    /// Where a commit's offsets go.
    fn groups_mut(&mut self) -> &mut Coordinator;
    fn metrics_mut(&mut self) -> &mut Counters;
    /// Answers a request, in its connection's order.
    fn respond(&mut self, ctx: &RequestCtx, response: ResponseKind);
    /// Writes a batch to meta.db; `write::done` gets `write` when it completes.
    fn emit_txn_meta(&mut self, ops: Vec<MetaOp>, write: TxnWrite);
    /// `Input::Shutdown` came.
    fn is_stopping(&self) -> bool;
    /// Asks for everything appended so far to become durable.
    fn request_sync(&mut self);
    /// A topic's id as meta.db records keep it, if the topic exists.
    fn topic_id_text(&self, name: &str) -> Option<String>;
    /// Whether the partition's log has a marker closing this producer's
    /// transaction at this epoch.
    fn txn_closed_at(&self, key: &PartitionKey, producer_id: i64, epoch: i16) -> bool;
    /// Appends a transaction marker; its offset, or why it cannot be.
    fn append_marker(
        &mut self,
        key: &PartitionKey,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
    ) -> Result<i64, MarkerRefused>;
}
