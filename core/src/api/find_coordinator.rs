//! FindCoordinator (key 10), v0–v6.
//!
//! This broker is the only node, so it coordinates every group (key type 0)
//! and every transactional id (key type 1): the answer is always this node.
//! v4+ asks for many keys at once (`coordinator_keys`) and gets one entry per
//! key. Other key types (2, share groups) get INVALID_REQUEST, as Kafka
//! answers a type it does not serve. COORDINATOR_NOT_AVAILABLE never happens.
//!
//! ACL: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) or on the
//! transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), per key from v4.
//! A refused key gets node -1, host "" and port -1; before v4 with the
//! error's text as message (Kafka's getErrorResponse), from v4 with none.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::core_state::Core;
use crate::security::acl::{resource, Op};

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

/// Why the coordinator of `key` is not given, as KafkaApis.getCoordinator
/// decides: the error and, for an unserved key type, a message.
fn refusal(
    b: &Core,
    ctx: &RequestCtx,
    key_type: i8,
    key: &str,
) -> Option<(ResponseError, Option<String>)> {
    match key_type {
        KEY_TYPE_GROUP if !b.authorized(ctx, Op::Describe, resource::GROUP, key) => {
            Some((ResponseError::GroupAuthorizationFailed, None))
        }
        KEY_TYPE_TRANSACTION
            if !b.authorized(ctx, Op::Describe, resource::TRANSACTIONAL_ID, key) =>
        {
            Some((ResponseError::TransactionalIdAuthorizationFailed, None))
        }
        KEY_TYPE_GROUP | KEY_TYPE_TRANSACTION => None,
        other => Some((
            ResponseError::InvalidRequest,
            Some(format!("Unsupported coordinator key type {other}")),
        )),
    }
}

/// Kafka's text of an error (Errors.message()), which answers before v4 carry.
fn error_text(error: ResponseError) -> Option<String> {
    let text = match error {
        ResponseError::GroupAuthorizationFailed => "Group authorization failed.",
        ResponseError::TransactionalIdAuthorizationFailed => {
            "Transactional Id authorization failed."
        }
        _ => return None,
    };
    Some(text.to_string())
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: FindCoordinatorRequest) {
    let (host, port) = b.core.advertised_address(ctx.conn);
    let host = StrBytes::from_string(host);
    let node_id = BrokerId(b.core.config().node_id);
    let mut response = FindCoordinatorResponse::default();
    if ctx.version >= 4 {
        response.coordinators = req
            .coordinator_keys
            .iter()
            .map(|key| {
                let c = Coordinator::default().with_key(key.clone());
                match refusal(b.core, &ctx, req.key_type, key) {
                    None => c
                        .with_node_id(node_id)
                        .with_host(host.clone())
                        .with_port(port),
                    Some((error, message)) => c
                        .with_error_code(error.code())
                        .with_error_message(message.map(StrBytes::from_string))
                        .with_node_id(BrokerId(-1))
                        .with_port(-1),
                }
            })
            .collect();
    } else {
        response = match refusal(b.core, &ctx, req.key_type, &req.key) {
            None => response
                .with_node_id(node_id)
                .with_host(host)
                .with_port(port),
            Some((error, message)) => response
                .with_error_code(error.code())
                .with_error_message(message.or(error_text(error)).map(StrBytes::from_string))
                .with_node_id(BrokerId(-1))
                .with_port(-1),
        };
    }
    b.core
        .respond(&ctx, ResponseKind::FindCoordinator(response));
}
