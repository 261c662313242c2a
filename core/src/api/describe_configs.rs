//! DescribeConfigs (key 32), v1–v4.
//!
//! Topics (resource type 2): every topic config Kafka 4.3.1 has
//! (`topic_config::TOPIC_CONFIGS`, the ones with no effect on one node
//! included), with the topic's override (source DYNAMIC_TOPIC_CONFIG), the
//! broker property that backs it (STATIC_BROKER_CONFIG) or the default
//! (DEFAULT_CONFIG), and Kafka's type for it (v3+). With include_synonyms
//! (v1+) each lists its synonyms as Kafka does (`topic_config::describe`:
//! the override, then the broker property set and Kafka's default of it);
//! with include_documentation (v3+) its documentation says what it does on
//! doze. None is read-only or sensitive.
//!
//! The broker (type 4, named by its node id or ""): its properties,
//! read-only (doze changes none while running), from the command line or
//! config file (STATIC_BROKER_CONFIG) or doze's default (DEFAULT_CONFIG),
//! with those as synonyms. `configuration_keys` filters both.
//!
//! ACL: DESCRIBE_CONFIGS on the topic, or on the cluster for the broker.

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::config::BrokerConfig;
use crate::core_state::Core;
use crate::security::acl::{resource, Op};
use crate::topic_config::{self, Source, Synonym, TOPIC_CONFIGS};

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const TYPE_STRING: i8 = 2;

/// What the request asks to be told besides each value.
#[derive(Clone, Copy)]
struct Asked {
    synonyms: bool,
    documentation: bool,
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: DescribeConfigsRequest) {
    let asked = Asked {
        synonyms: req.include_synonyms,
        // The field is not in v1-v2: the answer has no room for it.
        documentation: req.include_documentation && ctx.version >= 3,
    };
    let results = req
        .resources
        .iter()
        .map(|r| match refusal(b.core, &ctx, r) {
            Some(refused) => refused,
            None => describe(b.core, r, asked),
        })
        .collect();
    b.core.respond(
        &ctx,
        ResponseKind::DescribeConfigs(DescribeConfigsResponse::default().with_results(results)),
    );
}

/// The answer for a resource the ACLs refuse, if they do (Kafka's
/// ConfigHelper: the error, its text, no configs).
fn refusal(
    b: &Core,
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

fn synonym(s: &Synonym) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(StrBytes::from_string(s.name.clone()))
        .with_value(Some(StrBytes::from_string(s.value.clone())))
        .with_source(s.source.code())
}

/// One described config; `synonyms` and `doc` are sent only when asked.
struct Entry<'a> {
    name: &'a str,
    value: String,
    read_only: bool,
    source: Source,
    config_type: i8,
    synonyms: Vec<Synonym>,
    doc: Option<&'a str>,
}

fn entry(e: Entry<'_>, asked: Asked) -> DescribeConfigsResourceResult {
    let synonyms = match asked.synonyms {
        true => e.synonyms.iter().map(synonym).collect(),
        false => Vec::new(),
    };
    DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_string(e.name.to_string()))
        .with_value(Some(StrBytes::from_string(e.value)))
        .with_read_only(e.read_only)
        .with_config_source(e.source.code())
        .with_config_type(e.config_type)
        .with_synonyms(synonyms)
        // Kafka sends null unless include_documentation asks, not an
        // empty text.
        .with_documentation(
            e.doc
                .filter(|_| asked.documentation)
                .map(|d| StrBytes::from_string(d.to_string())),
        )
}

/// A broker property as described: set in the config file or by a flag
/// (STATIC_BROKER_CONFIG, with what was given), else doze's default. The
/// advertised listeners always come from how the broker was started.
fn broker_entry<'a>(
    config: &BrokerConfig,
    defaults: &[(&str, String)],
    name: &'a str,
    value: String,
) -> Entry<'a> {
    let mut synonyms: Vec<Synonym> = BrokerConfig::set_by(name)
        .into_iter()
        .filter_map(|key| {
            Some(Synonym {
                name: key.to_string(),
                value: config.properties_set.get(key)?.clone(),
                source: Source::StaticBroker,
            })
        })
        .collect();
    let started_with = name == "advertised.listeners";
    if started_with && synonyms.is_empty() {
        synonyms.push(Synonym {
            name: name.to_string(),
            value: value.clone(),
            source: Source::StaticBroker,
        });
    }
    if let Some((_, default)) = defaults.iter().find(|(n, _)| *n == name) {
        if !started_with {
            synonyms.push(Synonym {
                name: name.to_string(),
                value: default.clone(),
                source: Source::Default,
            });
        }
    }
    Entry {
        name,
        source: synonyms.first().map_or(Source::Default, |s| s.source),
        value,
        read_only: true,
        config_type: TYPE_STRING,
        synonyms,
        doc: None,
    }
}

fn describe(
    b: &Core,
    r: &kafka_protocol::messages::describe_configs_request::DescribeConfigsResource,
    asked: Asked,
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
                .filter(|spec| wanted(spec.name))
                .map(|spec| {
                    let d = topic_config::describe(b.config(), &topic.record.configs, spec);
                    let e = Entry {
                        name: spec.name,
                        value: d.value,
                        read_only: false,
                        source: d.source,
                        config_type: spec.kind.describe_type(),
                        synonyms: d.synonyms,
                        doc: Some(spec.doc),
                    };
                    entry(e, asked)
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
            let config = b.config();
            let defaults = BrokerConfig::default().describe();
            let configs = config
                .describe()
                .into_iter()
                .filter(|(n, _)| wanted(n))
                .map(|(n, v)| entry(broker_entry(config, &defaults, n, v), asked))
                .collect();
            base.with_configs(configs)
        }
        _ => base
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(StrBytes::from_static_str("Unsupported resource type"))),
    }
}
