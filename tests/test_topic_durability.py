"""Topic metadata is durable once acknowledged: CreateTopics, CreatePartitions and
DeleteTopics survive SIGKILL; a deleted-then-recreated topic starts empty."""

import time

import pytest
from confluent_kafka.admin import ConfigResource, NewPartitions, ResourceType

from wireutil import (DeliveryLog, admin, create_topic, produce_all, producer, read_all,
                      topic_partitions, unique_topic, wait_for_partitions, watermarks)

TIMEOUT_S = 30


def _topic_config(broker, topic):
    a = admin(broker)
    res = ConfigResource(ResourceType.TOPIC, topic)
    return a.describe_configs([res], request_timeout=TIMEOUT_S)[res].result(timeout=TIMEOUT_S)


@pytest.mark.timeout(120)
def test_admin_changes_survive_sigkill(broker):
    created = {}
    for i in range(10):
        name = unique_topic(f"dur-{i}")
        create_topic(broker, name, 1 + i % 4, config={"retention.ms": str(3_600_000 + i)})
        created[name] = 1 + i % 4
    grown = unique_topic("dur-grow")
    create_topic(broker, grown, 1)
    doomed = unique_topic("dur-del")
    create_topic(broker, doomed, 2)

    a = admin(broker)
    a.create_partitions([NewPartitions(grown, 4)], request_timeout=TIMEOUT_S)[grown].result(TIMEOUT_S)
    a.delete_topics([doomed], request_timeout=TIMEOUT_S)[doomed].result(TIMEOUT_S)
    created[grown] = 4
    # Acknowledged: now pull the plug without a clean shutdown.
    broker.kill9()
    broker.start()

    for name, parts in created.items():
        assert topic_partitions(broker, name) == list(range(parts)), f"{name} after SIGKILL"
    assert topic_partitions(broker, doomed) is None, "deleted topic came back after SIGKILL"
    for i, name in enumerate(n for n in created if n.startswith("dur-") and n != grown):
        cfg = _topic_config(broker, name)
        assert cfg["retention.ms"].value == str(3_600_000 + i), f"{name}: retention.ms lost"


@pytest.mark.timeout(120)
def test_delete_then_recreate_starts_empty(broker):
    name = create_topic(broker, unique_topic("recreate"), 2)
    produce_all(producer(broker), name, ((None, b"old-%d" % i) for i in range(500)), DeliveryLog())
    a = admin(broker)
    a.delete_topics([name], request_timeout=TIMEOUT_S)[name].result(TIMEOUT_S)
    deadline = time.monotonic() + 15
    while topic_partitions(broker, name) is not None:
        assert time.monotonic() < deadline, "topic still listed after DeleteTopics"
        time.sleep(0.2)

    create_topic(broker, name, 1)
    assert watermarks(broker, name, [0]) == {0: (0, 0)}, "recreated topic is not empty"
    dr = DeliveryLog()
    produce_all(producer(broker), name, [(None, b"new")], dr)
    assert [(p, o) for p, o, _ in dr.acked] == [(0, 0)]
    # ... and still only the new record after a restart (old segments must be gone).
    broker.restart()
    wait_for_partitions(broker, name, 1)
    got = read_all(broker, name, [0], timeout_s=30)
    assert [v for (_, _, v) in got[0]] == [b"new"]
