"""Client-side helpers shared by the wire tests (confluent-kafka / librdkafka)."""

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ADMIN_TIMEOUT_S = 30
METADATA_TIMEOUT_S = 15


def unique_topic(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def base_conf(broker, **extra):
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "broker.address.family": "v4",
        "socket.timeout.ms": 10000,
        "reconnect.backoff.max.ms": 1000,
    }
    conf.update(extra)
    return conf


def admin(broker):
    return AdminClient(base_conf(broker))


def create_topic(broker, name, partitions, config=None, timeout_s=ADMIN_TIMEOUT_S):
    a = admin(broker)
    fs = a.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        request_timeout=timeout_s,
    )
    fs[name].result(timeout=timeout_s)
    wait_for_partitions(broker, name, partitions)
    return name


def topic_partitions(broker, topic, timeout_s=METADATA_TIMEOUT_S):
    """Partition ids of `topic` from Metadata, or None if the broker does not know it.

    Asks for all topics: a Metadata request naming the topic would auto-create it
    (librdkafka's admin/producer handles allow auto-creation, as does Kafka's
    default auto.create.topics.enable=true).
    """
    md = admin(broker).list_topics(timeout=timeout_s)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return None
    return sorted(t.partitions)


def wait_for_partitions(broker, topic, count, timeout_s=METADATA_TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = topic_partitions(broker, topic)
        if last is not None and len(last) == count:
            return last
        time.sleep(0.2)
    raise AssertionError(f"topic {topic}: expected {count} partitions in Metadata, last saw {last}")


class DeliveryLog:
    """Collects librdkafka delivery reports: acked (partition, offset, value) and errors."""

    def __init__(self):
        self.acked = []
        self.errors = []

    def __call__(self, err, msg):
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.errors.append((err, msg.value()))


def produce_all(producer, topic, items, on_delivery, flush_timeout_s=120):
    """Produce (key, value) pairs, retrying on a full local queue; flush, bounded."""
    for key, value in items:
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(flush_timeout_s)
    assert remaining == 0, f"{remaining} messages still undelivered after {flush_timeout_s}s flush"


def consumer(broker, **extra):
    # The Python client insists on a group.id, but these tests never subscribe
    # or commit: partitions are assigned explicitly (no group coordinator use).
    conf = base_conf(
        broker,
        **{
            "group.id": unique_topic("wire-nogroup"),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_uncommitted",
            "auto.offset.reset": "earliest",
        },
    )
    conf.update(extra)
    return Consumer(conf)


def watermarks(broker, topic, partitions, timeout_s=15):
    c = consumer(broker)
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)
                for p in partitions}
    finally:
        c.close()


def read_all(broker, topic, partitions, timeout_s=120, **consumer_conf):
    """Read every partition from the beginning up to its high watermark as of now.

    Returns {partition: [(offset, key, value), ...]} in the order received.
    """
    c = consumer(broker, **consumer_conf)
    try:
        hw = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)[1]
              for p in partitions}
        out = {p: [] for p in partitions}
        pos = {p: -1 for p in partitions}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout_s

        def done():
            return all(pos[p] + 1 >= hw[p] for p in partitions)

        while not done():
            if time.monotonic() > deadline:
                got = {p: len(v) for p, v in out.items()}
                raise AssertionError(
                    f"read_all {topic}: timed out after {timeout_s}s; high watermarks {hw}, "
                    f"last offsets read {pos}, counts {got}")
            for m in c.consume(num_messages=10000, timeout=0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consumer error on {topic}: {m.error()}")
                p = m.partition()
                assert m.offset() > pos[p], (
                    f"{topic}[{p}]: offset went from {pos[p]} to {m.offset()} (not increasing)")
                pos[p] = m.offset()
                out[p].append((m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


def producer(broker, **extra):
    conf = base_conf(broker, **{"acks": "all", "enable.idempotence": False, "linger.ms": 5})
    conf.update(extra)
    return Producer(conf)
