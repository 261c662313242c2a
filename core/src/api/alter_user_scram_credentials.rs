//! AlterUserScramCredentials (key 51), v0.
//!
//! Upserts and deletes users' SCRAM credentials, one result per user. The
//! client salts and hashes (the request carries the salt, the iterations and
//! the salted password), so the broker never sees a password; it keeps the
//! stored and server keys (`scram::Credential`) in meta.db. As Kafka's
//! ScramControlManager: UNSUPPORTED_SASL_MECHANISM for an unknown
//! mechanism, UNACCEPTABLE_CREDENTIAL for an empty name, an empty salt or
//! salted password, or iterations outside 4096..=16384, RESOURCE_NOT_FOUND
//! for deleting a credential that does not exist, DUPLICATE_RESOURCE for a
//! user named twice for one mechanism; an error for any of a user's
//! changes fails all of them. The accepted changes are written in one batch
//! and take effect when it is stored. Needs ALTER on the cluster.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{ApiWrite, RequestCtx};
use crate::api::Cx;
use crate::io::MetaOp;
use crate::security::acl::{resource, Op};
use crate::security::scram::{self, Credential, Mechanism};
use crate::security::store;

/// One user's accepted change.
enum Change {
    Upsert(Mechanism, Credential),
    Delete(Mechanism),
}

pub struct PendingAlterScram {
    ctx: RequestCtx,
    response: AlterUserScramCredentialsResponse,
    changes: Vec<(String, Change)>,
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: AlterUserScramCredentialsRequest) {
    let allowed = b
        .core
        .authorized(&ctx, Op::Alter, resource::CLUSTER, "kafka-cluster");
    // Per user: the first error, and the changes.
    let mut errors: BTreeMap<String, (ResponseError, String)> = BTreeMap::new();
    let mut changes: BTreeMap<String, Vec<Change>> = BTreeMap::new();
    let mut named: BTreeSet<(String, i8)> = BTreeSet::new();
    let mut order: Vec<String> = Vec::new();
    let fail =
        |errors: &mut BTreeMap<String, (ResponseError, String)>, user: &str, e, m: String| {
            errors.entry(user.to_string()).or_insert((e, m));
        };
    let deletions = req
        .deletions
        .iter()
        .map(|d| (d.name.to_string(), d.mechanism, None));
    let upsertions = req
        .upsertions
        .iter()
        .map(|u| (u.name.to_string(), u.mechanism, Some(u)));
    for (user, code, upsert) in deletions.chain(upsertions) {
        if !order.contains(&user) {
            order.push(user.clone());
        }
        if !allowed {
            fail(
                &mut errors,
                &user,
                ResponseError::ClusterAuthorizationFailed,
                "Cluster authorization failed.".into(),
            );
            continue;
        }
        if user.is_empty() {
            fail(
                &mut errors,
                &user,
                ResponseError::UnacceptableCredential,
                "Username must not be empty".into(),
            );
            continue;
        }
        if !named.insert((user.clone(), code)) {
            fail(
                &mut errors,
                &user,
                ResponseError::DuplicateResource,
                "A user credential cannot be altered twice in the same request".into(),
            );
            continue;
        }
        let Some(mechanism) = Mechanism::from_code(code) else {
            fail(
                &mut errors,
                &user,
                ResponseError::UnsupportedSaslMechanism,
                "Unknown SCRAM mechanism".into(),
            );
            continue;
        };
        match upsert {
            None => {
                if b.core.security().credential(&user, mechanism).is_none() {
                    fail(
                        &mut errors,
                        &user,
                        ResponseError::ResourceNotFound,
                        "Attempt to delete a user credential that does not exist".into(),
                    );
                } else {
                    changes
                        .entry(user)
                        .or_default()
                        .push(Change::Delete(mechanism));
                }
            }
            Some(u) => {
                let iterations_ok =
                    (scram::ITERATIONS_MIN..=scram::ITERATIONS_MAX).contains(&u.iterations);
                if !iterations_ok || u.salt.is_empty() || u.salted_password.is_empty() {
                    fail(&mut errors, &user, ResponseError::UnacceptableCredential, format!(
                        "Iterations must be between {} and {}, and salt and salted password must not be empty",
                        scram::ITERATIONS_MIN,
                        scram::ITERATIONS_MAX
                    ));
                } else {
                    let c = Credential::from_salted(
                        mechanism,
                        &u.salt,
                        &u.salted_password,
                        u.iterations,
                    );
                    changes
                        .entry(user)
                        .or_default()
                        .push(Change::Upsert(mechanism, c));
                }
            }
        }
    }
    let mut response = AlterUserScramCredentialsResponse::default();
    let mut accepted = Vec::new();
    for user in order {
        let mut result = AlterUserScramCredentialsResult::default()
            .with_user(StrBytes::from_string(user.clone()));
        if let Some((e, message)) = errors.get(&user) {
            result.error_code = e.code();
            result.error_message = Some(StrBytes::from_string(message.clone()));
        } else {
            accepted.extend(
                changes
                    .remove(&user)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| (user.clone(), c)),
            );
        }
        response.results.push(result);
    }
    let ops: Vec<MetaOp> = accepted
        .iter()
        .map(|(user, change)| match change {
            Change::Upsert(m, c) => store::put_credential(user, *m, c),
            Change::Delete(m) => store::delete_credential(user, *m),
        })
        .collect();
    let pending = PendingAlterScram {
        ctx,
        response,
        changes: accepted,
    };
    if ops.is_empty() {
        return apply(b, pending, true);
    }
    b.emit_meta(ops, ApiWrite::AlterScram(pending));
}

pub(crate) fn apply(b: &mut Cx, pending: PendingAlterScram, stored: bool) {
    let PendingAlterScram {
        ctx,
        mut response,
        changes,
    } = pending;
    if stored {
        for (user, change) in changes {
            match change {
                Change::Upsert(m, c) => b.core.security_mut().set_credential(user, m, c),
                Change::Delete(m) => {
                    b.core.security_mut().remove_credential(&user, m);
                }
            }
        }
    } else {
        let changed: BTreeSet<String> = changes.into_iter().map(|(u, _)| u).collect();
        for r in response
            .results
            .iter_mut()
            .filter(|r| changed.contains(r.user.as_str()))
        {
            r.error_code = ResponseError::UnknownServerError.code();
            r.error_message = Some(StrBytes::from_static_str(
                "the credential could not be stored",
            ));
        }
    }
    b.core
        .respond(&ctx, ResponseKind::AlterUserScramCredentials(response));
}
