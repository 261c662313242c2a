"""Hostile record batches cost bounded memory and time (issue 38, rows B-F),
and every attack at once for a minute.

Raw frames on loopback against the release binary; batches of millions of
records are built by hand (tests/hostile.py: `record`, `gzip_repeated`,
`gzip_sequential`, `batch_of`), gzip'd, since the venv has no zstd or lz4:

- B: 6.7 M identical 7-byte records at offset delta 0, gzip'd into 68 KB, to
  a topic storing lz4 (a rebuild): MESSAGE_TOO_LARGE from the header's count
  alone (`limits::BATCH_RECORDS_MAX`); and 1 M such records, the most the
  count takes, whose rebuild with real offset deltas would pass
  max.message.bytes: MESSAGE_TOO_LARGE once the writing passes it. Sent
  over and over from a few connections.
- C: a stored batch of 1 M records (the most a client can store now; a batch
  of 2 M is refused, MESSAGE_TOO_LARGE), its console partition page viewed
  over and over, from its start, middle and end.
- E: the same batch on a compacted topic whose segments roll each second, the
  cleaner looking every 200 ms: the partition is cleaned (the batch is
  rebuilt to its key's latest record) while the well-behaved client is timed.
- F: 9.5 M records at delta 0 to a compacted topic are refused at produce
  (the count); records just under the readers' decompressed bound
  (`limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX`, 64 MiB) at delta 0, to a
  topic storing lz4, would decompress past it once rebuilt: refused
  MESSAGE_TOO_LARGE; a thousand fewer are stored, and then cleaned.
- All together: A (tests/test_hostile_produce.py), G and H (tests/test_hostile.py)
  with B, C and E for 60 s.

Each test measures, as tests/test_hostile.py does, the broker's VmHWM over
its idle RSS (bound: +256 MiB) and a well-behaved client's Metadata and 1 KiB
acks=all produce (p99 bound: 200 ms) while the attack runs; every figure is
printed (pytest -s).
"""

import collections
import functools
import struct
import threading
import time
import urllib.request

import pytest

from conftest import free_ports
from hostile import (Hog, Prober, batch_of, gzip_repeated, gzip_sequential, record,
                     request_header)
from rawkafka import RawConn
from test_hostile_produce import repeating_produce
from test_hostile import (ATTACK_S, HWM_ATTACK_MIB_MAX, check_latency, rss_mib, settle)
from wireutil import create_topic, unique_topic

MIB = 1024 * 1024
MESSAGE_TOO_LARGE = 10
# Row B's batch, as the issue measured it.
ROW_B_RECORDS = 6_700_000
# limits::BATCH_RECORDS_MAX: the most records a batch may hold.
RECORDS_MAX = 1_000_000
# Row F's batch: 9.5 M records at delta 0.
ROW_F_RECORDS = 9_500_000
# limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX, and records of 1 KiB that
# fill it exactly at offset delta 0 (a 2-byte length, the key "k", 1014
# bytes of value): rebuilt with their own deltas each grows by a byte or two.
DECOMPRESSED_BYTES_MAX = 64 * MIB
FULL_RECORD = record(0, b"k", bytes(1014))
# Topic settings: batches of the stored kind (1.4 MB gzip'd) fit.
STORED_TOPIC = {"max.message.bytes": str(8 * MIB)}
# A compacted topic whose segments roll each second (so the batch's segment
# closes at the next append), cleaned as soon as it is dirty at all.
COMPACT_TOPIC = {
    "cleanup.policy": "compact",
    "segment.ms": "1000",
    "segment.bytes": str(16 * MIB),
    "max.message.bytes": str(8 * MIB),
    "min.cleanable.dirty.ratio": "0.01",
}
# The broker looks for a dirty log every 200 ms (tests/test_compaction.py).
CLEANER_SETS = ("log.cleaner.backoff.ms=200",)
CLEAN_WAIT_S = 30
# Row E: the slowest Metadata answer while the cleaner runs (a core stall).
E_METADATA_MS_MAX = 600.0
ALL_TOGETHER_S = 60.0


@functools.lru_cache(maxsize=None)
def row_b_batch():
    """6.7 M copies of the 7-byte record at delta 0: 68 KB."""
    return batch_of(gzip_repeated(record(), ROW_B_RECORDS), ROW_B_RECORDS)


@functools.lru_cache(maxsize=None)
def rebuild_batch():
    """1 M copies of the 7-byte record at delta 0: within the count bound,
    so a topic storing another codec rebuilds it, and the rebuilt records
    (9 MB with their deltas) pass max.message.bytes."""
    return batch_of(gzip_repeated(record(), RECORDS_MAX), RECORDS_MAX)


@functools.lru_cache(maxsize=None)
def stored_batch():
    """1 M records of the key "k", offset deltas 0..999,999, empty values:
    1.4 MB gzip'd, 8.9 MB plain. Built once a session (about 15 s)."""
    return batch_of(gzip_sequential(RECORDS_MAX, key=b"k"), RECORDS_MAX)


def produce_once(broker, topic, batch, timeout_s=60):
    c = RawConn(broker.host, broker.port, timeout_s=timeout_s)
    try:
        return c.produce(topic, 0, batch, acks=-1)
    finally:
        c.close()


def first_batch(broker, topic, offset=0):
    """(base offset, records count) of the first batch a Fetch from
    `offset` returns, or None for none."""
    c = RawConn(broker.host, broker.port, timeout_s=30)
    try:
        err, _hw, records = c.fetch(topic, 0, offset, max_wait_ms=0,
                                    partition_max_bytes=16 * MIB, max_bytes=16 * MIB)
    finally:
        c.close()
    assert err == 0, f"Fetch of {topic} answered {err}"
    if len(records) < 61:
        return None
    return struct.unpack(">q", records[:8])[0], struct.unpack(">i", records[57:61])[0]


class Attack:
    """Threads that repeat `step()` until stopped; `step` counts what it saw
    in `self.seen` and appends anything unexpected to `self.errors`."""

    name = "attack"
    threads = 1

    def __init__(self):
        self.stop = threading.Event()
        self.seen = collections.Counter()
        self.errors = []
        self.lock = threading.Lock()
        self.workers = []

    def count(self, what):
        with self.lock:
            self.seen[what] += 1

    def _run(self, i):
        state = {}
        while not self.stop.is_set():
            try:
                self.step(i, state)
            except Exception as e:  # noqa: BLE001 (reported, and the test fails)
                self.errors.append(f"{self.name}: {e!r}")
                self.stop.wait(0.5)
        self.finish(state)

    def step(self, i, state):
        raise NotImplementedError

    def finish(self, state):
        for v in state.values():
            close = getattr(v, "close", None)
            if close:
                close()

    def start(self):
        for i in range(self.threads):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self.workers.append(t)
        return self

    def halt(self):
        self.stop.set()
        for t in self.workers:
            t.join(60)
        assert not any(t.is_alive() for t in self.workers), f"{self.name} did not stop"

    def report(self):
        print(f"{self.name}: {dict(self.seen)}, errors {self.errors[:3]}")


class Producing(Attack):
    """Row B: `threads` connections, each sending `batches` in turn, every
    one answered MESSAGE_TOO_LARGE."""

    name = "B"
    threads = 3

    def __init__(self, broker, topic, batches):
        super().__init__()
        self.broker, self.topic, self.batches = broker, topic, batches

    def step(self, i, state):
        if "conn" not in state:
            state["conn"] = RawConn(self.broker.host, self.broker.port, timeout_s=60)
        n = state.get("n", i)
        state["n"] = n + 1
        err, _ = state["conn"].produce(self.topic, 0, self.batches[n % len(self.batches)])
        self.count(f"error {err}")
        if err != MESSAGE_TOO_LARGE:
            self.errors.append(f"B: a hostile batch answered {err}")


class Repeating(Attack):
    """Row A: `threads` connections, each sending one Produce naming the same
    partition thousands of times, each entry a small zstd batch
    (tests/test_hostile_produce.py), answered once, from its last entry."""

    name = "A"
    threads = 2

    def __init__(self, broker, topic):
        super().__init__()
        self.broker = broker
        self.body, _ = repeating_produce(topic)

    def step(self, i, state):
        if "conn" not in state:
            state["conn"] = RawConn(self.broker.host, self.broker.port, timeout_s=60)
        r = state["conn"].request(0, 3, self.body)
        # Produce v3's answer: topics [name, partitions [index, error_code,
        # ...]]; the first partition's error.
        at = 4 + 2 + struct.unpack_from(">h", r, 4)[0]
        err = struct.unpack_from(">h", r, at + 4 + 4)[0]
        self.count(f"error {err}")
        if err != 0:
            self.errors.append(f"A: the repeated partition answered {err}")


class Viewing(Attack):
    """Row C: `threads` browsers viewing the partition page of a stored batch
    of `records` records: its start, middle and last page."""

    name = "C"
    threads = 2

    def __init__(self, console_url, topic, records):
        super().__init__()
        self.pages = [(f"{console_url.rstrip('/')}/topics/{topic}/0?from={at}", at)
                      for at in (0, records // 2, records - 500)]

    def step(self, i, state):
        n = state.get("n", i)
        state["n"] = n + 1
        url, at = self.pages[n % len(self.pages)]
        start = time.monotonic()
        with urllib.request.urlopen(url, timeout=60) as r:
            status, body = r.status, r.read().decode()
        self.count("views")
        with self.lock:
            self.seen["slowest view ms"] = max(self.seen["slowest view ms"],
                                               int((time.monotonic() - start) * 1000))
        if status != 200 or f'data-offset="{at}"' not in body:
            self.errors.append(f"C: {url} answered {status} without record {at}")


class Compacting(Attack):
    """Row E: the stored batch produced to a compacted topic every
    `every_s`, each superseding the last one's records (one key), so that a
    cleaner pass rebuilds a batch of a million records each time."""

    name = "E"

    def __init__(self, broker, topic, every_s=4.0):
        super().__init__()
        self.broker, self.topic, self.every_s = broker, topic, every_s

    def step(self, i, state):
        err, _ = produce_once(self.broker, self.topic, stored_batch())
        self.count(f"produce error {err}")
        if err != 0:
            self.errors.append(f"E: the stored batch answered {err}")
        self.stop.wait(self.every_s)


class Hogging(Attack):
    """Rows G and H: `hogs()` opens fresh hostile connections every
    `every_s` (before authentication the core closes them after 10 s), which
    are pushed meanwhile."""

    name = "GH"

    def __init__(self, name, hogs, every_s):
        super().__init__()
        self.name, self.hogs, self.every_s = name, hogs, every_s

    def step(self, i, state):
        hogs = self.hogs()
        self.count("rounds")
        end = time.monotonic() + self.every_s
        while time.monotonic() < end and not self.stop.is_set():
            for h in hogs:
                h.pump(0.05)
        with self.lock:
            self.seen["open at the round's end"] = sum(h.open_count() for h in hogs)
        for h in hogs:
            h.close()


def timed_with(broker, topic, attacks, seconds):
    """The well-behaved client's latencies while `attacks` run."""
    for a in attacks:
        a.start()
    prober = Prober(broker.host, broker.port, topic)
    try:
        prober.run(seconds)
    finally:
        for a in attacks:
            a.halt()
        prober.close()
    for a in attacks:
        a.report()
    return prober


def check_memory(broker, idle, what):
    rss, hwm = rss_mib(broker)
    print(f"{what}: idle {idle:.0f} MiB, VmHWM {hwm:.0f} MiB (+{hwm - idle:.0f}), "
          f"RSS {rss:.0f} MiB")
    assert hwm - idle <= HWM_ATTACK_MIB_MAX, f"{what}: VmHWM +{hwm - idle:.0f} MiB"


def row_b_under_attack(broker, batch, what):
    """Row B's attack: `batch` (to a topic storing lz4, so that it would be
    rebuilt) sent once, timed, then over and over from three connections
    while the well-behaved client is timed; each answered
    MESSAGE_TOO_LARGE and nothing stored."""
    probe = create_topic(broker, unique_topic("hostile-b-probe"), 1)
    topic = create_topic(broker, unique_topic("hostile-b"), 1, {"compression.type": "lz4"})
    idle = settle(broker, probe)
    start = time.monotonic()
    err, _ = produce_once(broker, topic, batch)
    print(f"{what}: a {len(batch)}-byte batch answered {err} in "
          f"{(time.monotonic() - start) * 1000:.0f} ms")
    assert err == MESSAGE_TOO_LARGE, f"{what}: answered {err}"
    attack = Producing(broker, topic, [batch])
    attack.name = what
    prober = timed_with(broker, probe, [attack], ATTACK_S)
    check_memory(broker, idle, what)
    check_latency(prober, what)
    assert not attack.errors, attack.errors[:5]
    assert sum(attack.seen.values()) >= 6, attack.seen
    assert first_batch(broker, topic) is None, "nothing stored"


@pytest.mark.timeout(180)
def test_row_b_millions_of_records_are_refused_unread(broker):
    """The issue's row B: 6.7 M records in 68 KB, refused by their count."""
    batch = row_b_batch()
    assert len(batch) < 80_000, len(batch)
    row_b_under_attack(broker, batch, "B")


@pytest.mark.timeout(180)
def test_row_b_a_rebuild_at_the_count_bound(broker):
    """Row B at the count bound: 1 M of the same records, which the broker
    reads (decompresses and checks) and starts to rebuild before it finds
    the rebuilt batch too large."""
    row_b_under_attack(broker, rebuild_batch(), "B at the count bound")


@pytest.mark.timeout(180)
def test_row_c_console_pages_of_a_batch_of_a_million_records(start_broker):
    b = start_broker(console=True)
    assert b.console_url, "the console's URL"
    probe = create_topic(b, unique_topic("hostile-c-probe"), 1)
    topic = create_topic(b, unique_topic("hostile-c"), 1, STORED_TOPIC)
    # Twice the count bound is refused: no batch of millions is stored now.
    twice = batch_of(gzip_repeated(record(), 2 * RECORDS_MAX), 2 * RECORDS_MAX)
    assert produce_once(b, topic, twice)[0] == MESSAGE_TOO_LARGE
    batch = stored_batch()
    idle = settle(b, probe)
    assert produce_once(b, topic, batch) == (0, 0)
    print(f"C: {RECORDS_MAX} records stored in a {len(batch)}-byte batch")
    attack = Viewing(b.console_url, topic, RECORDS_MAX)
    prober = timed_with(b, probe, [attack], ATTACK_S)
    check_memory(b, idle, "C")
    check_latency(prober, "C")
    assert not attack.errors, attack.errors[:5]
    assert attack.seen["views"] >= 6, attack.seen


def cleaned(first, records):
    """Whether the log's first batch, `first` (base offset, count), is no
    longer the batch of `records` records stored at offset 0: a cleaner
    pass removed it or rebuilt it with the records it keeps."""
    return first is not None and (first[0] > 0 or first[1] < records)


def wait_cleaned(broker, topic, records, timeout_s=CLEAN_WAIT_S):
    """Waits until `cleaned`; returns the first batch from offset 0."""
    deadline = time.monotonic() + timeout_s
    first = first_batch(broker, topic)
    while time.monotonic() < deadline and not cleaned(first, records):
        time.sleep(0.5)
        first = first_batch(broker, topic)
    return first


@pytest.mark.timeout(180)
def test_rows_e_f_the_cleaner_over_a_batch_of_a_million_records(start_broker):
    b = start_broker(sets=CLEANER_SETS)
    probe = create_topic(b, unique_topic("hostile-e-probe"), 1)
    topic = create_topic(b, unique_topic("hostile-e"), 1, COMPACT_TOPIC)
    batch = stored_batch()
    # Row F, the count: 9.5 M records at delta 0 are refused unread.
    f_count = batch_of(gzip_repeated(record(0, b"k"), ROW_F_RECORDS), ROW_F_RECORDS)
    assert produce_once(b, topic, f_count)[0] == MESSAGE_TOO_LARGE
    idle = settle(b, probe)

    stop = threading.Event()
    prober = Prober(b.host, b.port, probe)
    timing = threading.Thread(target=prober.run_until, args=(stop,), daemon=True)
    timing.start()
    try:
        start = time.monotonic()
        assert produce_once(b, topic, batch) == (0, 0)
        print(f"E: {RECORDS_MAX} records stored in {(time.monotonic() - start) * 1000:.0f} ms")
        # A second later one more record of the key rolls the segment and
        # supersedes the batch's records: a cleaner pass rebuilds it.
        time.sleep(1.2)
        assert produce_once(b, topic, batch_of(gzip_sequential(1, key=b"k"), 1)) == (0, RECORDS_MAX)
        time.sleep(1.2)
        assert produce_once(b, topic, batch_of(gzip_sequential(1, key=b"k"), 1))[0] == 0
        start = time.monotonic()
        first = wait_cleaned(b, topic, RECORDS_MAX)
        print(f"E: first batch from offset 0 {first} after "
              f"{time.monotonic() - start:.1f} s")
        timing_s = max(0.0, ATTACK_S - (time.monotonic() - start))
        time.sleep(timing_s)
    finally:
        stop.set()
        timing.join(30)
        prober.close()
    check_memory(b, idle, "E")
    check_latency(prober, "E")
    # The p99 bar above holds even with one stall (a pass is one or two
    # of the probe's rounds); a Metadata answer, which waits for nothing
    # but the core, shows a stall whole. With the pass's work on the core
    # the slowest took 1.2-1.6 s here (2 cores, other builds running);
    # beside it, 0.11-0.12 s.
    slowest = max(prober.metadata_ms)
    assert slowest <= E_METADATA_MS_MAX, f"E: a Metadata answer took {slowest:.0f} ms"
    assert cleaned(first, RECORDS_MAX), (
        f"the batch of {RECORDS_MAX} records was not cleaned within {CLEAN_WAIT_S} s: {first}")

    # Row F, the rebuilt size: records just filling the decompressed bound
    # at delta 0, to a compacted topic storing lz4, grow past it rebuilt.
    f_topic = create_topic(b, unique_topic("hostile-f"), 1, {
        **COMPACT_TOPIC, "compression.type": "lz4", "max.message.bytes": str(64 * MIB),
        "segment.bytes": str(128 * MIB)})
    full = DECOMPRESSED_BYTES_MAX // len(FULL_RECORD)
    reset_idle = settle(b, probe)
    err, _ = produce_once(b, f_topic, batch_of(gzip_repeated(FULL_RECORD, full, 4096), full))
    print(f"F: {full} records of {len(FULL_RECORD)} bytes at delta 0 answered {err}")
    assert err == MESSAGE_TOO_LARGE
    assert first_batch(b, f_topic) is None, "nothing stored"
    fewer = full - 1000
    assert produce_once(b, f_topic, batch_of(gzip_repeated(FULL_RECORD, fewer, 4096), fewer)) \
        == (0, 0)
    # Then cleaned as any batch: a newer record of its key supersedes it.
    time.sleep(1.2)
    assert produce_once(b, f_topic, batch_of(gzip_sequential(1, key=b"k"), 1))[0] == 0
    time.sleep(1.2)
    assert produce_once(b, f_topic, batch_of(gzip_sequential(1, key=b"k"), 1))[0] == 0
    first = wait_cleaned(b, f_topic, fewer)
    print(f"F: {fewer} records stored; first batch from offset 0 then {first}")
    check_memory(b, reset_idle, "F")
    assert cleaned(first, fewer), f"not cleaned: {first}"


def all_attacks_broker(start_broker):
    """A broker with a SASL listener (H), the console (C) and a quick
    cleaner (E); returns it and the SASL port."""
    plain, sasl = free_ports(2)
    b = start_broker(sets=[f"listeners=PLAINTEXT://127.0.0.1:{plain},"
                           f"SASL_PLAINTEXT://127.0.0.1:{sasl}", *CLEANER_SETS],
                     name="hostile-all", listen_port=plain, console=True)
    return b, sasl


def start_row_g(b, _sasl, _topics):
    """G: 400 connections holding 4 MiB of a declared 32 MiB Produce."""
    return Hogging("G", lambda: [Hog(b.host, b.port, 400, 32 * MIB, 4 * MIB,
                                     first=request_header(0, 3))], every_s=ALL_TOGETHER_S)


def start_row_h(b, sasl, _topics):
    """H, before authentication: 100 frames past the 512 KiB limit (closed at
    once) and 300 at it, half sent; renewed every 8 s, within the 10 s the
    core gives a connection to log in."""
    return Hogging("H", lambda: [
        Hog(b.host, sasl, 100, 32 * MIB, 4 * MIB, first=request_header(17, 1)),
        Hog(b.host, sasl, 300, 512 * 1024, 256 * 1024, first=request_header(17, 1))],
        every_s=8.0)


def start_row_a(b, _sasl, topics):
    return Repeating(b, topics["a"])


def start_row_b(b, _sasl, topics):
    return Producing(b, topics["b"], [row_b_batch()])


def start_row_c(b, _sasl, topics):
    return Viewing(b.console_url, topics["c"], RECORDS_MAX)


def start_row_e(b, _sasl, topics):
    return Compacting(b, topics["e"])


# Every attack of the all-together test, each `start(broker, sasl_port,
# topics) -> Attack`.
ATTACK_STARTERS = [start_row_a, start_row_g, start_row_h, start_row_b, start_row_c, start_row_e]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_all_attacks_together_for_a_minute(start_broker):
    b, sasl = all_attacks_broker(start_broker)
    assert b.console_url, "the console's URL"
    probe = create_topic(b, unique_topic("hostile-all-probe"), 1)
    topics = {
        "a": create_topic(b, unique_topic("hostile-all-a"), 1),
        "b": create_topic(b, unique_topic("hostile-all-b"), 1, {"compression.type": "lz4"}),
        "c": create_topic(b, unique_topic("hostile-all-c"), 1, STORED_TOPIC),
        "e": create_topic(b, unique_topic("hostile-all-e"), 1, COMPACT_TOPIC),
    }
    row_b_batch()
    assert produce_once(b, topics["c"], stored_batch()) == (0, 0)
    idle = settle(b, probe)
    attacks = [start(b, sasl, topics) for start in ATTACK_STARTERS]
    prober = timed_with(b, probe, attacks, ALL_TOGETHER_S)
    check_memory(b, idle, "all together")
    check_latency(prober, "all together")
    by_name = {a.name: a for a in attacks}
    for a in attacks:
        assert not a.errors, f"{a.name}: {a.errors[:5]}"
    # Each attack ran: G's connections held (muted, not closed), H's
    # renewed through the minute, B answered, C's pages were served, E's
    # batches stored, and a cleaner pass rebuilt one.
    assert by_name["A"].seen["error 0"] >= 3, by_name["A"].seen
    assert by_name["G"].seen["open at the round's end"] == 400, by_name["G"].seen
    assert by_name["H"].seen["rounds"] >= 5, by_name["H"].seen
    assert by_name["B"].seen[f"error {MESSAGE_TOO_LARGE}"] >= 3, by_name["B"].seen
    assert by_name["C"].seen["views"] >= 3, by_name["C"].seen
    assert by_name["E"].seen["produce error 0"] >= 3, by_name["E"].seen
    first = wait_cleaned(b, topics["e"], RECORDS_MAX, timeout_s=10)
    print(f"all together: first batch of the compacted topic {first}")
    assert cleaned(first, RECORDS_MAX), f"E's topic was not cleaned: {first}"
