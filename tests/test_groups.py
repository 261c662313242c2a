"""Consumer groups (classic protocol) with confluent-kafka / librdkafka.

- three members (separate processes) split a 6-partition topic; one is
  SIGKILLed; the survivors take its partitions over after its session timeout
  and resume from its committed offsets (no reprocessing below them);
- a single member's join completes in well under a second when
  group.initial.rebalance.delay.ms=0 (the figure is printed);
- committed offsets (and their metadata) survive a broker SIGKILL + restart.
"""

import json
import os
import pathlib
import signal
import struct
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka import ConsumerGroupTopicPartitions

from rawkafka import RawConn, _str
from wireutil import base_conf, create_topic, producer, unique_topic

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "group_worker.py"
SESSION_TIMEOUT_MS = 6000  # the broker's group.min.session.timeout.ms


def fill_partitions(broker, topic, partitions, per_partition, **producer_conf):
    """Produce `per_partition` records to each partition explicitly; offsets 0..n-1."""
    p = producer(broker, **producer_conf)
    errors = []

    def dr(err, msg):
        if err is not None:
            errors.append(err)

    for i in range(per_partition):
        for part in range(partitions):
            while True:
                try:
                    p.produce(topic, value=f"p{part}-{i:05d}".encode(), partition=part, on_delivery=dr)
                    break
                except BufferError:
                    p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0, "undelivered records after 60 s"
    assert not errors, errors[:5]


def committed_offsets(broker, group, topic, partitions, timeout_s=15):
    """{partition: committed offset} as the group coordinator reports it (OffsetFetch)."""
    a = AdminClient(base_conf(broker))
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    res = a.list_consumer_group_offsets([req], request_timeout=timeout_s)[group].result(timeout_s)
    out = {}
    for tp in res.topic_partitions:
        assert tp.error is None, f"OffsetFetch {group} {topic}[{tp.partition}]: {tp.error}"
        out[tp.partition] = tp.offset
    return out


def read_events(path):
    events = []
    try:
        text = pathlib.Path(path).read_text()
    except FileNotFoundError:
        return events
    for line in text.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            pass  # a line torn by SIGKILL
    return events


def current_assignment(events):
    cur = []
    for e in events:
        if e["ev"] == "assign":
            cur = list(e["parts"])
        elif e["ev"] == "revoke":
            cur = []
    return cur


def wait_until(pred, timeout_s, what, interval_s=0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


# ---------------------------------------------------------------------------


@pytest.mark.timeout(150)
@pytest.mark.parametrize("initial_delay_ms", [3000, 0], ids=["delay3000", "delay0"])
def test_three_members_split_kill_one_survivors_resume(start_broker, tmp_path, initial_delay_ms):
    partitions, per_part = 6, 300
    # With the default initial delay (3 s) three members that start together
    # join one generation; with 0 each arrival rebalances a group that is
    # already consuming (more rebalances, the same guarantees).
    broker = start_broker(sets=[f"group.initial.rebalance.delay.ms={initial_delay_ms}"])
    topic = create_topic(broker, unique_topic("grp3"), partitions)
    # Small batches (~25 records) so that a member's fetches interleave its
    # partitions and the victim is killed part-way through each of them.
    fill_partitions(broker, topic, partitions, per_part, **{"batch.size": 600, "linger.ms": 1})
    group = unique_topic("g3")
    stop_path = tmp_path / "stop"
    names = ["w0", "w1", "w2"]
    paths = {n: tmp_path / f"{n}.events" for n in names}
    procs = {}
    env = dict(os.environ)
    try:
        for n in names:
            errlog = open(tmp_path / f"{n}.stderr", "wb")
            procs[n] = subprocess.Popen(
                [sys.executable, str(WORKER), broker.bootstrap, topic, group, n,
                 str(paths[n]), str(stop_path), "0.01"],
                stdin=subprocess.DEVNULL, stdout=errlog, stderr=errlog, env=env)

        # 1. The split: every member holds >= 1 partition, disjoint, union = all 6.
        def split():
            dead = {n: pr.returncode for n, pr in procs.items() if pr.poll() is not None}
            assert not dead, f"workers exited early {dead}: " + (tmp_path / f"{list(dead)[0]}.stderr").read_text()[-2000:]
            cur = {n: current_assignment(read_events(paths[n])) for n in names}
            flat = [p for v in cur.values() for p in v]
            if all(cur.values()) and sorted(flat) == list(range(partitions)):
                return cur
            return None

        cur = wait_until(split, 40, "three members to split the 6 partitions")
        t_split = time.time()
        print(f"assignment: {cur}")

        # 2. Kill the victim once it has committed progress on each of its partitions.
        victim = "w0"
        vparts = cur[victim]

        def victim_progress():
            last = {}
            for e in read_events(paths[victim]):
                if e["ev"] == "commit":
                    for p, o in e["offsets"].items():
                        last[int(p)] = o
            return last if all(last.get(p, 0) >= 30 for p in vparts) else None

        wait_until(victim_progress, 40, f"{victim} to commit >= 30 records on each of {vparts}")
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait(10)
        t_kill = time.time()
        at_kill = committed_offsets(broker, group, topic, partitions)
        print(f"committed offsets right after SIGKILL of {victim}: {at_kill}")

        vev = read_events(paths[victim])
        v_last_commit, v_max_msg = {}, {}
        for e in vev:
            if e["ev"] == "commit":
                for p, o in e["offsets"].items():
                    v_last_commit[int(p)] = o
            elif e["ev"] == "msg":
                v_max_msg[e["p"]] = max(v_max_msg.get(e["p"], -1), e["o"])
        for p in vparts:
            assert v_last_commit[p] <= at_kill[p] <= v_max_msg[p] + 1, (
                f"partition {p}: committed offset {at_kill[p]} is not between the victim's last "
                f"acknowledged commit {v_last_commit[p]} and its last processed offset + 1 "
                f"{v_max_msg[p] + 1}")
        unfinished = [p for p in vparts if at_kill[p] < per_part]
        assert unfinished, f"victim finished all of {vparts} before the kill; test too slow"

        # 3. Survivors take over and finish; every partition committed to the end.
        def all_done():
            done = committed_offsets(broker, group, topic, partitions)
            return done if all(done[p] == per_part for p in range(partitions)) else None

        final = wait_until(all_done, 60, "survivors to commit every partition to its end", 0.5)
        print(f"final committed offsets: {final}")
        stop_path.touch()
        for n in names[1:]:
            try:
                procs[n].wait(30)
            except subprocess.TimeoutExpired:
                procs[n].kill()
                raise AssertionError(f"worker {n} did not stop within 30 s")
    finally:
        stop_path.touch()
        for pr in procs.values():
            if pr.poll() is None:
                pr.kill()
                pr.wait(10)

    ev = {n: read_events(paths[n]) for n in names}
    for n in names[1:]:
        errs = [e for e in ev[n] if e["ev"] in ("commit_error", "error")]
        assert not errs, f"{n} saw errors: {errs[:5]}"
        assert procs[n].returncode == 0, f"{n} exited {procs[n].returncode}"

    # Takeover: the first post-kill assignment that includes a victim partition.
    takeovers = {}
    for n in names[1:]:
        for e in ev[n]:
            if e["ev"] == "assign" and e["t"] > t_kill:
                for p in e["parts"]:
                    if p in vparts and p not in takeovers:
                        takeovers[p] = (n, e["t"] - t_kill)
    print(f"takeover of {vparts} (partition: (member, seconds after SIGKILL)): {takeovers}")
    assert sorted(takeovers) == sorted(vparts), f"victim partitions not taken over: {takeovers}"
    for p, (n, dt) in takeovers.items():
        assert dt < SESSION_TIMEOUT_MS / 1000 + 15, f"partition {p} taken over only after {dt:.1f}s"
        # Kafka keeps a classic member (and its partitions) until its session
        # expires; its last heartbeat was at most heartbeat.interval.ms (0.5 s)
        # before the kill.
        assert dt > SESSION_TIMEOUT_MS / 1000 - 1.0, (
            f"partition {p} moved {dt:.1f}s after SIGKILL, before the {SESSION_TIMEOUT_MS} ms session timeout")

    # Every record processed at least once; duplicates only where the victim
    # processed a record it had not committed (offset >= its committed offset).
    seen = {p: {} for p in range(partitions)}  # p -> offset -> [member]
    for n in names:
        for e in ev[n]:
            if e["ev"] == "msg":
                seen[e["p"]].setdefault(e["o"], []).append(n)
    for p in range(partitions):
        missing = [o for o in range(per_part) if o not in seen[p]]
        assert not missing, f"partition {p}: offsets never processed: {missing[:20]}"
        bad = {o: who for o, who in seen[p].items()
               if len(who) > 1 and not (p in vparts and o >= at_kill[p] and who.count(victim) == 1
                                        and len(who) == 2)}
        assert not bad, (
            f"partition {p}: records reprocessed although already committed "
            f"(committed at kill {at_kill.get(p)}): {dict(list(bad.items())[:10])}")

    # Survivors resumed each victim partition exactly at the committed offset.
    for p in unfinished:
        after = [(e["t"], e["o"], n) for n in names[1:] for e in ev[n]
                 if e["ev"] == "msg" and e["p"] == p and e["t"] > t_kill]
        after.sort()
        assert after, f"partition {p}: nothing processed after the kill"
        first = after[0][1]
        assert first == at_kill[p], (
            f"partition {p}: survivor {after[0][2]} resumed at offset {first}, "
            f"committed offset was {at_kill[p]}")
        reproc = sum(1 for o in range(at_kill[p], v_max_msg[p] + 1))
        print(f"partition {p}: victim committed {at_kill[p]}, processed up to {v_max_msg[p]}, "
              f"survivor resumed at {first} ({reproc} records processed twice, allowed)")


# ---------------------------------------------------------------------------


JOIN_TRIALS = 3


@pytest.mark.timeout(60)
def test_single_member_join_latency(start_broker):
    broker = start_broker(sets=["group.initial.rebalance.delay.ms=0"])
    topic = create_topic(broker, unique_topic("join"), 3)
    figures, from_new = [], []
    for trial in range(JOIN_TRIALS):
        group = unique_topic("gjoin")
        conf = base_conf(broker, **{
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
        })
        if os.environ.get("GROUP_DEBUG"):
            conf["debug"] = "cgrp,protocol"
        t_new = time.monotonic()
        c = Consumer(conf)
        assigned = []

        def on_assign(consumer, parts):
            assigned.append((time.monotonic(), sorted(tp.partition for tp in parts)))

        try:
            t0 = time.monotonic()
            c.subscribe([topic], on_assign=on_assign)
            deadline = t0 + 15
            while not assigned and time.monotonic() < deadline:
                c.poll(0.01)
            assert assigned, f"trial {trial}: no assignment within 15 s of subscribe()"
            dt = assigned[0][0] - t0
            figures.append(dt)
            from_new.append(assigned[0][0] - t_new)
            assert assigned[0][1] == [0, 1, 2], assigned
        finally:
            c.close()
    print("join latency subscribe() -> on_assign (group.initial.rebalance.delay.ms=0): "
          + ", ".join(f"{dt * 1000:.0f} ms" for dt in figures)
          + "; from Consumer() creation (includes FindCoordinator): "
          + ", ".join(f"{dt * 1000:.0f} ms" for dt in from_new))
    for dt in figures:
        assert dt < 1.0, f"single-member join took {dt * 1000:.0f} ms (figures {figures})"


# ---------------------------------------------------------------------------


def _consume_first(c, partitions, timeout_s=20):
    """Consume until one record from each partition has been seen; {p: first offset}."""
    first = {}
    deadline = time.monotonic() + timeout_s
    while len(first) < len(partitions) and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consumer error: {m.error()}")
        first.setdefault(m.partition(), m.offset())
    return first


@pytest.mark.timeout(90)
def test_committed_offsets_survive_sigkill(start_broker):
    partitions, per_part = 3, 20
    broker = start_broker(sets=["group.initial.rebalance.delay.ms=0"])
    topic = create_topic(broker, unique_topic("grpkill"), partitions)
    fill_partitions(broker, topic, partitions, per_part)
    group = unique_topic("gkill")
    conf = base_conf(broker, **{
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_TIMEOUT_MS,
    })
    want = {0: 5, 1: 11, 2: 0}

    c = Consumer(conf)
    try:
        c.subscribe([topic])
        first = _consume_first(c, range(partitions))
        assert first == {0: 0, 1: 0, 2: 0}, f"a fresh group should start at 0: {first}"
        c.commit(offsets=[TopicPartition(topic, p, o, metadata=f"meta-{p}") for p, o in want.items()],
                 asynchronous=False)
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        assert {tp.partition: tp.offset for tp in got} == want
    finally:
        c.close()

    # The commit was acknowledged: it must be on disk. SIGKILL, restart.
    broker.restart(kill=True)

    after = committed_offsets(broker, group, topic, partitions)
    assert after == want, f"committed offsets after SIGKILL + restart {after}, expected {want}"
    c2 = Consumer(conf)
    try:
        got = c2.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        assert {tp.partition: tp.offset for tp in got} == want
        assert {tp.partition: tp.metadata for tp in got} == {p: f"meta-{p}" for p in range(partitions)}
        c2.subscribe([topic])
        first = _consume_first(c2, range(partitions))
        assert first == want, f"new member after restart started at {first}, committed {want}"
    finally:
        c2.close()


def _commit_v2(broker, group, topic, offset, retention_ms):
    """OffsetCommit v2 from outside group management with a retention time
    (-1: the broker's offsets.retention.minutes); returns the error code.
    No client library sends one any more, so it is built by hand."""
    c = RawConn(broker.host, broker.port)
    try:
        body = (_str(group) + struct.pack(">i", -1) + _str("") + struct.pack(">q", retention_ms)
                + struct.pack(">i", 1) + _str(topic) + struct.pack(">i", 1)
                + struct.pack(">iq", 0, offset) + _str(""))
        answer = c.request(8, 2, body)
        return struct.unpack(">h", answer[-2:])[0]
    finally:
        c.close()


@pytest.mark.timeout(60)
def test_offsets_expire_at_their_retention_time_across_a_sigkill(start_broker):
    """An offset committed with a retention time (OffsetCommit v2-v4) expires
    that long after its commit, as in Kafka 4.3.1 (asked side by side while
    writing this), also when the broker was killed in between; one with the
    broker's retention (a week) stays, and so does a librdkafka commit. The
    group whose offsets all expired is no longer listed."""
    b = start_broker(sets=["offsets.retention.check.interval.ms=200"])
    topic = create_topic(b, unique_topic("expiring"), 1)
    assert _commit_v2(b, "short-lived", topic, 11, 5000) == 0
    assert _commit_v2(b, "long-lived", topic, 12, -1) == 0
    c = Consumer(base_conf(b, **{"group.id": "librdkafka-simple"}))
    c.commit(offsets=[TopicPartition(topic, 0, 13)], asynchronous=False)
    c.close()
    committed_at = time.monotonic()
    b.restart(kill=True)
    a = AdminClient(base_conf(b))

    def listed():
        return {g.group_id for g in a.list_consumer_groups().result(15).valid}

    assert {"short-lived", "long-lived", "librdkafka-simple"} <= listed()
    assert committed_offsets(b, "short-lived", topic, 1) == {0: 11}
    wait_until(lambda: committed_offsets(b, "short-lived", topic, 1) == {0: -1001}, 20,
               "the 5 s offset to expire")
    assert time.monotonic() - committed_at >= 5.0, "expired before its retention time"
    assert committed_offsets(b, "long-lived", topic, 1) == {0: 12}
    assert committed_offsets(b, "librdkafka-simple", topic, 1) == {0: 13}
    wait_until(lambda: "short-lived" not in listed(), 10, "the emptied group to be forgotten")
    assert {"long-lived", "librdkafka-simple"} <= listed()
