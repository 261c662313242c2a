"""3. transactions: commits/s at 1, 8 and 64 producers, EndTxn latency, the cost of each durable step."""

import os
import time

from .common import cpu_seconds_of_children, pct, say, section
from .disk import raw_fsync_bandwidth
from .broker import BrokerProc, create_topic, run_workers
from .produce import run_loadgen


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
    # commits: all of them, warm-up included (what the broker's CPU paid for)
    merged = {"in_window": 0, "commits": 0, "commit_lat": [], "flush_lat": [], "cycle_lat": [],
              "producers": 0}
    for r in results:
        merged["in_window"] += r["in_window"]
        merged["commits"] += r["commits"]
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


