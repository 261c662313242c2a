//! Keyed timers for the group coordinator, shaped like Kafka's coordinator
//! timer (`CoordinatorTimer`): scheduling a key again replaces its deadline,
//! cancelling forgets it, and the earliest deadline is what `poll_timeout`
//! needs. Ties fire in key order, so runs are deterministic.

use std::collections::{BTreeMap, BTreeSet};

/// What a timer is for. Each key has at most one deadline.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKey {
    /// A member's (or a pending member's) session: it expires unless heartbeats
    /// or a rebalance keep it alive (Kafka's `heartbeat-<group>-<member>`).
    Heartbeat { group: String, member: String },
    /// The end of the join phase: the rebalance timeout, or a step of the
    /// initial rebalance delay (Kafka's `join-<group>`).
    Join { group: String },
    /// The end of the sync phase: members that have not sent SyncGroup by
    /// then are removed (Kafka's `sync-<group>`).
    Sync { group: String },
}

#[derive(Default)]
pub(crate) struct Timers {
    by_key: BTreeMap<TimerKey, i64>,
    by_deadline: BTreeSet<(i64, TimerKey)>,
}

impl Timers {
    /// Sets `key` to fire at `deadline_ms`, replacing an earlier schedule.
    pub fn schedule(&mut self, key: TimerKey, deadline_ms: i64) {
        self.cancel(&key);
        self.by_deadline.insert((deadline_ms, key.clone()));
        self.by_key.insert(key, deadline_ms);
    }

    pub fn cancel(&mut self, key: &TimerKey) {
        if let Some(deadline_ms) = self.by_key.remove(key) {
            let removed = self.by_deadline.remove(&(deadline_ms, key.clone()));
            assert!(removed, "timer indexes disagree on {key:?}");
        }
    }

    /// Removes and returns the earliest key due at `now_ms`.
    pub fn pop_due(&mut self, now_ms: i64) -> Option<TimerKey> {
        let (deadline_ms, _) = self.by_deadline.first()?;
        if *deadline_ms > now_ms {
            return None;
        }
        let (_, key) = self.by_deadline.pop_first().expect("first exists");
        self.by_key.remove(&key).expect("timer indexes agree");
        Some(key)
    }

    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.by_deadline.first().map(|(d, _)| *d)
    }

    /// Forgets every timer of `group` (the group was deleted).
    pub fn cancel_group(&mut self, group: &str) {
        let keys: Vec<TimerKey> = self
            .by_key
            .keys()
            .filter(|k| match k {
                TimerKey::Heartbeat { group: g, .. }
                | TimerKey::Join { group: g }
                | TimerKey::Sync { group: g } => g == group,
            })
            .cloned()
            .collect();
        for key in keys {
            self.cancel(&key);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(g: &str) -> TimerKey {
        TimerKey::Join { group: g.into() }
    }

    #[test]
    fn reschedule_replaces_and_pop_is_in_deadline_order() {
        let mut t = Timers::default();
        t.schedule(join("a"), 10);
        t.schedule(join("b"), 5);
        t.schedule(join("a"), 3);
        assert_eq!(t.len(), 2);
        assert_eq!(t.next_deadline_ms(), Some(3));
        assert_eq!(t.pop_due(2), None);
        assert_eq!(t.pop_due(10), Some(join("a")));
        assert_eq!(t.pop_due(10), Some(join("b")));
        assert_eq!(t.pop_due(10), None);
    }

    #[test]
    fn cancel_group_forgets_only_that_group() {
        let mut t = Timers::default();
        t.schedule(join("a"), 1);
        t.schedule(
            TimerKey::Heartbeat {
                group: "a".into(),
                member: "m".into(),
            },
            2,
        );
        t.schedule(TimerKey::Sync { group: "b".into() }, 3);
        t.cancel_group("a");
        assert_eq!(t.len(), 1);
        assert_eq!(t.next_deadline_ms(), Some(3));
    }
}
