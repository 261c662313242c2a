"""aiokafka (asyncio, pure Python): 3,000 records with acks='all', read back group-less."""

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from wireutil import create_topic, unique_topic

PARTITIONS = 2
RECORDS = 3_000


async def _roundtrip(bootstrap, topic):
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                request_timeout_ms=20000)
    await producer.start()
    try:
        futs = [await producer.send(topic, key=f"k{i % 13}".encode(), value=f"aio:{i:05d}".encode())
                for i in range(RECORDS)]
        metas = await asyncio.wait_for(asyncio.gather(*futs), 60)
    finally:
        await producer.stop()
    expected = {p: [] for p in range(PARTITIONS)}
    for i, md in enumerate(metas):
        expected[md.partition].append((md.offset, f"aio:{i:05d}".encode()))
    for v in expected.values():
        v.sort()

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                request_timeout_ms=30000)
    await consumer.start()
    got = {p: [] for p in range(PARTITIONS)}
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while sum(map(len, got.values())) < RECORDS and loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=1000)
            for tp, msgs in batch.items():
                got[tp.partition].extend((m.offset, m.value) for m in msgs)
    finally:
        await consumer.stop()
    return expected, got


@pytest.mark.timeout(120)
def test_aiokafka_roundtrip(broker):
    topic = create_topic(broker, unique_topic("rt-aio"), PARTITIONS)
    expected, got = asyncio.run(asyncio.wait_for(_roundtrip(broker.bootstrap, topic), 100))
    assert sum(map(len, got.values())) == RECORDS
    for p in range(PARTITIONS):
        assert got[p] == expected[p], f"partition {p}: read-back != acknowledged"
