"""(a) librdkafka (confluent-kafka): 100,000 records, lz4 then zstd, read back group-less."""

import pytest

from wireutil import DeliveryLog, create_topic, produce_all, producer, read_all, unique_topic

PARTITIONS = 3
RECORDS_PER_CODEC = 50_000
CODECS = ("lz4", "zstd")


@pytest.mark.timeout(420)
def test_produce_consume_100k_lz4_zstd(broker):
    topic = create_topic(broker, unique_topic("rt-confluent"), PARTITIONS)

    # Produce order per partition: all lz4 records (in sequence order), then
    # all zstd records. One producer per codec, run one after the other.
    dr = DeliveryLog()
    expected_by_partition = {p: [] for p in range(PARTITIONS)}
    for codec in CODECS:
        p = producer(broker, **{"compression.type": codec, "batch.size": 1_000_000})
        items = ((f"k{seq % 997}".encode(), f"{codec}:{seq:08d}".encode())
                 for seq in range(RECORDS_PER_CODEC))
        before = len(dr.acked)
        produce_all(p, topic, items, dr)
        assert not dr.errors, f"delivery errors ({len(dr.errors)}), first: {dr.errors[:3]}"
        assert len(dr.acked) - before == RECORDS_PER_CODEC

    # Offsets reported to the producer: unique per partition, and per partition
    # the codec's records got increasing offsets in sequence order.
    for part, off, value in dr.acked:
        expected_by_partition[part].append((off, value))
    for part, recs in expected_by_partition.items():
        offs = [o for o, _ in recs]
        assert len(set(offs)) == len(offs), f"partition {part}: duplicate offsets acknowledged"
        recs.sort()
    assert all(expected_by_partition.values()), "keys did not spread over all partitions"

    got = read_all(broker, topic, range(PARTITIONS), timeout_s=240)

    all_values = [v for recs in got.values() for (_, _, v) in recs]
    assert len(all_values) == len(CODECS) * RECORDS_PER_CODEC, (
        f"read {len(all_values)} records, expected {len(CODECS) * RECORDS_PER_CODEC}")
    assert len(set(all_values)) == len(all_values), "some records were read more than once"

    for part in range(PARTITIONS):
        read = [(o, v) for (o, _, v) in got[part]]
        assert read == expected_by_partition[part], (
            f"partition {part}: read-back differs from what was acknowledged "
            f"(first difference at index "
            f"{next((i for i, (a, b) in enumerate(zip(read, expected_by_partition[part])) if a != b), min(len(read), len(expected_by_partition[part])))})")
        # Produce order: lz4 sequence ascending, then zstd sequence ascending.
        values = [v.decode() for (_, v) in read]
        codecs_in_order = [v.split(":")[0] for v in values]
        first_zstd = codecs_in_order.index("zstd") if "zstd" in codecs_in_order else len(values)
        assert all(c == "lz4" for c in codecs_in_order[:first_zstd])
        assert all(c == "zstd" for c in codecs_in_order[first_zstd:])
        for segment in (values[:first_zstd], values[first_zstd:]):
            seqs = [int(v.split(":")[1]) for v in segment]
            assert seqs == sorted(seqs), f"partition {part}: per-partition order != produce order"
