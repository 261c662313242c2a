//! `doze-kafka users add` writes a SCRAM credential into a data dir that the
//! broker then accepts: SASL/PLAIN logins on SASL_PLAINTEXT and SASL_SSL
//! listeners (the right password authenticates, a wrong one gets
//! SASL_AUTHENTICATION_FAILED), and a full SCRAM-SHA-256 exchange; while
//! the broker runs, `users add` refuses its data dir.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use common::{Broker, Client};
use hmac::{Hmac, Mac};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sha2::{Digest, Sha256};

const SASL_AUTHENTICATION_FAILED: i16 = 58;

/// Runs `doze-kafka users add` with `password` on stdin: (exit code,
/// stdout, stderr).
fn users_add(
    data_dir: &Path,
    user: &str,
    mechanism: &str,
    password: &str,
) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_doze-kafka"))
        .args([
            "users",
            "add",
            user,
            "--mechanism",
            mechanism,
            "--password-stdin",
            "--data-dir",
        ])
        .arg(data_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A usage error (an unknown mechanism) exits before reading stdin, and
    // then the write fails with a broken pipe: the exit code tells.
    let _ = writeln!(child.stdin.take().unwrap(), "{password}");
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn handshake<S: std::io::Read + Write>(c: &mut Client<S>, mechanism: &'static str) {
    let req = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
    match c.request(1, &req) {
        ResponseKind::SaslHandshake(r) => assert_eq!(r.error_code, 0, "{mechanism}"),
        other => panic!("{other:?}"),
    }
}

fn authenticate<S: std::io::Read + Write>(c: &mut Client<S>, token: &[u8]) -> (i16, Bytes) {
    let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token));
    match c.request(2, &req) {
        ResponseKind::SaslAuthenticate(r) => (r.error_code, r.auth_bytes),
        other => panic!("{other:?}"),
    }
}

/// PLAIN with `password`: the SaslAuthenticate error code; after a
/// success, Metadata is served.
fn plain_login<S: std::io::Read + Write>(c: &mut Client<S>, user: &str, password: &str) -> i16 {
    handshake(c, "PLAIN");
    let (code, _) = authenticate(c, format!("\0{user}\0{password}").as_bytes());
    if code == 0 {
        match c.request(12, &MetadataRequest::default().with_topics(None)) {
            ResponseKind::Metadata(r) => assert_eq!(r.brokers.len(), 1),
            other => panic!("{other:?}"),
        }
    }
    code
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// The client side of SCRAM-SHA-256 (RFC 5802), checking the server's
/// signature too.
fn scram_sha256_login<S: std::io::Read + Write>(
    c: &mut Client<S>,
    user: &str,
    password: &str,
) -> i16 {
    let b64 = base64::engine::general_purpose::STANDARD;
    handshake(c, "SCRAM-SHA-256");
    let client_nonce = "fyko+d2lbbFgONRv9qkxdawL";
    let first_bare = format!("n={user},r={client_nonce}");
    let (code, server_first) = authenticate(c, format!("n,,{first_bare}").as_bytes());
    assert_eq!(code, 0, "client-first accepted");
    let server_first = String::from_utf8(server_first.to_vec()).unwrap();
    let field = |name: &str| {
        server_first
            .split(',')
            .find_map(|f| f.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {server_first}"))
            .to_string()
    };
    let nonce = field("r=");
    assert!(nonce.starts_with(client_nonce));
    let salt = b64.decode(field("s=")).unwrap();
    let iterations: u32 = field("i=").parse().unwrap();
    assert_eq!(iterations, 4096);

    let salted = pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password.as_bytes(), &salt, iterations);
    let client_key = hmac(&salted, b"Client Key");
    let stored_key = Sha256::digest(&client_key);
    let final_bare = format!("c=biws,r={nonce}");
    let auth_message = format!("{first_bare},{server_first},{final_bare}");
    let signature = hmac(&stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(a, b)| a ^ b)
        .collect();
    let (code, server_final) = authenticate(
        c,
        format!("{final_bare},p={}", b64.encode(proof)).as_bytes(),
    );
    if code == 0 {
        let server_key = hmac(&salted, b"Server Key");
        let expected = b64.encode(hmac(&server_key, auth_message.as_bytes()));
        assert_eq!(
            String::from_utf8_lossy(&server_final),
            format!("v={expected}")
        );
    }
    code
}

#[test]
fn users_add_writes_credentials_the_broker_accepts() {
    let data_dir =
        std::env::temp_dir().join(format!("doze-net-test-sasl-users-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);

    let (code, out, err) = users_add(&data_dir, "alice", "SCRAM-SHA-256", "alice-secret");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("added") && out.contains("alice") && out.contains("SCRAM-SHA-256"),
        "{out}"
    );
    let (code, _, err) = users_add(&data_dir, "bob", "SCRAM-SHA-512", "bob-secret");
    assert_eq!(code, 0, "{err}");
    // Usage errors: no --password-stdin, an unknown mechanism.
    let status = Command::new(env!("CARGO_BIN_EXE_doze-kafka"))
        .args([
            "users",
            "add",
            "carol",
            "--mechanism",
            "SCRAM-SHA-256",
            "--data-dir",
        ])
        .arg(&data_dir)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2));
    let (code, _, _) = users_add(&data_dir, "carol", "SCRAM-MD5", "pw");
    assert_eq!(code, 2);

    let broker = Broker::start_on(
        data_dir.clone(),
        &["--set", "listeners=SASL_PLAINTEXT://127.0.0.1:0"],
    );
    let addr = broker.listener("SASL_PLAINTEXT");

    assert_eq!(
        plain_login(&mut common::connect(&addr), "alice", "alice-secret"),
        0
    );
    assert_eq!(
        plain_login(&mut common::connect(&addr), "bob", "bob-secret"),
        0
    );
    assert_eq!(
        plain_login(&mut common::connect(&addr), "alice", "wrong"),
        SASL_AUTHENTICATION_FAILED
    );
    assert_eq!(
        plain_login(&mut common::connect(&addr), "carol", "pw"),
        SASL_AUTHENTICATION_FAILED
    );
    assert_eq!(
        scram_sha256_login(&mut common::connect(&addr), "alice", "alice-secret"),
        0
    );
    assert_eq!(
        scram_sha256_login(&mut common::connect(&addr), "alice", "wrong"),
        SASL_AUTHENTICATION_FAILED
    );

    // The broker holds the data dir.
    let (code, _, err) = users_add(&data_dir, "dave", "SCRAM-SHA-256", "pw");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("in use"), "{err}");
}

#[test]
fn sasl_ssl_logins_run_over_tls() {
    let data_dir =
        std::env::temp_dir().join(format!("doze-net-test-sasl-ssl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let (code, _, err) = users_add(&data_dir, "alice", "SCRAM-SHA-512", "alice-secret");
    assert_eq!(code, 0, "{err}");

    // A self-signed server certificate is enough here.
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let keystore = data_dir.with_extension("keystore.pem");
    std::fs::write(&keystore, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();

    let broker = Broker::start_on(
        data_dir.clone(),
        &[
            "--set",
            "listeners=CLIENTS://127.0.0.1:0",
            "--set",
            "listener.security.protocol.map=CLIENTS:SASL_SSL",
            "--set",
            &format!("ssl.keystore.location={}", keystore.display()),
            // Asked of SSL listeners only: SASL names the principal here.
            "--set",
            &format!("ssl.truststore.location={}", keystore.display()),
            "--set",
            "ssl.client.auth=required",
        ],
    );
    let addr = broker.listener("CLIENTS");
    let connect = || {
        use tokio_rustls::rustls;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        Client::new(rustls::StreamOwned::new(conn, common::tcp(&addr)))
    };
    assert_eq!(plain_login(&mut connect(), "alice", "alice-secret"), 0);
    assert_eq!(
        plain_login(&mut connect(), "alice", "nope"),
        SASL_AUTHENTICATION_FAILED
    );
    // Nothing but ApiVersions and SASL before the login: the connection is closed.
    let mut c = connect();
    assert!(c
        .try_request(12, &MetadataRequest::default().with_topics(None))
        .is_none());
    drop(broker);
    let _ = std::fs::remove_file(&keystore);
}
