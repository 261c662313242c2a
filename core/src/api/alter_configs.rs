//! AlterConfigs (key 33), v0–v2.
//!
//! The older, whole-set form: a topic's overrides become exactly the entries
//! given (one left out goes back to its default; none at all clears them),
//! checked with Kafka's rules and messages, stored in meta.db, and in force
//! from the moment the answer is sent. validate_only checks and stores
//! nothing. Broker resources and the other resource types are answered as
//! `config_writes` says.
//!
//! ACL: ALTER_CONFIGS on the topic, or on the cluster for the broker (`config_writes`).

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::config_writes::{self, Answer, Entry, Mode, Resource};
use super::RequestCtx;
use crate::api::Cx;
use crate::core_state::Core;

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: AlterConfigsRequest) {
    let resources = req
        .resources
        .iter()
        .map(|r| Resource {
            resource_type: r.resource_type,
            name: r.resource_name.to_string(),
            entries: r
                .configs
                .iter()
                .map(|c| Entry::set(c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect(),
        })
        .collect();
    config_writes::handle(b, ctx, Mode::Replace, resources, req.validate_only, respond);
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
        ResponseKind::AlterConfigs(AlterConfigsResponse::default().with_responses(responses)),
    );
}
