"""DeleteRecords from real admin clients (confluent-kafka's and kafka-python's):
the log start moves (inside a batch too), consumers below it reset or see
OFFSET_OUT_OF_RANGE, errors for offsets out of range and unknown topics, and
the start survives a clean and a SIGKILL restart."""

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException, TopicPartition
from kafka import errors as kerrors
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition as KTopicPartition

from wireutil import (DeliveryLog, admin, consumer, create_topic, produce_all, producer,
                      unique_topic, watermarks)

TIMEOUT_S = 30


def delete_records(broker, topic, partition, offset):
    """confluent-kafka's AdminClient.delete_records: the low watermark, or raises."""
    a = admin(broker)  # kept alive until the answer: a dropped client fails its futures
    fs = a.delete_records([TopicPartition(topic, partition, offset)], request_timeout=TIMEOUT_S)
    (f,) = fs.values()
    return f.result(timeout=TIMEOUT_S).low_watermark


def produce_values(broker, topic, partition, values, **conf):
    dr = DeliveryLog()
    p = producer(broker, **conf)
    for v in values:
        while True:
            try:
                p.produce(topic, value=v, partition=partition, on_delivery=dr)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(TIMEOUT_S) == 0
    assert not dr.errors, dr.errors[:3]
    return dr


def first_consumed(broker, topic, partition, offset, timeout_s=TIMEOUT_S, **conf):
    """The first message (or error) a consumer assigned at `offset` gets."""
    c = consumer(broker, **conf)
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() and m.error().code() == KafkaError._PARTITION_EOF:
                continue
            return m
        raise AssertionError(f"nothing consumed from {topic}[{partition}] at {offset}")
    finally:
        c.close()


@pytest.mark.timeout(120)
def test_confluent_admin_moves_the_log_start(broker):
    topic = create_topic(broker, unique_topic("delrec"), 2)
    # One request, so the records share batches and the start lands inside one.
    produce_values(broker, topic, 0, [b"v%03d" % i for i in range(100)], **{"linger.ms": 200})
    produce_values(broker, topic, 1, [b"w%03d" % i for i in range(10)])

    assert delete_records(broker, topic, 0, 37) == 37
    assert watermarks(broker, topic, [0])[0] == (37, 100)
    # At or below the start: no change, the start is answered.
    assert delete_records(broker, topic, 0, 20) == 37
    assert delete_records(broker, topic, 0, 37) == 37
    # From the beginning: the first record read is the new start, not the
    # earlier records of the batch holding it.
    m = first_consumed(broker, topic, 0, OFFSET_BEGINNING)
    assert m.error() is None, m.error()
    assert (m.offset(), m.value()) == (37, b"v037")
    # Below the start with auto.offset.reset=earliest: reset to the start.
    m = first_consumed(broker, topic, 0, 5)
    assert m.error() is None, m.error()
    assert m.offset() == 37
    # Below the start with auto.offset.reset=error: the out-of-range error.
    m = first_consumed(broker, topic, 0, 5, **{"auto.offset.reset": "error"})
    assert m.error() is not None, f"consumed {m.offset()} below the log start"
    assert m.error().code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE), \
        m.error()
    assert "out of range" in m.error().str().lower(), m.error()

    # Above the high watermark: OFFSET_OUT_OF_RANGE.
    with pytest.raises(KafkaException) as e:
        delete_records(broker, topic, 0, 101)
    assert e.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE, e.value
    # OFFSET_END (-1): up to the high watermark.
    assert delete_records(broker, topic, 1, OFFSET_END) == 10
    assert watermarks(broker, topic, [1])[1] == (10, 10)
    # New records land after it and are read from the start.
    produce_values(broker, topic, 1, [b"after"])
    m = first_consumed(broker, topic, 1, OFFSET_BEGINNING)
    assert (m.offset(), m.value()) == (10, b"after")
    # An unknown topic: librdkafka finds no leader for it and fails before
    # sending (core/tests/delete_records.rs covers the broker's answer).
    with pytest.raises(KafkaException) as e:
        delete_records(broker, unique_topic("nope"), 0, 1)
    assert e.value.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._NOENT), e.value


@pytest.mark.timeout(120)
def test_kafka_python_admin_deletes_records(broker):
    topic = create_topic(broker, unique_topic("delrec-kp"), 1)
    produce_values(broker, topic, 0, [b"k%02d" % i for i in range(20)])
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        tp = KTopicPartition(topic, 0)
        result = a.delete_records({tp: 12})
        assert result[tp]["low_watermark"] == 12, result
        assert result[tp]["error_code"] == 0, result
        result = a.delete_records({tp: 3})
        assert result[tp]["low_watermark"] == 12, result
        with pytest.raises(kerrors.OffsetOutOfRangeError):
            a.delete_records({tp: 21})
        result = a.delete_records({tp: -1})
        assert result[tp]["low_watermark"] == 20, result
    finally:
        a.close()
    assert watermarks(broker, topic, [0])[0] == (20, 20)


@pytest.mark.timeout(180)
def test_the_log_start_survives_restarts(broker):
    topic = create_topic(broker, unique_topic("delrec-restart"), 1)
    produce_values(broker, topic, 0, [b"r%03d" % i for i in range(50)], **{"linger.ms": 200})
    # An idempotent producer keeps writing across the deletion (Kafka keeps
    # its state after its records go, KIP-360).
    idem = producer(broker, **{"enable.idempotence": True})
    dr = DeliveryLog()
    produce_all(idem, topic, [(None, b"i0")], dr)
    assert delete_records(broker, topic, 0, 23) == 23
    produce_all(idem, topic, [(None, b"i1")], dr)
    assert not dr.errors, dr.errors
    assert [off for _, off, _ in dr.acked] == [50, 51]

    def check(low):
        assert watermarks(broker, topic, [0])[0] == (low, 52)
        m = first_consumed(broker, topic, 0, OFFSET_BEGINNING)
        assert m.error() is None, m.error()
        assert m.offset() == low

    check(23)
    broker.restart()
    check(23)
    assert delete_records(broker, topic, 0, 41) == 41
    broker.restart(kill=True)
    check(41)
    m = first_consumed(broker, topic, 0, 30, **{"auto.offset.reset": "error"})
    assert m.error() is not None, f"consumed {m.offset()} below the log start after a crash"
