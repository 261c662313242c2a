//! ApiVersions (key 18), v0–v4 (v4, KIP-1102, has v3's schema).
//!
//! Lists `versions::SUPPORTED`. A version above what we serve is answered as
//! Kafka does: a v0 body with UNSUPPORTED_VERSION and the list, so the client
//! retries with a version it and we both know. No features are finalized, so
//! clients stay on the classic transaction protocol (KIP-1022).

use bytes::BytesMut;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse, ResponseKind};
use kafka_protocol::protocol::Encodable;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::versions::SUPPORTED;

fn listing() -> ApiVersionsResponse {
    let keys = SUPPORTED
        .iter()
        .map(|&(key, min, max)| {
            ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    ApiVersionsResponse::default().with_api_keys(keys)
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, _req: ApiVersionsRequest) {
    b.core.respond(&ctx, ResponseKind::ApiVersions(listing()));
}

pub(crate) fn respond_unsupported(b: &mut Cx, ctx: RequestCtx) {
    let body = listing().with_error_code(ResponseError::UnsupportedVersion.code());
    let mut buf = BytesMut::new();
    body.encode(&mut buf, 0)
        .expect("a v0 ApiVersions body always encodes");
    // Response header v0 (correlation id only) whatever version was asked.
    b.core.respond_raw(&ctx, buf.freeze());
}
