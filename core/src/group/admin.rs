//! Offsets and group lifecycle: the checks of OffsetCommit, OffsetFetch,
//! DeleteGroups and OffsetDelete (Kafka 4.x's `OffsetMetadataManager.java`
//! and `ClassicGroup.validateOffsetCommit / validateDeleteGroup /
//! validateOffsetDelete`), and applying their meta.db writes once stored.

use kafka_protocol::ResponseError;

use super::offsets::{OffsetRecord, TopicPartition};
use super::state::State;
use super::timers::TimerKey;
use super::Coordinator;
use crate::limits;

impl Coordinator {
    /// Whether an OffsetCommit (or, with `transactional`, a TxnOffsetCommit)
    /// may write, as ClassicGroup.validateOffsetCommit: a commit from outside
    /// group management (generation -1) creates an Empty "simple" group; a
    /// transactional one is also taken from outside a non-empty group and
    /// while it completes a rebalance (Kafka skips those two checks for it).
    #[allow(clippy::too_many_arguments)] // the request's group fields
    pub fn check_commit(
        &mut self,
        now_ms: i64,
        gid: &str,
        generation_id: i32,
        member_id: &str,
        instance_id: Option<&str>,
        version: i16,
        transactional: bool,
    ) -> Result<(), ResponseError> {
        if gid.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        if !self.groups.contains_key(gid) {
            if generation_id >= 0 {
                // v9 says what happened; older clients expect ILLEGAL_GENERATION.
                return Err(if version >= 9 {
                    ResponseError::GroupIdNotFound
                } else {
                    ResponseError::IllegalGeneration
                });
            }
            if self.groups.len() >= limits::GROUPS_MAX {
                return Err(ResponseError::CoordinatorNotAvailable);
            }
            self.group_or_create(gid, now_ms);
        }
        let g = &self.groups[gid];
        if g.deleting {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        if generation_id < 0 && g.state == State::Empty {
            return Ok(());
        }
        if generation_id >= 0 || !member_id.is_empty() || instance_id.is_some() {
            g.validate_member(member_id, instance_id)?;
            if generation_id != g.generation_id {
                return Err(ResponseError::IllegalGeneration);
            }
        } else if g.state != State::Empty && !transactional {
            // No member id and no generation: only an Empty group takes it.
            return Err(ResponseError::UnknownMemberId);
        } else {
            // A transactional commit from outside the membership: no member
            // whose session to extend.
            return Ok(());
        }
        match g.state {
            State::CompletingRebalance if !transactional => Err(ResponseError::RebalanceInProgress),
            // A commit keeps the session alive, as a heartbeat does.
            State::Stable | State::PreparingRebalance | State::CompletingRebalance => {
                let deadline_ms = now_ms + g.members[member_id].session_timeout_ms as i64;
                let key = TimerKey::Heartbeat {
                    group: gid.to_string(),
                    member: member_id.to_string(),
                };
                self.timers.schedule(key, deadline_ms);
                Ok(())
            }
            State::Empty => Ok(()),
        }
    }

    /// A commit's keys go to meta.db.
    pub fn begin_commit(&mut self, gid: &str, records: &[(TopicPartition, OffsetRecord)]) {
        assert!(
            self.groups.contains_key(gid),
            "commit to unknown group {gid}"
        );
        for (tp, _) in records {
            self.offsets.begin_write(gid, tp);
        }
    }

    /// The commit's write completed; its offsets count only if `stored`.
    pub fn end_commit(
        &mut self,
        now_ms: i64,
        gid: &str,
        records: Vec<(TopicPartition, OffsetRecord)>,
        stored: bool,
    ) {
        assert!(
            self.groups.contains_key(gid),
            "group {gid} went away with a commit in flight"
        );
        for (tp, record) in records {
            self.offsets.end_write(gid, &tp);
            if stored {
                self.store_offset(now_ms, gid, tp, record);
            }
        }
    }

    /// Applies an offset meta.db has stored (a commit, or a transaction's
    /// offsets at its commit). Offsets imply their group: if it was deleted
    /// meanwhile it comes back Empty, as Kafka's replay of an offset record
    /// recreates a simple group.
    pub fn store_offset(
        &mut self,
        now_ms: i64,
        gid: &str,
        tp: TopicPartition,
        record: OffsetRecord,
    ) {
        self.group_or_create(gid, now_ms);
        self.offsets.insert(gid, tp, record);
    }

    /// The committed offset, if any; a group being deleted has none (Kafka's
    /// Dead group answers every partition with -1).
    pub fn committed(&self, gid: &str, topic: &str, partition: i32) -> Option<&OffsetRecord> {
        self.groups.get(gid).filter(|g| !g.deleting)?;
        self.offsets.get(gid, topic, partition)
    }

    /// Every committed offset of a group, in topic and partition order.
    pub fn all_committed(&self, gid: &str) -> Vec<(TopicPartition, OffsetRecord)> {
        if self.groups.get(gid).is_none_or(|g| g.deleting) {
            return Vec::new();
        }
        self.offsets
            .of_group(gid)
            .map(|(tp, r)| (tp.clone(), r.clone()))
            .collect()
    }

    pub fn check_delete_group(&self, gid: &str) -> Result<(), ResponseError> {
        if gid.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let g = self
            .groups
            .get(gid)
            .filter(|g| !g.deleting)
            .ok_or(ResponseError::GroupIdNotFound)?;
        if g.state != State::Empty {
            return Err(ResponseError::NonEmptyGroup);
        }
        Ok(())
    }

    /// Marks the group as being deleted and returns every offset key the
    /// deletion must remove from meta.db (stored or in flight).
    pub fn begin_delete_group(&mut self, gid: &str) -> Vec<TopicPartition> {
        let g = self.groups.get_mut(gid).expect("checked group");
        assert!(!g.deleting, "group {gid} deleted twice at once");
        g.deleting = true;
        self.offsets.known_keys(gid)
    }

    pub fn end_delete_group(&mut self, gid: &str, deleted: &[TopicPartition], stored: bool) {
        let g = self
            .groups
            .get_mut(gid)
            .expect("a group being deleted stays");
        assert!(g.deleting, "group {gid} was not being deleted");
        if !stored {
            g.deleting = false;
            return;
        }
        assert!(
            g.members.is_empty(),
            "group {gid} gained members while being deleted"
        );
        self.offsets.remove_group(gid, deleted);
        self.groups.remove(gid);
        self.timers.cancel_group(gid);
        tracing::info!(group = gid, "group deleted");
    }

    pub fn check_offset_delete(&self, gid: &str) -> Result<(), ResponseError> {
        if gid.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let g = self
            .groups
            .get(gid)
            .filter(|g| !g.deleting)
            .ok_or(ResponseError::GroupIdNotFound)?;
        if g.state != State::Empty && !g.uses_consumer_protocol() {
            return Err(ResponseError::NonEmptyGroup);
        }
        Ok(())
    }

    pub fn is_subscribed_to(&self, gid: &str, topic: &str) -> bool {
        self.groups
            .get(gid)
            .is_some_and(|g| g.is_subscribed_to(topic))
    }

    /// Whether an offset of this partition is stored or on its way.
    pub fn has_offset(&self, gid: &str, tp: &TopicPartition) -> bool {
        self.offsets.is_known(gid, tp)
    }

    /// The offsets of a topic being deleted, by group, stored or on their
    /// way: the topic's deletion removes them in the same meta.db batch, as
    /// Kafka's OffsetMetadataManager.onPartitionsDeleted does, so that a
    /// group reading a topic created again under the name does not resume
    /// at the deleted topic's offsets (skipping the new topic's records).
    pub fn offsets_of_topic(&self, topic: &str) -> Vec<(String, TopicPartition)> {
        self.offsets.keys_of_topic(topic)
    }

    /// Applies a stored deletion of a deleted topic's offsets.
    pub fn end_topic_offsets_delete(&mut self, deleted: &[(String, TopicPartition)]) {
        for (gid, tp) in deleted {
            self.offsets.remove(gid, tp);
        }
    }

    pub fn end_offset_delete(&mut self, gid: &str, deleted: &[TopicPartition], stored: bool) {
        if stored {
            for tp in deleted {
                self.offsets.remove(gid, tp);
            }
        }
    }
}
