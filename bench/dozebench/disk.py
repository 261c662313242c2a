"""1. disk: raw write + fdatasync bandwidth and latency, and the settle before each run."""

import os
import time

from .common import MiB, pct, say


# --- 1. disk -------------------------------------------------------------------

def settle(args):
    """Writes back what is dirty, then waits `--settle-s`: the next write
    then lands in memory long free, as every other measured write does.

    Why: on this VM (Firecracker; its balloon device reports free pages to
    the host), writing into memory freed a few seconds before costs about
    half the CPU of writing into memory long free. A run right after a
    deleted topic, a stopped broker or the raw run's removed file is that
    much cheaper: doze took 2.7-4.3 s of CPU and made 385-524 MB/s with a
    topic deleted ~3 s before each run, against 5.9-6.3 s and 346-360 MB/s
    with every topic kept, and 6.1-6.3 s and 342-358 MB/s 20 s after a
    deletion (peer_produce_turns). Section 2's raw runs came right after
    the broker's topic was deleted: raw at 9.5 MiB chunks made 1,117 MB/s
    there, against 319 MB/s in section 7, where the topic is kept."""
    os.sync()
    time.sleep(args.settle_s)


def raw_fsync_bandwidth(directory, chunk_bytes, min_bytes, min_s, max_s):
    """Appends `chunk_bytes` at a time to a new file, fdatasync after each.

    Runs at least `min_s` and at least `min_bytes` (never longer than `max_s`),
    after a short uncounted warm-up. Returns (MB/s, bytes, syncs, seconds,
    per-sync latencies in seconds).
    """
    path = os.path.join(directory, "raw-fsync.bin")
    buf = os.urandom(chunk_bytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    written = 0
    lat = []
    try:
        for _ in range(4):  # warm-up: allocate, settle the journal
            os.write(fd, buf)
            os.fdatasync(fd)
        t0 = time.monotonic()
        while True:
            now = time.monotonic()
            elapsed = now - t0
            if elapsed >= max_s or (written >= min_bytes and elapsed >= min_s):
                break
            n = os.write(fd, buf)
            assert n == len(buf)
            os.fdatasync(fd)
            lat.append(time.monotonic() - now)
            written += n
        elapsed = time.monotonic() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return written / elapsed / 1e6, written, len(lat), elapsed, lat


def print_raw(label, r):
    mbps, written, syncs, el, lat = r
    say(f"{label}: {mbps:8.1f} MB/s  ({written / MiB:.0f} MiB, {syncs} fdatasyncs, "
        f"{syncs / el:.0f}/s, fdatasync p50 {pct(lat, 50) * 1e3:.2f} ms, {el:.1f} s)")


