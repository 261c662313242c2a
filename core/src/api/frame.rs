//! Requests in: a frame is decoded and dispatched to its API handler (its
//! answer leaves in the connection's order: `core_state::conns`).

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::Decodable;

use super::Cx;
use crate::io::ConnId;
use crate::produce_checks::ProduceChecks;
use crate::request::RequestCtx;
use crate::versions;

/// Handles one request frame (after start-up: frames that came during it
/// waited and come here in order).
pub(crate) fn handle_frame(cx: &mut Cx, conn: ConnId, frame: Bytes, checks: Option<ProduceChecks>) {
    if cx.core.past_stop_point() {
        // The broker is exiting, its clean-shutdown file written: a request
        // now could only write after it. The client reconnects to the next
        // start, as to a broker that went away.
        tracing::info!(conn, "request after the stop's durable point; closing");
        return cx.core.close(conn);
    }
    if cx.core.sasl_unframed(conn) {
        // After SaslHandshake v0 the tokens come bare, without a header.
        return cx.core.handle_sasl_token(conn, frame);
    }
    // A safety net: a driver that counts the requests it handed in pauses
    // reading before this (net does); one that does not is closed here.
    if cx.core.requests_in_flight(conn) >= crate::limits::CONN_REQUESTS_IN_FLIGHT_MAX as u64 {
        tracing::warn!(
            conn,
            "too many requests in flight (the driver did not pause); closing"
        );
        return cx.core.close(conn);
    }
    // The first 8 bytes are api key, api version and correlation id in every
    // header version; read them raw so an unsupported version can be answered.
    if frame.len() < 8 {
        return cx.core.close(conn);
    }
    let key_raw = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let Ok(api_key) = ApiKey::try_from(key_raw) else {
        tracing::debug!(conn, key_raw, "unknown api key; closing");
        return cx.core.close(conn);
    };
    if !cx.core.sasl_allows(conn, api_key) {
        tracing::info!(
            conn,
            ?api_key,
            "a request before SASL authentication; closing"
        );
        return cx.core.close(conn);
    }
    let seq = cx.core.take_request_seq(conn);
    let mut ctx = RequestCtx {
        conn,
        seq,
        api_key,
        version,
        correlation_id,
        client_id: Default::default(),
    };
    if !versions::is_supported(api_key, version) {
        if api_key == ApiKey::ApiVersions {
            // Kafka answers an unknown ApiVersions version with a v0 body
            // carrying UNSUPPORTED_VERSION and the versions it does serve.
            return super::api_versions::respond_unsupported(cx, ctx);
        }
        tracing::debug!(conn, ?api_key, version, "unsupported version; closing");
        return cx.core.close(conn);
    }
    let mut buf = frame;
    let header_version = api_key.request_header_version(version);
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let header = RequestHeader::decode(&mut buf, header_version)?;
        let request = RequestKind::decode(api_key, &mut buf, version)?;
        anyhow::Ok((header, request))
    }));
    match decoded {
        Ok(Ok((header, request))) => {
            // Kafka names members after their client id.
            // Copied: a decoded string is a slice of the request frame,
            // and the context lives as long as the request waits (a
            // produce until its fsync), which would keep the whole frame.
            let client_id = header.client_id.unwrap_or_default();
            ctx.client_id = kafka_protocol::protocol::StrBytes::from_string(client_id.to_string());
            // Taken by Produce; never left for another request.
            cx.set_produce_checks(checks);
            super::dispatch(cx, ctx, request);
            cx.set_produce_checks(None);
        }
        Ok(Err(e)) => {
            tracing::debug!(
                conn,
                ?api_key,
                version,
                "undecodable request ({e}); closing"
            );
            cx.core.close(conn)
        }
        Err(_) => {
            tracing::warn!(conn, ?api_key, version, "decoder panicked; closing");
            cx.core.close(conn)
        }
    }
}
