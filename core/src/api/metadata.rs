//! Metadata (key 3), v0–v12.
//!
//! One broker (this node) leads every partition, with itself as the only
//! replica and ISR. Leader epochs are reported as -1 ("unknown"), so clients
//! skip KIP-320 offset validation (OffsetForLeaderEpoch), which a single node
//! with no leader changes has no use for.
//!
//! Topics asked for that do not exist are created when the request allows it
//! (v4+ `allow_auto_topic_creation`; always for v0–v3, as Kafka) and the broker
//! has `auto.create.topics.enable`; the answer then waits for meta.db. A topic
//! being created by another request is LEADER_NOT_AVAILABLE, which clients retry.
//!
//! ACL: DESCRIBE on each topic, CREATE on the cluster or topic to auto-create (`refused_topics`).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, MetadataRequest, MetadataResponse, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::create_topics::{self, Origin};
use super::RequestCtx;
use crate::api::Cx;
use crate::core_state::Core;
use crate::security::acl::{resource, Op};

/// "Authorized operations not asked for" (Kafka's Integer.MIN_VALUE).
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: MetadataRequest) {
    respond(b, ctx, req, true);
}

/// Answers `req`, first creating missing topics when `may_create` and allowed.
pub(crate) fn respond(b: &mut Cx, ctx: RequestCtx, req: MetadataRequest, may_create: bool) {
    let allow_create =
        b.core.config().auto_create_topics && (ctx.version < 4 || req.allow_auto_topic_creation);
    // v0: an empty list means all topics; v1+: null means all topics.
    let asked: Option<Vec<String>> = match &req.topics {
        None => None,
        Some(list) if list.is_empty() && ctx.version == 0 => None,
        Some(list) => Some(
            list.iter()
                .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
                .collect(),
        ),
    };
    let names = asked.clone().unwrap_or_else(|| b.core.topics().names());
    let refused = refused_topics(b.core, &ctx, &names, asked.is_some() && allow_create);
    if may_create && allow_create {
        if let Some(names) = &asked {
            let mut new = Vec::new();
            for name in names.iter().filter(|name| !refused.contains(*name)) {
                let exists = b.core.topics().get(name).is_some() || b.core.topics().is_busy(name);
                let duplicate = new.iter().any(|(n, _)| n == name);
                if !exists && !duplicate && create_topics::validate_name(name).is_ok() {
                    let partitions = b.core.config().default_partitions;
                    let record = create_topics::new_record(b, name, partitions, BTreeMap::new());
                    new.push((name.clone(), record));
                }
            }
            if !new.is_empty() {
                return create_topics::store(b, Origin::Metadata { ctx, request: req }, new);
            }
        }
    }
    // A named topic refused answers TOPIC_AUTHORIZATION_FAILED whether it
    // exists or not; "all topics" leaves it out.
    let topics = names
        .iter()
        .filter_map(|name| match refused.contains(name) {
            true if asked.is_none() => None,
            true => Some(refused_topic(name)),
            false => Some(describe_topic(b.core, name)),
        })
        .collect();
    let (host, port) = b.core.advertised_address(ctx.conn);
    let config = b.core.config();
    let broker = MetadataResponseBroker::default()
        .with_node_id(BrokerId(config.node_id))
        .with_host(StrBytes::from_string(host))
        .with_port(port);
    let response = MetadataResponse::default()
        .with_brokers(vec![broker])
        .with_cluster_id(Some(StrBytes::from_string(config.cluster_id.clone())))
        .with_controller_id(BrokerId(config.node_id))
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
        .with_topics(topics);
    b.core.respond(&ctx, ResponseKind::Metadata(response));
}

/// The topics of `names` the ACLs refuse: those the principal may not
/// DESCRIBE and, with `auto_create`, the missing ones it may not create
/// (CREATE on the cluster, else on the topic; Kafka asks only when a
/// described topic is missing).
fn refused_topics(
    b: &Core,
    ctx: &RequestCtx,
    names: &[String],
    auto_create: bool,
) -> BTreeSet<String> {
    let (described, mut refused): (Vec<&String>, Vec<&String>) = names
        .iter()
        .partition(|name| b.authorized(ctx, Op::Describe, resource::TOPIC, name));
    let missing: Vec<&String> = described
        .into_iter()
        .filter(|name| b.topics().get(name).is_none())
        .collect();
    if auto_create
        && !missing.is_empty()
        && !b.authorized(ctx, Op::Create, resource::CLUSTER, "kafka-cluster")
    {
        refused.extend(
            missing
                .into_iter()
                .filter(|name| !b.authorized(ctx, Op::Create, resource::TOPIC, name)),
        );
    }
    refused.into_iter().cloned().collect()
}

/// A topic the ACLs refuse: named, nothing else told (no id, no partitions).
fn refused_topic(name: &str) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(name)))
        .with_error_code(ResponseError::TopicAuthorizationFailed.code())
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

fn describe_topic(b: &Core, name: &str) -> MetadataResponseTopic {
    let topic_name = TopicName(StrBytes::from_string(name.to_string()));
    let base = MetadataResponseTopic::default()
        .with_name(Some(topic_name))
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
    let Some(topic) = b.topics().get(name) else {
        let error = if b.topics().is_busy(name) {
            ResponseError::LeaderNotAvailable
        } else if create_topics::validate_name(name).is_err() {
            ResponseError::InvalidTopicException
        } else {
            ResponseError::UnknownTopicOrPartition
        };
        return base.with_error_code(error.code());
    };
    let node = BrokerId(b.config().node_id);
    let partitions = (0..topic.partitions.len() as i32)
        .map(|p| {
            MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_leader_id(node)
                .with_leader_epoch(crate::batch::LEADER_EPOCH)
                .with_replica_nodes(vec![node])
                .with_isr_nodes(vec![node])
        })
        .collect();
    base.with_topic_id(topic.id).with_partitions(partitions)
}

/// A topic name for a response.
pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}
