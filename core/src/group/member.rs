//! One member of a classic group, as Kafka's `ClassicGroupMember.java` keeps
//! it: identity, timeouts, the protocols it offered (in its order of
//! preference), its assignment, and the JoinGroup / SyncGroup request it is
//! waiting on, if any.

use std::collections::BTreeSet;

use bytes::Bytes;

use crate::request::RequestCtx;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

#[derive(Debug)]
pub(crate) struct Member {
    pub id: String,
    /// group.instance.id: set for static members.
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    pub assignment: Bytes,
    /// The JoinGroup parked until the join phase completes.
    pub join_waiter: Option<RequestCtx>,
    /// The SyncGroup parked until the leader's assignment arrives.
    pub sync_waiter: Option<RequestCtx>,
    /// Added in the current join phase and not yet through it: such a member
    /// can expire while it waits (Kafka's `isNew`).
    pub is_new: bool,
}

impl Member {
    pub fn is_static(&self) -> bool {
        self.instance_id.is_some()
    }

    pub fn is_awaiting_join(&self) -> bool {
        self.join_waiter.is_some()
    }

    pub fn is_awaiting_sync(&self) -> bool {
        self.sync_waiter.is_some()
    }

    /// Whether a session expiry finds this member alive anyway: a member parked
    /// in a rebalance cannot heartbeat, so waiting counts as one, except for
    /// a new member (it has no id it could heartbeat with).
    pub fn has_satisfied_heartbeat(&self) -> bool {
        !self.is_new && (self.is_awaiting_join() || self.is_awaiting_sync())
    }

    /// Same protocols, same metadata, same order.
    pub fn matches(&self, protocols: &[Protocol]) -> bool {
        self.protocols == protocols
    }

    /// This member's first choice among `candidates`.
    pub fn vote<'a>(&'a self, candidates: &BTreeSet<&str>) -> &'a str {
        let choice = self
            .protocols
            .iter()
            .find(|p| candidates.contains(p.name.as_str()));
        &choice
            .expect("a member votes only among protocols it supports")
            .name
    }

    /// The metadata this member gave for `protocol` (empty if none).
    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|p| p.name == protocol)
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }
}
