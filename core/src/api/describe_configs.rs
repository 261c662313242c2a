//! DescribeConfigs (key 32), v1–v4.
//!
//! Topics (resource type 2): every topic config this broker knows, with the
//! topic's override (source DYNAMIC_TOPIC_CONFIG) or the broker's default
//! (DEFAULT_CONFIG), and Kafka's type for it (LIST for cleanup.policy,
//! DOUBLE, INT, LONG, STRING). The broker (type 4, named by its node id or
//! ""): its properties, read-only (they come from the command line or config
//! file: STATIC_BROKER_CONFIG). `configuration_keys` filters; synonyms are not
//! reported (an empty list, which clients accept).
//!
//! ACL: DESCRIBE_CONFIGS on the topic, or on the cluster for the broker.

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::broker::Broker;
use crate::security::acl::{resource, Op};
use crate::topic_config::{self, TOPIC_CONFIGS};

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
const TYPE_STRING: i8 = 2;

pub(crate) fn handle(b: &mut Broker, ctx: RequestCtx, req: DescribeConfigsRequest) {
    let results = req
        .resources
        .iter()
        .map(|r| match refusal(b, &ctx, r) {
            Some(refused) => refused,
            None => describe(b, r),
        })
        .collect();
    b.respond(
        &ctx,
        ResponseKind::DescribeConfigs(DescribeConfigsResponse::default().with_results(results)),
    );
}

/// The answer for a resource the ACLs refuse, if they do (Kafka's
/// ConfigHelper: the error, its text, no configs).
fn refusal(
    b: &Broker,
    ctx: &RequestCtx,
    r: &kafka_protocol::messages::describe_configs_request::DescribeConfigsResource,
) -> Option<DescribeConfigsResult> {
    let (error, message) = match r.resource_type {
        RESOURCE_TOPIC
            if !b.authorized(ctx, Op::DescribeConfigs, resource::TOPIC, &r.resource_name) =>
        {
            (
                ResponseError::TopicAuthorizationFailed,
                "Topic authorization failed.",
            )
        }
        RESOURCE_BROKER
            if !b.authorized(ctx, Op::DescribeConfigs, resource::CLUSTER, "kafka-cluster") =>
        {
            (
                ResponseError::ClusterAuthorizationFailed,
                "Cluster authorization failed.",
            )
        }
        _ => return None,
    };
    Some(
        DescribeConfigsResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone())
            .with_error_code(error.code())
            .with_error_message(Some(StrBytes::from_static_str(message)))
            .with_configs(Vec::new()),
    )
}

fn entry(
    name: &str,
    value: String,
    read_only: bool,
    source: i8,
    config_type: i8,
) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_string(name.to_string()))
        .with_value(Some(StrBytes::from_string(value)))
        .with_read_only(read_only)
        .with_config_source(source)
        .with_config_type(config_type)
        // Kafka sends null unless include_documentation asks (it never
        // does from the tools), not an empty text.
        .with_documentation(None)
}

fn describe(
    b: &Broker,
    r: &kafka_protocol::messages::describe_configs_request::DescribeConfigsResource,
) -> DescribeConfigsResult {
    let wanted = |name: &str| {
        r.configuration_keys
            .as_ref()
            .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
    };
    let base = DescribeConfigsResult::default()
        .with_resource_type(r.resource_type)
        .with_resource_name(r.resource_name.clone());
    match r.resource_type {
        RESOURCE_TOPIC => {
            let Some(topic) = b.topics().get(r.resource_name.as_str()) else {
                return base
                    .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                    .with_error_message(Some(StrBytes::from_string(format!(
                        "Topic {} does not exist",
                        r.resource_name
                    ))));
            };
            let configs = TOPIC_CONFIGS
                .iter()
                .filter(|(name, _)| wanted(name))
                .map(|(name, kind)| {
                    let config_type = kind.describe_type();
                    match topic.record.configs.get(*name) {
                        Some(v) => entry(name, v.clone(), false, SOURCE_DYNAMIC_TOPIC, config_type),
                        None => {
                            let v =
                                topic_config::default_value(b.config(), name).unwrap_or_default();
                            entry(name, v, false, SOURCE_DEFAULT, config_type)
                        }
                    }
                })
                .collect();
            base.with_configs(configs)
        }
        RESOURCE_BROKER => {
            let name = r.resource_name.as_str();
            if !name.is_empty() && name != b.config().node_id.to_string() {
                return base
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(StrBytes::from_string(format!(
                        "No broker {name} here"
                    ))));
            }
            let configs = b
                .config()
                .describe()
                .into_iter()
                .filter(|(n, _)| wanted(n))
                .map(|(n, v)| entry(n, v, true, SOURCE_STATIC_BROKER, TYPE_STRING))
                .collect();
            base.with_configs(configs)
        }
        _ => base
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(StrBytes::from_static_str("Unsupported resource type"))),
    }
}
