//! Committed offsets: what meta.db holds under `offset/<group>/<topic>/<partition>`,
//! mirrored in memory once stored, plus the keys with a write in flight.
//!
//! meta.db writes complete in the order they were emitted (one writer in
//! `net`, FIFO in the simulator's `SimMeta` and the test world), and a
//! crash keeps a prefix of those in flight; deletions rely on it:
//! a DeleteGroups batch names every key committed or in flight when it is
//! emitted, so nothing it did not name can be in memory when it applies.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

const OFFSET_PREFIX: &str = "offset/";

/// One committed offset, as stored (Kafka's OffsetAndMetadata).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetRecord {
    pub offset: i64,
    /// -1 when the client gave none.
    pub leader_epoch: i32,
    #[serde(default)]
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// OffsetCommit v2-v4's retention time added to the commit time, when
    /// the client gave one: the offset expires then, whatever its group
    /// does (Kafka's expireTimestampMs, `OffsetExpirationConditionImpl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_timestamp_ms: Option<i64>,
}

/// A topic and partition.
pub(crate) type TopicPartition = (String, i32);

pub fn offset_key(group: &str, topic: &str, partition: i32) -> Vec<u8> {
    format!("{OFFSET_PREFIX}{group}/{topic}/{partition}").into_bytes()
}

/// Splits `offset/<group>/<topic>/<partition>`. Group ids may hold '/',
/// topic names cannot, so the last two parts are taken from the right.
pub fn parse_offset_key(key: &str) -> Option<(String, String, i32)> {
    let rest = key.strip_prefix(OFFSET_PREFIX)?;
    let (rest, partition) = rest.rsplit_once('/')?;
    let (group, topic) = rest.rsplit_once('/')?;
    let partition: i32 = partition.parse().ok()?;
    if topic.is_empty() || partition < 0 {
        return None;
    }
    Some((group.to_string(), topic.to_string(), partition))
}

#[derive(Default)]
pub(crate) struct Offsets {
    committed: BTreeMap<String, BTreeMap<TopicPartition, OffsetRecord>>,
    /// Writes in flight per group and key (a count: two commits of one key
    /// may be in flight at once).
    in_flight: BTreeMap<String, BTreeMap<TopicPartition, u32>>,
}

impl Offsets {
    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<&OffsetRecord> {
        self.committed
            .get(group)?
            .get(&(topic.to_string(), partition))
    }

    /// Every committed offset of `group`, in topic and partition order.
    pub fn of_group(&self, group: &str) -> impl Iterator<Item = (&TopicPartition, &OffsetRecord)> {
        self.committed.get(group).into_iter().flatten()
    }

    pub fn has_any(&self, group: &str) -> bool {
        self.committed.contains_key(group)
    }

    pub fn has_in_flight(&self, group: &str) -> bool {
        self.in_flight.contains_key(group)
    }

    pub fn is_in_flight(&self, group: &str, tp: &TopicPartition) -> bool {
        self.in_flight
            .get(group)
            .is_some_and(|m| m.contains_key(tp))
    }

    pub fn groups(&self) -> impl Iterator<Item = &String> {
        self.committed.keys()
    }

    /// Stored or about to be: a deletion must name it.
    pub fn is_known(&self, group: &str, tp: &TopicPartition) -> bool {
        self.committed
            .get(group)
            .is_some_and(|m| m.contains_key(tp))
            || self
                .in_flight
                .get(group)
                .is_some_and(|m| m.contains_key(tp))
    }

    /// Every key a deletion of `group` must remove.
    pub fn known_keys(&self, group: &str) -> Vec<TopicPartition> {
        let mut keys: Vec<TopicPartition> = self
            .committed
            .get(group)
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect();
        keys.extend(
            self.in_flight
                .get(group)
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone()),
        );
        keys.sort();
        keys.dedup();
        keys
    }

    /// Every key of `topic`'s partitions, in any group, stored or with a
    /// write in flight: what a deletion of the topic must remove.
    pub fn keys_of_topic(&self, topic: &str) -> Vec<(String, TopicPartition)> {
        let mut keys = Vec::new();
        for (group, m) in &self.committed {
            let of_topic = m.keys().filter(|(t, _)| t == topic);
            keys.extend(of_topic.map(|tp| (group.clone(), tp.clone())));
        }
        for (group, m) in &self.in_flight {
            let of_topic = m.keys().filter(|(t, _)| t == topic);
            keys.extend(of_topic.map(|tp| (group.clone(), tp.clone())));
        }
        keys.sort();
        keys.dedup();
        keys
    }

    pub fn begin_write(&mut self, group: &str, tp: &TopicPartition) {
        *self
            .in_flight
            .entry(group.to_string())
            .or_default()
            .entry(tp.clone())
            .or_default() += 1;
    }

    pub fn end_write(&mut self, group: &str, tp: &TopicPartition) {
        let keys = self
            .in_flight
            .get_mut(group)
            .expect("write in flight for the group");
        let count = keys.get_mut(tp).expect("write in flight for the key");
        *count -= 1;
        if *count == 0 {
            keys.remove(tp);
        }
        if keys.is_empty() {
            self.in_flight.remove(group);
        }
    }

    /// Applies a stored commit.
    pub fn insert(&mut self, group: &str, tp: TopicPartition, record: OffsetRecord) {
        self.committed
            .entry(group.to_string())
            .or_default()
            .insert(tp, record);
    }

    /// Applies a stored deletion of some keys.
    pub fn remove(&mut self, group: &str, tp: &TopicPartition) {
        if let Some(m) = self.committed.get_mut(group) {
            m.remove(tp);
            if m.is_empty() {
                self.committed.remove(group);
            }
        }
    }

    /// Applies a stored deletion of the group, whose batch named `deleted`.
    pub fn remove_group(&mut self, group: &str, deleted: &[TopicPartition]) {
        let Some(m) = self.committed.remove(group) else {
            return;
        };
        for tp in m.keys() {
            assert!(
                deleted.contains(tp),
                "group {group}: offset {tp:?} stored after its deletion was emitted"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_keys_round_trip_with_slashes_in_the_group() {
        let key = offset_key("a/b", "t.x", 7);
        let parsed = parse_offset_key(std::str::from_utf8(&key).unwrap());
        assert_eq!(parsed, Some(("a/b".into(), "t.x".into(), 7)));
        assert_eq!(parse_offset_key("offset/g/t/-1"), None);
        assert_eq!(parse_offset_key("offset/t/1"), None);
    }

    #[test]
    fn in_flight_counts_and_known_keys() {
        let mut o = Offsets::default();
        let tp = ("t".to_string(), 0);
        o.begin_write("g", &tp);
        o.begin_write("g", &tp);
        assert_eq!(o.known_keys("g"), vec![tp.clone()]);
        o.end_write("g", &tp);
        assert!(o.has_in_flight("g"));
        o.end_write("g", &tp);
        assert!(!o.has_in_flight("g"));
        o.insert(
            "g",
            tp.clone(),
            OffsetRecord {
                offset: 5,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp_ms: 1,
                expire_timestamp_ms: None,
            },
        );
        assert_eq!(o.get("g", "t", 0).unwrap().offset, 5);
        o.remove_group("g", &[tp]);
        assert!(!o.has_any("g"));
    }
}
