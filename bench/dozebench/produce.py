"""2. produce: acks=all throughput beside raw write + fdatasync at the group commit's size."""

import json
import os
import subprocess
import time

from .common import KiB, MiB, cpu_seconds_of_children, pct, say, section
from .disk import print_raw, raw_fsync_bandwidth, settle
from .broker import BrokerProc, create_topic, dir_bytes, drop_topic, run_workers


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


