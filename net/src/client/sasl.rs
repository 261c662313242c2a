//! SASL logins for connections to SASL_PLAINTEXT listeners: PLAIN and
//! SCRAM-SHA-256/512 (RFC 5802), through SaslHandshake v1 and
//! SaslAuthenticate (KIP-152), right after ApiVersions, as Kafka's clients
//! do. The password never leaves this module except in the PLAIN token and
//! is not printed by `Debug`.

use std::fmt;

use base64::Engine;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;
use sha2::{Digest, Sha256, Sha512};
use tokio::io::{AsyncRead, AsyncWrite};

use super::error::{Error, KafkaError};
use super::Connection;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
/// Bytes of randomness in a SCRAM client nonce.
const NONCE_BYTES: usize = 24;
/// A server asking more iterations than this is refused (a hostile server
/// could make the client spin); Kafka's own limit is 16384.
const ITERATIONS_MAX: u32 = 16_384;

/// A SASL mechanism the client can log in with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    /// From Kafka's `sasl.mechanism` name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "PLAIN" => Some(Self::Plain),
            "SCRAM-SHA-256" => Some(Self::ScramSha256),
            "SCRAM-SHA-512" => Some(Self::ScramSha512),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// Who to log in as.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslConfig {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: String,
}

impl fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslConfig")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Logs `conn` in; an error if the broker refuses the mechanism or the
/// credentials (SASL_AUTHENTICATION_FAILED, with the broker's message).
pub(crate) async fn login<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    sasl: &SaslConfig,
) -> Result<(), Error> {
    let about = format!("SASL {} login as {}", sasl.mechanism.name(), sasl.username);
    let handshake = SaslHandshakeRequest::default()
        .with_mechanism(StrBytes::from_static_str(sasl.mechanism.name()));
    // v1: the tokens go in SaslAuthenticate requests, not raw frames.
    let r = conn.send_at(1, &handshake).await?;
    if r.error_code != 0 {
        let enabled: Vec<&str> = r.mechanisms.iter().map(|m| m.as_str()).collect();
        let message = format!("the broker offers {}", enabled.join(", "));
        KafkaError::check(r.error_code, Some(&message), about.clone())?;
    }
    match sasl.mechanism {
        SaslMechanism::Plain => {
            let token = format!("\0{}\0{}", sasl.username, sasl.password);
            authenticate(conn, token.into_bytes(), &about).await?;
            Ok(())
        }
        SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => scram(conn, sasl, &about).await,
    }
}

async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    token: Vec<u8>,
    about: &str,
) -> Result<Bytes, Error> {
    let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
    let r = conn.send(&req).await?;
    KafkaError::check(r.error_code, r.error_message.as_deref(), about)?;
    Ok(r.auth_bytes)
}

async fn scram<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    sasl: &SaslConfig,
    about: &str,
) -> Result<(), Error> {
    let addr = conn.addr().to_string();
    let refused = |why: &str| Error::Protocol {
        addr: addr.clone(),
        reason: format!("{about}: {why}"),
    };
    let client_nonce = B64.encode(random_bytes::<NONCE_BYTES>().map_err(|e| refused(&e))?);
    let first_bare = format!("n={},r={client_nonce}", saslname(&sasl.username));
    let server_first = authenticate(conn, format!("n,,{first_bare}").into_bytes(), about).await?;
    let server_first = String::from_utf8(server_first.to_vec())
        .map_err(|_| refused("a server-first message that is not UTF-8"))?;
    let field = |name: char| {
        server_first
            .split(',')
            .find_map(|f| f.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
    };
    let nonce = field('r').ok_or_else(|| refused("no nonce from the server"))?;
    if !nonce.starts_with(&client_nonce) || nonce.len() == client_nonce.len() {
        return Err(refused("the server's nonce does not extend ours"));
    }
    let salt = field('s')
        .and_then(|s| B64.decode(s).ok())
        .ok_or_else(|| refused("no salt from the server"))?;
    let iterations: u32 = field('i')
        .and_then(|i| i.parse().ok())
        .filter(|&i| (1..=ITERATIONS_MAX).contains(&i))
        .ok_or_else(|| refused("no usable iteration count from the server"))?;

    let h = Hash(sasl.mechanism);
    let salted = h.salted_password(sasl.password.as_bytes(), &salt, iterations);
    let client_key = h.hmac(&salted, b"Client Key");
    let stored_key = h.hash(&client_key);
    // c=biws: base64 of the gs2 header `n,,` (no channel binding).
    let final_bare = format!("c=biws,r={nonce}");
    let auth_message = format!("{first_bare},{server_first},{final_bare}");
    let signature = h.hmac(&stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(a, b)| a ^ b)
        .collect();
    let server_final = authenticate(
        conn,
        format!("{final_bare},p={}", B64.encode(proof)).into_bytes(),
        about,
    )
    .await?;
    // The server proves it knew the credential too.
    let server_key = h.hmac(&salted, b"Server Key");
    let expected = format!(
        "v={}",
        B64.encode(h.hmac(&server_key, auth_message.as_bytes()))
    );
    if server_final.as_ref() != expected.as_bytes() {
        return Err(refused(
            "the server's signature does not match the credential",
        ));
    }
    Ok(())
}

/// A username in a SCRAM message: `,` and `=` escaped (RFC 5802 5.1).
fn saslname(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

fn random_bytes<const N: usize>() -> Result<[u8; N], String> {
    use std::io::Read;
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(bytes)
}

/// The SCRAM primitives of one mechanism's hash.
struct Hash(SaslMechanism);

impl Hash {
    fn hash(&self, data: &[u8]) -> Vec<u8> {
        match self.0 {
            SaslMechanism::ScramSha512 => Sha512::digest(data).to_vec(),
            _ => Sha256::digest(data).to_vec(),
        }
    }

    fn hmac(&self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self.0 {
            SaslMechanism::ScramSha512 => {
                let mut m = Hmac::<Sha512>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            _ => {
                let mut m = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    /// Hi() of RFC 5802.
    fn salted_password(&self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mechanism = match self.0 {
            SaslMechanism::ScramSha512 => doze_core::security::scram::Mechanism::Sha512,
            _ => doze_core::security::scram::Mechanism::Sha256,
        };
        mechanism.salted_password(password, salt, iterations)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_7677_test_vector() {
        // RFC 7677 section 3 (SCRAM-SHA-256): user "user", password
        // "pencil", the client's proof and the server's signature.
        let h = Hash(SaslMechanism::ScramSha256);
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = h.salted_password(b"pencil", &salt, 4096);
        let first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO";
        let server_first =
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let final_bare = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let auth = format!("{first_bare},{server_first},{final_bare}");
        let client_key = h.hmac(&salted, b"Client Key");
        let signature = h.hmac(&h.hash(&client_key), auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        assert_eq!(
            B64.encode(proof),
            "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let server_key = h.hmac(&salted, b"Server Key");
        assert_eq!(
            B64.encode(h.hmac(&server_key, auth.as_bytes())),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }

    #[test]
    fn names_and_redaction() {
        assert_eq!(saslname("a=b,c"), "a=3Db=2Cc");
        assert_eq!(
            SaslMechanism::from_name("SCRAM-SHA-512"),
            Some(SaslMechanism::ScramSha512)
        );
        assert_eq!(SaslMechanism::from_name("GSSAPI"), None);
        let c = SaslConfig {
            mechanism: SaslMechanism::Plain,
            username: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
