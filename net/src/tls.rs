//! TLS for the SSL and SASL_SSL listeners (rustls, with the ring provider),
//! and the principal a client certificate names.
//!
//! The material is Kafka's PEM keystore and truststore: one file with the
//! broker's certificate chain and its private key (`ssl.keystore.location`),
//! and one with the CA certificates client certificates must chain to
//! (`ssl.truststore.location`). Both are read once, at start-up.
//!
//! `ssl.client.auth` applies to SSL listeners. On SASL_SSL listeners the
//! SASL exchange names the principal and no certificate is asked for, as
//! Kafka does unless the setting is given for that listener alone.
//!
//! A client certificate's principal is what Kafka's default principal
//! builder makes of it: `User:` and the subject's distinguished name as
//! `X500Principal.getName()` prints it (RFC 2253: the last RDN first,
//! `CN=alice,O=doze`).

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;
use x509_parser::der_parser::asn1_rs::Any;
use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

use crate::config::{ClientAuth, TlsSettings};

/// The acceptors a broker's TLS listeners use: one asks for client
/// certificates as `ssl.client.auth` says (SSL), one never does (SASL_SSL).
#[derive(Clone)]
pub struct Acceptors {
    pub ssl: TlsAcceptor,
    pub sasl_ssl: TlsAcceptor,
}

impl Acceptors {
    /// Reads the keystore (and the truststore if an SSL listener asks for
    /// client certificates). The error names the file and what is wrong
    /// with it.
    pub fn load(settings: &TlsSettings, ssl_listener: bool) -> anyhow::Result<Self> {
        let keystore = settings
            .keystore
            .as_deref()
            .ok_or_else(|| anyhow!("ssl.keystore.location is not set"))?;
        let (chain, key) = read_keystore(keystore)?;
        let provider = Arc::new(ring::default_provider());

        let plain = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_single_cert(chain.clone(), key.clone_key())
            .with_context(|| format!("ssl.keystore.location {}", keystore.display()))?;
        let plain = Arc::new(plain);

        let client_auth = if ssl_listener {
            settings.client_auth
        } else {
            ClientAuth::None
        };
        let ssl = match client_auth {
            ClientAuth::None => Arc::clone(&plain),
            ask => {
                let truststore = settings.truststore.as_deref().ok_or_else(|| {
                    anyhow!("ssl.client.auth is {ask:?}: set ssl.truststore.location")
                })?;
                let roots = Arc::new(read_truststore(truststore)?);
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(roots, Arc::clone(&provider));
                let verifier = match ask {
                    ClientAuth::Requested => verifier.allow_unauthenticated(),
                    _ => verifier,
                }
                .build()
                .with_context(|| format!("ssl.truststore.location {}", truststore.display()))?;
                let config = ServerConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .context("TLS protocol versions")?
                    .with_client_cert_verifier(verifier)
                    .with_single_cert(chain, key)
                    .with_context(|| format!("ssl.keystore.location {}", keystore.display()))?;
                Arc::new(config)
            }
        };
        Ok(Self {
            ssl: TlsAcceptor::from(ssl),
            sasl_ssl: TlsAcceptor::from(plain),
        })
    }
}

fn read_pem(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {what} {}", path.display()))
}

/// The chain (the broker's certificate first) and the key of a PEM keystore.
fn read_keystore(
    path: &Path,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let what = "ssl.keystore.location";
    let pem = read_pem(path, what)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{what} {}", path.display()))?;
    if chain.is_empty() {
        return Err(anyhow!(
            "{what} {}: no CERTIFICATE in it (a PEM keystore holds the certificate chain and the key)",
            path.display()
        ));
    }
    if contains(&pem, b"ENCRYPTED PRIVATE KEY") {
        return Err(anyhow!(
            "{what} {}: the private key is encrypted; doze-kafka reads unencrypted keys only",
            path.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        anyhow!(
            "{what} {}: no usable PRIVATE KEY in it ({e})",
            path.display()
        )
    })?;
    Ok((chain, key))
}

fn read_truststore(path: &Path) -> anyhow::Result<RootCertStore> {
    let what = "ssl.truststore.location";
    let pem = read_pem(path, what)?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.with_context(|| format!("{what} {}", path.display()))?;
        roots
            .add(cert)
            .with_context(|| format!("{what} {}: a certificate is unusable", path.display()))?;
    }
    if roots.is_empty() {
        return Err(anyhow!("{what} {}: no CERTIFICATE in it", path.display()));
    }
    Ok(roots)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `User:<subject DN>` for a client's end-entity certificate, as Kafka's
/// default principal builder names it; None if it cannot be parsed (the
/// verifier accepted it, so that does not happen in practice).
pub fn principal(certificate: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(certificate).ok()?;
    Some(format!("User:{}", rfc2253(cert.subject())))
}

/// A distinguished name as Java's `X500Principal.getName()` prints it
/// (RFC 2253): RDNs last to first, comma-separated without spaces,
/// multi-valued ones joined by `+`; the keywords CN, C, L, ST, O, OU,
/// STREET, DC and UID, any other attribute as its OID with its value's
/// DER in hex (`1.2.840.113549.1.9.1=#16...`).
pub fn rfc2253(name: &X509Name) -> String {
    let rdns: Vec<String> = name
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|ava| {
                    let oid = ava.attr_type().to_id_string();
                    let value = ava.attr_value();
                    match keyword(&oid) {
                        Some(keyword) => match string_value(value) {
                            Some(text) => format!("{keyword}={}", escape(&text)),
                            None => format!("{keyword}=#{}", hex_der(value)),
                        },
                        None => format!("{oid}=#{}", hex_der(value)),
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// The RFC 2253 keywords Java prints by name.
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// The text of a string-typed attribute value.
fn string_value(value: &Any) -> Option<String> {
    use x509_parser::der_parser::asn1_rs::Tag;
    let data = value.data;
    match value.tag() {
        Tag::Utf8String
        | Tag::PrintableString
        | Tag::Ia5String
        | Tag::TeletexString
        | Tag::VisibleString
        | Tag::NumericString => std::str::from_utf8(data).ok().map(str::to_string),
        Tag::BmpString => {
            let units: Vec<u16> = data
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        Tag::UniversalString => data
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => None,
    }
}

/// RFC 2253 escaping, as Java does it: `,+"\<>;` anywhere, `#` or a space
/// at the start, a space at the end.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The value's whole DER encoding (tag, length, contents) in lower-case hex.
fn hex_der(value: &Any) -> String {
    use x509_parser::der_parser::asn1_rs::ToDer;
    let der = value.to_der_vec().unwrap_or_default();
    der.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(escape("alice"), "alice");
        assert_eq!(escape("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape("#x "), "\\#x\\ ");
        assert_eq!(escape(" a"), "\\ a");
        assert_eq!(escape(""), "");
    }

    #[test]
    fn principal_of_a_certificate() {
        let mut params = rcgen::CertificateParams::default();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "NO");
        dn.push(rcgen::DnType::OrganizationName, "doze, inc");
        dn.push(rcgen::DnType::CommonName, "alice");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            principal(cert.der()).as_deref(),
            Some("User:CN=alice,O=doze\\, inc,C=NO")
        );
        assert_eq!(principal(b"not a certificate"), None);
    }
}
