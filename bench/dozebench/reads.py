"""7f. reads (a peers workload, `--peer-workloads reads`): issue 40's read,
doze and Kafka (default) up together, read in turns.

A topic of `--reads-records` x 1 KiB records in `--reads-partitions`
partitions (3), filled by confluent-kafka producers as `peer_fill` fills
(acks=all, 1 MiB batches), is read from offset 0 to its end, read_committed,
warm, `--reads-rounds` rounds, the order swapped every round, with:

  ck/bench     confluent-kafka as `fetch.consume_all` configures it (64 MiB
               fetch.max.bytes, 16 MiB max.partition.fetch.bytes: 48 MiB
               answers for 3 partitions)
  ck/defaults  confluent-kafka with librdkafka's defaults (1 MiB a partition)
  ck/defaults+qb10  the same but fetch.queue.backoff.ms 10 (librdkafka: 1000)
  java         Kafka's own ConsumerPerformance (kafka-clients 4.3.1, its
               defaults): fetch MB/s, which leaves out the group join (doze
               waits group.initial.rebalance.delay.ms, Kafka's default 3 s;
               kafka-ref sets 0)

What it showed (h40-reads, 2026-12-07, 2-core VM, busy): the answers are
the same shape from both brokers (50.3 MB with ck/bench, 3.1 MB with
ck/defaults: 16 MiB or 1 MiB a partition, cut inside the last batch, as
Kafka's LogSegment.read cuts), doze's round trips are shorter, and the
Python loop alone reads 390-520 MB/s. What decides ck/defaults is
librdkafka's queue: at 64 MiB queued it stops fetching for
fetch.queue.backoff.ms (1 s) and the loop, having emptied the queue in a
fraction of it, waits; doze fills the queue sooner, so it is stopped more
often. With fetch.queue.backoff.ms 10 both reach the loop's ceiling.

Each confluent-kafka read logs librdkafka's protocol debug lines into the
bench, which give what the client saw of each Fetch: responses, MB per
response, round trip. Once per broker, `app` is what the Python loop of
`consume_all` takes when every record is already in librdkafka's queue: the
ceiling of the ck figures on this machine, whatever the broker.
"""

import logging
import os
import re
import statistics
import subprocess
import time

from .common import MiB, say
from .broker import create_topic
from .fetch import drain_to_eof
from .peers import KAFKA_REF, peer_fill, start_turns, stop_turns

RECV = re.compile(r"Received FetchResponse \(v(\d+), (\d+) bytes, CorrId \d+, rtt ([\d.]+)ms\)")

CK_CONFIGS = {
    "bench": {"fetch.max.bytes": 64 * MiB, "max.partition.fetch.bytes": 16 * MiB,
              "fetch.wait.max.ms": 10, "queued.max.messages.kbytes": 256 * 1024,
              "queued.min.messages": 1_000_000},
    "defaults": {},
    # librdkafka stops fetching a partition for fetch.queue.backoff.ms
    # (1,000 by default) whenever its queue holds queued.max.messages.kbytes
    # (64 MiB): the Python loop empties 64 MiB in a fraction of that second
    # and then waits. A broker that answers sooner fills the queue sooner,
    # so it is stopped more often (see peer_reads_turns).
    "defaults+qb10": {"fetch.queue.backoff.ms": 10},
}


class Lines(logging.Handler):
    """Keeps librdkafka's log lines (given to a `logger`) in a list."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def ck_read(bootstrap, topic, parts, iso, extra, max_s, prefetch_s=0):
    """Reads every partition from 0 to its end: (MB/s of values, records,
    seconds, [(response bytes, rtt ms)]). With `prefetch_s`, the clock starts
    that long after the first record, librdkafka's queue allowed to hold it
    all: the Python loop's own rate."""
    from confluent_kafka import Consumer, TopicPartition
    log = logging.getLogger(f"reads-{time.time()}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    lines = Lines()
    log.addHandler(lines)
    conf = {"bootstrap.servers": bootstrap, "group.id": f"reads-{os.getpid()}-{time.time()}",
            "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": iso,
            "debug": "protocol", "logger": log}
    conf.update(extra)
    if prefetch_s:
        conf.update({"queued.max.messages.kbytes": 2_000_000, "queued.min.messages": 10_000_000})
    c = Consumer(conf)
    c.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    values, records = 0, 0
    t0 = time.monotonic()
    if prefetch_s:
        first = c.consume(num_messages=1, timeout=30)
        records = sum(1 for m in first if m.error() is None)
        values = sum(len(m.value()) for m in first if m.error() is None)
        time.sleep(prefetch_s)
        t0 = time.monotonic()
    drained_values, drained_records = drain_to_eof(c, parts, t0, max_s)
    values += drained_values
    records += drained_records
    el = time.monotonic() - t0
    c.close()
    fetches = [(int(m.group(2)), float(m.group(3))) for m in map(RECV.search, lines.lines) if m]
    return values / el / 1e6, records, el, fetches


def java_read(bootstrap, topic, iso, records, work, max_s):
    """ConsumerPerformance (subscribe, its defaults): (fetch MB/s, MB/s with
    the group join, why not)."""
    props = os.path.join(work, "reads-java.properties")
    with open(props, "w") as f:
        f.write(f"isolation.level={iso}\nauto.offset.reset=earliest\n")
    try:
        p = subprocess.run(["bash", str(KAFKA_REF), "tool", "org.apache.kafka.tools.ConsumerPerformance",
                            "--bootstrap-server", bootstrap, "--topic", topic,
                            "--messages", str(records), "--command-config", props,
                            "--group", f"reads-java-{time.time()}", "--timeout", "60000"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=max_s)
    except subprocess.TimeoutExpired:
        return None, None, "ConsumerPerformance timed out"
    # start, end, MB, MB/s, msgs, msgs/s, rebalance ms, fetch ms, fetch MB/s, fetch msgs/s
    fields = p.stdout.strip().splitlines()[-1].split(", ") if p.stdout.strip() else []
    if p.returncode != 0 or len(fields) < 10 or int(fields[4]) < records:
        return None, None, f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[-300:]}"
    return float(fields[8]), float(fields[3]), None


def fetch_note(fetches):
    big = [f for f in fetches if f[0] > 64 * 1024]
    if not big:
        return f"{len(fetches)} fetches"
    return (f"{len(fetches)} fetches, {len(big)} with records: median "
            f"{statistics.median(b for b, _ in big) / 1e6:.1f} MB, rtt median "
            f"{statistics.median(r for _, r in big):.0f} ms, "
            f"{sum(b for b, _ in big) / sum(r for _, r in big) / 1e3:.0f} MB/s within them")


def peer_reads_turns(args, work, res):
    parts, records, topic = args.reads_partitions, args.reads_records, "peer-reads"
    say(f"f. issue 40's read: doze and Kafka (default) up together, each filled with {records:,} "
        f"x {args.record_bytes} B in {parts} partitions (confluent-kafka, acks=all), read "
        f"read_committed, warm, {args.reads_rounds} rounds in turns (see bench/dozebench/reads.py)")
    brokers = {}
    runs = {}
    try:
        start_turns(args, work, "reads", brokers)
        for name, b in brokers.items():
            create_topic(b.bootstrap, topic, parts)
            acked, mbps, el, _ = peer_fill(args, b, topic, parts, records, min(parts, args.peer_producers),
                                           args.max_s)
            if acked < records:
                raise RuntimeError(f"{name}: the fill stopped at {acked:,} of {records:,}")
            ck_read(b.bootstrap, topic, parts, "read_uncommitted", {}, args.max_s)  # warm-up
            app, got, _, _ = ck_read(b.bootstrap, topic, parts, "read_committed",
                                     CK_CONFIGS["bench"], args.max_s, prefetch_s=8)
            say(f"  {name}: filled in {el:.1f} s; app (the Python loop alone, all records "
                f"queued): {app:.0f} MB/s")
        names = list(brokers)
        for k in range(args.reads_rounds):
            for name in (names if k % 2 == 0 else names[::-1]):
                b = brokers[name]
                for conf, extra in CK_CONFIGS.items():
                    mbps, got, el, fetches = ck_read(b.bootstrap, topic, parts, "read_committed",
                                                     extra, args.max_s)
                    if got < records:
                        raise RuntimeError(f"{name} ck/{conf}: {got:,} of {records:,} records")
                    runs.setdefault((f"ck/{conf}", name), []).append(mbps)
                    say(f"  #{k + 1} {name:13s} ck/{conf:13s} {mbps:6.0f} MB/s of values in "
                        f"{el:.2f} s; {fetch_note(fetches)}")
                fetch_mbps, total_mbps, why = java_read(b.bootstrap, topic, "read_committed",
                                                        records, work, args.max_s)
                if why:
                    say(f"  #{k + 1} {name:13s} java: n/a: {why}")
                    continue
                runs.setdefault(("java", name), []).append(fetch_mbps)
                say(f"  #{k + 1} {name:13s} java               {fetch_mbps:6.0f} MB/s fetching "
                    f"({total_mbps:.0f} with the group join)")
        for client in [f"ck/{c}" for c in CK_CONFIGS] + ["java"]:
            got = {n: runs.get((client, n)) for n in names}
            if all(got.values()):
                med = {n: statistics.median(v) for n, v in got.items()}
                say(f"  {client:12s} medians: " + ", ".join(f"{n} {m:.0f} MB/s" for n, m in med.items())
                    + (f"; doze / Kafka {med['doze'] / med['kafka-default']:.2f}"
                       if med.get("kafka-default") else ""))
    except Exception as e:  # the other figures stand without these
        say(f"WARNING: reads: {type(e).__name__}: {e}")
    finally:
        stop_turns(args, work, "reads", brokers)
