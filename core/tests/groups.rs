//! Consumer groups (classic protocol) and committed offsets, driven by hand:
//! joins, rebalances, timeouts on the test clock, static members, errors,
//! offsets stored in meta.db and surviving a restart.

mod support;

use bytes::Bytes;
use doze_core::BrokerConfig;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use support::groups::*;
use support::requests::{create_topic, name};
use support::*;

#[test]
fn single_consumer_join_completes_at_once_with_zero_initial_delay() {
    let mut w = world(0);
    let id = join_new(&mut w, 1, "g");
    // No clock movement: the zero-delay timer fires within the same input.
    let r = join_answer(&mut w, 1).expect("join answered without waiting");
    assert_eq!(r.error_code, 0);
    assert_eq!(r.generation_id, 1);
    assert_eq!(r.leader.as_str(), id);
    assert_eq!(r.protocol_name.as_ref().map(|p| p.as_str()), Some("range"));
    assert_eq!(r.members.len(), 1);
    assert_eq!(r.members[0].metadata, subscription(&["t"]));
    sync(&mut w, 1, "g", 1, &id, &[(&id, b"assigned")]);
    let r = sync_answer(&mut w, 1).expect("leader's sync answered at once");
    assert_eq!(r.error_code, 0);
    assert_eq!(&r.assignment[..], b"assigned");
    assert_eq!(describe(&mut w, 9, "g").group_state.as_str(), "Stable");
    assert_eq!(heartbeat(&mut w, 1, "g", 1, &id, None), 0);
}

#[test]
fn initial_delay_holds_the_first_join_and_extends_while_members_arrive() {
    let mut w = world(3000);
    let a = join_new(&mut w, 1, "g");
    assert!(
        join_answer(&mut w, 1).is_none(),
        "the first join waits for the initial delay"
    );
    w.advance(2000);
    let b = join_new(&mut w, 2, "g");
    w.advance(1000); // the first delay ends, but B joined during it: wait again
    assert!(join_answer(&mut w, 1).is_none());
    w.advance(3000);
    let ra = join_answer(&mut w, 1).expect("A answered after the extended delay");
    let rb = join_answer(&mut w, 2).expect("B answered with A");
    assert_eq!((ra.generation_id, rb.generation_id), (1, 1));
    assert_eq!(ra.leader.as_str(), a, "the first member leads");
    assert_eq!(ra.members.len(), 2);
    assert_eq!(rb.member_id.as_str(), b);
}

#[test]
fn rebalance_with_three_members_and_one_session_timing_out() {
    let mut w = world(100);
    let ids: Vec<String> = (1..=3).map(|c| join_new(&mut w, c, "g")).collect();
    // Members 2 and 3 joined during the initial delay, so it runs twice.
    w.advance(100);
    assert!(join_answer(&mut w, 1).is_none());
    w.advance(100);
    let answers: Vec<JoinGroupResponse> = (1..=3)
        .map(|c| join_answer(&mut w, c).expect("joined"))
        .collect();
    let leader_conn = (1..=3)
        .find(|c| answers[*c as usize - 1].leader == answers[*c as usize - 1].member_id)
        .unwrap();
    assert_eq!(answers[leader_conn as usize - 1].members.len(), 3);
    assert!(answers.iter().all(|r| r.generation_id == 1));
    // Followers' SyncGroup waits for the leader's assignment.
    for c in (1..=3).filter(|c| *c != leader_conn) {
        sync(&mut w, c, "g", 1, &ids[c as usize - 1], &[]);
        assert!(
            sync_answer(&mut w, c).is_none(),
            "a follower waits for the leader"
        );
    }
    let plan: Vec<(&str, &[u8])> = vec![(&ids[0], b"p0"), (&ids[1], b"p1"), (&ids[2], b"p2")];
    sync(
        &mut w,
        leader_conn,
        "g",
        1,
        &ids[leader_conn as usize - 1],
        &plan,
    );
    for c in 1..=3u64 {
        let r = sync_answer(&mut w, c).expect("everyone gets an assignment");
        assert_eq!(r.assignment, Bytes::from(format!("p{}", c - 1)));
    }
    // Members 1 and 2 keep heartbeating; member 3 goes silent.
    for _ in 0..2 {
        w.advance(4000);
        assert_eq!(heartbeat(&mut w, 1, "g", 1, &ids[0], None), 0);
        assert_eq!(heartbeat(&mut w, 2, "g", 1, &ids[1], None), 0);
    }
    w.advance(1999);
    assert_eq!(
        describe(&mut w, 9, "g").group_state.as_str(),
        "Stable",
        "member 3 has 1 ms left"
    );
    w.advance(1);
    // Member 3's session (10 s) has ended: the group rebalances without it.
    assert_eq!(
        heartbeat(&mut w, 1, "g", 1, &ids[0], None),
        code(ResponseError::RebalanceInProgress)
    );
    assert_eq!(
        heartbeat(&mut w, 3, "g", 1, &ids[2], None),
        code(ResponseError::UnknownMemberId)
    );
    join(&mut w, 1, 9, "g", &ids[0], None);
    assert!(
        join_answer(&mut w, 1).is_none(),
        "waits for member 2 to rejoin"
    );
    join(&mut w, 2, 9, "g", &ids[1], None);
    let r1 = join_answer(&mut w, 1).expect("all known members rejoined");
    let r2 = join_answer(&mut w, 2).expect("all known members rejoined");
    assert_eq!((r1.generation_id, r2.generation_id), (2, 2));
    let leader = if r1.leader == r1.member_id { &r1 } else { &r2 };
    assert_eq!(leader.members.len(), 2);
    assert_eq!(describe(&mut w, 9, "g").members.len(), 2);
}

#[test]
fn members_that_do_not_rejoin_are_removed_at_the_rebalance_timeout() {
    let mut w = world(0);
    let a = join_new(&mut w, 1, "g");
    let ra = join_answer(&mut w, 1).unwrap();
    sync(&mut w, 1, "g", ra.generation_id, &a, &[]);
    sync_answer(&mut w, 1).unwrap();
    // B joins: A must rejoin within the rebalance timeout.
    let b = join_new(&mut w, 2, "g");
    assert!(join_answer(&mut w, 2).is_none());
    assert_eq!(
        heartbeat(&mut w, 1, "g", 1, &a, None),
        code(ResponseError::RebalanceInProgress)
    );
    // A heartbeats but never rejoins; its session stays alive, yet the
    // rebalance timeout ends the join phase without it.
    for _ in 0..4 {
        w.advance(5000);
        let _ = heartbeat(&mut w, 1, "g", 1, &a, None);
    }
    let rb = join_answer(&mut w, 2).expect("the join phase ended at the rebalance timeout");
    assert_eq!(rb.generation_id, 2);
    assert_eq!(rb.leader.as_str(), b, "B leads once A is gone");
    assert_eq!(rb.members.len(), 1);
    assert_eq!(
        heartbeat(&mut w, 1, "g", 2, &a, None),
        code(ResponseError::UnknownMemberId)
    );
}

#[test]
fn static_member_rejoins_without_a_rebalance() {
    let mut w = world(0);
    // Static members (v5+) join with their instance id directly.
    join(&mut w, 1, 7, "g", "", Some("inst-a"));
    let ra = join_answer(&mut w, 1).unwrap();
    assert_eq!(ra.error_code, 0);
    let a = ra.member_id.to_string();
    assert!(
        a.starts_with("inst-a-"),
        "static member ids start with the instance id"
    );
    sync(&mut w, 1, "g", 1, &a, &[(&a, b"all")]);
    sync_answer(&mut w, 1).unwrap();
    join(&mut w, 2, 7, "g", "", Some("inst-b"));
    join(&mut w, 1, 7, "g", &a, Some("inst-a"));
    let rb = join_answer(&mut w, 2).unwrap();
    let ra = join_answer(&mut w, 1).unwrap();
    assert_eq!((ra.generation_id, rb.generation_id), (2, 2));
    let b = rb.member_id.to_string();
    sync(&mut w, 2, "g", 2, &b, &[]);
    sync(&mut w, 1, "g", 2, &a, &[(&a, b"half-a"), (&b, b"half-b")]);
    assert_eq!(&sync_answer(&mut w, 2).unwrap().assignment[..], b"half-b");
    sync_answer(&mut w, 1).unwrap();

    // B restarts: same instance id, no member id, same protocols.
    join(&mut w, 3, 7, "g", "", Some("inst-b"));
    let rb2 = join_answer(&mut w, 3).expect("a known static member is answered at once");
    assert_eq!(rb2.error_code, 0);
    assert_eq!(rb2.generation_id, 2, "no new generation");
    assert_ne!(
        rb2.member_id.as_str(),
        b,
        "a new member id replaces the old"
    );
    assert_eq!(rb2.leader.as_str(), a);
    let b2 = rb2.member_id.to_string();
    assert_eq!(
        heartbeat(&mut w, 1, "g", 2, &a, Some("inst-a")),
        0,
        "no rebalance for the others"
    );
    sync(&mut w, 3, "g", 2, &b2, &[]);
    assert_eq!(
        &sync_answer(&mut w, 3).unwrap().assignment[..],
        b"half-b",
        "the assignment is kept"
    );
    // The old incarnation is fenced.
    assert_eq!(
        heartbeat(&mut w, 2, "g", 2, &b, Some("inst-b")),
        code(ResponseError::FencedInstanceId)
    );
    assert_eq!(describe(&mut w, 9, "g").group_state.as_str(), "Stable");
}

#[test]
fn generation_and_member_errors() {
    let mut w = world(0);
    create_topic(&mut w, "t", 1);
    let a = join_new(&mut w, 1, "g");
    let r = join_answer(&mut w, 1).unwrap();
    assert_eq!(r.generation_id, 1);
    sync(&mut w, 1, "g", 1, &a, &[]);
    sync_answer(&mut w, 1).unwrap();

    assert_eq!(
        heartbeat(&mut w, 1, "g", 1, "nobody", None),
        code(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        heartbeat(&mut w, 1, "g", 7, &a, None),
        code(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        heartbeat(&mut w, 1, "nope", 1, &a, None),
        code(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        heartbeat(&mut w, 1, "", 1, &a, None),
        code(ResponseError::InvalidGroupId)
    );
    assert_eq!(
        commit(&mut w, 1, "g", 0, &a, &[("t", 0, 5)]),
        vec![code(ResponseError::IllegalGeneration)]
    );
    assert_eq!(
        commit(&mut w, 1, "g", 1, "nobody", &[("t", 0, 5)]),
        vec![code(ResponseError::UnknownMemberId)]
    );
    // Outside group management (-1) only an Empty group takes commits.
    assert_eq!(
        commit(&mut w, 1, "g", -1, "", &[("t", 0, 5)]),
        vec![code(ResponseError::UnknownMemberId)]
    );
    sync(&mut w, 1, "g", 3, &a, &[]);
    assert_eq!(
        sync_answer(&mut w, 1).unwrap().error_code,
        code(ResponseError::IllegalGeneration)
    );

    // A member id the group never gave, on a group that does not exist.
    join(&mut w, 2, 9, "other", "made-up", None);
    assert_eq!(
        join_answer(&mut w, 2).unwrap().error_code,
        code(ResponseError::UnknownMemberId)
    );
    // Session timeout outside group.min/max.session.timeout.ms.
    w.send(
        2,
        9,
        &join_req("g", "", None, subscription(&["t"])).with_session_timeout_ms(1000),
    );
    assert_eq!(
        join_answer(&mut w, 2).unwrap().error_code,
        code(ResponseError::InvalidSessionTimeout)
    );
    // Another protocol type, or no protocol in common.
    w.send(
        2,
        9,
        &join_req("g", "", None, Bytes::new()).with_protocol_type(s("connect")),
    );
    assert_eq!(
        join_answer(&mut w, 2).unwrap().error_code,
        code(ResponseError::InconsistentGroupProtocol)
    );
    let other = JoinGroupRequestProtocol::default().with_name(s("roundrobin"));
    w.send(
        2,
        9,
        &join_req("g", "", None, Bytes::new()).with_protocols(vec![other]),
    );
    assert_eq!(
        join_answer(&mut w, 2).unwrap().error_code,
        code(ResponseError::InconsistentGroupProtocol)
    );

    // A rebalance in progress: heartbeats and syncs say so.
    let _b = join_new(&mut w, 3, "g");
    assert_eq!(
        heartbeat(&mut w, 1, "g", 1, &a, None),
        code(ResponseError::RebalanceInProgress)
    );
    sync(&mut w, 1, "g", 1, &a, &[]);
    assert_eq!(
        sync_answer(&mut w, 1).unwrap().error_code,
        code(ResponseError::RebalanceInProgress)
    );
}

#[test]
fn offsets_committed_then_fetched_and_surviving_restart() {
    let mut w = world(0);
    create_topic(&mut w, "t", 2);
    create_topic(&mut w, "u", 1);
    let a = join_new(&mut w, 1, "g");
    join_answer(&mut w, 1).unwrap();
    sync(&mut w, 1, "g", 1, &a, &[]);
    sync_answer(&mut w, 1).unwrap();
    assert_eq!(
        commit(
            &mut w,
            1,
            "g",
            1,
            &a,
            &[("t", 0, 10), ("t", 1, 20), ("u", 0, 30)]
        ),
        vec![0, 0, 0]
    );
    assert_eq!(
        commit(&mut w, 1, "g", 1, &a, &[("missing", 0, 1)]),
        vec![code(ResponseError::UnknownTopicOrPartition)]
    );
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 1), 20);
    assert_eq!(fetch_offset(&mut w, 1, "g", "u", 0), 30);
    assert_eq!(
        fetch_offset(&mut w, 1, "nobody", "t", 0),
        -1,
        "no commit: -1"
    );

    // v7, one group, every topic (null list).
    w.send(
        1,
        7,
        &OffsetFetchRequest::default()
            .with_group_id(gid("g"))
            .with_topics(None)
            .with_require_stable(true),
    );
    let Some((_, ResponseKind::OffsetFetch(r))) = w.recv(1) else {
        panic!("no OffsetFetch answer")
    };
    let all: Vec<(String, i32, i64)> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.0.to_string(), p.partition_index, p.committed_offset))
        })
        .collect();
    assert_eq!(
        all,
        vec![
            ("t".into(), 0, 10),
            ("t".into(), 1, 20),
            ("u".into(), 0, 30)
        ]
    );

    // v8+: many groups in one request.
    let one = |g: &str| {
        OffsetFetchRequestGroup::default()
            .with_group_id(gid(g))
            .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                .with_name(name("t"))
                .with_partition_indexes(vec![0])]))
    };
    w.send(
        1,
        9,
        &OffsetFetchRequest::default().with_groups(vec![one("g"), one("nobody")]),
    );
    let Some((_, ResponseKind::OffsetFetch(r))) = w.recv(1) else {
        panic!("no OffsetFetch answer")
    };
    let offsets: Vec<i64> = r
        .groups
        .iter()
        .map(|g| g.topics[0].partitions[0].committed_offset)
        .collect();
    assert_eq!(offsets, vec![10, -1]);

    assert_eq!(
        offset_keys(&w),
        vec!["offset/g/t/0", "offset/g/t/1", "offset/g/u/0"]
    );
    w.restart(false);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), 10);
    assert_eq!(fetch_offset(&mut w, 1, "g", "u", 0), 30);
    // Members are not kept across a restart; the group is Empty with its offsets.
    assert_eq!(
        heartbeat(&mut w, 1, "g", 1, &a, None),
        code(ResponseError::UnknownMemberId)
    );
    let d = describe(&mut w, 9, "g");
    assert_eq!(d.group_state.as_str(), "Empty");
    // A simple (unmanaged) commit works on the Empty group.
    assert_eq!(commit(&mut w, 1, "g", -1, "", &[("t", 0, 11)]), vec![0]);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), 11);
}

#[test]
fn a_commit_is_answered_only_once_stored() {
    let mut w = world(0);
    create_topic(&mut w, "t", 1);
    w.auto_io = false;
    w.send(1, 8, &commit_req("g", -1, "", &[("t", 0, 42)]));
    assert!(
        commit_answer(&mut w, 1).is_none(),
        "not answered before meta.db stored it"
    );
    assert_eq!(w.pending_meta.len(), 1);
    assert_eq!(
        fetch_offset(&mut w, 2, "g", "t", 0),
        -1,
        "not visible before it is stored"
    );
    w.complete_io();
    assert_eq!(commit_answer(&mut w, 1), Some(vec![0]));
    assert_eq!(fetch_offset(&mut w, 2, "g", "t", 0), 42);
    assert_eq!(offset_keys(&w), vec!["offset/g/t/0"]);
}

#[test]
fn a_failed_commit_write_changes_nothing() {
    let mut w = world(0);
    create_topic(&mut w, "t", 1);
    assert_eq!(commit(&mut w, 1, "g", -1, "", &[("t", 0, 7)]), vec![0]);
    let before = w.meta.clone();
    w.fail_next_meta = true;
    assert_eq!(
        commit(&mut w, 1, "g", -1, "", &[("t", 0, 8)]),
        vec![code(ResponseError::CoordinatorNotAvailable)]
    );
    assert_eq!(w.meta, before, "meta.db untouched");
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), 7, "memory untouched");
    w.restart(false);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), 7);
}

#[test]
fn delete_groups_removes_empty_groups_and_their_offsets() {
    let mut w = world(0);
    create_topic(&mut w, "t", 1);
    let a = join_new(&mut w, 1, "busy");
    join_answer(&mut w, 1).unwrap();
    assert_eq!(commit(&mut w, 2, "idle", -1, "", &[("t", 0, 3)]), vec![0]);
    w.auto_io = false;
    let names = vec![gid("idle"), gid("busy"), gid("ghost"), gid("")];
    w.send(
        2,
        2,
        &DeleteGroupsRequest::default().with_groups_names(names),
    );
    assert!(
        w.recv(2).is_none(),
        "answered once meta.db deleted the offsets"
    );
    // Meanwhile the group answers as Kafka's Dead group.
    w.send(3, 8, &commit_req("idle", -1, "", &[("t", 0, 4)]));
    assert_eq!(
        commit_answer(&mut w, 3),
        Some(vec![code(ResponseError::CoordinatorNotAvailable)])
    );
    w.complete_io();
    let Some((_, ResponseKind::DeleteGroups(r))) = w.recv(2) else {
        panic!("no DeleteGroups answer")
    };
    let codes: Vec<i16> = r.results.iter().map(|r| r.error_code).collect();
    assert_eq!(
        codes,
        vec![
            0,
            code(ResponseError::NonEmptyGroup),
            code(ResponseError::GroupIdNotFound),
            code(ResponseError::InvalidGroupId)
        ]
    );
    assert!(offset_keys(&w).is_empty());
    assert_eq!(fetch_offset(&mut w, 2, "idle", "t", 0), -1);
    assert_eq!(describe(&mut w, 9, "idle").group_state.as_str(), "Dead");
    w.auto_io = true;
    // The busy group's member leaves; then it can go.
    let leave = LeaveGroupRequest::default()
        .with_group_id(gid("busy"))
        .with_members(vec![
            MemberIdentity::default().with_member_id(s(&a)),
            MemberIdentity::default().with_member_id(s("x")),
        ]);
    w.send(1, 5, &leave);
    let Some((_, ResponseKind::LeaveGroup(r))) = w.recv(1) else {
        panic!("no LeaveGroup answer")
    };
    let codes: Vec<i16> = r.members.iter().map(|m| m.error_code).collect();
    assert_eq!(codes, vec![0, code(ResponseError::UnknownMemberId)]);
    assert_eq!(describe(&mut w, 9, "busy").group_state.as_str(), "Empty");
    w.send(
        2,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![gid("busy")]),
    );
    let Some((_, ResponseKind::DeleteGroups(r))) = w.recv(2) else {
        panic!("no DeleteGroups answer")
    };
    assert_eq!(r.results[0].error_code, 0);
    w.restart(false);
    assert_eq!(
        describe(&mut w, 9, "idle").group_state.as_str(),
        "Dead",
        "gone for good"
    );
}

#[test]
fn a_failed_delete_keeps_the_group() {
    let mut w = world(0);
    create_topic(&mut w, "t", 1);
    assert_eq!(commit(&mut w, 1, "g", -1, "", &[("t", 0, 3)]), vec![0]);
    w.fail_next_meta = true;
    w.send(
        2,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![gid("g")]),
    );
    let Some((_, ResponseKind::DeleteGroups(r))) = w.recv(2) else {
        panic!("no DeleteGroups answer")
    };
    assert_eq!(
        r.results[0].error_code,
        code(ResponseError::CoordinatorNotAvailable)
    );
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), 3);
    assert_eq!(offset_keys(&w), vec!["offset/g/t/0"]);
}

#[test]
fn list_and_describe_groups() {
    let mut w = world(0);
    create_topic(&mut w, "t", 1);
    let a = join_new(&mut w, 1, "live");
    join_answer(&mut w, 1).unwrap();
    sync(&mut w, 1, "live", 1, &a, &[(&a, b"x")]);
    sync_answer(&mut w, 1).unwrap();
    assert_eq!(
        commit(&mut w, 2, "offsets-only", -1, "", &[("t", 0, 1)]),
        vec![0]
    );

    w.send(9, 4, &ListGroupsRequest::default());
    let Some((_, ResponseKind::ListGroups(r))) = w.recv(9) else {
        panic!("no ListGroups answer")
    };
    let listed: Vec<(String, String, String)> = r
        .groups
        .iter()
        .map(|g| {
            (
                g.group_id.0.to_string(),
                g.protocol_type.to_string(),
                g.group_state.to_string(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            ("live".into(), "consumer".into(), "Stable".into()),
            ("offsets-only".into(), "".into(), "Empty".into())
        ]
    );
    w.send(
        9,
        5,
        &ListGroupsRequest::default()
            .with_states_filter(vec![s("empty")])
            .with_types_filter(vec![s("Classic")]),
    );
    let Some((_, ResponseKind::ListGroups(r))) = w.recv(9) else {
        panic!("no ListGroups answer")
    };
    assert_eq!(r.groups.len(), 1);
    assert_eq!(r.groups[0].group_type.as_str(), "classic");

    let d = describe(&mut w, 9, "live");
    assert_eq!(
        (
            d.error_code,
            d.group_state.as_str(),
            d.protocol_type.as_str()
        ),
        (0, "Stable", "consumer")
    );
    assert_eq!(d.protocol_data.as_str(), "range");
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].member_id.as_str(), a);
    assert_eq!(d.members[0].client_id.as_str(), "core-test");
    assert_eq!(&d.members[0].member_assignment[..], b"x");
    assert_eq!(d.members[0].member_metadata, subscription(&["t"]));
    w.send(
        9,
        6,
        &DescribeGroupsRequest::default().with_groups(vec![gid("nope")]),
    );
    let Some((_, ResponseKind::DescribeGroups(r))) = w.recv(9) else {
        panic!("no DescribeGroups answer")
    };
    assert_eq!(
        r.groups[0].error_code,
        code(ResponseError::GroupIdNotFound),
        "v6 says it is not found"
    );
}

#[test]
fn offset_delete_refuses_subscribed_topics() {
    let mut w = world(0);
    create_topic(&mut w, "t", 1);
    create_topic(&mut w, "old", 1);
    let a = join_new(&mut w, 1, "g");
    join_answer(&mut w, 1).unwrap();
    sync(&mut w, 1, "g", 1, &a, &[]);
    sync_answer(&mut w, 1).unwrap();
    assert_eq!(
        commit(&mut w, 1, "g", 1, &a, &[("t", 0, 5), ("old", 0, 6)]),
        vec![0, 0]
    );
    let topic = |n: &str| {
        OffsetDeleteRequestTopic::default()
            .with_name(name(n))
            .with_partitions(vec![
                OffsetDeleteRequestPartition::default().with_partition_index(0)
            ])
    };
    w.send(
        1,
        0,
        &OffsetDeleteRequest::default()
            .with_group_id(gid("g"))
            .with_topics(vec![topic("t"), topic("old")]),
    );
    let Some((_, ResponseKind::OffsetDelete(r))) = w.recv(1) else {
        panic!("no OffsetDelete answer")
    };
    assert_eq!(r.error_code, 0);
    let codes: Vec<i16> = r
        .topics
        .iter()
        .map(|t| t.partitions[0].error_code)
        .collect();
    assert_eq!(codes, vec![code(ResponseError::GroupSubscribedToTopic), 0]);
    assert_eq!(fetch_offset(&mut w, 1, "g", "t", 0), 5);
    assert_eq!(fetch_offset(&mut w, 1, "g", "old", 0), -1);
    assert_eq!(offset_keys(&w), vec!["offset/g/t/0"]);
    w.send(
        1,
        0,
        &OffsetDeleteRequest::default()
            .with_group_id(gid("ghost"))
            .with_topics(vec![topic("t")]),
    );
    let Some((_, ResponseKind::OffsetDelete(r))) = w.recv(1) else {
        panic!("no OffsetDelete answer")
    };
    assert_eq!(r.error_code, code(ResponseError::GroupIdNotFound));
}

#[test]
fn find_coordinator_answers_this_node_for_groups_and_transactions() {
    let mut w = world(0);
    w.send(1, 0, &FindCoordinatorRequest::default().with_key(s("g")));
    let Some((_, ResponseKind::FindCoordinator(r))) = w.recv(1) else {
        panic!("no answer")
    };
    assert_eq!((r.error_code, r.node_id.0, r.port), (0, 1, 9092));
    w.send(
        1,
        3,
        &FindCoordinatorRequest::default()
            .with_key(s("txn"))
            .with_key_type(1),
    );
    let Some((_, ResponseKind::FindCoordinator(r))) = w.recv(1) else {
        panic!("no answer")
    };
    assert_eq!((r.error_code, r.host.as_str()), (0, "127.0.0.1"));
    w.send(
        1,
        4,
        &FindCoordinatorRequest::default().with_coordinator_keys(vec![s("a"), s("b")]),
    );
    let Some((_, ResponseKind::FindCoordinator(r))) = w.recv(1) else {
        panic!("no answer")
    };
    let keys: Vec<(&str, i16, i32)> = r
        .coordinators
        .iter()
        .map(|c| (c.key.as_str(), c.error_code, c.node_id.0))
        .collect();
    assert_eq!(keys, vec![("a", 0, 1), ("b", 0, 1)]);
    w.send(
        1,
        4,
        &FindCoordinatorRequest::default()
            .with_key_type(2)
            .with_coordinator_keys(vec![s("x")]),
    );
    let Some((_, ResponseKind::FindCoordinator(r))) = w.recv(1) else {
        panic!("no answer")
    };
    assert_eq!(
        r.coordinators[0].error_code,
        code(ResponseError::InvalidRequest)
    );
}

#[test]
fn a_pending_member_that_never_joins_expires() {
    let mut w = world(0);
    join(&mut w, 1, 9, "g", "", None);
    let r = join_answer(&mut w, 1).unwrap();
    assert_eq!(r.error_code, code(ResponseError::MemberIdRequired));
    w.advance(SESSION_MS as i64 + 1);
    // The id was forgotten with its session; joining with it now is refused.
    join(&mut w, 1, 9, "g", r.member_id.as_str(), None);
    assert_eq!(
        join_answer(&mut w, 1).unwrap().error_code,
        code(ResponseError::UnknownMemberId)
    );
}

#[test]
fn old_join_versions_get_a_member_id_at_once() {
    let mut w = world(0);
    join(&mut w, 1, 3, "g", "", None);
    let r = join_answer(&mut w, 1).expect("v3 joins without MEMBER_ID_REQUIRED");
    assert_eq!(r.error_code, 0);
    assert_eq!(r.generation_id, 1);
    assert_eq!(r.leader, r.member_id);
    // v0 has no rebalance timeout; the session timeout stands in.
    w.send(2, 0, &join_req("g0", "", None, subscription(&["t"])));
    let r = join_answer(&mut w, 2).expect("v0 join answered");
    assert_eq!((r.error_code, r.generation_id), (0, 1));
}

/// ClassicGroup.validateOffsetCommit skips two checks for transactional
/// commits: one from outside the membership of a non-empty group is taken
/// (a plain OffsetCommit gets UNKNOWN_MEMBER_ID), as is one while the group
/// completes a rebalance.
#[test]
fn a_transactional_commit_is_taken_from_outside_a_non_empty_group() {
    use support::txn::{add_offsets, init_txn, txn_offset_commit};
    let mut w = world(0);
    support::requests::create_topic(&mut w, "t", 1);
    let member = join_new(&mut w, 1, "g");
    let joined = join_answer(&mut w, 1).expect("a lone member's join completes");
    assert_eq!(joined.error_code, 0);
    assert_eq!(joined.member_id.as_str(), member);
    // The group is CompletingRebalance (no SyncGroup yet) and non-empty.
    let (_, pid, epoch) = init_txn(&mut w, 2, "tx", 60_000);
    assert_eq!(add_offsets(&mut w, 2, "tx", pid, epoch, "g"), 0);
    assert_eq!(
        txn_offset_commit(&mut w, 2, "tx", pid, epoch, "g", "t", 0, 4),
        0
    );
}

/// As Kafka's OffsetMetadataManager.onPartitionsDeleted: a group that read
/// a deleted topic must not resume a topic created again under its name at
/// the old offsets (it would skip the new topic's first records).
#[test]
fn deleting_a_topic_deletes_every_groups_offsets_of_it() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 2);
    create_topic(&mut w, "u", 1);
    let offsets = [("t", 0, 5), ("t", 1, 7), ("u", 0, 3)];
    assert_eq!(commit(&mut w, 1, "g1", -1, "", &offsets), vec![0, 0, 0]);
    assert_eq!(commit(&mut w, 1, "g2", -1, "", &[("t", 0, 9)]), vec![0]);
    delete_topic(&mut w, "t");
    let check = |w: &mut World, when: &str| {
        assert_eq!(fetch_offset(w, 1, "g1", "t", 0), -1, "{when}");
        assert_eq!(fetch_offset(w, 1, "g1", "t", 1), -1, "{when}");
        assert_eq!(fetch_offset(w, 1, "g2", "t", 0), -1, "{when}");
        assert_eq!(
            fetch_offset(w, 1, "g1", "u", 0),
            3,
            "{when}: another topic's stay"
        );
    };
    check(&mut w, "at once");
    w.restart(true);
    check(&mut w, "after a power cut");
    create_topic(&mut w, "t", 2);
    check(&mut w, "with the topic created again");
}
