//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) on the server side,
//! as Kafka's ScramSaslServer runs it: salted credentials only (the broker
//! never holds a password), no channel binding, the username as the
//! principal (`User:<name>`).
//!
//! The exchange is two round trips: client-first → server-first (the
//! client's nonce with ours appended, the salt, the iterations), then
//! client-final (the proof) → server-final (our signature). Our nonce comes
//! from `nonce` (the caller's deterministic entropy: the core has no OS
//! randomness).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha512};

/// The iterations Kafka requires at least (ScramMechanism.minIterations).
pub const ITERATIONS_MIN: i32 = 4096;
/// And at most (ScramMechanism.maxIterations), so a stored credential
/// cannot make one login cost minutes.
pub const ITERATIONS_MAX: i32 = 16384;

/// The two mechanisms, with Kafka's names and wire codes
/// (DescribeUserScramCredentials: 1 and 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mechanism {
    #[serde(rename = "SCRAM-SHA-256")]
    Sha256,
    #[serde(rename = "SCRAM-SHA-512")]
    Sha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha256, Mechanism::Sha512];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The code of ScramMechanism in the admin APIs.
    pub fn code(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }

    pub fn from_code(code: i8) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.code() == code)
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => Sha256::digest(data).to_vec(),
            Mechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => {
                let mut m = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            Mechanism::Sha512 => {
                let mut m = Hmac::<Sha512>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    /// Hi() of RFC 5802: PBKDF2 with this mechanism's HMAC.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            Mechanism::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
        }
    }
}

/// What the broker keeps of a user's password for one mechanism (Kafka's
/// ScramCredential), stored in meta.db.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential {
    #[serde(with = "b64")]
    pub salt: Vec<u8>,
    #[serde(with = "b64")]
    pub stored_key: Vec<u8>,
    #[serde(with = "b64")]
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl Credential {
    /// From the salted password AlterUserScramCredentials carries (the
    /// client salts and hashes; the broker never sees the password).
    pub fn from_salted(mechanism: Mechanism, salt: &[u8], salted: &[u8], iterations: i32) -> Self {
        let client_key = mechanism.hmac(salted, b"Client Key");
        Self {
            salt: salt.to_vec(),
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted, b"Server Key"),
            iterations,
        }
    }

    pub fn from_password(
        mechanism: Mechanism,
        password: &[u8],
        salt: &[u8],
        iterations: i32,
    ) -> Self {
        let salted = mechanism.salted_password(password, salt, iterations.max(1) as u32);
        Self::from_salted(mechanism, salt, &salted, iterations)
    }

    /// Whether `password` is this credential's (SASL/PLAIN's check).
    pub fn matches_password(&self, mechanism: Mechanism, password: &[u8]) -> bool {
        let iterations = self.iterations.clamp(1, ITERATIONS_MAX) as u32;
        let salted = mechanism.salted_password(password, &self.salt, iterations);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        ct_eq(&mechanism.hash(&client_key), &self.stored_key)
    }
}

/// Equality without an early exit, so timing tells nothing of where keys differ.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

mod b64 {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&B64.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        B64.decode(text).map_err(serde::de::Error::custom)
    }
}

/// Why an exchange failed; the client is told only that it failed
/// (SASL_AUTHENTICATION_FAILED), the log says why.
#[derive(Debug, PartialEq, Eq)]
pub struct ScramError(pub String);

fn fail<T>(why: impl Into<String>) -> Result<T, ScramError> {
    Err(ScramError(why.into()))
}

/// A username in a SCRAM message: `=2C` is a comma, `=3D` an equals sign,
/// any other `=` is malformed (RFC 5802 section 5.1).
fn decode_saslname(raw: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return fail("a malformed username"),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The attributes of a SCRAM message, `k=v` separated by commas.
fn attributes(message: &str) -> Result<Vec<(char, &str)>, ScramError> {
    message
        .split(',')
        .map(|part| {
            let mut chars = part.chars();
            match (chars.next(), chars.next()) {
                (Some(k), Some('=')) if k.is_ascii_alphabetic() => Ok((k, &part[2..])),
                _ => fail(format!("a malformed attribute {part:?}")),
            }
        })
        .collect()
}

/// The client-first message, parsed.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFirst {
    pub username: String,
    pub nonce: String,
    /// `n=...,r=...` (and any extensions): the part the proof signs.
    bare: String,
    /// `n,,` (or `y,,`): echoed base64 in the client-final's `c=`.
    gs2_header: String,
}

impl ClientFirst {
    pub fn parse(message: &[u8]) -> Result<Self, ScramError> {
        let text = std::str::from_utf8(message).map_err(|_| ScramError("not UTF-8".into()))?;
        // gs2-header: cbind-flag "," [authzid] ","
        let mut parts = text.splitn(3, ',');
        let (flag, authzid, bare) = match (parts.next(), parts.next(), parts.next()) {
            (Some(f), Some(a), Some(b)) => (f, a, b),
            _ => return fail("no gs2 header"),
        };
        if flag != "n" && flag != "y" {
            return fail("channel binding is not supported");
        }
        let attrs = attributes(bare)?;
        let username = match attrs.first() {
            Some(('n', name)) => decode_saslname(name)?,
            _ => return fail("no username first"),
        };
        let nonce = match attrs.get(1) {
            Some(('r', nonce)) if !nonce.is_empty() && nonce.is_ascii() && !nonce.contains(',') => {
                nonce.to_string()
            }
            _ => return fail("no client nonce second"),
        };
        if !authzid.is_empty() {
            // Kafka accepts an authorization id only when it is the user.
            let id = authzid
                .strip_prefix("a=")
                .map(decode_saslname)
                .transpose()?;
            if id.as_deref() != Some(username.as_str()) {
                return fail("an authorization id other than the username");
            }
        }
        Ok(Self {
            username,
            nonce,
            bare: bare.to_string(),
            gs2_header: format!("{flag},{authzid},"),
        })
    }
}

/// The server's side of one exchange after the client-first message.
#[derive(Debug)]
pub struct Exchange {
    mechanism: Mechanism,
    credential: Credential,
    first: ClientFirst,
    server_first: String,
    nonce: String,
}

impl Exchange {
    /// Answers `first` for `credential`, appending `server_nonce` (printable
    /// ASCII, no comma) to the client's nonce. Returns the server-first message.
    pub fn start(
        mechanism: Mechanism,
        credential: Credential,
        first: ClientFirst,
        server_nonce: &str,
    ) -> (Self, Vec<u8>) {
        let nonce = format!("{}{server_nonce}", first.nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        let message = server_first.clone().into_bytes();
        let exchange = Self {
            mechanism,
            credential,
            first,
            server_first,
            nonce,
        };
        (exchange, message)
    }

    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    pub fn username(&self) -> &str {
        &self.first.username
    }

    /// Checks the client-final message; returns the server-final one.
    pub fn finish(&self, message: &[u8]) -> Result<Vec<u8>, ScramError> {
        let text = std::str::from_utf8(message).map_err(|_| ScramError("not UTF-8".into()))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or_else(|| ScramError("no proof".into()))?;
        let attrs = attributes(without_proof)?;
        let binding = match attrs.first() {
            Some(('c', c)) => B64
                .decode(c)
                .map_err(|_| ScramError("bad channel binding".into()))?,
            _ => return fail("no channel binding first"),
        };
        if binding != self.first.gs2_header.as_bytes() {
            return fail("the channel binding is not the gs2 header sent first");
        }
        match attrs.get(1) {
            Some(('r', nonce)) if *nonce == self.nonce => {}
            _ => return fail("the nonce is not the one agreed"),
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| ScramError("a proof that is not base64".into()))?;
        let m = self.mechanism;
        let auth_message = format!("{},{},{without_proof}", self.first.bare, self.server_first);
        let client_signature = m.hmac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return fail("a proof of the wrong length");
        }
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        if !ct_eq(&m.hash(&client_key), &self.credential.stored_key) {
            return fail("invalid credentials");
        }
        let server_signature = m.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3's example exchange, with its server nonce.
    #[test]
    fn rfc_7677_example() {
        let m = Mechanism::Sha256;
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = Credential::from_password(m, b"pencil", &salt, 4096);
        let first = ClientFirst::parse(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        assert_eq!(first.username, "user");
        let (exchange, server_first) = Exchange::start(
            m,
            credential.clone(),
            first,
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        );
        assert_eq!(
            server_first,
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let final_ok = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(
            exchange.finish(final_ok).unwrap(),
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        // A flipped proof bit, a replayed nonce of another exchange, a
        // missing proof: refused.
        let bad_proof = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=eHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert!(exchange.finish(bad_proof).is_err());
        let other_nonce =
            b"c=biws,r=rOprNGfwEbeRWgbNEkqOother,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert!(exchange.finish(other_nonce).is_err());
        assert!(exchange.finish(b"c=biws,r=x").is_err());
        assert!(credential.matches_password(m, b"pencil"));
        assert!(!credential.matches_password(m, b"pencil2"));
    }

    #[test]
    fn client_first_is_checked() {
        assert!(ClientFirst::parse(b"p=tls-unique,,n=user,r=abc").is_err());
        assert!(ClientFirst::parse(b"n,,r=abc,n=user").is_err());
        assert!(ClientFirst::parse(b"n,,n=us=er,r=abc").is_err());
        assert!(ClientFirst::parse(b"n,a=other,n=user,r=abc").is_err());
        assert!(ClientFirst::parse(b"\xff").is_err());
        assert!(ClientFirst::parse(b"").is_err());
        let f = ClientFirst::parse(b"n,a=a=2Cb,n=a=2Cb,r=abc").unwrap();
        assert_eq!(f.username, "a,b");
    }

    #[test]
    fn sha512_round_trip() {
        let m = Mechanism::Sha512;
        let credential = Credential::from_password(m, b"secret", b"salty", 4096);
        assert_eq!(credential.stored_key.len(), 64);
        assert!(credential.matches_password(m, b"secret"));
    }
}
