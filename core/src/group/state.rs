//! A classic group's state: members, generation, chosen protocol, the state
//! machine Empty → PreparingRebalance → CompletingRebalance → Stable, and
//! the bookkeeping of who has rejoined or synced. Follows Kafka's
//! `classic/ClassicGroup.java` and `ClassicGroupState.java`; Dead is not a
//! state here: a deleted group is removed (and `deleting` covers the wait
//! for meta.db, where Kafka would answer as Dead).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::ResponseError;

use super::member::{Member, Protocol};

/// The protocol type of Kafka consumers; only its metadata is parsed here.
pub(crate) const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl State {
    /// The name Kafka reports in DescribeGroups and ListGroups.
    pub fn name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::PreparingRebalance => "PreparingRebalance",
            State::CompletingRebalance => "CompletingRebalance",
            State::Stable => "Stable",
        }
    }

    fn valid_previous(self) -> &'static [State] {
        match self {
            State::Empty => &[State::PreparingRebalance],
            State::PreparingRebalance => &[State::Stable, State::CompletingRebalance, State::Empty],
            State::CompletingRebalance => &[State::PreparingRebalance],
            State::Stable => &[State::CompletingRebalance],
        }
    }
}

/// What the group's join timer does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JoinTimer {
    /// Complete the join phase (the rebalance timeout passed).
    Complete,
    /// One step of group.initial.rebalance.delay.ms (Kafka's InitialDelayedJoin):
    /// if members joined during the step, wait again, up to `remaining_ms`.
    InitialDelay { delay_ms: i64, remaining_ms: i64 },
}

#[derive(Debug)]
pub(crate) struct Group {
    pub id: String,
    pub state: State,
    pub previous_state: State,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader_id: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// group.instance.id -> member id.
    pub static_members: BTreeMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, not yet joined.
    pub pending_members: BTreeSet<String>,
    /// Members that have not sent SyncGroup for the current generation.
    pub pending_sync: BTreeSet<String>,
    /// A member joined during the initial delay (so it extends).
    pub new_member_added: bool,
    pub join_timer: JoinTimer,
    /// The generation the sync timer was set for.
    pub sync_generation: i32,
    /// Topics the members subscribe to, when the consumer protocol says so.
    pub subscribed_topics: Option<BTreeSet<String>>,
    /// A DeleteGroups write is in flight: the group answers as Kafka's Dead.
    pub deleting: bool,
    /// When the group entered its state (Kafka's currentStateTimestamp):
    /// an Empty group's offsets expire offsets.retention.minutes after it.
    pub state_since_ms: i64,
}

impl Group {
    pub fn new(id: &str, now_ms: i64) -> Self {
        Self {
            id: id.to_string(),
            state: State::Empty,
            previous_state: State::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            pending_members: BTreeSet::new(),
            pending_sync: BTreeSet::new(),
            new_member_added: false,
            join_timer: JoinTimer::Complete,
            sync_generation: 0,
            subscribed_topics: None,
            deleting: false,
            state_since_ms: now_ms,
        }
    }

    pub fn transition(&mut self, to: State, now_ms: i64) {
        assert!(
            to.valid_previous().contains(&self.state),
            "group {}: no transition from {:?} to {to:?}",
            self.id,
            self.state
        );
        self.previous_state = self.state;
        self.state = to;
        self.state_since_ms = now_ms;
    }

    pub fn can_rebalance(&self) -> bool {
        State::PreparingRebalance
            .valid_previous()
            .contains(&self.state)
    }

    pub fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    /// The largest rebalance timeout among members (Kafka's rebalanceTimeoutMs()).
    pub fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms as i64)
            .max()
            .unwrap_or(0)
    }

    pub fn awaiting_join_count(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.is_awaiting_join())
            .count()
    }

    pub fn has_all_members_joined(&self) -> bool {
        self.awaiting_join_count() == self.members.len() && self.pending_members.is_empty()
    }

    pub fn uses_consumer_protocol(&self) -> bool {
        self.protocol_type.as_deref() == Some(CONSUMER_PROTOCOL_TYPE)
    }

    /// Adds a member (its protocols checked by `supports_protocols` first).
    pub fn add(&mut self, member: Member) {
        if let Some(instance_id) = &member.instance_id {
            let previous = self
                .static_members
                .insert(instance_id.clone(), member.id.clone());
            assert!(
                previous.is_none(),
                "static member {instance_id} added twice"
            );
        }
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        assert_eq!(
            self.protocol_type.as_deref(),
            Some(member.protocol_type.as_str()),
            "protocol type checked before add"
        );
        if self.leader_id.is_none() {
            self.leader_id = Some(member.id.clone());
        }
        self.pending_members.remove(&member.id);
        let previous = self.members.insert(member.id.clone(), member);
        assert!(previous.is_none(), "member added twice");
    }

    /// Removes a member; the caller answers whatever it was waiting on.
    pub fn remove(&mut self, member_id: &str) -> Option<Member> {
        let removed = self.members.remove(member_id);
        if let Some(instance_id) = removed.as_ref().and_then(|m| m.instance_id.as_ref()) {
            self.static_members.remove(instance_id);
        }
        if self.is_leader(member_id) {
            self.leader_id = self.members.keys().next().cloned();
        }
        self.pending_members.remove(member_id);
        self.pending_sync.remove(member_id);
        removed
    }

    /// Kafka's validateMember: a static member must be the one its instance
    /// id maps to (else FENCED_INSTANCE_ID), and the member must exist.
    pub fn validate_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), ResponseError> {
        if let Some(instance_id) = instance_id {
            match self.static_members.get(instance_id) {
                None => return Err(ResponseError::UnknownMemberId),
                Some(existing) if existing != member_id => {
                    return Err(ResponseError::FencedInstanceId)
                }
                Some(_) => {}
            }
        }
        if !self.members.contains_key(member_id) {
            return Err(ResponseError::UnknownMemberId);
        }
        Ok(())
    }

    /// Whether a member with this protocol type and these protocols may join:
    /// an empty group takes any non-empty offer; otherwise the type must match
    /// and one protocol must be supported by every member.
    pub fn supports_protocols(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if self.state == State::Empty {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        // ClassicGroup.supportsProtocols: some protocol of the joiner is
        // supported by every member; with no members left (a group waiting
        // for pending joiners) that holds for any protocol. Found by the
        // simulator (group-rebalance-during-transaction seed 100430).
        if self.members.is_empty() {
            return !protocols.is_empty();
        }
        let candidates = self.candidate_protocols();
        protocols
            .iter()
            .any(|p| candidates.contains(p.name.as_str()))
    }

    /// Protocol names every member supports.
    fn candidate_protocols(&self) -> BTreeSet<&str> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            let names: BTreeSet<&str> = m.protocols.iter().map(|p| p.name.as_str()).collect();
            for name in names {
                *counts.entry(name).or_default() += 1;
            }
        }
        counts
            .into_iter()
            .filter(|(_, n)| *n == self.members.len())
            .map(|(name, _)| name)
            .collect()
    }

    /// Each member votes for its first supported candidate; most votes wins
    /// (ties go to the smallest name, for determinism).
    pub fn select_protocol(&self) -> String {
        assert!(
            !self.members.is_empty(),
            "cannot select a protocol for an empty group"
        );
        let candidates = self.candidate_protocols();
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            *votes.entry(m.vote(&candidates)).or_default() += 1;
        }
        let best = votes.values().copied().max().expect("at least one vote");
        let (name, _) = votes
            .into_iter()
            .find(|(_, n)| *n == best)
            .expect("a protocol has the most votes");
        name.to_string()
    }

    /// Keeps the leader if it rejoined, else picks a member that did; false
    /// when there is no leader or nobody rejoined.
    pub fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let Some(leader) = &self.leader_id else {
            return false;
        };
        let leader_joined = self
            .members
            .get(leader)
            .is_some_and(|m| m.is_awaiting_join());
        if leader_joined {
            return true;
        }
        match self.members.values().find(|m| m.is_awaiting_join()) {
            Some(m) => {
                self.leader_id = Some(m.id.clone());
                true
            }
            None => false,
        }
    }

    /// Starts the next generation (Kafka's initNextGeneration).
    pub fn init_next_generation(&mut self, now_ms: i64) {
        self.generation_id += 1;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.subscribed_topics = self.compute_subscribed_topics();
            self.transition(State::Empty, now_ms);
        } else {
            self.protocol_name = Some(self.select_protocol());
            self.subscribed_topics = self.compute_subscribed_topics();
            self.transition(State::CompletingRebalance, now_ms);
        }
        self.pending_sync.clear();
    }

    /// The topics named in the members' consumer-protocol subscriptions;
    /// None when the group does not use the consumer protocol or a
    /// subscription cannot be read.
    fn compute_subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if !self.uses_consumer_protocol() {
            return None;
        }
        if self.members.is_empty() {
            return Some(BTreeSet::new());
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = BTreeSet::new();
        for m in self.members.values() {
            topics.extend(subscription_topics(&m.metadata(protocol))?);
        }
        Some(topics)
    }

    /// Kafka's isSubscribedToTopic: unknown subscriptions count as subscribed
    /// for consumer groups, so offsets are not deleted under them.
    pub fn is_subscribed_to(&self, topic: &str) -> bool {
        match &self.subscribed_topics {
            Some(topics) => topics.contains(topic),
            None => self.uses_consumer_protocol(),
        }
    }
}

/// Reads the topic list of a ConsumerProtocolSubscription: every version
/// starts with the v0 layout (version: int16, topics: [string]).
fn subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut rest = metadata;
    let mut take = |n: usize| -> Option<&[u8]> {
        if rest.len() < n {
            return None;
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Some(head)
    };
    let _version = take(2)?;
    let count = i32::from_be_bytes(take(4)?.try_into().ok()?);
    if count < 0 {
        return Some(Vec::new());
    }
    let mut topics = Vec::new();
    for _ in 0..count {
        let len = i16::from_be_bytes(take(2)?.try_into().ok()?);
        let name = take(usize::try_from(len).ok()?)?;
        topics.push(String::from_utf8(name.to_vec()).ok()?);
    }
    Some(topics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_topics_reads_the_v0_prefix() {
        let mut m = vec![0, 3, 0, 0, 0, 2, 0, 1, b'a', 0, 2, b'b', b'c'];
        m.extend_from_slice(&[0, 0, 0, 0]); // user data and later fields are ignored
        assert_eq!(
            subscription_topics(&m),
            Some(vec!["a".to_string(), "bc".to_string()])
        );
        assert_eq!(subscription_topics(&[0, 0, 0, 0, 0, 1, 0, 5, b'x']), None);
    }
}
