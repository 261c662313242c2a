"""Transactional offsets and expiry with a live producer:

- offsets sent with send_offsets_to_transaction are applied to the group only
  when the transaction commits (an aborted one leaves the group's offsets alone);
- a transaction that outlives transaction.timeout.ms while its producer is alive
  is aborted by the broker and the producer fenced: its commit fails, and
  nothing it wrote becomes visible to read_committed.
"""

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from txnutil import (end_offsets, group_committed, read_to, txn_producer_conf,
                     wait_until)
from wireutil import base_conf, create_topic, unique_topic


@pytest.mark.timeout(90)
def test_txn_offsets_applied_only_on_commit(txn_broker):
    src = create_topic(txn_broker, unique_topic("txn-src"), 2)
    dst = create_topic(txn_broker, unique_topic("txn-dst"), 1)
    group = unique_topic("txn-offsets-group")
    # A group member, so that send_offsets_to_transaction has real group metadata.
    member = Consumer(base_conf(txn_broker, **{"group.id": group, "enable.auto.commit": False,
                                               "session.timeout.ms": 6000}))
    member.subscribe([src])
    deadline = time.monotonic() + 30
    while not member.assignment():
        assert time.monotonic() < deadline, "consumer never got an assignment"
        member.poll(0.2)
    meta = member.consumer_group_metadata()
    p = Producer(txn_producer_conf(txn_broker, unique_topic("txn-offsets")))
    p.init_transactions(30)
    try:
        # Aborted: offsets 11 / 12 must not reach the group.
        p.begin_transaction()
        p.produce(dst, value=b"aborted")
        p.send_offsets_to_transaction([TopicPartition(src, 0, 11), TopicPartition(src, 1, 12)], meta, 30)
        assert p.flush(30) == 0
        p.abort_transaction(30)
        before = group_committed(txn_broker, group, src, [0, 1])
        assert all(o < 0 for o in before.values()), (
            f"an aborted transaction's offsets were applied to group {group}: {before}")
        # Committed: offsets 5 / 7 are applied.
        p.begin_transaction()
        p.produce(dst, value=b"committed")
        p.send_offsets_to_transaction([TopicPartition(src, 0, 5), TopicPartition(src, 1, 7)], meta, 30)
        p.commit_transaction(30)
        after = group_committed(txn_broker, group, src, [0, 1])
        assert after == {0: 5, 1: 7}, f"group {group} committed offsets after the commit: {after}"
        # read_committed consumers see the same (OffsetFetch require_stable).
        assert group_committed(txn_broker, group, src, [0, 1], "read_committed") == {0: 5, 1: 7}
    finally:
        member.close()
    assert [v for _, v in read_to(txn_broker, dst, [0], "read_committed")[0]] == [b"committed"]


@pytest.mark.timeout(90)
def test_live_producer_transaction_expires_and_is_fenced(txn_broker):
    topic = create_topic(txn_broker, unique_topic("txn-expire"), 1)
    timeout_ms = 2000
    p = Producer(txn_producer_conf(txn_broker, unique_topic("txn-expire"),
                                   **{"transaction.timeout.ms": timeout_ms,
                                      "socket.timeout.ms": timeout_ms}))
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"late-0")
    assert p.flush(30) == 0
    # The broker aborts it once it is older than its timeout (cleanup every 500 ms).
    wait_until(lambda: end_offsets(txn_broker, topic, [0], "read_committed")[0] == 2,
               timeout_s=20, what="broker-side abort of the expired transaction (marker at 1)")
    assert end_offsets(txn_broker, topic, [0], "read_uncommitted")[0] == 2
    with pytest.raises(KafkaException) as ei:
        p.produce(topic, value=b"late-1")
        p.flush(10)
        p.commit_transaction(30)
    err = ei.value.args[0]
    print(f"commit after expiry failed with {err}")
    # librdkafka reports the broker's fencing (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH)
    # as a fatal _FENCED error, or an abortable error if its produce failed first.
    assert err.fatal() or err.txn_requires_abort(), f"unexpected error class: {err}"
    rc = read_to(txn_broker, topic, [0], "read_committed")[0]
    assert rc == [], f"records of the expired transaction are visible: {rc}"
    ru = [v for _, v in read_to(txn_broker, topic, [0], "read_uncommitted")[0]]
    assert b"late-1" not in ru, f"the fenced producer wrote after expiry: {ru}"
