//! Who a connection is and what it may do.
//!
//! - The driver says, per connection, which listener it came in on (its
//!   security protocol) and, on a TLS listener with client authentication,
//!   the principal its certificate names (`Input::Connected`).
//! - On SASL listeners a connection is unauthenticated until SaslHandshake
//!   and SaslAuthenticate succeed (`sasl`); before that only ApiVersions and
//!   those two are served, anything else closes it, as Kafka does.
//! - SCRAM credentials and ACLs live in meta.db (`store`), changed through
//!   AlterUserScramCredentials, CreateAcls and DeleteAcls.
//! - With the authorizer on, each API asks `Broker::authorized` what Kafka's
//!   KafkaApis asks (`acl`); the table of APIs and operations is
//!   `authz::TABLE`.

pub mod acl;
pub mod authz;
pub mod sasl;
pub mod scram;
pub mod store;

/// Kafka's security protocols.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    #[default]
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "PLAINTEXT" => Self::Plaintext,
            "SSL" => Self::Ssl,
            "SASL_PLAINTEXT" => Self::SaslPlaintext,
            "SASL_SSL" => Self::SaslSsl,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    pub fn is_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }

    pub fn is_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }
}

/// The listener a connection came in on, as the driver tells it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listener {
    /// Its name (`PLAINTEXT`, `SASL_SSL`, or a custom one); "" for the
    /// default listener.
    pub name: String,
    pub protocol: SecurityProtocol,
    /// On a TLS listener with client authentication, the principal the
    /// client's certificate names (`User:CN=...`).
    pub tls_principal: Option<String>,
    /// The broker's own in-process connection (the web console's Kafka
    /// client), which no network peer can open: it may DESCRIBE and
    /// DESCRIBE_CONFIGS anything and READ any topic whatever the ACLs say
    /// (`Broker::authorized`), so that the console shows everything on a
    /// broker with SASL and ACLs; any other operation is checked as for
    /// `User:ANONYMOUS`.
    pub internal: bool,
}

/// The principal of a connection that has not authenticated (PLAINTEXT,
/// or TLS without a client certificate), as Kafka names it.
pub const ANONYMOUS: &str = "User:ANONYMOUS";
