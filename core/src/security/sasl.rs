//! One connection's SASL exchange on a SASL listener, as Kafka's
//! SaslServerAuthenticator runs it: SaslHandshake names the mechanism
//! (UNSUPPORTED_SASL_MECHANISM when it is not enabled), then SaslAuthenticate
//! carries the mechanism's tokens until it succeeds or fails
//! (SASL_AUTHENTICATION_FAILED, then the connection is closed). SaslHandshake
//! v0 asks for the old unframed flow: the tokens then come and go as bare
//! size-prefixed frames, without Kafka request headers.
//!
//! PLAIN (RFC 4616) checks the password against the user's stored SCRAM
//! credential; SCRAM-SHA-256/512 run `scram::Exchange`.

use super::scram::{self, ClientFirst, Exchange, Mechanism};
use super::store::SecurityStore;

/// The mechanisms doze can serve, by Kafka's names.
pub const MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mech {
    Plain,
    Scram(Mechanism),
}

impl Mech {
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "PLAIN" => Some(Mech::Plain),
            other => Mechanism::from_name(other).map(Mech::Scram),
        }
    }
}

#[derive(Debug, Default)]
pub enum SaslState {
    /// Waiting for SaslHandshake.
    #[default]
    Start,
    /// The handshake chose a mechanism; `unframed`: SaslHandshake v0 asked
    /// for bare tokens.
    Chosen { mech: Mech, unframed: bool },
    /// SCRAM's server-first message went out; waiting for client-final.
    ScramFinal {
        exchange: Box<Exchange>,
        unframed: bool,
    },
    /// Authenticated as this principal.
    Done(String),
    /// Failed; the connection is being closed.
    Failed,
}

/// The outcome of one token.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this token back; more are expected.
    Continue(Vec<u8>),
    /// Authenticated as `principal`; send this last token.
    Done { token: Vec<u8>, principal: String },
    /// Refused: SASL_AUTHENTICATION_FAILED with this message, then close.
    Failed(String),
}

/// The message Kafka gives every failed authentication (the reason goes
/// to the log only: a client learns nothing of which part was wrong).
pub fn failure_message(mech: &str) -> String {
    format!("Authentication failed during authentication due to invalid credentials with SASL mechanism {mech}")
}

impl SaslState {
    /// The mechanism chosen, by Kafka's name.
    pub fn mechanism(&self) -> Option<String> {
        match self {
            SaslState::Chosen { mech, .. } => Some(match mech {
                Mech::Plain => "PLAIN".to_string(),
                Mech::Scram(m) => m.name().to_string(),
            }),
            SaslState::ScramFinal { exchange, .. } => Some(exchange.mechanism().name().to_string()),
            _ => None,
        }
    }

    pub fn is_done(&self) -> bool {
        matches!(self, SaslState::Done(_))
    }

    /// Tokens come as bare frames (after a SaslHandshake v0).
    pub fn unframed(&self) -> bool {
        matches!(
            self,
            SaslState::Chosen { unframed: true, .. } | SaslState::ScramFinal { unframed: true, .. }
        )
    }

    /// SaslHandshake: Ok, or the error code (UNSUPPORTED_SASL_MECHANISM 33,
    /// ILLEGAL_SASL_STATE 34).
    pub fn handshake(
        &mut self,
        mechanism: &str,
        enabled: &[String],
        version: i16,
    ) -> Result<(), i16> {
        if !matches!(self, SaslState::Start) {
            return Err(34);
        }
        let mech = Mech::from_name(mechanism)
            .filter(|_| enabled.iter().any(|e| e == mechanism))
            .ok_or(33i16)?;
        *self = SaslState::Chosen {
            mech,
            unframed: version == 0,
        };
        Ok(())
    }

    /// One SaslAuthenticate token (or bare token). `nonce` makes the
    /// server's part of a SCRAM nonce.
    pub fn authenticate(
        &mut self,
        token: &[u8],
        store: &SecurityStore,
        nonce: impl FnOnce() -> String,
    ) -> Step {
        let state = std::mem::replace(self, SaslState::Failed);
        let step = match state {
            SaslState::Chosen {
                mech: Mech::Plain, ..
            } => plain(token, store),
            SaslState::Chosen {
                mech: Mech::Scram(m),
                unframed,
            } => match scram_first(m, token, store, nonce) {
                Ok((exchange, reply)) => {
                    *self = SaslState::ScramFinal {
                        exchange: Box::new(exchange),
                        unframed,
                    };
                    return Step::Continue(reply);
                }
                Err(why) => Step::Failed(why),
            },
            SaslState::ScramFinal { exchange, .. } => match exchange.finish(token) {
                Ok(reply) => Step::Done {
                    token: reply,
                    principal: format!("User:{}", exchange.username()),
                },
                Err(e) => Step::Failed(e.0),
            },
            SaslState::Start | SaslState::Done(_) | SaslState::Failed => {
                Step::Failed("no SASL exchange in progress".into())
            }
        };
        if let Step::Done { principal, .. } = &step {
            *self = SaslState::Done(principal.clone());
        }
        step
    }
}

fn plain(token: &[u8], store: &SecurityStore) -> Step {
    let mut parts = token.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Step::Failed("a PLAIN token is authzid NUL user NUL password".into());
    };
    let (Ok(authzid), Ok(user)) = (std::str::from_utf8(authzid), std::str::from_utf8(user)) else {
        return Step::Failed("a PLAIN user that is not UTF-8".into());
    };
    if user.is_empty() || (!authzid.is_empty() && authzid != user) {
        return Step::Failed("an empty user, or an authorization id other than the user".into());
    }
    if !store.check_password(user, password) {
        return Step::Failed(format!("invalid password for {user:?}"));
    }
    Step::Done {
        token: Vec::new(),
        principal: format!("User:{user}"),
    }
}

fn scram_first(
    m: Mechanism,
    token: &[u8],
    store: &SecurityStore,
    nonce: impl FnOnce() -> String,
) -> Result<(Exchange, Vec<u8>), String> {
    let first = ClientFirst::parse(token).map_err(|e| e.0)?;
    let credential = store
        .credential(&first.username, m)
        .cloned()
        .ok_or_else(|| format!("no {} credential for {:?}", m.name(), first.username))?;
    if credential.iterations < scram::ITERATIONS_MIN
        || credential.iterations > scram::ITERATIONS_MAX
    {
        return Err("a stored credential with iterations out of range".into());
    }
    Ok(Exchange::start(m, credential, first, &nonce()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::scram::Credential;

    fn store() -> SecurityStore {
        let mut s = SecurityStore::default();
        for m in Mechanism::ALL {
            s.set_credential(
                "alice".into(),
                m,
                Credential::from_password(m, b"secret", b"salt1234", 4096),
            );
        }
        s
    }

    fn enabled() -> Vec<String> {
        MECHANISMS.iter().map(|m| m.to_string()).collect()
    }

    #[test]
    fn plain_checks_the_scram_credential() {
        let s = store();
        let mut st = SaslState::default();
        assert_eq!(st.handshake("GSSAPI", &enabled(), 1), Err(33));
        st.handshake("PLAIN", &enabled(), 1).unwrap();
        assert_eq!(
            st.handshake("PLAIN", &enabled(), 1),
            Err(34),
            "one handshake"
        );
        let step = st.authenticate(b"\0alice\0secret", &s, || unreachable!());
        assert!(matches!(step, Step::Done { ref principal, .. } if principal == "User:alice"));
        assert!(st.is_done());
        let mut bad = SaslState::default();
        bad.handshake("PLAIN", &enabled(), 1).unwrap();
        assert!(matches!(
            bad.authenticate(b"\0alice\0wrong", &s, String::new),
            Step::Failed(_)
        ));
        for token in [
            &b"alice\0secret"[..],
            b"\0alice\0secret\0x",
            b"bob\0alice\0secret",
            b"",
        ] {
            let mut st = SaslState::default();
            st.handshake("PLAIN", &enabled(), 1).unwrap();
            assert!(
                matches!(st.authenticate(token, &s, String::new), Step::Failed(_)),
                "{token:?}"
            );
        }
    }

    #[test]
    fn scram_runs_two_round_trips_and_refuses_a_bad_proof() {
        let s = store();
        let mut st = SaslState::default();
        st.handshake("SCRAM-SHA-256", &enabled(), 0).unwrap();
        assert!(st.unframed());
        let Step::Continue(server_first) =
            st.authenticate(b"n,,n=alice,r=cnonce", &s, || "snonce".into())
        else {
            panic!("server-first expected")
        };
        let server_first = String::from_utf8(server_first).unwrap();
        assert!(
            server_first.starts_with("r=cnoncesnonce,s="),
            "{server_first}"
        );
        // A final message with a wrong proof (any proof: we do not compute it here).
        let step = st.authenticate(b"c=biws,r=cnoncesnonce,p=AAAA", &s, String::new);
        assert!(matches!(step, Step::Failed(_)));
        assert!(matches!(st, SaslState::Failed));
        // An unknown user fails at once.
        let mut st = SaslState::default();
        st.handshake("SCRAM-SHA-512", &enabled(), 1).unwrap();
        assert!(matches!(
            st.authenticate(b"n,,n=bob,r=x", &s, String::new),
            Step::Failed(_)
        ));
        // Tokens before a handshake fail.
        let mut st = SaslState::default();
        assert!(matches!(
            st.authenticate(b"x", &s, String::new),
            Step::Failed(_)
        ));
    }
}
