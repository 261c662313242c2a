"""A tiny blocking Kafka client for exact protocol tests (hand-built requests).

Only what the tests need: InitProducerId v0 and Produce v3 with record batches
built by kafka-python's DefaultRecordBatchBuilder, so a test controls producer
id, epoch and sequence numbers byte for byte (a real client hides them); and
Fetch v4 for one partition, so a test sees exactly whether the broker answered,
closed the connection, or left the request hanging (a real client retries).
"""

import socket
import struct
import time

from kafka.record.default_records import DefaultRecordBatchBuilder

API_PRODUCE = 0
API_FETCH = 1
API_INIT_PRODUCER_ID = 22
API_API_VERSIONS = 18


def _str(s):
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def request_frame(api_key, version, correlation_id, body, client_id="doze-raw"):
    """One request as it goes on the wire: the int32 size, then request
    header v1 (api key, version, correlation id, client id; the tests' APIs
    and versions are all below their flexible versions), then `body`. The
    one place the Python tests frame a request."""
    msg = struct.pack(">hhi", api_key, version, correlation_id) + _str(client_id) + body
    return struct.pack(">i", len(msg)) + msg


class RawConn:
    def __init__(self, host, port, timeout_s=10.0, client_id="doze-raw"):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.settimeout(timeout_s)
        self.client_id = client_id
        self.corr = 0

    def close(self):
        self.sock.close()

    def _recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk
        return buf

    def request(self, api_key, version, body, expect_response=True):
        """Send one request (header v1); return the response body (after correlation id)."""
        self.corr += 1
        self.sock.sendall(request_frame(api_key, version, self.corr, body, self.client_id))
        if not expect_response:
            return None
        size = struct.unpack(">i", self._recv_exact(4))[0]
        data = self._recv_exact(size)
        corr = struct.unpack(">i", data[:4])[0]
        assert corr == self.corr, f"correlation id {corr}, expected {self.corr}"
        return data[4:]

    def init_producer_id(self, transactional_id=None, timeout_ms=60000):
        body = _str(transactional_id) + struct.pack(">i", timeout_ms)
        r = self.request(API_INIT_PRODUCER_ID, 0, body)
        _throttle, err, pid, epoch = struct.unpack(">ihqh", r[:16])
        return err, pid, epoch

    def produce(self, topic, partition, batch, acks=-1, timeout_ms=30000):
        """Produce v3 with one batch; returns (error_code, base_offset)."""
        body = (_str(None) + struct.pack(">hi", acks, timeout_ms) + struct.pack(">i", 1) + _str(topic)
                + struct.pack(">i", 1) + struct.pack(">i", partition)
                + struct.pack(">i", len(batch)) + batch)
        r = self.request(API_PRODUCE, 3, body, expect_response=acks != 0)
        if r is None:
            return None
        # responses: [name, [index, error_code, base_offset, log_append_time]], throttle
        n_topics = struct.unpack(">i", r[:4])[0]
        assert n_topics == 1
        name_len = struct.unpack(">h", r[4:6])[0]
        pos = 6 + name_len
        n_parts = struct.unpack(">i", r[pos:pos + 4])[0]
        assert n_parts == 1
        _idx, err, base_offset, _lat = struct.unpack(">ihqq", r[pos + 4:pos + 26])
        return err, base_offset

    def fetch(self, topic, partition, offset, max_wait_ms=500, partition_max_bytes=1 << 20,
              max_bytes=4 << 20, isolation_level=0):
        """Fetch v4 of one partition from `offset`; returns (error_code, high_watermark,
        records bytes). A broker that closes the connection raises ConnectionError; one
        that never completes the response raises socket.timeout (the socket's timeout)."""
        body = fetch_body(topic, partition, offset, max_wait_ms, partition_max_bytes, max_bytes,
                          isolation_level)
        return parse_fetch(self.request(API_FETCH, 4, body))


def fetch_body(topic, partition, offset, max_wait_ms=500, partition_max_bytes=1 << 20,
               max_bytes=4 << 20, isolation_level=0):
    """The body of a Fetch v4 of one partition from `offset` (min_bytes 1)."""
    return (struct.pack(">iiiib", -1, max_wait_ms, 1, max_bytes, isolation_level)
            + struct.pack(">i", 1) + _str(topic)
            + struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, partition_max_bytes))


def parse_fetch(r):
    """A Fetch v4 response body of one partition (after the correlation id):
    (error_code, high_watermark, records bytes)."""
    # throttle_time_ms, [topic, [partition, error_code, high_watermark,
    # last_stable_offset, aborted_transactions, records]]
    pos = 4
    n_topics = struct.unpack(">i", r[pos:pos + 4])[0]
    assert n_topics == 1, f"Fetch answered {n_topics} topics"
    name_len = struct.unpack(">h", r[pos + 4:pos + 6])[0]
    pos += 6 + name_len
    n_parts = struct.unpack(">i", r[pos:pos + 4])[0]
    assert n_parts == 1, f"Fetch answered {n_parts} partitions"
    _idx, err, hw, _lso = struct.unpack(">ihqq", r[pos + 4:pos + 26])
    pos += 26
    n_aborted = struct.unpack(">i", r[pos:pos + 4])[0]
    pos += 4 + max(0, n_aborted) * 16
    rec_len = struct.unpack(">i", r[pos:pos + 4])[0]
    records = b"" if rec_len < 0 else r[pos + 4:pos + 4 + rec_len]
    assert len(records) == max(0, rec_len), "Fetch response shorter than its records length"
    return err, hw, records


def build_batch(values, producer_id=-1, epoch=-1, base_sequence=-1, transactional=False):
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                  producer_id=producer_id, producer_epoch=epoch,
                                  base_sequence=base_sequence, batch_size=1 << 30)
    now_ms = int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(i, timestamp=now_ms, key=None, value=v, headers=[])
    return bytes(b.build())
