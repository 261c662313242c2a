"""The broker under test (a release doze-kafka process), topics, and worker processes."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

from .common import ENTRY, cpu_seconds_of_children, proc_cpu_seconds, say


# --- the broker ------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ANSI = re.compile(r"\x1b\[[0-9;]*m")
KV = re.compile(r"(\w+)=(\S+)")


def proc_status_mib(pid, keys):
    """The `keys` of /proc/<pid>/status (VmRSS, VmHWM, ...) in MiB; empty
    when the process is gone."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in keys:
                    out[key] = int(rest.split()[0]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


class BrokerProc:
    """The release broker on `data_dir`, logging disk syncs and meta.db rounds
    at debug level so the bench can read what each group commit carried."""

    name = "doze"

    def __init__(self, binary, data_dir, sets, ready_timeout_s=30, wrapper=(),
                 log_filter="info,doze_net::disk=debug,doze_net::metadb=debug"):
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.data_dir = data_dir
        os.makedirs(data_dir, exist_ok=True)
        self.log_path = data_dir.rstrip("/") + ".log"
        # `wrapper`: a command the broker runs under (valgrind for callgrind).
        # The console on a free port (not 8092: the bench may run beside
        # another broker), for doze_core_busy_seconds_total (`core_busy_s`).
        self.console = f"127.0.0.1:{free_port()}"
        args = list(wrapper) + [binary, "--listen", self.bootstrap, "--data-dir", data_dir,
                                "--set", f"doze.console.listen={self.console}"]
        for s in sets:
            args += ["--set", s]
        env = dict(os.environ, NO_COLOR="1",
                   RUST_LOG=log_filter)
        self.log = open(self.log_path, "ab")
        # Start-up time: from the spawn to the ready line (read by the pump thread).
        self.ready_s = None
        t0 = time.monotonic()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env)
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                if b"doze-kafka listening on" in line and not ready.is_set():
                    self.ready_s = time.monotonic() - t0
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + ready_timeout_s
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                sys.exit(f"broker did not start (exit {self.proc.returncode}); log tail:\n"
                         f"{self.log_tail()}")

    def log_tail(self):
        self.log.flush()
        return open(self.log_path, "rb").read()[-4000:].decode(errors="replace")

    def log_offset(self):
        self.log.flush()
        return os.path.getsize(self.log_path)

    def io_stats(self, start, end=None):
        """Disk sync rounds and meta.db rounds logged between two offsets; a
        meta.db round's time is until it was durable (the journal's write and
        fdatasync: `stored_us`), which is what a waiting request waits for.
        (syncs: [(files, us)], metas: [(batches, us)], rounds: [(bytes of
        appends to .log files, us)], the syncs again by what they carried.)"""
        with open(self.log_path, "rb") as f:
            f.seek(start)
            text = f.read(None if end is None else end - start).decode(errors="replace")
        syncs, metas = [], []
        for line in text.splitlines():
            if "synced" in line and "doze_net::disk" in line:
                kv = dict(KV.findall(ANSI.sub("", line)))
                syncs.append((int(kv.get("files", 0)), int(kv.get("elapsed_us", 0)),
                              int(kv.get("bytes", -1))))
            elif "meta.db stored" in line:
                kv = dict(KV.findall(ANSI.sub("", line)))
                metas.append((int(kv.get("batches", 0)), int(kv.get("stored_us", 0))))
        return [(f, us) for f, us, _ in syncs], metas, [(n, us) for _, us, n in syncs]

    def cpu_seconds(self):
        return proc_cpu_seconds(self.proc.pid)

    def core_busy_s(self):
        """Seconds the broker task has spent in the core and carrying out its
        outputs (the console's doze_core_busy_seconds_total); None if the
        page cannot be read."""
        try:
            with urllib.request.urlopen(f"http://{self.console}/metrics", timeout=5) as page:
                text = page.read().decode()
        except OSError:
            return None
        m = re.search(r"^doze_core_busy_seconds_total (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def status_mib(self):
        """VmRSS, VmHWM (peak RSS), RssAnon and RssFile of the broker in MiB."""
        return proc_status_mib(self.proc.pid, ("VmRSS", "VmHWM", "RssAnon", "RssFile"))

    def stop(self, timeout_s=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.flush()
        return self.proc.returncode


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def create_topic(bootstrap, topic, partitions, config=None):
    from confluent_kafka.admin import AdminClient, NewTopic
    # log_level 5: not librdkafka's INFO lines ("Purging 1 unserved events") on stderr.
    a = AdminClient({"bootstrap.servers": bootstrap, "log_level": 5})
    a.create_topics([NewTopic(topic, partitions, 1, config=config or {})],
                    request_timeout=30)[topic].result(timeout=30)


def drop_topic(bootstrap, topic, logs, timeout_s=60):
    """Deletes `topic` and waits until its partition directories under
    `logs` are gone: a timed produce on a fast disk writes tens of GB, and
    the raw measurement after it, and the next run, need the space."""
    from confluent_kafka.admin import AdminClient
    a = AdminClient({"bootstrap.servers": bootstrap, "log_level": 5})
    a.delete_topics([topic], request_timeout=30)[topic].result(timeout=30)
    deadline = time.monotonic() + timeout_s
    prefix = topic + "-"
    while time.monotonic() < deadline:
        if not any(d.startswith(prefix) for d in os.listdir(logs)):
            return
        time.sleep(0.1)
    say(f"WARNING: {topic}'s files still there {timeout_s} s after DeleteTopics")


def run_workers(cmds, timeout_s):
    """Runs worker processes (this script's `_produce` / `_txn` modes) at once;
    returns their JSON results and the CPU seconds they used."""
    cpu0 = cpu_seconds_of_children()
    procs = [subprocess.Popen([sys.executable, str(ENTRY)] + c, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for c in cmds]
    results = []
    deadline = time.monotonic() + timeout_s
    try:
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                say(f"WARNING: a worker timed out; stderr tail: {err[-1000:]}")
                continue
            if p.returncode != 0 or not out.strip():
                say(f"WARNING: a worker exited {p.returncode}; stderr tail: {err[-2000:]}")
                continue
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:  # an exception (SIGTERM) leaves no worker behind
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results, cpu_seconds_of_children() - cpu0


