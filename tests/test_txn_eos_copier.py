"""Exactly-once read-process-write under crashes: a confluent-kafka copier
(tests/txn_copier.py: consumer group + transactional producer +
send_offsets_to_transaction) moves 5,000 records from `in` to `out` while the
test SIGKILLs the copier 3 times and the broker 3 times, at random points of
its progress, restarting each. At the end read_committed `out` holds every
input value exactly once, each partition in input order, and the group's
committed offsets are the input's end offsets.

Rerun a failing schedule with DOZE_WIRE_SEED=<seed> (printed). Set
DOZE_COPIER_DEBUG=1 for librdkafka eos/cgrp/protocol debug in copier-*.log.
"""

import collections
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import TopicPartition

from txnutil import TXN_BROKER_SETS, end_offsets, read_to
from wireutil import DeliveryLog, consumer, create_topic, produce_all, producer, unique_topic

HERE = pathlib.Path(__file__).resolve().parent
RECORDS = 5_000
PARTITIONS = 2
COPIER_KILLS = 3
BROKER_KILLS = 3
RUN_BUDGET_S = 150
MAX_UNPLANNED_EXITS = 10
# The copier's pace (records/s): 5,000 records take ~12 s of copying, so every
# kill point is reached while it works.
COPIER_RATE = 400


class Copier:
    """The copier subprocess; its stdout is followed on a thread."""

    def __init__(self, broker, args, log_dir):
        self.broker, self.args, self.log_dir = broker, args, log_dir
        self.proc = None
        self.n = 0
        self.progress = 0          # highest COMMITTED / DONE total seen, across incarnations
        self.done = False
        self.commits = 0           # COMMITTED lines from the current incarnation
        self.lock = threading.Lock()

    def spawn(self):
        self.n += 1
        self.done = False
        self.commits = 0
        err = open(self.log_dir / f"copier-{self.n}.log", "wb")
        self.proc = subprocess.Popen([sys.executable, str(HERE / "txn_copier.py"), *self.args],
                                     stdout=subprocess.PIPE, stderr=err, text=True)
        err.close()
        threading.Thread(target=self._follow, args=(self.proc,), daemon=True).start()

    def _follow(self, proc):
        out = open(self.log_dir / f"copier-{self.n}.out", "w")
        for line in proc.stdout:
            out.write(f"{time.monotonic():.3f} {line}")
            out.flush()
            parts = line.split()
            if parts and parts[0] in ("COMMITTED", "DONE"):
                with self.lock:
                    self.progress = max(self.progress, int(parts[1]))
                    if proc is self.proc:
                        self.commits += 1
                    if parts[0] == "DONE" and proc is self.proc:
                        self.done = True

    def kill9(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def log_tail(self, lines=40):
        out = []
        for i in range(max(1, self.n - 2), self.n + 1):
            p = self.log_dir / f"copier-{i}.log"
            if p.exists():
                out.append(f"--- {p} ---")
                out.extend(p.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(out)


@pytest.mark.slow
@pytest.mark.timeout(280)
def test_eos_copier_survives_copier_and_broker_sigkills(start_broker):
    seed = int(os.environ.get("DOZE_WIRE_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"seed {seed} (rerun with DOZE_WIRE_SEED={seed})")
    broker = start_broker(sets=[*TXN_BROKER_SETS, "group.min.session.timeout.ms=1000"])
    in_topic = create_topic(broker, unique_topic("eos-in"), PARTITIONS)
    out_topic = create_topic(broker, unique_topic("eos-out"), PARTITIONS)

    p = producer(broker, **{"enable.idempotence": True})
    dr = DeliveryLog()
    produce_all(p, in_topic, [(b"k%d" % (i % 7), b"v%05d" % i) for i in range(RECORDS)], dr)
    assert not dr.errors and len(dr.acked) == RECORDS
    in_by_part = collections.defaultdict(list)
    for part, off, v in sorted(dr.acked):
        in_by_part[part].append(v)
    in_ends = end_offsets(broker, in_topic, range(PARTITIONS), "read_committed")
    assert sum(in_ends.values()) == RECORDS

    group = unique_topic("eos-group")
    copier = Copier(broker, [broker.bootstrap, in_topic, out_topic, group, unique_topic("eos-copier"),
                             str(seed), str(COPIER_RATE)], broker.log_dir)
    # Kill points: fractions of the input committed, in random order of kind.
    kinds = ["copier"] * COPIER_KILLS + ["broker"] * BROKER_KILLS
    rng.shuffle(kinds)
    points = sorted(rng.sample(range(int(RECORDS * 0.08), int(RECORDS * 0.85)), len(kinds)))
    schedule = list(zip(points, kinds))
    print(f"schedule (committed records -> kill): {schedule}")

    events, unplanned = [], []
    copier.spawn()
    t0 = time.monotonic()
    try:
        while True:
            elapsed = time.monotonic() - t0
            if elapsed >= RUN_BUDGET_S and copier.proc.poll() is None:
                copier.proc.send_signal(signal.SIGUSR1)   # its Python stack, into its log
                time.sleep(1)
            assert elapsed < RUN_BUDGET_S, (
                f"seed {seed}: copier not done after {RUN_BUDGET_S}s; progress {copier.progress}/"
                f"{RECORDS}, events {events}, unplanned copier exits {unplanned}\n{copier.log_tail()}")
            if copier.done and not schedule:
                break
            rc = copier.proc.poll()
            if rc is not None:
                assert not (rc == 0 and copier.done), (
                    f"seed {seed}: the copier finished before kill points {schedule} "
                    f"(events so far {events}): it copies too fast for this schedule")
                unplanned.append((round(elapsed, 1), rc, copier.progress))
                assert len(unplanned) <= MAX_UNPLANNED_EXITS, (
                    f"seed {seed}: copier exited on its own {len(unplanned)} times: {unplanned}\n"
                    f"{copier.log_tail()}")
                copier.spawn()
                continue
            # A copier kill waits until the current copier has committed once, so
            # that it lands in its copy loop rather than in its start-up.
            if schedule and copier.progress >= schedule[0][0] and (
                    schedule[0][1] == "broker" or copier.commits > 0):
                time.sleep(rng.uniform(0, 0.15))   # land inside a transaction, not on its edge
                point, kind = schedule.pop(0)
                events.append((kind, point, copier.progress, round(elapsed, 1)))
                if kind == "copier":
                    copier.kill9()
                    copier.spawn()
                else:
                    broker.kill9()
                    broker.start()
                continue
            time.sleep(0.02)
    finally:
        if copier.proc and copier.proc.poll() is None:
            copier.kill9()
    print(f"events (kind, point, progress at kill, t): {events}; unplanned exits {unplanned}; "
          f"copier incarnations {copier.n}; {time.monotonic() - t0:.1f}s")

    # No transaction may be left open on `out` (the copier's last one committed).
    out_hw = end_offsets(broker, out_topic, range(PARTITIONS), "read_uncommitted")
    out_lso = end_offsets(broker, out_topic, range(PARTITIONS), "read_committed")
    assert out_lso == out_hw, f"out: LSO {out_lso} != high watermark {out_hw} after the copier finished"
    got = read_to(broker, out_topic, range(PARTITIONS), "read_committed", until=out_lso, timeout_s=60)
    counts = collections.Counter(v for recs in got.values() for _, v in recs)
    expected = {b"v%05d" % i for i in range(RECORDS)}
    missing = sorted(expected - set(counts))
    dups = sorted(v for v, n in counts.items() if n > 1)
    extra = sorted(set(counts) - expected)
    assert not missing and not dups and not extra, (
        f"seed {seed}: read_committed out holds {sum(counts.values())} records: "
        f"{len(missing)} inputs missing (e.g. {missing[:5]}), {len(dups)} duplicated "
        f"(e.g. {[(v, counts[v]) for v in dups[:5]]}), {len(extra)} unknown; events {events}")
    for part in range(PARTITIONS):
        assert [v for _, v in got[part]] == in_by_part[part], (
            f"seed {seed}: out[{part}] is not in[{part}] in order")

    c = consumer(broker, **{"group.id": group})
    try:
        committed = c.committed([TopicPartition(in_topic, q) for q in range(PARTITIONS)], timeout=30)
    finally:
        c.close()
    assert {tp.partition: tp.offset for tp in committed} == in_ends, (
        f"group {group} committed {committed}, input ends {in_ends}")
