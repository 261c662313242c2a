//! DescribeUserScramCredentials (key 50), v0.
//!
//! Each named user's SCRAM mechanisms and iterations (never the salt or
//! keys); null names every user. RESOURCE_NOT_FOUND for a user without a
//! credential, DUPLICATE_RESOURCE for a name given twice (Kafka's
//! ScramControlManager). Needs DESCRIBE on the cluster
//! (CLUSTER_AUTHORIZATION_FAILED for the whole request).

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::security::acl::{resource, Op};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: DescribeUserScramCredentialsRequest) {
    let mut response = DescribeUserScramCredentialsResponse::default();
    if !b
        .core
        .authorized(&ctx, Op::Describe, resource::CLUSTER, "kafka-cluster")
    {
        response.error_code = ResponseError::ClusterAuthorizationFailed.code();
        response.error_message = Some(StrBytes::from_static_str("Cluster authorization failed."));
        return b
            .core
            .respond(&ctx, ResponseKind::DescribeUserScramCredentials(response));
    }
    let users = b.core.security().users();
    let infos = |list: &Vec<(crate::security::scram::Mechanism, i32)>| {
        list.iter()
            .map(|(m, iterations)| {
                CredentialInfo::default()
                    .with_mechanism(m.code())
                    .with_iterations(*iterations)
            })
            .collect::<Vec<_>>()
    };
    let names: Vec<String> = match &req.users {
        None => users.keys().map(|u| u.to_string()).collect(),
        Some(list) => list.iter().map(|u| u.name.to_string()).collect(),
    };
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &names {
        *seen.entry(n.as_str()).or_default() += 1;
    }
    for name in &names {
        let mut result = DescribeUserScramCredentialsResult::default()
            .with_user(StrBytes::from_string(name.clone()));
        if seen[name.as_str()] > 1 {
            result.error_code = ResponseError::DuplicateResource.code();
            result.error_message = Some(StrBytes::from_string(format!(
                "Cannot describe SCRAM credentials for the same user twice in a single request: {name}"
            )));
        } else if let Some(list) = users.get(name.as_str()) {
            result.credential_infos = infos(list);
        } else {
            result.error_code = ResponseError::ResourceNotFound.code();
            result.error_message = Some(StrBytes::from_string(format!(
                "Attempt to describe a user credential that does not exist: {name}"
            )));
        }
        response.results.push(result);
    }
    response.results.dedup_by(|a, b| a.user == b.user);
    b.core
        .respond(&ctx, ResponseKind::DescribeUserScramCredentials(response));
}
