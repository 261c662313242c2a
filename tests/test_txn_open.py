"""An open transaction holds read_committed back (records and ListOffsets latest
under read_committed, which is the LSO) until it ends: by its commit, or, when
its producer is SIGKILLed mid-transaction, by the broker's transaction timeout.

Layout of the 1-partition topic in both tests:
    0,1   committed by a first producer, 2 its commit marker
    3,4,5 the open transaction (the "holder")
    6,7   committed by another producer while the holder is open, 8 its marker
    9     the holder's marker (commit, or abort on timeout)
"""

import pathlib
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, Producer, TopicPartition

from txnutil import (end_offsets, read_to, txn_producer_conf, values,
                     wait_until)
from wireutil import consumer, create_topic, unique_topic

HERE = pathlib.Path(__file__).resolve().parent
LSO_WHILE_OPEN = 3
HW_WHILE_OPEN = 9
HW_AFTER = 10


def commit_records(broker, topic, vals):
    p = Producer(txn_producer_conf(broker, unique_topic("txn-side")))
    p.init_transactions(30)
    p.begin_transaction()
    for v in vals:
        p.produce(topic, value=v)
    p.commit_transaction(30)


def read_committed_snapshot(broker, topic, linger_s=1.5):
    """Everything a read_committed consumer gets within linger_s, and its position."""
    c = consumer(broker, **{"isolation.level": "read_committed"})
    got = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + linger_s
        while time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.2):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consumer error: {m.error()}")
                got.append((m.offset(), m.value()))
        return got, c.position([TopicPartition(topic, 0)])[0].offset
    finally:
        c.close()


def assert_held_back(broker, topic):
    hw = end_offsets(broker, topic, [0], "read_uncommitted")[0]
    lso = end_offsets(broker, topic, [0], "read_committed")[0]
    assert hw == HW_WHILE_OPEN, f"high watermark {hw}, expected {HW_WHILE_OPEN}"
    assert lso == LSO_WHILE_OPEN, (
        f"ListOffsets latest under read_committed = {lso} while a transaction that starts at "
        f"offset {LSO_WHILE_OPEN} is open (expected the LSO {LSO_WHILE_OPEN}; high watermark {hw})")
    got, pos = read_committed_snapshot(broker, topic)
    assert got == [(0, b"before-0"), (1, b"before-1")], (
        f"read_committed consumer got {got} while the transaction at offset 3 is open "
        f"(the records committed after it, at 6 and 7, must be held back too)")
    assert pos <= LSO_WHILE_OPEN, f"read_committed position {pos} moved past the LSO {LSO_WHILE_OPEN}"
    # read_uncommitted sees the open transaction's records and the later commit.
    ru = read_to(broker, topic, [0], "read_uncommitted")[0]
    assert [o for o, _ in ru] == [0, 1, 3, 4, 5, 6, 7], f"read_uncommitted got {ru}"


@pytest.mark.timeout(90)
def test_open_transaction_holds_read_committed_until_commit(txn_broker):
    topic = create_topic(txn_broker, unique_topic("txn-hold"), 1)
    commit_records(txn_broker, topic, [b"before-0", b"before-1"])
    holder = Producer(txn_producer_conf(txn_broker, unique_topic("txn-holder"),
                                        **{"transaction.timeout.ms": 60000}))
    holder.init_transactions(30)
    holder.begin_transaction()
    for i in range(3):
        holder.produce(topic, value=b"open-%d" % i)
    assert holder.flush(30) == 0
    commit_records(txn_broker, topic, [b"after-0", b"after-1"])

    assert_held_back(txn_broker, topic)
    holder.commit_transaction(30)

    assert end_offsets(txn_broker, topic, [0], "read_committed")[0] == HW_AFTER
    assert end_offsets(txn_broker, topic, [0], "read_uncommitted")[0] == HW_AFTER
    rc = read_to(txn_broker, topic, [0], "read_committed")
    assert rc[0] == [(0, b"before-0"), (1, b"before-1"), (3, b"open-0"), (4, b"open-1"),
                     (5, b"open-2"), (6, b"after-0"), (7, b"after-1")], rc


@pytest.mark.timeout(120)
def test_killed_producer_transaction_times_out(txn_broker):
    topic = create_topic(txn_broker, unique_topic("txn-orphan"), 1)
    commit_records(txn_broker, topic, [b"before-0", b"before-1"])
    txn_id = unique_topic("txn-orphan")
    timeout_ms = 5000
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "txn_hang_producer.py"), txn_broker.bootstrap, topic, txn_id,
         str(timeout_ms), "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # bounded by the test's timeout
        assert line.startswith("OPEN"), (
            f"hanging producer did not open its transaction: {line!r}\n{proc.stderr.read()[-3000:]}"
            if proc.poll() is not None else f"hanging producer said {line!r}")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed_at = time.monotonic()
        commit_records(txn_broker, topic, [b"after-0", b"after-1"])
        # Checked straight away: well inside the 5 s timeout (the checks take ~2 s).
        assert_held_back(txn_broker, topic)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    # The broker aborts it once transaction.timeout.ms has passed since it last
    # changed state (the cleanup runs every 500 ms here).
    wait_until(lambda: end_offsets(txn_broker, topic, [0], "read_committed")[0] >= HW_AFTER,
               timeout_s=30, interval_s=0.3,
               what=f"LSO past the killed producer's transaction (timeout {timeout_ms} ms)")
    ended_after_s = time.monotonic() - killed_at
    print(f"killed producer's transaction ended {ended_after_s:.1f}s after the kill")
    assert end_offsets(txn_broker, topic, [0], "read_uncommitted")[0] == HW_AFTER, (
        "expected exactly one abort marker after the timeout")
    rc = read_to(txn_broker, topic, [0], "read_committed")[0]
    assert rc == [(0, b"before-0"), (1, b"before-1"), (6, b"after-0"), (7, b"after-1")], (
        f"read_committed after the timeout abort: {rc}")
    ru = read_to(txn_broker, topic, [0], "read_uncommitted")[0]
    assert [o for o, _ in ru] == [0, 1, 3, 4, 5, 6, 7]

    # The id is free to take over again, and its new owner works.
    p = Producer(txn_producer_conf(txn_broker, txn_id))
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"next")
    p.commit_transaction(30)
    rc = read_to(txn_broker, topic, [0], "read_committed")[0]
    assert values({0: rc}) == sorted([b"before-0", b"before-1", b"after-0", b"after-1", b"next"])
