"""Fetch sessions (KIP-227) with a client that asks for them: kafka-python 3.x
opens a session with its first full fetch and then sends incremental fetches
that name only the partitions whose position moved.

A consumer assigned 24 partitions reads while a producer keeps writing to a
few of them at a time, so most incremental answers carry some partitions and
leave the rest out. Every record must arrive once, in order, and the broker's
/metrics must show the session open and incremental fetches served (so the
test cannot pass on full fetches alone). Then a second consumer, with a
session of its own, reads everything again and what is written after.
"""

import time
import urllib.request

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from wireutil import create_topic, unique_topic

PARTITIONS = 24
ROUNDS = 40
PER_ROUND = 3  # partitions written each round
HTTP_TIMEOUT_S = 10


def metric(broker, name):
    with urllib.request.urlopen(broker.console_url + "metrics", timeout=HTTP_TIMEOUT_S) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                return s.value
    raise AssertionError(f"no {name} on /metrics")


def read(consumer, want, got, deadline):
    while sum(len(v) for v in got.values()) < want and time.monotonic() < deadline:
        for tp, msgs in consumer.poll(timeout_ms=200, max_records=500).items():
            got[tp.partition].extend((m.offset, m.value) for m in msgs)


@pytest.mark.timeout(180)
def test_kafka_python_reads_through_a_fetch_session(start_broker):
    broker = start_broker(console=True)
    topic = create_topic(broker, unique_topic("fetch-session"), PARTITIONS)
    assert metric(broker, "doze_fetches_incremental_total") == 0

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=1,
                             request_timeout_ms=20000, max_block_ms=20000)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                             enable_auto_commit=False, request_timeout_ms=30000,
                             fetch_max_wait_ms=50)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    sent = {p: [] for p in range(PARTITIONS)}
    got = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 120
        total = 0
        for r in range(ROUNDS):
            for k in range(PER_ROUND):
                p = (r * 7 + k * 5) % PARTITIONS
                value = f"r{r}-p{p}".encode()
                md = producer.send(topic, partition=p, value=value).get(timeout=30)
                sent[p].append((md.offset, value))
                total += 1
            read(consumer, total, got, deadline)
        assert metric(broker, "doze_fetch_sessions") >= 1, "the consumer's session is open"
    finally:
        consumer.close()
        producer.close(timeout=10)
    assert got == sent, "every record once, in order, per partition"
    incremental = metric(broker, "doze_fetches_incremental_total")
    assert incremental >= ROUNDS // 2, f"only {incremental} incremental fetches: sessions unused?"

    # A second consumer, with a session of its own, reads it all again, and
    # then what is written after: incremental fetches of its session.
    again = {p: [] for p in range(PARTITIONS)}
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=1,
                             request_timeout_ms=20000, max_block_ms=20000)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                             enable_auto_commit=False, request_timeout_ms=30000,
                             fetch_max_wait_ms=50)
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 60
        read(consumer, total, again, deadline)
        for p in (3, 11, 19):
            value = f"after-p{p}".encode()
            md = producer.send(topic, partition=p, value=value).get(timeout=30)
            sent[p].append((md.offset, value))
            total += 1
            read(consumer, total, again, deadline)
    finally:
        consumer.close()
        producer.close(timeout=10)
    assert again == sent
    assert metric(broker, "doze_fetches_incremental_total") > incremental
