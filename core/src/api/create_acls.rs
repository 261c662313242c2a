//! CreateAcls (key 30), v2–v3.
//!
//! Stores ACL bindings in meta.db (`security::store`), each answered on its
//! own: INVALID_REQUEST for a binding Kafka refuses (an ANY or MATCH
//! pattern, an unknown type or operation, a cluster not named
//! `kafka-cluster`); the rest are written in one batch and take effect when
//! it is stored. Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED);
//! without an authorizer, SECURITY_DISABLED as Kafka answers.

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{CreateAclsRequest, CreateAclsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{ApiWrite, RequestCtx};
use crate::api::Cx;
use crate::security::acl::{self, AclBinding, Op};
use crate::security::store;

pub struct PendingCreateAcls {
    ctx: RequestCtx,
    response: CreateAclsResponse,
    bindings: Vec<AclBinding>,
}

fn result(code: i16, message: Option<String>) -> AclCreationResult {
    AclCreationResult::default()
        .with_error_code(code)
        .with_error_message(message.map(StrBytes::from_string))
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: CreateAclsRequest) {
    let refusal = b.core.acl_admin_refusal(&ctx, Op::Alter);
    let mut response = CreateAclsResponse::default();
    let mut bindings = Vec::new();
    for c in req.creations {
        if let Some((error, message)) = refusal {
            response
                .results
                .push(result(error.code(), Some(message.into())));
            continue;
        }
        let binding = AclBinding {
            resource_type: c.resource_type,
            resource_name: c.resource_name.to_string(),
            pattern_type: c.resource_pattern_type,
            principal: c.principal.to_string(),
            host: c.host.to_string(),
            operation: c.operation,
            permission: c.permission_type,
        };
        match acl::check_binding(&binding) {
            Ok(()) => {
                bindings.push(binding);
                response.results.push(result(0, None));
            }
            Err(why) => response
                .results
                .push(result(ResponseError::InvalidRequest.code(), Some(why))),
        }
    }
    let ops: Vec<_> = bindings.iter().map(store::put_acl).collect();
    let pending = PendingCreateAcls {
        ctx,
        response,
        bindings,
    };
    if ops.is_empty() {
        return apply(b, pending, true);
    }
    b.emit_meta(ops, ApiWrite::CreateAcls(pending));
}

pub(crate) fn apply(b: &mut Cx, pending: PendingCreateAcls, stored: bool) {
    let PendingCreateAcls {
        ctx,
        mut response,
        bindings,
    } = pending;
    if stored {
        for binding in bindings {
            b.core.security_mut().acls.insert(binding);
        }
    } else {
        for r in response.results.iter_mut().filter(|r| r.error_code == 0) {
            r.error_code = ResponseError::UnknownServerError.code();
            r.error_message = Some(StrBytes::from_static_str("the ACL could not be stored"));
        }
    }
    b.core.respond(&ctx, ResponseKind::CreateAcls(response));
}
