"""Record-level behaviour with librdkafka: codecs, headers, null keys/values,
large records, auto-creation, unknown partitions, out-of-range offsets, long polls."""

import pathlib
import re
import subprocess
import time
import urllib.request

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from wireutil import (DeliveryLog, consumer, create_topic, produce_all, producer, read_all,
                      topic_partitions, unique_topic, wait_for_partitions, watermarks)


def read_from_start(broker, topic, count, timeout_s=60):
    """Up to `count` messages of partition 0 from its start, read within
    `timeout_s` with librdkafka; an error message fails the test."""
    c = consumer(broker)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.5):
                assert not m.error(), m.error()
                got.append(m)
        return got
    finally:
        c.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_codec_headers_nulls_roundtrip(broker, codec):
    topic = create_topic(broker, unique_topic(f"codec-{codec}"), 1)
    p = producer(broker, **{"compression.type": codec})
    dr = DeliveryLog()
    sent = []
    for i in range(1000):
        key = None if i % 7 == 0 else f"key-{i}".encode()
        value = None if i % 11 == 0 else (f"value-{i}-".encode() * (i % 50 + 1))
        headers = [("h1", f"v{i}".encode()), ("empty", b""), ("null", None)] if i % 3 == 0 else None
        p.produce(topic, key=key, value=value, headers=headers, on_delivery=dr)
        sent.append((key, value, headers))
    assert p.flush(30) == 0
    assert not dr.errors, dr.errors[:3]

    got = [(m.key(), m.value(), m.headers()) for m in read_from_start(broker, topic, len(sent))]
    assert len(got) == len(sent)
    for i, ((k, v, h), (gk, gv, gh)) in enumerate(zip(sent, got)):
        assert (gk, gv) == (k, v), f"record {i}: key/value differ"
        assert (gh or None) == (h or None), f"record {i}: headers {gh} != {h}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("topic_codec", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_topic_compression_type_recompresses(start_broker, topic_codec):
    """A topic's compression.type: batches librdkafka sends uncompressed
    and with lz4 are stored with the topic's codec (as dump-log shows), the
    recompressing done on the connection tasks (the console's counter), and
    read back by librdkafka exactly as sent."""
    broker = start_broker(console=True)
    topic = create_topic(broker, unique_topic(f"tcodec-{topic_codec}"), 1,
                         config={"compression.type": topic_codec})
    sent = []
    for codec in ("none", "lz4"):
        p = producer(broker, **{"compression.type": codec, "linger.ms": 20})
        dr = DeliveryLog()
        for i in range(300):
            key = None if i % 7 == 0 else f"{codec}-key-{i}".encode()
            value = f"{codec}-value-{i}-".encode() * (i % 20 + 1)
            headers = [("h", f"v{i}".encode())] if i % 3 == 0 else None
            p.produce(topic, key=key, value=value, headers=headers, on_delivery=dr)
            sent.append((key, value, headers))
        assert p.flush(30) == 0
        assert not dr.errors, dr.errors[:3]
    got = [(m.offset(), m.key(), m.value(), m.headers())
           for m in read_from_start(broker, topic, len(sent))]
    assert [o for o, *_ in got] == list(range(len(sent)))
    assert [(k, v, h or None) for _, k, v, h in got] == [(k, v, h) for k, v, h in sent]
    # Every stored batch carries the topic's codec.
    pdir = pathlib.Path(broker.data_dir) / "logs" / f"{topic}-0"
    out = subprocess.run([broker.binary, "dump-log", "--files", *sorted(map(str, pdir.glob("*.log")))],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    codecs = set(re.findall(r"compresscodec: (\w+)", out))
    assert codecs == {"none" if topic_codec == "uncompressed" else topic_codec}, out[:2000]
    # Recompressed on the connection tasks before the core took them: every
    # batch where the topic's codec is neither of the two sent, else the
    # batches of the other codec only.
    batches = len(re.findall(r"^baseOffset:", out, re.M))
    with urllib.request.urlopen(broker.console_url + "metrics", timeout=10) as r:
        page = r.read().decode()
    counted = re.search(r"^doze_produce_batches_recompressed_total (\d+)", page, re.M)
    assert counted, page[-2000:]
    if topic_codec in ("uncompressed", "lz4"):
        assert 0 < int(counted.group(1)) < batches, (counted.group(1), batches)
    else:
        assert int(counted.group(1)) == batches, (counted.group(1), batches)


@pytest.mark.timeout(120)
def test_large_record_and_too_large(broker):
    topic = create_topic(broker, unique_topic("large"), 1)
    # Just under Kafka's default message.max.bytes (1048588) for the whole batch.
    big = bytes(range(256)) * (900 * 1024 // 256)
    p = producer(broker, **{"message.max.bytes": 4_000_000, "compression.type": "none"})
    dr = DeliveryLog()
    p.produce(topic, value=big, on_delivery=dr)
    assert p.flush(30) == 0
    assert not dr.errors and len(dr.acked) == 1, dr.errors
    # Twice the limit: the broker refuses it with MESSAGE_TOO_LARGE.
    p.produce(topic, value=b"z" * 2_500_000, on_delivery=dr)
    assert p.flush(30) == 0
    assert len(dr.errors) == 1, "a 2.5 MB record was accepted"
    assert dr.errors[0][0].code() == KafkaError.MSG_SIZE_TOO_LARGE, dr.errors[0][0]

    # A consumer with a small max.partition.fetch.bytes still gets the big
    # record (Kafka returns at least one whole batch: KIP-74).
    got = read_all(broker, topic, [0], timeout_s=60, **{"max.partition.fetch.bytes": 65536,
                                                      "fetch.max.bytes": 65536,
                                                      "message.max.bytes": 65536})
    assert [v for (_, _, v) in got[0]] == [big]


@pytest.mark.timeout(60)
def test_auto_create_on_produce(start_broker):
    b = start_broker(sets=["num.partitions=2"])
    topic = unique_topic("autocreate")
    dr = DeliveryLog()
    produce_all(producer(b), topic, [(b"k", b"v")], dr, flush_timeout_s=30)
    assert not dr.errors, dr.errors
    assert wait_for_partitions(b, topic, 2) == [0, 1]


@pytest.mark.timeout(60)
def test_auto_create_disabled(start_broker):
    b = start_broker(sets=["auto.create.topics.enable=false"])
    topic = unique_topic("noauto")
    dr = DeliveryLog()
    p = producer(b, **{"message.timeout.ms": 3000})
    p.produce(topic, value=b"v", on_delivery=dr)
    p.flush(20)
    assert not dr.acked, "produce to a missing topic succeeded with auto-creation disabled"
    assert topic_partitions(b, topic) is None


@pytest.mark.timeout(60)
def test_produce_to_missing_partition(broker):
    topic = create_topic(broker, unique_topic("nopart"), 1)
    dr = DeliveryLog()
    p = producer(broker, **{"message.timeout.ms": 3000})
    p.produce(topic, value=b"v", partition=5, on_delivery=dr)
    p.flush(20)
    assert not dr.acked
    assert dr.errors and dr.errors[0][0].code() in (
        KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART), dr.errors[0][0]


@pytest.mark.timeout(60)
def test_offset_out_of_range_resets(broker):
    topic = create_topic(broker, unique_topic("oor"), 1)
    produce_all(producer(broker), topic, ((None, b"r%d" % i) for i in range(10)), DeliveryLog())
    for reset, want in (("earliest", b"r0"), ("latest", None)):
        c = consumer(broker, **{"auto.offset.reset": reset})
        try:
            c.assign([TopicPartition(topic, 0, 1000)])   # past the end: OFFSET_OUT_OF_RANGE
            deadline = time.monotonic() + 15
            first = None
            while time.monotonic() < deadline and first is None:
                for m in c.consume(10, timeout=0.5):
                    if not m.error():
                        first = m
                        break
                if reset == "latest" and time.monotonic() > deadline - 10:
                    break
            if want is None:
                assert first is None, f"auto.offset.reset=latest read {first.value()}"
                pos = c.position([TopicPartition(topic, 0)])[0].offset
                assert pos in (10, -1001), f"position after reset to latest: {pos}"
            else:
                assert first is not None and first.value() == want, "reset to earliest failed"
        finally:
            c.close()


@pytest.mark.timeout(60)
def test_long_poll_delivers_promptly(broker):
    """A consumer waiting at the end sees a new record well within fetch.wait.max.ms + slack."""
    topic = create_topic(broker, unique_topic("longpoll"), 1)
    c = consumer(broker, **{"fetch.wait.max.ms": 5000})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        # Nothing there yet: no record (an informational event at most).
        assert [m for m in c.consume(10, timeout=1.0) if m.error() is None] == []
        p = producer(broker, **{"linger.ms": 0})
        lat = []
        for i in range(5):
            t0 = time.monotonic()
            p.produce(topic, value=b"ping%d" % i)
            assert p.flush(10) == 0
            got = None
            while got is None and time.monotonic() - t0 < 10:
                for m in c.consume(1, timeout=0.2):
                    if not m.error():
                        got = m
            assert got is not None and got.value() == b"ping%d" % i
            lat.append(time.monotonic() - t0)
        # Kafka answers a parked fetch as soon as data arrives, not at fetch.wait.max.ms.
        assert max(lat) < 2.0, f"end-to-end latencies {lat} (fetch.wait.max.ms=5000)"
    finally:
        c.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("acks", ["0", "1"])
def test_acks_0_and_1(broker, acks):
    """acks=0 gets no response at all (a stray one would desync librdkafka's correlation ids)."""
    topic = create_topic(broker, unique_topic(f"acks{acks}"), 1)
    p = producer(broker, acks=acks)
    dr = DeliveryLog()
    produce_all(p, topic, ((None, b"a%05d" % i) for i in range(2000)), dr, flush_timeout_s=30)
    assert not dr.errors, dr.errors[:3]
    # The producer's connection is still healthy: more requests on it work.
    produce_all(p, topic, ((None, b"b%05d" % i) for i in range(2000)), dr, flush_timeout_s=30)
    assert not dr.errors, dr.errors[:3]
    md = p.list_topics(timeout=10)
    assert topic in md.topics
    if acks == "0":
        deadline = time.monotonic() + 10
        while watermarks(broker, topic, [0])[0][1] < 4000 and time.monotonic() < deadline:
            time.sleep(0.2)
    got = read_all(broker, topic, [0], timeout_s=60)
    assert [v for (_, _, v) in got[0]] == [b"a%05d" % i for i in range(2000)] + [b"b%05d" % i for i in range(2000)]


@pytest.mark.timeout(180)
def test_concurrent_producers_one_partition(broker):
    """Several producers (own connections) into one partition: offsets unique, dense, and right."""
    import threading
    topic = create_topic(broker, unique_topic("concurrent"), 1)
    n_producers, per = 4, 10_000
    logs = [DeliveryLog() for _ in range(n_producers)]

    def run(i):
        produce_all(producer(broker, **{"linger.ms": i}), topic,
                    ((None, b"p%d-%06d" % (i, s)) for s in range(per)), logs[i], flush_timeout_s=90)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n_producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    acked = [a for lg in logs for a in lg.acked]
    assert all(not lg.errors for lg in logs), [lg.errors[:2] for lg in logs]
    assert len(acked) == n_producers * per
    offsets = sorted(o for _, o, _ in acked)
    assert offsets == list(range(len(acked))), "acknowledged offsets are not unique and dense"
    by_offset = {o: v for _, o, v in acked}
    got = read_all(broker, topic, [0], timeout_s=90)
    assert [(o, v) for (o, _, v) in got[0]] == sorted(by_offset.items())
