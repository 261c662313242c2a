"""More transaction wire tests:

- interleaved transactions of several producers on one partition, committed and
  aborted at random: every reader (librdkafka, kafka-python, aiokafka) under
  read_committed gets exactly the committed records, also with tiny fetches
  (the aborted list must cover each fetched range);
- an open transaction survives a broker SIGKILL (it stays open, still holds the
  LSO, and its producer commits it after the restart), and a commit acknowledged
  just before a SIGKILL stays committed;
- tooling: ListTransactions / DescribeTransactions / DescribeProducers
  (kafka-python's admin client) while a transaction is open and after it ends.
"""

import asyncio
import os
import random

import pytest
from confluent_kafka import Producer

from txnutil import TXN_BROKER_SETS, end_offsets, read_to, txn_producer_conf
from wireutil import create_topic, unique_topic


# --- interleaved transactions ------------------------------------------------

def kp_read(bootstrap, topic, isolation, until, **extra):
    from kafka import KafkaConsumer, TopicPartition as KTP
    import time
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", isolation_level=isolation,
                      request_timeout_ms=20000, fetch_max_wait_ms=100, **extra)
    try:
        tp = KTP(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        deadline = time.monotonic() + 60
        while c.position(tp) < until:
            assert time.monotonic() < deadline, f"kafka-python stuck at {c.position(tp)} < {until}"
            for recs in c.poll(timeout_ms=200).values():
                got.extend((r.offset, r.value) for r in recs)
        return got
    finally:
        c.close()


async def aio_read(bootstrap, topic, isolation, until, **extra):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", isolation_level=isolation,
                         request_timeout_ms=20000, fetch_max_wait_ms=100, **extra)
    await c.start()
    try:
        tp = ATP(topic, 0)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        got = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while await c.position(tp) < until:
            assert loop.time() < deadline, f"aiokafka stuck at {await c.position(tp)} < {until}"
            for msgs in (await c.getmany(timeout_ms=200)).values():
                got.extend((m.offset, m.value) for m in msgs)
        return got
    finally:
        await c.stop()


def interleave(broker, topic, rng, rounds=8, nproducers=3):
    """Rounds of interleaved transactions from several producers on partition 0,
    each ended by a random commit or abort. Returns (producers, committed, aborted)."""
    producers = [Producer(txn_producer_conf(broker, unique_topic(f"txn-mix{i}"), **{
        "linger.ms": 0, "transaction.timeout.ms": 60000, "message.timeout.ms": 30000,
        # see txn_copier.py: librdkafka 2.16's rebootstrap can hang transactional calls
        "metadata.recovery.strategy": "none"})) for i in range(nproducers)]
    for p in producers:
        p.init_transactions(30)
    committed, aborted = [], []
    for rnd in range(rounds):
        open_vals = {i: [] for i in range(len(producers))}
        for p in producers:
            p.begin_transaction()
        # Interleave: each step one producer writes one record and waits for it.
        for step in range(rng.randint(3, 12)):
            i = rng.randrange(len(producers))
            v = b"r%d-p%d-s%d" % (rnd, i, step)
            producers[i].produce(topic, value=v)
            assert producers[i].flush(30) == 0
            open_vals[i].append(v)
        order = list(range(len(producers)))
        rng.shuffle(order)
        for i in order:
            if rng.random() < 0.5:
                producers[i].commit_transaction(30)
                committed.extend(open_vals[i])
            else:
                producers[i].abort_transaction(30)
                aborted.extend(open_vals[i])
    return producers, committed, aborted


@pytest.mark.timeout(150)
def test_interleaved_transactions_all_readers(txn_broker):
    seed = int(os.environ.get("DOZE_WIRE_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"seed {seed}")
    topic = create_topic(txn_broker, unique_topic("txn-mix"), 1)
    producers, committed, aborted = interleave(txn_broker, topic, rng)
    assert committed and aborted, f"seed {seed}: degenerate schedule"
    hw = end_offsets(txn_broker, topic, [0], "read_uncommitted")[0]
    lso = end_offsets(txn_broker, topic, [0], "read_committed")[0]
    assert lso == hw, f"no transaction open, but LSO {lso} != high watermark {hw}"
    # 8 rounds x 3 producers: each transaction ends with one marker per partition
    # it wrote to (a producer that wrote nothing in a round leaves no marker).
    markers = hw - len(committed) - len(aborted)
    assert 0 < markers <= 24, f"{markers} markers for at most 24 transactions (hw {hw})"

    want = sorted(committed)
    ck = read_to(txn_broker, topic, [0], "read_committed")[0]
    assert sorted(v for _, v in ck) == want, (
        f"seed {seed}: librdkafka read_committed: aborted seen "
        f"{sorted(set(v for _, v in ck) & set(aborted))[:5]}, missing "
        f"{sorted(set(want) - set(v for _, v in ck))[:5]}")
    # Tiny fetches: every response covers a few records, so each must carry the
    # aborted transactions overlapping exactly its range.
    ck_small = read_to(txn_broker, topic, [0], "read_committed",
                       **{"max.partition.fetch.bytes": 200})[0]
    assert ck_small == ck, f"seed {seed}: librdkafka read_committed with 200-byte fetches differs"
    ru = read_to(txn_broker, topic, [0], "read_uncommitted")[0]
    assert sorted(v for _, v in ru) == sorted(committed + aborted)

    kp = kp_read(txn_broker.bootstrap, topic, "read_committed", hw)
    assert kp == ck, f"seed {seed}: kafka-python read_committed differs from librdkafka"
    kp_tiny = kp_read(txn_broker.bootstrap, topic, "read_committed", hw, max_partition_fetch_bytes=200)
    assert kp_tiny == ck, f"seed {seed}: kafka-python read_committed with 200-byte fetches differs"
    aio = asyncio.run(asyncio.wait_for(aio_read(txn_broker.bootstrap, topic, "read_committed", hw), 70))
    assert aio == ck, f"seed {seed}: aiokafka read_committed differs from librdkafka"
    aio_tiny = asyncio.run(asyncio.wait_for(
        aio_read(txn_broker.bootstrap, topic, "read_committed", hw, max_partition_fetch_bytes=200), 70))
    assert aio_tiny == ck, f"seed {seed}: aiokafka read_committed with 200-byte fetches differs"


# --- broker restart ----------------------------------------------------------

@pytest.mark.timeout(150)
def test_transaction_state_rebuilt_after_sigkill(start_broker):
    """Small segments (1 KiB) so transactions span segment files; after a SIGKILL
    the broker rebuilds the open and aborted transactions from the log: the LSO
    is held by the one left open, read_committed (normal and tiny fetches) still
    drops every aborted record, and the open one can be aborted afterwards."""
    seed = int(os.environ.get("DOZE_WIRE_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"seed {seed}")
    broker = start_broker(sets=[*TXN_BROKER_SETS, "log.segment.bytes=1024"])
    topic = create_topic(broker, unique_topic("txn-rebuild"), 1)
    producers, committed, aborted = interleave(broker, topic, rng, rounds=6)
    holder = producers[0]
    holder.begin_transaction()
    open_start = end_offsets(broker, topic, [0], "read_uncommitted")[0]
    for i in range(2):
        holder.produce(topic, value=b"held-%d" % i)
        assert holder.flush(30) == 0
    committed_after_open = []
    producers[1].begin_transaction()
    producers[1].produce(topic, value=b"after-open")
    producers[1].commit_transaction(30)
    committed_after_open.append(b"after-open")
    hw = end_offsets(broker, topic, [0], "read_uncommitted")[0]
    segments = list((broker.data_dir).rglob("*.log"))
    print(f"hw {hw}, open transaction from {open_start}, {len(segments)} segment-like files")

    broker.kill9()
    broker.start()

    assert end_offsets(broker, topic, [0], "read_uncommitted")[0] == hw
    assert end_offsets(broker, topic, [0], "read_committed")[0] == open_start, (
        f"seed {seed}: after the restart the LSO must be the open transaction's first offset "
        f"{open_start}")
    for conf in ({}, {"max.partition.fetch.bytes": 200}):
        rc = read_to(broker, topic, [0], "read_committed", **conf)[0]
        assert sorted(v for _, v in rc) == sorted(committed), (
            f"seed {seed}: read_committed {conf} after restart: aborted seen "
            f"{sorted(set(v for _, v in rc) & set(aborted))[:5]}, missing "
            f"{sorted(set(committed) - set(v for _, v in rc))[:5]}")

    holder.abort_transaction(30)   # after the restart
    assert end_offsets(broker, topic, [0], "read_committed")[0] == hw + 1
    want = sorted(committed + committed_after_open)
    for conf in ({}, {"max.partition.fetch.bytes": 200}):
        rc = read_to(broker, topic, [0], "read_committed", **conf)[0]
        assert sorted(v for _, v in rc) == want, f"seed {seed}: read_committed {conf} after the abort"
    kp = kp_read(broker.bootstrap, topic, "read_committed", hw + 1, max_partition_fetch_bytes=200)
    assert sorted(v for _, v in kp) == want, f"seed {seed}: kafka-python read_committed after the abort"

    broker.restart()               # clean stop this time: the same again
    assert end_offsets(broker, topic, [0], "read_committed")[0] == hw + 1
    rc = read_to(broker, topic, [0], "read_committed", **{"max.partition.fetch.bytes": 200})[0]
    assert sorted(v for _, v in rc) == want, f"seed {seed}: read_committed after a clean restart"


@pytest.mark.timeout(120)
def test_open_transaction_survives_broker_sigkill(txn_broker):
    topic = create_topic(txn_broker, unique_topic("txn-restart"), 1)
    p = Producer(txn_producer_conf(txn_broker, unique_topic("txn-restart"), **{
        "transaction.timeout.ms": 60000, "message.timeout.ms": 30000,
        # see txn_copier.py: librdkafka 2.16's rebootstrap can hang transactional calls
        "metadata.recovery.strategy": "none"}))
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=b"done-%d" % i)
    p.commit_transaction(30)              # offsets 0-2, marker 3: acknowledged, so durable
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=b"open-%d" % i)
    assert p.flush(30) == 0               # offsets 4-6 in an open transaction

    txn_broker.kill9()
    txn_broker.start()

    assert end_offsets(txn_broker, topic, [0], "read_uncommitted")[0] == 7
    assert end_offsets(txn_broker, topic, [0], "read_committed")[0] == 4, (
        "after a restart the open transaction (from offset 4) must still hold the LSO")
    assert [v for _, v in read_to(txn_broker, topic, [0], "read_committed")[0]] == \
        [b"done-0", b"done-1", b"done-2"]
    # Its producer is still alive and commits it.
    p.commit_transaction(30)
    assert end_offsets(txn_broker, topic, [0], "read_committed")[0] == 8
    assert [v for _, v in read_to(txn_broker, topic, [0], "read_committed")[0]] == \
        [b"done-0", b"done-1", b"done-2", b"open-0", b"open-1", b"open-2"]
    # And a commit acknowledged right before a SIGKILL stays committed.
    p.begin_transaction()
    p.produce(topic, value=b"last")
    p.commit_transaction(30)
    txn_broker.kill9()
    txn_broker.start()
    # 8 "last", 9 its marker. EndTxn is answered once the decision and the
    # markers are durable; a kill before the Complete record is stored finds
    # the decision at start-up and carries it out again, writing the marker
    # a second time at 10 (as Kafka's coordinator resends the markers of a
    # PrepareCommit it loads). Either way nothing is held back.
    end = end_offsets(txn_broker, topic, [0], "read_committed")[0]
    assert end in (10, 11)
    assert end == end_offsets(txn_broker, topic, [0], "read_uncommitted")[0]
    assert [v for _, v in read_to(txn_broker, topic, [0], "read_committed")[0]] == \
        [b"done-0", b"done-1", b"done-2", b"open-0", b"open-1", b"open-2", b"last"]


# --- tooling -----------------------------------------------------------------

@pytest.mark.timeout(90)
def test_list_describe_transactions_and_producers(txn_broker):
    from kafka import KafkaAdminClient, TopicPartition as KTP
    t1 = create_topic(txn_broker, unique_topic("txn-tool-a"), 1)
    t2 = create_topic(txn_broker, unique_topic("txn-tool-b"), 1)
    txn_id = unique_topic("txn-tool")
    p = Producer(txn_producer_conf(txn_broker, txn_id, **{"transaction.timeout.ms": 45000}))
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(t1, value=b"x")
    assert p.flush(30) == 0
    p.produce(t1, value=b"y")
    p.produce(t2, value=b"z")
    assert p.flush(30) == 0

    admin = KafkaAdminClient(bootstrap_servers=txn_broker.bootstrap, request_timeout_ms=20000)
    try:
        listing = [t for ts in admin.list_transactions().values() for t in ts]
        mine = [t for t in listing if t.transactional_id == txn_id]
        assert len(mine) == 1, f"ListTransactions: {listing}"
        assert str(getattr(mine[0].state, "value", mine[0].state)) == "Ongoing", mine[0]

        desc = admin.describe_transactions([txn_id])[txn_id]
        assert str(getattr(desc.state, "value", desc.state)) == "Ongoing", desc
        assert desc.producer_id == mine[0].producer_id
        assert desc.transaction_timeout_ms == 45000, desc
        assert desc.topic_partitions == {KTP(t1, 0), KTP(t2, 0)}, desc
        assert desc.transaction_start_time_ms > 0, desc

        prod = admin.describe_producers([KTP(t1, 0), KTP(t2, 0)])
        for tp, first in ((KTP(t1, 0), 0), (KTP(t2, 0), 0)):
            active = [s for s in prod[tp].active_producers if s.producer_id == desc.producer_id]
            assert len(active) == 1, f"DescribeProducers {tp}: {prod[tp]}"
            assert active[0].producer_epoch == desc.producer_epoch, active[0]
            assert active[0].current_transaction_start_offset == first, (
                f"DescribeProducers {tp}: current transaction starts at {first}: {active[0]}")
        assert [s for s in prod[KTP(t1, 0)].active_producers
                if s.producer_id == desc.producer_id][0].last_sequence == 1

        p.commit_transaction(30)
        desc = admin.describe_transactions([txn_id])[txn_id]
        assert str(getattr(desc.state, "value", desc.state)) == "CompleteCommit", desc
        prod = admin.describe_producers([KTP(t1, 0)])
        active = [s for s in prod[KTP(t1, 0)].active_producers if s.producer_id == desc.producer_id]
        assert active and active[0].current_transaction_start_offset == -1, (
            f"no transaction is open any more: {active}")
        ongoing = [t for ts in admin.list_transactions(state_filters=["Ongoing"]).values()
                   for t in ts if t.transactional_id == txn_id]
        assert not ongoing, f"ListTransactions(Ongoing) still lists it: {ongoing}"
    finally:
        admin.close()
