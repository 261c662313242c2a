"""send_offsets_to_transaction with kafka-python, aiokafka and kafkajs, against a
group that has no members (generation -1, as these clients send it): the
offsets of an aborted transaction are dropped, those of a committed one are
applied. confluent-kafka (with a live member) is in test_txn_offsets_expiry.py.
Each client: abort with offsets {0: 11, 1: 12}, then commit with {0: 5, 1: 7},
each transaction also writing one record ("abort" / "commit") to `dst`."""

import asyncio

import pytest

from txnutil import group_committed, read_to, require_kafkajs, run_node
from wireutil import create_topic, unique_topic


def setup(broker, prefix):
    src = create_topic(broker, unique_topic(f"{prefix}-src"), 2)
    dst = create_topic(broker, unique_topic(f"{prefix}-dst"), 1)
    return src, dst, unique_topic(f"{prefix}-group")


def check(broker, src, dst, group):
    got = group_committed(broker, group, src, [0, 1])
    assert got == {0: 5, 1: 7}, (
        f"group {group}: committed offsets {got}, expected {{0: 5, 1: 7}} "
        f"(11/12 were sent with the aborted transaction)")
    rc = [v for _, v in read_to(broker, dst, [0], "read_committed")[0]]
    assert rc == [b"commit"], f"read_committed {dst}: {rc}"


@pytest.mark.timeout(90)
def test_kafka_python_send_offsets(txn_broker):
    from kafka import KafkaProducer, TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata
    src, dst, group = setup(txn_broker, "kp-off")
    p = KafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id=unique_topic("kp-off"),
                      transaction_timeout_ms=10000, acks="all", request_timeout_ms=20000,
                      max_block_ms=30000)
    try:
        p.init_transactions()
        for kind, o0, o1 in (("abort", 11, 12), ("commit", 5, 7)):
            p.begin_transaction()
            p.send(dst, value=kind.encode()).get(timeout=30)
            p.send_offsets_to_transaction({KTP(src, 0): OffsetAndMetadata(o0, "", -1),
                                           KTP(src, 1): OffsetAndMetadata(o1, "", -1)}, group)
            (p.commit_transaction if kind == "commit" else p.abort_transaction)()
    finally:
        p.close(timeout=10)
    check(txn_broker, src, dst, group)


async def _aiokafka_send_offsets(bootstrap, src, dst, group):
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_topic("aio-off"),
                         transaction_timeout_ms=10000, request_timeout_ms=20000)
    await p.start()
    try:
        for kind, o0, o1 in (("abort", 11, 12), ("commit", 5, 7)):
            await p.begin_transaction()
            await p.send_and_wait(dst, value=kind.encode())
            await p.send_offsets_to_transaction({ATP(src, 0): o0, ATP(src, 1): o1}, group)
            await (p.commit_transaction() if kind == "commit" else p.abort_transaction())
    finally:
        await p.stop()


@pytest.mark.timeout(90)
def test_aiokafka_send_offsets(txn_broker):
    src, dst, group = setup(txn_broker, "aio-off")
    asyncio.run(asyncio.wait_for(_aiokafka_send_offsets(txn_broker.bootstrap, src, dst, group), 60))
    check(txn_broker, src, dst, group)


@pytest.mark.timeout(90)
def test_kafkajs_send_offsets(txn_broker):
    require_kafkajs()
    src, dst, group = setup(txn_broker, "js-off")
    run_node("txn_send_offsets.js", txn_broker.bootstrap, src, dst, group, unique_topic("js-off"))
    check(txn_broker, src, dst, group)
