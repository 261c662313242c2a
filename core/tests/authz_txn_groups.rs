//! The authorizer on the transactional and group APIs, as Kafka's KafkaApis
//! checks them: WRITE on a transactional id, IDEMPOTENT_WRITE (or WRITE on
//! some topic) for an idempotent producer, WRITE / READ on topics, READ /
//! DESCRIBE / DELETE on groups; DENY over ALLOW, PREFIXED patterns, and the
//! listings that show only what the principal may DESCRIBE.
//!
//! Alice (connection 1) and Bob (2) are TLS principals; the admin (99, the
//! connection the support helpers create topics on) is a super user who
//! creates the ACLs.

mod support;

use doze_core::security::acl::{pattern, permission, resource, Op};
use doze_core::BrokerConfig;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use support::authz::*;
use support::requests::{create_topic, name};
use support::txn::*;
use support::*;

const ALICE: u64 = 1;
const BOB: u64 = 2;
const ADMIN: u64 = 99;

const NONE: i16 = 0;
const TOPIC_DENIED: i16 = ResponseError::TopicAuthorizationFailed.code();
const GROUP_DENIED: i16 = ResponseError::GroupAuthorizationFailed.code();
const CLUSTER_DENIED: i16 = ResponseError::ClusterAuthorizationFailed.code();
const TXN_ID_DENIED: i16 = ResponseError::TransactionalIdAuthorizationFailed.code();
const NOT_ATTEMPTED: i16 = ResponseError::OperationNotAttempted.code();

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn gid(v: &str) -> GroupId {
    GroupId(s(v))
}

/// A broker with the authorizer on (no ACL: denied), topics "a" and "b",
/// and Alice, Bob and the admin connected.
fn world() -> World {
    let mut w = World::new(BrokerConfig {
        authorizer: authorizer_on(),
        group_initial_rebalance_delay_ms: 0,
        ..Default::default()
    });
    connect_as(&mut w, ADMIN, "User:admin");
    connect_as(&mut w, ALICE, "User:alice");
    connect_as(&mut w, BOB, "User:bob");
    create_topic(&mut w, "a", 1);
    create_topic(&mut w, "b", 1);
    w
}

/// The admin creates one ACL (any host).
fn acl(w: &mut World, principal: &str, rt: i8, name: &str, pt: i8, op: Op, perm: i8) {
    let acl = Acl {
        principal,
        resource_type: rt,
        name,
        pattern_type: pt,
        op,
        permission: perm,
    };
    create_acl(w, ADMIN, acl);
}

/// Alice may do `op` on the resource named `name` exactly.
fn allow_alice(w: &mut World, rt: i8, name: &str, op: Op) {
    acl(
        w,
        "User:alice",
        rt,
        name,
        pattern::LITERAL,
        op,
        permission::ALLOW,
    );
}

/// InitProducerId without a transactional id: the error code.
fn init_idempotent(w: &mut World, conn: u64) -> i16 {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(-1)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    w.send(conn, 4, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::InitProducerId(r))) => r.error_code,
        other => panic!("expected an InitProducerId answer, got {other:?}"),
    }
}

/// An open transaction of Alice's on `id`: (producer id, epoch).
fn alice_txn(w: &mut World, id: &str) -> (i64, i16) {
    let (error, pid, epoch) = init_txn(w, ALICE, id, 60_000);
    assert_eq!(error, NONE);
    (pid, epoch)
}

fn find_coordinator(
    w: &mut World,
    conn: u64,
    version: i16,
    key_type: i8,
    keys: &[&str],
) -> FindCoordinatorResponse {
    let mut req = FindCoordinatorRequest::default().with_key_type(key_type);
    if version >= 4 {
        req.coordinator_keys = keys.iter().map(|k| s(k)).collect();
    } else {
        req.key = s(keys[0]);
    }
    w.send(conn, version, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::FindCoordinator(r))) => r,
        other => panic!("expected a FindCoordinator answer, got {other:?}"),
    }
}

/// OffsetCommit v8 from outside group management: each partition's error.
fn commit(w: &mut World, conn: u64, group: &str, offsets: &[(&str, i64)]) -> Vec<i16> {
    let topics = offsets
        .iter()
        .map(|(topic, offset)| {
            OffsetCommitRequestTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(*offset)
                    .with_committed_leader_epoch(-1)])
        })
        .collect();
    let req = OffsetCommitRequest::default()
        .with_group_id(gid(group))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(topics);
    w.send(conn, 8, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::OffsetCommit(r))) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        other => panic!("expected an OffsetCommit answer, got {other:?}"),
    }
}

/// OffsetFetch v8 of one group (`None` topics: all): the group's error and
/// (topic, error) per partition answered.
fn fetch_offsets(
    w: &mut World,
    conn: u64,
    group: &str,
    topics: Option<&[&str]>,
) -> (i16, Vec<(String, i16)>) {
    let topics = topics.map(|ts| {
        ts.iter()
            .map(|t| {
                OffsetFetchRequestTopics::default()
                    .with_name(name(t))
                    .with_partition_indexes(vec![0])
            })
            .collect()
    });
    let req = OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
        .with_group_id(gid(group))
        .with_topics(topics)]);
    w.send(conn, 8, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::OffsetFetch(r))) => {
            let g = &r.groups[0];
            let parts = g
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(|p| (t.name.0.to_string(), p.error_code))
                })
                .collect();
            (g.error_code, parts)
        }
        other => panic!("expected an OffsetFetch answer, got {other:?}"),
    }
}

fn list_groups(w: &mut World, conn: u64) -> Vec<String> {
    w.send(conn, 4, &ListGroupsRequest::default());
    match w.recv(conn) {
        Some((_, ResponseKind::ListGroups(r))) => {
            r.groups.iter().map(|g| g.group_id.0.to_string()).collect()
        }
        other => panic!("expected a ListGroups answer, got {other:?}"),
    }
}

fn list_transactions(w: &mut World, conn: u64) -> Vec<String> {
    w.send(conn, 1, &ListTransactionsRequest::default());
    match w.recv(conn) {
        Some((_, ResponseKind::ListTransactions(r))) => r
            .transaction_states
            .iter()
            .map(|t| t.transactional_id.0.to_string())
            .collect(),
        other => panic!("expected a ListTransactions answer, got {other:?}"),
    }
}

#[test]
fn init_producer_id_needs_write_on_the_transactional_id() {
    let mut w = world();
    assert_eq!(init_txn(&mut w, ALICE, "tx", 60_000).0, TXN_ID_DENIED);
    allow_alice(&mut w, resource::TRANSACTIONAL_ID, "tx", Op::Describe);
    assert_eq!(
        init_txn(&mut w, ALICE, "tx", 60_000).0,
        TXN_ID_DENIED,
        "DESCRIBE is not WRITE"
    );
    allow_alice(&mut w, resource::TRANSACTIONAL_ID, "tx", Op::Write);
    let (error, pid, epoch) = init_txn(&mut w, ALICE, "tx", 60_000);
    assert_eq!((error, epoch), (NONE, 0));
    assert!(pid >= 0);
    assert_eq!(
        init_txn(&mut w, BOB, "tx", 60_000).0,
        TXN_ID_DENIED,
        "Alice's ACL only"
    );
}

#[test]
fn an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic() {
    let mut w = world();
    assert_eq!(init_idempotent(&mut w, ALICE), CLUSTER_DENIED);
    assert_eq!(init_idempotent(&mut w, BOB), CLUSTER_DENIED);
    allow_alice(
        &mut w,
        resource::CLUSTER,
        "kafka-cluster",
        Op::IdempotentWrite,
    );
    assert_eq!(init_idempotent(&mut w, ALICE), NONE);
    acl(
        &mut w,
        "User:bob",
        resource::TOPIC,
        "logs-",
        pattern::PREFIXED,
        Op::Write,
        permission::ALLOW,
    );
    assert_eq!(
        init_idempotent(&mut w, BOB),
        NONE,
        "WRITE on some topic will do"
    );
    assert_eq!(init_idempotent(&mut w, ADMIN), NONE, "a super user");
}

#[test]
fn add_partitions_needs_write_on_the_id_and_on_every_topic() {
    let mut w = world();
    allow_alice(&mut w, resource::TRANSACTIONAL_ID, "tx", Op::Write);
    allow_alice(&mut w, resource::TOPIC, "a", Op::Write);
    let (pid, epoch) = alice_txn(&mut w, "tx");
    assert_eq!(
        add_partitions(&mut w, ALICE, "tx", pid, epoch, &[("a", 0), ("b", 0)]),
        vec![NOT_ATTEMPTED, TOPIC_DENIED],
        "nothing is added when a topic is refused"
    );
    assert_eq!(
        add_partitions(&mut w, ALICE, "tx", pid, epoch, &[("a", 0)]),
        vec![NONE]
    );
    assert_eq!(
        add_partitions(&mut w, BOB, "tx", pid, epoch, &[("a", 0), ("b", 0)]),
        vec![TXN_ID_DENIED, TXN_ID_DENIED],
        "Bob may not write to Alice's transaction"
    );
    assert_eq!(
        end_txn(&mut w, BOB, "tx", pid, epoch, true),
        Some(TXN_ID_DENIED)
    );
    assert_eq!(end_txn(&mut w, ALICE, "tx", pid, epoch, false), Some(NONE));
}

#[test]
fn offsets_in_a_transaction_need_read_on_the_group_and_the_topics() {
    let mut w = world();
    allow_alice(&mut w, resource::TRANSACTIONAL_ID, "tx", Op::Write);
    let (pid, epoch) = alice_txn(&mut w, "tx");
    assert_eq!(
        add_offsets(&mut w, ALICE, "tx", pid, epoch, "g"),
        GROUP_DENIED
    );
    assert_eq!(
        add_offsets(&mut w, BOB, "tx", pid, epoch, "g"),
        TXN_ID_DENIED
    );
    allow_alice(&mut w, resource::GROUP, "g", Op::Read);
    assert_eq!(add_offsets(&mut w, ALICE, "tx", pid, epoch, "g"), NONE);

    let commit = |w: &mut World, conn, group, topic| {
        txn_offset_commit(w, conn, "tx", pid, epoch, group, topic, 0, 5)
    };
    assert_eq!(commit(&mut w, BOB, "g", "a"), TXN_ID_DENIED);
    assert_eq!(commit(&mut w, ALICE, "other", "a"), GROUP_DENIED);
    assert_eq!(commit(&mut w, ALICE, "g", "a"), TOPIC_DENIED);
    allow_alice(&mut w, resource::TOPIC, "a", Op::Read);
    assert_eq!(commit(&mut w, ALICE, "g", "a"), NONE);
    assert_eq!(end_txn(&mut w, ALICE, "tx", pid, epoch, true), Some(NONE));
}

#[test]
fn a_deny_beats_an_allow_and_a_prefix_covers_its_names() {
    let mut w = world();
    acl(
        &mut w,
        "User:*",
        resource::TRANSACTIONAL_ID,
        "app-",
        pattern::PREFIXED,
        Op::Write,
        permission::ALLOW,
    );
    acl(
        &mut w,
        "User:alice",
        resource::TRANSACTIONAL_ID,
        "app-2",
        pattern::LITERAL,
        Op::All,
        permission::DENY,
    );
    assert_eq!(init_txn(&mut w, ALICE, "app-1", 60_000).0, NONE);
    assert_eq!(init_txn(&mut w, ALICE, "app-2", 60_000).0, TXN_ID_DENIED);
    assert_eq!(
        init_txn(&mut w, BOB, "app-2", 60_000).0,
        NONE,
        "the DENY is Alice's"
    );
    assert_eq!(init_txn(&mut w, ALICE, "other", 60_000).0, TXN_ID_DENIED);
}

#[test]
fn find_coordinator_needs_describe_on_the_key() {
    let mut w = world();
    let r = find_coordinator(&mut w, ALICE, 3, 1, &["tx"]);
    assert_eq!((r.error_code, r.node_id.0, r.port), (TXN_ID_DENIED, -1, -1));
    assert_eq!(
        r.error_message.as_deref(),
        Some("Transactional Id authorization failed.")
    );
    assert_eq!(
        find_coordinator(&mut w, ALICE, 3, 0, &["g"]).error_code,
        GROUP_DENIED
    );

    acl(
        &mut w,
        "User:alice",
        resource::TRANSACTIONAL_ID,
        "app-",
        pattern::PREFIXED,
        Op::Describe,
        permission::ALLOW,
    );
    allow_alice(&mut w, resource::GROUP, "g", Op::Read);
    let r = find_coordinator(&mut w, ALICE, 4, 1, &["tx", "app-1"]);
    let answers: Vec<(i16, i32)> = r
        .coordinators
        .iter()
        .map(|c| (c.error_code, c.node_id.0))
        .collect();
    assert_eq!(answers[0], (TXN_ID_DENIED, -1));
    assert_eq!(answers[1].0, NONE);
    assert!(answers[1].1 >= 0);
    assert_eq!(
        find_coordinator(&mut w, ALICE, 3, 0, &["g"]).error_code,
        NONE,
        "READ implies DESCRIBE"
    );
}

#[test]
fn group_membership_needs_read_on_the_group() {
    let mut w = world();
    let join = JoinGroupRequest::default()
        .with_group_id(gid("g"))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default().with_name(s("range"))
        ]);
    for version in [5, 9] {
        w.send(ALICE, version, &join);
        let Some((_, ResponseKind::JoinGroup(r))) = w.recv(ALICE) else {
            panic!("expected a JoinGroup answer");
        };
        assert_eq!(
            (r.error_code, r.generation_id),
            (GROUP_DENIED, -1),
            "v{version}"
        );
    }
    let sync = SyncGroupRequest::default()
        .with_group_id(gid("g"))
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")));
    w.send(ALICE, 5, &sync);
    assert!(matches!(
        w.recv(ALICE),
        Some((_, ResponseKind::SyncGroup(r))) if r.error_code == GROUP_DENIED
    ));
    w.send(
        ALICE,
        4,
        &HeartbeatRequest::default().with_group_id(gid("g")),
    );
    assert!(matches!(
        w.recv(ALICE),
        Some((_, ResponseKind::Heartbeat(r))) if r.error_code == GROUP_DENIED
    ));
    w.send(
        ALICE,
        5,
        &LeaveGroupRequest::default().with_group_id(gid("g")),
    );
    assert!(matches!(
        w.recv(ALICE),
        Some((_, ResponseKind::LeaveGroup(r))) if r.error_code == GROUP_DENIED && r.members.is_empty()
    ));

    allow_alice(&mut w, resource::GROUP, "g", Op::Read);
    w.send(ALICE, 9, &join);
    let Some((_, ResponseKind::JoinGroup(r))) = w.recv(ALICE) else {
        panic!("expected a JoinGroup answer");
    };
    assert_eq!(r.error_code, ResponseError::MemberIdRequired.code());
}

#[test]
fn offset_commit_needs_read_on_the_group_then_on_each_topic() {
    let mut w = world();
    assert_eq!(
        commit(&mut w, ALICE, "g", &[("a", 1), ("b", 1)]),
        vec![GROUP_DENIED; 2]
    );
    allow_alice(&mut w, resource::GROUP, "g", Op::Read);
    assert_eq!(
        commit(&mut w, ALICE, "g", &[("a", 1), ("b", 1)]),
        vec![TOPIC_DENIED; 2]
    );
    assert!(
        list_groups(&mut w, ADMIN).is_empty(),
        "with no topic left the group is not consulted (nor created)"
    );
    allow_alice(&mut w, resource::TOPIC, "a", Op::Read);
    assert_eq!(
        commit(&mut w, ALICE, "g", &[("a", 7), ("b", 1)]),
        vec![NONE, TOPIC_DENIED]
    );

    // OffsetFetch: DESCRIBE on the group, and topics without DESCRIBE are
    // refused when asked for and left out of "all topics".
    assert_eq!(
        fetch_offsets(&mut w, BOB, "g", None),
        (GROUP_DENIED, vec![])
    );
    commit(&mut w, ADMIN, "g", &[("b", 3)]);
    assert_eq!(
        fetch_offsets(&mut w, ALICE, "g", Some(&["b", "a"])),
        (NONE, vec![("a".into(), NONE), ("b".into(), TOPIC_DENIED)])
    );
    assert_eq!(
        fetch_offsets(&mut w, ALICE, "g", None),
        (NONE, vec![("a".into(), NONE)])
    );
    assert_eq!(fetch_offsets(&mut w, ADMIN, "g", None).1.len(), 2);
}

#[test]
fn group_admin_needs_describe_or_delete() {
    let mut w = world();
    commit(&mut w, ADMIN, "g1", &[("a", 1)]);
    commit(&mut w, ADMIN, "g2", &[("a", 1)]);
    allow_alice(&mut w, resource::GROUP, "g1", Op::Describe);

    w.send(
        ALICE,
        5,
        &DescribeGroupsRequest::default()
            .with_groups(vec![gid("g1"), gid("g2")])
            .with_include_authorized_operations(true),
    );
    let Some((_, ResponseKind::DescribeGroups(r))) = w.recv(ALICE) else {
        panic!("expected a DescribeGroups answer");
    };
    let described: Vec<(&str, i16, &str)> = r
        .groups
        .iter()
        .map(|g| (g.group_id.0.as_str(), g.error_code, g.group_state.as_str()))
        .collect();
    assert_eq!(
        described,
        vec![("g2", GROUP_DENIED, ""), ("g1", NONE, "Empty")],
        "refused groups first, as Kafka"
    );
    assert_eq!(r.groups[1].authorized_operations, 1 << Op::Describe.code());

    w.send(
        ALICE,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![gid("g1")]),
    );
    assert!(matches!(
        w.recv(ALICE),
        Some((_, ResponseKind::DeleteGroups(r))) if r.results[0].error_code == GROUP_DENIED
    ));
    let offset_delete = OffsetDeleteRequest::default()
        .with_group_id(gid("g1"))
        .with_topics(vec![OffsetDeleteRequestTopic::default()
            .with_name(name("a"))
            .with_partitions(vec![
                OffsetDeleteRequestPartition::default().with_partition_index(0)
            ])]);
    w.send(ALICE, 0, &offset_delete);
    assert!(matches!(
        w.recv(ALICE),
        Some((_, ResponseKind::OffsetDelete(r))) if r.error_code == GROUP_DENIED
    ));
    allow_alice(&mut w, resource::GROUP, "g1", Op::Delete);
    w.send(ALICE, 0, &offset_delete);
    let Some((_, ResponseKind::OffsetDelete(r))) = w.recv(ALICE) else {
        panic!("expected an OffsetDelete answer");
    };
    assert_eq!(r.error_code, NONE);
    assert_eq!(
        r.topics[0].partitions[0].error_code, TOPIC_DENIED,
        "READ on the topic too"
    );
}

#[test]
fn listings_show_only_what_the_principal_may_describe() {
    let mut w = world();
    for group in ["g1", "g2"] {
        commit(&mut w, ADMIN, group, &[("a", 1)]);
    }
    for id in ["tx1", "tx2"] {
        assert_eq!(init_txn(&mut w, ADMIN, id, 60_000).0, NONE);
    }
    allow_alice(&mut w, resource::GROUP, "g1", Op::Describe);
    allow_alice(&mut w, resource::TRANSACTIONAL_ID, "tx1", Op::Write);

    assert_eq!(list_groups(&mut w, ALICE), vec!["g1"]);
    assert_eq!(list_groups(&mut w, ADMIN), vec!["g1", "g2"]);
    assert_eq!(
        list_transactions(&mut w, ALICE),
        vec!["tx1"],
        "WRITE implies DESCRIBE"
    );
    assert_eq!(list_transactions(&mut w, ADMIN), vec!["tx1", "tx2"]);
    assert!(list_groups(&mut w, BOB).is_empty());
    acl(
        &mut w,
        "User:bob",
        resource::CLUSTER,
        "kafka-cluster",
        pattern::LITERAL,
        Op::Describe,
        permission::ALLOW,
    );
    assert_eq!(
        list_groups(&mut w, BOB),
        vec!["g1", "g2"],
        "DESCRIBE on the cluster lists all"
    );
}

#[test]
fn describe_transactions_and_producers_hide_what_may_not_be_described() {
    let mut w = world();
    let (pid, epoch) = {
        let (error, pid, epoch) = init_txn(&mut w, ADMIN, "tx", 60_000);
        assert_eq!(error, NONE);
        (pid, epoch)
    };
    assert_eq!(
        add_partitions(&mut w, ADMIN, "tx", pid, epoch, &[("a", 0), ("b", 0)]),
        vec![NONE, NONE]
    );
    let describe = |w: &mut World| {
        w.send(
            ALICE,
            0,
            &DescribeTransactionsRequest::default().with_transactional_ids(vec![tid("tx")]),
        );
        match w.recv(ALICE) {
            Some((_, ResponseKind::DescribeTransactions(r))) => r.transaction_states[0].clone(),
            other => panic!("expected a DescribeTransactions answer, got {other:?}"),
        }
    };
    assert_eq!(describe(&mut w).error_code, TXN_ID_DENIED);
    allow_alice(&mut w, resource::TRANSACTIONAL_ID, "tx", Op::Describe);
    allow_alice(&mut w, resource::TOPIC, "b", Op::Describe);
    let state = describe(&mut w);
    assert_eq!(state.error_code, NONE);
    let topics: Vec<&str> = state.topics.iter().map(|t| t.topic.0.as_str()).collect();
    assert_eq!(topics, vec!["b"], "topic a is left out");

    let req = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(name("a"))
        .with_partition_indexes(vec![0])]);
    w.send(ALICE, 0, &req);
    let Some((_, ResponseKind::DescribeProducers(r))) = w.recv(ALICE) else {
        panic!("expected a DescribeProducers answer");
    };
    assert_eq!(r.topics[0].partitions[0].error_code, TOPIC_DENIED);
}
