"""A few Kafka requests by hand, on asyncio connections, for the scale sweep
(section 9): thousands of transactional ids, open transactions, idle
connections and groups from one process. Why not a client library: one
confluent-kafka producer per transactional id is a handful of threads and a
bootstrap each, so 1,000 of them measured the bench; these are one socket and
a few bytes each. Only non-flexible versions that both doze and Kafka 4.3
serve (KIP-896 dropped the older ones)."""

import asyncio
import struct
import time

from kafka.record.default_records import DefaultRecordBatchBuilder

CLIENT_ID = b"doze-scale"
# The errors a request is asked again for: the coordinator not loaded yet
# (Kafka creates __transaction_state / __consumer_offsets on first use),
# or the id's previous transaction still finishing.
RETRIABLE = {14, 15, 16, 51}
RETRY_S = 0.05
RETRIES_MAX = 400  # 20 s of RETRY_S: a coordinator that takes longer is a failure


def string(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def api_versions_v0():
    return 18, 0, b""


def metadata_v1(topics):
    """Metadata v1 for `topics` (an empty list: no topic, the smallest answer)."""
    return 3, 1, struct.pack(">i", len(topics)) + b"".join(string(t) for t in topics)


def find_coordinator_v1(key, key_type):
    """key_type 0: a group, 1: a transactional id."""
    return 10, 1, string(key) + struct.pack(">b", key_type)


def init_producer_id_v1(txn_id, timeout_ms):
    return 22, 1, string(txn_id) + struct.pack(">i", timeout_ms)


def add_partitions_v1(txn_id, pid, epoch, topic, partition):
    return 24, 1, (string(txn_id) + struct.pack(">qh", pid, epoch) + struct.pack(">i", 1)
                   + string(topic) + struct.pack(">ii", 1, partition))


def produce_v3_txn(txn_id, pid, epoch, topic, partition, value):
    """One transactional record (sequence 0), acks=all."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                  batch_size=1 << 20)
    b.append(0, int(time.time() * 1000), None, value, [])
    records = bytes(b.build())
    return 0, 3, (string(txn_id) + struct.pack(">hi", -1, 30_000) + struct.pack(">i", 1)
                  + string(topic) + struct.pack(">ii", 1, partition)
                  + struct.pack(">i", len(records)) + records)


def offset_commit_v2(group, topic, partition, offset):
    """A commit outside any generation (-1, no member): a group of its own
    with one committed offset, as a client that assigns itself does."""
    return 8, 2, (string(group) + struct.pack(">i", -1) + string("") + struct.pack(">q", -1)
                  + struct.pack(">i", 1) + string(topic) + struct.pack(">i", 1)
                  + struct.pack(">iq", partition, offset) + struct.pack(">h", -1))


class Conn:
    """One connection, one request at a time."""

    def __init__(self, reader, writer):
        self.r, self.w, self.corr = reader, writer, 0

    @classmethod
    async def open(cls, bootstrap):
        host, port = bootstrap.rsplit(":", 1)
        r, w = await asyncio.open_connection(host, int(port))
        return cls(r, w)

    async def call(self, req):
        """The response body (after the correlation id) of `req` = (key, version, body)."""
        key, version, body = req
        self.corr += 1
        head = struct.pack(">hhih", key, version, self.corr, len(CLIENT_ID)) + CLIENT_ID
        self.w.write(struct.pack(">i", len(head) + len(body)) + head + body)
        await self.w.drain()
        size = struct.unpack(">i", await self.r.readexactly(4))[0]
        frame = await self.r.readexactly(size)
        corr = struct.unpack(">i", frame[:4])[0]
        assert corr == self.corr, f"correlation id {corr}, wanted {self.corr}"
        return frame[4:]

    async def timed(self, req):
        t0 = time.monotonic()
        out = await self.call(req)
        return out, time.monotonic() - t0

    def close(self):
        self.w.close()


def find_coordinator_error(body):
    return struct.unpack(">h", body[4:6])[0]


def init_producer_id_result(body):
    """(error, producer id, epoch)"""
    _, err, pid, epoch = struct.unpack(">ihqh", body[:16])
    return err, pid, epoch


def add_partitions_error(body):
    """The one partition's error (throttle, [topic, [partition, error]])."""
    pos = 4 + 4
    n = struct.unpack(">h", body[pos:pos + 2])[0]
    pos += 2 + n + 4 + 4
    return struct.unpack(">h", body[pos:pos + 2])[0]


def produce_error(body):
    """The one partition's error ([topic, [partition, error, ...]], throttle)."""
    pos = 4
    n = struct.unpack(">h", body[pos:pos + 2])[0]
    pos += 2 + n + 4 + 4
    return struct.unpack(">h", body[pos:pos + 2])[0]


def offset_commit_error(body):
    """The one partition's error ([topic, [partition, error]])."""
    pos = 4
    n = struct.unpack(">h", body[pos:pos + 2])[0]
    pos += 2 + n + 4 + 4
    return struct.unpack(">h", body[pos:pos + 2])[0]


async def until_ok(conn, req, error_of, what):
    """`req` asked again while it fails with a retriable error: (body, seconds of
    the last try); raises on any other error."""
    for _ in range(RETRIES_MAX):
        body, el = await conn.timed(req)
        err = error_of(body)
        if err == 0:
            return body, el
        if err not in RETRIABLE:
            raise RuntimeError(f"{what}: error {err}")
        await asyncio.sleep(RETRY_S)
    raise RuntimeError(f"{what}: still retriable after {RETRIES_MAX} tries")
