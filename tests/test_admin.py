"""(f) Admin APIs: CreateTopics errors, validate_only, DeleteTopics, CreatePartitions, DescribeConfigs."""

import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic, ResourceType
from kafka.admin import KafkaAdminClient

from wireutil import admin, create_topic, topic_partitions, unique_topic, wait_for_partitions

TIMEOUT_S = 30


def _create_error(broker, topic):
    a = admin(broker)   # keep the handle alive until the futures resolve
    fs = a.create_topics([topic], request_timeout=TIMEOUT_S)
    try:
        fs[topic.topic].result(timeout=TIMEOUT_S)
    except KafkaException as e:
        return e.args[0]
    return None


@pytest.mark.timeout(60)
def test_create_duplicate_topic_already_exists(broker):
    name = create_topic(broker, unique_topic("adm-dup"), 2)
    err = _create_error(broker, NewTopic(name, num_partitions=2, replication_factor=1))
    assert err is not None, "second CreateTopics of the same name succeeded"
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS, f"got {err.name()}: {err.str()}"
    assert topic_partitions(broker, name) == [0, 1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("partitions", [0, -2])
def test_create_invalid_partitions(broker, partitions):
    # kafka-python sends the count as given (librdkafka refuses some locally).
    # -1 means "broker default" (CreateTopics v4+), so -2 is the negative case.
    name = unique_topic("adm-badparts")
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        res = a.create_topics({name: {"num_partitions": partitions, "replication_factor": 1}},
                              timeout_ms=20000, raise_errors=False)
    finally:
        a.close()
    code = res["topics"][0]["error_code"]
    assert code == KafkaError.INVALID_PARTITIONS, f"error_code {code} for {partitions} partitions: {res}"
    assert topic_partitions(broker, name) is None


@pytest.mark.timeout(60)
def test_create_default_partitions(start_broker):
    b = start_broker(sets=["num.partitions=3"])
    name = unique_topic("adm-default")
    a = admin(b)
    fs = a.create_topics([NewTopic(name, num_partitions=-1, replication_factor=-1)],
                                request_timeout=TIMEOUT_S)
    fs[name].result(timeout=TIMEOUT_S)
    assert wait_for_partitions(b, name, 3) == [0, 1, 2]


@pytest.mark.timeout(60)
def test_create_validate_only_creates_nothing(broker):
    name = unique_topic("adm-validate")
    a = admin(broker)
    fs = a.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)],
                         validate_only=True, request_timeout=TIMEOUT_S)
    assert fs[name].result(timeout=TIMEOUT_S) is None
    time.sleep(0.5)
    assert topic_partitions(broker, name) is None, "validate_only created the topic"
    # ... and a real create of the same name still works afterwards.
    create_topic(broker, name, 2)


@pytest.mark.timeout(60)
def test_delete_topic(broker):
    name = create_topic(broker, unique_topic("adm-del"), 2)
    a = admin(broker)
    fs = a.delete_topics([name], request_timeout=TIMEOUT_S)
    fs[name].result(timeout=TIMEOUT_S)
    deadline = time.monotonic() + 15
    while topic_partitions(broker, name) is not None:
        assert time.monotonic() < deadline, "topic still in Metadata 15 s after DeleteTopics"
        time.sleep(0.2)
    # Deleting it again: UNKNOWN_TOPIC_OR_PART.
    fs = a.delete_topics([name], request_timeout=TIMEOUT_S)
    with pytest.raises(KafkaException) as ei:
        fs[name].result(timeout=TIMEOUT_S)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, ei.value.args[0]


@pytest.mark.timeout(60)
def test_create_partitions_grows_topic(broker):
    name = create_topic(broker, unique_topic("adm-grow"), 1)
    a = admin(broker)
    fs = a.create_partitions([NewPartitions(name, 3)], request_timeout=TIMEOUT_S)
    fs[name].result(timeout=TIMEOUT_S)
    assert wait_for_partitions(broker, name, 3) == [0, 1, 2]
    # Shrinking is refused with INVALID_PARTITIONS.
    fs = a.create_partitions([NewPartitions(name, 2)], request_timeout=TIMEOUT_S)
    with pytest.raises(KafkaException) as ei:
        fs[name].result(timeout=TIMEOUT_S)
    assert ei.value.args[0].code() == KafkaError.INVALID_PARTITIONS, ei.value.args[0]


@pytest.mark.timeout(60)
def test_describe_topic_configs(broker):
    name = create_topic(broker, unique_topic("adm-cfg"), 1, config={"retention.ms": "3600000"})
    res = ConfigResource(ResourceType.TOPIC, name)
    a = admin(broker)
    fs = a.describe_configs([res], request_timeout=TIMEOUT_S)
    configs = fs[res].result(timeout=TIMEOUT_S)
    for key in ("retention.ms", "retention.bytes", "segment.bytes", "cleanup.policy"):
        assert key in configs, f"DescribeConfigs lacks {key}; has {sorted(configs)}"
    assert configs["retention.ms"].value == "3600000"
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "delete"
