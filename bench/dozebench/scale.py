"""9. scale: start-up time and memory with many partitions (issue 40 item 4).

For each count in `--scale-partitions` (default 10, 100, 1,000, 10,000), on a
fresh data dir: one topic of that many partitions, one 100 B record in each
(acks=all), the broker's RSS; SIGTERM and start again (a clean start), timed
until it answers a Metadata request; one more record in each partition (so
every log holds bytes above its recovery point), kill -9 and start again,
timed the same way; RSS once it answers. The ready line is printed as well:
doze prints it when recovery starts, not when it serves (requests that come
meanwhile wait), so the Metadata answer is the figure the targets judge.
Memory per partition is the RSS above the smallest count's, divided by the
partitions added. `--scale-peers doze,kafka-default` runs Apache Kafka 4.3.1
the same way (kafka-ref.sh; its start waits for its own ready check).
Targets (issue 40): 10,000 partitions start <= 1 s after a clean stop and
<= 2 s after kill -9; memory per partition at or below Kafka's."""

import asyncio
import os
import shutil
import signal
import socket
import struct
import time

from .common import pct, say, section
from .plots import write_scale_results
from .broker import BrokerProc, create_topic, proc_status_mib
from .peers import KafkaPeer, PeerUnavailable
from . import scale_items, wire
from .scale_items import SCALE_PROBES

CLEAN_START_TARGET_S = 1.0
KILL_START_TARGET_S = 2.0
TOPIC = "bench-scale"


def metadata_answered_s(bootstrap, t0, timeout_s):
    """Seconds from `t0` until the broker answers Metadata v1 for no topic
    (an empty array: the smallest answer), asking again every 5 ms while the
    port refuses; None at `timeout_s`. A broker that parks requests until it
    serves answers once it serves."""
    host, port = bootstrap.rsplit(":", 1)
    client = b"scale"
    # api key 3 (Metadata), version 1, correlation id 1, client id, topics [].
    body = struct.pack(">hhih", 3, 1, 1, len(client)) + client + struct.pack(">i", 0)
    frame = struct.pack(">i", len(body)) + body
    deadline = t0 + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, int(port)), timeout=max(0.1, deadline - time.monotonic())) as s:
                s.sendall(frame)
                head = b""
                while len(head) < 8:
                    chunk = s.recv(8 - len(head))
                    if not chunk:
                        raise ConnectionError("closed")
                    head += chunk
                if struct.unpack(">i", head[4:8])[0] == 1:
                    return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.005)
    return None


def produce_one_each(bootstrap, partitions, timeout_s):
    """One 100 B record to every partition, acks=all; the count acknowledged.

    librdkafka sends one Produce request per partition, and by default up to
    1,000,000 in flight on one connection: doze closes a connection with more
    than limits::CONN_REQUESTS_IN_FLIGHT_MAX (1,024) in flight, so 10,000
    partitions got 1 record acknowledged in 6 minutes. 512 stays below it."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                  "max.in.flight.requests.per.connection": 512,
                  # 3: not librdkafka's warning per partition while Kafka
                  # elects 10,000 leaders ("new leader-1 not found in cache").
                  "log_level": 3, "queue.buffering.max.messages": max(100_000, partitions * 2)})
    acked = [0]

    def done(err, _msg):
        if err is None:
            acked[0] += 1
    value = b"x" * 100
    for i in range(partitions):
        p.produce(TOPIC, value, partition=i, on_delivery=done)
        p.poll(0)
    p.flush(timeout_s)
    return acked[0]


def status_mib(pid):
    """VmRSS and VmHWM of `pid` in MiB (empty when it is gone)."""
    return proc_status_mib(pid, ("VmRSS", "VmHWM"))


class Doze:
    """doze on `data`, started and stopped as the section needs."""

    def __init__(self, args, data):
        self.args, self.data, self.b = args, data, None

    def start(self):
        t0 = time.monotonic()
        self.b = BrokerProc(self.args.binary, self.data, self.args.set,
                            ready_timeout_s=self.args.scale_start_timeout_s)
        answered = metadata_answered_s(self.b.bootstrap, t0, self.args.scale_start_timeout_s)
        return self.b.ready_s, answered

    bootstrap = property(lambda self: self.b.bootstrap)
    pid = property(lambda self: self.b.proc.pid)

    def stop(self):
        return self.b.stop() if self.b else None

    def kill(self):
        self.b.proc.kill()
        self.b.proc.wait(30)


class Kafka:
    """Apache Kafka 4.3.1 (kafka-ref.sh) under `work`; a restart reuses its dir."""

    def __init__(self, args, work, name):
        self.args, self.work, self.name, self.k = args, work, name, None

    def start(self):
        t0 = time.monotonic()
        props = ["log.flush.interval.messages=1"] if self.name == "kafka-flush1" else []
        # A restart is on the port its dir was formatted with.
        self.k = KafkaPeer(self.name, self.work, props, self.args.kafka_heap,
                           self.args.scale_start_timeout_s, self.k.port if self.k else None)
        answered = metadata_answered_s(self.k.bootstrap, t0, self.args.scale_start_timeout_s)
        return self.k.ready_s, answered

    bootstrap = property(lambda self: self.k.bootstrap)
    pid = property(lambda self: self.k.pid)

    def stop(self):
        return self.k.stop() if self.k else None

    def kill(self):
        os.kill(self.k.pid, signal.SIGKILL)
        for _ in range(300):
            if not os.path.exists(f"/proc/{self.k.pid}"):
                break
            time.sleep(0.1)
        self.k.stop()  # forgets it (its pid is no longer kafka's)


def fmt_s(v):
    return "n/a" if v is None else f"{v:.3f} s"


def scale_one(args, work, peer, n):
    """One count on one broker: the figures, or None when it could not run."""
    data = os.path.join(work, f"scale-{peer}-{n}")
    broker = Doze(args, data) if peer == "doze" else Kafka(args, os.path.join(work, f"scale-{n}"), peer)
    out = {}
    try:
        broker.start()
        t0 = time.monotonic()
        create_topics_stepwise(broker.bootstrap, n)
        out["create_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        acked = produce_one_each(broker.bootstrap, n, args.scale_max_s)
        out["produce_s"] = time.monotonic() - t0
        time.sleep(1)
        out["rss_fresh"] = status_mib(broker.pid)
        out["metadata_p50_s"] = metadata_p50_s(broker.bootstrap, [TOPIC], args.scale_max_s)
        t0 = time.monotonic()
        broker.stop()
        out["stop_s"] = time.monotonic() - t0
        out["clean_ready_s"], out["clean_s"] = broker.start()
        time.sleep(1)
        out["rss_clean"] = status_mib(broker.pid)
        acked += produce_one_each(broker.bootstrap, n, args.scale_max_s)
        broker.kill()
        out["kill_ready_s"], out["kill_s"] = broker.start()
        time.sleep(1)
        out["rss_kill"] = status_mib(broker.pid)
        out["acked"] = acked
        say(f"{peer:13s} {n:6,d} partitions: create {out['create_s']:.2f} s, produce "
            f"{out['produce_s']:.2f} s ({acked:,} of {2 * n:,} acked), stop {out['stop_s']:.2f} s; "
            f"start after SIGTERM: ready line {fmt_s(out['clean_ready_s'])}, Metadata answered "
            f"{fmt_s(out['clean_s'])}; after kill -9: ready line {fmt_s(out['kill_ready_s'])}, "
            f"Metadata answered {fmt_s(out['kill_s'])}")
        say(f"{'':13s} {'':6s}             VmRSS/VmHWM MiB: "
            + ", ".join(f"{k} {out[k].get('VmRSS', float('nan')):.0f}/{out[k].get('VmHWM', float('nan')):.0f}"
                        for k in ("rss_fresh", "rss_clean", "rss_kill")).replace("rss_", "")
            + f"; Metadata v1 of the topic p50 {out['metadata_p50_s'] * 1e3:.2f} ms (fresh)")
    except (PeerUnavailable, SystemExit, Exception) as e:  # noqa: BLE001 - a count that fails is reported
        say(f"{peer} {n} partitions: FAILED: {str(e)[-600:]}")
        # What was measured before it failed stands (a start that did not
        # answer within --scale-start-timeout-s is n/a): Kafka with 10,000
        # partitions did not start again within 120 s on the loaded 2-core VM.
        out = out if "rss_fresh" in out else None
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(os.path.join(work, f"scale-{n}"), ignore_errors=True)
    return out


# Kafka's controller refuses an operation of more than 10,000 records
# (POLICY_VIOLATION "Unable to perform excessively large batch operation"):
# a topic of 10,000 partitions is 10,001. So larger topics are made in steps.
PARTITIONS_PER_STEP_MAX = 5_000


def create_topics_stepwise(bootstrap, n):
    """The topic of `n` partitions: created with at most PARTITIONS_PER_STEP_MAX,
    then grown by CreatePartitions in steps of that many."""
    from confluent_kafka.admin import AdminClient, NewPartitions
    have = min(n, PARTITIONS_PER_STEP_MAX)
    create_topic(bootstrap, TOPIC, have)
    a = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    while have < n:
        have = min(n, have + PARTITIONS_PER_STEP_MAX)
        a.create_partitions([NewPartitions(TOPIC, have)], request_timeout=60)[TOPIC].result(timeout=60)


def metadata_p50_s(bootstrap, topics, timeout_s):
    """p50 of SCALE_PROBES Metadata v1 requests for `topics`, one after the other."""
    async def probe():
        conn = await wire.Conn.open(bootstrap)
        try:
            return pct([(await conn.timed(wire.metadata_v1(topics)))[1] for _ in range(SCALE_PROBES)], 50)
        finally:
            conn.close()
    return asyncio.run(asyncio.wait_for(probe(), timeout_s))


def bench_scale(args, work):
    """{"partitions": {(peer, count): figures}, "items": {dimension: {peer: [figures per size]}}}"""
    dims = [d for d in args.scale_dims.split(",") if d]
    peers = [p for p in args.scale_peers.split(",") if p]
    section(f"9. scale: memory, start-up and per-request cost by size ({', '.join(dims)}; "
            f"{', '.join(peers)})")
    res = {"partitions": {}, "items": {}}
    if "partitions" in dims:
        say("partitions: one topic, 1-2 records each, a fresh data dir per count")
        counts = [int(c) for c in args.scale_partitions.split(",")]
        for peer in peers:
            for n in counts:
                r = scale_one(args, work, peer, n)
                if r:
                    res["partitions"][(peer, n)] = r

    def broker_for(peer, data):
        return Doze(args, data) if peer == "doze" else Kafka(args, data, peer)
    for dim in dims:
        if dim == "partitions":
            continue
        if dim not in scale_items.DIMS:
            say(f"{dim}: unknown dimension (known: partitions, {', '.join(scale_items.DIMS)})")
            continue
        for peer in peers:
            rows = scale_items.sweep(args, work, peer, dim, scale_items.sizes_of(args, dim), broker_for)
            res["items"].setdefault(dim, {})[peer] = rows
    write_scale_results(args, res)
    return res


def summary_scale(all_res):
    summary_items(all_res["items"])
    res = all_res["partitions"]
    for peer in sorted({p for p, _ in res}):
        counts = sorted(n for p, n in res if p == peer)
        base = counts[0]
        for n in counts:
            r = res[(peer, n)]
            per = ""
            if n > base:
                b = res[(peer, base)]
                per = "; KiB per partition above {:,}: ".format(base) + ", ".join(
                    f"{k[4:]} {(r.get(k, {}).get('VmRSS', float('nan')) - b.get(k, {}).get('VmRSS', float('nan'))) * 1024 / (n - base):.1f}"
                    for k in ("rss_fresh", "rss_clean", "rss_kill"))
            targets = ""
            if n >= 10_000:
                c, k = r.get("clean_s"), r.get("kill_s")
                targets = (f" (targets <= {CLEAN_START_TARGET_S:g} s "
                           f"{'OK' if c is not None and c <= CLEAN_START_TARGET_S else 'MISSED'}, "
                           f"<= {KILL_START_TARGET_S:g} s "
                           f"{'OK' if k is not None and k <= KILL_START_TARGET_S else 'MISSED'})")
            say(f"scale {peer} {n:,} partitions: start to Metadata answered after SIGTERM "
                f"{fmt_s(r.get('clean_s'))}, after kill -9 {fmt_s(r.get('kill_s'))}{targets}; "
                f"VmRSS after the clean start {r.get('rss_clean', {}).get('VmRSS', float('nan')):.0f} MiB{per}")


def summary_items(items):
    for dim, per in items.items():
        for peer, rows in per.items():
            if not rows:
                say(f"scale {peer} {dim}: n/a (see section 9)")
                continue
            top = rows[-1]
            kafka = items[dim].get("kafka-default") or []
            beside = ""
            if peer == "doze" and kafka and kafka[-1]["n"] == top["n"]:
                k = kafka[-1]
                beside = (f" (Kafka {k['kib_per_item']:.2f} KiB, {k['probe_p50_s'] * 1e3:.2f} ms; "
                          f"memory per item doze/Kafka {top['kib_per_item'] / k['kib_per_item']:.3g}"
                          if k["kib_per_item"] > 0 else " (Kafka's RSS did not grow")
                beside += ")"
            starts = (f"; start after SIGTERM {fmt_s(top.get('clean_s'))}, after kill -9 "
                      f"{fmt_s(top.get('kill_s'))}" if "clean_s" in top else "")
            say(f"scale {peer} {dim} {top['n']:,}: {top['kib_per_item']:.2f} KiB per "
                f"{scale_items.ITEM[dim]}, p50 {scale_items.PROBE_WHAT[dim]} "
                f"{top['probe_p50_s'] * 1e3:.2f} ms{beside}{starts}")
