"""5. retained data: a broker holding `--retained-gib` GiB: RSS, start-up, cold and warm reads."""

import glob
import math
import os
import shutil
import threading
import time

from .common import GiB, KiB, MiB, say, section
from .broker import BrokerProc, create_topic, dir_bytes, run_workers
from .produce import run_loadgen
from .fetch import consume_all


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


