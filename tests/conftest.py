"""Fixtures for the wire tests: a real doze-kafka release binary on loopback.

`start_broker(sets=[...])` starts a broker on a free 127.0.0.1 port with a fresh
data directory and waits (bounded) for its `doze-kafka listening on` line.
Its HTTP console is off (`doze.console.listen=none`: brokers run side by side,
and all would want the default port 8092) unless `console=True` gives it a free
port of its own (`Broker.console_url`, kept across restarts).
The returned `Broker` can be SIGKILLed (`kill9`), stopped cleanly (`stop`,
SIGTERM) and restarted on the same port and data directory (`restart`).

The binary is target/release/doze-kafka (override with DOZE_KAFKA_BIN). The
session builds it once with `cargo build --release -p doze-net` unless
DOZE_KAFKA_SKIP_BUILD=1 (the Makefile has already built it; a second build is a
no-op anyway).
"""

import ctypes
import os
import pathlib
import signal
import socket
import subprocess
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN_DEFAULT = ROOT / "target" / "release" / "doze-kafka"
READY_LINE = "doze-kafka listening on"
CONSOLE_LINE = "doze-kafka console: "
CONSOLE_KEY = "doze.console.listen="
READY_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30
BUILD_TIMEOUT_S = 1500
LOG_TAIL_LINES = 60


def _set_pdeathsig():
    # If pytest itself dies (e.g. killed by CI), take the broker with it.
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def free_port():
    return free_ports(1)[0]


def free_ports(n):
    """`n` distinct free ports: each socket stays bound until all are
    chosen (ports taken one at a time can repeat, and a broker given one
    port for two listeners refuses to start)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def in_ci():
    """True under CI (`CI=true`, as GitHub Actions and most CI systems set it)."""
    return os.environ.get("CI") == "true"


def missing_dependency(reason):
    """A test's tool or package (kcat, Chromium, kafkajs, the Kafka reference,
    java, ...) is not there. A developer without it gets a skip that says what
    to install; under CI (`CI=true`) the test fails, because CI installs every
    dependency and a missing one means the install broke (a `make test` whose
    `apt-get` met a held dpkg lock once skipped the console tests and passed)."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: a test whose dependency is missing fails)",
                    pytrace=False)
    pytest.skip(reason)


class BrokerStartError(RuntimeError):
    pass


class Broker:
    """One doze-kafka process (and its successors after restarts)."""

    def __init__(self, binary, data_dir, log_dir, port=None, sets=(), extra_args=(),
                 console=False):
        self.binary = str(binary)
        self.data_dir = pathlib.Path(data_dir)
        self.log_dir = pathlib.Path(log_dir)
        self.port = port or free_port()
        self.sets = list(sets)
        self.extra_args = list(extra_args)
        # A console setting in `sets` wins (later --set flags override).
        # Not the broker's port (a port left to the broker is drawn apart).
        self.console_port = None
        while console and self.console_port in (None, self.port):
            self.console_port = free_port()
        # The URL of the console's own line, once printed.
        self.console_url = None
        self.proc = None
        self.generation = 0
        self.log_paths = []
        self._reader = None

    @property
    def host(self):
        return "127.0.0.1"

    @property
    def bootstrap(self):
        return f"{self.host}:{self.port}"

    def args(self):
        a = [self.binary, "--listen", self.bootstrap, "--data-dir", str(self.data_dir)]
        console = f"127.0.0.1:{self.console_port}" if self.console_port else "none"
        for s in [CONSOLE_KEY + console] + self.sets:
            a += ["--set", s]
        return a + self.extra_args

    def _spawn(self, timeout_s):
        self.generation += 1
        self.console_url = None
        log_path = self.log_dir / f"broker-{self.port}-{self.generation}.log"
        self.log_paths.append(log_path)
        log = open(log_path, "ab", buffering=0)
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        proc = subprocess.Popen(
            self.args(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
            preexec_fn=_set_pdeathsig,
        )
        ready = threading.Event()

        def pump():
            # Copy stdout into the log and watch for the ready line; keep
            # draining afterwards so the pipe never fills.
            # With a console, ready once its line (printed right after the
            # listening line) is in too, so `console_url` is set on return.
            listening = False
            for raw in proc.stdout:
                log.write(raw)
                if READY_LINE.encode() in raw:
                    listening = True
                if raw.startswith(CONSOLE_LINE.encode()):
                    self.console_url = raw.decode().strip()[len(CONSOLE_LINE):]
                if listening and (self.console_port is None or self.console_url):
                    ready.set()
            log.close()

        reader = threading.Thread(target=pump, name=f"broker-{self.port}-stdout", daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready.wait(0.05):
                self.proc, self._reader = proc, reader
                return
            if proc.poll() is not None:
                reader.join(2)
                raise BrokerStartError(
                    f"doze-kafka exited with {proc.returncode} before listening "
                    f"(args {self.args()}):\n{self.log_tail()}"
                )
        proc.kill()
        proc.wait(10)
        raise BrokerStartError(
            f"doze-kafka did not print {READY_LINE!r} within {timeout_s}s "
            f"(args {self.args()}):\n{self.log_tail()}"
        )

    def start(self, timeout_s=READY_TIMEOUT_S):
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # On a restart the old socket may linger briefly; retry a few times.
        attempts = 5
        for i in range(attempts):
            try:
                self._spawn(timeout_s)
                return self
            except BrokerStartError:
                if i == attempts - 1 or self.generation == 1:
                    raise
                time.sleep(0.5)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        """SIGKILL: no chance to flush anything that is not already on disk."""
        assert self.running(), "kill9 on a broker that is not running"
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(STOP_TIMEOUT_S)
        self._reader.join(5)
        return self.proc.returncode

    def stop(self, timeout_s=STOP_TIMEOUT_S):
        """SIGTERM and wait; returns the exit code (SIGKILLs on timeout and raises)."""
        if not self.running():
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"doze-kafka ignored SIGTERM for {timeout_s}s:\n{self.log_tail()}")
        self._reader.join(5)
        return rc

    def restart(self, kill=False, timeout_s=READY_TIMEOUT_S):
        """Stop (SIGTERM, or SIGKILL with kill=True) and start on the same port and data dir."""
        if self.running():
            if kill:
                self.kill9()
            else:
                rc = self.stop()
                assert rc == 0, f"doze-kafka exited {rc} on SIGTERM:\n{self.log_tail()}"
        return self.start(timeout_s)

    def close(self):
        if self.running():
            try:
                self.stop(10)
            except AssertionError:
                pass

    def log_tail(self, lines=LOG_TAIL_LINES):
        out = []
        for p in self.log_paths:
            try:
                text = p.read_text(errors="replace").splitlines()
            except OSError:
                continue
            out.append(f"--- {p} (last {lines} lines) ---")
            out.extend(text[-lines:])
        return "\n".join(out)


@pytest.fixture(scope="session")
def broker_binary():
    binary = pathlib.Path(os.environ.get("DOZE_KAFKA_BIN", BIN_DEFAULT))
    if not os.environ.get("DOZE_KAFKA_SKIP_BUILD") and "DOZE_KAFKA_BIN" not in os.environ:
        subprocess.run(
            ["cargo", "build", "--release", "-p", "doze-net"],
            cwd=ROOT,
            check=True,
            timeout=BUILD_TIMEOUT_S,
        )
    if not binary.exists():
        pytest.fail(f"broker binary {binary} not found (run `cargo build --release -p doze-net`)")
    return binary


@pytest.fixture
def start_broker(broker_binary, tmp_path, request):
    """Factory: start_broker(sets=["key=value", ...]) -> running Broker."""
    brokers = []
    request.node._doze_brokers = brokers

    def factory(sets=(), extra_args=(), name="broker", listen_port=None, console=False):
        b = Broker(
            broker_binary,
            data_dir=tmp_path / f"{name}-data",
            log_dir=tmp_path,
            port=listen_port,
            sets=sets,
            extra_args=extra_args,
            console=console,
        )
        brokers.append(b)
        return b.start()

    yield factory
    for b in brokers:
        b.close()


@pytest.fixture
def broker(start_broker):
    """A broker with default settings on a fresh data dir."""
    return start_broker()


# Broker settings every transaction test uses: timed-out transactions are looked
# for every 500 ms (Kafka's default is 10 s) and groups rebalance at once.
TXN_BROKER_SETS = (
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
    "group.initial.rebalance.delay.ms=0",
)


@pytest.fixture
def txn_broker(start_broker):
    """A broker for transactional tests (TXN_BROKER_SETS)."""
    return start_broker(sets=TXN_BROKER_SETS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for b in getattr(item, "_doze_brokers", []):
            rep.sections.append((f"doze-kafka {b.bootstrap} log", b.log_tail()))
