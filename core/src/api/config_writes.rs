//! What AlterConfigs (key 33) and IncrementalAlterConfigs (key 44) share:
//! checking each resource, storing the changed topics' records in meta.db,
//! and putting them in force once stored. Each API's file reads its request
//! into `Resource`s and writes its own response from the `Answer`s.
//!
//! Per resource, in Kafka 4.3.1's order (seen on the wire):
//! - a resource named twice in one request: INVALID_REQUEST for each;
//! - TOPIC: the empty name (Kafka's cluster default) INVALID_REQUEST; a bad
//!   name INVALID_TOPIC_EXCEPTION; a config named twice or a null value to
//!   set INVALID_REQUEST; then the overrides the change leaves are checked
//!   whole (names, then values: INVALID_CONFIG), and only then must the
//!   topic exist (UNKNOWN_TOPIC_OR_PARTITION);
//! - BROKER (this node's id or "" for all brokers, else INVALID_REQUEST):
//!   doze's broker properties are all static (DescribeConfigs shows them
//!   read-only, STATIC_BROKER_CONFIG), so setting any is answered as Kafka
//!   answers a property it cannot change while running: INVALID_REQUEST
//!   "Cannot update these configs dynamically". Deleting one is deleting a
//!   dynamic value that is not there: nothing to do, no error, as in Kafka;
//! - BROKER_LOGGER: doze has no loggers to set (Kafka: INVALID_CONFIG "Logger
//!   … does not exist!" in IncrementalAlterConfigs; AlterConfigs does not
//!   know the type);
//! - GROUP and CLIENT_METRICS: not served (doze has no group configs nor
//!   client metrics), INVALID_REQUEST as DescribeConfigs answers them; any
//!   other type INVALID_REQUEST "Unknown resource type".
//!
//! ACL: ALTER_CONFIGS on the topic, or on the cluster for BROKER and BROKER_LOGGER.
//!
//! The changed topics are stored in one meta.db batch and are busy until it
//! completes; the answer and the change in memory come only after it.
//! validate_only checks everything and stores nothing. A resource whose
//! overrides come out unchanged is answered at once, without a write.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::ResponseError;

use super::{create_topics, ApiWrite, RequestCtx};
use crate::api::Cx;
use crate::core_state::Core;
use crate::io::MetaOp;
use crate::meta::{self, TopicRecord};
use crate::security::acl::{resource, Op};
use crate::topic_config::{self, AlterOp};

pub(crate) const RESOURCE_TOPIC: i8 = 2;
pub(crate) const RESOURCE_BROKER: i8 = 4;
pub(crate) const RESOURCE_BROKER_LOGGER: i8 = 8;
pub(crate) const RESOURCE_CLIENT_METRICS: i8 = 16;
pub(crate) const RESOURCE_GROUP: i8 = 32;

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// How a request changes a resource's configs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// AlterConfigs: the entries become the whole set of overrides.
    Replace,
    /// IncrementalAlterConfigs: each entry's operation changes one key.
    Incremental,
}

/// One config entry of a request; AlterConfigs' are all SET.
pub(crate) struct Entry {
    pub name: String,
    pub op: i8,
    pub value: Option<String>,
}

impl Entry {
    pub fn set(name: String, value: Option<String>) -> Self {
        Self {
            name,
            op: OP_SET,
            value,
        }
    }
}

/// One resource of a request.
pub(crate) struct Resource {
    pub resource_type: i8,
    pub name: String,
    pub entries: Vec<Entry>,
}

/// A resource's answer: `error` is `None` for success.
pub(crate) struct Answer {
    pub resource_type: i8,
    pub name: String,
    pub error: Option<(ResponseError, Option<String>)>,
}

/// Writes the response of the API that asked, from its answers.
pub(crate) type Respond = fn(&mut Core, &RequestCtx, Vec<Answer>);

pub struct PendingConfigs {
    ctx: RequestCtx,
    answers: Vec<Answer>,
    /// The stored records, by the index of their answer.
    topics: Vec<(usize, String, TopicRecord)>,
    respond: Respond,
}

type Refusal = (ResponseError, Option<String>);

fn refuse(error: ResponseError, message: impl Into<String>) -> Refusal {
    (error, Some(message.into()))
}

/// Checks every resource, stores the changed topics, and answers through
/// `respond` (at once, or when meta.db has the changes).
pub(crate) fn handle(
    b: &mut Cx,
    ctx: RequestCtx,
    mode: Mode,
    resources: Vec<Resource>,
    validate_only: bool,
    respond: Respond,
) {
    let mut seen = BTreeSet::new();
    let repeated: BTreeSet<(i8, String)> = resources
        .iter()
        .map(|r| (r.resource_type, r.name.clone()))
        .filter(|key| !seen.insert(key.clone()))
        .collect();
    let mut answers = Vec::with_capacity(resources.len());
    let mut topics = Vec::new();
    for r in &resources {
        let checked = if repeated.contains(&(r.resource_type, r.name.clone())) {
            Err(refuse(
                ResponseError::InvalidRequest,
                "Each resource must appear at most once.",
            ))
        } else {
            check(b.core, &ctx, mode, r)
        };
        let error = match checked {
            Ok(Some(record)) if !validate_only => {
                topics.push((answers.len(), r.name.clone(), record));
                None
            }
            Ok(_) => None,
            Err(refusal) => Some(refusal),
        };
        answers.push(Answer {
            resource_type: r.resource_type,
            name: r.name.clone(),
            error,
        });
    }
    if topics.is_empty() {
        return respond(b.core, &ctx, answers);
    }
    let ops = topics
        .iter()
        .map(|(_, name, record)| MetaOp::Put {
            key: meta::topic_key(name),
            value: meta::encode(record),
        })
        .collect();
    for (_, name, _) in &topics {
        b.core.mark_topic_busy(name);
    }
    b.emit_meta(
        ops,
        ApiWrite::AlterConfigs(PendingConfigs {
            ctx,
            answers,
            topics,
            respond,
        }),
    );
}

/// One resource: `Ok(Some(record))` is a topic record to store, `Ok(None)`
/// a success with nothing to store. The ACLs are asked where Kafka asks: its
/// broker checks a request's shape (and a BROKER change whole) before
/// forwarding it to the controller, which authorizes first; a BROKER_LOGGER
/// is authorized first, on the broker.
fn check(
    b: &Core,
    ctx: &RequestCtx,
    mode: Mode,
    r: &Resource,
) -> Result<Option<TopicRecord>, Refusal> {
    match r.resource_type {
        RESOURCE_TOPIC => check_topic(b, ctx, mode, r),
        RESOURCE_BROKER => {
            check_broker_id(b, &r.name)?;
            check_entries(mode, r)?;
            let set: Vec<&str> = r
                .entries
                .iter()
                .filter(|e| mode == Mode::Replace || e.op != OP_DELETE)
                .map(|e| e.name.as_str())
                .collect();
            if !set.is_empty() {
                return Err(refuse(
                    ResponseError::InvalidRequest,
                    format!(
                        "Cannot update these configs dynamically: [{}]",
                        set.join(", ")
                    ),
                ));
            }
            if !may_alter_cluster_configs(b, ctx) {
                return Err(refuse(
                    ResponseError::ClusterAuthorizationFailed,
                    "Cluster authorization failed.",
                ));
            }
            Ok(None)
        }
        RESOURCE_BROKER_LOGGER if mode == Mode::Incremental => {
            if !may_alter_cluster_configs(b, ctx) {
                // Kafka's RuntimeLoggerManager throws it with the error's
                // own text, which its ApiError then leaves out.
                return Err((ResponseError::ClusterAuthorizationFailed, None));
            }
            check_broker_id(b, &r.name)?;
            match r.entries.first() {
                None => Ok(None),
                Some(e) => Err(refuse(
                    ResponseError::InvalidConfig,
                    format!("Logger {} does not exist!", e.name),
                )),
            }
        }
        RESOURCE_GROUP | RESOURCE_CLIENT_METRICS => Err(refuse(
            ResponseError::InvalidRequest,
            "Unsupported resource type",
        )),
        other => Err(refuse(
            ResponseError::InvalidRequest,
            format!("Unknown resource type {other}"),
        )),
    }
}

fn may_alter_cluster_configs(b: &Core, ctx: &RequestCtx) -> bool {
    b.authorized(ctx, Op::AlterConfigs, resource::CLUSTER, "kafka-cluster")
}

fn check_broker_id(b: &Core, name: &str) -> Result<(), Refusal> {
    let id = b.config().node_id;
    if name.is_empty() || name == id.to_string() {
        return Ok(());
    }
    Err(refuse(
        ResponseError::InvalidRequest,
        format!("Unexpected broker id, expected {id}, but received {name}"),
    ))
}

/// What any resource's entries must be: each key once, an operation Kafka
/// knows, a value unless the operation deletes.
fn check_entries(mode: Mode, r: &Resource) -> Result<(), Refusal> {
    let mut keys = BTreeSet::new();
    if !r.entries.iter().all(|e| keys.insert(e.name.as_str())) {
        return Err(refuse(
            ResponseError::InvalidRequest,
            "Error due to duplicate config keys",
        ));
    }
    for e in &r.entries {
        if !(OP_SET..=OP_SUBTRACT).contains(&e.op) {
            // Kafka answers an operation it does not know with
            // UNKNOWN_SERVER_ERROR (its enum lookup throws).
            return Err(refuse(
                ResponseError::UnknownServerError,
                format!("Unknown config operation {}", e.op),
            ));
        }
        let deletes = mode == Mode::Incremental && e.op == OP_DELETE;
        if e.value.is_none() && !deletes {
            return Err(refuse(
                ResponseError::InvalidRequest,
                format!("Null value not supported for : {}", e.name),
            ));
        }
    }
    Ok(())
}

fn check_topic(
    b: &Core,
    ctx: &RequestCtx,
    mode: Mode,
    r: &Resource,
) -> Result<Option<TopicRecord>, Refusal> {
    let name = r.name.as_str();
    if name.is_empty() {
        return Err(refuse(
            ResponseError::InvalidRequest,
            "Default topic resources are not allowed.",
        ));
    }
    create_topics::validate_name(name)
        .map_err(|m| (ResponseError::InvalidTopicException, Some(m)))?;
    check_entries(mode, r)?;
    if !b.authorized(ctx, Op::AlterConfigs, resource::TOPIC, name) {
        return Err(refuse(
            ResponseError::TopicAuthorizationFailed,
            "Topic authorization failed.",
        ));
    }
    let topic = b.topics().get(name);
    let empty = BTreeMap::new();
    let current = topic.map_or(&empty, |t| &t.record.configs);
    let next = match mode {
        Mode::Replace => {
            let given = r
                .entries
                .iter()
                .map(|e| (e.name.clone(), e.value.clone().expect("checked")))
                .collect();
            topic_config::check_all(&given)
        }
        Mode::Incremental => {
            let ops: Vec<(String, AlterOp)> = r
                .entries
                .iter()
                .map(|e| {
                    let value = || e.value.clone().expect("checked");
                    let op = match e.op {
                        OP_SET => AlterOp::Set(value()),
                        OP_DELETE => AlterOp::Delete,
                        OP_APPEND => AlterOp::Append(value()),
                        OP_SUBTRACT => AlterOp::Subtract(value()),
                        other => unreachable!("operation {other} was checked"),
                    };
                    (e.name.clone(), op)
                })
                .collect();
            topic_config::alter(b.config(), current, &ops)
        }
    }
    .map_err(|m| (ResponseError::InvalidConfig, Some(m)))?;
    let Some(topic) = topic else {
        return Err(refuse(
            ResponseError::UnknownTopicOrPartition,
            format!("The topic '{name}' does not exist."),
        ));
    };
    if next == topic.record.configs {
        return Ok(None);
    }
    Ok(Some(TopicRecord {
        configs: next,
        ..topic.record.clone()
    }))
}

/// The meta.db write completed: the stored configs are put in force, and the
/// request is answered (a failed write answers UNKNOWN_SERVER_ERROR for the
/// topics it held, and nothing changes).
pub(crate) fn apply(b: &mut Cx, pending: PendingConfigs, stored: bool) {
    let PendingConfigs {
        ctx,
        mut answers,
        topics,
        respond,
    } = pending;
    for (at, name, record) in topics {
        b.core.unmark_topic_busy(&name);
        if !stored {
            answers[at].error = Some(refuse(
                ResponseError::UnknownServerError,
                "meta.db write failed",
            ));
            continue;
        }
        // The topic was busy while the write was in flight, so nothing
        // deleted or replaced it meanwhile.
        let same_topic = b
            .core
            .topics()
            .get(&name)
            .is_some_and(|t| t.record.id == record.id);
        assert!(same_topic, "topic {name} changed under its config write");
        b.core.set_topic_configs(&name, record);
    }
    respond(b.core, &ctx, answers);
}
