//! The core as the transaction coordinator's host (`crate::txn::TxnHost`).

use kafka_protocol::messages::ResponseKind;

use super::{Core, MetaAction};
use crate::config::BrokerConfig;
use crate::group::Coordinator;
use crate::io::MetaOp;
use crate::metrics::Counters;
use crate::partition::MarkerRefused;
use crate::request::RequestCtx;
use crate::topics::{PartitionKey, Topics};
use crate::txn::write::TxnWrite;
use crate::txn::{TxnHost, Txns};

impl TxnHost for Core {
    fn txns(&self) -> &Txns {
        Core::txns(self)
    }

    fn txns_mut(&mut self) -> &mut Txns {
        Core::txns_mut(self)
    }

    fn now_ms(&self) -> i64 {
        Core::now_ms(self)
    }

    fn config(&self) -> &BrokerConfig {
        Core::config(self)
    }

    fn topics(&self) -> &Topics {
        Core::topics(self)
    }

    fn groups_mut(&mut self) -> &mut Coordinator {
        Core::groups_mut(self)
    }

    fn metrics_mut(&mut self) -> &mut Counters {
        Core::metrics_mut(self)
    }

    fn respond(&mut self, ctx: &RequestCtx, response: ResponseKind) {
        Core::respond(self, ctx, response)
    }

    fn emit_txn_meta(&mut self, ops: Vec<MetaOp>, write: TxnWrite) {
        self.emit_meta(ops, MetaAction::Txn(write));
    }

    fn is_stopping(&self) -> bool {
        self.shutting_down
    }

    fn request_sync(&mut self) {
        Core::request_sync(self)
    }

    fn topic_id_text(&self, name: &str) -> Option<String> {
        Core::topic_id_text(self, name)
    }

    /// Not on a partition gone (`Partition::txn_closed_at`).
    fn txn_closed_at(&self, key: &PartitionKey, producer_id: i64, epoch: i16) -> bool {
        self.topics
            .get_partition(key)
            .is_some_and(|p| p.txn_closed_at(producer_id, epoch))
    }

    fn append_marker(
        &mut self,
        key: &PartitionKey,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
    ) -> Result<i64, MarkerRefused> {
        Core::append_marker(self, key, producer_id, epoch, coordinator_epoch, commit)
    }
}
