//! The group coordinator, classic protocol (Kafka 4.x's `GroupMetadataManager`
//! classic paths and `classic/ClassicGroup.java`). This broker is the
//! coordinator of every group.
//!
//! Membership lives in memory only: a restart forgets members (they get
//! UNKNOWN_MEMBER_ID and rejoin), while committed offsets live in meta.db and
//! survive. Timers (sessions, rebalance and initial delays, sync deadlines)
//! run on the broker's clock through `tick` and `next_deadline_ms`.
//!
//! Handlers call into the coordinator, which queues answers (including those
//! of parked JoinGroup / SyncGroup requests) in an outbox; the broker takes
//! them (`take_outbox`) and sends them.

mod admin;
mod expiry;
mod join;
mod member;
mod membership;
mod offsets;
mod rebalance;
mod state;
mod sync;
mod timers;

use std::collections::BTreeMap;

use kafka_protocol::messages::{JoinGroupResponse, ResponseKind, SyncGroupResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::config::BrokerConfig;
use crate::limits;
use crate::request::RequestCtx;

pub(crate) use join::JoinArgs;
pub(crate) use member::Protocol;
pub use offsets::{offset_key, parse_offset_key, OffsetRecord};
pub(crate) use offsets::{Offsets, TopicPartition};
pub(crate) use state::{Group, State};
pub(crate) use sync::SyncArgs;
use timers::{TimerKey, Timers};

/// The group settings of the broker config, copied at start.
#[derive(Clone, Copy, Debug)]
struct Settings {
    initial_rebalance_delay_ms: i64,
    min_session_timeout_ms: i32,
    max_session_timeout_ms: i32,
    offsets_retention_ms: i64,
    offsets_retention_check_interval_ms: i64,
}

pub(crate) struct Coordinator {
    settings: Settings,
    groups: BTreeMap<String, Group>,
    pub offsets: Offsets,
    timers: Timers,
    outbox: Outbox,
    /// Member ids made so far (feeds `new_member_id`).
    member_ids_made: u64,
    next_cleanup_ms: i64,
}

impl Coordinator {
    pub fn new(config: &BrokerConfig) -> Self {
        Self {
            settings: Settings {
                initial_rebalance_delay_ms: config.group_initial_rebalance_delay_ms.max(0),
                min_session_timeout_ms: config.group_min_session_timeout_ms,
                max_session_timeout_ms: config.group_max_session_timeout_ms,
                offsets_retention_ms: config.offsets_retention_ms,
                offsets_retention_check_interval_ms: config
                    .offsets_retention_check_interval_ms
                    .max(1),
            },
            groups: BTreeMap::new(),
            offsets: Offsets::default(),
            timers: Timers::default(),
            outbox: Outbox::default(),
            member_ids_made: 0,
            next_cleanup_ms: i64::MAX,
        }
    }

    /// Rebuilds committed offsets (and so their groups, Empty) from meta.db:
    /// (group, topic, partition, record), in meta.db's order.
    pub fn boot(&mut self, now_ms: i64, stored: Vec<(String, String, i32, OffsetRecord)>) {
        for (group, topic, partition, record) in stored {
            self.offsets.insert(&group, (topic, partition), record);
        }
        let names: Vec<String> = self.offsets.groups().cloned().collect();
        for name in names {
            self.groups
                .entry(name.clone())
                .or_insert_with(|| Group::new(&name, now_ms));
        }
        self.next_cleanup_ms = now_ms + self.settings.offsets_retention_check_interval_ms;
    }

    pub fn group(&self, id: &str) -> Option<&Group> {
        self.groups.get(id)
    }

    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.values()
    }

    /// The group, made Empty if absent (a join with no member id, or a
    /// commit from outside group management, creates it as in Kafka).
    fn group_or_create(&mut self, id: &str, now_ms: i64) -> &mut Group {
        self.groups
            .entry(id.to_string())
            .or_insert_with(|| Group::new(id, now_ms))
    }

    pub fn next_deadline_ms(&self) -> Option<i64> {
        let timers = self.timers.next_deadline_ms();
        Some(timers.map_or(self.next_cleanup_ms, |t| t.min(self.next_cleanup_ms)))
            .filter(|d| *d != i64::MAX)
    }

    /// Fires every timer due at `now_ms`.
    pub fn tick(&mut self, now_ms: i64) {
        // A timer may schedule another at `now_ms` (a zero initial delay);
        // each does so at most once per member joined, so this ends.
        let mut fired = 0usize;
        while let Some(key) = self.timers.pop_due(now_ms) {
            fired += 1;
            assert!(
                fired <= limits::GROUP_TIMERS_PER_TICK_MAX,
                "group timers fire in a loop: {key:?}"
            );
            match key {
                TimerKey::Heartbeat { group, member } => {
                    self.expire_heartbeat(now_ms, &group, &member)
                }
                TimerKey::Join { group } => self.join_timer_fired(now_ms, &group),
                TimerKey::Sync { group } => self.expire_pending_sync(now_ms, &group),
            }
        }
    }

    /// Forgets Empty groups that hold nothing: no offsets, no writes in
    /// flight, no pending members (Kafka drops them in its periodic offset
    /// cleanup, offsets.retention.check.interval.ms: `take_expired`).
    fn cleanup(&mut self) {
        let offsets = &self.offsets;
        self.groups.retain(|id, g| {
            g.state != State::Empty
                || g.deleting
                || !g.pending_members.is_empty()
                || offsets.has_any(id)
                || offsets.has_in_flight(id)
        });
    }

    /// A member id: `<client id or instance id>-<uuid>` as Kafka makes them.
    /// The core has no randomness, so the uuid comes from the group, the
    /// time and a count; the time keeps ids of different runs apart.
    fn new_member_id(&mut self, group: &str, prefix: &str, now_ms: i64) -> String {
        self.member_ids_made += 1;
        let uuid = crate::topics::new_topic_id(group, now_ms, self.member_ids_made);
        format!("{prefix}-{}", uuid.hyphenated())
    }

    /// Takes the answers queued so far, in the order they were made.
    pub fn take_outbox(&mut self) -> Vec<(RequestCtx, ResponseKind)> {
        std::mem::take(&mut self.outbox.0)
    }

    fn session_timeout_ok(&self, session_timeout_ms: i32) -> bool {
        (self.settings.min_session_timeout_ms..=self.settings.max_session_timeout_ms)
            .contains(&session_timeout_ms)
    }
}

/// Answers queued by the coordinator, in the order they were made.
#[derive(Default)]
pub(crate) struct Outbox(Vec<(RequestCtx, ResponseKind)>);

impl Outbox {
    pub fn send(&mut self, ctx: RequestCtx, response: ResponseKind) {
        self.0.push((ctx, response));
    }

    pub fn join(&mut self, ctx: RequestCtx, mut response: JoinGroupResponse) {
        // Before v7 the protocol name is not nullable: Kafka sends "".
        if ctx.version < 7 && response.protocol_name.is_none() {
            response.protocol_name = Some(StrBytes::default());
        }
        self.send(ctx, ResponseKind::JoinGroup(response));
    }

    pub fn sync(&mut self, ctx: RequestCtx, response: SyncGroupResponse) {
        self.send(ctx, ResponseKind::SyncGroup(response));
    }
}

pub(crate) fn join_error(member_id: &str, error: ResponseError) -> JoinGroupResponse {
    JoinGroupResponse::default()
        .with_error_code(error.code())
        .with_generation_id(-1)
        .with_member_id(StrBytes::from_string(member_id.to_string()))
        .with_protocol_name(None)
}

pub(crate) fn sync_error(error: ResponseError) -> SyncGroupResponse {
    SyncGroupResponse::default().with_error_code(error.code())
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}
