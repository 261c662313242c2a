"""Topic configs that steer compaction and retention, and the APIs that change them.

confluent-kafka (librdkafka): CreateTopics with cleanup.policy=compact,
DescribeConfigs of the new configs and their Kafka defaults,
IncrementalAlterConfigs (SET / DELETE / APPEND / SUBTRACT, validate_only, the
errors). kafka-python: AlterConfigs (the whole-set form) and its incremental
form and reset. The changes survive a SIGKILL; segment.ms and retention react
at once to a change. Every topic config Kafka 4.3.1 has is described; those
without effect on one node are taken, compression.type takes every codec
(test_records.py reads back what it stores), remote.storage.enable=true is
refused; record timestamps are held to the
topic's bounds; a broker property given at start-up is a static synonym.
"""

import pathlib
import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from wireutil import DeliveryLog, admin, create_topic, produce_all, producer, unique_topic, watermarks

TIMEOUT_S = 30

# Kafka 4.3.1's defaults of the configs the log cleaner reads.
KAFKA_DEFAULTS = {
    "cleanup.policy": "delete",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "9223372036854775807",
    "delete.retention.ms": "86400000",
    "segment.ms": "604800000",
}


def describe(broker, topic):
    res = ConfigResource(ResourceType.TOPIC, topic)
    a = admin(broker)   # keep the handle alive until the future resolves
    return a.describe_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)


def incremental(broker, topic, entries, validate_only=False, resource_type=ResourceType.TOPIC):
    """entries: [(name, AlterConfigOpType, value)]; returns None or the KafkaError."""
    res = ConfigResource(resource_type, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, op, value in entries])
    a = admin(broker)
    fs = a.incremental_alter_configs([res], request_timeout=TIMEOUT_S, validate_only=validate_only)
    try:
        fs[res].result(TIMEOUT_S)
    except KafkaException as e:
        return e.args[0]
    return None


def overrides(configs):
    return {n: c.value for n, c in configs.items() if c.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


@pytest.mark.timeout(60)
def test_create_compact_topic_and_describe_defaults(broker):
    topic = create_topic(broker, unique_topic("tc-compact"), 1, config={"cleanup.policy": "compact"})
    configs = describe(broker, topic)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    for name, value in KAFKA_DEFAULTS.items():
        if name != "cleanup.policy":
            assert configs[name].value == value, (name, configs[name].value)
            assert configs[name].source == ConfigSource.DEFAULT_CONFIG.value, name

    both = create_topic(broker, unique_topic("tc-both"), 1,
                        config={"cleanup.policy": "delete, compact"})
    assert describe(broker, both)["cleanup.policy"].value == "delete,compact"


@pytest.mark.timeout(60)
def test_incremental_alter_configs(broker):
    topic = create_topic(broker, unique_topic("tc-inc"), 1)
    assert incremental(broker, topic, [
        ("cleanup.policy", AlterConfigOpType.APPEND, "compact"),
        ("min.cleanable.dirty.ratio", AlterConfigOpType.SET, "0.1"),
        ("segment.ms", AlterConfigOpType.SET, "3600000"),
    ]) is None
    assert overrides(describe(broker, topic)) == {
        "cleanup.policy": "delete,compact",
        "min.cleanable.dirty.ratio": "0.1",
        "segment.ms": "3600000",
    }
    assert incremental(broker, topic, [
        ("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete"),
        ("segment.ms", AlterConfigOpType.DELETE, None),
    ]) is None
    configs = describe(broker, topic)
    assert overrides(configs) == {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"}
    assert configs["segment.ms"].value == "604800000"

    # validate_only: checked, not stored.
    assert incremental(broker, topic, [("retention.ms", AlterConfigOpType.SET, "1000")],
                       validate_only=True) is None
    assert describe(broker, topic)["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


@pytest.mark.timeout(60)
def test_incremental_alter_configs_errors(broker):
    topic = create_topic(broker, unique_topic("tc-err"), 1)
    err = incremental(broker, topic, [("min.cleanable.dirty.ratio", AlterConfigOpType.SET, "1.5")])
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG, err
    assert ("Invalid value 1.5 for configuration min.cleanable.dirty.ratio: "
            "Value must be no more than 1") in err.str()
    err = incremental(broker, topic, [("cleanup.policy", AlterConfigOpType.SET, "none")])
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG, err
    err = incremental(broker, topic, [("no.such.config", AlterConfigOpType.SET, "1")])
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG, err
    assert "Unknown topic config name: no.such.config" in err.str()
    err = incremental(broker, topic, [("retention.ms", AlterConfigOpType.APPEND, "5")])
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG, err
    err = incremental(broker, unique_topic("tc-missing"),
                      [("retention.ms", AlterConfigOpType.SET, "5")])
    assert err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, err
    # doze's broker properties are static: Kafka's answer for one it cannot
    # change while running.
    err = incremental(broker, "1", [("log.retention.ms", AlterConfigOpType.SET, "5")],
                      resource_type=ResourceType.BROKER)
    assert err is not None and err.code() == KafkaError.INVALID_REQUEST, err
    assert "Cannot update these configs dynamically" in err.str()
    assert overrides(describe(broker, topic)) == {}


@pytest.mark.timeout(60)
def test_kafka_python_alter_configs(broker):
    topic = create_topic(broker, unique_topic("tc-kp"), 1, config={"retention.ms": "3600000"})
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        # AlterConfigs (key 33): the whole set of overrides. kafka-python
        # carries the other overrides over itself (describe first).
        res = a.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                                configs={"cleanup.policy": "compact,delete"})],
                              incremental=False)
        assert res == {"topic": {topic: "OK"}}, res
        assert overrides(describe(broker, topic)) == {
            "cleanup.policy": "compact,delete", "retention.ms": "3600000"}
        # IncrementalAlterConfigs through kafka-python, then its reset (DELETE).
        res = a.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                                configs={"segment.ms": "60000"})])
        assert res == {"topic": {topic: "OK"}}, res
        assert overrides(describe(broker, topic))["segment.ms"] == "60000"
        res = a.reset_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                                configs=["cleanup.policy", "segment.ms"])])
        assert res == {"topic": {topic: "OK"}}, res
        assert overrides(describe(broker, topic)) == {"retention.ms": "3600000"}
        res = a.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                                configs={"retention.ms": "x"})],
                              incremental=False)
        assert "InvalidConfigurationError" in res["topic"][topic], res
    finally:
        a.close()


@pytest.mark.timeout(90)
def test_changed_configs_survive_a_kill(broker):
    topic = create_topic(broker, unique_topic("tc-kill"), 1)
    assert incremental(broker, topic, [
        ("cleanup.policy", AlterConfigOpType.SET, "compact"),
        ("delete.retention.ms", AlterConfigOpType.SET, "1000"),
    ]) is None
    broker.restart(kill=True)
    assert overrides(describe(broker, topic)) == {
        "cleanup.policy": "compact", "delete.retention.ms": "1000"}


def _segment_files(broker, topic):
    return sorted(p.name for p in (pathlib.Path(broker.data_dir) / "logs" / f"{topic}-0").glob("*.log"))


@pytest.mark.timeout(60)
def test_segment_ms_rolls_after_a_live_change(broker):
    topic = create_topic(broker, unique_topic("tc-roll"), 1)
    p = producer(broker)
    dr = DeliveryLog()
    now_ms = int(time.time() * 1000)
    produce_all(p, topic, [(None, b"a")], dr, flush_timeout_s=30)
    assert len(_segment_files(broker, topic)) == 1
    assert incremental(broker, topic, [("segment.ms", AlterConfigOpType.SET, "1000")]) is None
    # Timestamps 2 s apart: Kafka measures from the segment's first batch.
    p.produce(topic, value=b"b", timestamp=now_ms + 2000, on_delivery=dr)
    assert p.flush(30) == 0
    assert not dr.errors, dr.errors
    assert len(_segment_files(broker, topic)) == 2, _segment_files(broker, topic)


@pytest.mark.timeout(90)
def test_retention_waits_for_the_delete_policy(start_broker):
    b = start_broker(sets=["log.retention.check.interval.ms=300"])
    topic = create_topic(b, unique_topic("tc-ret"), 1, config={
        "cleanup.policy": "compact", "segment.bytes": "1024", "retention.bytes": "1024"})
    dr = DeliveryLog()
    produce_all(producer(b, **{"linger.ms": 0, "batch.num.messages": 1}), topic,
                ((b"k%d" % i, b"v" * 400) for i in range(20)), dr)
    assert not dr.errors, dr.errors[:3]
    time.sleep(1.5)
    assert watermarks(b, topic, [0])[0] == (0, 20), "compact alone: retention.bytes does not apply"
    assert incremental(b, topic, [("cleanup.policy", AlterConfigOpType.APPEND, "delete")]) is None
    deadline = time.monotonic() + 20
    while watermarks(b, topic, [0])[0][0] == 0:
        assert time.monotonic() < deadline, "compact,delete: retention.bytes never applied"
        time.sleep(0.3)


# Every topic config Kafka 4.3.1 has and its default on a broker that sets
# nothing; doze describes them all (topic_config::TOPIC_CONFIGS), the ones
# with no effect on one node included.
KAFKA_ALL_DEFAULTS = {
    "cleanup.policy": "delete", "compression.gzip.level": "-1", "compression.lz4.level": "9",
    "compression.type": "producer", "compression.zstd.level": "3",
    "delete.retention.ms": "86400000", "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807", "flush.ms": "9223372036854775807",
    "follower.replication.throttled.replicas": "", "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "", "local.retention.bytes": "-2",
    "local.retention.ms": "-2", "max.compaction.lag.ms": "9223372036854775807",
    "max.message.bytes": "1048588", "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.type": "CreateTime", "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0", "min.insync.replicas": "1", "preallocate": "false",
    "remote.log.copy.disable": "false", "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false", "retention.bytes": "-1", "retention.ms": "604800000",
    "segment.bytes": "1073741824", "segment.index.bytes": "10485760", "segment.jitter.ms": "0",
    "segment.ms": "604800000", "unclean.leader.election.enable": "false",
}


@pytest.mark.timeout(60)
def test_every_kafka_topic_config_is_described(broker):
    topic = create_topic(broker, unique_topic("tc-all"), 1)
    configs = describe(broker, topic)
    assert {n: c.value for n, c in configs.items()} == KAFKA_ALL_DEFAULTS
    for c in configs.values():
        assert c.source == ConfigSource.DEFAULT_CONFIG.value, c.name
        assert not c.is_read_only and not c.is_sensitive, c.name


@pytest.mark.timeout(60)
def test_configs_without_effect_are_taken_and_reported(broker):
    """Kafka takes them and so does doze: they mean nothing on one node, and
    acks=all still succeeds with min.insync.replicas=2."""
    given = {
        "min.insync.replicas": "2",
        "unclean.leader.election.enable": "TRUE",
        "leader.replication.throttled.replicas": " 0:1 , 0:2 ",
        "follower.replication.throttled.replicas": "*",
        "flush.messages": "1",
        "preallocate": "true",
        "segment.jitter.ms": "10",
        "local.retention.ms": "1000",
        "remote.log.copy.disable": "true",
        "compression.gzip.level": "9",
    }
    topic = create_topic(broker, unique_topic("tc-noeffect"), 1, config=given)
    assert overrides(describe(broker, topic)) == {
        **given, "unclean.leader.election.enable": "true",
        "leader.replication.throttled.replicas": "0:1,0:2"}
    assert incremental(broker, topic, [
        ("min.insync.replicas", AlterConfigOpType.SET, "3"),
        ("index.interval.bytes", AlterConfigOpType.SET, "100"),
    ]) is None
    assert overrides(describe(broker, topic))["min.insync.replicas"] == "3"
    dr = DeliveryLog()
    produce_all(producer(broker, acks="all"), topic, [(None, b"x")], dr, flush_timeout_s=30)
    assert not dr.errors and len(dr.acked) == 1, dr.errors
    err = incremental(broker, topic, [("preallocate", AlterConfigOpType.SET, "yes")])
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG, err
    assert "Expected value to be either true or false" in err.str()
    err = incremental(broker, topic, [
        ("follower.replication.throttled.replicas", AlterConfigOpType.SET, "0:1:2")])
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG, err


def _create_error(broker, config):
    a = admin(broker)
    name = unique_topic("tc-refused")
    fs = a.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=config)],
                         request_timeout=TIMEOUT_S)
    try:
        fs[name].result(TIMEOUT_S)
    except KafkaException as e:
        return e.args[0]
    return None


@pytest.mark.timeout(60)
def test_values_doze_does_not_serve_are_refused(broker):
    """remote.storage.enable=true (no tiered storage, as Kafka without it) is
    INVALID_CONFIG with a message, not stored and ignored; compression.type
    takes every value Kafka takes."""
    err = _create_error(broker, {"remote.storage.enable": "true"})
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG, err
    assert "Tiered Storage functionality is disabled in the broker" in err.str()
    err = _create_error(broker, {"compression.type": "brotli"})
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG, err
    topic = create_topic(broker, unique_topic("tc-served"), 1,
                         config={"compression.type": "gzip", "remote.storage.enable": "false"})
    assert incremental(broker, topic, [("compression.type", AlterConfigOpType.SET, "lz4")]) is None
    assert overrides(describe(broker, topic)) == {
        "compression.type": "lz4", "remote.storage.enable": "false"}


@pytest.mark.timeout(60)
def test_record_timestamps_within_the_topics_bounds(broker):
    """CreateTime: Kafka 4.x refuses a record more than
    message.timestamp.after.max.ms (an hour) ahead of its clock, and one more
    than message.timestamp.before.max.ms behind; LogAppendTime stamps anything."""
    now = int(time.time() * 1000)
    hour = 3600 * 1000

    def send(topic, timestamps, **conf):
        dr = DeliveryLog()
        p = producer(broker, **conf)
        for ts in timestamps:
            p.produce(topic, value=str(ts).encode(), timestamp=ts, on_delivery=dr)
        assert p.flush(30) == 0
        return dr

    topic = create_topic(broker, unique_topic("tc-ts"), 1)
    for codec in ("none", "lz4"):
        dr = send(topic, [now, now + 2 * hour], **{"compression.type": codec, "linger.ms": 100})
        assert [e.code() for e, _ in dr.errors] == [KafkaError.INVALID_TIMESTAMP] * 2, dr.errors
        dr = send(topic, [now + hour // 2, now - 365 * 24 * hour], **{"compression.type": codec})
        assert not dr.errors, dr.errors
    assert incremental(broker, topic, [
        ("message.timestamp.after.max.ms", AlterConfigOpType.SET, str(3 * hour)),
        ("message.timestamp.before.max.ms", AlterConfigOpType.SET, str(hour)),
    ]) is None
    assert not send(topic, [now + 2 * hour]).errors
    dr = send(topic, [now - 2 * hour], **{"compression.type": "zstd"})
    assert [e.code() for e, _ in dr.errors] == [KafkaError.INVALID_TIMESTAMP], dr.errors

    stamped = create_topic(broker, unique_topic("tc-ts-lat"), 1,
                           config={"message.timestamp.type": "LogAppendTime"})
    assert not send(stamped, [now + 2 * hour, now - 2 * hour]).errors


@pytest.mark.timeout(60)
def test_a_broker_property_set_is_a_static_synonym(start_broker):
    """A topic config backed by a broker property the broker was started
    with: STATIC_BROKER_CONFIG, listed before Kafka's default."""
    b = start_broker(sets=["message.max.bytes=2000000", "log.retention.hours=24"])
    topic = create_topic(b, unique_topic("tc-static"), 1)
    configs = describe(b, topic)
    c = configs["max.message.bytes"]
    assert (c.value, c.source) == ("2000000", ConfigSource.STATIC_BROKER_CONFIG.value)
    # confluent-kafka keys synonyms by name: of STATIC_BROKER_CONFIG
    # message.max.bytes=2000000 and DEFAULT_CONFIG message.max.bytes=1048588
    # (in that order, as Kafka) it keeps the last.
    assert [(s.name, s.value, s.source) for s in c.synonyms.values()] == [
        ("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG.value)]
    # retention.ms: Kafka lists no synonym unless log.retention.ms itself is
    # set, and so names DEFAULT_CONFIG; the value is still the broker's.
    c = configs["retention.ms"]
    assert (c.value, c.source) == ("86400000", ConfigSource.DEFAULT_CONFIG.value)
