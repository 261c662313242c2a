//! Requests in, responses out: a frame is decoded and dispatched to its API
//! handler, and each answer leaves only after every earlier request of the
//! same connection has been answered.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::Broker;
use crate::api;
use crate::boundary::Output;
use crate::conn::Frame;
use crate::io::{ConnId, FramePart};
use crate::request::RequestCtx;
use crate::versions;

impl Broker {
    /// Handles one request frame (after start-up: frames that came during it
    /// were parked and come here in order).
    pub(super) fn handle_frame_now(
        &mut self,
        conn: ConnId,
        frame: Bytes,
        checks: Option<crate::produce_checks::ProduceChecks>,
    ) {
        if self.sasl_unframed(conn) {
            // After SaslHandshake v0 the tokens come bare, without a header.
            return self.handle_sasl_token(conn, frame);
        }
        let state = self.conns.entry(conn).or_default();
        if state.in_flight() >= crate::limits::CONN_REQUESTS_IN_FLIGHT_MAX as u64 {
            tracing::warn!(conn, "too many requests in flight; closing");
            return self.close(conn);
        }
        // The first 8 bytes are api key, api version and correlation id in every
        // header version; read them raw so an unsupported version can be answered.
        if frame.len() < 8 {
            return self.close(conn);
        }
        let key_raw = i16::from_be_bytes([frame[0], frame[1]]);
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let Ok(api_key) = ApiKey::try_from(key_raw) else {
            tracing::debug!(conn, key_raw, "unknown api key; closing");
            return self.close(conn);
        };
        if !self.sasl_allows(conn, api_key) {
            tracing::info!(
                conn,
                ?api_key,
                "a request before SASL authentication; closing"
            );
            return self.close(conn);
        }
        let seq = self
            .conns
            .get_mut(&conn)
            .expect("entry made above")
            .take_seq();
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
                return api::api_versions::respond_unsupported(self, ctx);
            }
            tracing::debug!(conn, ?api_key, version, "unsupported version; closing");
            return self.close(conn);
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
                ctx.client_id =
                    kafka_protocol::protocol::StrBytes::from_string(client_id.to_string());
                // Taken by Produce; never left for another request.
                self.produce_checks = checks;
                api::dispatch(self, ctx, request);
                self.produce_checks = None;
            }
            Ok(Err(e)) => {
                tracing::debug!(
                    conn,
                    ?api_key,
                    version,
                    "undecodable request ({e}); closing"
                );
                self.close(conn)
            }
            Err(_) => {
                tracing::warn!(conn, ?api_key, version, "decoder panicked; closing");
                self.close(conn)
            }
        }
    }

    pub(super) fn handle_disconnected(&mut self, conn: ConnId) {
        self.forget_sasl_deadline(conn);
        self.conns.remove(&conn);
        if let Some(boot) = self.booting.as_mut() {
            boot.forget_conn(conn);
        }
        self.reading.forget_conn(conn);
        self.waiting_fetches.retain(|f| f.ctx.conn != conn);
        self.deferred.retain(|(ctx, _)| ctx.conn != conn);
    }

    /// Sends `response` for request `ctx`, after every earlier request of the
    /// same connection has been answered.
    pub(crate) fn respond(&mut self, ctx: &RequestCtx, response: ResponseKind) {
        let mut buf = BytesMut::new();
        let header = ResponseHeader::default().with_correlation_id(ctx.correlation_id);
        let header_version = ctx.api_key.response_header_version(ctx.version);
        let encoded = header
            .encode(&mut buf, header_version)
            .and_then(|_| response.encode(&mut buf, ctx.version));
        if let Err(e) = encoded {
            // A response we cannot encode is our bug, but the client must not
            // hang waiting: close the connection and say why.
            tracing::error!(?ctx.api_key, ctx.version, "cannot encode response: {e}");
            return self.close(ctx.conn);
        }
        self.release(ctx, Some(buf.freeze()));
    }

    /// Marks request `ctx` as answered with no response (acks=0 produce).
    pub(crate) fn respond_none(&mut self, ctx: &RequestCtx) {
        self.release(ctx, None);
    }

    /// Sends a raw, already encoded body (ApiVersions' v0 fallback).
    pub(crate) fn respond_raw(&mut self, ctx: &RequestCtx, body: Bytes) {
        let mut buf = BytesMut::with_capacity(4 + body.len());
        buf.extend_from_slice(&ctx.correlation_id.to_be_bytes());
        buf.extend_from_slice(&body);
        self.release(ctx, Some(buf.freeze()));
    }

    /// Sends a response made of parts (a Fetch whose records are file ranges).
    pub(crate) fn respond_parts(&mut self, ctx: &RequestCtx, parts: Vec<FramePart>) {
        self.release_frame(ctx, Some(Frame::Parts(parts)));
    }

    /// Sends every answer the group coordinator has queued, in order.
    pub(crate) fn flush_group_answers(&mut self) {
        for (ctx, response) in self.groups.take_outbox() {
            self.respond(&ctx, response);
        }
    }

    fn release(&mut self, ctx: &RequestCtx, frame: Option<Bytes>) {
        self.release_frame(ctx, frame.map(Frame::Bytes));
    }

    fn release_frame(&mut self, ctx: &RequestCtx, frame: Option<Frame>) {
        let Some(conn) = self.conns.get_mut(&ctx.conn) else {
            return; // the connection is gone; nobody to answer
        };
        for frame in conn.finish(ctx.seq, frame) {
            let conn = ctx.conn;
            self.outbox.push(match frame {
                Frame::Bytes(frame) => Output::Response { conn, frame },
                Frame::Parts(parts) => Output::ResponseParts { conn, parts },
            });
        }
    }

    /// Closes a connection; the fetches it has waiting go with it.
    pub(crate) fn close(&mut self, conn: ConnId) {
        self.forget_sasl_deadline(conn);
        if self.conns.remove(&conn).is_some() {
            self.waiting_fetches.retain(|f| f.ctx.conn != conn);
            self.outbox.push(Output::Close { conn });
        }
    }
}
