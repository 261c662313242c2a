//! CreateTopics (key 19), v2–v7.
//!
//! Each topic is checked (name, partitions, replication factor 1, configs) and
//! the good ones are stored in meta.db in one atomic batch; the topics exist,
//! and the request is answered, only when that write completes. validate_only
//! checks and stores nothing. A name being created by another request in
//! flight is TOPIC_ALREADY_EXISTS, as Kafka answers for a topic it knows.
//!
//! The same path creates topics for Metadata's auto-creation.
//!
//! ACL: CREATE on the cluster or each topic; DESCRIBE_CONFIGS on it to see its configs (v5+).

use std::collections::BTreeMap;

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, MetadataRequest, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{ApiWrite, RequestCtx};
use crate::api::Cx;
use crate::core_state::Core;
use crate::io::MetaOp;
use crate::limits;
use crate::meta::{self, TopicRecord};
use crate::security::acl::{resource, Op};
use crate::topic_config;

/// Who waits for a topic creation.
pub enum Origin {
    CreateTopics {
        ctx: RequestCtx,
        response: CreateTopicsResponse,
    },
    /// Metadata auto-creation: answer the metadata request once stored.
    Metadata {
        ctx: RequestCtx,
        request: MetadataRequest,
    },
}

pub struct PendingCreate {
    pub origin: Origin,
    pub topics: Vec<(String, TopicRecord)>,
}

/// Kafka's rule for topic names (Topic.java): 1..=249 of [a-zA-Z0-9._-], not "." or "..".
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(format!("Topic name {name:?} is illegal"));
    }
    if name.len() > limits::TOPIC_NAME_BYTES_MAX {
        return Err(format!(
            "Topic name is longer than {} characters",
            limits::TOPIC_NAME_BYTES_MAX
        ));
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || c == b'-')
    {
        return Err(format!(
            "Topic name {name:?} has characters other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// Builds the record of a new topic.
pub(crate) fn new_record(
    b: &mut Cx,
    name: &str,
    partitions: i32,
    configs: BTreeMap<String, String>,
) -> TopicRecord {
    let id = b.core.new_topic_id(name);
    TopicRecord {
        id: id.hyphenated().to_string(),
        partitions,
        configs,
    }
}

/// Stores `topics` in meta.db; `origin` is answered when that completes.
pub(crate) fn store(b: &mut Cx, origin: Origin, topics: Vec<(String, TopicRecord)>) {
    assert!(!topics.is_empty(), "store of no topics");
    for (name, _) in &topics {
        b.core.mark_topic_busy(name);
    }
    let pending = PendingCreate { origin, topics };
    if waits_for_removal(b.core, &pending) {
        return b.park_create(pending);
    }
    emit(b, pending);
}

/// A topic of the same name was deleted, and the removal of its
/// directories is not durable yet. Stored now, the new topic could meet the
/// old one's files after a power cut, brought back into the directories
/// they share, and recovery would take them for its own. So the record
/// waits for the sync that covers the removal. (Kafka tells the two apart
/// by the topic id in each directory's partition.metadata: LogManager.loadLog
/// drops a stray log.)
fn waits_for_removal(b: &Core, pending: &PendingCreate) -> bool {
    pending
        .topics
        .iter()
        .any(|(name, _)| b.removal_unsynced(name))
}

/// Writes the records of a creation whose names are marked busy.
fn emit(b: &mut Cx, pending: PendingCreate) {
    let ops = pending
        .topics
        .iter()
        .map(|(name, record)| MetaOp::Put {
            key: meta::topic_key(name),
            value: meta::encode(record),
        })
        .collect();
    b.emit_meta(ops, ApiWrite::CreateTopics(pending));
}

/// A sync made some topics' removal durable: the creations that waited
/// for it are stored now (or wait on, for a removal still unsynced).
pub(crate) fn removals_synced(b: &mut Cx) {
    for pending in b.take_parked_creates() {
        if waits_for_removal(b.core, &pending) {
            b.park_create(pending);
        } else {
            emit(b, pending);
        }
    }
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: CreateTopicsRequest) {
    let mut response = CreateTopicsResponse::default();
    let mut to_create = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let duplicates: std::collections::BTreeSet<String> = req
        .topics
        .iter()
        .filter(|t| !seen.insert(t.name.0.to_string()))
        .map(|t| t.name.0.to_string())
        .collect();
    let may_create_any = b
        .core
        .authorized(&ctx, Op::Create, resource::CLUSTER, "kafka-cluster");
    for topic in &req.topics {
        let name = topic.name.0.to_string();
        let mut result = CreatableTopicResult::default()
            .with_name(topic.name.clone())
            .with_num_partitions(-1)
            .with_replication_factor(-1);
        let may_create =
            may_create_any || b.core.authorized(&ctx, Op::Create, resource::TOPIC, &name);
        let checked = check(b.core, topic, &duplicates, may_create, to_create.len());
        match checked {
            Err((error, message)) => {
                result.error_code = error.code();
                result.error_message = Some(StrBytes::from_string(message));
            }
            Ok((partitions, configs)) => {
                // Without DESCRIBE_CONFIGS, Kafka's ControllerApis.createTopics
                // answers TOPIC_AUTHORIZATION_FAILED in topic_config_error_code.
                if b.core
                    .authorized(&ctx, Op::DescribeConfigs, resource::TOPIC, &name)
                {
                    result.num_partitions = partitions;
                    result.replication_factor = 1;
                    result.configs = Some(describe(b.core, &configs));
                } else {
                    result.configs = Some(Vec::new());
                    result.topic_config_error_code = ResponseError::TopicAuthorizationFailed.code();
                }
                let record = new_record(b, &name, partitions, configs);
                result.topic_id = crate::topics::parse_id(&record.id);
                if !req.validate_only {
                    to_create.push((name, record));
                }
            }
        }
        response.topics.push(result);
    }
    if to_create.is_empty() {
        return b.core.respond(&ctx, ResponseKind::CreateTopics(response));
    }
    store(b, Origin::CreateTopics { ctx, response }, to_create);
}

type Checked = Result<(i32, BTreeMap<String, String>), (ResponseError, String)>;

fn check(
    b: &Core,
    topic: &kafka_protocol::messages::create_topics_request::CreatableTopic,
    duplicates: &std::collections::BTreeSet<String>,
    may_create: bool,
    creating_now: usize,
) -> Checked {
    let name = topic.name.0.as_str();
    if duplicates.contains(name) {
        return Err((
            ResponseError::InvalidRequest,
            format!("Topic {name} appears more than once in the request"),
        ));
    }
    if !may_create {
        return Err((
            ResponseError::TopicAuthorizationFailed,
            "Authorization failed.".into(),
        ));
    }
    validate_name(name).map_err(|m| (ResponseError::InvalidTopicException, m))?;
    let topics = b.topics();
    if topics.get(name).is_some() || topics.is_busy(name) {
        return Err((
            ResponseError::TopicAlreadyExists,
            format!("Topic '{name}' already exists."),
        ));
    }
    if topics.len() + topics.busy_count() + creating_now >= limits::TOPICS_MAX {
        return Err((
            ResponseError::PolicyViolation,
            format!("The broker holds at most {} topics", limits::TOPICS_MAX),
        ));
    }
    let partitions = if !topic.assignments.is_empty() {
        if topic.num_partitions != -1 || topic.replication_factor != -1 {
            return Err((
                ResponseError::InvalidRequest,
                "Both numPartitions or replicationFactor and replicasAssignments were set.".into(),
            ));
        }
        for a in &topic.assignments {
            if a.broker_ids.len() != 1 || a.broker_ids[0].0 != b.config().node_id {
                return Err((
                    ResponseError::InvalidReplicaAssignment,
                    "Replicas must be exactly this broker".into(),
                ));
            }
        }
        topic.assignments.len() as i32
    } else if topic.num_partitions == -1 {
        b.config().default_partitions
    } else {
        topic.num_partitions
    };
    if !(1..=limits::TOPIC_PARTITIONS_MAX).contains(&partitions) {
        return Err((
            ResponseError::InvalidPartitions,
            format!(
                "Number of partitions must be in 1..={}.",
                limits::TOPIC_PARTITIONS_MAX
            ),
        ));
    }
    if topic.replication_factor != -1 && topic.replication_factor != 1 {
        return Err((
            ResponseError::InvalidReplicationFactor,
            format!(
                "Replication factor: {} larger than available brokers: 1.",
                topic.replication_factor
            ),
        ));
    }
    let mut configs = BTreeMap::new();
    for c in &topic.configs {
        let key = c.name.to_string();
        let Some(value) = c.value.as_ref() else {
            continue;
        };
        // Stored as Kafka describes it (see `topic_config::normalize`).
        let value =
            topic_config::normalize(&key, value).map_err(|m| (ResponseError::InvalidConfig, m))?;
        configs.insert(key, value);
    }
    topic_config::check_served(&configs).map_err(|m| (ResponseError::InvalidConfig, m))?;
    Ok((partitions, configs))
}

/// The topic's configs as CreateTopics v5+ reports them: every one, as
/// DescribeConfigs shows them.
fn describe(b: &Core, overrides: &BTreeMap<String, String>) -> Vec<CreatableTopicConfigs> {
    topic_config::TOPIC_CONFIGS
        .iter()
        .map(|spec| {
            let d = topic_config::describe(b.config(), overrides, spec);
            CreatableTopicConfigs::default()
                .with_name(StrBytes::from_string(spec.name.to_string()))
                .with_value(Some(StrBytes::from_string(d.value)))
                .with_config_source(d.source.code())
        })
        .collect()
}

pub(crate) fn apply(b: &mut Cx, pending: PendingCreate, stored: bool) {
    for (name, record) in &pending.topics {
        b.core.unmark_topic_busy(name);
        if stored {
            b.core.add_topic(name, record.clone());
        }
    }
    match pending.origin {
        Origin::CreateTopics { ctx, mut response } => {
            if !stored {
                let created: std::collections::BTreeSet<&String> =
                    pending.topics.iter().map(|(n, _)| n).collect();
                for r in response.topics.iter_mut() {
                    if created.contains(&r.name.0.to_string()) {
                        r.error_code = ResponseError::UnknownServerError.code();
                        r.error_message = Some(StrBytes::from_static_str("meta.db write failed"));
                    }
                }
            }
            b.core.respond(&ctx, ResponseKind::CreateTopics(response));
        }
        Origin::Metadata { ctx, request } => super::metadata::respond(b, ctx, request, false),
    }
}
