"""Kafka's own command-line tools against doze-kafka and against Apache Kafka 4.3.1.

Every tool is the class a `bin/kafka-*.sh` script runs, started through
tests/kafka_ref/kafka-ref.sh (`make kafka-ref` first; without it these tests
skip). The same scenario is played on a fresh doze broker and on a fresh Kafka
4.3.1 broker (one KRaft node, transaction.version=1), in parallel, one thread
per broker and one tool at a time within it:

    kafka-topics --create kt-topic (3 partitions, retention.ms, max.message.bytes)
    kafka-topics --create kt-doomed
    (confluent-kafka) kt-txn, 2 partitions, records with fixed timestamps BASE+n:
        p0: c0 c1 c2 @0-2 committed (marker @3), o0 o1 @4-5 in a transaction
            that stays OPEN, `after` @6 from an idempotent producer;
        p1: c3 @0 committed (marker @1)
      group kt-group commits kt-txn p0=2, p1=1 (no members)
    kafka-console-producer k1:v1 .. k6:v6 -> kt-topic
    kafka-topics --delete kt-doomed, --list, --describe --topic 'kt-.*'
    kafka-console-consumer (kt-topic; kt-txn read_committed; kt-txn read_uncommitted)
    kafka-consumer-groups --describe, --describe --state, --list
    kafka-configs topics kt-topic, the same with --all, brokers
    kafka-configs --alter --add-config cleanup.policy=[compact,delete],segment.ms=3600000,
      --describe; --alter --delete-config segment.ms, --describe; a value out of range
    kafka-get-offsets latest, earliest, max-timestamp, a timestamp
    kafka-transactions list, describe, describe-producers, find-hanging

Each test then compares one tool's output on both brokers after normalising
only what legitimately differs (topic ids, producer ids, wall-clock times,
host:port, column widths, Kafka's internal topics and the cluster-level
min.insync.replicas default that Kafka's controller writes when
eligible.leader.replicas.version=1 is finalized), and prints both outputs
(`pytest -s` shows what a Kafka user sees). A difference that doze really
shows is its own test, marked xfail(strict=True) with the request behind it.

About 50 JVM starts, two at a time: ~70 s on an idle 2-core box. With
KAFKA_TOOLS_WIRE_LOG=1 every output also lists the requests the tool sent
(API key, version) and any non-zero error code in the answers.
"""

import concurrent.futures
import dataclasses
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import Broker, free_port, missing_dependency

HERE = pathlib.Path(__file__).resolve().parent
KAFKA_REF = HERE / "kafka_ref" / "kafka-ref.sh"
KAFKA_REF_CP = HERE / "kafka_ref" / "target" / "classpath.txt"

TOPIC = "kt-topic"
DOOMED = "kt-doomed"
TXN_TOPIC = "kt-txn"
GROUP = "kt-group"
TXN_ID = "kt-txn-id"
# Long enough that the transaction is still open when kafka-transactions runs
# last, even on a loaded box (both brokers allow up to 15 minutes).
TXN_TIMEOUT_MS = 600000
TOOL_TIMEOUT_S = 90
# Each tool is a short-lived JVM: C1 only and the serial GC cut its CPU by ~40%
# (about 1.0 s instead of 1.6 s per start here), which matters with ~50 starts
# on 2 cores. Passed via JAVA_TOOL_OPTIONS, which kafka-ref.sh's java honours;
# the JVM notes it on stderr ("Picked up JAVA_TOOL_OPTIONS"), stdout is untouched.
TOOL_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# KAFKA_TOOLS_WIRE_LOG=1: run each tool's JVM directly (same classpath) with the
# client's NetworkClient at DEBUG, so a failure shows every request sent (API
# key and version) and the error codes in the answers. kafka-ref.sh pins its
# own WARN-only log4j2 config, hence the direct `java`.
WIRE_LOG = os.environ.get("KAFKA_TOOLS_WIRE_LOG") == "1"
WIRE_LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders><Console name="STDERR" target="SYSTEM_ERR">
    <PatternLayout pattern="[%d] %p %m (%c)%n"/></Console></Appenders>
  <Loggers>
    <Logger name="org.apache.kafka.clients.NetworkClient" level="DEBUG"/>
    <Root level="WARN"><AppenderRef ref="STDERR"/></Root>
  </Loggers>
</Configuration>
"""

TOPIC_CMD = "org.apache.kafka.tools.TopicCommand"
PRODUCER_CMD = "org.apache.kafka.tools.ConsoleProducer"
CONSUMER_CMD = "org.apache.kafka.tools.consumer.ConsoleConsumer"
GROUPS_CMD = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS_CMD = "kafka.admin.ConfigCommand"  # still Scala in 4.3.1 (kafka_2.13 jar)
OFFSETS_CMD = "org.apache.kafka.tools.GetOffsetShell"
TXNS_CMD = "org.apache.kafka.tools.TransactionsCommand"
# The scenario runs in the first test's setup; the limit allows for a busy box.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

SCRIPT = {
    TOPIC_CMD: "kafka-topics",
    PRODUCER_CMD: "kafka-console-producer",
    CONSUMER_CMD: "kafka-console-consumer",
    GROUPS_CMD: "kafka-consumer-groups",
    CONFIGS_CMD: "kafka-configs",
    OFFSETS_CMD: "kafka-get-offsets",
    TXNS_CMD: "kafka-transactions",
}

# kt-txn p0 while the transaction is open: c0 c1 c2, marker, o0 o1, after.
TXN_P0_HW = 7
TXN_P1_HW = 2
CONSOLE_LINES = [f"k{i}:v{i}" for i in range(1, 7)]


# --- running the tools --------------------------------------------------------


@dataclasses.dataclass
class Run:
    key: str
    argv: list
    rc: int
    out: str
    err: str
    secs: float

    @property
    def shown(self):
        """The command line as a user types it (bin/ script name, no bootstrap)."""
        cls, args = self.argv[0], self.argv[1:]
        shown, skip = [], False
        for a in args:
            if skip:
                skip = False
                continue
            if a == "--bootstrap-server":
                skip = True
                continue
            shown.append(a)
        return " ".join([SCRIPT.get(cls, cls)] + [shlex.quote(a) for a in shown])


def _text(b):
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def wire_summary(stderr):
    """From a KAFKA_TOOLS_WIRE_LOG stderr: one line per answer, with non-zero error codes."""
    out = []
    for m in re.finditer(r"Received (\w+) response from node (-?\d+) for request with header "
                         r"RequestHeader\(apiKey=\w+, apiVersion=(\d+).*?\): (.*)", stderr):
        errors = sorted({int(c) for c in re.findall(r"errorCode=(-?\d+)", m.group(4))} - {0})
        out.append(f"{m.group(1)} v{m.group(3)} (node {m.group(2)})"
                   + (f": errorCode {errors}" if errors else ""))
    out += re.findall(r".*UnsupportedVersionException.*", stderr)
    return "\n".join(out)


class Target:
    """One broker under test and the tool runs made against it."""

    def __init__(self, label, bootstrap, log_tail, base_ts, wire_log4j2=None):
        self.label = label
        self.bootstrap = bootstrap
        self.log_tail = log_tail
        self.base_ts = base_ts
        self.wire_log4j2 = wire_log4j2
        self.runs = {}
        self.node_id = None
        self.error = None

    def tool(self, key, cls, *args, stdin=None):
        argv = [cls, "--bootstrap-server", self.bootstrap, *map(str, args)]
        if self.wire_log4j2:
            cmd = [shutil.which("java") or os.path.join(os.environ["JAVA_HOME"], "bin", "java"),
                   "-Xmx512m", "-Djava.awt.headless=true",
                   f"-Dlog4j2.configurationFile={self.wire_log4j2}",
                   "-cp", KAFKA_REF_CP.read_text().strip(), *argv]
        else:
            cmd = [str(KAFKA_REF), "tool", *argv]
        t0 = time.monotonic()
        try:
            env = dict(os.environ)
            env["JAVA_TOOL_OPTIONS"] = f"{env.get('JAVA_TOOL_OPTIONS', '')} {TOOL_JVM_OPTS}".strip()
            p = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                               timeout=TOOL_TIMEOUT_S, env=env)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = "timeout", _text(e.stdout), _text(e.stderr)
        self.runs[key] = Run(key, argv, rc, out, err, time.monotonic() - t0)
        return self.runs[key]


def conf(bootstrap, **extra):
    c = {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "socket.timeout.ms": 10000,
    }
    c.update(extra)
    return c


def node_id(bootstrap):
    """The broker's node id as DescribeCluster reports it."""
    a = AdminClient(conf(bootstrap))
    cluster = a.describe_cluster(request_timeout=30).result(30)
    assert len(cluster.nodes) == 1, cluster.nodes
    return cluster.nodes[0].id


def setup_records(t, base_ts):
    """kt-txn and kt-group (see the module docstring); returns the open producer."""
    a = AdminClient(conf(t.bootstrap))
    a.create_topics([NewTopic(TXN_TOPIC, num_partitions=2, replication_factor=1)],
                    request_timeout=30)[TXN_TOPIC].result(30)
    deadline = time.monotonic() + 15
    while len(getattr(a.list_topics(timeout=10).topics.get(TXN_TOPIC), "partitions", {})) != 2:
        assert time.monotonic() < deadline, f"{TXN_TOPIC} not in Metadata on {t.label}"
        time.sleep(0.2)

    txn = Producer(conf(t.bootstrap, **{
        "transactional.id": TXN_ID,
        "transaction.timeout.ms": TXN_TIMEOUT_MS,
        "message.timeout.ms": TXN_TIMEOUT_MS,
        "linger.ms": 5,
    }))
    txn.init_transactions(60)
    txn.begin_transaction()
    for i in range(3):
        txn.produce(TXN_TOPIC, value=f"c{i}".encode(), partition=0, timestamp=base_ts + i)
    txn.produce(TXN_TOPIC, value=b"c3", partition=1, timestamp=base_ts + 3)
    txn.commit_transaction(60)
    txn.begin_transaction()
    txn.produce(TXN_TOPIC, value=b"o0", partition=0, timestamp=base_ts + 10)
    txn.produce(TXN_TOPIC, value=b"o1", partition=0, timestamp=base_ts + 11)
    assert txn.flush(60) == 0, "open transaction's records not acknowledged"

    idem = Producer(conf(t.bootstrap, **{"enable.idempotence": True}))
    idem.produce(TXN_TOPIC, value=b"after", partition=0, timestamp=base_ts + 5)
    assert idem.flush(60) == 0, "idempotent record not acknowledged"

    c = Consumer(conf(t.bootstrap, **{"group.id": GROUP, "enable.auto.commit": False}))
    try:
        # Kafka answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while it
        # loads a fresh __consumer_offsets partition; librdkafka does not retry
        # a synchronous commit of explicit offsets by itself.
        deadline = time.monotonic() + 30
        while True:
            try:
                c.commit(offsets=[TopicPartition(TXN_TOPIC, 0, 2), TopicPartition(TXN_TOPIC, 1, 1)],
                         asynchronous=False)
                break
            except KafkaException as e:
                retriable = e.args[0].code() in (KafkaError.NOT_COORDINATOR,
                                                 KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
                if not retriable or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        c.close()
    return txn


def scenario(t, base_ts):
    """The whole tool sequence against one broker (see the module docstring)."""
    txn = None
    try:
        t.node_id = node_id(t.bootstrap)
        t.tool("topics-create", TOPIC_CMD, "--create", "--topic", TOPIC, "--partitions", 3,
               "--replication-factor", 1, "--config", "retention.ms=86400000",
               "--config", "max.message.bytes=2000000")
        t.tool("topics-create-doomed", TOPIC_CMD, "--create", "--topic", DOOMED,
               "--partitions", 2, "--replication-factor", 1)
        txn = setup_records(t, base_ts)
        t.tool("console-producer", PRODUCER_CMD, "--topic", TOPIC,
               "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
               stdin="".join(line + "\n" for line in CONSOLE_LINES))
        t.tool("topics-delete", TOPIC_CMD, "--delete", "--topic", DOOMED)
        t.tool("topics-list", TOPIC_CMD, "--list")
        t.tool("topics-describe", TOPIC_CMD, "--describe", "--topic", "kt-.*")

        fmt = ["--formatter-property", "print.partition=true",
               "--formatter-property", "print.offset=true"]
        t.tool("consumer-topic", CONSUMER_CMD, "--topic", TOPIC, "--from-beginning",
               "--max-messages", len(CONSOLE_LINES), "--formatter-property", "print.key=true", *fmt)
        t.tool("consumer-read-committed", CONSUMER_CMD, "--topic", TXN_TOPIC, "--from-beginning",
               "--isolation-level", "read_committed", "--timeout-ms", 8000, *fmt)
        t.tool("consumer-read-uncommitted", CONSUMER_CMD, "--topic", TXN_TOPIC,
               "--from-beginning", "--isolation-level", "read_uncommitted",
               "--max-messages", 7, *fmt)

        t.tool("groups-describe", GROUPS_CMD, "--describe", "--group", GROUP)
        t.tool("groups-state", GROUPS_CMD, "--describe", "--group", GROUP, "--state")
        t.tool("groups-list", GROUPS_CMD, "--list")

        t.tool("configs-topic", CONFIGS_CMD, "--describe", "--entity-type", "topics",
               "--entity-name", TOPIC)
        t.tool("configs-topic-all", CONFIGS_CMD, "--describe", "--entity-type", "topics",
               "--entity-name", TOPIC, "--all")
        t.tool("configs-brokers", CONFIGS_CMD, "--describe", "--entity-type", "brokers")
        topic_entity = ["--entity-type", "topics", "--entity-name", TOPIC]
        t.tool("configs-add", CONFIGS_CMD, "--alter", *topic_entity,
               "--add-config", "cleanup.policy=[compact,delete],segment.ms=3600000")
        t.tool("configs-topic-added", CONFIGS_CMD, "--describe", *topic_entity)
        t.tool("configs-delete", CONFIGS_CMD, "--alter", *topic_entity,
               "--delete-config", "segment.ms")
        t.tool("configs-topic-deleted", CONFIGS_CMD, "--describe", *topic_entity)
        t.tool("configs-add-bad", CONFIGS_CMD, "--alter", *topic_entity,
               "--add-config", "min.cleanable.dirty.ratio=2")

        t.tool("offsets-latest", OFFSETS_CMD, "--topic-partitions", "kt-.*")
        t.tool("offsets-earliest", OFFSETS_CMD, "--topic", "kt-.*", "--time", -2)
        t.tool("offsets-max-timestamp", OFFSETS_CMD, "--topic", TXN_TOPIC, "--time", -3)
        t.tool("offsets-timestamp", OFFSETS_CMD, "--topic", TXN_TOPIC, "--time", base_ts + 4)

        t.tool("txn-list", TXNS_CMD, "list")
        t.tool("txn-describe", TXNS_CMD, "describe", "--transactional-id", TXN_ID)
        t.tool("txn-describe-producers", TXNS_CMD, "describe-producers", "--topic", TXN_TOPIC,
               "--partition", 0)
        t.tool("txn-find-hanging", TXNS_CMD, "find-hanging", "--broker-id", t.node_id)
        # Timeout 0: every open transaction is a candidate, so the tool goes on
        # to ListTransactions/FindCoordinator/DescribeTransactions to clear it.
        t.tool("txn-find-hanging-0", TXNS_CMD, "find-hanging", "--broker-id", t.node_id,
               "--max-transaction-timeout", 0)
    except Exception as e:  # reported by every test that needs the missing run
        # A string: the traceback would keep the clients of setup_records alive.
        t.error = f"{type(e).__name__}: {e}"
    finally:
        if txn is not None:
            try:
                txn.abort_transaction(30)
            except Exception:
                pass


# --- fixtures -----------------------------------------------------------------


@pytest.fixture(scope="session")
def kafka_ref(tmp_path_factory):
    """Apache Kafka 4.3.1, one KRaft node, started once for the session."""
    if not KAFKA_REF_CP.exists():
        missing_dependency("Kafka 4.3.1 reference not resolved: run `make kafka-ref`")
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        missing_dependency("no java for the Kafka 4.3.1 reference")
    d = tmp_path_factory.mktemp("kafka-ref")
    port = free_port()
    p = subprocess.run([str(KAFKA_REF), "start", str(port), str(d)],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        pytest.fail(f"kafka-ref start failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")

    def log_tail(lines=40):
        try:
            text = (d / "kafka.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join([f"--- {d}/kafka.log (last {lines} lines) ---"] + text[-lines:])

    yield p.stdout.strip(), log_tail
    subprocess.run([str(KAFKA_REF), "stop", str(d)], capture_output=True, timeout=90)


@pytest.fixture(scope="module")
def tools(broker_binary, kafka_ref, tmp_path_factory):
    """Both brokers after the scenario: {"doze": Target, "kafka": Target}."""
    d = tmp_path_factory.mktemp("doze-tools")
    # Kafka's reference broker runs with group.initial.rebalance.delay.ms=0; so does doze.
    doze = Broker(broker_binary, data_dir=d / "data", log_dir=d,
                  sets=["group.initial.rebalance.delay.ms=0"])
    doze.start()
    wire = None
    if WIRE_LOG:
        wire = d / "log4j2-wire.xml"
        wire.write_text(WIRE_LOG4J2)
    try:
        kafka_bootstrap, kafka_log_tail = kafka_ref
        # The records' timestamps: BASE+n, ten minutes ago, the same on both brokers.
        base_ts = int(time.time() * 1000) - 600_000
        targets = {
            "doze": Target("doze-kafka", doze.bootstrap, doze.log_tail, base_ts, wire),
            "kafka": Target("Apache Kafka 4.3.1", kafka_bootstrap, kafka_log_tail, base_ts, wire),
        }
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda t: scenario(t, base_ts), targets.values()))
        elapsed = time.monotonic() - t0
        print(f"\nscenario on both brokers: {elapsed:.1f} s wall; tool runs: "
              + ", ".join(f"{t.label} {len(t.runs)} in {sum(r.secs for r in t.runs.values()):.1f} s"
                          for t in targets.values()))
        yield targets
    finally:
        doze.close()


# --- comparing ----------------------------------------------------------------


def show(tools, key):
    """Print both outputs of one tool run; return (doze Run, kafka Run)."""
    runs = []
    for name in ("doze", "kafka"):
        t = tools[name]
        if key not in t.runs:
            pytest.fail(f"{key} did not run on {t.label}: {t.error}\n{t.log_tail()}")
        runs.append(t.runs[key])
    print(f"\n$ {runs[0].shown}")
    for name, r in zip(("doze", "kafka"), runs):
        print(f"--- {tools[name].label} (exit {r.rc}, {r.secs:.1f} s) ---")
        print(r.out.rstrip("\n") if r.out.strip() else "(no output)")
        if WIRE_LOG:
            print("    requests:")
            for w in wire_summary(r.err).splitlines():
                print(f"      {w}")
    return runs


def assert_ok(tools, *runs):
    for name, r in zip(("doze", "kafka"), runs):
        t = tools[name]
        if r.rc != 0:
            # pytest.fail, not assert: an xfail(raises=AssertionError) must not absorb it.
            wire = wire_summary(r.err) if WIRE_LOG else "(run with KAFKA_TOOLS_WIRE_LOG=1)"
            pytest.fail(f"{r.shown} exited {r.rc} on {t.label}\n--- stdout ---\n{r.out}\n"
                        f"--- stderr ---\n{r.err}\n--- requests ---\n{wire}\n{t.log_tail()}")


def both(tools, key):
    doze, kafka = show(tools, key)
    assert_ok(tools, doze, kafka)
    return doze, kafka


def lines(text):
    return [line for line in text.splitlines() if line.strip()]


def table(text):
    """Tab-separated tool output (kafka-transactions) -> list of dicts."""
    rows = [[c.strip() for c in line.rstrip("\t").split("\t")] for line in lines(text)]
    header, body = rows[0], rows[1:]
    return [dict(zip(header, r)) for r in body]


def columns(text):
    """Space-aligned tool output (kafka-consumer-groups) -> list of token lists."""
    return [line.split() for line in lines(text)]


# kafka-topics --describe: Kafka's controller writes a cluster-level
# min.insync.replicas=1 (DYNAMIC_DEFAULT_BROKER_CONFIG) when
# eligible.leader.replicas.version=1 is finalized (KIP-966), so every topic
# lists it; doze has no cluster-level dynamic configs.
KIP966_MIN_ISR = "min.insync.replicas=1"


def norm_describe(text, kafka):
    out = []
    for line in lines(text):
        line = re.sub(r"TopicId: \S+", "TopicId: <id>", line)
        m = re.search(r"Configs: ?(.*)$", line)
        if m:
            cfgs = [c for c in m.group(1).split(",") if c]
            if kafka:
                assert KIP966_MIN_ISR in cfgs, f"Kafka no longer lists {KIP966_MIN_ISR}: {line}"
                cfgs.remove(KIP966_MIN_ISR)
            line = line[:m.start(1)] + ",".join(sorted(cfgs))
        # Elr / LastKnownElr are compared in their own test.
        line = re.sub(r"\tElr:.*$", "", line)
        out.append(line.strip())
    return out


def elr_fields(text):
    return re.findall(r"\t(Elr:[^\t]*)\t(LastKnownElr:.*)$", text, re.M)


def config_lines(text, synonyms=False):
    """kafka-configs --describe output -> its lines, synonyms={...} kept or cut."""
    out = []
    for line in lines(text):
        if not synonyms:
            line = re.sub(r" synonyms=\{.*\}$", "", line)
        out.append(line.strip())
    return out


# --- the tests ----------------------------------------------------------------


def test_node_id(tools):
    """doze's node id (DescribeCluster) is Kafka's: the --broker-id the tools get."""
    ids = {name: t.node_id for name, t in tools.items()}
    print(f"\nnode ids (DescribeCluster): {ids}")
    assert ids == {"doze": 1, "kafka": 1}, ids


@pytest.mark.parametrize("key,topic", [("topics-create", TOPIC), ("topics-create-doomed", DOOMED)])
def test_topics_create(tools, key, topic):
    doze, kafka = both(tools, key)
    assert lines(doze.out) == lines(kafka.out) == [f"Created topic {topic}."]


def test_topics_delete_and_list(tools):
    doze, kafka = both(tools, "topics-delete")
    assert lines(doze.out) == lines(kafka.out)
    doze, kafka = both(tools, "topics-list")
    internal = {"__consumer_offsets", "__transaction_state"}  # doze keeps these in meta.db
    k = [t for t in lines(kafka.out) if t not in internal]
    assert lines(doze.out) == k == sorted([TOPIC, TXN_TOPIC]), (lines(doze.out), k)


def test_topics_describe(tools):
    doze, kafka = both(tools, "topics-describe")
    # Topics come in the admin's hash-map order: compare sorted lines (each names its topic).
    d, k = sorted(norm_describe(doze.out, False)), sorted(norm_describe(kafka.out, True))
    assert d == k
    heads = {re.search(r"Topic: (\S+)", h).group(1): h
             for h in d if h.startswith("Topic:") and "PartitionCount" in h}
    assert sorted(heads) == [TOPIC, TXN_TOPIC]
    assert heads[TOPIC].endswith("PartitionCount: 3\tReplicationFactor: 1\t"
                                 "Configs: max.message.bytes=2000000,retention.ms=86400000")
    assert heads[TXN_TOPIC].endswith("PartitionCount: 2\tReplicationFactor: 1\tConfigs:")
    parts = [line for line in d if "Partition: " in line]
    assert len(parts) == 5
    for p in parts:
        assert p.endswith("Leader: 1\tReplicas: 1\tIsr: 1"), p


def test_topics_describe_elr(tools):
    """kafka-topics asks DescribeTopicPartitions (key 75) first: empty ELR lists, not 'N/A'."""
    doze, kafka = both(tools, "topics-describe")
    assert elr_fields(doze.out) == elr_fields(kafka.out)


def test_console_producer_and_consumer(tools):
    doze, kafka = both(tools, "console-producer")
    assert lines(doze.out) == lines(kafka.out) == []
    doze, kafka = both(tools, "consumer-topic")
    # Partition:N  Offset:N  key  value; the keys spread by murmur2 on both.
    d, k = sorted(lines(doze.out)), sorted(lines(kafka.out))
    assert d == k
    assert sorted(line.split("\t")[-1] for line in d) == [f"v{i}" for i in range(1, 7)]
    for r in (doze, kafka):
        assert f"Processed a total of {len(CONSOLE_LINES)} messages" in r.err


def test_console_consumer_read_committed(tools):
    """read_committed --from-beginning: exactly the committed values, nothing past the LSO."""
    doze, kafka = both(tools, "consumer-read-committed")
    expected = sorted(["Partition:0\tOffset:0\tc0", "Partition:0\tOffset:1\tc1",
                       "Partition:0\tOffset:2\tc2", "Partition:1\tOffset:0\tc3"])
    assert sorted(lines(doze.out)) == expected, "doze"
    assert sorted(lines(kafka.out)) == expected, "kafka"
    for r in (doze, kafka):
        assert "Processed a total of 4 messages" in r.err


def test_console_consumer_read_uncommitted(tools):
    doze, kafka = both(tools, "consumer-read-uncommitted")
    expected = sorted(["Partition:0\tOffset:0\tc0", "Partition:0\tOffset:1\tc1",
                       "Partition:0\tOffset:2\tc2", "Partition:0\tOffset:4\to0",
                       "Partition:0\tOffset:5\to1", "Partition:0\tOffset:6\tafter",
                       "Partition:1\tOffset:0\tc3"])
    assert sorted(lines(doze.out)) == expected, "doze"
    assert sorted(lines(kafka.out)) == expected, "kafka"


def test_consumer_groups_describe(tools):
    doze, kafka = both(tools, "groups-describe")
    d, k = columns(doze.out), columns(kafka.out)
    assert d == k
    rows = {tuple(r[:3]): r[3:6] for r in d if r[0] == GROUP}
    # CURRENT-OFFSET, LOG-END-OFFSET, LAG
    assert rows == {(GROUP, TXN_TOPIC, "0"): ["2", str(TXN_P0_HW), str(TXN_P0_HW - 2)],
                    (GROUP, TXN_TOPIC, "1"): ["1", str(TXN_P1_HW), str(TXN_P1_HW - 1)]}, rows


def test_consumer_groups_state(tools):
    doze, kafka = both(tools, "groups-state")
    def hostport(text):
        return re.sub(r"\b127\.0\.0\.1:\d+", "<host:port>", text)

    d, k = columns(hostport(doze.out)), columns(hostport(kafka.out))
    assert d == k
    assert [GROUP, "<host:port>", "(1)", "-", "Empty", "0"] in d


def test_consumer_groups_list(tools):
    doze, kafka = both(tools, "groups-list")
    # The three console consumers ran without --group: console-consumer-<random>.
    def norm(text):
        return sorted(re.sub(r"^console-consumer-\d+$", "console-consumer-N", g)
                      for g in lines(text))

    assert norm(doze.out) == norm(kafka.out) == sorted(["console-consumer-N"] * 3 + [GROUP])


def test_configs_topic(tools):
    doze, kafka = both(tools, "configs-topic")
    d, k = config_lines(doze.out), config_lines(kafka.out)
    assert d == k == [f"Dynamic configs for topic {TOPIC} are:",
                      "max.message.bytes=2000000 sensitive=false",
                      "retention.ms=86400000 sensitive=false"]


def test_configs_topic_synonyms(tools):
    """The override, then Kafka's broker default behind it (DescribeConfigs include_synonyms)."""
    doze, kafka = both(tools, "configs-topic")
    assert config_lines(doze.out, synonyms=True) == config_lines(kafka.out, synonyms=True)


def _all_configs(text):
    out = {}
    for line in config_lines(text)[1:]:
        name, _, rest = line.partition("=")
        out[name] = rest
    return out


def test_configs_topic_all_values(tools):
    """--all: every topic config doze reports has Kafka's value."""
    doze, kafka = both(tools, "configs-topic-all")
    d, k = _all_configs(doze.out), _all_configs(kafka.out)
    assert d, "no configs from doze"
    assert {n: v for n, v in d.items()} == {n: k.get(n) for n in d}


def test_configs_topic_all_names(tools):
    """--all: every topic config Kafka has, those with no effect on one node included."""
    doze, kafka = both(tools, "configs-topic-all")
    d, k = _all_configs(doze.out), _all_configs(kafka.out)
    print(f"topic configs Kafka lists and doze does not: {sorted(set(k) - set(d))}")
    assert sorted(d) == sorted(k)


@pytest.mark.parametrize("key", ["configs-add", "configs-delete"])
def test_configs_alter(tools, key):
    doze, kafka = both(tools, key)
    assert lines(doze.out) == lines(kafka.out) == [f"Completed updating config for topic {TOPIC}."]


@pytest.mark.parametrize("key,expected", [
    ("configs-topic-added", ["cleanup.policy=compact,delete sensitive=false",
                             "max.message.bytes=2000000 sensitive=false",
                             "retention.ms=86400000 sensitive=false",
                             "segment.ms=3600000 sensitive=false"]),
    ("configs-topic-deleted", ["cleanup.policy=compact,delete sensitive=false",
                               "max.message.bytes=2000000 sensitive=false",
                               "retention.ms=86400000 sensitive=false"]),
])
def test_configs_topic_after_alter(tools, key, expected):
    doze, kafka = both(tools, key)
    d, k = config_lines(doze.out), config_lines(kafka.out)
    assert d == k == [f"Dynamic configs for topic {TOPIC} are:"] + expected


def test_configs_alter_out_of_range(tools):
    doze, kafka = show(tools, "configs-add-bad")
    message = ("InvalidConfigurationException: Invalid value 2.0 for configuration "
               "min.cleanable.dirty.ratio: Value must be no more than 1")
    for r in (doze, kafka):
        assert r.rc != 0, r.out
        assert message in r.out + r.err, r.out + r.err


def test_configs_brokers(tools):
    doze, kafka = both(tools, "configs-brokers")
    d, k = config_lines(doze.out), config_lines(kafka.out)
    # The cluster-level default Kafka's controller writes under KIP-966 (see above).
    assert f"{KIP966_MIN_ISR} sensitive=false" in k, k
    k.remove(f"{KIP966_MIN_ISR} sensitive=false")
    assert d == k == ["Dynamic configs for broker 1 are:",
                      "Default configs for brokers in the cluster are:"]


# The records carry timestamps BASE+n (ten minutes ago) but a transaction
# marker is stamped with the broker's clock at EndTxn (on Kafka as on doze), so
# the commit markers (kt-txn p0 @3, p1 @1) hold the largest timestamps and are
# the first offsets at or after BASE+4.
MARKERS = [f"{TXN_TOPIC}:0:3", f"{TXN_TOPIC}:1:1"]


@pytest.mark.parametrize("key,expected", [
    ("offsets-latest", None),
    ("offsets-earliest", None),
    ("offsets-max-timestamp", MARKERS),
    ("offsets-timestamp", MARKERS),
])
def test_get_offsets(tools, key, expected):
    doze, kafka = both(tools, key)
    d, k = sorted(lines(doze.out)), sorted(lines(kafka.out))
    assert d == k
    if key == "offsets-latest":
        got = dict(line.rsplit(":", 1) for line in d)
        assert got[f"{TXN_TOPIC}:0"] == str(TXN_P0_HW) and got[f"{TXN_TOPIC}:1"] == str(TXN_P1_HW)
        assert sum(int(got[f"{TOPIC}:{p}"]) for p in range(3)) == len(CONSOLE_LINES)
    elif key == "offsets-earliest":
        assert all(line.endswith(":0") for line in d) and len(d) == 5
    else:
        assert d == expected


def _pid_roles(tools):
    """Each broker's transactional producer id, from kafka-transactions describe."""
    roles = {}
    for name, t in tools.items():
        r = t.runs.get("txn-describe")
        if r is None or r.rc != 0:
            pytest.fail(f"kafka-transactions describe failed on {t.label}: {r}")
        roles[name] = table(r.out)[0]["ProducerId"]
    return roles


def _norm_pids(rows, txn_pid):
    for row in rows:
        if "ProducerId" in row:
            row["ProducerId"] = "<txn>" if row["ProducerId"] == txn_pid else "<other>"
    return rows


def test_transactions_list(tools):
    doze, kafka = both(tools, "txn-list")
    pids = _pid_roles(tools)
    d = _norm_pids(table(doze.out), pids["doze"])
    k = _norm_pids(table(kafka.out), pids["kafka"])
    assert d == k == [{"TransactionalId": TXN_ID, "Coordinator": "1", "ProducerId": "<txn>",
                       "TransactionState": "Ongoing"}]


def test_transactions_describe(tools):
    doze, kafka = both(tools, "txn-describe")
    now_ms = time.time() * 1000
    rows = {}
    for name, r in (("doze", doze), ("kafka", kafka)):
        [row] = table(r.out)
        start = int(row.pop("CurrentTransactionStartTimeMs"))
        dur = int(row.pop("TransactionDurationMs"))
        assert now_ms - 600_000 < start <= now_ms, f"{name}: transaction start {start}"
        assert 0 <= dur < 600_000, f"{name}: duration {dur}"
        row.pop("ProducerId")
        rows[name] = row
    assert rows["doze"] == rows["kafka"] == {
        "CoordinatorId": "1", "TransactionalId": TXN_ID, "ProducerEpoch": "0",
        "TransactionState": "Ongoing", "TransactionTimeoutMs": str(TXN_TIMEOUT_MS),
        "TopicPartitions": f"{TXN_TOPIC}-0"}


def _producers(tools, r, name):
    rows = _norm_pids(table(r.out), _pid_roles(tools)[name])
    return sorted(rows, key=lambda row: row["ProducerId"])


def test_transactions_describe_producers(tools):
    doze, kafka = both(tools, "txn-describe-producers")
    # LastTimestamp: the last batch's max timestamp, BASE+11 (o1) and BASE+5 (`after`).
    base = tools["doze"].base_ts
    d, k = _producers(tools, doze, "doze"), _producers(tools, kafka, "kafka")
    for rows in (d, k):
        for row in rows:
            row.pop("LatestCoordinatorEpoch")  # its own test
    assert d == k == [
        {"ProducerId": "<other>", "ProducerEpoch": "0", "LastSequence": "0",
         "LastTimestamp": str(base + 5), "CurrentTransactionStartOffset": "None"},
        {"ProducerId": "<txn>", "ProducerEpoch": "0", "LastSequence": "4",
         "LastTimestamp": str(base + 11), "CurrentTransactionStartOffset": "4"},
    ]


def test_transactions_describe_producers_coordinator_epoch(tools):
    doze, kafka = both(tools, "txn-describe-producers")
    epochs = {name: {row["ProducerId"]: row["LatestCoordinatorEpoch"]
                     for row in _producers(tools, r, name)}
              for name, r in (("doze", doze), ("kafka", kafka))}
    print(f"LatestCoordinatorEpoch: {epochs}")
    assert epochs["doze"] == epochs["kafka"]


@pytest.mark.parametrize("key", ["txn-find-hanging", "txn-find-hanging-0"])
def test_transactions_find_hanging(tools, key):
    doze, kafka = both(tools, key)
    # Nothing hangs: the open transaction is known to its coordinator.
    d, k = [line.rstrip() for line in lines(doze.out)], [line.rstrip() for line in lines(kafka.out)]
    assert d == k == [
        "Topic\tPartition\tProducerId\tProducerEpoch\tCoordinatorEpoch\tStartOffset\t"
        "LastTimestamp\tDuration(min)"]
