"""Security seen by a real client (confluent-kafka, librdkafka 2.16): TLS, SASL
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and ACLs with transactional ids.

One broker per test with three listeners: PLAINTEXT (unused by the clients
here but for the plaintext-on-TLS check), SASL_PLAINTEXT and SASL_SSL, the
authorizer on (`authorizer.class.name`), `super.users=User:admin`. The first
administrator is made offline with `doze-kafka users add` before the broker
starts; everything after goes through the admin API as a Kafka operator
would: AlterUserScramCredentials for users, CreateAcls for ACLs.
Certificates come from trustme (a throwaway CA per test session).
"""

import pathlib
import socket
import ssl
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from conftest import free_ports, missing_dependency
from rawkafka import API_API_VERSIONS, request_frame

ADMIN_PW = "admin-secret"
SUPER_SETS = (
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users=User:admin",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
    "group.initial.rebalance.delay.ms=0",
)
TIMEOUT_S = 30


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """A CA, the broker's PEM keystore (key and chain in one file), and a
    client certificate for mutual TLS."""
    try:
        import trustme
    except ImportError:
        missing_dependency("trustme is not installed (tests/requirements.txt; `make venv`)")
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("alice.client", common_name="alice")
    paths = {
        "ca": d / "ca.pem",
        "keystore": d / "broker.pem",
        "client_cert": d / "client-cert.pem",
        "client_key": d / "client-key.pem",
    }
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.private_key_and_cert_chain_pem.write_to_path(str(paths["keystore"]))
    client.cert_chain_pems[0].write_to_path(str(paths["client_cert"]))
    client.private_key_pem.write_to_path(str(paths["client_key"]))
    from cryptography import x509
    cert = x509.load_pem_x509_certificate(client.cert_chain_pems[0].bytes())
    paths["client_principal"] = "User:" + cert.subject.rfc4514_string()
    return paths


def users_add(binary, data_dir, name, password, mechanism="SCRAM-SHA-256"):
    data_dir.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        [str(binary), "users", "add", name, "--mechanism", mechanism, "--password-stdin",
         "--data-dir", str(data_dir)],
        input=password + "\n", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"users add failed: {out.stdout}{out.stderr}"


class Secure:
    """A broker with PLAINTEXT, SASL_PLAINTEXT and SASL_SSL listeners (and,
    with `mtls`, an SSL listener requiring client certificates)."""

    def __init__(self, start_broker, broker_binary, tmp_path, pki, mtls=False, extra_sets=()):
        self.pki = pki
        self.plain_port, self.sasl_port, self.ssl_port, self.mtls_port = free_ports(4)
        listeners = [f"PLAINTEXT://127.0.0.1:{self.plain_port}",
                     f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
                     f"SASL_SSL://127.0.0.1:{self.ssl_port}"]
        sets = list(SUPER_SETS) + list(extra_sets) + [
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={pki['keystore']}",
        ]
        if mtls:
            listeners.append(f"MTLS://127.0.0.1:{self.mtls_port}")
            sets += ["listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                     "SASL_SSL:SASL_SSL,MTLS:SSL",
                     f"ssl.truststore.location={pki['ca']}",
                     "ssl.client.auth=required"]
        sets.append("listeners=" + ",".join(listeners))
        name = f"secure-{uuid.uuid4().hex[:6]}"
        users_add(broker_binary, tmp_path / f"{name}-data", "admin", ADMIN_PW)
        self.broker = start_broker(sets=sets, name=name, listen_port=self.plain_port)

    def conf(self, user, password, mechanism="SCRAM-SHA-256", tls=True, **extra):
        c = {
            "bootstrap.servers": f"127.0.0.1:{self.ssl_port if tls else self.sasl_port}",
            "security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "socket.timeout.ms": 10000,
        }
        if tls:
            c["ssl.ca.location"] = str(self.pki["ca"])
        c.update(extra)
        return c

    def admin(self):
        # One client for the broker's life: a futures' client must outlive them.
        if getattr(self, "_admin", None) is None:
            self._admin = AdminClient(self.conf("admin", ADMIN_PW))
        return self._admin

    def add_user(self, name, password, mechanism=ScramMechanism.SCRAM_SHA_256):
        a = self.admin()
        up = UserScramCredentialUpsertion(name, ScramCredentialInfo(mechanism, 4096),
                                          password.encode())
        for fut in a.alter_user_scram_credentials([up]).values():
            fut.result(TIMEOUT_S)

    def allow(self, principal, rtype, name, *ops, pattern=ResourcePatternType.LITERAL,
              permission=AclPermissionType.ALLOW):
        bindings = [AclBinding(rtype, name, pattern, principal, "*", op, permission) for op in ops]
        for fut in self.admin().create_acls(bindings).values():
            fut.result(TIMEOUT_S)

    def create_topic(self, name, partitions=1):
        fut = self.admin().create_topics([NewTopic(name, partitions, 1)])[name]
        fut.result(TIMEOUT_S)


@pytest.fixture
def secure(start_broker, broker_binary, tmp_path, pki):
    return Secure(start_broker, broker_binary, tmp_path, pki)


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def txn_producer(s, user, password, txn_id, mechanism="SCRAM-SHA-256", tls=True):
    return Producer(s.conf(user, password, mechanism, tls, **{
        "transactional.id": txn_id, "transaction.timeout.ms": 10000}))


def kafka_error(excinfo):
    err = excinfo.value.args[0]
    return err.code() if isinstance(err, KafkaError) else err


def grant_transactions(s, principal, topic, txn_id, group=None):
    s.allow(principal, ResourceType.TOPIC, topic, AclOperation.WRITE, AclOperation.READ,
            AclOperation.DESCRIBE)
    s.allow(principal, ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE,
            AclOperation.DESCRIBE)
    if group:
        s.allow(principal, ResourceType.GROUP, group, AclOperation.READ)


def read_committed(s, user, password, topic, group, n, mechanism="SCRAM-SHA-256", tls=True):
    c = Consumer(s.conf(user, password, mechanism, tls, **{
        "group.id": group, "isolation.level": "read_committed", "auto.offset.reset": "earliest",
        "enable.auto.commit": False}))
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
        elif m is not None and m.error().code() != KafkaError._PARTITION_EOF:
            c.close()
            raise KafkaException(m.error())
    c.close()
    return got


# --- authentication ----------------------------------------------------------------

@pytest.mark.timeout(90)
@pytest.mark.parametrize("mechanism,tls", [
    ("SCRAM-SHA-256", True), ("SCRAM-SHA-512", True), ("PLAIN", False)])
def test_an_allowed_user_runs_a_transaction(secure, mechanism, tls):
    s = secure
    scram = ScramMechanism.SCRAM_SHA_512 if mechanism == "SCRAM-SHA-512" else ScramMechanism.SCRAM_SHA_256
    s.add_user("alice", "alice-pw", scram)
    topic, txn_id, group = unique("sec-topic"), unique("sec-txn"), unique("sec-group")
    s.create_topic(topic)
    grant_transactions(s, "User:alice", topic, txn_id, group)
    p = txn_producer(s, "alice", "alice-pw", txn_id, mechanism, tls)
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, key=b"k", value=b"v%d" % i)
    p.commit_transaction(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic, value=b"aborted")
    p.abort_transaction(TIMEOUT_S)
    got = read_committed(s, "alice", "alice-pw", topic, group, 5, mechanism, tls)
    assert got == [b"v%d" % i for i in range(5)]


@pytest.mark.timeout(60)
def test_a_wrong_password_is_refused(secure):
    s = secure
    s.add_user("alice", "alice-pw")
    for mechanism, tls in [("SCRAM-SHA-256", True), ("PLAIN", False)]:
        a = AdminClient(s.conf("alice", "wrong", mechanism, tls))
        with pytest.raises(KafkaException) as e:
            a.list_topics(timeout=10)
        assert "Authentication failed" in str(e.value) or \
            kafka_error(e) in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT), str(e.value)


@pytest.mark.timeout(30)
def test_a_plaintext_client_on_the_tls_port_fails_cleanly(secure):
    s = secure
    with socket.create_connection(("127.0.0.1", s.ssl_port), timeout=10) as sock:
        # An ApiVersions v0 request in the clear: not a TLS ClientHello.
        sock.sendall(request_frame(API_API_VERSIONS, 0, 1, b"", client_id=""))
        sock.settimeout(15)
        # Cleanly = at most a TLS alert, then the connection closed (EOF or
        # reset); a port that only stays silent is a hang and fails.
        data = b""
        try:
            while chunk := sock.recv(4096):
                data += chunk
        except ConnectionResetError:
            pass
        except socket.timeout:
            pytest.fail(f"the TLS port neither closed nor reset the connection within 15 s "
                        f"(hung); it sent {data[:40]!r}")
        assert not data.startswith(b"\x00\x00"), "no Kafka answer in the clear"
    # The broker goes on serving TLS clients.
    assert s.admin().list_topics(timeout=10) is not None


# --- authorization -----------------------------------------------------------------

@pytest.mark.timeout(60)
def test_no_write_on_the_transactional_id(secure):
    s = secure
    s.add_user("bob", "bob-pw")
    topic, txn_id = unique("sec-topic"), unique("sec-txn")
    s.create_topic(topic)
    s.allow("User:bob", ResourceType.TOPIC, topic, AclOperation.WRITE)
    s.allow("User:bob", ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.DESCRIBE)
    p = txn_producer(s, "bob", "bob-pw", txn_id)
    with pytest.raises(KafkaException) as e:
        p.init_transactions(TIMEOUT_S)
    assert kafka_error(e) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, str(e.value)


@pytest.mark.timeout(60)
def test_no_write_on_the_topic(secure):
    s = secure
    s.add_user("bob", "bob-pw")
    topic = unique("sec-topic")
    s.create_topic(topic)
    s.allow("User:bob", ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
    s.allow("User:bob", ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)
    p = Producer(s.conf("bob", "bob-pw", **{"enable.idempotence": False, "retries": 0}))
    errors = []
    p.produce(topic, value=b"x", on_delivery=lambda err, m: errors.append(err))
    p.flush(TIMEOUT_S)
    assert errors and errors[0] is not None and \
        errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors


@pytest.mark.timeout(90)
def test_no_read_on_the_group_at_commit(secure):
    s = secure
    s.add_user("carol", "carol-pw")
    topic, txn_id, group = unique("sec-topic"), unique("sec-txn"), unique("sec-group")
    s.create_topic(topic)
    grant_transactions(s, "User:carol", topic, txn_id)
    p = txn_producer(s, "carol", "carol-pw", txn_id)
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic, value=b"x")
    c = Consumer(s.conf("carol", "carol-pw", **{"group.id": group}))
    offsets = [TopicPartition(topic, 0, 1)]
    with pytest.raises(KafkaException) as e:
        p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), TIMEOUT_S)
    assert kafka_error(e) == KafkaError.GROUP_AUTHORIZATION_FAILED, str(e.value)
    c.close()


@pytest.mark.timeout(60)
def test_a_deny_wins_over_an_allow_and_a_prefix_covers(secure):
    s = secure
    s.add_user("dave", "dave-pw")
    s.allow("User:dave", ResourceType.TOPIC, "app-", AclOperation.WRITE, AclOperation.DESCRIBE,
            pattern=ResourcePatternType.PREFIXED)
    s.allow("User:dave", ResourceType.TOPIC, "app-secret", AclOperation.WRITE,
            permission=AclPermissionType.DENY)
    s.allow("User:dave", ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)
    for t in ("app-1", "app-secret"):
        s.create_topic(t)
    p = Producer(s.conf("dave", "dave-pw", **{"enable.idempotence": False, "retries": 0}))
    results = {}
    for t in ("app-1", "app-secret"):
        p.produce(t, value=b"x", on_delivery=lambda err, m, t=t: results.__setitem__(t, err))
    p.flush(TIMEOUT_S)
    assert results["app-1"] is None, results
    assert results["app-secret"] is not None and \
        results["app-secret"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, results


@pytest.mark.timeout(90)
def test_users_and_acls_survive_a_restart(secure):
    s = secure
    s.add_user("erin", "erin-pw")
    topic = unique("sec-topic")
    s.create_topic(topic)
    s.allow("User:erin", ResourceType.TOPIC, topic, AclOperation.WRITE)
    s.allow("User:erin", ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)
    s.broker.restart()
    s._admin = None
    described = s.admin().describe_user_scram_credentials(["erin"])
    assert described["erin"].result(TIMEOUT_S).scram_credential_infos[0].iterations == 4096
    p = Producer(s.conf("erin", "erin-pw"))
    errors = []
    p.produce(topic, value=b"x", on_delivery=lambda err, m: errors.append(err))
    p.flush(TIMEOUT_S)
    assert errors == [None]


# --- mutual TLS --------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_mtls_maps_the_certificate_to_its_principal(start_broker, broker_binary, tmp_path, pki):
    s = Secure(start_broker, broker_binary, tmp_path, pki, mtls=True)
    topic = unique("sec-topic")
    s.create_topic(topic)
    principal = pki["client_principal"]
    s.allow(principal, ResourceType.TOPIC, topic, AclOperation.WRITE)
    s.allow(principal, ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)
    base = {"bootstrap.servers": f"127.0.0.1:{s.mtls_port}", "security.protocol": "SSL",
            "ssl.ca.location": str(pki["ca"]), "socket.timeout.ms": 10000}
    p = Producer({**base, "ssl.certificate.location": str(pki["client_cert"]),
                  "ssl.key.location": str(pki["client_key"])})
    errors = []
    p.produce(topic, value=b"x", on_delivery=lambda err, m: errors.append(err))
    p.flush(TIMEOUT_S)
    assert errors == [None], f"{principal}: {errors}"
    # Without a certificate the TLS handshake is refused.
    a = AdminClient(base)
    with pytest.raises(KafkaException):
        a.list_topics(timeout=8)


# --- Kafka's own tools, as an operator runs them --------------------------------------

KAFKA_REF = pathlib.Path(__file__).resolve().parent / "kafka_ref" / "kafka-ref.sh"
KAFKA_REF_CP = KAFKA_REF.parent / "target" / "classpath.txt"


@pytest.mark.timeout(180)
def test_kafka_configs_and_kafka_acls_manage_users_and_acls(secure, tmp_path):
    """kafka-configs --alter --add-config 'SCRAM-SHA-256=[...]' --entity-type
    users and kafka-acls --add, run by the admin over SASL_PLAINTEXT: the new
    user then logs in and is allowed what the ACL says, and --list shows it."""
    if not KAFKA_REF_CP.exists():
        missing_dependency("Kafka 4.3.1 tools not resolved: run `make kafka-ref`")
    s = secure
    props = tmp_path / "admin.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{ADMIN_PW}";\n')
    bootstrap = f"127.0.0.1:{s.sasl_port}"

    def tool(cls, *args):
        out = subprocess.run([str(KAFKA_REF), "tool", cls, "--bootstrap-server", bootstrap,
                              "--command-config", str(props), *args],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"{cls} {args}: {out.stdout}{out.stderr}"
        return out.stdout

    tool("kafka.admin.ConfigCommand", "--alter", "--entity-type", "users", "--entity-name",
         "frank", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=frank-pw]")
    described = tool("kafka.admin.ConfigCommand", "--describe", "--entity-type", "users",
                     "--entity-name", "frank")
    assert "SCRAM-SHA-256=iterations=8192" in described, described
    topic = unique("sec-tools")
    s.create_topic(topic)
    tool("org.apache.kafka.tools.AclCommand", "--add", "--allow-principal", "User:frank",
         "--operation", "Write", "--topic", topic)
    tool("org.apache.kafka.tools.AclCommand", "--add", "--allow-principal", "User:frank",
         "--operation", "IdempotentWrite", "--cluster")
    listed = tool("org.apache.kafka.tools.AclCommand", "--list", "--topic", topic)
    assert "User:frank" in listed and "WRITE" in listed, listed
    p = Producer(s.conf("frank", "frank-pw"))
    errors = []
    p.produce(topic, value=b"x", on_delivery=lambda err, m: errors.append(err))
    p.flush(TIMEOUT_S)
    assert errors == [None], errors
