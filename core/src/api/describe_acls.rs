//! DescribeAcls (key 29), v1–v3.
//!
//! The stored bindings a filter matches (Kafka's AclBindingFilter, as
//! DeleteAcls reads it), grouped by resource pattern. Needs DESCRIBE on the
//! cluster (CLUSTER_AUTHORIZATION_FAILED). Without `authorizer.class.name`
//! it answers as a Kafka broker without one does: SECURITY_DISABLED, "No
//! Authorizer is configured." (Kafka's AclApis; compared in conformance).
//! Tools that sync ACLs (MirrorMaker 2) then skip the sync quietly.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{DescribeAclsRequest, DescribeAclsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::RequestCtx;
use crate::api::Cx;
use crate::security::acl::{AclFilter, Op};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: DescribeAclsRequest) {
    let refusal = b.core.acl_admin_refusal(&ctx, Op::Describe);
    if let Some((error, message)) = refusal {
        let response = DescribeAclsResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(StrBytes::from_static_str(message)));
        return b.core.respond(&ctx, ResponseKind::DescribeAcls(response));
    }
    let filter = AclFilter {
        resource_type: req.resource_type_filter,
        resource_name: req.resource_name_filter.map(|s| s.to_string()),
        pattern_type: req.pattern_type_filter,
        principal: req.principal_filter.map(|s| s.to_string()),
        host: req.host_filter.map(|s| s.to_string()),
        operation: req.operation,
        permission: req.permission_type,
    };
    let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for binding in b.core.security().acls.matching(&filter) {
        by_resource
            .entry((
                binding.resource_type,
                binding.resource_name.clone(),
                binding.pattern_type,
            ))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(StrBytes::from_string(binding.principal.clone()))
                    .with_host(StrBytes::from_string(binding.host.clone()))
                    .with_operation(binding.operation)
                    .with_permission_type(binding.permission),
            );
    }
    let resources = by_resource
        .into_iter()
        .map(|((resource_type, name, pattern_type), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(StrBytes::from_string(name))
                .with_pattern_type(pattern_type)
                .with_acls(acls)
        })
        .collect();
    let response = DescribeAclsResponse::default().with_resources(resources);
    b.core.respond(&ctx, ResponseKind::DescribeAcls(response));
}
