//! CreatePartitions (key 37), v0–v3.
//!
//! Grows a topic to `count` partitions (never shrinks: INVALID_PARTITIONS).
//! Assignments, when given, must name only this broker. validate_only checks
//! and stores nothing. The grown record is stored in meta.db first.
//!
//! ACL: ALTER on each topic (else TOPIC_AUTHORIZATION_FAILED).

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{ApiWrite, RequestCtx};
use crate::api::Cx;
use crate::core_state::Core;
use crate::io::MetaOp;
use crate::limits;
use crate::meta::{self, TopicRecord};
use crate::security::acl::{resource, Op};

pub struct PendingGrow {
    ctx: RequestCtx,
    response: CreatePartitionsResponse,
    topics: Vec<(String, TopicRecord)>,
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: CreatePartitionsRequest) {
    let mut response = CreatePartitionsResponse::default();
    let mut grown = Vec::new();
    for t in &req.topics {
        let name = t.name.0.to_string();
        let mut result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
        if req.topics.iter().filter(|o| o.name == t.name).count() > 1 {
            result.error_code = ResponseError::InvalidRequest.code();
            result.error_message = Some(StrBytes::from_static_str("Duplicate topic in request."));
            response.results.push(result);
            continue;
        }
        if !b.core.authorized(&ctx, Op::Alter, resource::TOPIC, &name) {
            result.error_code = ResponseError::TopicAuthorizationFailed.code();
            response.results.push(result);
            continue;
        }
        match check(
            b.core,
            &name,
            t.count,
            t.assignments
                .as_ref()
                .map(|a| a.iter().map(|x| x.broker_ids.clone()).collect()),
        ) {
            Err((error, message)) => {
                result.error_code = error.code();
                result.error_message = Some(StrBytes::from_string(message));
            }
            Ok(record) if !req.validate_only => grown.push((name, record)),
            Ok(_) => {}
        }
        response.results.push(result);
    }
    if grown.is_empty() {
        return b
            .core
            .respond(&ctx, ResponseKind::CreatePartitions(response));
    }
    for (n, _) in &grown {
        b.core.mark_topic_busy(n);
    }
    let ops = grown
        .iter()
        .map(|(n, r)| MetaOp::Put {
            key: meta::topic_key(n),
            value: meta::encode(r),
        })
        .collect();
    b.emit_meta(
        ops,
        ApiWrite::CreatePartitions(PendingGrow {
            ctx,
            response,
            topics: grown,
        }),
    );
}

type Assignments = Option<Vec<Vec<kafka_protocol::messages::BrokerId>>>;

fn check(
    b: &Core,
    name: &str,
    count: i32,
    assignments: Assignments,
) -> Result<TopicRecord, (ResponseError, String)> {
    let Some(topic) = b.topics().get(name) else {
        return Err((
            ResponseError::UnknownTopicOrPartition,
            format!("The topic '{name}' does not exist."),
        ));
    };
    let current = topic.partitions.len() as i32;
    if count <= current {
        let m = format!("Topic currently has {current} partitions, which is higher than or equal to the requested {count}.");
        return Err((ResponseError::InvalidPartitions, m));
    }
    if count > limits::TOPIC_PARTITIONS_MAX {
        return Err((
            ResponseError::InvalidPartitions,
            format!("At most {} partitions", limits::TOPIC_PARTITIONS_MAX),
        ));
    }
    if let Some(assignments) = assignments {
        if assignments.len() as i32 != count - current {
            return Err((
                ResponseError::InvalidReplicaAssignment,
                "One assignment per new partition".into(),
            ));
        }
        if assignments
            .iter()
            .any(|a| a.len() != 1 || a[0].0 != b.config().node_id)
        {
            return Err((
                ResponseError::InvalidReplicaAssignment,
                "Replicas must be exactly this broker".into(),
            ));
        }
    }
    Ok(TopicRecord {
        partitions: count,
        ..topic.record.clone()
    })
}

pub(crate) fn apply(b: &mut Cx, mut pending: PendingGrow, stored: bool) {
    for (name, record) in pending.topics {
        b.core.unmark_topic_busy(&name);
        if !stored {
            for r in pending
                .response
                .results
                .iter_mut()
                .filter(|r| r.name.0.as_str() == name)
            {
                r.error_code = ResponseError::UnknownServerError.code();
                r.error_message = Some(StrBytes::from_static_str("meta.db write failed"));
            }
            continue;
        }
        let same_topic = b
            .core
            .topics()
            .get(&name)
            .is_some_and(|t| t.record.id == record.id);
        if same_topic {
            b.core.grow_topic(&name, record);
        }
    }
    b.core.respond(
        &pending.ctx,
        ResponseKind::CreatePartitions(pending.response),
    );
}
