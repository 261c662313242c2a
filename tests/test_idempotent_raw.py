"""Idempotent produce at the protocol level (hand-built batches): duplicates of
retained batches are answered with their original offsets and not written again,
also after a restart (producer state rebuilt from the log); gaps are refused."""

import socket

import pytest

from rawkafka import RawConn, build_batch
from wireutil import create_topic, unique_topic, watermarks

NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def _conn(broker):
    return RawConn(broker.host, broker.port, timeout_s=10)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("restart", ["sigterm", "sigkill"])
def test_duplicate_batch_answered_after_restart(broker, restart):
    topic = create_topic(broker, unique_topic("raw-idem"), 1)
    c = _conn(broker)
    err, pid, epoch = c.init_producer_id()
    assert err == NONE and pid >= 0 and epoch >= 0, (err, pid, epoch)

    b0 = build_batch([b"a%d" % i for i in range(10)], pid, epoch, 0)
    b1 = build_batch([b"b%d" % i for i in range(10)], pid, epoch, 10)
    assert c.produce(topic, 0, b0) == (NONE, 0)
    assert c.produce(topic, 0, b1) == (NONE, 10)
    # The same batch again: a duplicate, answered with the original offset.
    assert c.produce(topic, 0, b1) == (NONE, 10)
    assert watermarks(broker, topic, [0]) == {0: (0, 20)}
    c.close()

    if restart == "sigkill":
        broker.kill9()
        broker.start()
    else:
        broker.restart()

    c = _conn(broker)
    try:
        try:
            got = c.produce(topic, 0, b1)
        except socket.timeout:
            pytest.fail("no answer within 10 s to a resent duplicate batch after a restart")
        assert got == (NONE, 10), f"duplicate after restart answered {got}"
        assert watermarks(broker, topic, [0]) == {0: (0, 20)}, "duplicate written again"
        b2 = build_batch([b"c%d" % i for i in range(10)], pid, epoch, 20)
        assert c.produce(topic, 0, b2) == (NONE, 20)
        gap = build_batch([b"d"], pid, epoch, 40)
        err, _ = c.produce(topic, 0, gap)
        assert err == OUT_OF_ORDER_SEQUENCE_NUMBER, f"sequence gap answered error {err}"
    finally:
        c.close()
