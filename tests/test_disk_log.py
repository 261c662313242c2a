"""The partition log on disk: segments and their indexes, read back after restarts.

Every broker here runs with small segments (`log.segment.bytes` = 32 KiB), so a
few hundred KiB of records make tens of segments, and each segment has Kafka's
files beside it in `<data_dir>/logs/<topic>-<partition>/`:

    {base_offset:020}.log        the record batches, as the client sent them
    {base_offset:020}.index      sparse: (last offset of a batch - base u32, its position u32)
    {base_offset:020}.timeindex  sparse: (max timestamp so far i64, relative offset u32)
    {base_offset:020}.txnindex   aborted transactions, 34 bytes each: version i16,
                                 producer id, first offset, last offset, LSO (i64)

The tests:

- every record (offset, key, value, headers, timestamp) reads back the same
  from offset 0 after a clean restart and after kill -9, and the index files
  of a cleanly stopped broker point at real batches of their `.log`;
- read_committed across many segments with aborted transactions (confluent-kafka
  and kafka-python) after restarts, the `.txnindex` entries against the abort
  markers in the `.log` files, and again after the index files were deleted
  (they are a cache of the batch headers and must be rebuilt);
- ListOffsets by timestamp (offsets_for_times) across segment boundaries;
- size-based retention removes whole segments with their indexes, and the log
  start offset is the first remaining segment's base offset;
- a `.log` file lost (deleted, or truncated) under a running broker: a Fetch of
  it is answered or its connection closed, never left hanging, and the broker
  keeps serving the other partitions.

The `.log` parser below reads only batch headers (and a control record's key);
the checks on index contents follow the entry layouts above.
"""

import bisect
import os
import pathlib
import random
import re
import socket
import struct
import time

import pytest
from confluent_kafka import (OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, KafkaError, Producer,
                             TopicPartition)
from kafka import KafkaConsumer
from kafka import TopicPartition as KpyTopicPartition

from rawkafka import RawConn
from txnutil import TXN_BROKER_SETS, end_offsets, read_to, txn_producer_conf, wait_until
from wireutil import (DeliveryLog, consumer, create_topic, produce_all, producer, read_all,
                      unique_topic, watermarks)

SEGMENT_BYTES = 32 * 1024
SEGMENT_SET = f"log.segment.bytes={SEGMENT_BYTES}"
MIN_SEGMENTS = 10

# --- the files of a partition --------------------------------------------------------

SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
BATCH_HEADER_BYTES = 61
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
CONTROL_ABORT, CONTROL_COMMIT = 0, 1
OFFSET_ENTRY_BYTES = 8
TIME_ENTRY_BYTES = 12
TXN_ENTRY_BYTES = 34


def partition_dir(broker, topic, partition):
    return pathlib.Path(broker.data_dir) / "logs" / f"{topic}-{partition}"


def segment_files(pdir):
    """{base_offset: {extension: path}} of the segment files in `pdir` (other
    files, e.g. `*.deleted` or checkpoints, are left out)."""
    out = {}
    for entry in os.scandir(pdir):
        m = SEGMENT_FILE.match(entry.name)
        if m:
            out.setdefault(int(m.group(1)), {})[m.group(2)] = pathlib.Path(entry.path)
    return out


def log_bases(pdir):
    return sorted(base for base, files in segment_files(pdir).items() if "log" in files)


def _varint(buf, pos):
    """Kafka's zigzag varint at `pos`: (value, next position)."""
    shift = raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


class Batch:
    __slots__ = ("position", "size", "base_offset", "last_offset", "attributes", "max_timestamp",
                 "producer_id", "control_type")

    @property
    def is_control(self):
        return bool(self.attributes & ATTR_CONTROL)


def read_batches(log_path):
    """Batch headers of a `.log` file, in file order, and the count of bytes after
    the last whole batch (0 for a file that holds only whole batches)."""
    data = pathlib.Path(log_path).read_bytes()
    batches, pos = [], 0
    while pos + BATCH_HEADER_BYTES <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if length < BATCH_HEADER_BYTES - 12 or pos + 12 + length > len(data):
            break
        b = Batch()
        b.position, b.size, b.base_offset = pos, 12 + length, base
        magic = data[pos + 16]
        assert magic == 2, f"{log_path}: batch at position {pos} has magic {magic}"
        b.attributes, delta = struct.unpack_from(">hi", data, pos + 21)
        b.last_offset = base + delta
        b.max_timestamp, b.producer_id = struct.unpack_from(">qq", data, pos + 35)
        b.control_type = None
        if b.is_control:
            # One control record: length, attributes, timestamp delta, offset
            # delta, key length, key = (version i16, type i16).
            rp = pos + BATCH_HEADER_BYTES
            _, rp = _varint(data, rp)
            rp += 1
            _, rp = _varint(data, rp)
            _, rp = _varint(data, rp)
            klen, rp = _varint(data, rp)
            assert klen >= 4, f"{log_path}: control batch at {pos} has a {klen}-byte key"
            b.control_type = struct.unpack_from(">h", data, rp + 2)[0]
        batches.append(b)
        pos += b.size
    return batches, len(data) - pos


def read_txn_entries(path):
    """[(version, producer_id, first_offset, last_offset, last_stable_offset)]."""
    data = pathlib.Path(path).read_bytes()
    assert len(data) % TXN_ENTRY_BYTES == 0, (
        f"{path}: {len(data)} bytes is not a multiple of {TXN_ENTRY_BYTES}")
    return [struct.unpack_from(">hqqqq", data, i) for i in range(0, len(data), TXN_ENTRY_BYTES)]


def assert_no_orphan_index(pdir):
    """Every `.index`, `.timeindex` and `.txnindex` has its `.log`."""
    orphans = sorted(str(p.name) for files in segment_files(pdir).values() if "log" not in files
                     for p in files.values())
    assert not orphans, f"{pdir}: index files without their .log: {orphans}"


def assert_rolled_segments_indexed(pdir, timeout_s=10):
    """Every segment but the newest has its `.index` and `.timeindex` (waits a
    little: a rolled segment's indexes may be written just after the roll)."""
    def missing():
        files = segment_files(pdir)
        bases = sorted(b for b, f in files.items() if "log" in f)
        return [f"{b:020}.{ext}" for b in bases[:-1] for ext in ("index", "timeindex")
                if ext not in files[b]]
    last = missing()
    deadline = time.monotonic() + timeout_s
    while last and time.monotonic() < deadline:
        time.sleep(0.2)
        last = missing()
    assert not last, f"{pdir}: rolled segments without index files: {last}"


def check_segment_files(pdir, min_segments=1):
    """On a stopped broker: every `.log` holds only whole batches and has an
    `.index` and a `.timeindex`, whose entries point at batches of that `.log`;
    every `.txnindex` is whole 34-byte entries. Returns {base: [Batch]}."""
    files = segment_files(pdir)
    assert_no_orphan_index(pdir)
    bases = sorted(b for b, f in files.items() if "log" in f)
    assert len(bases) >= min_segments, f"{pdir}: {len(bases)} segments, expected >= {min_segments}"
    out = {}
    index_entries = 0
    for i, base in enumerate(bases):
        f = files[base]
        name = f"{pdir.name}/{base:020}"
        batches, tail = read_batches(f["log"])
        assert tail == 0, f"{name}.log: {tail} bytes after the last whole batch on a stopped broker"
        out[base] = batches
        if batches:
            assert batches[0].base_offset == base, (
                f"{name}.log: first batch at offset {batches[0].base_offset}, file named {base}")
            if i + 1 < len(bases):
                assert batches[-1].last_offset < bases[i + 1], (
                    f"{name}.log: last offset {batches[-1].last_offset} reaches into the "
                    f"next segment {bases[i + 1]}")
        missing = [ext for ext in ("index", "timeindex") if ext not in f]
        assert not missing, f"{name}: no .{' .'.join(missing)} beside the .log"

        by_pos = {b.position: b for b in batches}
        raw = f["index"].read_bytes()
        assert len(raw) % OFFSET_ENTRY_BYTES == 0, f"{name}.index: {len(raw)} bytes"
        prev = (-1, -1)
        for k in range(0, len(raw), OFFSET_ENTRY_BYTES):
            rel, position = struct.unpack_from(">II", raw, k)
            assert rel >= prev[0] and position >= prev[1], (
                f"{name}.index entry {k // 8} ({rel}, {position}) goes back from {prev} "
                f"(a zero-filled tail left from preallocation?)")
            prev = (rel, position)
            b = by_pos.get(position)
            assert b is not None, (
                f"{name}.index entry {k // 8}: position {position} is not the start of a batch "
                f"(the .log has {len(batches)} batches)")
            assert b.last_offset == base + rel, (
                f"{name}.index entry {k // 8}: offset {base + rel} but the batch at {position} "
                f"ends at offset {b.last_offset}")
            index_entries += 1

        by_last = {b.last_offset: b for b in batches}
        raw = f["timeindex"].read_bytes()
        assert len(raw) % TIME_ENTRY_BYTES == 0, f"{name}.timeindex: {len(raw)} bytes"
        prev_ts = prev_rel = None
        for k in range(0, len(raw), TIME_ENTRY_BYTES):
            ts, rel = struct.unpack_from(">qI", raw, k)
            if prev_ts is not None:
                assert ts >= prev_ts and rel >= prev_rel, (
                    f"{name}.timeindex entry {k // 12} ({ts}, {rel}) goes back from "
                    f"({prev_ts}, {prev_rel})")
            prev_ts, prev_rel = ts, rel
            b = by_last.get(base + rel)
            assert b is not None, (
                f"{name}.timeindex entry {k // 12}: offset {base + rel} is not the last offset "
                f"of a batch of this segment")
            assert b.max_timestamp == ts, (
                f"{name}.timeindex entry {k // 12}: timestamp {ts}, but the batch ending at "
                f"{base + rel} has max timestamp {b.max_timestamp}")

        if "txnindex" in f:
            read_txn_entries(f["txnindex"])
    # Sparse, but not empty: 32 KiB segments span several index intervals.
    assert index_entries > 0, f"{pdir}: every .index file is empty"
    return out


def delete_files(pdir, exts):
    gone = []
    for files in segment_files(pdir).values():
        for ext in exts:
            if ext in files:
                files[ext].unlink()
                gone.append(files[ext].name)
    return gone


# --- readers ----------------------------------------------------------------------------

def read_full(broker, topic, partition, until, timeout_s=60):
    """Read `partition` from offset 0 until the position reaches `until`:
    {offset: (key, value, headers, timestamp)}."""
    c = consumer(broker, **{"fetch.wait.max.ms": 100})
    out = {}
    try:
        tp = TopicPartition(topic, partition)
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while c.position([tp])[0].offset < until:
            assert time.monotonic() < deadline, (
                f"{topic}[{partition}]: read {len(out)} records in {timeout_s}s, position "
                f"{c.position([tp])[0].offset}, target {until}")
            for m in c.consume(num_messages=1000, timeout=0.3):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consumer error on {topic}: {m.error()}")
                ts_type, ts = m.timestamp()
                assert ts_type == TIMESTAMP_CREATE_TIME, f"offset {m.offset()}: timestamp type {ts_type}"
                assert m.offset() not in out, f"offset {m.offset()} delivered twice"
                out[m.offset()] = (m.key(), m.value(), tuple(m.headers() or ()), ts)
        return out
    finally:
        c.close()


def kpy_read_committed(broker, topic, partition, until, timeout_s=60):
    """kafka-python, isolation_level=read_committed, from the beginning until the
    position reaches `until`: [(offset, value)]."""
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                      isolation_level="read_committed", request_timeout_ms=30000,
                      fetch_max_wait_ms=100)
    tp = KpyTopicPartition(topic, partition)
    got = []
    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        deadline = time.monotonic() + timeout_s
        while c.position(tp) < until:
            assert time.monotonic() < deadline, (
                f"kafka-python read_committed {topic}[{partition}]: position {c.position(tp)} "
                f"after {timeout_s}s, target {until}, {len(got)} records")
            for recs in c.poll(timeout_ms=300, max_records=2000).values():
                got.extend((r.offset, r.value) for r in recs)
        return got
    finally:
        c.close()


# --- 1. byte-identical read-back ---------------------------------------------------------

RECORDS_1 = 500
CHUNK_1 = 50


def varied_record(rng, i, base_ms):
    """Key, value, headers and timestamp of record `i`: nulls, empty header values,
    incompressible and compressible values from 1 B to ~10 KiB; timestamps mostly
    rising, some going back."""
    key = None if i % 7 == 3 else f"key-{i}".encode()
    if i % 11 == 5:
        value = None
    else:
        size = 10 * 1024 + i if i % 8 == 0 else rng.choice([1, 100, 1000, 3000])
        incompressible = i % 2 == 1 or i % 16 == 8
        value = rng.randbytes(size) if incompressible else (b"%06d" % i * (size // 6 + 1))[:size]
    headers = ((("h1", b"v%d" % i), ("dup", b"a"), ("dup", b"b")) if i % 3 == 0
               else (("null", None), ("empty", b"")) if i % 3 == 1 else ())
    ts = base_ms + i * 10 - (5000 if i % 13 == 0 else 0)
    return key, value, headers, ts


@pytest.mark.timeout(120)
def test_read_from_zero_after_restart_is_byte_identical(start_broker):
    b = start_broker(sets=[SEGMENT_SET])
    topic = create_topic(b, unique_topic("disk-identical"), 1)
    rng = random.Random(7)
    base_ms = (int(time.time()) - 3600) * 1000
    plain = producer(b, **{"batch.size": 16384, "linger.ms": 2})
    lz4 = producer(b, **{"batch.size": 16384, "linger.ms": 2, "compression.type": "lz4"})
    sent, offsets, errors = {}, {}, []

    def dr(i):
        def cb(err, msg):
            if err is not None:
                errors.append((i, err))
            else:
                offsets[i] = msg.offset()
        return cb

    for chunk_start in range(0, RECORDS_1, CHUNK_1):
        p = lz4 if (chunk_start // CHUNK_1) % 2 else plain
        for i in range(chunk_start, chunk_start + CHUNK_1):
            key, value, headers, ts = varied_record(rng, i, base_ms)
            sent[i] = (key, value, headers, ts)
            p.produce(topic, partition=0, key=key, value=value, headers=list(headers) or None,
                      timestamp=ts, on_delivery=dr(i))
        assert p.flush(30) == 0
    assert not errors, errors[:3]
    assert sorted(offsets.values()) == list(range(RECORDS_1)), "offsets are not 0..N-1"
    expected = {offsets[i]: rec for i, rec in sent.items()}

    pdir = partition_dir(b, topic, 0)
    bases = log_bases(pdir)
    assert len(bases) >= MIN_SEGMENTS, (
        f"{len(bases)} .log files in {pdir} after ~1 MiB with segment.bytes={SEGMENT_BYTES}")
    assert_rolled_segments_indexed(pdir)

    def check(when):
        assert watermarks(b, topic, [0])[0] == (0, RECORDS_1), when
        got = read_full(b, topic, 0, RECORDS_1)
        assert sorted(got) == list(range(RECORDS_1)), f"{when}: offsets read {sorted(got)[:5]}..."
        for off in range(RECORDS_1):
            assert got[off] == expected[off], (
                f"{when}: offset {off} differs: read (key, value[:40], headers, ts) "
                f"{_short(got[off])}, produced {_short(expected[off])}")

    check("before any restart")
    assert b.stop() == 0
    check_segment_files(pdir, MIN_SEGMENTS)
    b.start()
    check("after a clean restart")
    b.kill9()
    b.start()
    check("after kill -9 and a restart")


def _short(rec):
    key, value, headers, ts = rec
    return (key, None if value is None else (len(value), value[:40]), headers, ts)


# --- 2. read_committed across segments, aborted transactions --------------------------------

TXNS = 60
RECS_PER_TXN = 3
TXN_VALUE_BYTES = 3000
ABORT_EVERY = 3        # transactions 2, 5, 8, ... are aborted


def write_transactions(b, topic):
    """TXNS transactions of RECS_PER_TXN records, every ABORT_EVERY-th aborted, each
    with one non-transactional record written while it is open. Returns
    (expected read_committed [(offset, value)], aborted [(offset, value)],
    {first offset of each aborted transaction})."""
    tp = Producer(txn_producer_conf(b, unique_topic("disk-txn-id"), **{"batch.size": 16384}))
    plain = producer(b)
    tp.init_transactions(30)
    txn_dr, plain_dr = DeliveryLog(), DeliveryLog()
    committed, aborted, aborted_firsts = [], [], set()
    pad = b"p" * TXN_VALUE_BYTES
    for t in range(TXNS):
        start = len(txn_dr.acked)
        tp.begin_transaction()
        for r in range(RECS_PER_TXN):
            tp.produce(topic, partition=0, value=b"txn-%03d-%d:" % (t, r) + pad,
                       on_delivery=txn_dr)
            if r == 0:
                # A non-transactional record lands inside the transaction's range.
                assert tp.flush(30) == 0
                plain.produce(topic, partition=0, value=b"plain-%03d" % t, on_delivery=plain_dr)
                assert plain.flush(30) == 0
        assert tp.flush(30) == 0
        mine = [(off, v) for _, off, v in txn_dr.acked[start:]]
        assert len(mine) == RECS_PER_TXN, f"transaction {t}: {len(mine)} records acked"
        if t % ABORT_EVERY == ABORT_EVERY - 1:
            tp.abort_transaction(30)
            aborted += mine
            aborted_firsts.add(min(off for off, _ in mine))
        else:
            tp.commit_transaction(30)
            committed += mine
    assert not txn_dr.errors and not plain_dr.errors, (txn_dr.errors[:3], plain_dr.errors[:3])
    expected = sorted(committed + [(off, v) for _, off, v in plain_dr.acked])
    return expected, aborted, aborted_firsts


def check_txn_indexes(pdir, aborted_firsts, when):
    """On a stopped broker: the `.txnindex` entries are exactly the aborted
    transactions, each in the segment of its abort marker."""
    segs = check_segment_files(pdir, MIN_SEGMENTS)
    files = segment_files(pdir)
    bases = sorted(segs)
    txn_files = [files[base]["txnindex"] for base in bases if "txnindex" in files[base]]
    assert txn_files, f"{when}: no .txnindex file in {pdir}"
    aborts = {bt.last_offset: bt for bs in segs.values() for bt in bs
              if bt.is_control and bt.control_type == CONTROL_ABORT}
    assert len(aborts) == len(aborted_firsts), (
        f"{when}: {len(aborts)} abort markers in the .log files, {len(aborted_firsts)} aborted")
    entries = []
    for base in bases:
        if "txnindex" not in files[base]:
            continue
        nxt = bases[bases.index(base) + 1] if base != bases[-1] else float("inf")
        for version, pid, first, last, _lso in read_txn_entries(files[base]["txnindex"]):
            assert version == 0, f"{when}: {base:020}.txnindex entry version {version}"
            assert base <= last < nxt, (
                f"{when}: {base:020}.txnindex holds an abort at {last}, outside the segment")
            marker = aborts.get(last)
            assert marker is not None, f"{when}: txnindex entry ends at {last}, not an abort marker"
            assert marker.producer_id == pid, (
                f"{when}: txnindex entry at {last}: producer {pid}, marker's {marker.producer_id}")
            entries.append(first)
    assert len(entries) == len(aborted_firsts), (
        f"{when}: {len(entries)} .txnindex entries in all, {len(aborted_firsts)} aborted "
        f"transactions (34 bytes each)")
    assert set(entries) == aborted_firsts, (
        f"{when}: first offsets in .txnindex {sorted(entries)[:5]}..., aborted transactions "
        f"start at {sorted(aborted_firsts)[:5]}...")


# The first variant asks more than Apache Kafka gives: Kafka (3.9, checked)
# takes a missing .txnindex for an empty one after a clean shutdown and then
# serves the aborted records to read_committed readers. Here the indexes are a
# cache that must be rebuilt from the batch headers when absent.
@pytest.mark.timeout(120)
@pytest.mark.parametrize("restart,lost", [("sigterm", ("txnindex",)),
                                          ("kill9", ("txnindex", "index", "timeindex"))],
                         ids=["sigterm-txnindex-deleted", "kill9-all-indexes-deleted"])
def test_read_committed_across_segments_with_aborts_after_restart(start_broker, restart, lost):
    b = start_broker(sets=[*TXN_BROKER_SETS, SEGMENT_SET])
    topic = create_topic(b, unique_topic("disk-txn"), 1)
    expected, aborted, aborted_firsts = write_transactions(b, topic)
    assert len(aborted_firsts) == TXNS // ABORT_EVERY
    aborted_values = {v for _, v in aborted}
    pdir = partition_dir(b, topic, 0)

    def check(when, kafka_python=True):
        hw = end_offsets(b, topic, [0], "read_uncommitted")[0]
        lso = end_offsets(b, topic, [0], "read_committed")[0]
        assert lso == hw, f"{when}: LSO {lso} below the high watermark {hw} with no open transaction"
        got = read_to(b, topic, [0], "read_committed", until={0: lso})[0]
        leaked = [(o, v[:12]) for o, v in got if v in aborted_values]
        assert not leaked, f"{when}: read_committed (confluent-kafka) got aborted records {leaked[:5]}"
        assert got == expected, (
            f"{when}: read_committed (confluent-kafka) got {len(got)} records, expected "
            f"{len(expected)}; first difference at {_first_difference(got, expected)}")
        if kafka_python:
            got = kpy_read_committed(b, topic, 0, lso)
            leaked = [(o, v[:12]) for o, v in got if v in aborted_values]
            assert not leaked, f"{when}: read_committed (kafka-python) got aborted records {leaked[:5]}"
            assert got == expected, (
                f"{when}: read_committed (kafka-python) got {len(got)} records, expected "
                f"{len(expected)}; first difference at {_first_difference(got, expected)}")

    check("before any restart", kafka_python=False)
    assert b.stop() == 0
    check_txn_indexes(pdir, aborted_firsts, "after a clean stop")
    b.start()
    check("after a clean restart")

    # The index files are a cache of the batch headers: without them the
    # broker must find the aborted transactions again from the .log files.
    if restart == "sigterm":
        assert b.stop() == 0
    else:
        b.kill9()
    gone = delete_files(pdir, lost)
    assert any(n.endswith(".txnindex") for n in gone), f"no .txnindex to delete in {pdir}"
    b.start()
    check(f"after {restart} and deleting every .{', .'.join(lost)}")
    # What was rebuilt is on disk after the next clean stop, and serves a clean start.
    assert b.stop() == 0
    check_txn_indexes(pdir, aborted_firsts, "after the indexes were rebuilt and a clean stop")
    b.start()
    check("after the rebuild and a clean restart", kafka_python=False)


def _first_difference(got, expected):
    for k, (g, e) in enumerate(zip(got, expected)):
        if g != e:
            return f"position {k}: got {(g[0], g[1][:16])}, expected {(e[0], e[1][:16])}"
    return f"position {min(len(got), len(expected))} (one list is a prefix of the other)"


# --- 3. ListOffsets by timestamp ----------------------------------------------------------

RECORDS_3 = 600
TS_STEP_MS = 1000
EQUAL_TS = range(200, 204)   # these records share record 200's timestamp


@pytest.mark.timeout(120)
def test_list_offsets_by_timestamp_across_segments(start_broker):
    b = start_broker(sets=[SEGMENT_SET])
    topic = create_topic(b, unique_topic("disk-ts"), 1)
    base_ms = (int(time.time()) - 2 * 3600) * 1000
    stamps = [base_ms + (EQUAL_TS[0] if i in EQUAL_TS else i) * TS_STEP_MS for i in range(RECORDS_3)]
    assert stamps == sorted(stamps)
    p = producer(b, **{"batch.size": 8192, "linger.ms": 2})
    dr = DeliveryLog()
    for i, ts in enumerate(stamps):
        p.produce(topic, partition=0, value=b"%04d:" % i + b"t" * 1000, timestamp=ts,
                  on_delivery=dr)
    assert p.flush(30) == 0
    assert not dr.errors, dr.errors[:3]
    assert [off for _, off, _ in dr.acked] == list(range(RECORDS_3))
    pdir = partition_dir(b, topic, 0)
    bases = log_bases(pdir)
    assert len(bases) >= MIN_SEGMENTS, f"{len(bases)} segments in {pdir}"

    def want(target):
        k = bisect.bisect_left(stamps, target)
        return k if k < len(stamps) else -1

    targets = {base_ms - 3_600_000, base_ms - 1, base_ms, stamps[-1], stamps[-1] - 1,
               stamps[-1] + 1, stamps[-1] + 3_600_000}
    for i in list(range(0, RECORDS_3, 7)) + list(EQUAL_TS) + [EQUAL_TS[-1] + 1]:
        targets.update({stamps[i], stamps[i] - 1, stamps[i] + 1, stamps[i] - TS_STEP_MS // 2})
    for base in bases:   # both sides of every segment boundary
        targets.update({stamps[base], stamps[base] - 1, stamps[base] + 1})
        if base > 0:
            targets.update({stamps[base - 1], stamps[base - 1] + 1})
    targets = sorted(targets)

    def check_confluent(when):
        c = consumer(b)
        try:
            for target in targets:
                r = c.offsets_for_times([TopicPartition(topic, 0, target)], timeout=15)
                assert r[0].error is None, f"{when}: offsets_for_times({target}): {r[0].error}"
                assert r[0].offset == want(target), (
                    f"{when}: offsets_for_times(base + {target - base_ms} ms) = {r[0].offset}, "
                    f"expected {want(target)} (segments start at {bases})")
        finally:
            c.close()

    def check_kafka_python(when):
        c = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=None, enable_auto_commit=False,
                          request_timeout_ms=30000)
        tp = KpyTopicPartition(topic, 0)
        try:
            for target in targets:
                r = c.offsets_for_times({tp: target})[tp]
                w = want(target)
                if w == -1:
                    assert r is None, f"{when}: kafka-python offsets_for_times({target}) = {r}, expected None"
                else:
                    assert r is not None and r.offset == w, (
                        f"{when}: kafka-python offsets_for_times(base + {target - base_ms} ms) = {r}, "
                        f"expected offset {w}")
                    assert r.timestamp == stamps[w], (
                        f"{when}: kafka-python offsets_for_times({target}) timestamp {r.timestamp}, "
                        f"record {w} has {stamps[w]}")
        finally:
            c.close()

    assert b.stop() == 0
    b.start()
    check_confluent("after a clean restart")
    check_kafka_python("after a clean restart")
    b.kill9()
    b.start()
    check_confluent("after kill -9 and a restart")


# --- 4. retention ---------------------------------------------------------------------------

RETENTION_BYTES = 256 * 1024
RECORDS_4 = 2048
RETENTION_CHECK_MS = 300


@pytest.mark.timeout(120)
def test_retention_removes_segments_and_their_indexes(start_broker):
    b = start_broker(sets=[SEGMENT_SET, f"log.retention.bytes={RETENTION_BYTES}",
                           f"log.retention.check.interval.ms={RETENTION_CHECK_MS}"])
    topic = create_topic(b, unique_topic("disk-retention"), 1)
    dr = DeliveryLog()
    produce_all(producer(b, **{"batch.size": 16384}), topic,
                ((None, b"%06d:" % i + b"r" * 1024) for i in range(RECORDS_4)), dr)
    assert not dr.errors, dr.errors[:3]
    assert sorted(off for _, off, _ in dr.acked) == list(range(RECORDS_4))
    pdir = partition_dir(b, topic, 0)

    # Retention ran, and then nothing changes any more (production has stopped):
    # the same log start offset and the same files over a few check intervals.
    def snapshot():
        return watermarks(b, topic, [0])[0][0], sorted(
            (base, tuple(sorted(files))) for base, files in segment_files(pdir).items())

    def settled():
        first = snapshot()
        if first[0] == 0:
            return None
        time.sleep(3 * RETENTION_CHECK_MS / 1000)
        return first if snapshot() == first else None
    low, _ = wait_until(settled, timeout_s=45, interval_s=0.2,
                        what="retention deleting old segments and then settling")

    def check(when):
        assert_no_orphan_index(pdir)
        bases = log_bases(pdir)
        assert len(bases) >= 2, f"{when}: {len(bases)} segments left"
        assert bases[0] > 0, f"{when}: the first segment (base 0) is still there"
        kept = sum(segment_files(pdir)[base]["log"].stat().st_size for base in bases)
        assert kept >= RETENTION_BYTES, (
            f"{when}: {kept} bytes of log left, less than retention.bytes {RETENTION_BYTES}")
        start, high = watermarks(b, topic, [0])[0]
        assert high == RECORDS_4, f"{when}: high watermark {high}"
        assert start == bases[0], (
            f"{when}: ListOffsets earliest = {start}, but the first remaining segment starts at "
            f"{bases[0]} (segments {bases[:5]}...)")
        got = read_all(b, topic, [0], timeout_s=60)[0]
        assert got and got[0][0] == start, f"{when}: read from earliest starts at {got[:1]}"
        assert [o for o, _, _ in got] == list(range(start, RECORDS_4)), f"{when}: offsets not contiguous"
        assert all(v.startswith(b"%06d:" % o) for o, _, v in got), f"{when}: value at wrong offset"
        return start

    first = check("after retention settled")
    assert first == low
    assert b.stop() == 0
    assert_no_orphan_index(pdir)
    for base in log_bases(pdir):
        assert (pdir / f"{base:020}.index").exists(), f"{base:020}.log without .index after a clean stop"
    b.start()
    assert check("after a clean restart") >= first


# --- 5. a segment file lost under a running broker ----------------------------------------------

FETCH_SOCKET_TIMEOUT_S = 20


def fetch_outcome(broker, topic, partition, offset):
    """One raw Fetch: ("answered", error_code, record bytes) or ("closed", reason).
    A response that never completes fails the test (socket timeout)."""
    conn = RawConn(broker.host, broker.port, timeout_s=FETCH_SOCKET_TIMEOUT_S)
    t0 = time.monotonic()
    try:
        err, _hw, records = conn.fetch(topic, partition, offset, max_wait_ms=200)
        return ("answered", err, len(records))
    except socket.timeout:
        raise AssertionError(
            f"Fetch of {topic}[{partition}] at offset {offset}: no complete answer and no close "
            f"within {time.monotonic() - t0:.0f}s (hung)")
    except (ConnectionError, OSError) as e:
        return ("closed", repr(e))
    finally:
        conn.close()


@pytest.mark.timeout(120)
def test_fetch_of_missing_segment_file_gets_storage_error_not_a_hang(start_broker):
    """What the broker answers for a lost file is not pinned here (KAFKA_STORAGE_ERROR,
    or the connection closed mid-response, or -- for a deleted file the broker still
    holds open -- the records themselves): only that it never hangs, and that the
    other partitions keep working."""
    b = start_broker(sets=[SEGMENT_SET])
    topic = create_topic(b, unique_topic("disk-lost"), 2)
    other = create_topic(b, unique_topic("disk-bystander"), 1)
    dr = DeliveryLog()
    p = producer(b, **{"batch.size": 16384})
    for i in range(1200):
        p.produce(topic, partition=0, value=b"%05d:" % i + b"v" * 1000, on_delivery=dr)
        if i % 10 == 0:
            p.produce(topic, partition=1, value=b"p1-%05d" % i, on_delivery=dr)
            p.produce(other, partition=0, value=b"o-%05d" % i, on_delivery=dr)
        p.poll(0)
    assert p.flush(30) == 0
    assert not dr.errors, dr.errors[:3]
    pdir = partition_dir(b, topic, 0)
    bases = log_bases(pdir)
    assert len(bases) >= MIN_SEGMENTS, f"{len(bases)} segments in {pdir}"

    deleted, truncated = bases[len(bases) // 3], bases[2 * len(bases) // 3]
    (pdir / f"{deleted:020}.log").unlink()
    os.truncate(pdir / f"{truncated:020}.log", 0)
    # Each asked twice, on fresh connections: the first ask may be the one that
    # finds the file gone, the second sees what the broker made of it.
    outcomes = {name: [fetch_outcome(b, topic, 0, base + 1) for _ in range(2)]
                for name, base in (("deleted", deleted), ("truncated", truncated))}
    # Shown, not asserted (see the docstring): e.g. ("answered", 56, 0) is
    # KAFKA_STORAGE_ERROR, ("closed", ...) a connection closed mid-response.
    print(f"Fetch inside a deleted / a truncated segment: {outcomes}")
    assert b.running(), f"the broker exited after a segment file was lost:\n{b.log_tail()}"

    # The other partitions are served: read back, and written to and read again.
    got = read_all(b, topic, [1], timeout_s=30)[1]
    assert len(got) == 120, f"{topic}[1]: {len(got)} records"
    got = read_all(b, other, [0], timeout_s=30)[0]
    assert len(got) == 120, f"{other}[0]: {len(got)} records"
    dr2 = DeliveryLog()
    for t, part in ((topic, 1), (other, 0)):
        p.produce(t, partition=part, value=b"after-the-loss", on_delivery=dr2)
    assert p.flush(30) == 0
    assert not dr2.errors, dr2.errors
    assert sorted(off for _, off, _ in dr2.acked) == [120, 120]
    assert read_all(b, other, [0], timeout_s=30)[0][-1][2] == b"after-the-loss"
    assert read_all(b, topic, [1], timeout_s=30)[1][-1][2] == b"after-the-loss"
