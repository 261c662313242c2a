"""Log compaction (cleanup.policy=compact) seen by real clients.

A compacted topic with small segments is overwritten many times for a few
keys, then given a "filler" of keys written once, so that every overwrite lies
in a closed segment below the active one (the tail the cleaner may not touch).
Once the cleaner has run (log.cleaner.backoff.ms is low here), a consumer
reading from offset 0 sees exactly each key's latest record, at the offset its
write was acknowledged at (offsets are never renumbered, so the log has gaps),
tombstones until delete.retention.ms and not after, and a record superseded by
a newer one of its key only in the active segment. Transactions: aborted
batches go, read_committed sees the latest committed value per key, and no
committed record goes with its producer's aborted ones. A restart reads back
the same log; kafka-python reads the gaps from the beginning too.
"""

import collections
import pathlib
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from txnutil import TXN_BROKER_SETS, txn_producer_conf
from wireutil import consumer, create_topic, producer, unique_topic

# The broker looks for a log dirty enough every 200 ms (default 15 s).
CLEANER_SETS = ("log.cleaner.backoff.ms=200",)
SEGMENT_BYTES = 16384          # the broker accepts down to 1024 (Kafka: 1 MiB)
KEYS = [f"k{i:02d}" for i in range(20)]
ROUNDS = 150                   # 20 keys x 150 rounds = 3000 overwrites
TOMBSTONED = KEYS[:4]          # their last write is a tombstone
RESURRECTED = KEYS[4:8]        # a tombstone halfway, then values again
FILLER = 400                   # unique keys, ~27 KB: the overwrites all end up closed
PAD = b"." * 48
CONVERGE_S = 30                # how long the cleaner may take to catch up
READ_S = 20


def compact_config(**extra):
    conf = {
        "cleanup.policy": "compact",
        "segment.bytes": str(SEGMENT_BYTES),
        "min.cleanable.dirty.ratio": "0.01",
    }
    conf.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    return conf


class Acks:
    """Delivery reports: {offset: (key, value)} of every acknowledged record."""

    def __init__(self):
        self.by_offset = {}
        self.errors = []

    def __call__(self, err, msg):
        if err is None:
            self.by_offset[msg.offset()] = (msg.key(), msg.value())
        else:
            self.errors.append((err, msg.key(), msg.value()))

    def latest(self, only=None):
        """The log compaction must leave: each key's record at its highest
        acknowledged offset, [(offset, key, value)] by offset (`only(key,
        value)` filters first, e.g. to committed transactions)."""
        out = {}
        for off in sorted(self.by_offset):
            k, v = self.by_offset[off]
            if only is None or only(k, v):
                out[k] = (off, k, v)
        return sorted(out.values())


def send(p, topic, items, acks):
    for key, value in items:
        while True:
            try:
                p.produce(topic, key=key, value=value, on_delivery=acks)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(30) == 0, "undelivered after a 30 s flush"
    assert not acks.errors, acks.errors[:3]


def overwrites(rounds=ROUNDS, tag="v", tombstones=True):
    """(key, value) of `rounds` rounds over KEYS, values b"k03:{tag}00017:...".
    With `tombstones`, TOMBSTONED keys end in a tombstone and RESURRECTED keys
    get one halfway. Halfway, one key of its own (b"mid-{tag}") is written
    once: compacted, the log keeps it between gaps."""
    for r in range(rounds):
        for k in KEYS:
            value = b"%s:%s%05d:" % (k.encode(), tag.encode(), r) + PAD
            if tombstones and ((k in TOMBSTONED and r == rounds - 1)
                               or (k in RESURRECTED and r == rounds // 2)):
                value = None
            yield k.encode(), value
        if r == rounds // 2:
            yield b"mid-" + tag.encode(), b"mid:%s%05d:" % (tag.encode(), r) + PAD


def filler(tag, n=FILLER):
    return ((b"f-%s-%04d" % (tag.encode(), i), b"filler:" + PAD) for i in range(n))


def plain_producer(broker):
    return producer(broker, **{"enable.idempotence": True, "batch.size": 4096, "linger.ms": 5})


def segment_bases(broker, topic):
    d = pathlib.Path(broker.data_dir) / "logs" / f"{topic}-0"
    return sorted(int(p.name.split(".")[0]) for p in d.glob("*.log"))


def read_log(broker, topic, isolation="read_uncommitted", timeout_s=READ_S):
    """Every record of partition 0 from offset 0 with a fresh consumer, until
    its position reaches the end (ListOffsets latest under `isolation`).
    Returns (end, [(offset, key, value)]); asserts offsets strictly increase."""
    c = consumer(broker, **{"isolation.level": isolation})
    try:
        tp = TopicPartition(topic, 0)
        end = c.get_watermark_offsets(tp, timeout=15, cached=False)[1]
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + timeout_s
        while c.position([tp])[0].offset < end:
            assert time.monotonic() < deadline, (
                f"{topic} ({isolation}): position {c.position([tp])[0].offset} short of {end} "
                f"after {timeout_s}s, {len(out)} records")
            for m in c.consume(num_messages=10000, timeout=0.3):
                if m.error():
                    code = m.error().code()
                    if code == KafkaError._PARTITION_EOF:
                        continue
                    hint = ""
                    if code == KafkaError.MSG_SIZE_TOO_LARGE:
                        hint = (" -- librdkafka doubles its partition fetch size for every Fetch "
                                "answer that holds no record and no control record, and raises "
                                "this once it passed 1 GiB (after 10 such answers): the broker "
                                "answered Fetches with batches emptied by the cleaner only. "
                                f"Segments: {segment_bases(broker, topic)}")
                    raise AssertionError(f"consumer error on {topic} ({isolation}) after "
                                         f"{len(out)} records: {m.error()}{hint}")
                assert not out or m.offset() > out[-1][0], (
                    f"{topic}: offset {m.offset()} after {out[-1][0]} (not increasing)")
                out.append((m.offset(), m.key(), m.value()))
        return end, out
    finally:
        c.close()


def superseded(records):
    """(offset, key) of records whose key has a newer record later in `records`."""
    last = {k: off for off, k, _ in records}
    return [(off, k) for off, k, _ in records if last[k] != off]


def wait_compacted(broker, topic, done, what, isolation="read_uncommitted", timeout_s=CONVERGE_S):
    """Reads the log until `done(records)` holds; returns (end, records)."""
    deadline = time.monotonic() + timeout_s
    while True:
        end, recs = read_log(broker, topic, isolation)
        if done(recs):
            return end, recs
        if time.monotonic() > deadline:
            stale = superseded(recs)
            raise AssertionError(
                f"{topic}: {what} not reached within {timeout_s}s: end {end}, {len(recs)} records, "
                f"{len(stale)} superseded ({stale[:3]} .. {stale[-3:]}), segments "
                f"{segment_bases(broker, topic)}")
        time.sleep(0.3)


def once(*keys):
    """done(): each of `keys` is in the log exactly once."""
    keys = [k.encode() if isinstance(k, str) else k for k in keys]

    def done(recs):
        n = collections.Counter(k for _, k, _ in recs)
        return all(n[k] == 1 for k in keys)
    return done


def check_tail_only(broker, topic, recs):
    """A record superseded by a newer one of its key lies in the active segment."""
    active = segment_bases(broker, topic)[-1]
    below = [(off, k) for off, k in superseded(recs) if off < active]
    assert not below, (
        f"{topic}: superseded records below the active segment (base {active}): {below[:10]}")


def check_exactly(recs, want, what):
    """The log read is exactly `want` ([(offset, key, value)] by offset)."""
    if recs == want:
        return
    got_d = {o: (k, v) for o, k, v in recs}
    want_d = {o: (k, v) for o, k, v in want}
    missing = sorted(set(want_d) - set(got_d))
    extra = sorted(set(got_d) - set(want_d))
    changed = sorted(o for o in set(got_d) & set(want_d) if got_d[o] != want_d[o])
    raise AssertionError(
        f"{what}: read {len(recs)} records, expected {len(want)} (each key's latest write at "
        f"the offset it was acknowledged at); missing {len(missing)} "
        f"{[(o, want_d[o][0]) for o in missing[:8]]}, unexpected {len(extra)} "
        f"{[(o, got_d[o][0], (got_d[o][1] or b'<tombstone>')[:12]) for o in extra[:8]]}, "
        f"different {[(o, got_d[o], want_d[o]) for o in changed[:3]]}")


def gaps(recs):
    return sum(1 for a, b in zip(recs, recs[1:]) if b[0] - a[0] > 1)


# --- 1. overwrites, tombstones, delete.retention.ms (confluent-kafka) ---------

DELETE_RETENTION_MS = 6000


@pytest.mark.timeout(60)
def test_compaction_keeps_latest_per_key_and_drops_tombstones_later(start_broker):
    b = start_broker(sets=CLEANER_SETS)
    topic = create_topic(b, unique_topic("compact"), 1,
                         config=compact_config(delete_retention_ms=DELETE_RETENTION_MS))
    acks = Acks()
    p = plain_producer(b)
    # The tombstones' delete horizon is set by the pass that first keeps
    # them, which comes after they are written.
    tombstones_written = time.monotonic()
    send(p, topic, overwrites(), acks)
    send(p, topic, filler("a"), acks)
    written = len(acks.by_offset)
    assert written == ROUNDS * len(KEYS) + 1 + FILLER
    assert len(segment_bases(b, topic)) > 10, segment_bases(b, topic)

    end, recs = wait_compacted(b, topic, once(*KEYS), "one record per overwritten key")
    # By now the pass that removed the older values of the tombstoned keys
    # has rewritten the tombstones' segment too, and set their horizon.
    horizon_set_by = time.monotonic()
    assert end == written, f"high watermark {end}, {written} written (offsets are never renumbered)"
    want = acks.latest()
    assert [v for _, k, v in want if k.decode() in TOMBSTONED] == [None] * len(TOMBSTONED)
    check_exactly(recs, want, "after cleaning")
    assert len(recs) == len(KEYS) + 1 + FILLER and len(recs) < written / 3
    check_tail_only(b, topic, recs)
    assert recs[0][0] > 0 and gaps(recs) >= 1, f"no gaps in the compacted log: {recs[:25]}"

    # More writes before the horizon: the pass over them keeps the tombstones.
    send(p, topic, filler("b"), acks)
    send(p, topic, [(b"k10", b"k10:again")], acks)
    send(p, topic, filler("c"), acks)
    end, recs = wait_compacted(b, topic, once("k10"), "a pass over the new writes")
    if time.monotonic() < tombstones_written + DELETE_RETENTION_MS / 1000:
        check_exactly(recs, acks.latest(), "a pass before delete.retention.ms")
    check_tail_only(b, topic, recs)

    # After delete.retention.ms the next pass removes them.
    time.sleep(max(0.0, horizon_set_by + DELETE_RETENTION_MS / 1000 + 0.5 - time.monotonic()))
    send(p, topic, filler("d"), acks)
    send(p, topic, [(b"k11", b"k11:again")], acks)
    send(p, topic, filler("e"), acks)
    tomb = {k.encode() for k in TOMBSTONED}
    end, recs = wait_compacted(
        b, topic, lambda rs: once("k11")(rs) and not any(k in tomb for _, k, _ in rs),
        "tombstones gone after delete.retention.ms")
    assert end == len(acks.by_offset)
    check_exactly(recs, [r for r in acks.latest() if r[2] is not None],
                  "after delete.retention.ms")
    check_tail_only(b, topic, recs)


# --- 2. transactions into a compacted topic ------------------------------------

TXN_ROUNDS = 8                 # rounds of KEYS per transaction


def txn_of(value):
    """The transaction number in b"k03:t05-00007:..." (or b"mid:t05-00004:...")."""
    return int(value.split(b":")[1][1:3])


# Two rounds of cleaning. The second starts above the first's aborted
# transactions (their markers are below its first dirty offset): the same
# producer's committed overwrites after them must still supersede the values
# the first round kept.
@pytest.mark.timeout(60)
def test_compaction_of_transactions(start_broker):
    b = start_broker(sets=CLEANER_SETS + TXN_BROKER_SETS)
    topic = create_topic(b, unique_topic("compact-txn"), 1, config=compact_config())
    acks = Acks()
    p = Producer(txn_producer_conf(b, unique_topic("compact-txn-id"), **{"batch.size": 4096}))
    p.init_transactions(30)
    aborted = set()

    def transaction(t, abort):
        p.begin_transaction()
        send(p, topic, overwrites(TXN_ROUNDS, tag=f"t{t:02d}-", tombstones=False), acks)
        if abort:
            aborted.add(t)
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)

    def is_aborted(k, v):
        return not k.startswith(b"f-") and txn_of(v) in aborted

    def cleaned(rs):
        return once(*KEYS)(rs) and not any(is_aborted(k, v) for _, k, v in rs)

    def check(what):
        want = acks.latest(lambda k, v: not is_aborted(k, v))
        end, unc = wait_compacted(b, topic, cleaned, f"{what}: aborted batches gone, one record per key")
        check_exactly(unc, want, f"{what}: read_uncommitted")
        check_tail_only(b, topic, unc)
        lso, com = read_log(b, topic, "read_committed")
        assert lso == end, f"{what}: LSO {lso}, high watermark {end}: no transaction is open"
        check_exactly(com, want, f"{what}: read_committed")

    # Every third transaction aborts, and the last one: each key's latest
    # record in the log is then an aborted one.
    for t in range(12):
        transaction(t, abort=t % 3 == 1 or t == 11)
    p.begin_transaction()
    send(p, topic, filler("txn1"), acks)
    p.commit_transaction(30)
    assert {txn_of(v) for _, k, v in acks.latest() if k.startswith(b"k")} == {11}
    check("12 transactions")

    transaction(12, abort=False)
    transaction(13, abort=True)
    p.begin_transaction()
    send(p, topic, filler("txn2"), acks)
    p.commit_transaction(30)
    check("2 more transactions")


# The cleaner takes an aborted transaction's batches out, keeps its marker
# until delete.retention.ms after that, and then takes the marker out too.
# The producer's later, committed transactions must stay whatever passes come
# after: their records are all keys written once.
@pytest.mark.timeout(60)
def test_committed_records_outlive_an_aborted_transactions_marker(start_broker):
    b = start_broker(sets=CLEANER_SETS + TXN_BROKER_SETS)
    topic = create_topic(b, unique_topic("compact-txn-marker"), 1,
                         config=compact_config(delete_retention_ms=500))
    acks = Acks()
    p = Producer(txn_producer_conf(b, unique_topic("compact-marker-id"), **{"batch.size": 4096}))
    p.init_transactions(30)
    p.begin_transaction()
    send(p, topic, [(b"aborted-%02d" % i, b"aborted" + PAD) for i in range(10)], acks)
    p.abort_transaction(30)
    want = []
    # Each transaction closes a segment or two: a pass after each, with
    # delete.retention.ms passed in between.
    for t in range(8):
        p.begin_transaction()
        send(p, topic, [(b"c%d-%04d" % (t, i), b"committed" + PAD) for i in range(300)], acks)
        p.commit_transaction(30)
        want = acks.latest(lambda k, v: not k.startswith(b"aborted"))
        time.sleep(1.0)
        _, com = read_log(b, topic, "read_committed")
        check_exactly(com, want, f"read_committed after committed transaction {t}")
    end, unc = read_log(b, topic)
    check_exactly(unc, want, "read_uncommitted at the end")


# --- 3. a restart keeps the compacted log ---------------------------------------

@pytest.mark.timeout(60)
def test_compacted_log_survives_restarts(start_broker):
    b = start_broker(sets=CLEANER_SETS)
    topic = create_topic(b, unique_topic("compact-restart"), 1, config=compact_config())
    acks = Acks()
    p = plain_producer(b)
    send(p, topic, overwrites(60, tombstones=False), acks)
    send(p, topic, filler("a"), acks)
    end, before = wait_compacted(b, topic, once(*KEYS), "one record per key")
    check_exactly(before, acks.latest(), "before the restart")
    del p

    b.restart()
    assert read_log(b, topic) == (end, before), "the log read back differently after a restart"
    # A restart counts the whole log dirty once: that pass changes nothing read.
    time.sleep(1.5)
    assert read_log(b, topic) == (end, before), "the log changed after a post-restart pass"

    # Cleaning goes on after the restart, and a SIGKILL keeps its result too.
    p = plain_producer(b)
    send(p, topic, overwrites(30, tag="w", tombstones=False), acks)
    send(p, topic, filler("b"), acks)
    end, after = wait_compacted(
        b, topic, lambda rs: once(*KEYS)(rs) and all(
            b":w" in v for _, k, v in rs if k.startswith(b"k")), "the new values compacted")
    check_exactly(after, acks.latest(), "after more writes")
    check_tail_only(b, topic, after)
    del p
    b.restart(kill=True)
    assert read_log(b, topic) == (end, after), "the log read back differently after SIGKILL"


# --- 4. kafka-python reads the gaps ---------------------------------------------

@pytest.mark.timeout(60)
def test_kafka_python_reads_compacted_log(start_broker):
    b = start_broker(sets=CLEANER_SETS)
    topic = create_topic(b, unique_topic("compact-kpy"), 1, config=compact_config())
    acks = Acks()
    p = plain_producer(b)
    send(p, topic, overwrites(40, tombstones=False), acks)
    send(p, topic, filler("a"), acks)
    end, want = wait_compacted(b, topic, once(*KEYS), "one record per key")
    check_exactly(want, acks.latest(), "librdkafka's read")

    c = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=None, enable_auto_commit=False,
                      request_timeout_ms=30000, isolation_level="read_uncommitted")
    got = []
    try:
        tp = KTopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        deadline = time.monotonic() + READ_S
        while c.position(tp) < end:
            assert time.monotonic() < deadline, (
                f"kafka-python: position {c.position(tp)} short of {end}, {len(got)} records")
            for msgs in c.poll(timeout_ms=300, max_records=5000).values():
                for m in msgs:
                    assert not got or m.offset > got[-1][0], (
                        f"kafka-python: offset {m.offset} after {got[-1][0]}")
                    got.append((m.offset, m.key, m.value))
    finally:
        c.close()
    check_exactly(got, want, "kafka-python's read")
    assert got[0][0] > 0 and gaps(got) >= 1, f"no gaps in the compacted log: {got[:25]}"


# --- 5. a record without a key ----------------------------------------------------

@pytest.mark.timeout(30)
def test_keyless_record_is_refused_by_a_compacted_topic(start_broker):
    """librdkafka's delivery report carries INVALID_RECORD, as from Kafka
    ("Compacted topic cannot accept message without key"); a keyed record
    after it lands."""
    b = start_broker()
    topic = create_topic(b, unique_topic("compact-keyless"), 1, config=compact_config())
    p = producer(b, **{"enable.idempotence": False, "retries": 0})
    reports = []
    p.produce(topic, value=b"no key", partition=0, on_delivery=lambda e, m: reports.append(e))
    assert p.flush(20) == 0, "the delivery was reported"
    # A batch of its own (a refused batch takes all its records with it).
    p.produce(topic, key=b"k", value=b"keyed", partition=0,
              on_delivery=lambda e, m: reports.append(e or m.offset()))
    assert p.flush(20) == 0, "the delivery was reported"
    assert reports[0] is not None and reports[0].code() == KafkaError.INVALID_RECORD, reports
    assert reports[1] == 0, f"the keyed record lands at offset 0: {reports}"
