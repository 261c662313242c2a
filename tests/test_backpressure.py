"""A connection with many requests in flight is paused, not closed (issue 40).

Kafka's SocketServer mutes a channel while its request is handled: a client
that pipelines more than the broker takes waits in TCP. librdkafka pipelines
up to max.in.flight (1,000,000 by default) requests per connection, and with
10,000 partitions sends more than a thousand at once; doze closed such a
connection once 1,024 were unanswered (the core's bound) or 1,024 answers
waited for a client that was not reading (the writer's queue). Now the
connection's reader stops at `CONN_REQUESTS_IN_FLIGHT_MAX` unanswered
requests (core/src/limits.rs) and reads on as they are answered.

Raw frames on loopback (tests/rawkafka.py) against the release binary; every
wait is bounded by the sockets' timeout and the test's.
"""

import socket
import struct
import threading
import time

import pytest

from hostile import proc_status_kib
from rawkafka import (API_API_VERSIONS, API_FETCH, RawConn, build_batch, fetch_body, parse_fetch,
                      request_frame)
from wireutil import create_topic, unique_topic

API_METADATA = 3
# Above the broker's bound of 1,024 requests unanswered per connection.
REQUESTS = 5000
# Partitions of the topic the Metadata requests name: each answer is about
# 5 KiB, so 5,000 of them (25 MiB) cannot all wait in the sockets' buffers.
PARTITIONS = 200
# The client's receive buffer: small, so that the answers the client does
# not read pile up at the broker and not in the client's kernel.
CLIENT_RCVBUF_BYTES = 64 * 1024
# How long the client sends without reading before it reads.
NOT_READING_S = 3.0
# What the broker may grow by while it holds a stalled connection's requests
# and answers: 1,024 answers of 5 KiB are 5 MiB; reading all 5,000 requests
# and queueing their answers would be 25 MiB more.
RSS_GROWTH_MIB_MAX = 20
SOCKET_TIMEOUT_S = 30.0


def connect(broker, rcvbuf_bytes=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf_bytes:
        # Before connecting: the window is agreed in the handshake.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf_bytes)
    s.settimeout(SOCKET_TIMEOUT_S)
    s.connect((broker.host, broker.port))
    return s


def recv_exact(sock, n, answered):
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise AssertionError(f"the broker closed the connection after {answered} answers")
        buf += chunk
    return bytes(buf)


def read_answer(sock, answered):
    """(correlation id, body) of the next response."""
    size = struct.unpack(">i", recv_exact(sock, 4, answered))[0]
    data = recv_exact(sock, size, answered)
    return struct.unpack(">i", data[:4])[0], data[4:]


def send_in_background(sock, frames):
    """Sends `frames` on a thread of its own (the broker stops reading, so a
    send may block until the client reads); returns the thread and where a
    failure lands."""
    failed = []

    def send():
        try:
            sock.sendall(frames)
        except OSError as e:
            failed.append(e)

    t = threading.Thread(target=send, name="pipeline-sender", daemon=True)
    t.start()
    return t, failed


def rss_mib(broker):
    return proc_status_kib(broker.proc.pid)["VmRSS"] / 1024


def still_serves(sock, correlation_id):
    sock.sendall(request_frame(API_API_VERSIONS, 0, correlation_id, b""))
    corr, body = read_answer(sock, "all")
    assert corr == correlation_id
    assert struct.unpack(">h", body[:2])[0] == 0, "ApiVersions error"


@pytest.mark.timeout(120)
def test_pipelined_requests_not_read_wait_and_are_all_answered(broker):
    """5,000 Metadata requests sent without reading an answer: the broker
    answers until the sockets' buffers are full, then stops reading, holding
    a bounded number; once the client reads, all 5,000 answers come, in
    order, on the same connection."""
    topic = create_topic(broker, unique_topic("bp-meta"), PARTITIONS)
    body = struct.pack(">i", 1) + struct.pack(">h", len(topic)) + topic.encode()
    frames = b"".join(
        request_frame(API_METADATA, 1, corr, body) for corr in range(1, REQUESTS + 1))
    sock = connect(broker, CLIENT_RCVBUF_BYTES)
    try:
        before = rss_mib(broker)
        sender, failed = send_in_background(sock, frames)
        time.sleep(NOT_READING_S)
        stalled = rss_mib(broker)
        print(f"broker RSS {before:.1f} MiB before, {stalled:.1f} MiB with the client "
              f"not reading ({REQUESTS} requests, {len(frames)} bytes, sent whole: "
              f"{not sender.is_alive()})")
        for expected in range(1, REQUESTS + 1):
            corr, answer = read_answer(sock, expected - 1)
            assert corr == expected, f"answer {expected} has correlation id {corr}"
            # brokers, controller id, then the one topic: its partitions.
            assert len(answer) > PARTITIONS * 26, f"answer {expected}: {len(answer)} bytes"
        sender.join(SOCKET_TIMEOUT_S)
        assert not sender.is_alive(), "the requests were not all sent"
        assert not failed, failed
        still_serves(sock, REQUESTS + 1)
        assert stalled - before < RSS_GROWTH_MIB_MAX, (
            f"broker RSS grew {stalled - before:.1f} MiB while the client was not reading")
    finally:
        sock.close()


@pytest.mark.timeout(120)
def test_pipelined_requests_the_broker_holds_are_not_closed(broker):
    """2,500 Fetches that each wait up to 300 ms for records that never
    come, pipelined while the client reads: the broker takes 1,024, holds
    them until their wait ends, answers them, then reads more. Each
    answer is an empty fetch, in order."""
    topic = create_topic(broker, unique_topic("bp-fetch"), 1)
    fetches = 2500
    body = fetch_body(topic, 0, 0, max_wait_ms=300)
    frames = b"".join(request_frame(API_FETCH, 4, corr, body) for corr in range(1, fetches + 1))
    sock = connect(broker)
    try:
        sender, failed = send_in_background(sock, frames)
        for expected in range(1, fetches + 1):
            corr, answer = read_answer(sock, expected - 1)
            assert corr == expected, f"answer {expected} has correlation id {corr}"
            err, hw, records = parse_fetch(answer)
            assert (err, hw, records) == (0, 0, b""), f"answer {expected}"
        sender.join(SOCKET_TIMEOUT_S)
        assert not failed, failed
        still_serves(sock, fetches + 1)
    finally:
        sock.close()


@pytest.mark.timeout(120)
def test_acks_0_produces_beyond_the_bound_are_counted_answered(broker):
    """3,000 acks=0 Produces get no answer: the broker counts each answered
    when it is done, so it reads on past 1,024 of them, and the ApiVersions
    sent after them is the first answer the client sees."""
    topic = create_topic(broker, unique_topic("bp-acks0"), 1)
    produces = 3000
    batch = build_batch([b"v"])
    body = (struct.pack(">h", -1) + struct.pack(">hi", 0, 30000) + struct.pack(">i", 1)
            + struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", 1)
            + struct.pack(">i", 0) + struct.pack(">i", len(batch)) + batch)
    frames = b"".join(request_frame(0, 3, corr, body) for corr in range(1, produces + 1))
    sock = connect(broker)
    try:
        sock.sendall(frames)
        still_serves(sock, produces + 1)
    finally:
        sock.close()
    # Every one was appended.
    c = RawConn(broker.host, broker.port)
    try:
        deadline = time.monotonic() + 10
        while True:
            err, hw, _ = c.fetch(topic, 0, 0, max_wait_ms=0)
            assert err == 0
            if hw == produces or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert hw == produces
    finally:
        c.close()
