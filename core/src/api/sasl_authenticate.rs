//! SaslAuthenticate (key 36), v0–v2.
//!
//! Carries one token of the mechanism SaslHandshake chose and answers the
//! broker's next one (`security::sasl`): PLAIN in one round trip, SCRAM in
//! two. A failure answers SASL_AUTHENTICATION_FAILED with Kafka's message
//! (the reason is logged, not told) and closes the connection, as Kafka's
//! SaslServerAuthenticator does; a request outside an exchange (on a
//! listener without SASL, or after success) answers ILLEGAL_SASL_STATE.
//! session_lifetime_ms is 0: no re-authentication is asked
//! (`connections.max.reauth.ms` is not served).

use bytes::Bytes;
use kafka_protocol::messages::{ResponseKind, SaslAuthenticateRequest, SaslAuthenticateResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::security::sasl::{failure_message, Step};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: SaslAuthenticateRequest) {
    if !b.core.on_sasl_listener(ctx.conn) || b.core.sasl_done(ctx.conn) {
        let response = SaslAuthenticateResponse::default()
            .with_error_code(ResponseError::IllegalSaslState.code())
            .with_error_message(Some(StrBytes::from_static_str(
                "SaslAuthenticate request received outside a SASL exchange",
            )));
        return b
            .core
            .respond(&ctx, ResponseKind::SaslAuthenticate(response));
    }
    let mechanism = b.core.sasl_mechanism(ctx.conn);
    match b.core.sasl_authenticate(ctx.conn, &req.auth_bytes) {
        Step::Continue(token) | Step::Done { token, .. } => {
            let response = SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(token));
            b.core
                .respond(&ctx, ResponseKind::SaslAuthenticate(response));
        }
        Step::Failed(_) => {
            let response = SaslAuthenticateResponse::default()
                .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                .with_error_message(Some(StrBytes::from_string(failure_message(&mechanism))));
            b.core
                .respond(&ctx, ResponseKind::SaslAuthenticate(response));
            b.core.close(ctx.conn);
        }
    }
}
