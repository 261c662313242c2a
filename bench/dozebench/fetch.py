"""4. fetch: read_committed against read_uncommitted over committed and aborted transactions."""

import os
import time

from .common import MiB, middle, say, section
from .broker import BrokerProc, create_topic, dir_bytes, run_workers
from .produce import run_loadgen


# --- 4. fetch ------------------------------------------------------------------

def consume_all(bootstrap, topic, partitions, isolation, max_s):
    """Reads every partition from the start to its end; (values bytes, records, s)."""
    from confluent_kafka import Consumer, TopicPartition
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
    t0 = time.monotonic()
    values, records = drain_to_eof(c, partitions, t0, max_s)
    el = time.monotonic() - t0
    c.close()
    return values, records, el


def drain_to_eof(c, partitions, t0, max_s):
    """Consumes until every partition reports its end (or `max_s` after
    `t0`); (values bytes, records)."""
    from confluent_kafka import KafkaError
    eof = set()
    values = records = 0
    while len(eof) < partitions and time.monotonic() - t0 < max_s:
        for m in c.consume(num_messages=10000, timeout=1):
            err = m.error()
            if err is None:
                records += 1
                values += len(m.value())
            elif err.code() == KafkaError._PARTITION_EOF:
                eof.add(m.partition())
    return values, records


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


