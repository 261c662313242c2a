"""Transaction error paths with real clients: aiokafka fenced by a second
producer with the same transactional.id; a transaction.timeout.ms above the
broker's transaction.max.timeout.ms refused with INVALID_TRANSACTION_TIMEOUT."""

import asyncio

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from txnutil import TXN_BROKER_SETS, read_to, txn_producer_conf
from wireutil import create_topic, unique_topic


async def _aiokafka_fenced(bootstrap, topic, txn_id):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AKError, ProducerFenced
    common = dict(bootstrap_servers=bootstrap, transactional_id=txn_id,
                  transaction_timeout_ms=10000, request_timeout_ms=20000)
    zombie, owner = AIOKafkaProducer(**common), AIOKafkaProducer(**common)
    await zombie.start()
    try:
        await zombie.begin_transaction()
        await zombie.send_and_wait(topic, value=b"zombie-0")
        await owner.start()
        failure = None
        try:
            await zombie.send_and_wait(topic, value=b"zombie-1")
            await zombie.commit_transaction()
        except AKError as e:
            failure = e
        assert failure is not None, "the fenced aiokafka producer committed"
        assert isinstance(failure, ProducerFenced) or "epoch" in repr(failure).lower() \
            or "fenced" in repr(failure).lower(), (
                f"aiokafka zombie failed with {type(failure).__name__}: {failure!r}, not fencing")
        await owner.begin_transaction()
        await owner.send_and_wait(topic, value=b"owner-0")
        await owner.commit_transaction()
    finally:
        try:
            await zombie.stop()
        except Exception:
            pass
        await owner.stop()


@pytest.mark.timeout(90)
def test_aiokafka_fenced(start_broker):
    broker = start_broker(sets=TXN_BROKER_SETS)
    topic = create_topic(broker, unique_topic("txn-fence-aio"), 1)
    asyncio.run(asyncio.wait_for(_aiokafka_fenced(broker.bootstrap, topic, unique_topic("fence-aio")), 70))
    rc = read_to(broker, topic, [0], "read_committed")[0]
    assert [v for _, v in rc] == [b"owner-0"], f"read_committed after fencing: {rc}"


@pytest.mark.timeout(60)
def test_transaction_timeout_above_max_refused(start_broker):
    broker = start_broker(sets=[*TXN_BROKER_SETS, "transaction.max.timeout.ms=60000"])
    p = Producer(txn_producer_conf(broker, unique_topic("txn-toolong"), **{
        "transaction.timeout.ms": 120000, "message.timeout.ms": 30000}))
    with pytest.raises(KafkaException) as ei:
        p.init_transactions(20)
    err = ei.value.args[0]
    assert err.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT, (
        f"InitProducerId with transaction.timeout.ms 120000 > max 60000 failed with {err}")
    # Within the limit it works.
    ok = Producer(txn_producer_conf(broker, unique_topic("txn-ok"), **{"transaction.timeout.ms": 60000}))
    ok.init_transactions(20)
