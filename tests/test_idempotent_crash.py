"""Idempotent librdkafka producer across broker SIGKILLs: no acknowledged record lost,
no record written twice (retries of possibly-persisted batches are deduplicated
from producer state rebuilt from the log)."""

import collections
import logging
import os
import random
import time

import pytest

from wireutil import DeliveryLog, create_topic, producer, read_all, unique_topic, watermarks

PARTITIONS = 2
ROUNDS = 3


@pytest.mark.timeout(240)
def test_idempotent_producer_survives_broker_sigkill(broker):
    seed = int(os.environ.get("DOZE_WIRE_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"seed {seed} (rerun with DOZE_WIRE_SEED={seed})")
    topic = create_topic(broker, unique_topic("idem-crash"), PARTITIONS)
    errors = []
    dr = DeliveryLog()
    # One producer instance for the whole test: it keeps its producer id and
    # sequence numbers across the broker's restarts.
    # librdkafka's idempotence state machine logs to a file beside the broker's logs.
    rdlog = logging.getLogger(f"rdkafka-{broker.port}")
    rdlog.propagate = False
    rdlog.setLevel(logging.DEBUG)
    rdlog.addHandler(logging.FileHandler(broker.log_dir / "librdkafka-eos.log"))
    p = producer(broker, **{"enable.idempotence": True, "message.timeout.ms": 30000,
                            "batch.size": 65536, "error_cb": lambda e: errors.append(e),
                            "debug": "eos", "logger": rdlog})
    seq = 0

    def produce_for(seconds):
        nonlocal seq
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            try:
                p.produce(topic, key=b"k%d" % (seq % 97), value=b"i%08d" % seq, on_delivery=dr)
                seq += 1
            except BufferError:
                p.poll(0.01)
            p.poll(0)

    for rnd in range(ROUNDS):
        produce_for(rng.uniform(0.3, 1.5))
        broker.kill9()
        produce_for(0.2)           # queue more while the broker is down
        broker.start()
    produce_for(0.5)
    left = p.flush(60)
    fatal = [e for e in errors if e.fatal()]
    if left or dr.errors or fatal:
        pytest.fail(f"seed {seed}: {left} undelivered after 60 s, {len(dr.errors)} delivery errors "
                    f"(e.g. {dr.errors[:2]}), fatal: {fatal[:1]}; {_probe(broker, topic)}; "
                    f"librdkafka eos log: {broker.log_dir / 'librdkafka-eos.log'}")
    assert len(dr.acked) == seq

    got = read_all(broker, topic, range(PARTITIONS), timeout_s=120)
    values = [v for recs in got.values() for (_, _, v) in recs]
    dup = [v for v, n in collections.Counter(values).items() if n > 1]
    assert not dup, (f"seed {seed}: {len(dup)} records written twice by an idempotent producer, "
                     f"e.g. {sorted(dup)[:5]}")
    have = {(part, off): v for part, recs in got.items() for (off, _, v) in recs}
    missing = [(pp, o) for pp, o, v in dr.acked if have.get((pp, o)) != v]
    assert not missing, f"seed {seed}: {len(missing)} acknowledged records not at their offsets"
    # Per partition, the producer's order is kept (idempotence implies ordering).
    for part, recs in got.items():
        seqs = [int(v[1:]) for (_, _, v) in recs]
        assert seqs == sorted(seqs), f"partition {part}: order differs from produce order"


def _probe(broker, topic):
    """What a stalled broker still does: watermarks, and a fresh plain producer."""
    try:
        wm = watermarks(broker, topic, range(PARTITIONS), timeout_s=5)
    except Exception as e:  # noqa: BLE001 - diagnostics only
        wm = f"ListOffsets failed: {e}"
    probe = DeliveryLog()
    q = producer(broker, **{"message.timeout.ms": 5000})
    for part in range(PARTITIONS):
        q.produce(topic, value=b"probe", partition=part, on_delivery=probe)
    q.flush(8)
    return f"watermarks {wm}; a fresh non-idempotent producer: acked {probe.acked[:2]}, errors {probe.errors[:2]}"
