//! One connection to one broker, over any byte stream (`AsyncRead +
//! AsyncWrite + Unpin`: a TCP stream, TLS over one, an in-process pipe).
//!
//! - Opening it asks ApiVersions, so that each later request goes at the
//!   highest version both sides speak (`versions::negotiate`).
//! - One request at a time: write the frame, read the answer, check its
//!   correlation id. Every request is bounded by the request timeout.
//! - A connection that timed out, failed or read something it could not
//!   decode is broken: its byte stream may be in the middle of a frame, so
//!   it refuses further requests (the client opens a new one).
//!
//! Framing is Kafka's: a 4-byte big-endian size, then the header and body
//! (as kafka-protocol encodes them at the header version the API asks for).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::error::{Error, KafkaError};
use super::versions;
use super::ClientConfig;

/// ApiVersions v3 (KIP-511, Kafka 2.4) first: it names the client. A broker
/// without it answers UNSUPPORTED_VERSION (or a v0 layout), and v0 is asked.
const API_VERSIONS_FIRST: i16 = 3;
/// UNSUPPORTED_VERSION.
const UNSUPPORTED_VERSION: i16 = 35;

/// A connection to one broker. See the module comment.
pub struct Connection<S> {
    stream: S,
    addr: String,
    client_id: StrBytes,
    request_timeout: Duration,
    response_bytes_max: usize,
    next_correlation: i32,
    /// The broker's (min, max) per API key, from its ApiVersions answer.
    broker_versions: BTreeMap<i16, (i16, i16)>,
    broken: bool,
    /// Whether the last answer was read to its end (so that a body that did
    /// not decode leaves the stream at a frame boundary).
    last_frame_whole: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// Takes over `stream` (already connected to `addr`, the name used in
    /// errors) and asks the broker which versions it speaks.
    pub async fn open(stream: S, addr: &str, config: &ClientConfig) -> Result<Self, Error> {
        let mut conn = Self {
            stream,
            addr: addr.to_string(),
            client_id: StrBytes::from_string(config.client_id.clone()),
            request_timeout: config.request_timeout,
            response_bytes_max: config.response_bytes_max,
            next_correlation: 0,
            broker_versions: BTreeMap::new(),
            broken: false,
            last_frame_whole: false,
        };
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("doze-kafka"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let answer = match conn.send_at(API_VERSIONS_FIRST, &request).await {
            Ok(r) if r.error_code != UNSUPPORTED_VERSION => r,
            // The broker's answer to a version it lacks is v0's layout,
            // which does not decode as v3: ask again at v0.
            Ok(_) => conn.send_at(0, &ApiVersionsRequest::default()).await?,
            Err(Error::Protocol { .. }) if conn.last_frame_whole => {
                conn.broken = false;
                conn.send_at(0, &ApiVersionsRequest::default()).await?
            }
            Err(e) => return Err(e),
        };
        KafkaError::check(answer.error_code, None, "ApiVersions")?;
        conn.broker_versions = answer
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(conn)
    }

    /// The address this connection was opened to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether an earlier failure left the stream unusable.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// The broker's range of `key`, if it serves it at all.
    pub fn broker_range(&self, key: ApiKey) -> Option<(i16, i16)> {
        self.broker_versions.get(&(key as i16)).copied()
    }

    /// The version `R` goes at: the highest both sides speak.
    pub fn version<R: Request>(&self) -> Result<i16, Error> {
        let key = ApiKey::try_from(R::KEY).map_err(|()| Error::Unsupported {
            addr: self.addr.clone(),
            api: format!("API key {}", R::KEY),
        })?;
        versions::negotiate::<R>(self.broker_range(key)).ok_or_else(|| Error::Unsupported {
            addr: self.addr.clone(),
            api: format!("{key:?}"),
        })
    }

    /// Sends `request` at the negotiated version and reads its answer.
    pub async fn send<R: Request>(&mut self, request: &R) -> Result<R::Response, Error> {
        let version = self.version::<R>()?;
        self.send_at(version, request).await
    }

    /// Sends `request` at `version` (the caller checked the broker has it)
    /// and reads its answer, within the request timeout.
    pub async fn send_at<R: Request>(
        &mut self,
        version: i16,
        request: &R,
    ) -> Result<R::Response, Error> {
        if self.broken {
            return Err(Error::Io {
                addr: self.addr.clone(),
                reason: "the connection failed earlier".into(),
            });
        }
        let result =
            match tokio::time::timeout(self.request_timeout, self.exchange::<R>(version, request))
                .await
            {
                Ok(result) => result,
                Err(_) => Err(Error::Timeout {
                    addr: self.addr.clone(),
                    what: format!("{:?} request", ApiKey::try_from(R::KEY).ok()),
                    after: self.request_timeout,
                }),
            };
        if let Err(e) = &result {
            self.broken = e.breaks_connection();
        }
        result
    }

    async fn exchange<R: Request>(
        &mut self,
        version: i16,
        request: &R,
    ) -> Result<R::Response, Error> {
        let correlation_id = self.next_correlation;
        self.next_correlation = self.next_correlation.wrapping_add(1);
        let frame = self.encode(correlation_id, version, request)?;
        let io = |e: std::io::Error| Error::Io {
            addr: self.addr.clone(),
            reason: e.to_string(),
        };
        self.stream.write_all(&frame).await.map_err(io)?;
        self.stream.flush().await.map_err(io)?;
        let mut body = self.read_frame().await?;
        let protocol = |reason: String| Error::Protocol {
            addr: self.addr.clone(),
            reason,
        };
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))
            .map_err(|e| protocol(format!("response header: {e}")))?;
        if header.correlation_id != correlation_id {
            return Err(protocol(format!(
                "correlation id {} answers a request other than {correlation_id}",
                header.correlation_id
            )));
        }
        R::Response::decode(&mut body, version)
            .map_err(|e| protocol(format!("{:?} v{version}: {e}", ApiKey::try_from(R::KEY))))
    }

    fn encode<R: Request>(
        &self,
        correlation_id: i32,
        version: i16,
        request: &R,
    ) -> Result<Bytes, Error> {
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[0; 4]);
        let unencodable = |e: anyhow::Error| {
            Error::Usage(format!(
                "cannot encode {:?} v{version}: {e}",
                ApiKey::try_from(R::KEY)
            ))
        };
        header
            .encode(&mut buf, R::header_version(version))
            .map_err(unencodable)?;
        request.encode(&mut buf, version).map_err(unencodable)?;
        let size = i32::try_from(buf.len() - 4)
            .map_err(|_| Error::Usage("a request larger than 2 GiB".into()))?;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        Ok(buf.freeze())
    }

    async fn read_frame(&mut self) -> Result<Bytes, Error> {
        let io = |e: std::io::Error| Error::Io {
            addr: self.addr.clone(),
            reason: if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "the broker closed the connection".into()
            } else {
                e.to_string()
            },
        };
        self.last_frame_whole = false;
        let mut prefix = [0u8; 4];
        self.stream.read_exact(&mut prefix).await.map_err(io)?;
        let size = i32::from_be_bytes(prefix);
        let Some(len) = usize::try_from(size)
            .ok()
            .filter(|&n| n > 0 && n <= self.response_bytes_max)
        else {
            // Not a Kafka answer (a TLS alert read as plaintext, an HTTP
            // server): no buffer of that size.
            return Err(Error::Protocol {
                addr: self.addr.clone(),
                reason: format!("a frame of {size} bytes (not a Kafka broker?)"),
            });
        };
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).await.map_err(io)?;
        self.last_frame_whole = true;
        Ok(Bytes::from(body))
    }
}

/// The versions negotiated with `conn`, for tests and diagnostics: API key
/// name and version, for every API this client has a range for.
pub fn describe_versions<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &Connection<S>,
) -> Vec<(ApiKey, Option<(i16, i16)>)> {
    versions::CLIENT
        .iter()
        .map(|&(key, _, _)| (key, conn.broker_range(key)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{ApiVersionsResponse, MetadataRequest, MetadataResponse};

    /// A broker in a duplex pipe that answers ApiVersions with `ranges` and
    /// then Metadata, one frame at a time.
    async fn fake_broker(
        mut side: tokio::io::DuplexStream,
        ranges: Vec<(ApiKey, i16, i16)>,
        metadata_calls: usize,
    ) -> Vec<i16> {
        let mut versions_seen = Vec::new();
        for _ in 0..1 + metadata_calls {
            let mut prefix = [0u8; 4];
            if side.read_exact(&mut prefix).await.is_err() {
                break;
            }
            let mut frame = vec![0u8; i32::from_be_bytes(prefix) as usize];
            side.read_exact(&mut frame).await.unwrap();
            let mut frame = Bytes::from(frame);
            let header =
                kafka_protocol::protocol::decode_request_header_from_buffer(&mut frame).unwrap();
            let version = header.request_api_version;
            versions_seen.push(version);
            let key = ApiKey::try_from(header.request_api_key).unwrap();
            let mut out = BytesMut::new();
            out.extend_from_slice(&[0; 4]);
            ResponseHeader::default()
                .with_correlation_id(header.correlation_id)
                .encode(&mut out, key.response_header_version(version))
                .unwrap();
            match key {
                ApiKey::ApiVersions => ApiVersionsResponse::default()
                    .with_api_keys(
                        ranges
                            .iter()
                            .map(|&(k, min, max)| {
                                ApiVersion::default()
                                    .with_api_key(k as i16)
                                    .with_min_version(min)
                                    .with_max_version(max)
                            })
                            .collect(),
                    )
                    .encode(&mut out, version)
                    .unwrap(),
                ApiKey::Metadata => MetadataResponse::default()
                    .encode(&mut out, version)
                    .unwrap(),
                other => panic!("unexpected {other:?}"),
            }
            let size = (out.len() - 4) as i32;
            out[..4].copy_from_slice(&size.to_be_bytes());
            side.write_all(&out).await.unwrap();
        }
        versions_seen
    }

    #[tokio::test]
    async fn negotiates_the_highest_common_version_over_any_stream() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let broker = tokio::spawn(fake_broker(
            server,
            vec![(ApiKey::ApiVersions, 0, 3), (ApiKey::Metadata, 0, 7)],
            1,
        ));
        let config = ClientConfig::default();
        let mut conn = Connection::open(client, "pipe", &config).await.unwrap();
        assert_eq!(conn.version::<MetadataRequest>().unwrap(), 7);
        assert!(matches!(
            conn.version::<kafka_protocol::messages::DescribeProducersRequest>(),
            Err(Error::Unsupported { .. })
        ));
        conn.send(&MetadataRequest::default()).await.unwrap();
        drop(conn);
        assert_eq!(broker.await.unwrap(), vec![3, 7]);
    }

    #[tokio::test]
    async fn a_silent_broker_times_out_and_breaks_the_connection() {
        let (client, _server) = tokio::io::duplex(1024);
        let config = ClientConfig {
            request_timeout: Duration::from_millis(50),
            ..ClientConfig::default()
        };
        let Err(e) = Connection::open(client, "pipe", &config).await else {
            panic!("a silent broker answered");
        };
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
    }

    #[tokio::test]
    async fn a_huge_frame_is_refused() {
        let (client, mut server) = tokio::io::duplex(1024);
        // What an HTTP server answers: "HTTP" read as a size.
        server
            .write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            .await
            .unwrap();
        let Err(e) = Connection::open(client, "pipe", &ClientConfig::default()).await else {
            panic!("HTTP read as Kafka");
        };
        assert!(matches!(e, Error::Protocol { .. }), "{e}");
    }
}
