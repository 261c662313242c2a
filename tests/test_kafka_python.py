"""(b) kafka-python 3.x: 5,000 records with acks='all', read back with assign + seek_to_beginning."""

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient

from wireutil import unique_topic

PARTITIONS = 3
RECORDS = 5_000


@pytest.mark.timeout(180)
@pytest.mark.parametrize("idempotence", [False, None], ids=["plain", "idempotent-default"])
def test_kafka_python_roundtrip(broker, idempotence):
    # kafka-python 3.x enables idempotence by default (InitProducerId, sequence
    # numbers); both the plain and the default producer must work.
    topic = unique_topic("rt-kpy")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        res = admin.create_topics({topic: {"num_partitions": PARTITIONS, "replication_factor": 1}},
                                  timeout_ms=20000, wait_for_metadata=True)
        assert res["topics"][0]["error_code"] == 0, res
    finally:
        admin.close()

    extra = {} if idempotence is None else {"enable_idempotence": idempotence}
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all",
                             linger_ms=5, request_timeout_ms=20000, max_block_ms=20000, **extra)
    futures = []
    try:
        for seq in range(RECORDS):
            futures.append(producer.send(topic, key=f"k{seq % 101}".encode(),
                                         value=f"kpy:{seq:06d}".encode()))
        producer.flush(timeout=60)
        acked = [f.get(timeout=30) for f in futures]
    finally:
        producer.close(timeout=10)
    by_part = {p: [] for p in range(PARTITIONS)}
    for seq, md in enumerate(acked):
        by_part[md.partition].append((md.offset, f"kpy:{seq:06d}".encode()))
    for recs in by_part.values():
        recs.sort()

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                             enable_auto_commit=False, request_timeout_ms=30000,
                             isolation_level="read_uncommitted")
    got = {p: [] for p in range(PARTITIONS)}
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 90
        while sum(len(v) for v in got.values()) < RECORDS and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500, max_records=2000).items():
                got[tp.partition].extend((m.offset, m.value) for m in msgs)
    finally:
        consumer.close()

    total = sum(len(v) for v in got.values())
    assert total == RECORDS, f"read {total} of {RECORDS} records"
    for p in range(PARTITIONS):
        assert got[p] == by_part[p], f"partition {p}: read-back != acknowledged (offset, value) list"
