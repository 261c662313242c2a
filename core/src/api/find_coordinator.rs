//! FindCoordinator (key 10), v0–v6.
//!
//! This broker is the only node, so it coordinates every group (key type 0)
//! and every transactional id (key type 1): the answer is always this node.
//! v4+ asks for many keys at once (`coordinator_keys`) and gets one entry per
//! key. Other key types (2, share groups) get INVALID_REQUEST, as Kafka
//! answers a type it does not serve. COORDINATOR_NOT_AVAILABLE never happens.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::broker::Broker;

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

pub(crate) fn handle(b: &mut Broker, ctx: RequestCtx, req: FindCoordinatorRequest) {
    let served = matches!(req.key_type, KEY_TYPE_GROUP | KEY_TYPE_TRANSACTION);
    let (host, port) = b.advertised_address(ctx.conn);
    let host = StrBytes::from_string(host);
    let node_id = BrokerId(b.config().node_id);
    let (code, message) = if served {
        (0, None)
    } else {
        let text = format!("Unsupported coordinator key type {}", req.key_type);
        (
            ResponseError::InvalidRequest.code(),
            Some(StrBytes::from_string(text)),
        )
    };
    let mut response = FindCoordinatorResponse::default();
    if ctx.version >= 4 {
        response.coordinators = req
            .coordinator_keys
            .iter()
            .map(|key| {
                let c = Coordinator::default()
                    .with_key(key.clone())
                    .with_error_code(code);
                if served {
                    c.with_node_id(node_id)
                        .with_host(host.clone())
                        .with_port(port)
                } else {
                    c.with_node_id(BrokerId(-1))
                        .with_port(-1)
                        .with_error_message(message.clone())
                }
            })
            .collect();
    } else if served {
        response = response
            .with_node_id(node_id)
            .with_host(host)
            .with_port(port);
    } else {
        response = response
            .with_error_code(code)
            .with_error_message(message)
            .with_node_id(BrokerId(-1))
            .with_port(-1);
    }
    b.respond(&ctx, ResponseKind::FindCoordinator(response));
}
