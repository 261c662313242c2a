//! SASL on a SASL listener through the broker: nothing but ApiVersions and
//! the SASL requests before authentication (anything else closes the
//! connection); PLAIN and SCRAM-SHA-256/512 against credentials in meta.db;
//! a wrong password or proof gets SASL_AUTHENTICATION_FAILED and a closed
//! connection; the v0 handshake's unframed tokens; ILLEGAL_SASL_STATE on a
//! listener without SASL.

mod support;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sha2::{Digest, Sha256};

use doze_core::security::scram::{Credential, Mechanism};
use doze_core::security::store::put_credential;
use doze_core::security::{Listener, SecurityProtocol};
use doze_core::BrokerConfig;
use doze_core::Input;
use support::*;

const SASL: u64 = 11;

fn world_with_alice() -> World {
    let mut w = World::new(BrokerConfig::default());
    for m in Mechanism::ALL {
        let c = Credential::from_password(m, b"alice-secret", b"0123456789abcdef", 4096);
        if let doze_core::io::MetaOp::Put { key, value } = put_credential("alice", m, &c) {
            w.meta.insert(key, value);
        }
    }
    w.stop_and_restart();
    w
}

fn connect(w: &mut World, conn: u64, protocol: SecurityProtocol) {
    w.input(Input::Connected {
        conn,
        client_host: "/127.0.0.1".into(),
        listener: Listener {
            name: protocol.name().into(),
            protocol,
            tls_principal: None,
            internal: false,
        },
    });
}

fn handshake(w: &mut World, conn: u64, version: i16, mechanism: &str) -> i16 {
    let req =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into()));
    w.send(conn, version, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::SaslHandshake(r))) => {
            assert!(r.mechanisms.iter().any(|m| m.as_str() == "SCRAM-SHA-256"));
            r.error_code
        }
        other => panic!("{other:?}"),
    }
}

fn authenticate(w: &mut World, conn: u64, token: &[u8]) -> SaslAuthenticateResponse {
    let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token));
    w.send(conn, 2, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::SaslAuthenticate(r))) => r,
        other => panic!("{other:?}"),
    }
}

fn metadata_answered(w: &mut World, conn: u64) -> bool {
    w.send(
        conn,
        12,
        &MetadataRequest::default().with_topics(Some(vec![])),
    );
    matches!(w.recv(conn), Some((_, ResponseKind::Metadata(_))))
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// The client's side of SCRAM-SHA-256: client-final for `server_first`.
fn client_final(password: &[u8], client_first_bare: &str, server_first: &str) -> String {
    let attrs: Vec<(&str, &str)> = server_first.split(',').map(|a| a.split_at(2)).collect();
    let nonce = attrs[0].1;
    let salt = B64.decode(attrs[1].1).unwrap();
    let iterations: u32 = attrs[2].1.parse().unwrap();
    let salted = Mechanism::Sha256.salted_password(password, &salt, iterations);
    let client_key = hmac(&salted, b"Client Key");
    let stored_key = Sha256::digest(&client_key);
    let without_proof = format!("c=biws,r={nonce}");
    let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
    let signature = hmac(&stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(a, b)| a ^ b)
        .collect();
    format!("{without_proof},p={}", B64.encode(proof))
}

#[test]
fn nothing_but_sasl_before_authentication() {
    let mut w = world_with_alice();
    connect(&mut w, SASL, SecurityProtocol::SaslPlaintext);
    w.send(SASL, 3, &ApiVersionsRequest::default());
    assert!(matches!(
        w.recv(SASL),
        Some((_, ResponseKind::ApiVersions(_)))
    ));
    assert!(!metadata_answered(&mut w, SASL));
    assert!(
        w.closed.contains(&SASL),
        "Metadata before SASL closes the connection"
    );
}

#[test]
fn plain_authenticates_against_the_scram_credential() {
    let mut w = world_with_alice();
    connect(&mut w, SASL, SecurityProtocol::SaslSsl);
    assert_eq!(
        handshake(&mut w, SASL, 1, "GSSAPI"),
        33,
        "UNSUPPORTED_SASL_MECHANISM"
    );
    assert_eq!(handshake(&mut w, SASL, 1, "PLAIN"), 0);
    assert!(w.authenticated.is_empty(), "not before the exchange");
    let r = authenticate(&mut w, SASL, b"\0alice\0alice-secret");
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    // The driver is told, so that it lifts the limits on frames it reads
    // from clients not logged in.
    assert_eq!(w.authenticated, [SASL]);
    assert!(metadata_answered(&mut w, SASL), "served once authenticated");

    connect(&mut w, SASL + 1, SecurityProtocol::SaslPlaintext);
    assert_eq!(handshake(&mut w, SASL + 1, 1, "PLAIN"), 0);
    let r = authenticate(&mut w, SASL + 1, b"\0alice\0wrong");
    assert_eq!(r.error_code, 58, "SASL_AUTHENTICATION_FAILED");
    assert_eq!(
        w.authenticated,
        [SASL],
        "a failure is not an authentication"
    );
    assert!(
        w.closed.contains(&(SASL + 1)),
        "a failure closes the connection"
    );
}

#[test]
fn scram_sha_256_in_two_round_trips_and_a_bad_proof_fails() {
    let mut w = world_with_alice();
    for (conn, password, ok) in [
        (SASL, &b"alice-secret"[..], true),
        (SASL + 1, b"nope", false),
    ] {
        connect(&mut w, conn, SecurityProtocol::SaslPlaintext);
        assert_eq!(handshake(&mut w, conn, 1, "SCRAM-SHA-256"), 0);
        let bare = "n=alice,r=fyko+d2lbbFgONRv9qkxdawL";
        let r = authenticate(&mut w, conn, format!("n,,{bare}").as_bytes());
        assert_eq!(r.error_code, 0);
        let server_first = String::from_utf8(r.auth_bytes.to_vec()).unwrap();
        assert!(
            server_first.starts_with("r=fyko+d2lbbFgONRv9qkxdawL"),
            "{server_first}"
        );
        let r = authenticate(
            &mut w,
            conn,
            client_final(password, bare, &server_first).as_bytes(),
        );
        if ok {
            assert_eq!(r.error_code, 0, "{:?}", r.error_message);
            assert!(String::from_utf8_lossy(&r.auth_bytes).starts_with("v="));
            assert!(metadata_answered(&mut w, conn));
            // A second exchange on the connection is refused.
            let r = authenticate(&mut w, conn, b"n,,n=alice,r=x");
            assert_eq!(r.error_code, 34, "ILLEGAL_SASL_STATE");
        } else {
            assert_eq!(r.error_code, 58);
            assert!(w.closed.contains(&conn));
        }
    }
}

#[test]
fn handshake_v0_takes_bare_tokens() {
    let mut w = world_with_alice();
    connect(&mut w, SASL, SecurityProtocol::SaslPlaintext);
    assert_eq!(handshake(&mut w, SASL, 0, "PLAIN"), 0);
    w.send_raw(SASL, Bytes::from_static(b"\0alice\0alice-secret"));
    assert_eq!(
        w.raw_response(SASL).expect("a bare empty token back"),
        Bytes::new()
    );
    assert_eq!(
        w.authenticated,
        [SASL],
        "the bare flow tells the driver too"
    );
    assert!(metadata_answered(&mut w, SASL));
    connect(&mut w, SASL + 1, SecurityProtocol::SaslPlaintext);
    assert_eq!(handshake(&mut w, SASL + 1, 0, "PLAIN"), 0);
    w.send_raw(SASL + 1, Bytes::from_static(b"\0alice\0bad"));
    assert!(w.closed.contains(&(SASL + 1)), "a bare failure closes");
}

#[test]
fn sasl_requests_on_a_plaintext_listener_are_illegal() {
    let mut w = world_with_alice();
    connect(&mut w, 5, SecurityProtocol::Plaintext);
    assert_eq!(handshake(&mut w, 5, 1, "PLAIN"), 34);
    assert_eq!(
        authenticate(&mut w, 5, b"\0alice\0alice-secret").error_code,
        34
    );
    assert!(metadata_answered(&mut w, 5));
}

/// Bad tokens of every shape: an answer or a close, never a panic.
#[test]
fn malformed_tokens_never_panic() {
    let mut w = world_with_alice();
    let tokens: [&[u8]; 8] = [
        b"",
        b"\xff\xfe",
        b"n,,",
        b"n,,n=,r=",
        b"y,a=bob,n=alice,r=x",
        b"n,,n=alice,r=x,extra",
        &[b'a'; 70_000],
        b"n=alice",
    ];
    for (i, token) in tokens.iter().enumerate() {
        let conn = 100 + i as u64;
        connect(&mut w, conn, SecurityProtocol::SaslPlaintext);
        assert_eq!(handshake(&mut w, conn, 1, "SCRAM-SHA-512"), 0);
        let r = authenticate(&mut w, conn, token);
        if r.error_code == 0 {
            // A well-formed first message: the final one must then fail.
            let r = authenticate(&mut w, conn, b"c=biws,r=x,p=AAAA");
            assert_eq!(r.error_code, 58);
        } else {
            assert_eq!(r.error_code, 58);
        }
        assert!(w.closed.contains(&conn), "token {i}");
    }
}

/// A client that connects to a SASL listener and does not authenticate is
/// closed after limits::SASL_AUTHENTICATION_TIMEOUT_MS; one that did stays.
#[test]
fn an_unauthenticated_connection_is_closed_after_the_timeout() {
    let mut w = world_with_alice();
    connect(&mut w, SASL, SecurityProtocol::SaslPlaintext);
    connect(&mut w, SASL + 1, SecurityProtocol::SaslPlaintext);
    assert_eq!(handshake(&mut w, SASL + 1, 1, "PLAIN"), 0);
    assert_eq!(
        authenticate(&mut w, SASL + 1, b"\0alice\0alice-secret").error_code,
        0
    );
    w.advance(doze_core::limits::SASL_AUTHENTICATION_TIMEOUT_MS - 1);
    assert!(!w.closed.contains(&SASL));
    w.advance(2);
    assert!(w.closed.contains(&SASL), "closed at its deadline");
    assert!(
        !w.closed.contains(&(SASL + 1)),
        "the authenticated one stays"
    );
    assert!(metadata_answered(&mut w, SASL + 1));
}

/// A client-final message that passed on one connection, replayed on
/// another: the server's nonce differs, so it is refused.
#[test]
fn a_replayed_scram_final_message_is_refused() {
    let mut w = world_with_alice();
    let bare = "n=alice,r=replayed-client-nonce";
    connect(&mut w, SASL, SecurityProtocol::SaslPlaintext);
    assert_eq!(handshake(&mut w, SASL, 1, "SCRAM-SHA-256"), 0);
    let first = authenticate(&mut w, SASL, format!("n,,{bare}").as_bytes());
    let server_first = String::from_utf8(first.auth_bytes.to_vec()).unwrap();
    let final_msg = client_final(b"alice-secret", bare, &server_first);
    assert_eq!(
        authenticate(&mut w, SASL, final_msg.as_bytes()).error_code,
        0
    );

    connect(&mut w, SASL + 1, SecurityProtocol::SaslPlaintext);
    assert_eq!(handshake(&mut w, SASL + 1, 1, "SCRAM-SHA-256"), 0);
    let again = authenticate(&mut w, SASL + 1, format!("n,,{bare}").as_bytes());
    assert_ne!(again.auth_bytes, first.auth_bytes, "a fresh server nonce");
    assert_eq!(
        authenticate(&mut w, SASL + 1, final_msg.as_bytes()).error_code,
        58
    );
    assert!(w.closed.contains(&(SASL + 1)));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 200, ..Default::default() })]

    /// Any handshake mechanism and any tokens, framed or bare: every
    /// request is answered or the connection closed, nothing panics, and
    /// no connection is authenticated without alice's password.
    #[test]
    fn fuzzed_sasl_exchanges_never_panic_or_let_anyone_in(
        mechanism in proptest::sample::select(vec!["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", ""]),
        version in 0i16..=1,
        tokens in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), 1..4),
        scram_like in proptest::prelude::any::<bool>(),
    ) {
        let mut w = World::new(BrokerConfig::default());
        connect(&mut w, SASL, SecurityProtocol::SaslPlaintext);
        let code = handshake(&mut w, SASL, version, mechanism);
        for (i, token) in tokens.iter().enumerate() {
            if w.closed.contains(&SASL) {
                break;
            }
            let mut token = token.clone();
            if scram_like && i == 0 {
                token.splice(0..0, b"n,,n=alice,r=".iter().copied());
            }
            if code == 0 && version == 0 {
                w.send_raw(SASL, Bytes::from(token));
                let _ = w.raw_response(SASL);
            } else {
                let r = authenticate(&mut w, SASL, &token);
                proptest::prop_assert!(matches!(r.error_code, 0 | 34 | 58), "code {}", r.error_code);
            }
        }
        // Whatever happened, the connection is not let in.
        if !w.closed.contains(&SASL) {
            proptest::prop_assert!(!metadata_answered(&mut w, SASL));
        }
    }
}
