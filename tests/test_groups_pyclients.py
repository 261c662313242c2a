"""Consumer groups with kafka-python 3.x and aiokafka (classic protocol).

Each client: a member subscribe()s, consumes, commits explicit offsets (part
of each partition), leaves; a fresh member of the same group resumes exactly
at the committed offsets. kafka-python's admin client must list and describe
the group (ListGroups, DescribeGroups) and fetch its offsets (OffsetFetch).
"""

import asyncio
import time

import pytest
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata as KOffsetAndMetadata
from kafka.structs import TopicPartition as KTopicPartition

from test_groups import fill_partitions
from wireutil import create_topic, unique_topic

PARTITIONS = 3
PER_PART = 20
# The first member commits these (next offsets); the second must start there.
COMMIT_AT = {0: 7, 1: 13, 2: 0}
SESSION_TIMEOUT_MS = 6000


def _setup(start_broker, prefix):
    broker = start_broker(sets=["group.initial.rebalance.delay.ms=0"])
    topic = create_topic(broker, unique_topic(prefix), PARTITIONS)
    fill_partitions(broker, topic, PARTITIONS, PER_PART)
    return broker, topic, unique_topic(f"g-{prefix}")


def _check_resumed(got, who):
    """got: {p: [offsets]} read by the second member, in order."""
    for p in range(PARTITIONS):
        want = list(range(COMMIT_AT[p], PER_PART))
        assert got[p] == want, (
            f"{who}: partition {p}: second member read {got[p][:5]}..({len(got[p])}) "
            f"expected {want[:5]}..({len(want)}) from committed offset {COMMIT_AT[p]}")


# --- kafka-python -------------------------------------------------------------


def _kpy_consumer(broker, topic, group):
    return KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                         client_id=f"kpy-{group}", enable_auto_commit=False,
                         auto_offset_reset="earliest", session_timeout_ms=SESSION_TIMEOUT_MS,
                         heartbeat_interval_ms=1000, request_timeout_ms=30000,
                         max_poll_records=500)


def _kpy_read(consumer, done, timeout_s=30):
    got = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout_s
    while not done(got) and time.monotonic() < deadline:
        for tp, msgs in consumer.poll(timeout_ms=200).items():
            got[tp.partition].extend(m.offset for m in msgs)
    return got


@pytest.mark.timeout(90)
def test_kafka_python_group_commit_resume_and_admin(start_broker):
    broker, topic, group = _setup(start_broker, "kpy-grp")
    tps = [KTopicPartition(topic, p) for p in range(PARTITIONS)]
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        c1 = _kpy_consumer(broker, topic, group)
        try:
            got = _kpy_read(c1, lambda g: all(len(g[p]) >= PER_PART for p in g))
            for p in range(PARTITIONS):
                assert got[p] == list(range(PER_PART)), f"first member, partition {p}: {got[p]}"
            assert set(c1.assignment()) == set(tps)
            c1.commit({KTopicPartition(topic, p): KOffsetAndMetadata(o, f"kpy-{p}", -1)
                       for p, o in COMMIT_AT.items()})
            for p, o in COMMIT_AT.items():
                assert c1.committed(KTopicPartition(topic, p)) == o

            # Admin while the member is in the group.
            listed = admin.list_groups()
            print(f"kafka-python list_groups: {listed}")
            mine = [g for g in listed if g["group_id"] == group]
            assert len(mine) == 1, f"group {group} not in ListGroups: {listed}"
            assert mine[0]["protocol_type"] == "consumer", mine
            desc = admin.describe_groups([group])[group]
            print(f"kafka-python describe_groups: {desc}")
            assert desc["error"] is None, desc
            assert desc["group_state"] == "Stable", desc
            assert desc["protocol_type"] == "consumer", desc
            assert desc["protocol_data"] in ("range", "roundrobin", "sticky", "cooperative-sticky"), desc
            assert len(desc["members"]) == 1, desc
            m = desc["members"][0]
            assert m["client_id"] == f"kpy-{group}", m
            assignment = m["member_assignment"]
            assigned = _assigned_partitions(assignment, topic)
            assert assigned == list(range(PARTITIONS)), f"described assignment {assignment}"
        finally:
            c1.close()

        offs = admin.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offs.items() if tp.topic == topic} == COMMIT_AT, offs
        assert {tp.partition: om.metadata for tp, om in offs.items() if tp.topic == topic} == \
            {p: f"kpy-{p}" for p in range(PARTITIONS)}, offs
        desc = admin.describe_groups([group])[group]
        assert desc["group_state"] == "Empty" and desc["members"] == [], (
            f"after the only member left: {desc}")

        c2 = _kpy_consumer(broker, topic, group)
        try:
            want_total = sum(PER_PART - o for o in COMMIT_AT.values())
            got = _kpy_read(c2, lambda g: sum(map(len, g.values())) >= want_total)
            time.sleep(0.5)
            for tp, msgs in c2.poll(timeout_ms=300).items():
                got[tp.partition].extend(m.offset for m in msgs)
            _check_resumed(got, "kafka-python")
        finally:
            c2.close()
    finally:
        admin.close()


def _assigned_partitions(assignment, topic):
    """Partitions of `topic` in a described member assignment (object or dict form)."""
    if isinstance(assignment, dict):
        topics = assignment.get("assigned_partitions") or assignment.get("topics") or []
        for t in topics:
            name = t.get("topic") if isinstance(t, dict) else t[0]
            if name == topic:
                parts = t.get("partitions") if isinstance(t, dict) else t[1]
                return sorted(parts)
        return []
    for name, parts in getattr(assignment, "assignment", []) or []:
        if name == topic:
            return sorted(parts)
    tps = assignment.partitions() if hasattr(assignment, "partitions") else []
    return sorted(tp.partition for tp in tps if tp.topic == topic)


# --- aiokafka ----------------------------------------------------------------


async def _aio_flow(bootstrap, topic, group):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import OffsetAndMetadata, TopicPartition

    def make():
        return AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=1000,
                                request_timeout_ms=30000)

    async def read(c, done, timeout_s=30):
        got = {p: [] for p in range(PARTITIONS)}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not done(got) and loop.time() < deadline:
            batch = await c.getmany(timeout_ms=200)
            for tp, msgs in batch.items():
                got[tp.partition].extend(m.offset for m in msgs)
        return got

    c1 = make()
    await c1.start()
    try:
        got1 = await read(c1, lambda g: all(len(g[p]) >= PER_PART for p in g))
        assignment1 = sorted(tp.partition for tp in c1.assignment())
        await c1.commit({TopicPartition(topic, p): OffsetAndMetadata(o, f"aio-{p}")
                         for p, o in COMMIT_AT.items()})
        committed1 = {p: await c1.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        await c1.stop()

    c2 = make()
    await c2.start()
    try:
        want_total = sum(PER_PART - o for o in COMMIT_AT.values())
        got2 = await read(c2, lambda g: sum(map(len, g.values())) >= want_total)
        extra = await c2.getmany(timeout_ms=500)
        for tp, msgs in extra.items():
            got2[tp.partition].extend(m.offset for m in msgs)
    finally:
        await c2.stop()
    return got1, assignment1, committed1, got2


@pytest.mark.timeout(90)
def test_aiokafka_group_commit_resume(start_broker):
    broker, topic, group = _setup(start_broker, "aio-grp")
    got1, assignment1, committed1, got2 = asyncio.run(
        asyncio.wait_for(_aio_flow(broker.bootstrap, topic, group), 75))
    assert assignment1 == list(range(PARTITIONS)), assignment1
    for p in range(PARTITIONS):
        assert got1[p] == list(range(PER_PART)), f"first member, partition {p}: {got1[p]}"
    assert committed1 == COMMIT_AT, committed1
    _check_resumed(got2, "aiokafka")

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        offs = admin.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offs.items() if tp.topic == topic} == COMMIT_AT
        assert {tp.partition: om.metadata for tp, om in offs.items() if tp.topic == topic} == \
            {p: f"aio-{p}" for p in range(PARTITIONS)}
        assert any(g["group_id"] == group for g in admin.list_groups())
    finally:
        admin.close()


# --- DeleteGroups / OffsetDelete, and their durability -------------------------


@pytest.mark.timeout(90)
def test_kafka_python_delete_group_and_offsets_survive_sigkill(start_broker):
    import kafka.errors as Errors

    broker, topic, group_a = _setup(start_broker, "kpy-del")
    group_b = unique_topic("g-kpy-del-b")
    tp0, tp1, tp2 = (KTopicPartition(topic, p) for p in range(PARTITIONS))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        c = _kpy_consumer(broker, topic, group_a)
        try:
            _kpy_read(c, lambda g: all(len(g[p]) >= PER_PART for p in g))
            c.commit({KTopicPartition(topic, p): KOffsetAndMetadata(o, "", -1)
                      for p, o in COMMIT_AT.items()})
            # An active group can be neither deleted nor lose offsets of a
            # topic it is subscribed to.
            res = admin.delete_groups([group_a])
            assert res == {group_a: "NonEmptyGroupError"}, res
            res = admin.delete_group_offsets(group_a, [tp0])
            assert res == {tp0: Errors.GroupSubscribedToTopicError}, res
        finally:
            c.close()

        # Group b: offsets committed by a non-member (simple commit).
        res = admin.alter_group_offsets(group_b, {tp0: KOffsetAndMetadata(5, "b0", -1),
                                                  tp1: KOffsetAndMetadata(6, "b1", -1),
                                                  tp2: KOffsetAndMetadata(9, "b2", -1)})
        assert set(res.values()) == {Errors.NoError}, res
        res = admin.delete_group_offsets(group_b, [tp0, tp2])
        assert res == {tp0: Errors.NoError, tp2: Errors.NoError}, res

        res = admin.delete_groups([group_a])
        assert res == {group_a: "OK"}, res

        def state():
            listed = {g["group_id"] for g in admin.list_groups()}
            offs = admin.list_group_offsets({group_a: None, group_b: None})
            return ({g: g in listed for g in (group_a, group_b)},
                    {g: {tp.partition: (om.offset, om.metadata) for tp, om in o.items()}
                     for g, o in offs.items()})

        before = state()
        assert before == ({group_a: False, group_b: True},
                          {group_a: {}, group_b: {1: (6, "b1")}}), before
    finally:
        admin.close()

    broker.restart(kill=True)

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        after = state()
        assert after == before, (
            f"after SIGKILL + restart: {after}; before: {before} "
            "(a deleted group or deleted offsets came back, or kept offsets were lost)")
    finally:
        admin.close()
