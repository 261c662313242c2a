"""One confluent-kafka group member, run as a subprocess by test_groups.py.

    python group_worker.py BOOTSTRAP TOPIC GROUP NAME EVENTS_PATH STOP_PATH [PER_MSG_SLEEP_S]

subscribe()s TOPIC in GROUP with enable.auto.commit=false and, for every batch
returned by consume(), "processes" each record (logs it, sleeps a little) and
then commits the batch synchronously (the next offset per partition). Every
event is one JSON line in EVENTS_PATH, flushed at once so that a SIGKILL loses
at most the line being written:

    {"ev": "start"}
    {"ev": "assign", "parts": [..]}          on_assign (eager: the full assignment)
    {"ev": "revoke", "parts": [..]}          on_revoke
    {"ev": "msg", "p": P, "o": OFFSET}       a record processed (before its commit)
    {"ev": "commit", "offsets": {P: NEXT}}  a synchronous commit that succeeded
    {"ev": "commit_error", "error": ".."}   a synchronous commit that failed
    {"ev": "error", "error": ".."}          a consumer error
    {"ev": "closed"}

Every line also has "t" (time.time()). The worker stops when STOP_PATH exists
(close(): LeaveGroup) or after a hard limit of MAX_RUNTIME_S.
"""

import json
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

MAX_RUNTIME_S = 150


def main():
    bootstrap, topic, group, name, events_path, stop_path = sys.argv[1:7]
    per_msg_sleep_s = float(sys.argv[7]) if len(sys.argv) > 7 else 0.01
    debug = os.environ.get("GROUP_WORKER_DEBUG")
    out = open(events_path, "a", buffering=1)

    def log(ev, **kw):
        kw["ev"] = ev
        kw["t"] = time.time()
        out.write(json.dumps(kw) + "\n")
        out.flush()

    conf = {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "group.id": group,
        "client.id": name,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "max.poll.interval.ms": 60000,
        "isolation.level": "read_uncommitted",
        "socket.timeout.ms": 10000,
        "reconnect.backoff.max.ms": 1000,
        # Small fetches so a worker does not sit on thousands of prefetched
        # records it will never process.
        "max.partition.fetch.bytes": 1024,
    }
    if debug:
        conf["debug"] = debug

    def on_assign(c, parts):
        log("assign", parts=sorted(tp.partition for tp in parts))

    def on_revoke(c, parts):
        log("revoke", parts=sorted(tp.partition for tp in parts))

    c = Consumer(conf)
    log("start")
    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    deadline = time.monotonic() + MAX_RUNTIME_S
    try:
        while not os.path.exists(stop_path) and time.monotonic() < deadline:
            msgs = c.consume(num_messages=10, timeout=0.2)
            nxt = {}
            for m in msgs:
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        log("error", error=str(m.error()))
                    continue
                log("msg", p=m.partition(), o=m.offset())
                time.sleep(per_msg_sleep_s)
                nxt[m.partition()] = m.offset() + 1
            if nxt:
                try:
                    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in nxt.items()],
                             asynchronous=False)
                    log("commit", offsets={str(p): o for p, o in nxt.items()})
                except KafkaException as e:
                    log("commit_error", error=str(e), offsets={str(p): o for p, o in nxt.items()})
    finally:
        c.close()
        log("closed")


if __name__ == "__main__":
    main()
