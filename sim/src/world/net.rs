//! The network: connections between clients and the broker, frames with a
//! small latency, in order per connection and direction (TCP). A connection
//! dies with the broker process, or when a network fault drops it; both ends
//! then learn it (the broker through `Input::Disconnected` when it is alive).

use bytes::Bytes;
use doze_core::{recompress, ConnId, Input};
use kafka_protocol::messages::{ApiKey, ResponseKind};
use rand::RngExt;

use super::{Event, World};
use crate::client::wire::ConnState;
use crate::faults::FaultKind;

/// One-way latency of a frame. At least 1 ms, so that a fault injected "right
/// after" something happens before the answers it released arrive.
const NET_LATENCY_MS: std::ops::RangeInclusive<i64> = 1..=3;

impl World {
    fn arrival_ms(&mut self, conn: ConnId, to_broker: bool) -> i64 {
        let at_ms = self.now_ms + self.rng.random_range(NET_LATENCY_MS);
        let last = self
            .last_arrival_ms
            .entry((conn, to_broker))
            .or_insert(at_ms);
        *last = (*last).max(at_ms);
        *last
    }

    pub(super) fn send_to_broker(&mut self, client: usize, conn: ConnId, frame: Bytes) {
        self.note(format!("c{client}#{conn} -> {}", describe_request(&frame)));
        let at_ms = self.arrival_ms(conn, true);
        self.queue.push(at_ms, Event::ToBroker { conn, frame });
    }

    pub(super) fn frame_to_broker(&mut self, conn: ConnId, frame: Bytes) {
        if self.broker.is_none() || !self.conns.contains_key(&conn) {
            return; // the connection died on the way
        }
        if self.process.stopping {
            // After Input::Shutdown the driver reads no more requests; the
            // connection closes when the process exits.
            self.note(format!("#{conn}: frame not read, the broker is stopping"));
            return;
        }
        // As net's connection task does (`recompress::prepare_frame`): a
        // Produce request's records are read, and its batches rebuilt where
        // their topic stores them in another form, before the frame is
        // handed in. Deterministic: a function of the frame and of what the
        // core said of its topics.
        let codecs = &self.process.topic_codecs;
        let input = match recompress::prepare_frame(&frame, |t| codecs.get(t).copied()) {
            Some(prepared) => Input::CheckedFrame {
                conn,
                frame: prepared.frame,
                checks: prepared.checks,
            },
            None => Input::Frame { conn, frame },
        };
        self.broker_input(input);
    }

    /// A response from the broker goes on the wire.
    pub(super) fn send_to_client(&mut self, conn: ConnId, frame: Bytes) {
        let Some(&client) = self.conns.get(&conn) else {
            return;
        };
        let correlation = frame
            .get(..4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        self.note(format!(
            "broker -> c{client}#{conn} response corr {} {}B",
            correlation.unwrap_or(-1),
            frame.len()
        ));
        let at_ms = self.arrival_ms(conn, false);
        self.queue.push(at_ms, Event::ToClient { conn, frame });
    }

    pub(super) fn frame_to_client(&mut self, conn: ConnId, frame: Bytes) {
        let Some(&client) = self.conns.get(&conn) else {
            return;
        };
        if self.slots[client].wire.state != ConnState::Up(conn) {
            return;
        }
        match self.slots[client].wire.decode(frame) {
            Ok((correlation, response)) => {
                let end_txn_ok = matches!(&response, ResponseKind::EndTxn(r) if r.error_code == 0);
                self.drive(client, |c, cx| c.on_response(cx, correlation, response));
                if end_txn_ok && self.armed.remove(&FaultKind::PowerCutAfterEndTxn) {
                    self.note("fault: power cut the moment EndTxn success was read".into());
                    self.crash(true);
                }
            }
            Err(e) => {
                let what = format!("c{client}#{conn}: {e}");
                self.history.violation(self.elapsed_ms(), what.clone());
                self.note(format!("VIOLATION {what}"));
            }
        }
    }

    pub(super) fn connect(&mut self, client: usize) {
        let slot = &mut self.slots[client];
        if slot.conn.is_some() {
            return; // connected or connecting already
        }
        let conn = self.next_conn;
        self.next_conn += 1;
        slot.conn = Some(conn);
        slot.wire.state = ConnState::Connecting;
        let at_ms = self.now_ms + self.rng.random_range(NET_LATENCY_MS);
        if self.broker.is_some() && !self.process.stopping {
            self.conns.insert(conn, client);
            self.queue.push(at_ms, Event::Connected { client, conn });
        } else {
            // Connection refused: nobody listens while the broker restarts
            // (or stops).
            self.queue
                .push(at_ms, Event::ClientDisconnected { client, conn });
        }
    }

    pub(super) fn connected(&mut self, client: usize, conn: ConnId) {
        if self.slots[client].conn != Some(conn) || !self.conns.contains_key(&conn) {
            return;
        }
        self.slots[client].wire.state = ConnState::Up(conn);
        self.note(format!("c{client}#{conn} connected"));
        self.drive(client, |c, cx| c.on_connected(cx));
    }

    pub(super) fn client_disconnected(&mut self, client: usize, conn: ConnId) {
        if self.slots[client].conn != Some(conn) {
            return;
        }
        self.slots[client].conn = None;
        self.slots[client].wire.reset();
        self.note(format!("c{client}#{conn} disconnected"));
        self.drive(client, |c, cx| c.on_disconnect(cx));
    }

    /// A client closes its connection (its process died): the broker sees
    /// the socket close; answers on the way are lost.
    pub(super) fn hang_up(&mut self, client: usize) {
        let Some(conn) = self.slots[client].conn.take() else {
            return;
        };
        self.slots[client].wire.reset();
        if self.conns.remove(&conn).is_some() && self.broker.is_some() {
            self.broker_input(Input::Disconnected { conn });
        }
        self.note(format!("c{client}#{conn} hung up"));
    }

    /// Drops every connection. `tell_broker`: the broker is alive and sees
    /// the sockets close.
    pub(super) fn drop_connections(&mut self, tell_broker: bool) {
        let conns = std::mem::take(&mut self.conns);
        for (conn, client) in conns {
            if tell_broker && self.broker.is_some() {
                self.broker_input(Input::Disconnected { conn });
            }
            self.queue
                .push(self.now_ms + 1, Event::ClientDisconnected { client, conn });
        }
    }

    /// The broker closed a connection (`Output::Close`). Our clients send
    /// only well-formed requests, so this is a bug on one side or the other.
    pub(super) fn broker_closed(&mut self, conn: ConnId) {
        if let Some(client) = self.conns.remove(&conn) {
            let what =
                format!("the broker closed c{client}#{conn}, whose requests were well formed");
            self.history.violation(self.elapsed_ms(), what.clone());
            self.note(format!("VIOLATION {what}"));
            self.queue
                .push(self.now_ms + 1, Event::ClientDisconnected { client, conn });
        }
    }
}

/// "Produce v9 corr 12 345B", from the request header's first 8 bytes.
fn describe_request(frame: &Bytes) -> String {
    if frame.len() < 8 {
        return format!("{}B frame", frame.len());
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let name = ApiKey::try_from(key)
        .map(|k| format!("{k:?}"))
        .unwrap_or_else(|_| format!("key {key}"));
    format!("{name} v{version} corr {correlation} {}B", frame.len())
}
