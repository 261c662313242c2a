"""6. log cleaner: MB/s of dirty log cleaned beside raw reads and writes of the same bytes."""

import datetime
import os
import re
import shutil
import time

from .common import GiB, MiB, say, section
from .broker import ANSI, BrokerProc, KV, create_topic, run_workers
from .retained import drop_page_cache, segment_paths


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


