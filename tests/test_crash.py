"""(d) Crash durability: every record acknowledged with acks=all survives SIGKILL."""

import os
import random
import time

import pytest
from confluent_kafka import KafkaError

from wireutil import (DeliveryLog, create_topic, produce_all, producer, read_all, unique_topic,
                      watermarks)

PARTITIONS = 3
ROUNDS = 4
PRODUCE_MIN_S, PRODUCE_MAX_S = 0.3, 2.0   # kill after a random time in this range
VALUE_PAD = b"x" * 200
EXPECTED_ERRORS = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT, KafkaError._MSG_TIMED_OUT,
                   KafkaError._TRANSPORT, KafkaError._TIMED_OUT)


@pytest.mark.timeout(300)
def test_acked_records_survive_sigkill(broker):
    seed = int(os.environ.get("DOZE_WIRE_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"seed {seed} (rerun with DOZE_WIRE_SEED={seed})")
    topic = create_topic(broker, unique_topic("crash"), PARTITIONS)
    dr = DeliveryLog()
    seq = 0
    for rnd in range(ROUNDS):
        p = producer(broker, **{"message.timeout.ms": 10000, "batch.size": 262144})
        start_acked = len(dr.acked)
        run_s = rng.uniform(PRODUCE_MIN_S, PRODUCE_MAX_S)
        t0 = time.monotonic()
        # Produce continuously; kill the broker while requests are in flight.
        while time.monotonic() - t0 < run_s or len(dr.acked) == start_acked:
            assert time.monotonic() - t0 < 30, (
                f"round {rnd}: nothing acknowledged in 30 s; errors: {dr.errors[:3]}")
            try:
                p.produce(topic, key=f"k{seq % 211}".encode(),
                          value=b"%d:%08d:" % (rnd, seq) + VALUE_PAD, on_delivery=dr)
                seq += 1
            except BufferError:
                p.poll(0.01)
            p.poll(0)
        broker.kill9()
        # Deliver every report librdkafka already has, then drop what is left.
        p.poll(0.5)
        p.purge(in_queue=True, in_flight=True)
        p.flush(15)
        del p
        print(f"round {rnd}: killed after {run_s:.2f}s, {len(dr.acked) - start_acked} acked")
        broker.start()

    acked = dr.acked
    expected = {(part, off): v for part, off, v in acked}
    assert len(expected) == len(acked), "the broker acknowledged two records at one offset"
    got = read_all(broker, topic, range(PARTITIONS), timeout_s=120)
    have = {(part, off): v for part, recs in got.items() for (off, _, v) in recs}
    missing = [k for k in expected if k not in have]
    wrong = [k for k in expected if k in have and have[k] != expected[k]]
    assert not missing, (
        f"seed {seed}: {len(missing)} of {len(expected)} acknowledged records lost after SIGKILL, "
        f"e.g. (partition, offset) {sorted(missing)[:10]}")
    assert not wrong, (
        f"seed {seed}: {len(wrong)} acknowledged offsets hold a different record after restart, "
        f"e.g. {[(k, expected[k][:20], have[k][:20]) for k in sorted(wrong)[:5]]}")
    # Offsets stay dense: what was read is exactly [0, high watermark).
    for part, recs in got.items():
        offs = [o for (o, _, _) in recs]
        assert offs == list(range(len(offs))), f"partition {part}: offsets not dense from 0"

    # The log goes on where it stopped: new records land at the old high watermark.
    hw = {pp: h for pp, (_, h) in watermarks(broker, topic, range(PARTITIONS)).items()}
    dr2 = DeliveryLog()
    p = producer(broker)
    for part in range(PARTITIONS):
        p.produce(topic, value=b"after", partition=part, on_delivery=dr2)
    assert p.flush(30) == 0
    assert sorted((pp, o) for pp, o, _ in dr2.acked) == sorted(hw.items())
    unexpected = [e for e, _ in dr.errors if e.code() not in EXPECTED_ERRORS]
    print(f"acked {len(acked)}, failed {len(dr.errors)}; unexpected error kinds: {unexpected[:3]}")
