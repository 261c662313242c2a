"""Transactions with four real clients: confluent-kafka (librdkafka), kafka-python,
aiokafka and kafkajs each commit one transaction and abort another, both across
the same two 1-partition topics (3 records per topic per transaction).

Per topic the log must then be exactly
    0,1,2 committed records | 3 commit marker | 4,5,6 aborted records | 7 abort marker
so the end offset is 8 under both isolation levels (no transaction is open),
read_committed sees only the committed records and read_uncommitted sees all six.
"""

import asyncio
import json
import time

import pytest
from confluent_kafka import Producer

from txnutil import (end_offsets, read_to, require_kafkajs, run_node,
                     txn_producer_conf)
from wireutil import create_topic, unique_topic

END_OFFSET = 8  # 3 committed + 1 marker + 3 aborted + 1 marker


def two_topics(broker, prefix):
    return [create_topic(broker, unique_topic(f"{prefix}-{n}"), 1) for n in ("a", "b")]


def expected(prefix, kind):
    return [f"{prefix}-{kind}-{i}".encode() for i in range(3)]


def check_layout(broker, topics, prefix):
    """The broker-side view through librdkafka, the reference reader."""
    for t in topics:
        hw = end_offsets(broker, t, [0], "read_uncommitted")[0]
        lso = end_offsets(broker, t, [0], "read_committed")[0]
        assert hw == END_OFFSET, (
            f"{t}: ListOffsets latest (read_uncommitted) = {hw}, expected {END_OFFSET} "
            f"(3 committed + commit marker + 3 aborted + abort marker)")
        assert lso == END_OFFSET, (
            f"{t}: ListOffsets latest (read_committed) = {lso}, expected {END_OFFSET}: "
            f"no transaction is open, so the LSO is the log end")
        committed = read_to(broker, t, [0], "read_committed")[0]
        uncommitted = read_to(broker, t, [0], "read_uncommitted")[0]
        assert committed == list(zip(range(3), expected(prefix, "commit"))), (
            f"{t}: read_committed got {committed}")
        assert uncommitted == list(zip([0, 1, 2, 4, 5, 6],
                                       expected(prefix, "commit") + expected(prefix, "abort"))), (
            f"{t}: read_uncommitted got {uncommitted}")


# --- confluent-kafka ---------------------------------------------------------

@pytest.mark.timeout(90)
def test_confluent_commit_and_abort(txn_broker):
    topics = two_topics(txn_broker, "txn-ck")
    p = Producer(txn_producer_conf(txn_broker, unique_topic("txn-ck")))
    p.init_transactions(30)
    for kind in ("commit", "abort"):
        p.begin_transaction()
        for t in topics:
            for v in expected("ck", kind):
                p.produce(t, value=v)
        # librdkafka's abort_transaction purges what is still queued: flush
        # first so the aborted records really reach the log.
        assert p.flush(30) == 0
        if kind == "commit":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    check_layout(txn_broker, topics, "ck")


# --- kafka-python ------------------------------------------------------------

def kafka_python_read(bootstrap, topic, isolation, until, timeout_s=30):
    from kafka import KafkaConsumer, TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", isolation_level=isolation,
                      request_timeout_ms=20000, fetch_max_wait_ms=200)
    try:
        tp = KTP(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        deadline = time.monotonic() + timeout_s
        while c.position(tp) < until:
            assert time.monotonic() < deadline, (
                f"kafka-python {isolation} reader stuck at position {c.position(tp)} < {until}, "
                f"got {got}")
            for recs in c.poll(timeout_ms=300).values():
                got.extend((r.offset, r.value) for r in recs)
        return got
    finally:
        c.close()


@pytest.mark.timeout(120)
def test_kafka_python_commit_and_abort(txn_broker):
    from kafka import KafkaProducer
    topics = two_topics(txn_broker, "txn-kp")
    p = KafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id=unique_topic("txn-kp"),
                      transaction_timeout_ms=10000, acks="all", linger_ms=5,
                      request_timeout_ms=20000, max_block_ms=30000)
    try:
        p.init_transactions()
        for kind in ("commit", "abort"):
            p.begin_transaction()
            futs = [p.send(t, value=v) for t in topics for v in expected("kp", kind)]
            p.flush(30)
            for f in futs:
                f.get(timeout=30)
            if kind == "commit":
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close(timeout=10)
    check_layout(txn_broker, topics, "kp")
    # And kafka-python's own consumer agrees.
    for t in topics:
        assert kafka_python_read(txn_broker.bootstrap, t, "read_committed", END_OFFSET) == \
            list(zip(range(3), expected("kp", "commit")))
        assert kafka_python_read(txn_broker.bootstrap, t, "read_uncommitted", END_OFFSET) == \
            list(zip([0, 1, 2, 4, 5, 6], expected("kp", "commit") + expected("kp", "abort")))


# --- aiokafka ----------------------------------------------------------------

async def _aiokafka_txns(bootstrap, topics, txn_id):
    from aiokafka import AIOKafkaProducer
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id,
                         transaction_timeout_ms=10000, linger_ms=5, request_timeout_ms=20000)
    await p.start()
    try:
        for kind in ("commit", "abort"):
            await p.begin_transaction()
            for t in topics:
                for v in expected("aio", kind):
                    await p.send_and_wait(t, value=v)
            if kind == "commit":
                await p.commit_transaction()
            else:
                await p.abort_transaction()
    finally:
        await p.stop()


async def _aiokafka_read(bootstrap, topic, isolation, until, timeout_s=30):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", isolation_level=isolation,
                         request_timeout_ms=20000, fetch_max_wait_ms=200)
    await c.start()
    try:
        tp = ATP(topic, 0)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        got = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while await c.position(tp) < until:
            assert loop.time() < deadline, (
                f"aiokafka {isolation} reader stuck at position {await c.position(tp)} < {until}, "
                f"got {got}")
            for msgs in (await c.getmany(timeout_ms=300)).values():
                got.extend((m.offset, m.value) for m in msgs)
        return got
    finally:
        await c.stop()


@pytest.mark.timeout(120)
def test_aiokafka_commit_and_abort(txn_broker):
    topics = two_topics(txn_broker, "txn-aio")
    asyncio.run(asyncio.wait_for(
        _aiokafka_txns(txn_broker.bootstrap, topics, unique_topic("txn-aio")), 60))
    check_layout(txn_broker, topics, "aio")
    for t in topics:
        rc = asyncio.run(asyncio.wait_for(
            _aiokafka_read(txn_broker.bootstrap, t, "read_committed", END_OFFSET), 40))
        ru = asyncio.run(asyncio.wait_for(
            _aiokafka_read(txn_broker.bootstrap, t, "read_uncommitted", END_OFFSET), 40))
        assert rc == list(zip(range(3), expected("aio", "commit"))), f"aiokafka read_committed: {rc}"
        assert ru == list(zip([0, 1, 2, 4, 5, 6], expected("aio", "commit") + expected("aio", "abort"))), \
            f"aiokafka read_uncommitted: {ru}"


# --- kafkajs -----------------------------------------------------------------

@pytest.mark.timeout(120)
def test_kafkajs_commit_and_abort(txn_broker):
    require_kafkajs()
    topics = two_topics(txn_broker, "txn-js")
    run_node("txn_commit_abort.js", txn_broker.bootstrap, topics[0], topics[1],
             unique_topic("txn-js"), "js")
    check_layout(txn_broker, topics, "js")


@pytest.mark.timeout(150)
def test_kafkajs_group_reader_isolation(txn_broker):
    """kafkajs reads through a consumer group (it has no group-less consumer):
    its read_committed consumer must drop the aborted records."""
    require_kafkajs()
    topics = two_topics(txn_broker, "txn-jsr")
    p = Producer(txn_producer_conf(txn_broker, unique_topic("txn-jsr")))
    p.init_transactions(30)
    for kind in ("commit", "abort"):
        p.begin_transaction()
        for v in expected("jsr", kind):
            p.produce(topics[0], value=v)
        assert p.flush(30) == 0
        (p.commit_transaction if kind == "commit" else p.abort_transaction)(30)
    for isolation, want in (("read_committed", expected("jsr", "commit")),
                            ("read_uncommitted", expected("jsr", "commit") + expected("jsr", "abort"))):
        out = run_node("read_isolation.js", txn_broker.bootstrap, topics[0], isolation, len(want),
                       unique_topic("jsr-group"))
        got = json.loads(out.strip().splitlines()[-1])
        assert [g["value"].encode() for g in got] == want, f"kafkajs {isolation} got {got}"
