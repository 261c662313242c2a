"""Issue 38, row A: a Produce whose batches are decompressed and read does
not stall the other clients.

The hostile request is one Produce of about 529 KiB that names one
partition again and again, each entry a small zstd batch, sent over and
over from a few connections. Before: every entry was decompressed on the
core task and every other client waited (6.8 s a request; a 32 MiB request
took minutes). Now a partition named twice is appended once, from its last
entry, and a Produce's records are read on the connection task
(net/src/produce_prep.rs, doze_core::produce_checks), so the core never
decompresses to check them. Meanwhile a well-behaved client's Metadata and
1 KiB acks=all produce are timed: p99 at most 200 ms (tests/hostile.py).

A second hostile request names several partitions, each a batch of a few
KiB whose records (1 MiB values of zeros) decompress to 48 MiB: before,
the core decompressed every one of them whole; now the connection tasks
do, a bounded number at once, each a record at a time.

The zstd frames are built here (raw blocks, and run-length blocks for the
zeros, which every zstd decoder reads), so the test needs no zstd package:
the broker still creates a decoder and reads each through it.
"""

import socket
import struct
import threading
import time

import pytest

from hostile import Prober, p99
from kafka.record.util import calc_crc32c
from rawkafka import _str, build_batch, request_frame
from wireutil import create_topic, unique_topic

API_PRODUCE = 0
LATENCY_P99_MS_MAX = 200.0
# Row A's request size, and how many connections send it.
REQUEST_BYTES = 529 * 1024
HOSTILE_CONNECTIONS = 3
ATTACK_S = 10.0
# Kafka's v2 batch header: the CRC covers the bytes from attributes on.
BATCH_HEADER_BYTES = 61
CRC_AT = 17
ATTRIBUTES_AT = 21
LAST_OFFSET_DELTA_AT = 23
RECORDS_COUNT_AT = 57
ZSTD = 4


def zstd_raw_frame(data):
    """`data` as one zstd frame of one raw block: magic, a single-segment
    header with a one-byte content size, a last raw block of its size."""
    assert len(data) <= 255
    block = 1 | (0 << 1) | (len(data) << 3)
    return (struct.pack("<I", 0xFD2FB528) + bytes([0x20, len(data)])
            + struct.pack("<I", block)[:3] + data)


def varint(v):
    """A zigzag varint, as record fields are written."""
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


ZSTD_BLOCK_BYTES_MAX = 128 * 1024


# A frame's window, as zstd's streaming writers declare one: 1 MiB (log 20),
# within what doze's decoders take (ZSTD_WINDOW_LOG_MAX). A single-segment
# frame's window is its whole content, which for 48 MiB they refuse.
ZSTD_WINDOW_DESCRIPTOR = (20 - 10) << 3


def zstd_frame(parts):
    """One zstd frame of `parts` with a 1 MiB window and no content size:
    bytes as raw blocks, (byte, n) as run-length blocks of n copies."""
    blocks = []
    for part in parts:
        if isinstance(part, bytes):
            blocks.append((0, part, len(part)))
        else:
            byte, n = part
            while n:
                k = min(n, ZSTD_BLOCK_BYTES_MAX)
                blocks.append((1, bytes([byte]), k))
                n -= k
    out = bytearray(struct.pack("<I", 0xFD2FB528) + bytes([0x00, ZSTD_WINDOW_DESCRIPTOR]))
    for i, (kind, data, n) in enumerate(blocks):
        last = 1 if i == len(blocks) - 1 else 0
        out += struct.pack("<I", last | (kind << 1) | (n << 3))[:3] + data
    return bytes(out)


def zeros_batch(records, value_bytes):
    """A v2 zstd batch of `records` records (offsets 0, 1, 2, ...), each
    without a key and with a value of `value_bytes` zeros: a few bytes a
    record compressed, `value_bytes` decompressed."""
    parts = []
    for i in range(records):
        body_len = 1 + 1 + len(varint(i)) + 1 + len(varint(value_bytes)) + value_bytes + 1
        parts.append(varint(body_len) + b"\x00\x00" + varint(i) + varint(-1) + varint(value_bytes))
        parts.append((0, value_bytes))
        parts.append(b"\x00")  # no headers
    return with_records(build_batch([b"x"]), zstd_frame(parts), records)


def with_records(plain_batch, section, count):
    """`plain_batch`'s header over `section`, a zstd records section of
    `count` records, with its length, count and CRC made right."""
    b = bytearray(plain_batch[:BATCH_HEADER_BYTES] + section)
    struct.pack_into(">i", b, 8, len(b) - 12)  # batch length
    struct.pack_into(">i", b, LAST_OFFSET_DELTA_AT, count - 1)
    struct.pack_into(">i", b, RECORDS_COUNT_AT, count)
    attributes = struct.unpack_from(">h", b, ATTRIBUTES_AT)[0]
    struct.pack_into(">h", b, ATTRIBUTES_AT, (attributes & ~0x7) | ZSTD)
    struct.pack_into(">I", b, CRC_AT, calc_crc32c(bytes(b[ATTRIBUTES_AT:])))
    return bytes(b)


def zstd_batch(values):
    """A v2 batch of `values`, its records section a zstd frame."""
    plain = build_batch(values)
    return with_records(plain, zstd_raw_frame(plain[BATCH_HEADER_BYTES:]), len(values))


def repeating_produce(topic, acks=1):
    """Produce v3 (acks, one topic) whose partition 0 is named until the
    request is REQUEST_BYTES, each entry its own small zstd batch."""
    entries = []
    size = 0
    i = 0
    while size < REQUEST_BYTES:
        batch = zstd_batch([b"row-a-%06d" % i])
        entry = struct.pack(">i", 0) + struct.pack(">i", len(batch)) + batch
        entries.append(entry)
        size += len(entry)
        i += 1
    body = (_str(None) + struct.pack(">hi", acks, 30000) + struct.pack(">i", 1) + _str(topic)
            + struct.pack(">i", len(entries)) + b"".join(entries))
    return body, len(entries)


def many_partitions_produce(topic, partitions, batch, acks=1):
    """Produce v3 (acks, one topic) of `batch` on each of `partitions`."""
    entries = b"".join(struct.pack(">ii", p, len(batch)) + batch for p in range(partitions))
    return (_str(None) + struct.pack(">hi", acks, 30000) + struct.pack(">i", 1) + _str(topic)
            + struct.pack(">i", partitions) + entries)


class Repeater:
    """`count` connections, each sending `body` as a Produce v3 and reading
    its answer, again and again, until stopped. Counts requests answered
    and how long each took."""

    def __init__(self, host, port, body, count):
        self.addr = (host, port)
        self.body = body
        self.count = count
        self.stop = threading.Event()
        self.answered = 0
        # The error codes of each answer's first partition, and how often.
        self.first_errors = {}
        self.seconds = []
        self.errors = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]

    def _run(self):
        try:
            s = socket.create_connection(self.addr, timeout=60.0)
        except OSError as e:
            self.errors.append(repr(e))
            return
        corr = 0
        try:
            while not self.stop.is_set():
                corr += 1
                start = time.monotonic()
                s.sendall(request_frame(API_PRODUCE, 3, corr, self.body, "row-a"))
                size = struct.unpack(">i", self._recv(s, 4))[0]
                data = self._recv(s, size)
                assert struct.unpack(">i", data[:4])[0] == corr
                # Produce v3's answer: topics [name, partitions [index,
                # error_code, ...]].
                at = 8 + 2 + struct.unpack_from(">h", data, 8)[0]
                error = struct.unpack_from(">h", data, at + 4 + 4)[0]
                with self.lock:
                    self.first_errors[error] = self.first_errors.get(error, 0) + 1
                    self.answered += 1
                    self.seconds.append(time.monotonic() - start)
        except (OSError, ConnectionError, AssertionError) as e:
            if not self.stop.is_set():
                self.errors.append(repr(e))
        finally:
            s.close()

    @staticmethod
    def _recv(s, n):
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk
        return buf

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(70)


def timed_under_produce(broker, hostile_topic, partitions, body, what):
    """The well-behaved client's Metadata and produce p99 while a few
    connections send `body` again and again; asserted, and printed."""
    topic = unique_topic("row-a-prober")
    create_topic(broker, hostile_topic, partitions)
    create_topic(broker, topic, 1)
    warm = Prober(broker.host, broker.port, topic)
    warm.run(1.0)
    warm.close()
    assert not warm.errors, warm.errors
    prober = Prober(broker.host, broker.port, topic)
    with Repeater(broker.host, broker.port, body, HOSTILE_CONNECTIONS) as hostile:
        # The hostile requests are on their way before the timing starts.
        time.sleep(0.5)
        prober.run(ATTACK_S)
    prober.close()
    meta, prod = p99(prober.metadata_ms), p99(prober.produce_ms)
    slowest = max(hostile.seconds) if hostile.seconds else float("nan")
    print(f"{what}: {len(body)} bytes a request, {HOSTILE_CONNECTIONS} connections, "
          f"{hostile.answered} requests answered (slowest {slowest:.2f} s, first partition's "
          f"errors {hostile.first_errors}); well-behaved: "
          f"Metadata p99 {meta:.1f} ms (max {max(prober.metadata_ms):.1f}), produce p99 "
          f"{prod:.1f} ms (max {max(prober.produce_ms):.1f}), {len(prober.produce_ms)} rounds, "
          f"errors {prober.errors[:3]}")
    assert not hostile.errors, hostile.errors[:3]
    assert hostile.answered >= HOSTILE_CONNECTIONS, "the hostile requests were not answered"
    # Appended, so every record was read: not refused unread.
    assert set(hostile.first_errors) == {0}, hostile.first_errors
    assert not prober.errors, prober.errors[:5]
    assert len(prober.produce_ms) >= 20, f"only {len(prober.produce_ms)} rounds"
    assert meta <= LATENCY_P99_MS_MAX, f"Metadata p99 {meta:.1f} ms"
    assert prod <= LATENCY_P99_MS_MAX, f"produce p99 {prod:.1f} ms"


@pytest.mark.timeout(180)
def test_a_produce_repeating_one_partition_of_zstd_batches_stalls_no_one(broker):
    hostile_topic = unique_topic("row-a")
    body, entries = repeating_produce(hostile_topic)
    assert REQUEST_BYTES <= len(body) < REQUEST_BYTES + 1024
    timed_under_produce(broker, hostile_topic, 1, body, f"row A ({entries} entries of one partition)")


@pytest.mark.timeout(180)
def test_batches_that_decompress_to_48_mib_each_stall_no_one(broker):
    hostile_topic = unique_topic("row-a-zeros")
    partitions = 8
    batch = zeros_batch(48, 1024 * 1024)
    assert len(batch) < 64 * 1024, len(batch)
    body = many_partitions_produce(hostile_topic, partitions, batch)
    timed_under_produce(broker, hostile_topic, partitions, body,
                        f"{partitions} partitions of 48 MiB decompressed each")
