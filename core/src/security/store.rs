//! The SCRAM credentials and ACLs, in memory as meta.db holds them.
//!
//! meta.db keys: `scram/<mechanism>/<user>` (a `scram::Credential`) and
//! `acl/<sha-256 of the binding, hex>` (an `acl::AclBinding`). Nothing here
//! changes before its meta.db write completes (`meta.rs`' rule).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::acl::{AclBinding, Acls};
use super::scram::{Credential, Mechanism};
use crate::io::MetaOp;

pub const SCRAM_PREFIX: &str = "scram/";
pub const ACL_PREFIX: &str = "acl/";

pub fn scram_key(user: &str, mechanism: Mechanism) -> Vec<u8> {
    format!("{SCRAM_PREFIX}{}/{user}", mechanism.name()).into_bytes()
}

/// `<mechanism>/<user>` after the prefix.
pub fn parse_scram_key(rest: &str) -> Option<(String, Mechanism)> {
    let (mechanism, user) = rest.split_once('/')?;
    Some((user.to_string(), Mechanism::from_name(mechanism)?))
}

pub fn acl_key(b: &AclBinding) -> Vec<u8> {
    let json = serde_json::to_vec(b).expect("bindings serialize");
    let digest = Sha256::digest(&json);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{ACL_PREFIX}{hex}").into_bytes()
}

pub fn put_acl(b: &AclBinding) -> MetaOp {
    MetaOp::Put {
        key: acl_key(b),
        value: crate::meta::encode(b),
    }
}

pub fn delete_acl(b: &AclBinding) -> MetaOp {
    MetaOp::Delete { key: acl_key(b) }
}

pub fn put_credential(user: &str, mechanism: Mechanism, c: &Credential) -> MetaOp {
    MetaOp::Put {
        key: scram_key(user, mechanism),
        value: crate::meta::encode(c),
    }
}

pub fn delete_credential(user: &str, mechanism: Mechanism) -> MetaOp {
    MetaOp::Delete {
        key: scram_key(user, mechanism),
    }
}

/// Credentials and ACLs.
#[derive(Clone, Debug, Default)]
pub struct SecurityStore {
    credentials: BTreeMap<(String, Mechanism), Credential>,
    pub acls: Acls,
}

impl SecurityStore {
    pub fn credential(&self, user: &str, mechanism: Mechanism) -> Option<&Credential> {
        self.credentials.get(&(user.to_string(), mechanism))
    }

    pub fn set_credential(&mut self, user: String, mechanism: Mechanism, c: Credential) {
        self.credentials.insert((user, mechanism), c);
    }

    pub fn remove_credential(&mut self, user: &str, mechanism: Mechanism) -> bool {
        self.credentials
            .remove(&(user.to_string(), mechanism))
            .is_some()
    }

    /// Users with their mechanisms and iterations, by user.
    pub fn users(&self) -> BTreeMap<&str, Vec<(Mechanism, i32)>> {
        let mut out: BTreeMap<&str, Vec<(Mechanism, i32)>> = BTreeMap::new();
        for ((user, mechanism), c) in &self.credentials {
            out.entry(user.as_str())
                .or_default()
                .push((*mechanism, c.iterations));
        }
        out
    }

    /// SASL/PLAIN's check: the password against the user's SCRAM
    /// credential (SHA-256 first).
    pub fn check_password(&self, user: &str, password: &[u8]) -> bool {
        Mechanism::ALL.into_iter().any(|m| {
            self.credential(user, m)
                .is_some_and(|c| c.matches_password(m, password))
        })
    }
}
