"""9. scale, the dimensions beside partitions (issue 40 item 4): transactional
ids, open transactions, idle connections, consumer groups.

Each dimension runs on one fresh broker that grows through its sizes (say
10, 100, 1,000): at each size the items are made up to that count (from
SCALE_CONNS connections at once, over wire.py's hand-made requests), then,
after a second, the broker's VmRSS/VmHWM; memory per item is the RSS above
the one before any item, divided by the items. Then the per-request cost at
that size, SCALE_PROBES requests one after the other on one connection: the
request that makes one more item (p50), and a Metadata v1 for no topic
(p50); for doze also the p50 of each of the item's requests, and its meta.db
rounds, disk syncs and CPU meanwhile (`ProbeWindow`). The sizes grow on one
broker process, so that every RSS is set against the same empty one (a
restarted JVM's RSS was 170 MiB above its first one with 10 items). For
transactional ids and groups, at the largest size only, a clean stop and
start and a kill -9 and start, each timed until Metadata is answered, and
the RSS after.

  txn-ids      InitProducerId for a new transactional.id each (Kafka writes
               __transaction_state, doze meta.db)
  open-txns    a new transactional.id each: InitProducerId, AddPartitionsToTxn,
               one transactional record (acks=all), and no EndTxn: open until
               their timeout (10 min). Per-request cost: those three requests.
  connections  a connection each, kept open and idle after one ApiVersions.
               Per-request cost: connect + ApiVersions on a new connection.
  groups       a group each with one committed offset (OffsetCommit v2 outside
               a generation: no member; a member would cost JoinGroup and
               SyncGroup and heartbeats from the bench for every group)."""

import asyncio
import math
import os
import shutil
import time

from .common import pct, say
from .broker import create_topic
from . import wire

SCALE_CONNS = 32          # connections making items at once
SCALE_PROBES = 30         # requests per per-request-cost figure
TXN_TIMEOUT_MS = 600_000  # open transactions outlive the sweep (Kafka's max is 15 min)
TOPIC = "bench-scale-items"
TOPIC_PARTITIONS = 10

DIMS = ("txn-ids", "open-txns", "connections", "groups")
# The dimensions whose start-up after a clean stop and after kill -9 is timed
# at each size (what a start must load: meta.db records / __transaction_state,
# committed offsets / __consumer_offsets).
RESTARTED = ("txn-ids", "groups")
PROBE_WHAT = {
    "txn-ids": "InitProducerId of a new id",
    "open-txns": "InitProducerId + AddPartitionsToTxn + Produce of a new open txn",
    "connections": "connect + ApiVersions on a new connection",
    "groups": "OffsetCommit of a new group",
}
# The requests of one item, as `Maker.parts` times them.
PARTS = {
    "txn-ids": ("InitProducerId",),
    "open-txns": ("InitProducerId", "AddPartitionsToTxn", "Produce"),
    "groups": ("OffsetCommit",),
}
ITEM = {"txn-ids": "id", "open-txns": "open txn", "connections": "connection", "groups": "group"}


class Maker:
    """Makes the items of one dimension, numbered from 0, and keeps what must stay
    open (the connections of `connections`)."""

    def __init__(self, dim, bootstrap):
        self.dim, self.bootstrap, self.kept = dim, bootstrap, []

    async def one(self, conn, i, name=None):
        """Item `i` (named `name`, by default after `i`) over `conn`; seconds its
        requests took (`parts`: each request's, for open-txns)."""
        return sum(await self.parts(conn, i, name))

    async def parts(self, conn, i, name=None):
        """Item `i` over `conn`: the seconds of each of its requests, in order
        (PARTS names them)."""
        name = name or f"scale-item-{i}"
        if self.dim == "txn-ids":
            _, el = await wire.until_ok(conn, wire.init_producer_id_v1(name, TXN_TIMEOUT_MS),
                                        lambda b: wire.init_producer_id_result(b)[0], name)
            return [el]
        if self.dim == "open-txns":
            body, el = await wire.until_ok(conn, wire.init_producer_id_v1(name, TXN_TIMEOUT_MS),
                                           lambda b: wire.init_producer_id_result(b)[0], name)
            _, pid, epoch = wire.init_producer_id_result(body)
            part = i % TOPIC_PARTITIONS
            _, el2 = await wire.until_ok(conn, wire.add_partitions_v1(name, pid, epoch, TOPIC, part),
                                         wire.add_partitions_error, name)
            _, el3 = await wire.until_ok(conn, wire.produce_v3_txn(name, pid, epoch, TOPIC, part,
                                                                   b"x" * 100),
                                         wire.produce_error, name)
            return [el, el2, el3]
        if self.dim == "groups":
            _, el = await wire.until_ok(conn, wire.offset_commit_v2(name, TOPIC, i % TOPIC_PARTITIONS, i),
                                        wire.offset_commit_error, name)
            return [el]
        raise ValueError(self.dim)

    async def prepare(self):
        """The topic and the coordinator, once (Kafka creates its internal topic
        on the first FindCoordinator, and answers COORDINATOR_NOT_AVAILABLE
        until it is loaded)."""
        if self.dim == "connections":
            return
        if self.dim in ("open-txns", "groups"):
            await asyncio.to_thread(create_topic, self.bootstrap, TOPIC, TOPIC_PARTITIONS)
        conn = await wire.Conn.open(self.bootstrap)
        try:
            key_type = 0 if self.dim == "groups" else 1
            await wire.until_ok(conn, wire.find_coordinator_v1("scale-prepare", key_type),
                                wire.find_coordinator_error, "FindCoordinator")
        finally:
            conn.close()

    async def grow(self, have, want):
        """Items have..want-1."""
        if self.dim == "connections":
            sem = asyncio.Semaphore(SCALE_CONNS * 2)

            async def connect():
                async with sem:
                    c = await wire.Conn.open(self.bootstrap)
                    await c.call(wire.api_versions_v0())
                    self.kept.append(c)
            await asyncio.gather(*(connect() for _ in range(want - have)))
            return
        todo = iter(range(have, want))

        async def worker():
            conn = await wire.Conn.open(self.bootstrap)
            try:
                for i in todo:
                    await self.one(conn, i)
            finally:
                conn.close()
        await asyncio.gather(*(worker() for _ in range(min(SCALE_CONNS, want - have))))

    async def probe(self, n):
        """(p50 of making one item more, p50 of Metadata v1 for no topic, p50 of
        each of the item's requests), in seconds, SCALE_PROBES of each one after
        the other. The probes' items are named apart and not counted (at most
        SCALE_PROBES per size)."""
        item, parts = [], []
        if self.dim == "connections":
            for _ in range(SCALE_PROBES):
                t0 = time.monotonic()
                c = await wire.Conn.open(self.bootstrap)
                await c.call(wire.api_versions_v0())
                item.append(time.monotonic() - t0)
                c.close()
        conn = await wire.Conn.open(self.bootstrap)
        try:
            if self.dim != "connections":
                for k in range(SCALE_PROBES):
                    parts.append(await self.parts(conn, k, f"scale-probe-{n}-{k}"))
                    item.append(sum(parts[-1]))
            meta = [(await conn.timed(wire.metadata_v1([])))[1] for _ in range(SCALE_PROBES)]
        finally:
            conn.close()
        return pct(item, 50), pct(meta, 50), [pct(list(p), 50) for p in zip(*parts)]

    def close(self):
        for c in self.kept:
            c.close()
        self.kept = []


class ProbeWindow:
    """What the broker did while a size's probes ran (doze only, from its log
    and console): the p50 meta.db round (journal write + fdatasync, what
    InitProducerId and AddPartitionsToTxn wait for) and p50 disk sync (what
    an acks=all Produce waits for), and the CPU per probe item, of the
    process (every thread) and of its core task (the window holds the
    Metadata probes too, which cost little beside). A per-item cost that grows
    with the size while these stay flat is work in the broker that grows;
    one that grows with them is the disk (or the machine) at that moment:
    the sizes run one after the other, so load that comes and goes during
    the sweep moves some sizes and not others."""

    def __init__(self, broker):
        self.b = getattr(broker, "b", None)
        if not hasattr(self.b, "io_stats"):
            self.b = None
            return
        self.log0 = self.b.log_offset()
        self.cpu0 = threads_cpu_s(self.b.proc.pid)
        self.busy0 = self.b.core_busy_s()

    def close(self, items):
        if self.b is None or items == 0:
            return {}
        syncs, metas, _ = self.b.io_stats(self.log0)
        row = {
            "meta_round_p50_s": pct([us for _, us in metas], 50) / 1e6,
            "sync_p50_s": pct([us for _, us in syncs], 50) / 1e6,
            "cpu_per_item_s": (threads_cpu_s(self.b.proc.pid) - self.cpu0) / items,
        }
        busy = self.b.core_busy_s()
        if busy is not None and self.busy0 is not None:
            row["core_busy_per_item_s"] = (busy - self.busy0) / items
        return row


def threads_cpu_s(pid):
    """CPU seconds of `pid`'s threads alive now, to the nanosecond
    (/proc/PID/task/*/schedstat; /proc/PID/stat counts 10 ms ticks, too coarse
    for 30 requests); a thread that ended meanwhile is left out."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def raw_sync_p50_s(directory, count=SCALE_PROBES):
    """p50 of `count` small writes, each with an fdatasync, into a file of its
    own in `directory`, written and synced whole first (as doze's meta.db
    journal is; its partition logs' appends cost about the same): the disk
    at that moment, whoever the broker. Here an fdatasync took about 0.1 ms,
    or 4 ms in episodes of seconds (no broker running: 0.1 ms for 10 s, then
    4.0 ms for 9 s, and so on), which a broker that syncs meets in every
    request that waits for one."""
    path = os.path.join(directory, "scale-raw-sync.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    lat = []
    try:
        os.pwrite(fd, bytes(count * 4096), 0)
        os.fsync(fd)
        for k in range(count):
            t0 = time.monotonic()
            os.pwrite(fd, b"x" * 170, k * 4096)
            os.fdatasync(fd)
            lat.append(time.monotonic() - t0)
    finally:
        os.close(fd)
        os.unlink(path)
    return pct(lat, 50)


def window_text(row):
    """The probe window's figures of `row`, one line."""
    out = []
    if "probe_parts_p50_s" in row:
        out.append("p50 " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in row["probe_parts_p50_s"].items())
                   + " ms")
    if "meta_round_p50_s" in row:
        ms = lambda s: "n/a" if math.isnan(s) else f"{s * 1e3:.2f} ms"  # noqa: E731
        out.append(f"meta.db round p50 {ms(row['meta_round_p50_s'])}, disk sync p50 "
                   f"{ms(row['sync_p50_s'])}; CPU per probe item "
                   f"{row['cpu_per_item_s'] * 1e3:.2f} ms"
                   + (f" (core task {row['core_busy_per_item_s'] * 1e3:.3f} ms)"
                      if "core_busy_per_item_s" in row else ""))
    out.append(f"raw write + fdatasync p50 just after {row['raw_sync_p50_s'] * 1e3:.2f} ms")
    return "; ".join(out)


def sweep(args, work, peer, dim, sizes, broker_for):
    """One dimension on one broker through `sizes`: [figures per size]."""
    from .scale import fmt_s, status_mib  # scale.py imports this module
    data = os.path.join(work, f"items-{peer}-{dim}")
    broker = broker_for(peer, data)
    rows = []
    loop = asyncio.new_event_loop()
    maker = None

    def run(coro):
        return loop.run_until_complete(asyncio.wait_for(coro, args.scale_max_s))
    try:
        broker.start()
        maker = Maker(dim, broker.bootstrap)
        run(maker.prepare())
        time.sleep(1)
        base = status_mib(broker.pid).get("VmRSS", float("nan"))
        say(f"{peer:13s} {dim}: VmRSS {base:.0f} MiB before any {ITEM[dim]}")
        have = 0
        for n in sizes:
            t0 = time.monotonic()
            run(maker.grow(have, n))
            row = {"n": n, "grow_s": time.monotonic() - t0}
            have = n
            time.sleep(1)
            st = status_mib(broker.pid)
            row["rss_mib"], row["hwm_mib"] = st.get("VmRSS", float("nan")), st.get("VmHWM", float("nan"))
            row["kib_per_item"] = (row["rss_mib"] - base) * 1024 / n
            window = ProbeWindow(broker)
            row["probe_p50_s"], row["metadata_p50_s"], parts = run(maker.probe(n))
            row.update(window.close(SCALE_PROBES if dim != "connections" else 0))
            row["raw_sync_p50_s"] = raw_sync_p50_s(work)
            if len(PARTS.get(dim, ())) > 1:
                row["probe_parts_p50_s"] = dict(zip(PARTS[dim], parts))
            text = (f"{peer:13s} {dim} {n:7,d}: made in {row['grow_s']:.2f} s; VmRSS/VmHWM "
                    f"{row['rss_mib']:.0f}/{row['hwm_mib']:.0f} MiB = {row['kib_per_item']:.2f} KiB "
                    f"per {ITEM[dim]}; p50 {PROBE_WHAT[dim]} {row['probe_p50_s'] * 1e3:.2f} ms, "
                    f"Metadata {row['metadata_p50_s'] * 1e3:.2f} ms")
            say(text)
            say(f"{'':13s} {'':{len(dim)}s} {'':7s}  {window_text(row)}")
            rows.append(row)
        if dim in RESTARTED and rows:
            row = rows[-1]
            broker.stop()
            _, row["clean_s"] = broker.start()
            broker.kill()
            _, row["kill_s"] = broker.start()
            time.sleep(1)
            row["rss_restart_mib"] = status_mib(broker.pid).get("VmRSS", float("nan"))
            say(f"{peer:13s} {dim} {row['n']:7,d}: start to Metadata answered after SIGTERM "
                f"{fmt_s(row['clean_s'])}, after kill -9 {fmt_s(row['kill_s'])}, then VmRSS "
                f"{row['rss_restart_mib']:.0f} MiB")
    except (SystemExit, Exception) as e:  # noqa: BLE001 - a dimension that fails is reported
        say(f"{peer} {dim}: FAILED after {len(rows)} size(s): {type(e).__name__}: {e}")
    finally:
        if maker:
            maker.close()
        loop.close()
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)  # Kafka's dir is under it too
    return rows


def sizes_of(args, dim):
    return [int(c) for c in getattr(args, "scale_" + dim.replace("-", "_")).split(",") if c]
