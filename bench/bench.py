#!/usr/bin/env python3
"""doze-kafka benchmark (`make bench`; not part of `make test`).

Everything is measured in one run, on one filesystem (the work dir's):

  1. disk     raw sequential write + fdatasync bandwidth at several chunk
              sizes, and the latency of one small write + fdatasync
  2. produce  acks=all produce throughput of the release broker, 1 KiB
              records, from several confluent-kafka producer processes (so
              the figure is not bound by one Python loop); the broker's own
              debug log gives the bytes one group commit (one sync round)
              actually carries, and the raw reference is re-measured at that
              chunk size right after (issue 2: target >= 0.8 of raw)
  3. txn      committed transactions/s with 1, 8 and 64 concurrent
              transactional producers (10 x 1 KiB records each), EndTxn
              latency p50/p99 beside fdatasync latency, and what each durable
              step costs (broker log: disk sync rounds, meta.db flushes)
              (issue 4: >= 2,000 commits/s at 64; 1 producer's commit <= 2x
              fdatasync)
  4. fetch    a topic filled with committed (and some aborted) transactions,
              read fully with read_committed and with read_uncommitted
              (issue 4: read_committed >= 0.9x read_uncommitted)
  5. retained a fresh broker filled with `--retained-gib` GiB (default 20) of
              1 KiB records in 8 partitions: produce throughput, broker RSS,
              start-up time after SIGTERM and after kill -9, and one consumer
              reading everything from offset 0, cold (page cache dropped) and
              warm, beside a raw sequential read of the same `.log` files
              (targets: RSS <= 300 MiB, clean start <= 0.5 s, start after
              kill -9 <= 2 s). Needs 1.2x that size free (scales down when
              not); `--retained-only` runs just this section. About 5-8 min
              for 20 GiB on the 2-core dev machine.
  6. cleaner  log-cleaner throughput: a compacted topic (1 partition,
              segment.bytes `--cleaner-segment-mib` MiB) filled with
              `--cleaner-mib` MiB (default 256) of 1 KiB records overwriting a
              bounded key set (one key per 8 records, so ~7 in 8 records are
              superseded) by a broker whose cleaner does not look meanwhile;
              then that broker is stopped (SIGTERM) and started again with
              log.cleaner.backoff.ms=500, and the passes it logs (`cleaning` /
              `cleaned` lines) give MB/s of dirty log cleaned (first `cleaning`
              to last `cleaned`), bytes read and written, and broker CPU. Beside
              it, on the same filesystem: a raw sequential read of a file of the
              same size while writing a copy of it (1 MiB chunks, one
              fdatasync at the end), and a raw read twice + write of the kept
              fraction (what a pass reads and writes), and the ratios. Cold
              (page cache dropped) when the bench may drop it, else warm, for
              both. `--cleaner-only` runs just this section. About 10 s at
              256 MiB on the 2-core dev machine.
  7. summary  every figure beside its target

Clients: each figure is taken with confluent-kafka (librdkafka; producers in
processes of their own, `bench.py _produce` / `_txn` / `_fill` workers, so client CPU is
spread) and with doze-bench (net/src/bin/doze-bench.rs, a small Rust load
generator speaking the protocol with pre-encoded batches, so the figure is the
broker's and not the client's on a 2-core machine). CPU seconds of broker and
clients are printed next to each figure. Every phase has a time limit;
`make bench` adds an outer one. `--keep` keeps the broker logs.
"""

import argparse
import datetime
import glob
import json
import math
import os
import pathlib
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
MiB = 1024 * 1024
KiB = 1024
GiB = 1024 * MiB


def section(title):
    print(f"\n== {title} ==", flush=True)


def say(text):
    print(f"  {text}", flush=True)


def pct(values, p):
    """The p-th percentile (nearest rank) of `values`; nan when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


def cpu_seconds_of_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# --- 1. disk -------------------------------------------------------------------

def raw_fsync_bandwidth(directory, chunk_bytes, min_bytes, min_s, max_s):
    """Appends `chunk_bytes` at a time to a new file, fdatasync after each.

    Runs at least `min_s` and at least `min_bytes` (never longer than `max_s`),
    after a short uncounted warm-up. Returns (MB/s, bytes, syncs, seconds,
    per-sync latencies in seconds).
    """
    path = os.path.join(directory, "raw-fsync.bin")
    buf = os.urandom(chunk_bytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    written = 0
    lat = []
    try:
        for _ in range(4):  # warm-up: allocate, settle the journal
            os.write(fd, buf)
            os.fdatasync(fd)
        t0 = time.monotonic()
        while True:
            now = time.monotonic()
            elapsed = now - t0
            if elapsed >= max_s or (written >= min_bytes and elapsed >= min_s):
                break
            n = os.write(fd, buf)
            assert n == len(buf)
            os.fdatasync(fd)
            lat.append(time.monotonic() - now)
            written += n
        elapsed = time.monotonic() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return written / elapsed / 1e6, written, len(lat), elapsed, lat


def print_raw(label, r):
    mbps, written, syncs, el, lat = r
    say(f"{label}: {mbps:8.1f} MB/s  ({written / MiB:.0f} MiB, {syncs} fdatasyncs, "
        f"{syncs / el:.0f}/s, fdatasync p50 {pct(lat, 50) * 1e3:.2f} ms, {el:.1f} s)")


# --- the broker ------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ANSI = re.compile(r"\x1b\[[0-9;]*m")
KV = re.compile(r"(\w+)=(\S+)")


class BrokerProc:
    """The release broker on `data_dir`, logging disk syncs and meta.db flushes
    at debug level so the bench can read what each group commit carried."""

    def __init__(self, binary, data_dir, sets, ready_timeout_s=30):
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.data_dir = data_dir
        os.makedirs(data_dir, exist_ok=True)
        self.log_path = data_dir.rstrip("/") + ".log"
        # No console: the bench may run beside another broker that has port 8092.
        args = [binary, "--listen", self.bootstrap, "--data-dir", data_dir,
                "--set", "doze.console.listen=none"]
        for s in sets:
            args += ["--set", s]
        env = dict(os.environ, NO_COLOR="1",
                   RUST_LOG="info,doze_net::disk=debug,doze_net::metadb=debug")
        self.log = open(self.log_path, "ab")
        # Start-up time: from the spawn to the ready line (read by the pump thread).
        self.ready_s = None
        t0 = time.monotonic()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env)
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                if b"doze-kafka listening on" in line and not ready.is_set():
                    self.ready_s = time.monotonic() - t0
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + ready_timeout_s
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                sys.exit(f"broker did not start (exit {self.proc.returncode}); log tail:\n"
                         f"{self.log_tail()}")

    def log_tail(self):
        self.log.flush()
        return open(self.log_path, "rb").read()[-4000:].decode(errors="replace")

    def log_offset(self):
        self.log.flush()
        return os.path.getsize(self.log_path)

    def io_stats(self, start, end=None):
        """Disk sync rounds and meta.db flushes logged between two offsets."""
        with open(self.log_path, "rb") as f:
            f.seek(start)
            text = f.read(None if end is None else end - start).decode(errors="replace")
        syncs, metas = [], []
        for line in text.splitlines():
            if "synced" in line and "doze_net::disk" in line:
                kv = dict(KV.findall(ANSI.sub("", line)))
                syncs.append((int(kv.get("files", 0)), int(kv.get("elapsed_us", 0))))
            elif "meta.db flushed" in line:
                kv = dict(KV.findall(ANSI.sub("", line)))
                metas.append((int(kv.get("batches", 0)), int(kv.get("elapsed_us", 0))))
        return syncs, metas

    def cpu_seconds(self):
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            return float("nan")

    def status_mib(self):
        """VmRSS, VmHWM (peak RSS), RssAnon and RssFile of the broker in MiB."""
        out = {}
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    key, _, rest = line.partition(":")
                    if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                        out[key] = int(rest.split()[0]) / 1024
        except (OSError, ValueError, IndexError):
            pass
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.flush()
        return self.proc.returncode


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def create_topic(bootstrap, topic, partitions, config=None):
    from confluent_kafka.admin import AdminClient, NewTopic
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(topic, partitions, 1, config=config or {})],
                    request_timeout=30)[topic].result(timeout=30)


def run_workers(cmds, timeout_s):
    """Runs worker processes (this script's `_produce` / `_txn` modes) at once;
    returns their JSON results and the CPU seconds they used."""
    cpu0 = cpu_seconds_of_children()
    procs = [subprocess.Popen([sys.executable, __file__] + c, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for c in cmds]
    results = []
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            say(f"WARNING: a worker timed out; stderr tail: {err[-1000:]}")
            continue
        if p.returncode != 0 or not out.strip():
            say(f"WARNING: a worker exited {p.returncode}; stderr tail: {err[-2000:]}")
            continue
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results, cpu_seconds_of_children() - cpu0


# --- workers (run as separate processes) ---------------------------------------------

def worker_produce(a):
    """Produces to its own partitions as fast as librdkafka takes records from
    `start_at` until `start_at + warmup + seconds`; counts the records
    acknowledged inside [start_at + warmup, start_at + warmup + seconds]."""
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
    win0 = a.start_at + a.warmup
    win1 = win0 + a.seconds
    state = {"in_window": 0, "acked": 0, "errors": []}

    def dr(err, _msg):
        if err is not None:
            if len(state["errors"]) < 5:
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
    left = p.flush(60)
    print(json.dumps({"in_window": state["in_window"], "acked": state["acked"], "produced": i,
                      "undelivered": left, "errors": state["errors"]}))


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
    return ap.parse_args(argv)


# --- 2. produce ------------------------------------------------------------------

def group_commit_report(b, log0, written, work, args):
    """What one sync round carried (bytes logged / rounds), and raw fdatasync
    bandwidth re-measured at that chunk size: the fair reference."""
    syncs, _ = b.io_stats(log0)
    per_sync = written / len(syncs) if syncs else float("nan")
    files = sum(f for f, _ in syncs) / len(syncs) if syncs else float("nan")
    lat = [us / 1e6 for _, us in syncs]
    say(f"group commit: {len(syncs)} sync rounds, {written / MiB:.0f} MiB written to the logs "
        f"=> {per_sync / KiB:.0f} KiB per round, {files:.1f} files per round, "
        f"round fsync time p50 {pct(lat, 50) * 1e3:.1f} ms p99 {pct(lat, 99) * 1e3:.1f} ms")
    chunk = max(4 * KiB, int(per_sync) // (4 * KiB) * (4 * KiB)) if syncs else MiB
    r = raw_fsync_bandwidth(work, chunk, 64 * MiB, args.raw_min_s, 30)
    print_raw(f"raw at that chunk ({chunk // KiB} KiB)", r)
    return chunk // KiB, r[0]


def bench_produce(args, work):
    section("2. acks=all produce, 1 KiB records")
    b = BrokerProc(args.binary, os.path.join(work, "produce"), args.set)
    out = {}
    try:
        logs = os.path.join(b.data_dir, "logs")
        span = args.warmup_s + args.produce_s

        # a. confluent-kafka: one process per producer.
        topic = "bench-produce"
        create_topic(b.bootstrap, topic, args.produce_partitions)
        say(f"a. confluent-kafka: {args.producers} producer processes, {args.produce_partitions} "
            f"partition(s) (producer k writes partition k mod {args.produce_partitions}), "
            f"linger.ms={args.linger_ms} batch.size=1MiB queue 256 MiB, compression none; "
            f"{args.warmup_s:.0f} s warm-up + {args.produce_s:.0f} s measured")
        bytes0 = dir_bytes(logs) if os.path.isdir(logs) else 0
        log0 = b.log_offset()
        start_at = time.time() + 3
        cpu_b0 = b.cpu_seconds()
        cmds = []
        for k in range(args.producers):
            cmds.append(["_produce", "--bootstrap", b.bootstrap, "--topic", topic,
                         "--partitions", str(k % args.produce_partitions),
                         "--start-at", str(start_at), "--warmup", str(args.warmup_s),
                         "--seconds", str(args.produce_s), "--record-bytes", str(args.record_bytes),
                         "--linger-ms", str(args.linger_ms)])
        results, cpu_clients = run_workers(cmds, span + 120)
        cpu_broker = b.cpu_seconds() - cpu_b0
        written = dir_bytes(logs) - bytes0
        in_window = sum(r["in_window"] for r in results)
        acked = sum(r["acked"] for r in results)
        errors = [e for r in results for e in r["errors"]]
        mbps = in_window * args.record_bytes / args.produce_s / 1e6
        say(f"   {mbps:8.1f} MB/s of record values acked ({in_window:,} records in "
            f"{args.produce_s:.0f} s, {in_window / args.produce_s:,.0f}/s; {acked:,} acked in all"
            f"{', errors: ' + str(errors[:3]) if errors else ''})")
        say(f"   CPU: broker {cpu_broker:.1f} s, producer processes {cpu_clients:.1f} s "
            f"(2 cores x {span + 3:.0f} s = {2 * (span + 3):.0f} core-s)")
        chunk, raw = group_commit_report(b, log0, written, work, args)
        out["confluent-kafka"] = {"mbps": mbps, "chunk_kib": chunk, "raw": raw}

        # b. doze-bench: pre-encoded batches, next to no client CPU. The disk's
        # bandwidth swings by 2x within a minute here (a shared virtual disk),
        # so broker and raw are measured in alternation, each pair a ratio.
        topic = "bench-produce-raw"
        create_topic(b.bootstrap, topic, args.produce_partitions)
        say(f"b. doze-bench loadgen: {args.produce_partitions} connections, one partition each, "
            f"{args.loadgen_inflight} Produce requests in flight each, 1000 x {args.record_bytes} B "
            f"per request (one pre-encoded batch); {args.warmup_s:.0f} s warm-up + "
            f"{args.produce_s:.0f} s measured, then raw at the chunk one round carried; "
            f"{args.produce_pairs} times")
        pairs = []
        for i in range(args.produce_pairs):
            bytes0 = dir_bytes(logs)
            log0 = b.log_offset()
            cpu_b0 = b.cpu_seconds()
            cpu0 = cpu_seconds_of_children()
            r = run_loadgen(args, ["produce", "--bootstrap", b.bootstrap, "--topic", topic,
                                   "--partitions", str(args.produce_partitions),
                                   "--producers", str(args.produce_partitions),
                                   "--inflight", str(args.loadgen_inflight),
                                   "--record-bytes", str(args.record_bytes),
                                   "--warmup-s", str(args.warmup_s), "--seconds", str(args.produce_s)],
                            span + 120)
            cpu_broker = b.cpu_seconds() - cpu_b0
            cpu_clients = cpu_seconds_of_children() - cpu0
            written = dir_bytes(logs) - bytes0
            if not r:
                continue
            say(f"   #{i + 1}: {r['mbps']:8.1f} MB/s of record values acked; CPU: broker "
                f"{cpu_broker:.1f} s, loadgen {cpu_clients:.1f} s")
            chunk, raw = group_commit_report(b, log0, written, work, args)
            say(f"   #{i + 1}: ratio {r['mbps'] / raw:.2f}")
            pairs.append({"mbps": r["mbps"], "chunk_kib": chunk, "raw": raw})
        if pairs:
            out["doze-bench"] = {"pairs": pairs,
                                 "mbps": sum(p["mbps"] for p in pairs) / len(pairs),
                                 "raw": sum(p["raw"] for p in pairs) / len(pairs),
                                 "chunk_kib": "/".join(str(p["chunk_kib"]) for p in pairs)}
    finally:
        rc = b.stop()
        if rc != 0:
            say(f"WARNING: broker exited {rc} on SIGTERM (log {b.log_path})")
    return out


def run_loadgen(args, argv, timeout_s):
    """Runs the Rust load generator (net/src/bin/doze-bench.rs); its JSON line."""
    try:
        p = subprocess.run([args.loadgen] + argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        say("WARNING: doze-bench timed out")
        return None
    if p.returncode != 0 or not p.stdout.strip():
        say(f"WARNING: doze-bench exited {p.returncode}: {p.stderr[-1500:]}")
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


# --- 3. transactions ---------------------------------------------------------------

def txn_round(args, b, topic, producers, seconds, prefix):
    """`producers` transactional producers spread over processes of at most
    `args.txn_threads` each; returns the merged worker results."""
    procs = max(1, -(-producers // args.txn_threads))
    start_at = time.time() + 2 + producers * 0.05   # time for init_transactions
    cmds = []
    first = 0
    for i in range(procs):
        n = producers // procs + (1 if i < producers % procs else 0)
        cmds.append(["_txn", "--bootstrap", b.bootstrap, "--topic", topic,
                     "--partitions", ",".join(str(p) for p in range(args.txn_partitions)),
                     "--start-at", str(start_at), "--warmup", str(args.txn_warmup_s),
                     "--seconds", str(seconds), "--record-bytes", str(args.record_bytes),
                     "--threads", str(n), "--first", str(first), "--id-prefix", prefix,
                     "--records", "10"])
        first += n
    log0 = b.log_offset()
    cpu_b0 = b.cpu_seconds()
    results, cpu_clients = run_workers(cmds, start_at - time.time() + args.txn_warmup_s + seconds + 120)
    cpu_broker = b.cpu_seconds() - cpu_b0
    syncs, metas = b.io_stats(log0)
    merged = {"in_window": 0, "commit_lat": [], "flush_lat": [], "cycle_lat": [], "producers": 0}
    for r in results:
        merged["in_window"] += r["in_window"]
        merged["producers"] += r["producers"]
        for key in ("commit_lat", "flush_lat", "cycle_lat"):
            merged[key] += r[key]
    merged.update(syncs=syncs, metas=metas, cpu_broker=cpu_broker, cpu_clients=cpu_clients,
                  processes=procs)
    return merged


def bench_txn(args, work, fsync_small):
    section("3. transactions")
    # fdatasync latency depends on what else the filesystem's journal is doing
    # (other processes' writes): measure it again right next to the txn rounds.
    r = raw_fsync_bandwidth(work, 128, 0, 2, 10)
    say(f"128 B append + fdatasync just before: p50 {pct(r[4], 50) * 1e3:.2f} ms "
        f"p99 {pct(r[4], 99) * 1e3:.2f} ms ({r[2]} syncs)")
    fsync_small[:] = [min(fsync_small[0], pct(r[4], 50)), max(fsync_small[1], pct(r[4], 99))]
    b = BrokerProc(args.binary, os.path.join(work, "txn"), args.set)
    out = {}
    try:
        topic = "bench-txn"
        create_topic(b.bootstrap, topic, args.txn_partitions)
        say(f"confluent-kafka: each transaction: begin, 10 x {args.record_bytes} B to one of "
            f"{args.txn_partitions} partitions, flush (records durable), commit_transaction "
            f"(= EndTxn); {args.txn_warmup_s:.0f} s warm-up + {args.txn_s:.0f} s measured; "
            f"at most {args.txn_threads} producers (threads) per process")
        for n in args.txn_producers:
            r = txn_round(args, b, topic, n, args.txn_s, f"bench-{n}")
            rate = r["in_window"] / args.txn_s
            cl = r["commit_lat"]
            say(f"{n:3d} producers ({r['producers']} up, {r['processes']} processes): "
                f"{rate:8,.0f} commits/s; commit_transaction p50 {pct(cl, 50) * 1e3:6.1f} ms "
                f"p99 {pct(cl, 99) * 1e3:6.1f} ms; produce+flush p50 "
                f"{pct(r['flush_lat'], 50) * 1e3:.1f} ms; whole txn p50 "
                f"{pct(r['cycle_lat'], 50) * 1e3:.1f} ms")
            sl = [us / 1e6 for _, us in r["syncs"]]
            ml = [us / 1e6 for _, us in r["metas"]]
            mb = [n_ for n_, _ in r["metas"]]
            span = args.txn_warmup_s + args.txn_s
            say(f"      broker: {len(sl) / span:,.0f} disk sync rounds/s (p50 "
                f"{pct(sl, 50) * 1e3:.2f} ms p99 {pct(sl, 99) * 1e3:.2f} ms), "
                f"{len(ml) / span:,.0f} meta.db flushes/s (p50 {pct(ml, 50) * 1e3:.2f} ms "
                f"p99 {pct(ml, 99) * 1e3:.2f} ms, {sum(mb) / max(1, len(mb)):.1f} batches each); "
                f"CPU broker {r['cpu_broker']:.1f} s, clients {r['cpu_clients']:.1f} s "
                f"in ~{span + 2:.0f} s")
            out[("confluent-kafka", n)] = {"rate": rate, "p50": pct(cl, 50), "p99": pct(cl, 99),
                                           "sync_p50": pct(sl, 50), "meta_p50": pct(ml, 50)}
        say(f"doze-bench loadgen (one connection per producer: AddPartitionsToTxn, Produce "
            f"10 x {args.record_bytes} B acks=all, EndTxn; EndTxn latency = request to response)")
        for n in args.txn_producers:
            log0 = b.log_offset()
            cpu_b0 = b.cpu_seconds()
            cpu0 = cpu_seconds_of_children()
            r = run_loadgen(args, ["txn", "--bootstrap", b.bootstrap, "--topic", topic,
                                   "--partitions", str(args.txn_partitions), "--producers", str(n),
                                   "--records", "10", "--record-bytes", str(args.record_bytes),
                                   "--warmup-s", str(args.txn_warmup_s), "--seconds", str(args.txn_s),
                                   "--id-prefix", f"loadgen-{n}"],
                            args.txn_warmup_s + args.txn_s + 120)
            if not r:
                continue
            cpu_broker = b.cpu_seconds() - cpu_b0
            cpu_clients = cpu_seconds_of_children() - cpu0
            syncs, metas = b.io_stats(log0)
            sl = [us / 1e6 for _, us in syncs]
            ml = [us / 1e6 for _, us in metas]
            mb = [n_ for n_, _ in metas]
            span = args.txn_warmup_s + args.txn_s
            say(f"{n:3d} producers: {r['rate']:8,.0f} commits/s; EndTxn p50 "
                f"{r['endtxn_p50_us'] / 1e3:6.2f} ms p99 {r['endtxn_p99_us'] / 1e3:6.2f} ms; "
                f"AddPartitions+Produce p50 {r['add_produce_p50_us'] / 1e3:.2f} ms; whole txn p50 "
                f"{r['cycle_p50_us'] / 1e3:.2f} ms; retries {r['retries']}")
            say(f"      broker: {len(sl) / span:,.0f} disk sync rounds/s (p50 "
                f"{pct(sl, 50) * 1e3:.2f} ms p99 {pct(sl, 99) * 1e3:.2f} ms), "
                f"{len(ml) / span:,.0f} meta.db flushes/s (p50 {pct(ml, 50) * 1e3:.2f} ms "
                f"p99 {pct(ml, 99) * 1e3:.2f} ms, {sum(mb) / max(1, len(mb)):.1f} batches each); "
                f"CPU broker {cpu_broker:.1f} s, loadgen {cpu_clients:.1f} s in ~{span:.0f} s")
            out[("doze-bench", n)] = {"rate": r["rate"], "p50": r["endtxn_p50_us"] / 1e6,
                                      "p99": r["endtxn_p99_us"] / 1e6,
                                      "sync_p50": pct(sl, 50), "meta_p50": pct(ml, 50)}
    finally:
        rc = b.stop()
        if rc != 0:
            say(f"WARNING: broker exited {rc} on SIGTERM (log {b.log_path})")
    return out


# --- 4. fetch ------------------------------------------------------------------

def consume_all(bootstrap, topic, partitions, isolation, max_s):
    """Reads every partition from the start to its end; (values bytes, records, s)."""
    from confluent_kafka import Consumer, TopicPartition, KafkaError
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{isolation}-{os.getpid()}-{time.time()}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation,
        "fetch.max.bytes": 64 * MiB,
        "max.partition.fetch.bytes": 16 * MiB,
        "fetch.wait.max.ms": 10,
        "queued.max.messages.kbytes": 256 * 1024,
        "queued.min.messages": 1_000_000,
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    eof = set()
    values = records = 0
    t0 = time.monotonic()
    while len(eof) < partitions and time.monotonic() - t0 < max_s:
        for m in c.consume(num_messages=10000, timeout=1):
            err = m.error()
            if err is None:
                records += 1
                values += len(m.value())
            elif err.code() == KafkaError._PARTITION_EOF:
                eof.add(m.partition())
    el = time.monotonic() - t0
    c.close()
    return values, records, el


def bench_fetch(args, work):
    section("4. fetch: read_committed vs read_uncommitted (confluent-kafka consumer)")
    b = BrokerProc(args.binary, os.path.join(work, "fetch"), args.set)
    out = {}
    try:
        topic = "bench-fetch"
        create_topic(b.bootstrap, topic, args.fetch_partitions)
        per_txn = 100
        txns = max(1, args.fetch_mib * MiB // (per_txn * args.record_bytes * args.fetch_partitions))
        cmds = [["_txn", "--bootstrap", b.bootstrap, "--topic", topic, "--partitions", str(p),
                 "--start-at", str(time.time() + 1), "--seconds", "600",
                 "--record-bytes", str(args.record_bytes), "--threads", "1", "--first", str(p),
                 "--id-prefix", "bench-fill", "--records", str(per_txn),
                 "--abort-every", "10", "--max-txns", str(txns)]
                for p in range(args.fetch_partitions)]
        t0 = time.monotonic()
        results, _ = run_workers(cmds, args.max_s)
        commits = sum(r["commits"] for r in results)
        aborts = sum(r["aborts"] for r in results)
        size = dir_bytes(os.path.join(b.data_dir, "logs"))
        say(f"filled {args.fetch_partitions} partitions with {commits} committed + {aborts} "
            f"aborted transactions of {per_txn} x {args.record_bytes} B: "
            f"{size / MiB:.0f} MiB of log in {time.monotonic() - t0:.1f} s")
        say("confluent-kafka consumer (assign, from offset 0 to partition EOF; includes the "
            "client's record parsing and aborted-transaction filtering):")
        for rep in range(args.fetch_reps):
            for iso in ("read_uncommitted", "read_committed"):
                values, records, el = consume_all(b.bootstrap, topic, args.fetch_partitions,
                                                  iso, args.max_s)
                say(f"  {iso:16s} #{rep + 1}: log {size / el / 1e6:7.1f} MB/s "
                    f"(whole log read in {el:.2f} s), delivered {values / el / 1e6:7.1f} MB/s "
                    f"of values, {records:,} records")
                out.setdefault(("confluent-kafka", iso), []).append(size / el / 1e6)
        say("doze-bench loadgen (Fetch v12, one connection, records not decoded: the broker's side):")
        for rep in range(args.fetch_reps):
            for iso, level in (("read_uncommitted", "0"), ("read_committed", "1")):
                r = run_loadgen(args, ["fetch", "--bootstrap", b.bootstrap, "--topic", topic,
                                       "--partitions", str(args.fetch_partitions),
                                       "--isolation", level, "--seconds", "60",
                                       "--repeat", str(args.fetch_repeat)], 90)
                if r:
                    say(f"  {iso:16s} #{rep + 1}: {r['mbps']:7.1f} MB/s ({r['bytes'] / MiB:.0f} MiB "
                        f"= the log {args.fetch_repeat} times "
                        f"in {r['seconds']:.2f} s, {r['fetches']} fetches)")
                    out.setdefault(("doze-bench", iso), []).append(r["mbps"])
    finally:
        rc = b.stop()
        if rc != 0:
            say(f"WARNING: broker exited {rc} on SIGTERM (log {b.log_path})")
    return {key: max(v) for key, v in out.items()}


# --- 5. retained data ------------------------------------------------------------

RSS_TARGET_MIB = 300
CLEAN_START_TARGET_S = 0.5
KILL_START_TARGET_S = 2.0


def mem_available_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * KiB
    except (OSError, ValueError, IndexError):
        pass
    return float("nan")


def drop_page_cache():
    """sync, then drop the page cache (needs root and a writable /proc/sys).
    Returns (done, why not)."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True, ""
    except OSError as e:
        return False, str(e)


def rss_text(st):
    nan = float("nan")
    return (f"VmRSS {st.get('VmRSS', nan):.0f} MiB (anon {st.get('RssAnon', nan):.0f}, file "
            f"{st.get('RssFile', nan):.0f}), peak VmHWM {st.get('VmHWM', nan):.0f} MiB")


def segment_paths(data_dir, topic):
    """{extension: [paths]} of the topic's segment files."""
    out = {}
    for path in glob.glob(os.path.join(data_dir, "logs", f"{topic}-*", "*")):
        ext = path.rsplit(".", 1)[-1]
        if ext in ("log", "index", "timeindex", "txnindex"):
            out.setdefault(ext, []).append(path)
    for paths in out.values():
        paths.sort()
    return out


def retained_fill(args, b, topic, partitions, records, producers, limit_s):
    """`records` x `args.record_bytes` into `partitions` partitions from `producers`
    processes (producer k writes partitions k, k + producers, ...). Prints
    progress every 30 s. Returns (records acked, MB/s of values, seconds)."""
    producers = max(1, min(producers, partitions))
    start_at = time.time() + 3
    cmds = []
    for k in range(producers):
        count = records // producers + (1 if k < records % producers else 0)
        cmds.append(["_fill", "--bootstrap", b.bootstrap, "--topic", topic,
                     "--partitions", ",".join(str(p) for p in range(k, partitions, producers)),
                     "--start-at", str(start_at), "--seconds", str(limit_s),
                     "--record-bytes", str(args.record_bytes), "--linger-ms", "5",
                     "--batch-bytes", str(MiB), "--count", str(count)])
    logs = os.path.join(b.data_dir, "logs")
    done = threading.Event()

    def progress():
        while not done.wait(30):
            say(f"   ... {time.time() - start_at:5.0f} s: {dir_bytes(logs) / GiB:6.2f} GiB on disk, "
                f"broker {rss_text(b.status_mib())}")

    ticker = threading.Thread(target=progress, daemon=True)
    ticker.start()
    cpu_b0 = b.cpu_seconds()
    try:
        results, cpu_clients = run_workers(cmds, limit_s + 120)
    finally:
        done.set()
    acked = sum(r["acked"] for r in results)
    errors = [e for r in results for e in r["errors"]]
    end = max((r["end"] for r in results), default=time.time())
    seconds = max(1e-9, end - start_at)
    mbps = acked * args.record_bytes / seconds / 1e6
    say(f"   {acked:,} of {records:,} records acked in {seconds:.1f} s: {mbps:.1f} MB/s of values, "
        f"{acked / seconds:,.0f} records/s; CPU broker {b.cpu_seconds() - cpu_b0:.1f} s, "
        f"producers {cpu_clients:.1f} s"
        + (f"; errors: {errors[:3]}" if errors else "")
        + (f"; WARNING: {len(results)} of {producers} producer processes reported"
           if len(results) < producers else ""))
    return acked, mbps, seconds


def retained_broker_read(args, b, topic, partitions, log_bytes, records, limit_s):
    """One consumer reads every partition from offset 0 to its end: (MB/s of log
    bytes, how), or None. doze-bench (Fetch v12, records not decoded) when
    `--loadgen` is there, else a confluent-kafka consumer."""
    cpu_b0 = b.cpu_seconds()
    if os.access(args.loadgen, os.X_OK):
        r = run_loadgen(args, ["fetch", "--bootstrap", b.bootstrap, "--topic", topic,
                               "--partitions", str(partitions), "--isolation", "0",
                               "--seconds", str(int(limit_s)), "--repeat", "1"], limit_s + 60)
        if not r:
            return None
        return r["mbps"], (f"doze-bench: {r['bytes'] / GiB:.2f} GiB in {r['seconds']:.1f} s, "
                           f"{r['fetches']:,} fetches, broker CPU {b.cpu_seconds() - cpu_b0:.1f} s")
    _values, got, el = consume_all(b.bootstrap, topic, partitions, "read_uncommitted", limit_s)
    read = log_bytes * min(1.0, got / max(1, records))
    return read / el / 1e6, (f"confluent-kafka consumer: {got:,} of {records:,} records in {el:.1f} s"
                             f"{' (PARTIAL: time limit)' if got < records else ''}, broker CPU "
                             f"{b.cpu_seconds() - cpu_b0:.1f} s")


def raw_read(paths, limit_s):
    """Sequential read of `paths` with 8 MiB reads: (MB/s, bytes, seconds, complete)."""
    buf = bytearray(8 * MiB)
    total = 0
    t0 = time.monotonic()
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            try:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            except (AttributeError, OSError):
                pass
            while True:
                n = f.readinto(buf)
                if not n:
                    break
                total += n
                if time.monotonic() - t0 > limit_s:
                    el = time.monotonic() - t0
                    return total / el / 1e6, total, el, False
    el = max(1e-9, time.monotonic() - t0)
    return total / el / 1e6, total, el, True


def bench_retained(args, work):
    section(f"5. retained data: {args.retained_gib:g} GiB of {args.record_bytes} B records in "
            f"{args.retained_partitions} partitions (broker RSS, start-up, fetch vs raw read)")
    gib = args.retained_gib
    free = shutil.disk_usage(work).free
    if free < gib * GiB * 1.2:
        scaled = math.floor(free / 1.2 / GiB * 10) / 10
        say(f"WARNING: {free / GiB:.1f} GiB free on {work}; {gib:g} GiB retained needs "
            f"{gib * 1.2:.1f} GiB: scaled down to {scaled:g} GiB")
        gib = scaled
    if gib < 0.1:
        say("SKIPPED: less than 0.1 GiB would fit")
        return None
    limit_s = args.retained_max_s
    parts = args.retained_partitions
    topic = "bench-retained"
    records = int(gib * GiB) // args.record_bytes
    data = os.path.join(work, "retained")
    out = {"gib": gib, "rss": {}}
    b = None
    try:
        b = BrokerProc(args.binary, data, args.set, ready_timeout_s=args.retained_start_timeout_s)
        create_topic(b.bootstrap, topic, parts)
        say(f"a. produce: {args.retained_producers} confluent-kafka producer processes, acks=all, "
            f"linger.ms=5, batch.size=1MiB, compression none; at most {limit_s:.0f} s")
        acked, out["produce_mbps"], _ = retained_fill(args, b, topic, parts, records,
                                                      args.retained_producers, limit_s)
        st = b.status_mib()
        out["rss"]["after produce"] = st.get("VmRSS", float("nan"))
        say(f"   broker after producing: {rss_text(st)} "
            f"(target VmRSS <= {RSS_TARGET_MIB} MiB)")
        files = segment_paths(data, topic)
        log_bytes = sum(os.path.getsize(p) for p in files.get("log", []))
        index_bytes = sum(os.path.getsize(p) for ext in ("index", "timeindex", "txnindex")
                          for p in files.get(ext, []))
        say(f"   on disk: {log_bytes / GiB:.2f} GiB in {len(files.get('log', []))} .log files; "
            f"index files {index_bytes / MiB:.1f} MiB ("
            + ", ".join(f"{len(files.get(ext, []))} .{ext}" for ext in ("index", "timeindex", "txnindex"))
            + ")")

        say("b. SIGTERM, then start on the same data dir")
        t0 = time.monotonic()
        rc = b.stop()
        say(f"   stopped (exit {rc}) in {time.monotonic() - t0:.2f} s")
        b = BrokerProc(args.binary, data, args.set, ready_timeout_s=args.retained_start_timeout_s)
        out["clean_start_s"] = b.ready_s
        time.sleep(1)
        st = b.status_mib()
        out["rss"]["after clean start"] = st.get("VmRSS", float("nan"))
        say(f"   start-up to the ready line: {b.ready_s:.3f} s (target <= {CLEAN_START_TARGET_S} s); "
            f"1 s later: {rss_text(st)}")

        topup = args.retained_topup_mib * MiB // args.record_bytes
        if topup:
            say(f"c. {args.retained_topup_mib} MiB more (1 producer process), then kill -9 at once "
                f"(a crash under load: what lies above the recovery point is scanned), and start")
            topup, _, _ = retained_fill(args, b, topic, parts, topup, 1, limit_s)
        else:
            say("c. kill -9, and start")
        b.proc.kill()
        b.proc.wait(30)
        b = BrokerProc(args.binary, data, args.set, ready_timeout_s=args.retained_start_timeout_s)
        out["kill_start_s"] = b.ready_s
        time.sleep(1)
        st = b.status_mib()
        out["rss"]["after kill -9 start"] = st.get("VmRSS", float("nan"))
        say(f"   start-up to the ready line: {b.ready_s:.3f} s (target <= {KILL_START_TARGET_S} s); "
            f"1 s later: {rss_text(st)}")

        files = segment_paths(data, topic)
        logs = files.get("log", [])
        log_bytes = sum(os.path.getsize(p) for p in logs)
        records = acked + topup
        say(f"d. one consumer reads all {log_bytes / GiB:.2f} GiB from offset 0 "
            f"({'doze-bench' if os.access(args.loadgen, os.X_OK) else 'confluent-kafka'}), "
            f"and a raw sequential read of the same {len(logs)} .log files (8 MiB reads)")
        if log_bytes > mem_available_bytes():
            say(f"   note: the log is larger than MemAvailable "
                f"({mem_available_bytes() / GiB:.1f} GiB): 'warm' is partly cold")
        can_drop, why = drop_page_cache()
        if not can_drop:
            say(f"   cannot drop the page cache ({why}): warm only")
        temps = ("cold", "warm") if can_drop else ("warm",)
        for temp in temps:
            if temp == "cold":
                drop_page_cache()
            r = retained_broker_read(args, b, topic, parts, log_bytes, records, limit_s)
            if r:
                out[("broker", temp)] = r[0]
                say(f"   broker {temp}: {r[0]:8.1f} MB/s ({r[1]})")
        for temp in temps:
            if temp == "cold":
                drop_page_cache()
            mbps, n, el, complete = raw_read(logs, limit_s)
            out[("raw", temp)] = mbps
            say(f"   raw    {temp}: {mbps:8.1f} MB/s ({n / GiB:.2f} GiB in {el:.1f} s"
                f"{'' if complete else ', PARTIAL: time limit'})")
        for temp in temps:
            br, raw = out.get(("broker", temp)), out.get(("raw", temp))
            if br and raw:
                say(f"   {temp}: broker / raw = {br / raw:.2f}")
        st = b.status_mib()
        out["rss"]["after fetch"] = st.get("VmRSS", float("nan"))
        say(f"   broker after the reads: {rss_text(st)}")
    finally:
        if b is not None:
            rc = b.stop()
            if rc not in (0, -9):
                say(f"WARNING: broker exited {rc} on SIGTERM (log {b.log_path})")
        shutil.rmtree(data, ignore_errors=True)
        say(f"removed {data}")
    return out


def summary_retained(r):
    worst = max(r["rss"].values(), default=float("nan"))
    say(f"retained {r['gib']:g} GiB: produce {r['produce_mbps']:.1f} MB/s; broker VmRSS "
        + ", ".join(f"{k} {v:.0f} MiB" for k, v in r["rss"].items())
        + f" (target <= {RSS_TARGET_MIB} MiB) {'OK' if worst <= RSS_TARGET_MIB else 'MISSED'}")
    for key, label, target in (("clean_start_s", "clean start", CLEAN_START_TARGET_S),
                               ("kill_start_s", "start after kill -9", KILL_START_TARGET_S)):
        v = r.get(key)
        if v is not None:
            say(f"retained {r['gib']:g} GiB: {label} {v:.3f} s (target <= {target} s) "
                f"{'OK' if v <= target else 'MISSED'}")
    for temp in ("cold", "warm"):
        br, raw = r.get(("broker", temp)), r.get(("raw", temp))
        if br and raw:
            say(f"retained {r['gib']:g} GiB: fetch {temp} {br:.1f} MB/s vs raw read {raw:.1f} MB/s: "
                f"ratio {br / raw:.2f}")


# --- 6. log cleaner ----------------------------------------------------------------

CLEANER_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z?\s+\w+\s+doze_core::broker::cleaner: "
                          r"(cleaning abandoned|cleaning|cleaned)\b(.*)$")


def log_time(stamp):
    """Seconds since the epoch of a tracing timestamp (UTC, to the microsecond)."""
    whole, _, frac = stamp.partition(".")
    t = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() + (float("0." + frac) if frac else 0.0)


def cleaner_events(b, start):
    """The cleaner's `cleaning` (a pass begins), `cleaned` (a pass ends) and
    `cleaning abandoned` lines logged from offset `start`: [(what, time, {k: v})]."""
    b.log.flush()
    with open(b.log_path, "rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    out = []
    for line in text.splitlines():
        m = CLEANER_LINE.match(ANSI.sub("", line))
        if m:
            out.append((m.group(2), log_time(m.group(1)), dict(KV.findall(m.group(3)))))
    return out


def write_file(path, size, chunk=MiB):
    """A file of `size` bytes (one random `chunk` repeated), written and fdatasync'd."""
    block = os.urandom(chunk)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = size
        while left > 0:
            left -= os.write(fd, block[:min(chunk, left)])
        os.fdatasync(fd)
    finally:
        os.close(fd)


def raw_read_write(src, dst, reads, write_fraction, limit_s, chunk=MiB):
    """Reads `src` sequentially `reads` times in `chunk` reads; during the last
    read appends `write_fraction` of what it read to `dst` (in `chunk` writes as
    the share comes due), then one fdatasync. Returns (seconds, bytes read,
    bytes written, complete)."""
    buf = bytearray(chunk)
    view = memoryview(buf)
    read = written = 0
    owed = 0.0
    t0 = time.monotonic()
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for k in range(reads):
            last = k == reads - 1
            with open(src, "rb", buffering=0) as f:
                try:
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
                except (AttributeError, OSError):
                    pass
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    read += n
                    if last:
                        owed += n * write_fraction
                        while owed >= chunk or (owed >= 1 and write_fraction >= 1):
                            w = os.write(fd, view[:min(n, int(owed), chunk)])
                            written += w
                            owed -= w
                    if time.monotonic() - t0 > limit_s:
                        os.fdatasync(fd)
                        return time.monotonic() - t0, read, written, False
        if owed >= 1:
            written += os.write(fd, view[:int(owed)])
        os.fdatasync(fd)
    finally:
        os.close(fd)
    return max(1e-9, time.monotonic() - t0), read, written, True


def bench_cleaner(args, work):
    seg_mib = args.cleaner_segment_mib
    section(f"6. log cleaner: {args.cleaner_mib} MiB of keyed {args.record_bytes} B records in one "
            f"compacted partition ({seg_mib} MiB segments) vs raw read + write")
    mib = args.cleaner_mib
    free = shutil.disk_usage(work).free
    if free < mib * MiB * 3.5:
        scaled = int(free / 3.5 / MiB)
        say(f"WARNING: {free / GiB:.1f} GiB free on {work}; {mib} MiB needs ~{mib * 3.5 / 1024:.1f} GiB "
            f"(log, raw source, raw copy): scaled down to {scaled} MiB")
        mib = scaled
    if mib < 2 * seg_mib:
        say(f"SKIPPED: less than two {seg_mib} MiB segments ({mib} MiB)")
        return None
    topic = "bench-cleaner"
    seg = seg_mib * MiB
    # Enough that the closed segments (the cleanable ones) hold about `mib` MiB:
    # the active segment, never cleaned, gets what is left over.
    records = (mib * MiB + seg // 2) // args.record_bytes
    keys = args.cleaner_keys or max(1, records // 8)
    data = os.path.join(work, "cleaner")
    out = {"mib": mib}
    b = None
    try:
        # a. The fill, by a broker whose cleaner looks once (at start, before
        # the topic exists) and then not for an hour: all cleaning is left to b.
        b = BrokerProc(args.binary, data, args.set + ["log.cleaner.backoff.ms=3600000"])
        create_topic(b.bootstrap, topic, 1, {
            "cleanup.policy": "compact", "segment.bytes": str(seg),
            "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "0"})
        say(f"a. fill: 1 confluent-kafka producer process, acks=all, linger.ms=5, batch.size=1MiB, "
            f"{records:,} records, keys drawn at random from {keys:,} (cleaner not looking)")
        start_at = time.time() + 2
        cpu_b0 = b.cpu_seconds()
        results, cpu_clients = run_workers([[
            "_fill", "--bootstrap", b.bootstrap, "--topic", topic, "--partitions", "0",
            "--start-at", str(start_at), "--seconds", str(args.max_s),
            "--record-bytes", str(args.record_bytes), "--linger-ms", "5",
            "--batch-bytes", str(MiB), "--count", str(records), "--keys", str(keys)]], args.max_s + 60)
        acked = sum(r["acked"] for r in results)
        errors = [e for r in results for e in r["errors"]]
        end = max((r["end"] for r in results), default=time.time())
        say(f"   {acked:,} of {records:,} records acked in {end - start_at:.1f} s "
            f"({acked * args.record_bytes / max(1e-9, end - start_at) / 1e6:.1f} MB/s of values); "
            f"CPU broker {b.cpu_seconds() - cpu_b0:.1f} s, producer {cpu_clients:.1f} s"
            + (f"; errors: {errors[:3]}" if errors else ""))
        logs = segment_paths(data, topic).get("log", [])
        if len(logs) < 2:
            say(f"SKIPPED: {len(logs)} segment(s) after the fill: nothing closed to clean")
            return None
        active_base = int(os.path.basename(logs[-1]).split(".")[0])
        closed = sum(os.path.getsize(p) for p in logs[:-1])
        say(f"   on disk: {len(logs)} segments, {closed / MiB:.1f} MiB closed (cleanable: offsets "
            f"below {active_base:,}), {os.path.getsize(logs[-1]) / MiB:.1f} MiB in the active one")
        rc = b.stop()
        if rc != 0:
            say(f"WARNING: broker exited {rc} on SIGTERM (log {b.log_path})")
        b = None

        # b. A broker that cleans: started on the same data dir; its cleaner
        # looks at once and then every 500 ms.
        can_drop, why = drop_page_cache()
        temp = "cold" if can_drop else "warm"
        out["temp"] = temp
        say(f"b. clean: broker started again with log.cleaner.backoff.ms=500, page cache "
            + ("dropped first (cold)" if can_drop else f"not dropped ({why}): warm"))
        log0 = os.path.getsize(data.rstrip("/") + ".log")
        b = BrokerProc(args.binary, data, ["log.cleaner.backoff.ms=500"] + args.set)
        cpu_b0 = b.cpu_seconds()
        t0 = time.monotonic()
        limit_s = args.cleaner_max_s
        last_change = t0
        seen = 0
        done = False
        while True:
            ev = cleaner_events(b, log0)
            if len(ev) != seen:
                seen = len(ev)
                last_change = time.monotonic()
            cleaned = [kv for what, _, kv in ev if what == "cleaned"]
            if any(int(kv.get("up_to", -1)) >= active_base for kv in cleaned):
                done = True
                break
            now = time.monotonic()
            running = bool(ev) and ev[-1][0] == "cleaning"
            if now - t0 > limit_s:
                say(f"WARNING: time limit ({limit_s:g} s) reached before the cleaner got to "
                    f"offset {active_base:,}")
                break
            if not running and now - last_change > 60:
                say(f"WARNING: no pass running and none begun for 60 s, below offset {active_base:,}")
                break
            if b.proc.poll() is not None:
                say(f"WARNING: the broker exited ({b.proc.returncode})")
                break
            time.sleep(0.05)
        cpu_broker = b.cpu_seconds() - cpu_b0
        wait_s = time.monotonic() - t0
        ev = cleaner_events(b, log0)
        after = segment_paths(data, topic).get("log", [])
        after_bytes = sum(os.path.getsize(p) for p in after)
        rc = b.stop()
        if rc != 0:
            say(f"WARNING: broker exited {rc} on SIGTERM (log {b.log_path})")
        b = None

        # Each `cleaned` line with the `cleaning` line that began its pass (a
        # broker older than the `cleaned` line's dirty_bytes and elapsed_ms
        # fields: taken from the `cleaning` line and the two lines' times).
        passes, abandoned, starts, ends = [], [], [], []
        begun = None
        for what, ts, kv in ev:
            if what == "cleaning":
                begun = (ts, kv)
                starts.append(ts)
                say(f"   pass begun: offsets {int(kv.get('from', 0)):,}..{int(kv.get('to', 0)):,}, "
                    f"dirty {int(kv.get('dirty_bytes', 0)) / MiB:.1f} MiB, ratio {kv.get('ratio')}")
            elif what == "cleaned":
                kv = dict(kv)
                if begun:
                    kv.setdefault("dirty_bytes", begun[1].get("dirty_bytes", 0))
                    kv.setdefault("elapsed_ms", round((ts - begun[0]) * 1e3))
                begun = None
                passes.append(kv)
                ends.append(ts)
                say(f"   pass done:  up to {int(kv['up_to']):,}, dirty "
                    f"{int(kv.get('dirty_bytes', 0)) / MiB:.1f} MiB, read {int(kv['read']) / MiB:.1f} "
                    f"MiB, written {int(kv['written']) / MiB:.1f} MiB, "
                    f"{int(kv.get('elapsed_ms', 0))} ms")
            else:
                begun = None
                abandoned.append(kv)
                say(f"   pass abandoned: {kv}")
        if not passes:
            say(f"   no pass finished in {wait_s:.1f} s ({len(starts)} begun, {len(abandoned)} "
                f"abandoned); the broker's last lines above DEBUG ({data}.log):")
            lines = open(data.rstrip("/") + ".log", "rb").read()[log0:].decode(
                errors="replace").splitlines()
            for line in [x for x in lines if " DEBUG " not in x and " TRACE " not in x][-15:]:
                say(f"     {line}")
            return None
        dirty = sum(int(kv.get("dirty_bytes", 0)) for kv in passes)
        read = sum(int(kv["read"]) for kv in passes)
        written = sum(int(kv["written"]) for kv in passes)
        elapsed = sum(int(kv.get("elapsed_ms", 0)) for kv in passes) / 1e3
        span = max(1e-9, ends[-1] - starts[0]) if starts else elapsed
        out.update(dirty=dirty, read=read, written=written, seconds=span, passes=len(passes),
                   mbps=dirty / span / 1e6, mbps_passes=dirty / max(1e-9, elapsed) / 1e6,
                   cpu=cpu_broker, complete=done)
        say(f"   cleaner {temp}: {out['mbps']:8.1f} MB/s of dirty log ({dirty / MiB:.1f} MiB cleaned in "
            f"{span:.2f} s, first `cleaning` to last `cleaned` line; {len(passes)} pass(es), their "
            f"elapsed_ms sum {elapsed:.2f} s = {out['mbps_passes']:.1f} MB/s)"
            + ("" if done else f"; PARTIAL: stopped below offset {active_base:,}"))
        say(f"   read {read / MiB:.1f} MiB ({read / max(1, dirty):.2f}x dirty), written "
            f"{written / MiB:.1f} MiB ({written / max(1, dirty):.1%} of dirty kept); log now "
            f"{after_bytes / MiB:.1f} MiB in {len(after)} segments; broker CPU {cpu_broker:.2f} s "
            f"from its ready line to the last pass's end ({wait_s:.1f} s, start-up's own CPU included)")

        # c. The raw reference: the same bytes through the same filesystem.
        # Each variant reads a file written just before it, as the cleaner read
        # a log written just before: on this VM a dropped page cache is not
        # all of it, the second cold read of a file runs ~4x the first.
        say(f"c. raw, on {work}'s filesystem: a file of {dirty / MiB:.1f} MiB (the dirty bytes), "
            f"written + fdatasync'd just before, "
            + ("page cache dropped, " if can_drop else "")
            + f"read sequentially in 1 MiB reads while writing 1 MiB chunks to a new file, one "
            f"fdatasync at the end ({temp})")
        src = os.path.join(work, "raw-clean-src.bin")
        dst = os.path.join(work, "raw-clean-dst.bin")
        try:
            kept = written / max(1, dirty)
            for key, label, reads, fraction in (
                    ("raw_copy", "read once + write all       ", 1, 1.0),
                    ("raw_clean", f"read twice + write {kept:5.1%}   ", 2, kept)):
                write_file(src, dirty)
                if can_drop:
                    drop_page_cache()
                el, n_read, n_written, complete = raw_read_write(src, dst, reads, fraction, limit_s)
                out[key] = dirty / el / 1e6 * (n_read / (reads * dirty))
                say(f"   raw {label}: {out[key]:8.1f} MB/s of the file ({n_read / MiB:.0f} MiB read, "
                    f"{n_written / MiB:.1f} MiB written in {el:.2f} s"
                    f"{'' if complete else ', PARTIAL: time limit'}); cleaner / raw = "
                    f"{out['mbps'] / out[key]:.2f}")
                os.unlink(dst)
                os.unlink(src)
        finally:
            for path in (src, dst):
                if os.path.exists(path):
                    os.unlink(path)
    finally:
        if b is not None:
            rc = b.stop()
            if rc != 0:
                say(f"WARNING: broker exited {rc} on SIGTERM (log {b.log_path})")
        shutil.rmtree(data, ignore_errors=True)
    return out


def summary_cleaner(r):
    head = (f"cleaner {r['dirty'] / MiB:.0f} MiB ({r['temp']}, {r['passes']} pass(es)"
            f"{'' if r['complete'] else ', PARTIAL'}): {r['mbps']:.1f} MB/s of dirty log")
    for key, label in (("raw_copy", "raw read once + write all"),
                       ("raw_clean", f"raw read twice + write the kept {r['written'] / max(1, r['dirty']):.1%}")):
        if key in r:
            say(f"{head} vs {label} {r[key]:.1f} MB/s: ratio {r['mbps'] / r[key]:.2f} (no target)")


# --- main ------------------------------------------------------------------------

def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("_produce", "_txn", "_fill"):
        a = worker_args(sys.argv[1:])
        return {"_produce": worker_produce, "_txn": worker_txn, "_fill": worker_fill}[a.mode](a)

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(ROOT / "target/release/doze-kafka"))
    ap.add_argument("--loadgen", default=str(ROOT / "target/release/doze-bench"),
                    help="the Rust load generator (net/src/bin/doze-bench.rs)")
    ap.add_argument("--loadgen-inflight", type=int, default=16)
    ap.add_argument("--produce-pairs", type=int, default=2,
                    help="loadgen produce: alternations of broker and raw measurements")
    ap.add_argument("--work-dir", default=str(ROOT / "target/bench"),
                    help="parent of the temp dirs (raw files and broker data dirs share its filesystem)")
    ap.add_argument("--sections", default="disk,produce,txn,fetch,retained,cleaner")
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--chunk-kib", type=int, nargs="+", default=[64, 256, 1024, 4096])
    ap.add_argument("--raw-min-s", type=float, default=4, help="minimum seconds per raw chunk size")
    ap.add_argument("--producers", type=int, default=3, help="produce: producer processes")
    ap.add_argument("--produce-partitions", type=int, default=3)
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--warmup-s", type=float, default=3)
    ap.add_argument("--produce-s", type=float, default=12)
    ap.add_argument("--txn-producers", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--txn-threads", type=int, default=16, help="transactional producers per process")
    ap.add_argument("--txn-partitions", type=int, default=8)
    ap.add_argument("--txn-warmup-s", type=float, default=2)
    ap.add_argument("--txn-s", type=float, default=10)
    ap.add_argument("--fetch-mib", type=int, default=256, help="log size to fill for the fetch test")
    ap.add_argument("--fetch-partitions", type=int, default=2)
    ap.add_argument("--fetch-reps", type=int, default=2)
    ap.add_argument("--fetch-repeat", type=int, default=5, help="loadgen: whole-log reads per figure")
    ap.add_argument("--max-s", type=float, default=180, help="time limit per phase")
    ap.add_argument("--retained-gib", type=float, default=20,
                    help="retained: GiB of records to fill (0 skips the section)")
    ap.add_argument("--retained-only", action="store_true", help="run only the retained section")
    ap.add_argument("--retained-partitions", type=int, default=8)
    ap.add_argument("--retained-producers", type=int, default=4, help="retained: producer processes")
    ap.add_argument("--retained-topup-mib", type=int, default=256,
                    help="retained: MiB produced just before the kill -9 (0: none)")
    ap.add_argument("--retained-max-s", type=float, default=900,
                    help="retained: time limit of the fill and of each whole read")
    ap.add_argument("--retained-start-timeout-s", type=float, default=300,
                    help="retained: how long a start-up may take before the section gives up")
    ap.add_argument("--cleaner-mib", type=int, default=256,
                    help="cleaner: MiB of keyed records to fill and clean (0 skips the section)")
    ap.add_argument("--cleaner-only", action="store_true", help="run only the cleaner section")
    ap.add_argument("--cleaner-segment-mib", type=int, default=16, help="cleaner: the topic's segment.bytes")
    ap.add_argument("--cleaner-keys", type=int, default=0,
                    help="cleaner: distinct keys (0: one per 8 records)")
    ap.add_argument("--cleaner-max-s", type=float, default=600,
                    help="cleaner: time limit of the wait for the passes and of each raw read")
    ap.add_argument("--set", action="append", default=[], help="broker --set key=value")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (broker logs)")
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    if args.retained_only or args.cleaner_only:
        sections = ({"retained"} if args.retained_only else set()) | (
            {"cleaner"} if args.cleaner_only else set())

    os.makedirs(args.work_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="doze-bench-", dir=args.work_dir)
    print(f"doze-kafka bench: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs, "
          f"work dir {work}", flush=True)
    raw, fsync_small = {}, [float("inf"), 0.0]
    produce = txn = fetch = retained = cleaner = None
    try:
        if "disk" in sections or "produce" in sections or "txn" in sections:
            section("1. raw sequential write + fdatasync (one file, O_APPEND)")
            for kib in args.chunk_kib:
                r = raw_fsync_bandwidth(work, kib * KiB, 64 * MiB, args.raw_min_s, 30)
                raw[kib] = r[0]
                print_raw(f"chunk {kib:5d} KiB", r)
            r = raw_fsync_bandwidth(work, 128, 0, 3, 10)
            fsync_small[:] = [pct(r[4], 50), pct(r[4], 99)]
            say(f"128 B append + fdatasync: p50 {fsync_small[0] * 1e3:.2f} ms "
                f"p99 {fsync_small[1] * 1e3:.2f} ms ({r[2]} syncs)")
        if "produce" in sections:
            produce = bench_produce(args, work)
        if "txn" in sections:
            txn = bench_txn(args, work, fsync_small)
        if "fetch" in sections:
            fetch = bench_fetch(args, work)
        if "retained" in sections and args.retained_gib > 0:
            retained = bench_retained(args, work)
        if "cleaner" in sections and args.cleaner_mib > 0:
            cleaner = bench_cleaner(args, work)

        section("7. summary (every figure beside its target)")
        for client, r in (produce or {}).items():
            ratio = r["mbps"] / r["raw"]
            if len(r.get("pairs", [])) > 1:
                say(f"produce acks=all ({client}): the {len(r['pairs'])} broker/raw pairs: "
                    + ", ".join(f"{p['mbps']:.0f}/{p['raw']:.0f} MB/s = {p['mbps'] / p['raw']:.2f}"
                                for p in r["pairs"]) + "; their means:")
            say(f"produce acks=all ({client}): {r['mbps']:.1f} MB/s vs raw fdatasync at one "
                f"round's chunk ({r['chunk_kib']} KiB) {r['raw']:.1f} MB/s: ratio {ratio:.2f} "
                f"(target >= 0.80) {'OK' if ratio >= 0.8 else 'MISSED'}"
                + "".join(f"; vs {kib} KiB {r['mbps'] / mbps:.2f}" for kib, mbps in raw.items()))
        for (client, n), r in (txn or {}).items():
            say(f"txn {n:3d} producers ({client}): {r['rate']:8,.0f} commits/s, EndTxn p50 "
                f"{r['p50'] * 1e3:.2f} ms p99 {r['p99'] * 1e3:.2f} ms"
                + (f" (target >= 2,000/s {'OK' if r['rate'] >= 2000 else 'MISSED'})" if n == 64 else "")
                + (f" = {r['p50'] / fsync_small[0]:.1f}x fdatasync p50 {fsync_small[0] * 1e3:.2f} ms "
                   f"(target <= 2x {'OK' if r['p50'] <= 2 * fsync_small[0] else 'MISSED'}); broker "
                   f"sync round p50 {r['sync_p50'] * 1e3:.2f} ms, meta.db flush p50 "
                   f"{r['meta_p50'] * 1e3:.2f} ms (EndTxn = 2 flushes + 1 sync)" if n == 1 else ""))
        for client in ("confluent-kafka", "doze-bench"):
            rc, ru = (fetch or {}).get((client, "read_committed")), (fetch or {}).get((client, "read_uncommitted"))
            if rc and ru:
                say(f"fetch ({client}): read_committed {rc:.1f} MB/s vs read_uncommitted {ru:.1f} MB/s "
                    f"(best of each): ratio {rc / ru:.2f} (target >= 0.90) {'OK' if rc / ru >= 0.9 else 'MISSED'}")
        if retained:
            summary_retained(retained)
        if cleaner:
            summary_cleaner(cleaner)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
