"""What every section uses: paths, units, headings, percentiles, CPU seconds."""

import os
import pathlib
import resource
import time


ROOT = pathlib.Path(__file__).resolve().parents[2]
# The entry point: worker processes run it again (`bench.py _produce ...`).
ENTRY = pathlib.Path(__file__).resolve().parents[1] / "bench.py"
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


