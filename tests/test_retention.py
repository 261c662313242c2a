"""(g) Size-based retention deletes old segments: the log start offset moves above 0."""

import time

import pytest

from wireutil import DeliveryLog, create_topic, produce_all, producer, read_all, unique_topic, watermarks

SEGMENT_BYTES = 1_048_576      # Kafka's minimum segment.bytes
RETENTION_BYTES = 1_048_576
RECORDS = 5_000                # ~5 MiB of 1 KiB values: several segments
CHECK_INTERVAL_MS = 500


@pytest.mark.timeout(120)
def test_retention_bytes_moves_log_start(start_broker):
    b = start_broker(sets=[f"log.retention.check.interval.ms={CHECK_INTERVAL_MS}"])
    topic = create_topic(b, unique_topic("retention"), 1, config={
        "segment.bytes": str(SEGMENT_BYTES), "retention.bytes": str(RETENTION_BYTES)})
    dr = DeliveryLog()
    value = b"r" * 1024
    produce_all(producer(b, **{"batch.size": 65536}), topic,
                ((None, b"%06d:" % i + value) for i in range(RECORDS)), dr)
    assert not dr.errors, dr.errors[:3]

    deadline = time.monotonic() + 30
    low, high = watermarks(b, topic, [0])[0]
    while low == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
        low, high = watermarks(b, topic, [0])[0]
    assert high == RECORDS
    assert low > 0, (
        f"log start offset still 0 {30}s after producing ~{RECORDS} KiB with "
        f"segment.bytes={SEGMENT_BYTES} retention.bytes={RETENTION_BYTES}")
    # Kafka keeps at least retention.bytes: deletion never eats into the newest MiB.
    assert high - low >= RETENTION_BYTES // (len(value) + 100), (low, high)
    # Reading from the beginning now starts at the new log start offset.
    got = read_all(b, topic, [0], timeout_s=60)
    assert got[0][0][0] == low, f"first offset read {got[0][0][0]}, log start {low}"
    # The log start offset does not go back after a restart.
    b.restart()
    low2, high2 = watermarks(b, topic, [0])[0]
    assert high2 == RECORDS and low2 >= low, f"after restart ({low2}, {high2}), before ({low}, {high})"
