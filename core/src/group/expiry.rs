//! Offset expiry: offsets.retention.minutes, checked every
//! offsets.retention.check.interval.ms, as Kafka 4.x's
//! `OffsetMetadataManager.cleanupExpiredOffsets` with
//! `ClassicGroup.offsetExpirationCondition` and
//! `OffsetExpirationConditionImpl`:
//!
//! - an offset committed with a retention time (OffsetCommit v2-v4) expires
//!   at the time that gave, if its group may expire offsets at all;
//! - an Empty group's offsets expire the retention after the group became
//!   Empty;
//! - a Stable consumer-protocol group's offsets of topics no member
//!   subscribes to expire the retention after their commit;
//! - a group outside group management (commits with generation -1 only)
//!   has each offset expire the retention after its commit;
//! - no other group expires anything, and an offset staged by an open
//!   transaction, or with a write in flight, is left for the next check.
//!
//! Kafka stores a group's state time in `__consumer_offsets`; doze keeps
//! membership in memory only, so a group rebuilt from meta.db at start-up
//! counts as made then: its offsets expire no earlier than the retention
//! after the start (later than in Kafka, never sooner).
//!
//! The expired keys are deleted from meta.db in one batch, marked in flight
//! meanwhile. meta.db applies writes in order, so a commit of one of them
//! made after the batch was emitted lands after it and stays.

use super::offsets::{OffsetRecord, TopicPartition};
use super::state::{Group, State};
use super::Coordinator;

impl Coordinator {
    /// When the check is due: forgets Empty groups holding nothing, and
    /// returns the offsets that expired at `now_ms`, marked in flight. The
    /// caller deletes them from meta.db and calls `end_expiry`. `staged`
    /// tells whether an open transaction staged an offset for (group,
    /// topic, partition).
    pub fn take_expired(
        &mut self,
        now_ms: i64,
        staged: impl Fn(&str, &str, i32) -> bool,
    ) -> Vec<(String, TopicPartition)> {
        if now_ms < self.next_cleanup_ms {
            return Vec::new();
        }
        self.next_cleanup_ms = now_ms + self.settings.offsets_retention_check_interval_ms;
        self.cleanup();
        let retention_ms = self.settings.offsets_retention_ms;
        let mut expired = Vec::new();
        for (gid, g) in &self.groups {
            if g.deleting {
                continue;
            }
            for (tp, record) in self.offsets.of_group(gid) {
                if is_expired(g, &tp.0, record, now_ms, retention_ms)
                    && !self.offsets.is_in_flight(gid, tp)
                    && !staged(gid, &tp.0, tp.1)
                {
                    expired.push((gid.clone(), tp.clone()));
                }
            }
        }
        for (gid, tp) in &expired {
            self.offsets.begin_write(gid, tp);
            tracing::debug!(
                group = gid,
                topic = tp.0,
                partition = tp.1,
                "offset expired"
            );
        }
        expired
    }

    /// The deletion of expired offsets completed; they go only if `stored`
    /// (a failed write leaves them to the next check).
    pub fn end_expiry(&mut self, expired: &[(String, TopicPartition)], stored: bool) {
        for (gid, tp) in expired {
            self.offsets.end_write(gid, tp);
            if stored {
                self.offsets.remove(gid, tp);
            }
        }
        if stored && !expired.is_empty() {
            tracing::info!(offsets = expired.len(), "expired offsets deleted");
            // Kafka deletes a group whose offsets all expired in the same pass.
            self.cleanup();
        }
    }
}

/// Whether `record`, an offset of `topic` in group `g`, has expired.
fn is_expired(
    g: &Group,
    topic: &str,
    record: &OffsetRecord,
    now_ms: i64,
    retention_ms: i64,
) -> bool {
    let Some(base_ms) = retention_base_ms(g, topic, record) else {
        return false;
    };
    match record.expire_timestamp_ms {
        Some(expire_ms) => now_ms >= expire_ms,
        None => now_ms.saturating_sub(base_ms) >= retention_ms,
    }
}

/// The time `record`'s retention counts from, or None while the group may
/// not expire it (ClassicGroup.offsetExpirationCondition, isSubscribedToTopic).
fn retention_base_ms(g: &Group, topic: &str, record: &OffsetRecord) -> Option<i64> {
    if g.protocol_type.is_none() {
        // Outside group management: from the commit, or from the start for
        // a group rebuilt at start-up (made then: `Group::state_since_ms`).
        return Some(record.commit_timestamp_ms.max(g.state_since_ms));
    }
    if g.is_subscribed_to(topic) {
        return None;
    }
    match g.state {
        State::Empty => Some(g.state_since_ms),
        State::Stable if g.uses_consumer_protocol() && g.subscribed_topics.is_some() => {
            Some(record.commit_timestamp_ms)
        }
        _ => None,
    }
}
