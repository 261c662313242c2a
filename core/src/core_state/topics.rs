//! Topics created, grown and deleted. A topic with a meta.db change in flight
//! is busy (admin requests naming it wait); it changes in memory only once
//! meta.db has the change.

use uuid::Uuid;

use super::Core;
use crate::meta::TopicRecord;
use crate::topic_config::CleanupConfig;

impl Core {
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

    /// Puts in force the config overrides of a topic's stored record
    /// (AlterConfigs, IncrementalAlterConfigs): from the next append, the
    /// next fetch, the next retention check on.
    pub(crate) fn set_topic_configs(&mut self, name: &str, record: TopicRecord) {
        self.topics.set_configs(&self.config, name, record);
    }

    /// What the log cleaner and retention need of a topic's configs (its
    /// overrides, else the broker's defaults); `None` for a topic that does
    /// not exist.
    pub fn cleanup_config(&self, topic: &str) -> Option<CleanupConfig> {
        Some(self.topics.get(topic)?.cleanup_config(&self.config))
    }

    /// Forgets a deleted topic: its partitions go with all they hold, and
    /// its directories are deleted.
    pub(crate) fn forget_topic(&mut self, name: &str, id: &Uuid) {
        if let Some(topic) = self.topics.remove(name) {
            assert_eq!(topic.id, *id, "the incarnation deleted is the one stored");
            self.cleaner_forget_topic(&topic);
            for (key, op) in topic.delete_ops() {
                self.emit_disk(key, op);
            }
        }
        // The next sync started covers the removal (`start_sync`).
        self.unsynced_removals.insert(name.to_string(), None);
    }

    /// A topic's id as meta.db records keep it (hyphenated), if it exists.
    pub(crate) fn topic_id_text(&self, name: &str) -> Option<String> {
        let topic = self.topics.get(name)?;
        Some(topic.id.hyphenated().to_string())
    }

    /// A topic of this name was deleted and no completed sync covers the
    /// removal of its directories yet.
    pub(crate) fn removal_unsynced(&self, name: &str) -> bool {
        self.unsynced_removals.contains_key(name)
    }
}
