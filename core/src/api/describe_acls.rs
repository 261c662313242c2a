//! DescribeAcls (key 29), v1–v3.
//!
//! doze has no authorizer (no ACLs, SASL or TLS yet), so it answers as a
//! Kafka broker without `authorizer.class.name` does: SECURITY_DISABLED,
//! "No Authorizer is configured." (Kafka's AclApis; compared in
//! conformance). Tools that sync ACLs (MirrorMaker 2) then skip the sync
//! quietly instead of failing on an API the broker does not list.

use kafka_protocol::messages::{DescribeAclsRequest, DescribeAclsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::broker::Broker;

pub(crate) fn handle(b: &mut Broker, ctx: RequestCtx, _req: DescribeAclsRequest) {
    let response = DescribeAclsResponse::default()
        .with_error_code(ResponseError::SecurityDisabled.code())
        .with_error_message(Some(StrBytes::from_static_str(
            "No Authorizer is configured.",
        )));
    b.respond(&ctx, ResponseKind::DescribeAcls(response));
}
