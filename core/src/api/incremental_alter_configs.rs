//! IncrementalAlterConfigs (key 44), v0–v1.
//!
//! Changes topic configs key by key: SET (the value becomes the topic's
//! override), DELETE (back to the broker default), APPEND and SUBTRACT (items
//! join or leave a list config: cleanup.policy). The overrides a change
//! leaves are checked whole with Kafka's rules and messages, stored in
//! meta.db, and in force (segment.bytes, segment.ms, retention.*,
//! message.timestamp.type, ...) from the moment the answer is sent.
//! validate_only checks and stores nothing. Broker resources and the other
//! resource types are answered as `config_writes` says.
//!
//! ACL: ALTER_CONFIGS on the topic, or on the cluster for the broker (`config_writes`).

use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::config_writes::{self, Answer, Entry, Mode, Resource};
use super::RequestCtx;
use crate::api::Cx;
use crate::core_state::Core;

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: IncrementalAlterConfigsRequest) {
    let resources = req
        .resources
        .iter()
        .map(|r| Resource {
            resource_type: r.resource_type,
            name: r.resource_name.to_string(),
            entries: r
                .configs
                .iter()
                .map(|c| Entry {
                    name: c.name.to_string(),
                    op: c.config_operation,
                    value: c.value.as_ref().map(|v| v.to_string()),
                })
                .collect(),
        })
        .collect();
    config_writes::handle(
        b,
        ctx,
        Mode::Incremental,
        resources,
        req.validate_only,
        respond,
    );
}

fn respond(b: &mut Core, ctx: &RequestCtx, answers: Vec<Answer>) {
    let responses = answers
        .into_iter()
        .map(|a| {
            let (code, message) = a.error.map_or((0, None), |(e, m)| (e.code(), m));
            AlterConfigsResourceResponse::default()
                .with_resource_type(a.resource_type)
                .with_resource_name(StrBytes::from_string(a.name))
                .with_error_code(code)
                .with_error_message(message.map(StrBytes::from_string))
        })
        .collect();
    b.respond(
        ctx,
        ResponseKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsResponse::default().with_responses(responses),
        ),
    );
}
