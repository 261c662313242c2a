//! Responses out: each answer leaves only after every earlier request of
//! the same connection has been answered; connections opened by a request,
//! and closed.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ResponseHeader, ResponseKind};
use kafka_protocol::protocol::Encodable;

use super::Core;
use crate::boundary::Output;
use crate::conn::Frame;
use crate::io::{ConnId, FramePart};
use crate::request::RequestCtx;

impl Core {
    /// How many requests of `conn` wait for their answer; a connection
    /// the core did not know is opened by its first request.
    pub(crate) fn requests_in_flight(&mut self, conn: ConnId) -> u64 {
        self.conns.entry(conn).or_default().in_flight()
    }

    /// The sequence number of `conn`'s next request: its answer leaves after
    /// every earlier one's.
    pub(crate) fn take_request_seq(&mut self, conn: ConnId) -> u64 {
        self.conns
            .get_mut(&conn)
            .expect("opened by requests_in_flight")
            .take_seq()
    }

    /// The client went away: what the core holds for it goes.
    pub(crate) fn disconnected(&mut self, conn: ConnId) {
        self.forget_sasl_deadline(conn);
        self.conns.remove(&conn);
        if let Some(boot) = self.booting.as_mut() {
            boot.forget_conn(conn);
        }
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
                Some(Frame::Bytes(frame)) => Output::Response { conn, frame },
                Some(Frame::Parts(parts)) => Output::ResponseParts { conn, parts },
                // Said, in its turn, so that a driver counting the requests
                // it handed in and has not seen answered can count this one.
                None => Output::NoResponse { conn },
            });
        }
    }

    /// Closes a connection; the requests it has parked go with it.
    pub(crate) fn close(&mut self, conn: ConnId) {
        self.forget_sasl_deadline(conn);
        if self.conns.remove(&conn).is_some() {
            // The top drops what the connection had parked (`take_closed`).
            self.closed.push(conn);
            self.outbox.push(Output::Close { conn });
        }
    }
}
