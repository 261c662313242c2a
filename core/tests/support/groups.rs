//! Consumer-group requests for core tests: joins, syncs, heartbeats,
//! commits and fetches of offsets, with their answers.

use bytes::Bytes;
use doze_core::BrokerConfig;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::requests::name;
use super::World;

pub const SESSION_MS: i32 = 10_000;
pub const REBALANCE_MS: i32 = 20_000;

pub fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub fn gid(v: &str) -> GroupId {
    GroupId(s(v))
}

pub fn code(e: ResponseError) -> i16 {
    e.code()
}

pub fn world(initial_delay_ms: i64) -> World {
    let mut config = BrokerConfig::default();
    config
        .set(
            "group.initial.rebalance.delay.ms",
            &initial_delay_ms.to_string(),
        )
        .unwrap();
    World::new(config)
}

/// A consumer-protocol subscription (v0 layout) to `topics`.
pub fn subscription(topics: &[&str]) -> Bytes {
    let mut b = vec![0, 0];
    b.extend_from_slice(&(topics.len() as i32).to_be_bytes());
    for t in topics {
        b.extend_from_slice(&(t.len() as i16).to_be_bytes());
        b.extend_from_slice(t.as_bytes());
    }
    b.extend_from_slice(&(-1i32).to_be_bytes()); // no user data
    Bytes::from(b)
}

pub fn join_req(
    group: &str,
    member_id: &str,
    instance: Option<&str>,
    metadata: Bytes,
) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(gid(group))
        .with_session_timeout_ms(SESSION_MS)
        .with_rebalance_timeout_ms(REBALANCE_MS)
        .with_member_id(s(member_id))
        .with_group_instance_id(instance.map(s))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(metadata)])
}

pub fn join(
    w: &mut World,
    conn: u64,
    version: i16,
    group: &str,
    member_id: &str,
    instance: Option<&str>,
) {
    w.send(
        conn,
        version,
        &join_req(group, member_id, instance, subscription(&["t"])),
    );
}

pub fn join_answer(w: &mut World, conn: u64) -> Option<JoinGroupResponse> {
    match w.recv(conn)? {
        (_, ResponseKind::JoinGroup(r)) => Some(r),
        other => panic!("expected a JoinGroup answer, got {other:?}"),
    }
}

/// JoinGroup v9 the way Java clients do it: ask for an id, then join with it.
/// Returns the member id; the join answer may still be pending.
pub fn join_new(w: &mut World, conn: u64, group: &str) -> String {
    join(w, conn, 9, group, "", None);
    let r = join_answer(w, conn).expect("MEMBER_ID_REQUIRED comes at once");
    assert_eq!(r.error_code, code(ResponseError::MemberIdRequired));
    let id = r.member_id.to_string();
    assert!(
        id.starts_with("core-test-"),
        "member id {id} is named after the client id"
    );
    join(w, conn, 9, group, &id, None);
    id
}

pub fn sync(
    w: &mut World,
    conn: u64,
    group: &str,
    generation: i32,
    member_id: &str,
    assignments: &[(&str, &[u8])],
) {
    let req = SyncGroupRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(s(member_id))
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_assignments(
            assignments
                .iter()
                .map(|(m, a)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(s(m))
                        .with_assignment(Bytes::copy_from_slice(a))
                })
                .collect(),
        );
    w.send(conn, 5, &req);
}

pub fn sync_answer(w: &mut World, conn: u64) -> Option<SyncGroupResponse> {
    match w.recv(conn)? {
        (_, ResponseKind::SyncGroup(r)) => Some(r),
        other => panic!("expected a SyncGroup answer, got {other:?}"),
    }
}

pub fn heartbeat(
    w: &mut World,
    conn: u64,
    group: &str,
    generation: i32,
    member_id: &str,
    instance: Option<&str>,
) -> i16 {
    let req = HeartbeatRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(s(member_id))
        .with_group_instance_id(instance.map(s));
    w.send(conn, 4, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::Heartbeat(r))) => r.error_code,
        other => panic!("expected a Heartbeat answer, got {other:?}"),
    }
}

pub fn commit_req(
    group: &str,
    generation: i32,
    member_id: &str,
    offsets: &[(&str, i32, i64)],
) -> OffsetCommitRequest {
    let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
    for (topic, partition, offset) in offsets {
        let p = OffsetCommitRequestPartition::default()
            .with_partition_index(*partition)
            .with_committed_offset(*offset)
            .with_committed_leader_epoch(-1)
            .with_committed_metadata(Some(s("meta")));
        match topics.iter_mut().find(|t| t.name.0.as_str() == *topic) {
            Some(t) => t.partitions.push(p),
            None => topics.push(
                OffsetCommitRequestTopic::default()
                    .with_name(name(topic))
                    .with_partitions(vec![p]),
            ),
        }
    }
    OffsetCommitRequest::default()
        .with_group_id(gid(group))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member_id))
        .with_topics(topics)
}

/// Every partition error code of a commit answer, in order.
pub fn commit_answer(w: &mut World, conn: u64) -> Option<Vec<i16>> {
    match w.recv(conn)? {
        (_, ResponseKind::OffsetCommit(r)) => Some(
            r.topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                .collect(),
        ),
        other => panic!("expected an OffsetCommit answer, got {other:?}"),
    }
}

pub fn commit(
    w: &mut World,
    conn: u64,
    group: &str,
    generation: i32,
    member_id: &str,
    offsets: &[(&str, i32, i64)],
) -> Vec<i16> {
    w.send(conn, 8, &commit_req(group, generation, member_id, offsets));
    commit_answer(w, conn).expect("commit answered")
}

/// The committed offset of one partition (OffsetFetch v8, one group).
pub fn fetch_offset(w: &mut World, conn: u64, group: &str, topic: &str, partition: i32) -> i64 {
    let req = OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
        .with_group_id(gid(group))
        .with_topics(Some(vec![OffsetFetchRequestTopics::default()
            .with_name(name(topic))
            .with_partition_indexes(vec![partition])]))]);
    w.send(conn, 8, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::OffsetFetch(r))) => {
            let g = &r.groups[0];
            assert_eq!(g.error_code, 0);
            let p = &g.topics[0].partitions[0];
            assert_eq!(p.error_code, 0);
            p.committed_offset
        }
        other => panic!("expected an OffsetFetch answer, got {other:?}"),
    }
}

pub fn describe(w: &mut World, conn: u64, group: &str) -> describe_groups_response::DescribedGroup {
    w.send(
        conn,
        5,
        &DescribeGroupsRequest::default().with_groups(vec![gid(group)]),
    );
    match w.recv(conn) {
        Some((_, ResponseKind::DescribeGroups(r))) => r.groups[0].clone(),
        other => panic!("expected a DescribeGroups answer, got {other:?}"),
    }
}

pub fn offset_keys(w: &World) -> Vec<String> {
    w.meta
        .keys()
        .map(|k| String::from_utf8_lossy(k).to_string())
        .filter(|k| k.starts_with("offset/"))
        .collect()
}

pub fn delete_topic(w: &mut World, topic: &str) {
    let req = DeleteTopicsRequest::default()
        .with_topic_names(vec![name(topic)])
        .with_timeout_ms(30_000);
    w.send(9, 5, &req);
    match w.recv(9) {
        Some((_, ResponseKind::DeleteTopics(r))) => assert_eq!(r.responses[0].error_code, 0),
        other => panic!("expected a DeleteTopics answer, got {other:?}"),
    }
}
