"""The confluent-kafka workers, run as processes of their own (`bench.py _produce` / `_txn` / `_fill` / `_latency`)."""

import argparse
import json
import math
import os
import random
import threading
import time

from .common import MiB


# --- workers (run as separate processes) ---------------------------------------------

def worker_produce(a):
    """Produces to its own partitions as fast as librdkafka takes records from
    `start_at` until `start_at + warmup + seconds`; counts the records
    acknowledged inside [start_at + warmup, start_at + warmup + seconds]."""
    from confluent_kafka import KafkaError, Producer
    p = Producer({
        "bootstrap.servers": a.bootstrap,
        "acks": "all",
        "enable.idempotence": False,
        "linger.ms": a.linger_ms,
        "batch.size": a.batch_bytes,
        "batch.num.messages": 1_000_000,
        "message.max.bytes": 8 * MiB,
        "compression.type": "none",
        "queue.buffering.max.kbytes": a.queue_kib,
        "queue.buffering.max.messages": 2_000_000,
    })
    p.list_topics(a.topic, timeout=30)
    value = os.urandom(a.record_bytes)
    parts = [int(x) for x in a.partitions.split(",")]
    win0 = a.start_at + a.warmup
    win1 = win0 + a.seconds
    state = {"in_window": 0, "acked": 0, "errors": [], "purged": 0}

    def dr(err, _msg):
        if err is not None:
            if err.code() == KafkaError._PURGE_QUEUE:
                state["purged"] += 1
            elif len(state["errors"]) < 5:
                state["errors"].append(str(err))
            return
        state["acked"] += 1
        if win0 <= time.time() <= win1:
            state["in_window"] += 1

    while time.time() < a.start_at:
        time.sleep(0.001)
    i = 0
    while time.time() < win1:
        for _ in range(1000):
            try:
                p.produce(a.topic, value=value, partition=parts[i % len(parts)], on_delivery=dr)
                i += 1
            except BufferError:
                p.poll(0.005)
                break
        p.poll(0)
    # What is still queued (up to queue_kib) could only be acknowledged after
    # the window: dropped unsent instead of drained, which took tens of seconds.
    p.purge(in_queue=True, in_flight=False, blocking=False)
    left = p.flush(60)
    print(json.dumps({"in_window": state["in_window"], "acked": state["acked"], "produced": i,
                      "purged": state["purged"], "undelivered": left, "errors": state["errors"]}))


def worker_fill(a):
    """Produces `count` records, round robin over its partitions, as fast as
    librdkafka takes them, from `start_at` for at most `seconds`; reports the
    records acknowledged and when the last acknowledgement came. With `keys`,
    each record has a key drawn at random from `keys` distinct ones (a
    compacted topic's overwrites); without, no key."""
    from confluent_kafka import Producer
    p = Producer({
        "bootstrap.servers": a.bootstrap,
        "acks": "all",
        "enable.idempotence": False,
        "linger.ms": a.linger_ms,
        "batch.size": a.batch_bytes,
        "batch.num.messages": 1_000_000,
        "message.max.bytes": 8 * MiB,
        "compression.type": "none",
        "queue.buffering.max.kbytes": a.queue_kib,
        "queue.buffering.max.messages": 2_000_000,
    })
    p.list_topics(a.topic, timeout=30)
    value = os.urandom(a.record_bytes)
    parts = [int(x) for x in a.partitions.split(",")]
    keys = [b"key-%09d" % k for k in range(a.keys)]
    pick = random.Random(a.first).randrange
    state = {"acked": 0, "errors": []}

    def dr(err, _msg):
        if err is not None:
            if len(state["errors"]) < 5:
                state["errors"].append(str(err))
            return
        state["acked"] += 1

    while time.time() < a.start_at:
        time.sleep(0.001)
    deadline = a.start_at + a.seconds
    i = 0
    while i < a.count and time.time() < deadline:
        for _ in range(min(1000, a.count - i)):
            try:
                key = keys[pick(len(keys))] if keys else None
                p.produce(a.topic, value=value, key=key, partition=parts[i % len(parts)],
                          on_delivery=dr)
                i += 1
            except BufferError:
                p.poll(0.005)
                break
        p.poll(0)
    left = p.flush(max(1.0, deadline - time.time()))
    print(json.dumps({"acked": state["acked"], "produced": i, "undelivered": left,
                      "errors": state["errors"], "end": time.time()}))


def worker_txn(a):
    """`threads` transactional producers (one librdkafka instance each), each
    repeating begin / produce `records` / flush / commit until the window ends.
    Reports commits inside the window and per-commit latencies (the
    commit_transaction() call, i.e. EndTxn, after flush() has made the
    records durable)."""
    from confluent_kafka import Producer
    win0 = a.start_at + a.warmup
    win1 = win0 + a.seconds
    value = os.urandom(a.record_bytes)
    parts = [int(x) for x in a.partitions.split(",")]
    results = []
    lock = threading.Lock()

    def one(k):
        p = Producer({
            "bootstrap.servers": a.bootstrap,
            "transactional.id": f"{a.id_prefix}-{k}",
            "acks": "all",
            "linger.ms": 0,
            "batch.size": MiB,
            "compression.type": "none",
            "transaction.timeout.ms": 60000,
        })
        p.init_transactions(60)
        part = parts[k % len(parts)]
        commits = aborts = 0
        in_window = 0
        commit_lat, flush_lat, cycle_lat = [], [], []
        n = 0
        while time.time() < a.start_at:
            time.sleep(0.001)
        while time.time() < win1:
            t0 = time.time()
            p.begin_transaction()
            for _ in range(a.records):
                p.produce(a.topic, value=value, partition=part)
            p.flush(60)
            t1 = time.time()
            n += 1
            abort = a.abort_every > 0 and n % a.abort_every == 0
            if abort:
                p.abort_transaction(60)
                aborts += 1
            else:
                p.commit_transaction(60)
                commits += 1
            t2 = time.time()
            if win0 <= t2 <= win1 and not abort:
                in_window += 1
                commit_lat.append(t2 - t1)
                flush_lat.append(t1 - t0)
                cycle_lat.append(t2 - t0)
            if a.max_txns and n >= a.max_txns:
                break
        with lock:
            results.append({"commits": commits, "aborts": aborts, "in_window": in_window,
                            "commit_lat": commit_lat, "flush_lat": flush_lat, "cycle_lat": cycle_lat})

    threads = [threading.Thread(target=one, args=(k,)) for k in range(a.first, a.first + a.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    merged = {"commits": 0, "aborts": 0, "in_window": 0, "commit_lat": [], "flush_lat": [],
              "cycle_lat": [], "producers": len(results)}
    for r in results:
        for key in ("commits", "aborts", "in_window"):
            merged[key] += r[key]
        for key in ("commit_lat", "flush_lat", "cycle_lat"):
            merged[key] += r[key]
    print(json.dumps(merged))


# Latency histograms: buckets 2^(1/64) wide (~1.1 %), keyed by
# round(64 * log2(microseconds)).
LAT_BUCKETS_PER_DOUBLING = 64


def lat_bucket(seconds):
    return int(round(math.log2(max(seconds, 1e-6) * 1e6) * LAT_BUCKETS_PER_DOUBLING))


def hist_pct(hist, p):
    """The p-th percentile (nearest rank) of a {bucket: count} histogram, in seconds."""
    total = sum(hist.values())
    if not total:
        return float("nan")
    rank = max(1, math.ceil(p / 100 * total))
    seen = 0
    for k in sorted(hist):
        seen += hist[k]
        if seen >= rank:
            return 2 ** (k / LAT_BUCKETS_PER_DOUBLING) / 1e6
    return float("nan")


# The latency workload's sampling: one record in this many is measured
# (prime, so that the round robin over a worker's partitions samples each).
LATENCY_SAMPLE_EVERY = 7


def worker_latency(a):
    """Produces `rate` records/s, paced every millisecond, round robin over its
    partitions, from `start_at` to the end of the window. For every record
    produced inside [start_at + warmup, start_at + warmup + seconds] its
    latency from produce() to the acknowledgement, as librdkafka measured it
    (Message.latency(), not delayed by this loop's polling), goes into a
    histogram of ~1 % wide buckets. Only every LATENCY_SAMPLE_EVERY-th
    record carries a delivery callback (and is counted as that many): a
    Python callback per record made the four client processes use 1.3 of
    the two cores at 150,000 records/s, so they fell behind the rate and
    measured their own queue (seconds) rather than the broker."""
    from confluent_kafka import Producer
    stats = []
    p = Producer({
        "bootstrap.servers": a.bootstrap,
        "acks": "all",
        "enable.idempotence": False,
        "linger.ms": a.linger_ms,
        "batch.size": a.batch_bytes,
        "batch.num.messages": 1_000_000,
        "message.max.bytes": 8 * MiB,
        "compression.type": "none",
        "queue.buffering.max.kbytes": a.queue_kib,
        "queue.buffering.max.messages": 2_000_000,
        **({"statistics.interval.ms": 1000, "stats_cb": lambda j: stats.append(j)} if a.stats else {}),
    })
    p.list_topics(a.topic, timeout=30)
    value = os.urandom(a.record_bytes)
    parts = [int(x) for x in a.partitions.split(",")]
    win0 = a.start_at + a.warmup
    win1 = win0 + a.seconds
    hist = {}
    late = []
    state = {"acked": 0, "in_window": 0, "errors": []}

    def dr(err, msg):
        if err is not None:
            if len(state["errors"]) < 5:
                state["errors"].append(str(err))
            return
        state["acked"] += LATENCY_SAMPLE_EVERY
        if win0 <= msg.timestamp()[1] / 1000 <= win1:
            lat = msg.latency()
            if lat is not None:
                k = lat_bucket(lat)
                hist[k] = hist.get(k, 0) + 1
                state["in_window"] += LATENCY_SAMPLE_EVERY

    while time.time() < a.start_at:
        time.sleep(0.001)
    t0 = time.time()
    sent = 0
    while True:
        now = time.time()
        if now >= win1:
            break
        due = int((now - t0) * a.rate) - sent
        if a.stats and win0 <= now and due > 0:
            late.append(now - (t0 + (sent + 1) / a.rate))
        for _ in range(max(0, min(due, 1000))):
            try:
                if sent % LATENCY_SAMPLE_EVERY == 0:
                    p.produce(a.topic, value=value, partition=parts[sent % len(parts)],
                              on_delivery=dr)
                else:
                    p.produce(a.topic, value=value, partition=parts[sent % len(parts)])
                sent += 1
            except BufferError:
                p.poll(0.001)
                break
        p.poll(0.0005 if due <= 0 else 0)
    left = p.flush(60)
    out = {"hist": hist, "in_window": state["in_window"], "acked": state["acked"],
           "produced": sent, "wanted": a.rate * (win1 - t0), "undelivered": left,
           "errors": state["errors"]}
    if a.stats:
        late.sort()
        out["late_p99_ms"] = round(late[int(len(late) * 0.99)] * 1e3, 1) if late else 0
        out["late_max_ms"] = round(late[-1] * 1e3, 1) if late else 0
        # librdkafka's 1 s windows inside the measured window (`latency_split`);
        # its statistics in microseconds, here in ms.
        picked = []
        for j in stats:
            d = json.loads(j)
            if not (win0 + 1 <= d["time"] <= win1 + 0.5):
                continue
            for bs in d["brokers"].values():
                if bs.get("nodeid", -1) < 0:
                    continue
                picked.append({k: {q: round(bs[k][q] / 1e3, 1) for q in ("p50", "p99", "max")}
                               for k in ("int_latency", "outbuf_latency", "rtt")})
        out["stats"] = picked
    print(json.dumps(out))


def worker_args(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", required=True, help="comma-separated partition numbers")
    ap.add_argument("--start-at", type=float, required=True, help="wall-clock start (time.time())")
    ap.add_argument("--warmup", type=float, default=0)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--batch-bytes", type=int, default=MiB)
    ap.add_argument("--queue-kib", type=int, default=256 * 1024)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--id-prefix", default="bench-txn")
    ap.add_argument("--records", type=int, default=10)
    ap.add_argument("--abort-every", type=int, default=0)
    ap.add_argument("--max-txns", type=int, default=0)
    ap.add_argument("--count", type=int, default=0, help="_fill: records to produce")
    ap.add_argument("--keys", type=int, default=0,
                    help="_fill: keys drawn at random from this many (0: no keys)")
    ap.add_argument("--rate", type=float, default=0, help="_latency: records per second")
    ap.add_argument("--stats", action="store_true",
                    help="_latency: librdkafka's statistics and the pacer's lateness in the result")
    return ap.parse_args(argv)


