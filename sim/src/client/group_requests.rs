//! The consumer-group requests of a classic-protocol member, built with
//! kafka-protocol's structs as the Java consumer's ConsumerCoordinator sends
//! them, the consumer protocol's subscription and assignment (version
//! prefix, then the body), and the range assignment the leader computes.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::{
    ConsumerProtocolAssignment, TopicPartition,
};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const ILLEGAL_GENERATION: i16 = 22;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const MEMBER_ID_REQUIRED: i16 = 79;

pub const PROTOCOL_TYPE: &str = "consumer";
pub const PROTOCOL_NAME: &str = "range";
/// Consumer protocol versions sent: v0 is what every assignor reads.
const SUBSCRIPTION_VERSION: i16 = 0;
const ASSIGNMENT_VERSION: i16 = 0;

/// Where a member stands in the group: what its commits and heartbeats carry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Membership {
    pub member_id: String,
    pub generation: i32,
}

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn group_id(s: &str) -> GroupId {
    GroupId(text(s))
}

/// The answers that say this member's view of the group is gone: it must
/// give up what it holds (abort its transaction) and join again.
pub fn must_rejoin(code: i16) -> bool {
    matches!(
        code,
        UNKNOWN_MEMBER_ID | ILLEGAL_GENERATION | REBALANCE_IN_PROGRESS
    )
}

pub fn find_coordinator(group: &str) -> FindCoordinatorRequest {
    FindCoordinatorRequest::default()
        .with_key(text(group))
        .with_key_type(0)
}

pub fn subscription(topic: &str) -> Bytes {
    let body = kafka_protocol::messages::ConsumerProtocolSubscription::default()
        .with_topics(vec![text(topic)]);
    versioned(&body, SUBSCRIPTION_VERSION)
}

fn versioned<M: Encodable>(body: &M, version: i16) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    body.encode(&mut buf, version)
        .expect("a consumer protocol body encodes");
    buf.freeze()
}

/// JoinGroup v5 (member id required since v4, as the Java client asks).
pub fn join(
    group: &str,
    member_id: &str,
    session_timeout_ms: i32,
    topic: &str,
) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(group_id(group))
        .with_session_timeout_ms(session_timeout_ms)
        // The rebalance waits this long for members that have not rejoined:
        // as long as the session, so a dead member holds it back no longer.
        .with_rebalance_timeout_ms(session_timeout_ms)
        .with_member_id(text(member_id))
        .with_protocol_type(text(PROTOCOL_TYPE))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(text(PROTOCOL_NAME))
            .with_metadata(subscription(topic))])
}

/// SyncGroup v5; the leader's carries every member's assignment.
pub fn sync(group: &str, m: &Membership, assignments: Vec<(String, Bytes)>) -> SyncGroupRequest {
    SyncGroupRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id(m.generation)
        .with_member_id(text(&m.member_id))
        .with_protocol_type(Some(text(PROTOCOL_TYPE)))
        .with_protocol_name(Some(text(PROTOCOL_NAME)))
        .with_assignments(
            assignments
                .into_iter()
                .map(|(member, a)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(text(&member))
                        .with_assignment(a)
                })
                .collect(),
        )
}

pub fn heartbeat(group: &str, m: &Membership) -> HeartbeatRequest {
    HeartbeatRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id(m.generation)
        .with_member_id(text(&m.member_id))
}

/// LeaveGroup v3+ (a list of members).
pub fn leave(group: &str, member_id: &str) -> LeaveGroupRequest {
    LeaveGroupRequest::default()
        .with_group_id(group_id(group))
        .with_members(vec![
            MemberIdentity::default().with_member_id(text(member_id))
        ])
}

/// Kafka's RangeAssignor for one topic: members sorted by id, each gets a
/// run of consecutive partitions, the first `n % members` one more.
/// Members whose subscription does not name the topic get nothing.
pub fn range_assign(
    members: &[(String, Bytes)],
    topic: &str,
    partitions: i32,
) -> Result<Vec<(String, Vec<i32>)>, String> {
    let mut subscribed = Vec::new();
    for (id, metadata) in members {
        let mut buf = metadata.clone();
        if buf.remaining() < 2 {
            return Err(format!("member {id}: a {}-byte subscription", buf.len()));
        }
        let version = buf.get_i16();
        let s = ConsumerProtocolSubscription::decode(&mut buf, version.min(3))
            .map_err(|e| format!("member {id}: undecodable subscription v{version}: {e}"))?;
        subscribed.push((id.clone(), s.topics.iter().any(|t| t.as_str() == topic)));
    }
    subscribed.sort();
    let takers: Vec<&String> = subscribed.iter().filter(|s| s.1).map(|s| &s.0).collect();
    let mut out: Vec<(String, Vec<i32>)> = subscribed
        .iter()
        .map(|(id, _)| (id.clone(), Vec::new()))
        .collect();
    if takers.is_empty() {
        return Ok(out);
    }
    let (each, extra) = (
        partitions / takers.len() as i32,
        partitions % takers.len() as i32,
    );
    let mut next = 0;
    for (i, id) in takers.iter().enumerate() {
        let count = each + i32::from((i as i32) < extra);
        let slot = out.iter_mut().find(|(m, _)| m == *id).expect("listed");
        slot.1 = (next..next + count).collect();
        next += count;
    }
    assert_eq!(next, partitions, "range assignment covers every partition");
    Ok(out)
}

pub fn assignment(topic: &str, partitions: &[i32]) -> Bytes {
    let body = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
        TopicPartition::default()
            .with_topic(TopicName(text(topic)))
            .with_partitions(partitions.to_vec()),
    ]);
    versioned(&body, ASSIGNMENT_VERSION)
}

/// The partitions of `topic` an assignment names (empty bytes: none).
pub fn decode_assignment(bytes: &Bytes, topic: &str) -> Result<Vec<i32>, String> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let mut buf = bytes.clone();
    if buf.remaining() < 2 {
        return Err("a 1-byte assignment".into());
    }
    let version = buf.get_i16();
    let a = ConsumerProtocolAssignment::decode(&mut buf, version.min(3))
        .map_err(|e| format!("undecodable assignment v{version}: {e}"))?;
    let mut parts: Vec<i32> = a
        .assigned_partitions
        .iter()
        .filter(|t| t.topic.0.as_str() == topic)
        .flat_map(|t| t.partitions.iter().copied())
        .collect();
    parts.sort();
    Ok(parts)
}

/// TxnOffsetCommit v3: a member's offsets, with its generation and member
/// id, so that the group refuses those of a member it no longer knows.
pub fn txn_offset_commit(
    transactional_id: &str,
    (pid, epoch): (i64, i16),
    group: &str,
    m: &Membership,
    topic: &str,
    offsets: &[(i32, i64)],
) -> TxnOffsetCommitRequest {
    let partitions = offsets
        .iter()
        .map(|&(p, offset)| {
            TxnOffsetCommitRequestPartition::default()
                .with_partition_index(p)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(-1)
        })
        .collect();
    TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(text(transactional_id)))
        .with_group_id(group_id(group))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_generation_id(m.generation)
        .with_member_id(text(&m.member_id))
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(TopicName(text(topic)))
            .with_partitions(partitions)])
}

/// OffsetFetch v7 with require_stable for some partitions.
pub fn offset_fetch(group: &str, topic: &str, partitions: &[i32]) -> OffsetFetchRequest {
    OffsetFetchRequest::default()
        .with_group_id(group_id(group))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(text(topic)))
            .with_partition_indexes(partitions.to_vec())]))
        .with_require_stable(true)
}

/// (partition, committed offset) of an OffsetFetch answer, or its first error.
pub fn fetched_offsets(r: &OffsetFetchResponse) -> Result<Vec<(i32, i64)>, i16> {
    if r.error_code != 0 {
        return Err(r.error_code);
    }
    let mut out = Vec::new();
    for part in r.topics.iter().flat_map(|t| t.partitions.iter()) {
        if part.error_code != 0 {
            return Err(part.error_code);
        }
        out.push((part.partition_index, part.committed_offset));
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_assignment_splits_like_kafka() {
        let sub = subscription("t");
        let members: Vec<(String, Bytes)> = ["b", "a", "c"]
            .iter()
            .map(|m| (m.to_string(), sub.clone()))
            .collect();
        let got = range_assign(&members, "t", 5).unwrap();
        assert_eq!(
            got,
            vec![
                ("a".to_string(), vec![0, 1]),
                ("b".to_string(), vec![2, 3]),
                ("c".to_string(), vec![4]),
            ]
        );
        let bytes = assignment("t", &got[1].1);
        assert_eq!(decode_assignment(&bytes, "t").unwrap(), vec![2, 3]);
        assert_eq!(
            decode_assignment(&Bytes::new(), "t").unwrap(),
            Vec::<i32>::new()
        );
    }
}
