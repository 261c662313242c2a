"""Hostile clients on loopback, for tests/test_hostile.py: connections that
declare large frames and send part of them, and a well-behaved client whose
latency is measured meanwhile. Only the standard library and rawkafka.

Every loop here is bounded in time; sockets are non-blocking, so a broker
that stops reading (as it should, when its budget is spent) never blocks a
test.
"""

import selectors
import socket
import struct
import threading
import time

from rawkafka import RawConn, build_batch, request_frame

API_METADATA = 3


def proc_status_kib(pid):
    """VmRSS and VmHWM of a process, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0])
    return out


def reset_hwm(pid):
    """Resets VmHWM to the current RSS (Linux: write 5 to clear_refs)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def request_header(api_key, version, correlation_id=1, client_id="hostile"):
    """A request header v1 without the frame's size: the first bytes of a
    frame whose size a hostile client declares itself."""
    return request_frame(api_key, version, correlation_id, b"", client_id=client_id)[4:]


class Hog:
    """`count` connections, each declaring a frame of `declared` bytes (the
    size prefix), then sending `first` (a request header, so the frame looks
    like a real request) and zeros up to `held` bytes of it, never the rest.
    `pump` keeps pushing while the broker reads; a connection the broker
    closes is counted, not reopened."""

    def __init__(self, host, port, count, declared, held, first=b"", connect_timeout_s=10.0):
        self.sel = selectors.DefaultSelector()
        self.conns = []
        self.closed = 0
        self.refused = 0
        payload = struct.pack(">i", declared) + first
        payload += bytes(max(0, min(held, declared) - len(first)))
        deadline = time.monotonic() + connect_timeout_s
        for _ in range(count):
            if time.monotonic() > deadline:
                break
            try:
                s = socket.create_connection((host, port), timeout=5.0)
            except OSError:
                self.refused += 1
                continue
            s.setblocking(False)
            c = {"sock": s, "data": memoryview(payload), "sent": 0}
            self.conns.append(c)
            self.sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, c)

    def pump(self, duration_s):
        """Sends what the sockets take for `duration_s`; returns bytes sent."""
        sent = 0
        end = time.monotonic() + duration_s
        while time.monotonic() < end and self.sel.get_map():
            for key, events in self.sel.select(timeout=0.05):
                c = key.data
                s = c["sock"]
                if events & selectors.EVENT_READ:
                    try:
                        if not s.recv(65536):
                            self._drop(c)
                            continue
                    except BlockingIOError:
                        pass
                    except OSError:
                        self._drop(c)
                        continue
                if events & selectors.EVENT_WRITE:
                    rest = c["data"][c["sent"]:]
                    if not rest:
                        self.sel.modify(s, selectors.EVENT_READ, c)
                        continue
                    try:
                        n = s.send(rest)
                        c["sent"] += n
                        sent += n
                    except BlockingIOError:
                        pass
                    except OSError:
                        self._drop(c)
        return sent

    def _drop(self, c):
        self.closed += 1
        try:
            self.sel.unregister(c["sock"])
        except (KeyError, ValueError):
            pass
        c["sock"].close()

    def open_count(self):
        return len(self.sel.get_map())

    def close(self):
        for c in self.conns:
            try:
                self.sel.unregister(c["sock"])
            except (KeyError, ValueError):
                pass
            c["sock"].close()
        self.sel.close()


class Pumper:
    """Runs `Hog.pump` on a thread until stopped."""

    def __init__(self, hogs):
        self.hogs = hogs
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            for h in self.hogs:
                h.pump(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)


def metadata_v1(conn):
    """Metadata v1 for no topic: brokers and controller only."""
    conn.request(API_METADATA, 1, struct.pack(">i", 0))


class Prober:
    """A well-behaved client: Metadata and a 1 KiB acks=all produce, one
    after the other, each timed; a request not answered within
    `timeout_s` counts as `timeout_s` and reconnects."""

    def __init__(self, host, port, topic, timeout_s=5.0):
        self.host, self.port, self.topic = host, port, topic
        self.timeout_s = timeout_s
        self.metadata_ms = []
        self.produce_ms = []
        self.errors = []
        self.value = bytes(1024)
        self.conn = None

    def _conn(self):
        if self.conn is None:
            self.conn = RawConn(self.host, self.port, timeout_s=self.timeout_s)
        return self.conn

    def _timed(self, out, fn):
        start = time.monotonic()
        try:
            fn(self._conn())
        except (OSError, ConnectionError, AssertionError) as e:
            self.errors.append(repr(e))
            if self.conn is not None:
                self.conn.close()
                self.conn = None
            out.append(max(self.timeout_s, time.monotonic() - start) * 1000)
            return
        out.append((time.monotonic() - start) * 1000)

    def once(self):
        self._timed(self.metadata_ms, metadata_v1)

        def produce(conn):
            err, _ = conn.produce(self.topic, 0, build_batch([self.value]), acks=-1)
            assert err == 0, f"produce answered error {err}"

        self._timed(self.produce_ms, produce)

    def run(self, duration_s, pause_s=0.02):
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            self.once()
            time.sleep(pause_s)

    def close(self):
        if self.conn is not None:
            self.conn.close()


def p99(samples):
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * 0.99))]
