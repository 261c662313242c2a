"""8. callgrind: instructions per produced record, per one-record request, per fetched MiB."""

import os
import shutil
import time

from .common import MiB, say, section
from .broker import BrokerProc, create_topic
from .peers import run_loadgen_why


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


