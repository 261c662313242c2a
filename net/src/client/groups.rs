//! Consumer groups and offsets: FindCoordinator, ListGroups, DescribeGroups,
//! OffsetFetch, ListOffsets.
//!
//! A group's questions go to its coordinator, found first; while that is
//! loading or has moved (retriable errors) the client asks again, within
//! the request timeout. A member's assignment is decoded when the group
//! uses the consumer protocol (ConsumerProtocolAssignment, as Kafka's
//! ConsumerGroupCommand shows it).

use std::collections::BTreeMap;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{
    BrokerId, ConsumerProtocolAssignment, DescribeGroupsRequest, FindCoordinatorRequest, GroupId,
    ListGroupsRequest, ListOffsetsRequest, OffsetFetchRequest,
};
use kafka_protocol::protocol::{Decodable, Message, StrBytes};
use serde::Serialize;

use super::fetch::Isolation;
use super::topics::topic_name;
use super::{Client, Connector, Error, KafkaError, Target, TopicPartition};

/// The newest ConsumerProtocolAssignment layout this client reads; a newer
/// one is read as this one (Kafka's rule: later versions only add fields).
const ASSIGNMENT_VERSION_MAX: i16 = 3;

/// What a coordinator coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoordinatorKind {
    Group,
    Transaction,
}

impl CoordinatorKind {
    fn key_type(self) -> i8 {
        match self {
            CoordinatorKind::Group => 0,
            CoordinatorKind::Transaction => 1,
        }
    }
}

/// A coordinator broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Coordinator {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// A group as ListGroups lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    /// None before ListGroups v4.
    pub state: Option<String>,
    /// `classic` or `consumer`; None before ListGroups v5.
    pub group_type: Option<String>,
    /// The broker that listed it (its coordinator).
    pub coordinator_id: i32,
}

/// A group as DescribeGroups describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupDescription {
    pub group_id: String,
    /// `Stable`, `Empty`, `PreparingRebalance`, ..., `Dead` (no such group).
    pub state: String,
    pub protocol_type: String,
    /// The assignor (`range`, ...), once the group has one.
    pub protocol: String,
    pub coordinator: Coordinator,
    pub members: Vec<GroupMember>,
}

/// A member of a group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Its partitions, when the group is a consumer group.
    pub assignment: Vec<TopicPartition>,
}

/// A group's committed offset of a partition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: Option<String>,
}

/// Which offset ListOffsets looks up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The end: the high watermark (read_uncommitted) or the LSO
    /// (read_committed).
    Latest,
    /// The first offset whose timestamp is at or after this (ms).
    Timestamp(i64),
}

impl OffsetSpec {
    fn timestamp(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::Timestamp(ms) => ms,
        }
    }
}

impl<C: Connector> Client<C> {
    /// The coordinator of a group or a transactional id; the client
    /// remembers its address for the requests that follow.
    pub async fn find_coordinator(
        &mut self,
        kind: CoordinatorKind,
        key: &str,
    ) -> Result<Coordinator, Error> {
        let version = self.version::<FindCoordinatorRequest>(Target::Any).await?;
        let about = match kind {
            CoordinatorKind::Group => format!("coordinator of group {key}"),
            CoordinatorKind::Transaction => format!("coordinator of transactional id {key}"),
        };
        let mut req = FindCoordinatorRequest::default().with_key_type(kind.key_type());
        let key_bytes = StrBytes::from_string(key.to_string());
        if version >= 4 {
            req.coordinator_keys = vec![key_bytes];
        } else {
            req.key = key_bytes;
        }
        let r = self.send_at(Target::Any, version, &req).await?;
        let coordinator = if version >= 4 {
            let Some(c) = r.coordinators.first() else {
                return Err(Error::Protocol {
                    addr: self.any.clone(),
                    reason: "FindCoordinator answered no coordinator".into(),
                });
            };
            KafkaError::check(c.error_code, c.error_message.as_deref(), about)?;
            Coordinator {
                node_id: c.node_id.0,
                host: c.host.to_string(),
                port: c.port,
            }
        } else {
            KafkaError::check(r.error_code, r.error_message.as_deref(), about)?;
            Coordinator {
                node_id: r.node_id.0,
                host: r.host.to_string(),
                port: r.port,
            }
        };
        self.brokers.insert(
            coordinator.node_id,
            format!("{}:{}", coordinator.host, coordinator.port),
        );
        Ok(coordinator)
    }

    /// Every group of every broker.
    pub async fn list_groups(&mut self) -> Result<Vec<GroupListing>, Error> {
        let mut out = Vec::new();
        for node in self.node_ids() {
            let r = self
                .send(Target::Node(node), &ListGroupsRequest::default())
                .await?;
            KafkaError::check(r.error_code, None, format!("groups of broker {node}"))?;
            let version = self
                .version::<ListGroupsRequest>(Target::Node(node))
                .await?;
            out.extend(r.groups.iter().map(|g| GroupListing {
                group_id: g.group_id.to_string(),
                protocol_type: g.protocol_type.to_string(),
                state: (version >= 4).then(|| g.group_state.to_string()),
                group_type: (version >= 5).then(|| g.group_type.to_string()),
                coordinator_id: node,
            }));
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(out)
    }

    /// A group's state and members, from its coordinator. A group that does
    /// not exist is in state `Dead` (DescribeGroups before v6) or an error
    /// GROUP_ID_NOT_FOUND.
    pub async fn describe_group(&mut self, group: &str) -> Result<GroupDescription, Error> {
        let deadline = self.retry_deadline();
        loop {
            match self.describe_group_once(group).await {
                Err(e) => Self::backoff(e, deadline).await?,
                done => return done,
            }
        }
    }

    async fn describe_group_once(&mut self, group: &str) -> Result<GroupDescription, Error> {
        let coordinator = self.find_coordinator(CoordinatorKind::Group, group).await?;
        let req = DescribeGroupsRequest::default().with_groups(vec![group_id(group)]);
        let r = self.send(Target::Node(coordinator.node_id), &req).await?;
        let Some(g) = r.groups.first() else {
            return Err(Error::Protocol {
                addr: coordinator.host.clone(),
                reason: "DescribeGroups answered no group".into(),
            });
        };
        KafkaError::check(
            g.error_code,
            g.error_message.as_deref(),
            format!("group {group}"),
        )?;
        let consumer = g.protocol_type.as_str() == "consumer";
        let members = g
            .members
            .iter()
            .map(|m| GroupMember {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()),
                client_id: m.client_id.to_string(),
                client_host: m.client_host.to_string(),
                assignment: if consumer {
                    decode_assignment(m.member_assignment.clone())
                } else {
                    Vec::new()
                },
            })
            .collect();
        Ok(GroupDescription {
            group_id: group.to_string(),
            state: g.group_state.to_string(),
            protocol_type: g.protocol_type.to_string(),
            protocol: g.protocol_data.to_string(),
            coordinator,
            members,
        })
    }

    /// Every offset the group has committed, by partition.
    pub async fn committed_offsets(&mut self, group: &str) -> Result<Vec<CommittedOffset>, Error> {
        let deadline = self.retry_deadline();
        loop {
            match self.committed_offsets_once(group).await {
                Err(e) => Self::backoff(e, deadline).await?,
                done => return done,
            }
        }
    }

    async fn committed_offsets_once(&mut self, group: &str) -> Result<Vec<CommittedOffset>, Error> {
        let coordinator = self.find_coordinator(CoordinatorKind::Group, group).await?;
        let target = Target::Node(coordinator.node_id);
        let version = self.version::<OffsetFetchRequest>(target).await?;
        let about = format!("offsets of group {group}");
        let mut req = OffsetFetchRequest::default();
        if version >= 8 {
            req.groups = vec![OffsetFetchRequestGroup::default()
                .with_group_id(group_id(group))
                .with_topics(None)];
        } else {
            // Null topics: all of them (v2 on).
            req.group_id = group_id(group);
            req.topics = None;
        }
        let r = self.send_at(target, version, &req).await?;
        let mut out = Vec::new();
        let mut push = |topic: &str, partition: i32, offset: i64, metadata: Option<&StrBytes>| {
            // -1: no offset committed for it.
            if offset >= 0 {
                out.push(CommittedOffset {
                    topic: topic.to_string(),
                    partition,
                    offset,
                    metadata: metadata.map(|m| m.to_string()),
                });
            }
        };
        if version >= 8 {
            let Some(g) = r.groups.first() else {
                return Err(Error::Protocol {
                    addr: coordinator.host.clone(),
                    reason: "OffsetFetch answered no group".into(),
                });
            };
            KafkaError::check(g.error_code, None, about.clone())?;
            for t in &g.topics {
                for p in &t.partitions {
                    KafkaError::check(p.error_code, None, about.clone())?;
                    push(
                        &t.name,
                        p.partition_index,
                        p.committed_offset,
                        p.metadata.as_ref(),
                    );
                }
            }
        } else {
            KafkaError::check(r.error_code, None, about.clone())?;
            for t in &r.topics {
                for p in &t.partitions {
                    KafkaError::check(p.error_code, None, about.clone())?;
                    push(
                        &t.name,
                        p.partition_index,
                        p.committed_offset,
                        p.metadata.as_ref(),
                    );
                }
            }
        }
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }

    /// The offset `spec` names in each partition, asked of each leader; a
    /// partition that cannot be answered (no such topic, no leader) has its
    /// error instead.
    pub async fn list_offsets(
        &mut self,
        partitions: &[TopicPartition],
        spec: OffsetSpec,
        isolation: Isolation,
    ) -> Result<BTreeMap<TopicPartition, Result<i64, KafkaError>>, Error> {
        let mut out = BTreeMap::new();
        let mut by_leader: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
        for (tp, leader) in self.leaders(partitions).await? {
            match leader {
                Ok(id) => by_leader.entry(id).or_default().push(tp),
                Err(e) => {
                    out.insert(tp, Err(e));
                }
            }
        }
        for (leader, tps) in by_leader {
            let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for tp in &tps {
                topics.entry(&tp.topic).or_default().push(tp.partition);
            }
            let req = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_isolation_level(isolation.code())
                .with_topics(
                    topics
                        .iter()
                        .map(|(topic, parts)| {
                            ListOffsetsTopic::default()
                                .with_name(topic_name(topic))
                                .with_partitions(
                                    parts
                                        .iter()
                                        .map(|&p| {
                                            ListOffsetsPartition::default()
                                                .with_partition_index(p)
                                                .with_current_leader_epoch(-1)
                                                .with_timestamp(spec.timestamp())
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            let r = self.send(Target::Node(leader), &req).await?;
            for t in &r.topics {
                for p in &t.partitions {
                    let tp = TopicPartition::new(t.name.to_string(), p.partition_index);
                    let result = if p.error_code == 0 {
                        Ok(p.offset)
                    } else {
                        Err(KafkaError {
                            code: p.error_code,
                            message: None,
                            about: format!("offsets of partition {tp}"),
                        })
                    };
                    out.insert(tp, result);
                }
            }
        }
        for tp in partitions {
            out.entry(tp.clone()).or_insert_with(|| {
                Err(KafkaError {
                    code: 3,
                    message: Some("not in the answer".into()),
                    about: format!("offsets of partition {tp}"),
                })
            });
        }
        Ok(out)
    }
}

fn group_id(group: &str) -> GroupId {
    GroupId(StrBytes::from_string(group.to_string()))
}

/// The partitions of a ConsumerProtocolAssignment (version first, then the
/// body); nothing for bytes that are not one.
fn decode_assignment(mut bytes: Bytes) -> Vec<TopicPartition> {
    if bytes.len() < 2 {
        return Vec::new();
    }
    let version = bytes.get_i16();
    if version < ConsumerProtocolAssignment::VERSIONS.min {
        return Vec::new();
    }
    let version = version.min(ASSIGNMENT_VERSION_MAX);
    let Ok(assignment) = ConsumerProtocolAssignment::decode(&mut bytes, version) else {
        return Vec::new();
    };
    let mut out: Vec<TopicPartition> = assignment
        .assigned_partitions
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|&p| TopicPartition::new(t.topic.to_string(), p))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as Assigned;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn assignments_decode() {
        for version in 0..=ASSIGNMENT_VERSION_MAX {
            let mut buf = BytesMut::new();
            buf.put_i16(version);
            ConsumerProtocolAssignment::default()
                .with_assigned_partitions(vec![Assigned::default()
                    .with_topic(topic_name("t"))
                    .with_partitions(vec![2, 0])])
                .encode(&mut buf, version)
                .unwrap();
            assert_eq!(
                decode_assignment(buf.freeze()),
                vec![TopicPartition::new("t", 0), TopicPartition::new("t", 2)],
                "v{version}"
            );
        }
        assert!(decode_assignment(Bytes::new()).is_empty());
        assert!(decode_assignment(Bytes::from_static(&[0, 0, 0xff])).is_empty());
    }
}
