//! Kafka request frames as a client builds them, with kafka-protocol's
//! structs: the request header, in the header version the API and version
//! call for (v2, with its tagged fields, for flexible versions), then the
//! body. The one place the Rust tests frame a request.
//!
//! A frame here is what follows the 4-byte size on the wire (the core's
//! `Input::Frame` takes it so); `size_prefixed` adds the size for a socket.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Encodable, Request, StrBytes};

/// `req` at `version` as a frame, or the error of a body with fields that
/// `version` cannot carry.
pub fn request_frame<R: Request + Encodable>(
    version: i16,
    correlation_id: i32,
    client_id: Option<StrBytes>,
    req: &R,
) -> anyhow::Result<Bytes> {
    let key = ApiKey::try_from(R::KEY).map_err(|()| anyhow::anyhow!("api key {}", R::KEY))?;
    request_frame_with(key, version, correlation_id, client_id, |buf| {
        req.encode(buf, version)
    })
}

/// A frame whose body `encode_body` writes after the header (a body held
/// as a `RequestKind`, or bytes made by hand).
pub fn request_frame_with(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: Option<StrBytes>,
    encode_body: impl FnOnce(&mut BytesMut) -> anyhow::Result<()>,
) -> anyhow::Result<Bytes> {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(client_id);
    let mut buf = BytesMut::new();
    header.encode(&mut buf, key.request_header_version(version))?;
    encode_body(&mut buf)?;
    Ok(buf.freeze())
}

/// Request header v1 with a null client id, for any key and version, even
/// ones kafka-protocol does not know: the start of a frame a test of bad
/// input makes by hand (an unknown key, an unsupported version, a body cut
/// short).
pub fn raw_header_v1(api_key: i16, version: i16, correlation_id: i32) -> Vec<u8> {
    let mut header = Vec::with_capacity(10);
    header.put_i16(api_key);
    header.put_i16(version);
    header.put_i32(correlation_id);
    header.put_i16(-1);
    header
}

/// `frame` as it goes on a socket: its size (int32, big-endian), then it.
pub fn size_prefixed(frame: &[u8]) -> Vec<u8> {
    let size = i32::try_from(frame.len()).expect("a frame under 2 GiB");
    let mut out = Vec::with_capacity(4 + frame.len());
    out.put_i32(size);
    out.extend_from_slice(frame);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_request::ForgottenTopic;
    use kafka_protocol::messages::{ApiVersionsRequest, FetchRequest};

    #[test]
    fn a_header_v1_frame_byte_for_byte() {
        // ApiVersions v0: header v1 (key 18, version 0, correlation id 1,
        // client id "" as an int16-prefixed string), an empty body.
        let frame = request_frame(
            0,
            1,
            Some(StrBytes::from_static_str("")),
            &ApiVersionsRequest::default(),
        )
        .unwrap();
        assert_eq!(&frame[..], [0, 18, 0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(
            size_prefixed(&frame),
            [0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0, 0]
        );
    }

    #[test]
    fn a_raw_header_is_what_request_frame_writes_for_a_null_client_id() {
        let frame = request_frame(1, 9, None, &ApiVersionsRequest::default()).unwrap();
        assert_eq!(raw_header_v1(18, 1, 9), frame[..]);
        assert_eq!(
            raw_header_v1(9999, 0, 7),
            [0x27, 0x0f, 0, 0, 0, 0, 0, 7, 0xff, 0xff]
        );
    }

    #[test]
    fn a_flexible_version_gets_header_v2_and_a_null_client_id() {
        let frame = request_frame(12, 7, None, &FetchRequest::default()).unwrap();
        // key 1, version 12, correlation id 7, client id null (-1), then
        // header v2's empty tagged fields.
        assert_eq!(&frame[..11], [0, 1, 0, 12, 0, 0, 0, 7, 0xff, 0xff, 0]);
    }

    #[test]
    fn a_body_the_version_cannot_carry_is_an_error() {
        // FetchRequest v0 has no place for forgotten topics (v7+).
        let req =
            FetchRequest::default().with_forgotten_topics_data(vec![ForgottenTopic::default()]);
        assert!(request_frame(0, 1, None, &req).is_err());
        assert!(request_frame(7, 1, None, &req).is_ok());
    }
}
