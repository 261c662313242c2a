//! SaslHandshake (key 17), v0–v1.
//!
//! Names the SASL mechanism a connection on a SASL listener will use, out of
//! `sasl.enabled.mechanisms`; the answer lists those mechanisms whatever
//! happens. UNSUPPORTED_SASL_MECHANISM for another one, ILLEGAL_SASL_STATE
//! for a second handshake or one on a listener without SASL (Kafka's
//! KafkaApis answers the latter so). v1 then takes SaslAuthenticate
//! requests; v0 asks for the old flow where the tokens follow as bare
//! frames (`security::sasl`).

use kafka_protocol::messages::{ResponseKind, SaslHandshakeRequest, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;

use super::RequestCtx;
use crate::api::Cx;

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: SaslHandshakeRequest) {
    let code = match b
        .core
        .sasl_handshake(ctx.conn, req.mechanism.as_str(), ctx.version)
    {
        Ok(()) => 0,
        Err(code) => code,
    };
    let mechanisms = b
        .core
        .sasl_enabled_mechanisms()
        .iter()
        .map(|m| StrBytes::from_string(m.clone()))
        .collect();
    let response = SaslHandshakeResponse::default()
        .with_error_code(code)
        .with_mechanisms(mechanisms);
    b.core.respond(&ctx, ResponseKind::SaslHandshake(response));
}
