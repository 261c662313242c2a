"""Topic configs that steer compaction and retention, and the APIs that change them.

confluent-kafka (librdkafka): CreateTopics with cleanup.policy=compact,
DescribeConfigs of the new configs and their Kafka defaults,
IncrementalAlterConfigs (SET / DELETE / APPEND / SUBTRACT, validate_only, the
errors). kafka-python: AlterConfigs (the whole-set form) and its incremental
form and reset. The changes survive a SIGKILL; segment.ms and retention react
at once to a change.
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
