//! DeleteAcls (key 31), v2–v3.
//!
//! Each filter (Kafka's AclBindingFilter: ANY, MATCH, LITERAL or PREFIXED
//! pattern; null name, principal or host match anything) deletes every
//! stored binding it matches and lists them; a binding two filters match is
//! listed under the first. The deletions are written in one meta.db batch
//! and take effect when it is stored. Needs ALTER on the cluster; without
//! an authorizer, SECURITY_DISABLED.

use std::collections::BTreeSet;

use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::{DeleteAclsRequest, DeleteAclsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{ApiWrite, RequestCtx};
use crate::api::Cx;
use crate::security::acl::{AclBinding, AclFilter, Op};
use crate::security::store;

pub struct PendingDeleteAcls {
    ctx: RequestCtx,
    response: DeleteAclsResponse,
    bindings: Vec<AclBinding>,
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: DeleteAclsRequest) {
    let refusal = b.core.acl_admin_refusal(&ctx, Op::Alter);
    let mut response = DeleteAclsResponse::default();
    let mut taken: BTreeSet<AclBinding> = BTreeSet::new();
    for f in req.filters {
        let mut result = DeleteAclsFilterResult::default();
        if let Some((error, message)) = refusal {
            result.error_code = error.code();
            result.error_message = Some(StrBytes::from_static_str(message));
            response.filter_results.push(result);
            continue;
        }
        let filter = AclFilter {
            resource_type: f.resource_type_filter,
            resource_name: f.resource_name_filter.map(|s| s.to_string()),
            pattern_type: f.pattern_type_filter,
            principal: f.principal_filter.map(|s| s.to_string()),
            host: f.host_filter.map(|s| s.to_string()),
            operation: f.operation,
            permission: f.permission_type,
        };
        let matched: Vec<AclBinding> = b
            .core
            .security()
            .acls
            .matching(&filter)
            .filter(|binding| !taken.contains(*binding))
            .cloned()
            .collect();
        for binding in matched {
            result.matching_acls.push(
                DeleteAclsMatchingAcl::default()
                    .with_resource_type(binding.resource_type)
                    .with_resource_name(StrBytes::from_string(binding.resource_name.clone()))
                    .with_pattern_type(binding.pattern_type)
                    .with_principal(StrBytes::from_string(binding.principal.clone()))
                    .with_host(StrBytes::from_string(binding.host.clone()))
                    .with_operation(binding.operation)
                    .with_permission_type(binding.permission),
            );
            taken.insert(binding);
        }
        response.filter_results.push(result);
    }
    let bindings: Vec<AclBinding> = taken.into_iter().collect();
    let ops: Vec<_> = bindings.iter().map(store::delete_acl).collect();
    let pending = PendingDeleteAcls {
        ctx,
        response,
        bindings,
    };
    if ops.is_empty() {
        return apply(b, pending, true);
    }
    b.emit_meta(ops, ApiWrite::DeleteAcls(pending));
}

pub(crate) fn apply(b: &mut Cx, pending: PendingDeleteAcls, stored: bool) {
    let PendingDeleteAcls {
        ctx,
        mut response,
        bindings,
    } = pending;
    if stored {
        for binding in &bindings {
            b.core.security_mut().acls.remove(binding);
        }
    } else {
        for r in &mut response.filter_results {
            if !r.matching_acls.is_empty() {
                r.error_code = ResponseError::UnknownServerError.code();
                r.error_message = Some(StrBytes::from_static_str(
                    "the deletion could not be stored",
                ));
                r.matching_acls.clear();
            }
        }
    }
    b.core.respond(&ctx, ResponseKind::DeleteAcls(response));
}
