"""Kafka's own `kafka-transactions abort` against doze: a producer leaves a
transaction open on a partition (it neither commits nor aborts, and its
timeout is long), the tool finds it with describe-producers and aborts it
with WriteTxnMarkers; the partition's last stable offset then reaches the
high watermark and read_committed readers skip the aborted records.
Needs the Kafka 4.3.1 tools (`make kafka-ref`)."""

import pathlib
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import missing_dependency
from wireutil import create_topic, unique_topic

KAFKA_REF = pathlib.Path(__file__).resolve().parent / "kafka_ref" / "kafka-ref.sh"
KAFKA_REF_CP = KAFKA_REF.parent / "target" / "classpath.txt"
TXNS_CMD = "org.apache.kafka.tools.TransactionsCommand"


def tool(bootstrap, *args):
    out = subprocess.run([str(KAFKA_REF), "tool", TXNS_CMD, "--bootstrap-server", bootstrap, *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{args}: {out.stdout}{out.stderr}"
    return out.stdout


def offsets(bootstrap, topic, isolation):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "abort-probe",
                  "isolation.level": isolation})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


@pytest.mark.timeout(180)
def test_kafka_transactions_abort_ends_a_hanging_transaction(broker):
    if not KAFKA_REF_CP.exists():
        missing_dependency("Kafka 4.3.1 tools not resolved: run `make kafka-ref`")
    topic = create_topic(broker, unique_topic("hanging"), 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique_topic("hang-id"),
                  "transaction.timeout.ms": 600000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=b"hanging-%d" % i, partition=0)
    assert p.flush(30) == 0
    _, high = offsets(broker.bootstrap, topic, "read_uncommitted")
    _, stable = offsets(broker.bootstrap, topic, "read_committed")
    assert (high, stable) == (3, 0), "the open transaction holds the LSO back"

    described = tool(broker.bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
    header, row = [line.split() for line in described.strip().splitlines()[-2:]]
    start = dict(zip(header, row))["CurrentTransactionStartOffset"]
    assert start == "0", described
    tool(broker.bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _, stable = offsets(broker.bootstrap, topic, "read_committed")
        if stable >= 4:
            break
        time.sleep(0.2)
    _, high = offsets(broker.bootstrap, topic, "read_uncommitted")
    assert stable == high == 4, f"LSO {stable}, high watermark {high}: the abort marker at 3 ends it"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "abort-reader",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + 20
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            break  # end of partition
        got.append(m.value())
    c.close()
    assert got == [], f"read_committed sees nothing of the aborted transaction: {got}"
