//! A client's end of its connection: Kafka request frames built with
//! kafka-protocol's real structs (RequestHeader + body), and responses decoded
//! with the header version of the API and version that was asked, as a Kafka
//! client does. No private shortcuts: what the broker sees is what any
//! client would send.

use std::collections::BTreeMap;

use bytes::Bytes;
use doze_core::ConnId;
use doze_testkit::frame::request_frame;
use kafka_protocol::messages::{ApiKey, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    Down,
    Connecting,
    Up(ConnId),
}

pub struct Wire {
    pub state: ConnState,
    client_id: StrBytes,
    next_correlation: i32,
    /// Requests sent on the current connection, awaiting an answer, with
    /// when each was sent.
    asked: BTreeMap<i32, (ApiKey, i16, i64)>,
    /// Simulated time, set by the world before it drives the client.
    pub(crate) now_ms: i64,
    /// Frames to put on the network, taken by the world.
    pub(crate) outbox: Vec<(ConnId, Bytes)>,
}

impl Wire {
    pub fn new(client_id: String) -> Self {
        Self {
            state: ConnState::Down,
            client_id: StrBytes::from_string(client_id),
            next_correlation: 1,
            asked: BTreeMap::new(),
            now_ms: 0,
            outbox: Vec::new(),
        }
    }

    pub fn conn(&self) -> Option<ConnId> {
        match self.state {
            ConnState::Up(conn) => Some(conn),
            _ => None,
        }
    }

    /// Sends a request; returns its correlation id, or None when there is no
    /// connection to send it on.
    pub fn send<R: Request + Encodable>(&mut self, version: i16, req: &R) -> Option<i32> {
        let conn = self.conn()?;
        let key = ApiKey::try_from(R::KEY).expect("a request type has a known key");
        let correlation_id = self.next_correlation;
        self.next_correlation = self.next_correlation.wrapping_add(1);
        let frame = request_frame(version, correlation_id, Some(self.client_id.clone()), req)
            .unwrap_or_else(|e| panic!("{key:?} v{version} does not encode: {e}"));
        self.asked
            .insert(correlation_id, (key, version, self.now_ms));
        self.outbox.push((conn, frame));
        Some(correlation_id)
    }

    /// Decodes a response frame (size prefix removed) to a request we sent.
    pub fn decode(&mut self, mut frame: Bytes) -> Result<(i32, ResponseKind), String> {
        if frame.len() < 4 {
            return Err(format!("a {}-byte response frame", frame.len()));
        }
        let correlation_id = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        let (key, version, _) = self.asked.remove(&correlation_id).ok_or_else(|| {
            format!("a response to correlation id {correlation_id}, which was never asked")
        })?;
        let header = ResponseHeader::decode(&mut frame, key.response_header_version(version))
            .map_err(|e| format!("{key:?} v{version}: bad response header: {e}"))?;
        assert_eq!(
            header.correlation_id, correlation_id,
            "the header holds the id read above"
        );
        let body = ResponseKind::decode(key, &mut frame, version)
            .map_err(|e| format!("{key:?} v{version}: undecodable response: {e}"))?;
        if !frame.is_empty() {
            return Err(format!(
                "{key:?} v{version}: {} bytes left after the response body",
                frame.len()
            ));
        }
        Ok((correlation_id, body))
    }

    /// The connection is gone: nothing sent on it will be answered.
    pub fn reset(&mut self) {
        self.state = ConnState::Down;
        self.asked.clear();
        self.outbox.clear();
    }

    pub fn awaiting(&self) -> usize {
        self.asked.len()
    }

    /// The request unanswered the longest: (correlation id, API, sent at).
    pub fn oldest_asked(&self) -> Option<(i32, ApiKey, i64)> {
        self.asked
            .iter()
            .map(|(&corr, &(key, _, sent_ms))| (corr, key, sent_ms))
            .min_by_key(|&(corr, _, sent_ms)| (sent_ms, corr))
    }
}
