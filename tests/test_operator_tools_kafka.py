"""`doze-kafka topics | groups | transactions` against Apache Kafka 4.3.1 and
against doze-kafka, the same steps and the same checks on both: the tools
speak only Kafka's protocol, so they must work on a Kafka cluster too
(net/tests/operator_tools.rs tests them in depth against doze alone).

On each broker: create a topic with a config, list and describe it; a
confluent-kafka transactional producer leaves a transaction open; list,
describe and describe-producers show it and find-hanging does not report it
(its coordinator expects the partition); a group commits offsets and
describe shows the lag; `transactions abort` ends the open transaction on
the partition (WriteTxnMarkers), so the last stable offset reaches the high
watermark; delete removes a topic.

Needs the Kafka 4.3.1 reference (`make kafka-ref`) and java; skips without (fails under CI=true).
"""

import json
import os
import pathlib
import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from conftest import free_port, missing_dependency

HERE = pathlib.Path(__file__).resolve().parent
KAFKA_REF = HERE / "kafka_ref" / "kafka-ref.sh"
KAFKA_REF_CP = HERE / "kafka_ref" / "target" / "classpath.txt"
TOOL_TIMEOUT_S = 60


class Bootstrap:
    def __init__(self, bootstrap):
        self.bootstrap = bootstrap


@pytest.fixture(scope="module")
def kafka_ref(tmp_path_factory):
    if not KAFKA_REF_CP.exists():
        missing_dependency("Kafka 4.3.1 reference not resolved: run `make kafka-ref`")
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        missing_dependency("no java for the Kafka 4.3.1 reference")
    d = tmp_path_factory.mktemp("kafka-ref-ops")
    p = subprocess.run([str(KAFKA_REF), "start", str(free_port()), str(d)],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        pytest.fail(f"kafka-ref start failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    yield Bootstrap(p.stdout.strip())
    subprocess.run([str(KAFKA_REF), "stop", str(d)], capture_output=True, timeout=90)


@pytest.fixture(params=["doze", "kafka"])
def target(request, start_broker):
    if request.param == "doze":
        return start_broker(sets=["group.initial.rebalance.delay.ms=0"])
    return request.getfixturevalue("kafka_ref")


def tool(binary, bootstrap, *args, code=0):
    out = subprocess.run([str(binary), *args[:1], "--bootstrap-server", bootstrap, *args[1:]],
                         capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    assert out.returncode == code, f"{args}: exit {out.returncode}\n{out.stdout}{out.stderr}"
    return out.stdout


def tool_json(binary, bootstrap, *args):
    return json.loads(tool(binary, bootstrap, *args, "--output", "json"))


def rows(table):
    """A kafka-transactions table (tab after every cell) as dicts."""
    lines = [line.rstrip("\t").split("\t") for line in table.splitlines() if line.strip()]
    header = [h.strip() for h in lines[0]]
    return [dict(zip(header, (c.strip() for c in line))) for line in lines[1:]]


def eventually(check, what, timeout_s=20):
    """Kafka's brokers learn of a topic from the metadata log a little after
    CreateTopics answers; poll until `check()` holds."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def watermarks(bootstrap, topic, partition):
    out = []
    for isolation in ("read_uncommitted", "read_committed"):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ops-probe",
                      "isolation.level": isolation})
        try:
            out.append(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
        finally:
            c.close()
    return tuple(out)


@pytest.mark.timeout(240)
def test_operator_tools_on_doze_and_kafka(broker_binary, target):
    b, bs = broker_binary, target.bootstrap
    topic, doomed, group, txn_id = "ops-topic", "ops-doomed", "ops-group", "ops-txn"

    assert tool(b, bs, "topics", "create", "--topic", topic, "--partitions", "2",
                "--config", "retention.ms=3600000") == f"Created topic {topic}.\n"
    tool(b, bs, "topics", "create", "--topic", doomed)
    eventually(lambda: {topic, doomed} <= set(tool(b, bs, "topics", "list").split()),
               "both topics listed")
    described = tool_json(b, bs, "topics", "describe", "--topic", topic)["topics"][0]
    assert described["partition_count"] == 2
    assert described["configs"]["retention.ms"] == "3600000"
    assert [p["partition"] for p in described["partitions"]] == [0, 1]
    assert all(p["leader"] is not None for p in described["partitions"])

    # A transaction left open on partition 0, after two committed-free records.
    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id,
                  "transaction.timeout.ms": 600000})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(2):
        p.produce(topic, value=b"open-%d" % i, partition=0)
    assert p.flush(30) == 0

    listed = [r for r in rows(tool(b, bs, "transactions", "list")) if r["TransactionalId"] == txn_id]
    assert len(listed) == 1 and listed[0]["TransactionState"] == "Ongoing", listed
    described = tool_json(b, bs, "transactions", "describe", "--transactional-id", txn_id)
    assert described["state"] == "Ongoing"
    assert described["partitions"] == [{"topic": topic, "partition": 0}]
    assert described["timeout_ms"] == 600000
    producers = rows(tool(b, bs, "transactions", "describe-producers", "--topic", topic,
                          "--partition", "0"))
    assert [r["CurrentTransactionStartOffset"] for r in producers] == ["0"], producers
    assert producers[0]["ProducerId"] == str(described["producer_id"])
    hanging = tool_json(b, bs, "transactions", "find-hanging", "--topic", topic,
                        "--max-transaction-timeout", "0")
    assert hanging == {"hanging": []}, "its coordinator expects the partition"

    # A group that committed offsets, without members.
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})

    def committed():
        # Kafka makes __consumer_offsets on the first FindCoordinator and
        # answers NOT_COORDINATOR, then COORDINATOR_LOAD_IN_PROGRESS while it
        # loads it (seen in make test); librdkafka retries neither here.
        try:
            c.commit(offsets=[TopicPartition(topic, 1, 0)], asynchronous=False)
            return True
        except KafkaException as e:
            assert e.args[0].retriable() or e.args[0].code() in (
                KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS), e
            return False
    eventually(committed, "the group's offsets committed", timeout_s=60)
    c.close()
    assert group in tool(b, bs, "groups", "list").split()
    g = tool_json(b, bs, "groups", "describe", "--group", group)
    assert g["state"] == "Empty"
    assert [(o["partition"], o["current_offset"], o["log_end_offset"], o["lag"])
            for o in g["offsets"]] == [(1, 0, 0, 0)]

    # The admin's abort ends the open transaction on the partition.
    assert watermarks(bs, topic, 0) == (2, 0)
    out = tool(b, bs, "transactions", "abort", "--topic", topic, "--partition", "0",
               "--start-offset", "0")
    assert out.startswith("Aborted the transaction of producer"), out
    eventually(lambda: watermarks(bs, topic, 0) == (3, 3), "the abort marker at 2 ends it")

    assert tool(b, bs, "topics", "delete", "--topic", doomed) == f"Deleted topic {doomed}.\n"
    eventually(lambda: doomed not in tool(b, bs, "topics", "list").split(), "deleted")
    err = subprocess.run([str(b), "topics", "--bootstrap-server", bs, "describe", "--topic", doomed],
                         capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    assert err.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err.stderr, err.stderr
    p.purge()
    del p
