"""Exactly-once read-process-write copier (confluent-kafka), run as a subprocess
by test_txn_eos_copier.py, which SIGKILLs it (and the broker) at random points.

    python txn_copier.py <bootstrap> <in_topic> <out_topic> <group_id> <transactional_id> <seed> <max_rate>

Consumes `in_topic` read_committed with a consumer group, copies each record to
the same partition of `out_topic` inside a transaction, adds the consumed
offsets to that transaction (send_offsets_to_transaction) and commits. On an
abortable error it aborts and rewinds to the group's committed offsets; on a
fatal one it exits 3 (the test starts a new copier, which fences the old id).
It copies at most <max_rate> records/s (0: unlimited), so that the test's kill
points fall while it is working.

stdout (line-buffered, read by the test):
    READY                 after init_transactions
    COMMITTED <n>         after each commit; n = sum of the committed input offsets
                          (as far as this copier knows)
    DONE <n>              every input partition's committed offset reached its end
stderr: progress and errors (DOZE_COPIER_DEBUG=1 adds librdkafka eos/cgrp debug).
"""

import faulthandler
import os
import random
import signal
import sys
import time

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)

BATCH_MAX = 40
STEP_TIMEOUT_S = 30


def log(*a):
    print(time.strftime("%H:%M:%S"), f"[copier {os.getpid()}]", *a, file=sys.stderr, flush=True)


def out(line):
    print(line, flush=True)


def retry(what, fn, attempts=40):
    """Retry a transactional call on retriable errors; raise anything else."""
    for i in range(attempts):
        try:
            return fn()
        except KafkaException as e:
            err = e.args[0]
            if err.retriable() and not err.fatal() and not err.txn_requires_abort():
                log(f"{what}: retriable {err}, attempt {i + 1}")
                time.sleep(0.2)
                continue
            raise
    raise RuntimeError(f"{what}: still retriable after {attempts} attempts")


def main():
    # The test sends SIGUSR1 before giving up on a stuck copier: where is it?
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    bootstrap, in_topic, out_topic, group_id, txn_id, seed, max_rate = sys.argv[1:8]
    max_rate = float(max_rate)
    rng = random.Random(int(seed))
    debug = {"debug": "eos,cgrp,protocol,broker"} if os.environ.get("DOZE_COPIER_DEBUG") else {}
    common = {"bootstrap.servers": bootstrap, "broker.address.family": "v4",
              "reconnect.backoff.max.ms": 500, "socket.timeout.ms": 10000,
              # librdkafka 2.16's default "rebootstrap" decommissions the broker
              # handle when the only broker goes down; a TxnOffsetCommit issued
              # after that (send_offsets_to_transaction) is never sent and the
              # call hangs past its own timeout, on a broker that is back up
              # (client-side: the old handle logs "Handle is terminating" forever).
              "metadata.recovery.strategy": "none"}
    producer = Producer({**common, **debug,
                         "transactional.id": txn_id,
                         "transaction.timeout.ms": 10000,
                         "message.timeout.ms": 10000,
                         "linger.ms": 2})
    consumer = Consumer({**common, **debug,
                         "group.id": group_id,
                         "isolation.level": "read_committed",
                         "enable.auto.commit": False,
                         "enable.auto.offset.store": False,
                         "auto.offset.reset": "earliest",
                         "session.timeout.ms": 3000,
                         "heartbeat.interval.ms": 300,
                         "max.poll.interval.ms": 60000})

    # Fences any earlier copier with this id and aborts what it left open,
    # before the group's committed offsets are read (by subscribing).
    retry("init_transactions", lambda: producer.init_transactions(STEP_TIMEOUT_S))
    out("READY")
    md = consumer.list_topics(in_topic, timeout=STEP_TIMEOUT_S)
    parts = sorted(md.topics[in_topic].partitions)
    ends = {}
    for p in parts:
        lo, hi = consumer.get_watermark_offsets(TopicPartition(in_topic, p), timeout=STEP_TIMEOUT_S,
                                                cached=False)
        ends[p] = hi
    log(f"input end offsets {ends}")
    # Progress report: the group's committed offset of every input partition as
    # far as this copier knows (positions are invalid for a partition it has
    # not consumed from since its last (re)assignment).
    last_committed = {}
    consumer.subscribe([in_topic])

    def committed_offsets():
        tps = consumer.committed([TopicPartition(in_topic, p) for p in parts], timeout=STEP_TIMEOUT_S)
        return {tp.partition: max(tp.offset, 0) for tp in tps}

    last_committed.update(retry("committed", committed_offsets))

    def rewind():
        """After an abort: go back to the group's committed offsets."""
        committed = retry("committed", committed_offsets)
        for tp in consumer.assignment():
            off = committed.get(tp.partition, 0)
            try:
                consumer.seek(TopicPartition(tp.topic, tp.partition, off if off > 0 else OFFSET_BEGINNING))
            except KafkaException as e:
                # Not fetching yet: the assignment starts from the committed offset anyway.
                log(f"seek {tp.partition} -> {off}: {e}")
        last_committed.update(committed)
        log(f"rewound to {committed}")

    def check_done():
        committed = retry("committed", committed_offsets)
        total = sum(committed.values())
        if all(committed[p] >= ends[p] for p in parts):
            out(f"DONE {total}")
            return True
        return False

    idle_since = time.monotonic()
    started, copied = None, 0   # pacing starts with the first batch, not at start-up
    while True:
        if max_rate > 0 and started is not None:
            ahead_s = copied / max_rate - (time.monotonic() - started)
            if ahead_s > 0:
                time.sleep(ahead_s)
        msgs = consumer.consume(num_messages=rng.randint(1, BATCH_MAX), timeout=0.5)
        good = []
        for m in msgs:
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    log(f"consumer error: {m.error()}")
                continue
            good.append(m)
        if not good:
            if time.monotonic() - idle_since > 1.0:
                if check_done():
                    break
                idle_since = time.monotonic()
            continue
        idle_since = time.monotonic()
        if started is None:
            started = time.monotonic()

        producer.begin_transaction()
        try:
            for m in good:
                while True:
                    try:
                        producer.produce(out_topic, key=m.key(), value=m.value(), partition=m.partition())
                        break
                    except BufferError:
                        producer.poll(0.05)
            positions = consumer.position(consumer.assignment())
            retry("send_offsets_to_transaction", lambda: producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), STEP_TIMEOUT_S))
            retry("commit_transaction", lambda: producer.commit_transaction(STEP_TIMEOUT_S))
        except KafkaException as e:
            err = e.args[0]
            if err.fatal():
                log(f"FATAL {err}")
                sys.exit(3)
            if err.txn_requires_abort():
                log(f"abortable {err}: aborting and rewinding")
                retry("abort_transaction", lambda: producer.abort_transaction(STEP_TIMEOUT_S))
                rewind()
                continue
            log(f"unexpected {err}")
            sys.exit(4)
        copied += len(good)
        last_committed.update({tp.partition: tp.offset for tp in positions if tp.offset >= 0})
        total = sum(last_committed.values())
        out(f"COMMITTED {total}")
        if total >= sum(ends.values()) and check_done():
            break

    consumer.close()
    producer.flush(5)


if __name__ == "__main__":
    main()
