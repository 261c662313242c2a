//! Committed offsets expire as in Kafka 4.x (offsets.retention.minutes,
//! offsets.retention.check.interval.ms): an Empty group's the retention
//! after it became Empty, a Stable consumer group's only for topics no
//! member subscribes to, a simple group's the retention after each commit,
//! and an offset given a retention time (OffsetCommit v2-v4) at that time.
//! An offset being written, or staged by an open transaction, stays.

mod support;

use doze_core::BrokerConfig;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::*;
use support::groups::*;
use support::requests::create_topic;
use support::txn::{add_offsets, end_txn, init_txn, txn_offset_commit};
use support::*;

const RETENTION_MS: i64 = 60_000;
const CHECK_MS: i64 = 1_000;

/// offsets.retention.minutes=1, checked every second.
fn expiring_world() -> World {
    let mut config = BrokerConfig::default();
    for (key, value) in [
        ("group.initial.rebalance.delay.ms", "0"),
        ("offsets.retention.minutes", "1"),
        ("offsets.retention.check.interval.ms", "1000"),
    ] {
        config.set(key, value).unwrap();
    }
    let mut w = World::new(config);
    create_topic(&mut w, "t", 2);
    create_topic(&mut w, "u", 1);
    w
}

/// Moves the clock `ms` in steps of one check interval, so every check due
/// runs at its time.
fn pass(w: &mut World, ms: i64) {
    let mut left = ms;
    while left > 0 {
        let step = left.min(CHECK_MS);
        w.advance(step);
        left -= step;
    }
}

/// As `pass`, with `member` of `group` heartbeating at every step so its
/// session lives.
fn pass_alive(w: &mut World, ms: i64, group: &str, member: &str) {
    let mut left = ms;
    while left > 0 {
        let step = left.min(CHECK_MS);
        w.advance(step);
        assert_eq!(heartbeat(w, 1, group, 1, member, None), 0);
        left -= step;
    }
}

fn group_state(w: &mut World, group: &str) -> String {
    describe(w, 9, group).group_state.to_string()
}

#[test]
fn an_empty_groups_offsets_expire_the_retention_after_it_became_empty() {
    let mut w = expiring_world();
    let member = join_new(&mut w, 1, "g");
    join_answer(&mut w, 1).expect("a lone member's join completes");
    sync(&mut w, 1, "g", 1, &member, &[]);
    assert_eq!(sync_answer(&mut w, 1).unwrap().error_code, 0);
    // The member subscribes to "t" only (`join` sends that subscription).
    let offsets = [("t", 0, 5), ("t", 1, 6), ("u", 0, 7)];
    assert_eq!(commit(&mut w, 1, "g", 1, &member, &offsets), vec![0, 0, 0]);

    pass_alive(&mut w, 2 * RETENTION_MS, "g", &member);
    assert_eq!(group_state(&mut w, "g"), "Stable");
    assert_eq!(
        fetch_offset(&mut w, 1, "g", "t", 0),
        5,
        "a Stable group keeps the offsets of what it subscribes to"
    );
    assert_eq!(
        fetch_offset(&mut w, 1, "g", "u", 0),
        -1,
        "but not of a topic no member subscribes to (KIP-496)"
    );
    assert_eq!(offset_keys(&w), vec!["offset/g/t/0", "offset/g/t/1"]);

    let leave = LeaveGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_members(vec![MemberIdentity::default().with_member_id(s(&member))]);
    w.send(1, 4, &leave);
    assert!(matches!(w.recv(1), Some((_, ResponseKind::LeaveGroup(r))) if r.error_code == 0));
    assert_eq!(group_state(&mut w, "g"), "Empty");
    // The retention counts from when the group became Empty, not from the
    // commit, which is two retentions old by now.
    pass(&mut w, RETENTION_MS - CHECK_MS);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 1), 6);
    pass(&mut w, 2 * CHECK_MS);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), -1);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 1), -1);
    assert!(offset_keys(&w).is_empty(), "deleted from meta.db");
    assert_eq!(
        group_state(&mut w, "g"),
        "Dead",
        "an Empty group left with nothing is forgotten"
    );
    w.restart(true);
    assert_eq!(
        fetch_offset(&mut w, 1, "g", "t", 0),
        -1,
        "after a power cut"
    );
}

#[test]
fn a_simple_groups_offsets_expire_the_retention_after_their_commit() {
    let mut w = expiring_world();
    assert_eq!(commit(&mut w, 1, "g", -1, "", &[("t", 0, 5)]), vec![0]);
    pass(&mut w, RETENTION_MS / 2);
    assert_eq!(commit(&mut w, 1, "g", -1, "", &[("t", 1, 6)]), vec![0]);
    pass(&mut w, RETENTION_MS / 2 + CHECK_MS);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), -1, "committed first");
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 1), 6, "committed later");
    assert_eq!(offset_keys(&w), vec!["offset/g/t/1"]);
    // A commit again starts the offset's retention again.
    assert_eq!(commit(&mut w, 1, "g", -1, "", &[("t", 1, 8)]), vec![0]);
    pass(&mut w, RETENTION_MS - CHECK_MS);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 1), 8);
    pass(&mut w, 2 * CHECK_MS);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 1), -1);
    assert!(offset_keys(&w).is_empty());
}

/// meta.db does not hold when a group became Empty, so a group rebuilt at
/// start-up counts from the start: later than Kafka, never sooner.
#[test]
fn a_restart_counts_the_retention_again_from_the_start() {
    let mut w = expiring_world();
    assert_eq!(commit(&mut w, 1, "g", -1, "", &[("t", 0, 5)]), vec![0]);
    pass(&mut w, RETENTION_MS / 2);
    w.restart(false);
    pass(&mut w, RETENTION_MS / 2 + 5 * CHECK_MS);
    assert_eq!(
        fetch_offset(&mut w, 1, "g", "t", 0),
        5,
        "kept past its commit's retention"
    );
    pass(&mut w, RETENTION_MS / 2);
    assert_eq!(
        fetch_offset(&mut w, 1, "g", "t", 0),
        -1,
        "a retention after the start"
    );
    assert!(offset_keys(&w).is_empty());
}

/// OffsetCommit v2-v4 may name a retention time; Kafka 4.x still honours
/// it (OffsetMetadataManager.expireTimestampMs), and later versions have
/// none.
#[test]
fn an_offsets_own_retention_time_fixes_its_expiry() {
    let mut w = expiring_world();
    let short = commit_req("g", -1, "", &[("t", 0, 5)]).with_retention_time_ms(3_000);
    w.send(1, 4, &short);
    assert_eq!(commit_answer(&mut w, 1), Some(vec![0]));
    let long = commit_req("g", -1, "", &[("t", 1, 6)]).with_retention_time_ms(3 * RETENTION_MS);
    w.send(1, 2, &long);
    assert_eq!(commit_answer(&mut w, 1), Some(vec![0]));
    let ignored = commit_req("g", -1, "", &[("u", 0, 7)]).with_retention_time_ms(3_000);
    w.send(1, 5, &ignored);
    assert_eq!(commit_answer(&mut w, 1), Some(vec![0]));
    pass(&mut w, 5_000);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), -1, "3 s retention");
    assert_eq!(
        fetch_offset(&mut w, 1, "g", "u", 0),
        7,
        "v5 has no retention time"
    );
    pass(&mut w, RETENTION_MS);
    assert_eq!(
        fetch_offset(&mut w, 1, "g", "u", 0),
        -1,
        "the broker's retention"
    );
    assert_eq!(
        fetch_offset(&mut w, 1, "g", "t", 1),
        6,
        "its own, longer retention"
    );
    w.restart(false);
    pass(&mut w, 2 * RETENTION_MS);
    assert_eq!(
        fetch_offset(&mut w, 1, "g", "t", 1),
        -1,
        "the retention time is stored with the offset"
    );
}

/// A commit of an expired offset is not lost to the expiry: one in flight
/// when the check runs keeps the key out of it, and one made while the
/// deletion is in flight is stored after it.
#[test]
fn a_commit_racing_the_expiry_is_kept() {
    let mut w = expiring_world();
    let offsets = [("t", 0, 5), ("t", 1, 6)];
    assert_eq!(commit(&mut w, 1, "g", -1, "", &offsets), vec![0, 0]);
    pass(&mut w, RETENTION_MS - CHECK_MS);
    w.auto_io = false;
    w.send(1, 8, &commit_req("g", -1, "", &[("t", 0, 50)]));
    pass(&mut w, 2 * CHECK_MS);
    assert_eq!(w.pending_meta.len(), 2, "the commit and the expiry of t-1");
    w.send(2, 8, &commit_req("g", -1, "", &[("t", 1, 60)]));
    w.complete_io();
    assert_eq!(commit_answer(&mut w, 1), Some(vec![0]));
    assert_eq!(commit_answer(&mut w, 2), Some(vec![0]));
    w.auto_io = true;
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), 50);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 1), 60);
    assert_eq!(offset_keys(&w), vec!["offset/g/t/0", "offset/g/t/1"]);
    w.restart(false);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 1), 60);
}

/// As Kafka's cleanupExpiredOffsets: an offset an open transaction staged
/// for the partition is not expired under it.
#[test]
fn an_offset_staged_by_an_open_transaction_stays() {
    let mut w = expiring_world();
    assert_eq!(
        commit(&mut w, 1, "g", -1, "", &[("t", 0, 5), ("t", 1, 6)]),
        vec![0, 0]
    );
    let (_, pid, epoch) = init_txn(&mut w, 2, "tx", 10 * RETENTION_MS as i32);
    assert_eq!(add_offsets(&mut w, 2, "tx", pid, epoch, "g"), 0);
    assert_eq!(
        txn_offset_commit(&mut w, 2, "tx", pid, epoch, "g", "t", 0, 9),
        0
    );
    pass(&mut w, RETENTION_MS + 2 * CHECK_MS);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), 5, "staged: kept");
    assert_eq!(
        fetch_offset(&mut w, 1, "g", "t", 1),
        -1,
        "not staged: expired"
    );
    assert_eq!(end_txn(&mut w, 2, "tx", pid, epoch, true), Some(0));
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), 9);
    pass(&mut w, RETENTION_MS - CHECK_MS);
    assert_eq!(
        fetch_offset(&mut w, 1, "g", "t", 0),
        9,
        "the commit's offset is new"
    );
    pass(&mut w, 2 * CHECK_MS);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), -1);
}

#[test]
fn a_failed_expiry_write_leaves_the_offsets_to_the_next_check() {
    let mut w = expiring_world();
    assert_eq!(commit(&mut w, 1, "g", -1, "", &[("t", 0, 5)]), vec![0]);
    pass(&mut w, RETENTION_MS - CHECK_MS);
    w.fail_next_meta = true;
    pass(&mut w, CHECK_MS);
    assert!(
        !w.fail_next_meta,
        "the expiry's write was the one that failed"
    );
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), 5);
    assert_eq!(offset_keys(&w), vec!["offset/g/t/0"]);
    pass(&mut w, CHECK_MS);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), -1);
    assert!(offset_keys(&w).is_empty());
}

#[test]
fn the_retention_settings_are_checked_and_described() {
    let mut config = BrokerConfig::default();
    assert!(config.set("offsets.retention.minutes", "0").is_err());
    assert!(config
        .set("offsets.retention.check.interval.ms", "0")
        .is_err());
    let described = |c: &BrokerConfig, key: &str| {
        c.describe()
            .into_iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    };
    assert_eq!(
        described(&config, "offsets.retention.minutes").as_deref(),
        Some("10080")
    );
    assert_eq!(
        described(&config, "offsets.retention.check.interval.ms").as_deref(),
        Some("600000")
    );
    config.set("offsets.retention.minutes", "90").unwrap();
    assert_eq!(config.offsets_retention_ms, 90 * 60_000);
    assert_eq!(
        described(&config, "offsets.retention.minutes").as_deref(),
        Some("90")
    );
}
