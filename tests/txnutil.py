"""Helpers for the transaction wire tests (tests/test_txn_*.py).

Readers here stop on the consumer's *position* (the next offset to fetch), not
on the last record's offset: under read_committed the tail of a partition can be
an aborted transaction or a marker, so the last record delivered may sit well
below the end offset.
"""

import os
import pathlib
import shutil
import subprocess
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

# TXN_BROKER_SETS lives in conftest.py beside the txn_broker fixture; the
# tests that start brokers of their own take it from here.
from conftest import TXN_BROKER_SETS, missing_dependency  # noqa: F401
from wireutil import base_conf, consumer

JS_DIR = pathlib.Path(__file__).resolve().parent / "js"
NODE = shutil.which("node") or "/usr/bin/node"


def txn_producer_conf(broker, txn_id, **extra):
    conf = base_conf(broker, **{
        "transactional.id": txn_id,
        "transaction.timeout.ms": 10000,
        "linger.ms": 5,
    })
    conf.update(extra)
    # librdkafka requires message.timeout.ms <= transaction.timeout.ms.
    conf.setdefault("message.timeout.ms", conf["transaction.timeout.ms"])
    return conf


def end_offsets(broker, topic, partitions, isolation, timeout_s=15):
    """ListOffsets latest under `isolation` ("read_committed" -> the LSO)."""
    c = consumer(broker, **{"isolation.level": isolation})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s,
                                           cached=False)[1]
                for p in partitions}
    finally:
        c.close()


def read_to(broker, topic, partitions, isolation, until=None, timeout_s=60, **conf):
    """Read from the beginning until every partition's position reaches `until[p]`
    (default: ListOffsets latest under the same isolation, taken first).
    `conf`: extra consumer settings (dotted names via **{...}).

    Returns {partition: [(offset, value), ...]}."""
    if until is None:
        until = end_offsets(broker, topic, partitions, isolation)
    c = consumer(broker, **{"isolation.level": isolation, **conf})
    out = {p: [] for p in partitions}
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout_s
        while True:
            pos = {tp.partition: tp.offset
                   for tp in c.position([TopicPartition(topic, p) for p in partitions])}
            if all(pos[p] >= until[p] for p in partitions):
                return out
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"read_to {topic} ({isolation}): timed out after {timeout_s}s; target {until}, "
                    f"positions {pos}, counts { {p: len(v) for p, v in out.items()} }")
            for m in c.consume(num_messages=10000, timeout=0.3):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consumer error on {topic}: {m.error()}")
                out[m.partition()].append((m.offset(), m.value()))
    finally:
        c.close()


def values(recs):
    """[(offset, value)] of all partitions -> sorted values."""
    return sorted(v for rs in recs.values() for (_, v) in rs)


def wait_until(pred, timeout_s, interval_s=0.25, what="condition"):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"{what} not reached within {timeout_s}s (last: {last!r})")


def group_committed(broker, group, topic, partitions, isolation="read_uncommitted"):
    """The group's committed offsets (OffsetFetch; read_committed asks require_stable)."""
    c = Consumer(base_conf(broker, **{"group.id": group, "enable.auto.commit": False,
                                      "isolation.level": isolation}))
    try:
        tps = c.committed([TopicPartition(topic, p) for p in partitions], timeout=20)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def require_kafkajs():
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        missing_dependency("kafkajs not installed (run `make js-deps`)")


def run_node(script, *args, timeout_s=75):
    """Run tests/js/<script> with node; assert it exits 0; return its stdout."""
    env = dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1")
    r = subprocess.run([NODE, str(JS_DIR / script), *map(str, args)], cwd=JS_DIR, env=env,
                       capture_output=True, text=True, timeout=timeout_s)
    assert r.returncode == 0, (
        f"node {script} exited {r.returncode}\n--- stdout ---\n{r.stdout[-4000:]}\n"
        f"--- stderr ---\n{r.stderr[-8000:]}")
    return r.stdout
