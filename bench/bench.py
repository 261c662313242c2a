#!/usr/bin/env python3
"""doze-kafka benchmark: how close does acks=all produce get to the disk's fsync bandwidth?

Sections (each prints its own figures; later ones are placeholders to fill):
  1. raw     sequential write + fdatasync bandwidth of the data dir's filesystem,
             in chunks of the size one group commit would see
  2. produce the release broker on a temp data dir on the same filesystem,
             N x 1 KiB records with acks=all from confluent-kafka
  3. summary both figures and the ratio broker / raw
  (later)    transactions per second, consume bandwidth, ...

Run with `make bench`. Bounded: every phase has a time limit.
"""

import argparse
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
MiB = 1024 * 1024


def section(title):
    print(f"\n== {title} ==", flush=True)


# --- 1. raw write + fdatasync -------------------------------------------------

def raw_fsync_bandwidth(directory, chunk_bytes, total_bytes, min_s, max_s):
    """Append `chunk_bytes` at a time to one file, fdatasync after each; MB/s.

    Writes at least `total_bytes` or for at least `min_s` (whichever is more),
    never longer than `max_s`. A short warm-up (not counted) comes first.
    """
    path = os.path.join(directory, "raw-fsync.bin")
    buf = os.urandom(chunk_bytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = 0
    syncs = 0
    try:
        for _ in range(8):   # warm-up: allocate, settle the journal
            os.write(fd, buf)
            os.fdatasync(fd)
        t0 = time.monotonic()
        while True:
            elapsed = time.monotonic() - t0
            if elapsed >= max_s or (written >= total_bytes and elapsed >= min_s):
                break
            n = os.write(fd, buf)
            assert n == len(buf)
            os.fdatasync(fd)
            written += n
            syncs += 1
        elapsed = time.monotonic() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return written / elapsed / 1e6, written, syncs, elapsed


# --- 2. broker produce ----------------------------------------------------------

def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProc:
    def __init__(self, binary, data_dir, sets):
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        os.makedirs(data_dir, exist_ok=True)
        self.log_path = os.path.join(os.path.dirname(data_dir), "broker.log")
        args = [binary, "--listen", self.bootstrap, "--data-dir", data_dir]
        for s in sets:
            args += ["--set", s]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.log)
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.log.write(line)
                if b"doze-kafka listening on" in line:
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + 30
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                self.log.flush()
                tail = open(self.log_path, "rb").read()[-4000:].decode(errors="replace")
                sys.exit(f"broker did not start (exit {self.proc.returncode}); log tail:\n{tail}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def produce_bandwidth(bootstrap, records, record_bytes, partitions, max_s):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-{os.getpid()}"
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(topic, partitions, 1)], request_timeout=30)[topic].result(timeout=30)

    p = Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": False,
        "linger.ms": 5,
        "batch.size": MiB,
        "compression.type": "none",
        "queue.buffering.max.kbytes": 512 * 1024,
        "queue.buffering.max.messages": 1_000_000,
    })
    value = os.urandom(record_bytes)
    acked = 0
    errors = []

    def dr(err, _msg):
        nonlocal acked
        if err is None:
            acked += 1
        elif len(errors) < 5:
            errors.append(err)

    t0 = time.monotonic()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=value, key=str(i % 64).encode(), on_delivery=dr)
                break
            except BufferError:
                p.poll(0.01)
        if time.monotonic() - t0 > max_s:
            break
    left = p.flush(max(1.0, max_s - (time.monotonic() - t0)))
    elapsed = time.monotonic() - t0
    if left or errors:
        print(f"  WARNING: {left} undelivered, errors: {errors}")
    return acked * record_bytes / elapsed / 1e6, acked, elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(ROOT / "target/release/doze-kafka"))
    ap.add_argument("--work-dir", default=str(ROOT / "target/bench"),
                    help="parent of the temp dirs (raw file and broker data dir share its filesystem)")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--chunk-kib", type=int, nargs="+", default=[256, 1024],
                    help="raw fdatasync chunk sizes; the ratio uses the first")
    ap.add_argument("--raw-mib", type=int, default=256, help="raw bytes per chunk size (MiB)")
    ap.add_argument("--raw-min-s", type=float, default=5, help="minimum seconds per chunk size")
    ap.add_argument("--max-s", type=float, default=120, help="time limit per phase")
    ap.add_argument("--set", action="append", default=[], help="broker --set key=value")
    args = ap.parse_args()

    os.makedirs(args.work_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="doze-bench-", dir=args.work_dir)
    try:
        section("1. raw sequential write + fdatasync")
        print(f"  filesystem of {work}")
        raw = {}
        for kib in args.chunk_kib:
            mbps, written, syncs, el = raw_fsync_bandwidth(work, kib * 1024, args.raw_mib * MiB,
                                                           args.raw_min_s, min(args.max_s, 30))
            raw[kib] = mbps
            print(f"  chunk {kib:5d} KiB: {mbps:8.1f} MB/s  ({written / MiB:.0f} MiB, "
                  f"{syncs} fdatasyncs, {syncs / el:.0f} fdatasync/s, {el:.1f} s)", flush=True)

        section("2. broker produce, acks=all")
        data_dir = os.path.join(work, "data")
        b = BrokerProc(args.binary, data_dir, args.set)
        try:
            print(f"  {args.records} x {args.record_bytes} B, {args.partitions} partition(s), "
                  f"linger.ms=5 batch.size=1MiB compression=none, broker {b.bootstrap}", flush=True)
            mbps, acked, el = produce_bandwidth(b.bootstrap, args.records, args.record_bytes,
                                                args.partitions, args.max_s)
            print(f"  {mbps:8.1f} MB/s  ({acked} acked in {el:.1f} s, {acked / el:,.0f} records/s)")
        finally:
            rc = b.stop()
            if rc != 0:
                print(f"  WARNING: broker exited {rc} on SIGTERM (log {b.log_path})")

        section("3. summary")
        ref = args.chunk_kib[0]
        print(f"  raw fdatasync ({ref} KiB chunks): {raw[ref]:8.1f} MB/s")
        print(f"  broker acks=all produce:      {mbps:8.1f} MB/s")
        print(f"  ratio broker/raw:             {mbps / raw[ref]:8.2f}")
        for kib in args.chunk_kib[1:]:
            print(f"  (ratio vs {kib} KiB chunks:    {mbps / raw[kib]:8.2f})")

        # section("4. transactions per second")  -- to come once EndTxn works
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
