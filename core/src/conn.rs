//! Per-connection state: Kafka answers the requests of one connection in the
//! order they arrived, even when a later one (a metadata request) is ready
//! before an earlier one (a produce waiting for its fsync). Each request takes
//! a sequence number; finished responses wait here until every earlier one has
//! gone out.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::io::FramePart;

/// A response ready to go: bytes, or parts with file ranges (Fetch).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Frame {
    Bytes(Bytes),
    Parts(Vec<FramePart>),
}

#[derive(Default)]
pub(crate) struct Conn {
    /// Sequence number the next request will take.
    next_seq: u64,
    /// Sequence number of the next response to release.
    next_release: u64,
    /// Finished requests not yet released; `None` means "no response" (acks=0).
    finished: BTreeMap<u64, Option<Frame>>,
    /// Where the connection comes from (`Input::Connected`), "" if untold.
    pub(crate) client_host: String,
    /// The listener it came in on (the default, PLAINTEXT, if untold).
    pub(crate) listener: crate::security::Listener,
    /// Its SASL exchange, on a SASL listener.
    pub(crate) sasl: crate::security::sasl::SaslState,
    /// Who it is: set when it connects on a listener without SASL (the TLS
    /// certificate's principal, or `User:ANONYMOUS`) and when SASL succeeds.
    pub(crate) principal: Option<String>,
    /// On a SASL listener, until authenticated: when it is closed if it
    /// has not authenticated (`Core::sasl_tick`).
    pub(crate) auth_deadline_ms: Option<i64>,
}

impl Conn {
    pub(crate) fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Requests taken but not yet released.
    pub(crate) fn in_flight(&self) -> u64 {
        self.next_seq - self.next_release
    }

    /// Records request `seq`'s response and returns every request's that may
    /// now go out, in order; `None` for a request that gets no response.
    pub(crate) fn finish(&mut self, seq: u64, frame: Option<Frame>) -> Vec<Option<Frame>> {
        assert!(
            seq >= self.next_release,
            "request {seq} finished twice (released)"
        );
        assert!(seq < self.next_seq, "request {seq} was never taken");
        let previous = self.finished.insert(seq, frame);
        assert!(previous.is_none(), "request {seq} finished twice");
        let mut out = Vec::new();
        while let Some(frame) = self.finished.remove(&self.next_release) {
            self.next_release += 1;
            out.push(frame);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_leave_in_request_order() {
        let mut c = Conn::default();
        let a = c.take_seq();
        let b = c.take_seq();
        let d = c.take_seq();
        let frame = |s: &'static [u8]| Frame::Bytes(Bytes::from_static(s));
        assert!(c.finish(b, Some(frame(b"b"))).is_empty());
        assert!(c.finish(d, None).is_empty());
        let out = c.finish(a, Some(frame(b"a")));
        assert_eq!(out, vec![Some(frame(b"a")), Some(frame(b"b")), None]);
        assert_eq!(c.in_flight(), 0);
    }
}
