"""(e) A clean restart (SIGTERM) keeps topics, configs and data; ListOffsets is right."""

import time

import pytest
from confluent_kafka import TopicPartition

from wireutil import (DeliveryLog, consumer, create_topic, produce_all, producer, read_all,
                      topic_partitions, unique_topic, watermarks)

RECORDS = 2_000
TS_STEP_MS = 1000


@pytest.mark.timeout(180)
def test_sigterm_restart_keeps_topics_and_data(broker):
    multi = create_topic(broker, unique_topic("restart-multi"), 2)
    single = create_topic(broker, unique_topic("restart-ts"), 1)

    dr = DeliveryLog()
    p = producer(broker)
    produce_all(p, multi, ((f"k{i}".encode(), f"m{i:05d}".encode()) for i in range(RECORDS)), dr)
    assert not dr.errors, dr.errors[:3]
    per_part = {0: 0, 1: 0}
    for part, _, _ in dr.acked:
        per_part[part] += 1

    # Single-partition topic with explicit CreateTime timestamps, an hour in the
    # past (Kafka rejects timestamps too far in the future), 1 s apart.
    base_ms = (int(time.time()) - 3600) * 1000
    ts_dr = DeliveryLog()
    for i in range(100):
        p.produce(single, value=f"t{i:03d}".encode(), timestamp=base_ms + i * TS_STEP_MS,
                  on_delivery=ts_dr)
    assert p.flush(30) == 0
    assert not ts_dr.errors, ts_dr.errors[:3]
    assert [off for _, off, _ in ts_dr.acked] == list(range(100))

    def check():
        assert topic_partitions(broker, multi) == [0, 1]
        assert topic_partitions(broker, single) == [0]
        wm = watermarks(broker, multi, [0, 1])
        assert wm == {0: (0, per_part[0]), 1: (0, per_part[1])}, (
            f"watermarks {wm}, expected low 0 and high {per_part}")
        assert watermarks(broker, single, [0]) == {0: (0, 100)}

        got = read_all(broker, multi, [0, 1], timeout_s=60)
        values = sorted(v for recs in got.values() for (_, _, v) in recs)
        assert values == sorted(f"m{i:05d}".encode() for i in range(RECORDS))

        c = consumer(broker)
        try:
            queries = [0, 37, 99]
            for q in queries:
                # Exactly on a record's timestamp, and half a step before it.
                for ts, want in ((base_ms + q * TS_STEP_MS, q), (base_ms + q * TS_STEP_MS - 500, q)):
                    r = c.offsets_for_times([TopicPartition(single, 0, ts)], timeout=15)
                    assert r[0].error is None, r[0].error
                    assert r[0].offset == want, f"offsets_for_times({ts}) = {r[0].offset}, want {want}"
            # Earlier than everything: the first record.
            r = c.offsets_for_times([TopicPartition(single, 0, base_ms - 10 * TS_STEP_MS)], timeout=15)
            assert r[0].offset == 0, r[0]
            # Later than everything: no such offset (-1, like Kafka).
            r = c.offsets_for_times([TopicPartition(single, 0, base_ms + 1000 * TS_STEP_MS)], timeout=15)
            assert r[0].offset == -1, f"offsets_for_times past the end = {r[0].offset}, want -1"
        finally:
            c.close()

    check()
    rc = broker.stop()
    assert rc == 0, f"doze-kafka exited {rc} on SIGTERM"
    broker.start()
    check()
    # Still writable after the restart, at the next offset.
    dr2 = DeliveryLog()
    produce_all(producer(broker), single, [(None, b"after-restart")], dr2)
    assert [(part, off) for part, off, _ in dr2.acked] == [(0, 100)]
