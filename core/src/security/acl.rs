//! ACLs and the decision Kafka's StandardAuthorizer makes with them
//! (metadata/src/main/java/org/apache/kafka/metadata/authorizer/
//! StandardAuthorizerData.java): super users may do anything; a DENY that
//! matches wins over any ALLOW; an ALLOW of the operation, of ALL, or of an
//! operation that implies it (READ, WRITE, DELETE and ALTER imply DESCRIBE;
//! ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows; with no ACL on the
//! resource at all, `allow.everyone.if.no.acl.found` decides.
//!
//! A binding matches a resource when its type is the resource's and its
//! pattern is LITERAL with the same name or `*`, or PREFIXED with a prefix of
//! the name; and the principal when it names it or `User:*`, the host when
//! it names it or `*`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Kafka's ResourceType codes.
pub mod resource {
    pub const ANY: i8 = 1;
    pub const TOPIC: i8 = 2;
    pub const GROUP: i8 = 3;
    pub const CLUSTER: i8 = 4;
    pub const TRANSACTIONAL_ID: i8 = 5;
    pub const DELEGATION_TOKEN: i8 = 6;
    pub const USER: i8 = 7;
}

/// Kafka's PatternType codes.
pub mod pattern {
    pub const ANY: i8 = 1;
    pub const MATCH: i8 = 2;
    pub const LITERAL: i8 = 3;
    pub const PREFIXED: i8 = 4;
}

/// Kafka's AclPermissionType codes.
pub mod permission {
    pub const ANY: i8 = 1;
    pub const DENY: i8 = 2;
    pub const ALLOW: i8 = 3;
}

/// Kafka's AclOperation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[repr(i8)]
pub enum Op {
    Any = 1,
    All = 2,
    Read = 3,
    Write = 4,
    Create = 5,
    Delete = 6,
    Alter = 7,
    Describe = 8,
    ClusterAction = 9,
    DescribeConfigs = 10,
    AlterConfigs = 11,
    IdempotentWrite = 12,
    CreateTokens = 13,
    DescribeTokens = 14,
}

impl Op {
    pub fn from_code(code: i8) -> Option<Self> {
        use Op::*;
        [
            Any,
            All,
            Read,
            Write,
            Create,
            Delete,
            Alter,
            Describe,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
            CreateTokens,
            DescribeTokens,
        ]
        .into_iter()
        .find(|op| *op as i8 == code)
    }

    pub fn code(self) -> i8 {
        self as i8
    }

    /// Whether an ALLOW of `self` allows `wanted`.
    fn allows(self, wanted: Op) -> bool {
        self == wanted
            || self == Op::All
            || (wanted == Op::Describe
                && matches!(self, Op::Read | Op::Write | Op::Delete | Op::Alter))
            || (wanted == Op::DescribeConfigs && self == Op::AlterConfigs)
    }
}

/// One ACL (Kafka's AclBinding), as CreateAcls gives it and meta.db keeps it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

/// Why CreateAcls refuses a binding (INVALID_REQUEST, with this message).
pub fn check_binding(b: &AclBinding) -> Result<(), String> {
    let concrete_type = matches!(
        b.resource_type,
        resource::TOPIC
            | resource::GROUP
            | resource::CLUSTER
            | resource::TRANSACTIONAL_ID
            | resource::DELEGATION_TOKEN
            | resource::USER
    );
    if !concrete_type {
        return Err(format!("Invalid resource type {}", b.resource_type));
    }
    if !matches!(b.pattern_type, pattern::LITERAL | pattern::PREFIXED) {
        return Err(format!("Invalid pattern type {}", b.pattern_type));
    }
    if b.resource_name.is_empty() {
        return Err("Resource name must not be empty".into());
    }
    if b.resource_type == resource::CLUSTER && b.resource_name != "kafka-cluster" {
        return Err("The only valid name for the CLUSTER resource is kafka-cluster".into());
    }
    if !b.principal.contains(':') {
        return Err(format!("Invalid principal {}", b.principal));
    }
    if matches!(Op::from_code(b.operation), None | Some(Op::Any)) {
        return Err(format!("Invalid operation {}", b.operation));
    }
    if !matches!(b.permission, permission::DENY | permission::ALLOW) {
        return Err(format!("Invalid permission type {}", b.permission));
    }
    Ok(())
}

/// A DescribeAcls or DeleteAcls filter (Kafka's AclBindingFilter): `None`
/// fields match anything.
#[derive(Clone, Debug, Default)]
pub struct AclFilter {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

impl AclFilter {
    pub fn matches(&self, b: &AclBinding) -> bool {
        let type_ok = self.resource_type == resource::ANY || self.resource_type == b.resource_type;
        let name_ok = match (self.pattern_type, &self.resource_name) {
            (pattern::MATCH, Some(name)) => match b.pattern_type {
                pattern::LITERAL => b.resource_name == "*" || b.resource_name == *name,
                pattern::PREFIXED => name.starts_with(&b.resource_name),
                _ => false,
            },
            (pattern::MATCH, None) | (pattern::ANY, None) => true,
            (pattern::ANY, Some(name)) => b.resource_name == *name,
            (p, name) => p == b.pattern_type && name.as_ref().is_none_or(|n| *n == b.resource_name),
        };
        type_ok
            && name_ok
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && (self.operation == Op::Any as i8 || self.operation == b.operation)
            && (self.permission == permission::ANY || self.permission == b.permission)
    }
}

/// The authorizer's settings (broker properties).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// `authorizer.class.name` is set: requests are checked.
    pub enabled: bool,
    /// `super.users`, e.g. `User:admin`.
    pub super_users: Vec<String>,
    /// `allow.everyone.if.no.acl.found`.
    pub allow_if_no_acl: bool,
}

/// Every ACL, in memory as meta.db holds them.
#[derive(Clone, Debug, Default)]
pub struct Acls {
    bindings: BTreeSet<AclBinding>,
}

impl Acls {
    pub fn insert(&mut self, b: AclBinding) -> bool {
        self.bindings.insert(b)
    }

    pub fn remove(&mut self, b: &AclBinding) -> bool {
        self.bindings.remove(b)
    }

    pub fn contains(&self, b: &AclBinding) -> bool {
        self.bindings.contains(b)
    }

    pub fn matching<'a>(&'a self, f: &'a AclFilter) -> impl Iterator<Item = &'a AclBinding> + 'a {
        self.bindings.iter().filter(move |b| f.matches(b))
    }

    /// Whether `principal` from `host` may do `op` on the resource.
    pub fn authorize(
        &self,
        config: &AuthorizerConfig,
        principal: &str,
        host: &str,
        op: Op,
        resource_type: i8,
        name: &str,
    ) -> bool {
        if !config.enabled || config.super_users.iter().any(|s| s == principal) {
            return true;
        }
        let on_resource: Vec<&AclBinding> = self
            .bindings
            .iter()
            .filter(|b| {
                b.resource_type == resource_type
                    && match b.pattern_type {
                        pattern::LITERAL => b.resource_name == name || b.resource_name == "*",
                        pattern::PREFIXED => name.starts_with(&b.resource_name),
                        _ => false,
                    }
            })
            .collect();
        if on_resource.is_empty() {
            return config.allow_if_no_acl;
        }
        let applies = |b: &&&AclBinding| {
            (b.principal == principal || b.principal == "User:*")
                && (b.host == host || b.host == "*")
        };
        let denied = on_resource.iter().filter(applies).any(|b| {
            b.permission == permission::DENY
                && (b.operation == op.code() || b.operation == Op::All.code())
        });
        if denied {
            return false;
        }
        on_resource.iter().filter(applies).any(|b| {
            b.permission == permission::ALLOW
                && Op::from_code(b.operation).is_some_and(|granted| granted.allows(op))
        })
    }

    /// Whether `principal` from `host` may do `op` on some resource of the
    /// type: Kafka's Authorizer.authorizeByResourceType, which InitProducerId
    /// asks for an idempotent producer (WRITE on any topic). As Kafka, first
    /// a name no ACL is about is asked (so super users, and with
    /// `allow.everyone.if.no.acl.found` anyone when no wildcard or prefix
    /// covers it, may); then any ALLOW of `op` or ALL on the type for the
    /// principal (or `User:*`) and host allows.
    ///
    /// A simplification: Kafka also weighs the DENY bindings of the type (a
    /// DENY on the literal `*` refuses; an ALLOW counts only when no DENY
    /// names the same literal or a prefix of it). This ignores them, so it may
    /// allow where Kafka refuses; every write is still checked per topic.
    pub fn authorize_by_resource_type(
        &self,
        config: &AuthorizerConfig,
        principal: &str,
        host: &str,
        op: Op,
        resource_type: i8,
    ) -> bool {
        if self.authorize(config, principal, host, op, resource_type, "hardcode") {
            return true;
        }
        self.bindings.iter().any(|b| {
            b.resource_type == resource_type
                && b.permission == permission::ALLOW
                && (b.operation == op.code() || b.operation == Op::All.code())
                && (b.principal == principal || b.principal == "User:*")
                && (b.host == host || b.host == "*")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(rt: i8, name: &str, pt: i8, principal: &str, op: Op, perm: i8) -> AclBinding {
        AclBinding {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: principal.into(),
            host: "*".into(),
            operation: op.code(),
            permission: perm,
        }
    }

    fn on() -> AuthorizerConfig {
        AuthorizerConfig {
            enabled: true,
            super_users: vec!["User:admin".into()],
            allow_if_no_acl: false,
        }
    }

    #[test]
    fn deny_wins_prefixes_cover_and_implied_describe() {
        let mut a = Acls::default();
        use resource::*;
        a.insert(acl(
            TOPIC,
            "app-",
            pattern::PREFIXED,
            "User:alice",
            Op::Write,
            permission::ALLOW,
        ));
        a.insert(acl(
            TOPIC,
            "app-secret",
            pattern::LITERAL,
            "User:alice",
            Op::All,
            permission::DENY,
        ));
        a.insert(acl(
            TRANSACTIONAL_ID,
            "*",
            pattern::LITERAL,
            "User:*",
            Op::Describe,
            permission::ALLOW,
        ));
        let c = on();
        let can = |p: &str, op, rt, name: &str| a.authorize(&c, p, "127.0.0.1", op, rt, name);
        assert!(
            can("User:alice", Op::Write, TOPIC, "app-1"),
            "a prefixed ACL covers app-1"
        );
        assert!(
            can("User:alice", Op::Describe, TOPIC, "app-1"),
            "WRITE implies DESCRIBE"
        );
        assert!(!can("User:alice", Op::Read, TOPIC, "app-1"));
        assert!(
            !can("User:alice", Op::Write, TOPIC, "app-secret"),
            "DENY wins"
        );
        assert!(!can("User:bob", Op::Write, TOPIC, "app-1"));
        assert!(
            !can("User:alice", Op::Write, TOPIC, "other"),
            "no ACL: denied by default"
        );
        assert!(can("User:admin", Op::Write, TOPIC, "other"), "a super user");
        assert!(
            can("User:bob", Op::Describe, TRANSACTIONAL_ID, "tx"),
            "wildcard name and principal"
        );
        assert!(!can("User:bob", Op::Write, TRANSACTIONAL_ID, "tx"));
        let open = AuthorizerConfig {
            allow_if_no_acl: true,
            ..on()
        };
        assert!(a.authorize(&open, "User:bob", "h", Op::Write, TOPIC, "other"));
        assert!(
            !a.authorize(&open, "User:bob", "h", Op::Write, TOPIC, "app-1"),
            "ACLs exist there"
        );
        let off = AuthorizerConfig::default();
        assert!(a.authorize(&off, "User:bob", "h", Op::Write, TOPIC, "app-secret"));
    }

    #[test]
    fn by_resource_type_looks_for_any_allow_of_the_type() {
        let mut a = Acls::default();
        a.insert(acl(
            resource::TOPIC,
            "app-",
            pattern::PREFIXED,
            "User:alice",
            Op::Write,
            permission::ALLOW,
        ));
        a.insert(acl(
            resource::TOPIC,
            "logs",
            pattern::LITERAL,
            "User:*",
            Op::Read,
            permission::ALLOW,
        ));
        let c = on();
        let can =
            |p: &str, op| a.authorize_by_resource_type(&c, p, "127.0.0.1", op, resource::TOPIC);
        assert!(can("User:alice", Op::Write), "a prefixed ALLOW somewhere");
        assert!(!can("User:bob", Op::Write), "not for another principal");
        assert!(can("User:bob", Op::Read), "User:* counts");
        assert!(!can("User:alice", Op::Delete));
        assert!(can("User:admin", Op::Delete), "a super user");
        assert!(!a.authorize_by_resource_type(&c, "User:bob", "h", Op::Write, resource::GROUP));
        let open = AuthorizerConfig {
            allow_if_no_acl: true,
            ..on()
        };
        assert!(
            a.authorize_by_resource_type(&open, "User:bob", "h", Op::Write, resource::TOPIC),
            "no ACL on an arbitrary name: allowed, as Kafka's hard-coded probe"
        );
    }

    #[test]
    fn filters_match_as_kafka_describes() {
        let b = acl(
            resource::TOPIC,
            "app-",
            pattern::PREFIXED,
            "User:alice",
            Op::Write,
            permission::ALLOW,
        );
        let any = AclFilter {
            resource_type: resource::ANY,
            pattern_type: pattern::ANY,
            operation: Op::Any.code(),
            permission: permission::ANY,
            ..AclFilter::default()
        };
        assert!(any.matches(&b));
        let matching = AclFilter {
            resource_name: Some("app-1".into()),
            pattern_type: pattern::MATCH,
            ..any.clone()
        };
        assert!(matching.matches(&b));
        let literal = AclFilter {
            resource_name: Some("app-".into()),
            pattern_type: pattern::LITERAL,
            ..any.clone()
        };
        assert!(!literal.matches(&b));
        assert!(check_binding(&b).is_ok());
        assert!(check_binding(&AclBinding {
            operation: 1,
            ..b.clone()
        })
        .is_err());
        assert!(check_binding(&AclBinding {
            pattern_type: pattern::MATCH,
            ..b
        })
        .is_err());
    }
}
