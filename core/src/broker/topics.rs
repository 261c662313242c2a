//! Topics created, grown and deleted. A topic with a meta.db change in flight
//! is busy (admin requests naming it wait); it changes in memory only once
//! meta.db has the change.

use uuid::Uuid;

use super::Broker;
use crate::meta::TopicRecord;

impl Broker {
    /// A fresh id for a topic being created.
    pub(crate) fn new_topic_id(&mut self, name: &str) -> Uuid {
        self.topics.next_id(name, self.now_ms)
    }

    /// Marks a topic as having a meta.db change in flight.
    pub(crate) fn mark_topic_busy(&mut self, name: &str) {
        self.topics.mark_busy(name);
    }

    /// The topic's meta.db change in flight completed (stored or not).
    pub(crate) fn unmark_topic_busy(&mut self, name: &str) {
        self.topics.unmark_busy(name);
    }

    /// Adds a topic whose record meta.db has stored.
    pub(crate) fn add_topic(&mut self, name: &str, record: TopicRecord) {
        self.topics.insert(&self.config, name, record);
    }

    /// Grows a topic to the partitions of its stored record.
    pub(crate) fn grow_topic(&mut self, name: &str, record: TopicRecord) {
        self.topics.grow(&self.config, name, record);
    }

    /// Forgets a deleted topic: its partitions' producer and transaction
    /// state, offline marks and checkpoints go, and its directories are
    /// deleted.
    pub(crate) fn forget_topic(&mut self, name: &str, id: &Uuid) {
        self.producer_states.retain(|key, _| key.id != *id);
        self.partition_txns.retain(|key, _| key.id != *id);
        self.offline.retain(|key| key.id != *id);
        self.checkpoints.forget_topic(id);
        for (key, op) in self.topics.remove(name) {
            self.emit_disk(key, op);
        }
    }
}
