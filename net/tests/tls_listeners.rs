//! Several listeners and TLS, through the real binary: a PLAINTEXT and an
//! SSL listener side by side, each advertising its own address; requests,
//! produce and fetch over TLS; a plaintext client on the TLS port closed
//! at once and a silent one after the handshake timeout, the broker serving
//! the others all along; and with `ssl.client.auth=required`, a client
//! without a certificate refused and the principal of one with a
//! certificate (`User:CN=...`) reaching the authorizer.
//!
//! The CA, server and client certificates are made here (rcgen).

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{create_topic, produce, topic, Broker, Client};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::*;
use kafka_protocol::records::RecordBatchDecoder;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName,
};

const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

type TlsClient = Client<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>;

/// A test CA, and the broker's keystore and truststore made from it.
struct Pki {
    dir: PathBuf,
    ca: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

/// A client's certificate chain and key.
struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Pki {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("doze-tls-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();

        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "doze test CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);

        // The server: its chain and key in one PEM file, Kafka's PEM keystore.
        let server_key = KeyPair::generate().unwrap();
        let mut server_params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        server_params
            .distinguished_name
            .push(DnType::CommonName, "doze broker");
        let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();
        let keystore = format!(
            "{}{}{}",
            server_cert.pem(),
            ca_cert.pem(),
            server_key.serialize_pem()
        );
        std::fs::write(dir.join("keystore.pem"), keystore).unwrap();
        std::fs::write(dir.join("truststore.pem"), ca_cert.pem()).unwrap();
        Self {
            dir,
            ca: ca_cert.der().clone(),
            issuer,
        }
    }

    fn keystore(&self) -> String {
        self.dir.join("keystore.pem").display().to_string()
    }

    fn truststore(&self) -> String {
        self.dir.join("truststore.pem").display().to_string()
    }

    /// A client certificate for `O=doze`, `CN=cn`, signed by the CA.
    fn client(&self, cn: &str) -> Identity {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        // In this order in the certificate; RFC 2253 prints it reversed.
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "doze");
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Identity {
            chain: vec![cert.der().clone(), self.ca.clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        }
    }

    /// A TLS client of `addr` that trusts the CA and checks the broker's
    /// certificate against 127.0.0.1; with `identity`, it presents it.
    fn connect(&self, addr: &str, identity: Option<&Identity>) -> TlsClient {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match identity {
            Some(id) => builder
                .with_client_auth_cert(id.chain.clone(), id.key.clone_key())
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        let host = addr.rsplit_once(':').unwrap().0;
        let name = ServerName::try_from(host.to_string()).unwrap();
        let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        Client::new(rustls::StreamOwned::new(conn, common::tcp(addr)))
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn api_versions_ok<S: Read + std::io::Write>(c: &mut Client<S>) {
    match c.request(3, &ApiVersionsRequest::default()) {
        ResponseKind::ApiVersions(r) => {
            assert_eq!(r.error_code, 0);
            assert!(
                r.api_keys.iter().any(|k| k.api_key == 0),
                "Produce is listed"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// The one broker's address as Metadata tells it.
fn metadata_broker<S: Read + std::io::Write>(c: &mut Client<S>) -> String {
    match c.request(12, &MetadataRequest::default().with_topics(None)) {
        ResponseKind::Metadata(r) => {
            assert_eq!(r.brokers.len(), 1);
            format!("{}:{}", r.brokers[0].host.as_str(), r.brokers[0].port)
        }
        other => panic!("{other:?}"),
    }
}

/// DescribeAcls for every binding: its error code.
fn describe_acls<S: Read + std::io::Write>(c: &mut Client<S>) -> i16 {
    const ANY: i8 = 1;
    let req = DescribeAclsRequest::default()
        .with_resource_type_filter(ANY)
        .with_pattern_type_filter(ANY)
        .with_operation(ANY)
        .with_permission_type(ANY);
    match c.request(1, &req) {
        ResponseKind::DescribeAcls(r) => r.error_code,
        other => panic!("{other:?}"),
    }
}

/// Creates `name`, produces `values` to it (acks=all) and fetches them
/// back, all over `c`: request and response frames far larger than one TLS
/// record, and a Fetch whose records the broker reads from the segment file.
fn produce_and_fetch<S: Read + std::io::Write>(c: &mut Client<S>, name: &str, values: &[Bytes]) {
    create_topic(c, name);
    assert_eq!(produce(c, name, values), 0);
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(8 << 20)
        .with_isolation_level(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic(name))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(8 << 20)])]);
    let r = match c.request(12, &req) {
        ResponseKind::Fetch(r) => r,
        other => panic!("{other:?}"),
    };
    let data = &r.responses[0].partitions[0];
    assert_eq!(data.error_code, 0);
    let mut fetched = data.records.clone().expect("records");
    let mut got = Vec::new();
    for set in RecordBatchDecoder::decode_all(&mut fetched).expect("records decode") {
        for record in set.records {
            got.push(record.value.expect("a value"));
        }
    }
    assert_eq!(got, values, "the records come back as produced");
}

/// Reads until the broker closes the connection: Ok with how long it took,
/// Err if it was still open after `limit`.
fn wait_closed(stream: &mut TcpStream, limit: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(started.elapsed()),
            Ok(_) => {} // a TLS alert, say
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!("still open after {:?}", started.elapsed()));
            }
            Err(_) => return Ok(started.elapsed()), // reset
        }
    }
}

#[test]
fn plaintext_and_ssl_listeners_side_by_side() {
    let pki = Pki::new("two-listeners");
    let broker = Broker::start_with(
        "tls-two-listeners",
        &[
            "--set",
            "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "--set",
            "advertised.listeners=PLAINTEXT://plain.example.com:19092",
            "--set",
            "ssl.keystore.type=PEM",
            "--set",
            &format!("ssl.keystore.location={}", pki.keystore()),
        ],
    );
    let plain = broker.listener("PLAINTEXT");
    let ssl = broker.listener("SSL");
    assert_ne!(plain, ssl);

    let mut tls = pki.connect(&ssl, None);
    api_versions_ok(&mut tls);
    let mut clear = common::connect(&plain);
    api_versions_ok(&mut clear);

    // Each listener's clients are told its own address: the configured
    // one, else the bound one.
    assert_eq!(metadata_broker(&mut clear), "plain.example.com:19092");
    assert_eq!(metadata_broker(&mut tls), ssl);

    // Bigger than a TLS record (16 KiB) each way.
    let values: Vec<Bytes> = (0..3u8)
        .map(|i| Bytes::from(vec![b'a' + i; 40_000]))
        .collect();
    produce_and_fetch(&mut tls, "over-tls", &values);

    // A plaintext client on the TLS port: its request is not a handshake;
    // it is closed at once (well within the handshake timeout).
    let mut confused = common::connect(&ssl);
    assert!(
        confused
            .try_request(3, &ApiVersionsRequest::default())
            .is_none(),
        "no Kafka response on a TLS port"
    );
    let took = wait_closed(&mut confused.stream, Duration::from_secs(8)).unwrap();
    assert!(took < Duration::from_secs(5), "closed after {took:?}");

    // The broker goes on, on both listeners and the connections it had.
    api_versions_ok(&mut tls);
    api_versions_ok(&mut clear);
    api_versions_ok(&mut pki.connect(&ssl, None));
    api_versions_ok(&mut common::connect(&plain));
}

#[test]
fn a_silent_client_on_a_tls_port_is_closed_after_the_handshake_timeout() {
    let pki = Pki::new("silent");
    let broker = Broker::start_with(
        "tls-silent",
        &[
            "--set",
            "listeners=SSL://127.0.0.1:0",
            "--set",
            &format!("ssl.keystore.location={}", pki.keystore()),
        ],
    );
    let ssl = broker.listener("SSL");
    let mut silent = common::tcp(&ssl);
    // Meanwhile others are served.
    api_versions_ok(&mut pki.connect(&ssl, None));
    // The broker's TLS_HANDSHAKE_TIMEOUT is 10 s.
    let took = wait_closed(&mut silent, Duration::from_secs(25)).unwrap();
    assert!(took >= Duration::from_secs(8), "closed after {took:?}");
    api_versions_ok(&mut pki.connect(&ssl, None));
}

#[test]
fn required_client_certificates_name_the_principal() {
    let pki = Pki::new("client-auth");
    let broker = Broker::start_with(
        "tls-client-auth",
        &[
            "--set",
            "listeners=SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "--set",
            &format!("ssl.keystore.location={}", pki.keystore()),
            "--set",
            &format!("ssl.truststore.location={}", pki.truststore()),
            "--set",
            "ssl.client.auth=required",
            "--set",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            // Kafka's default principal builder: RFC 2253, the last RDN first.
            "--set",
            "super.users=User:CN=admin,O=doze",
        ],
    );
    let ssl = broker.listener("SSL");

    // No certificate: the handshake fails and nothing is served.
    let mut anonymous = pki.connect(&ssl, None);
    assert!(
        anonymous
            .try_request(3, &ApiVersionsRequest::default())
            .is_none(),
        "a client without a certificate is refused"
    );

    // DescribeAcls needs DESCRIBE on the cluster (DescribeCluster, as in
    // Kafka, is not refused: it only leaves out the authorized operations).
    let admin = pki.client("admin");
    let mut c = pki.connect(&ssl, Some(&admin));
    api_versions_ok(&mut c);
    assert_eq!(
        describe_acls(&mut c),
        0,
        "User:CN=admin,O=doze is a super user"
    );

    let bob = pki.client("bob");
    let mut c = pki.connect(&ssl, Some(&bob));
    api_versions_ok(&mut c);
    assert_eq!(
        describe_acls(&mut c),
        CLUSTER_AUTHORIZATION_FAILED,
        "User:CN=bob,O=doze has no ACL"
    );

    // Client authentication is the SSL listener's; PLAINTEXT is ANONYMOUS.
    let mut clear = common::connect(&broker.listener("PLAINTEXT"));
    assert_eq!(describe_acls(&mut clear), CLUSTER_AUTHORIZATION_FAILED);
    // The refused client left the broker serving.
    let mut c = pki.connect(&ssl, Some(&admin));
    assert_eq!(describe_acls(&mut c), 0);
}

#[test]
fn bad_tls_settings_stop_the_start_with_a_reason() {
    let pki = Pki::new("bad-settings");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_doze-kafka"))
            .args(["--data-dir"])
            .arg(pki.dir.join("data"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = run(&["--set", "listeners=SSL://127.0.0.1:0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("ssl.keystore.location"), "{err}");

    // A keystore without a key.
    let (code, err) = run(&[
        "--set",
        "listeners=SSL://127.0.0.1:0",
        "--set",
        &format!("ssl.keystore.location={}", pki.truststore()),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("PRIVATE KEY"), "{err}");
    assert!(
        !pki.dir.join("data").exists(),
        "nothing touched the data dir"
    );
}
