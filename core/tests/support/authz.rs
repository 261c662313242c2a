//! The authorizer in tests: its settings with User:admin a super user, a
//! connection with a TLS principal, and ACLs created by the admin.

use doze_core::security::acl::{AuthorizerConfig, Op};
use doze_core::security::{Listener, SecurityProtocol};
use doze_core::Input;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::{CreateAclsRequest, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::World;

/// On, User:admin a super user, no ACL meaning no access.
pub fn authorizer_on() -> AuthorizerConfig {
    AuthorizerConfig {
        enabled: true,
        super_users: vec!["User:admin".into()],
        allow_if_no_acl: false,
    }
}

/// `conn` comes in on a TLS listener whose certificate names `principal`.
pub fn connect_as(w: &mut World, conn: u64, principal: &str) {
    w.input(Input::Connected {
        conn,
        client_host: "/127.0.0.1".into(),
        listener: Listener {
            name: "SSL".into(),
            protocol: SecurityProtocol::Ssl,
            tls_principal: Some(principal.into()),
            internal: false,
        },
    });
}

/// One ACL, from any host.
pub struct Acl<'a> {
    pub principal: &'a str,
    pub resource_type: i8,
    pub name: &'a str,
    pub pattern_type: i8,
    pub op: Op,
    pub permission: i8,
}

/// `admin` (a super user's connection) creates the ACL; it must succeed.
pub fn create_acl(w: &mut World, admin: u64, acl: Acl<'_>) {
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let creation = AclCreation::default()
        .with_resource_type(acl.resource_type)
        .with_resource_name(s(acl.name))
        .with_resource_pattern_type(acl.pattern_type)
        .with_principal(s(acl.principal))
        .with_host(s("*"))
        .with_operation(acl.op.code())
        .with_permission_type(acl.permission);
    w.send(
        admin,
        3,
        &CreateAclsRequest::default().with_creations(vec![creation]),
    );
    match w.recv(admin) {
        Some((_, ResponseKind::CreateAcls(r))) => assert_eq!(
            r.results[0].error_code, 0,
            "{:?}",
            r.results[0].error_message
        ),
        other => panic!("expected a CreateAcls answer, got {other:?}"),
    }
}
