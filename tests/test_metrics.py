"""The console's /metrics against real work done with confluent-kafka, read with
Prometheus' own parser (prometheus_client.parser.text_string_to_metric_families).

One broker with its console on a free port:
    data topic (1 partition)  N records produced, all of them consumed; group
                              `lagging` commits offset LAG_AT, N - LAG_AT behind
    txn topic (1 partition)   0-2 committed (3 its marker), 4-5 aborted (6 its
                              marker), 7-8 an open transaction left hanging with
                              a long timeout: high watermark 9, LSO 7

Then: `doze.console.listen=none` opens no listener but the Kafka one, and a bad
value stops the start with exit code 2 (a port in use: exit code 1).
"""

import os
import socket
import subprocess
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from txnutil import TXN_BROKER_SETS, txn_producer_conf
from wireutil import DeliveryLog, consumer, create_topic, produce_all, producer, read_all, unique_topic

N = 40
LAG_AT = 15
TXN_HW = 9
TXN_LSO = 7
# Far longer than the test: the open transaction must still be open when scraped.
HANGING_TIMEOUT_MS = 600_000
HTTP_TIMEOUT_S = 10


def scrape(broker):
    """The page, parsed: ({(sample name, frozenset(labels)): value}, {family: type})."""
    with urllib.request.urlopen(broker.console_url + "metrics", timeout=HTTP_TIMEOUT_S) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    samples, types = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in samples, f"sample {key} given twice"
            samples[key] = s.value
    return samples, types


def value(samples, name, **labels):
    key = (name, frozenset(labels.items()))
    assert key in samples, f"no sample {name}{labels}; have {sorted(k for k in samples if k[0] == name)}"
    return samples[key]


def histogram(samples, name, **labels):
    """[(le, cumulative count)] in bucket order, and _count; checked monotone."""
    buckets = []
    for (sample, labelset), v in samples.items():
        lbl = dict(labelset)
        le = lbl.pop("le", None)
        if sample == name + "_bucket" and lbl == labels:
            buckets.append((float(le), v))
    buckets.sort()
    assert buckets, f"no buckets for {name}{labels}"
    counts = [c for _, c in buckets]
    assert counts == sorted(counts), f"{name}{labels}: buckets not monotone: {buckets}"
    assert buckets[-1][0] == float("inf"), f"{name}{labels}: no +Inf bucket"
    count = value(samples, name + "_count", **labels)
    assert buckets[-1][1] == count, f"{name}{labels}: +Inf bucket {buckets[-1][1]} != count {count}"
    return buckets, count


def run_transaction(broker, topic, txn_id, vals, end):
    """A transaction writing `vals`; end: "commit", "abort" or None (left open).
    Returns the producer (a hanging one must stay alive)."""
    p = Producer(txn_producer_conf(broker, txn_id, **{
        "transaction.timeout.ms": HANGING_TIMEOUT_MS if end is None else 10000}))
    p.init_transactions(30)
    p.begin_transaction()
    log = DeliveryLog()
    for v in vals:
        p.produce(topic, value=v, on_delivery=log)
    assert p.flush(30) == 0
    assert not log.errors, log.errors
    if end == "commit":
        p.commit_transaction(30)
    elif end == "abort":
        p.abort_transaction(30)
    return p


@pytest.mark.timeout(150)
def test_metrics_count_real_work(start_broker):
    broker = start_broker(sets=TXN_BROKER_SETS, console=True)
    assert broker.console_url == f"http://127.0.0.1:{broker.console_port}/"

    data = create_topic(broker, unique_topic("metrics-data"), 1)
    txns = create_topic(broker, unique_topic("metrics-txn"), 1)

    p = producer(broker)
    log = DeliveryLog()
    produce_all(p, data, [(None, b"record-%d" % i) for i in range(N)], log)
    assert len(log.acked) == N and not log.errors

    got = read_all(broker, data, [0])[0]
    assert len(got) == N

    c = consumer(broker, **{"group.id": "lagging"})
    try:
        c.commit(offsets=[TopicPartition(data, 0, LAG_AT)], asynchronous=False)
    finally:
        c.close()

    run_transaction(broker, txns, unique_topic("committed"), [b"c0", b"c1", b"c2"], "commit")
    run_transaction(broker, txns, unique_topic("aborted"), [b"a0", b"a1"], "abort")
    hanging = run_transaction(broker, txns, unique_topic("hanging"), [b"o0", b"o1"], None)

    samples, types = scrape(broker)

    # Per topic: everything produced, everything consumed.
    assert value(samples, "doze_topic_produced_records_total", topic=data) == N
    assert value(samples, "doze_topic_produced_bytes_total", topic=data) > N
    assert value(samples, "doze_topic_fetched_records_total", topic=data) == N
    assert value(samples, "doze_topic_fetched_bytes_total", topic=data) > N
    assert value(samples, "doze_topic_produced_records_total", topic=txns) == 3 + 2 + 2

    # Transactions.
    assert value(samples, "doze_transactions_committed_total") == 1
    assert value(samples, "doze_transactions_aborted_total") == 1
    assert value(samples, "doze_transactions_timed_out_total") == 0
    assert value(samples, "doze_transactions_open") == 1
    assert value(samples, "doze_partition_lso_lag_offsets", topic=txns, partition="0") == TXN_HW - TXN_LSO
    assert value(samples, "doze_partition_lso_lag_offsets", topic=data, partition="0") == 0

    # Consumer lag: the gap between the committed offset and the end.
    assert value(samples, "doze_consumer_group_lag_offsets",
                 group="lagging", topic=data, partition="0") == N - LAG_AT

    # Request latency per API, and the disk's group commits.
    _, produces = histogram(samples, "doze_request_duration_seconds", request="Produce")
    assert produces > 0
    _, fetches = histogram(samples, "doze_request_duration_seconds", request="Fetch")
    assert fetches > 0
    _, ends = histogram(samples, "doze_request_duration_seconds", request="EndTxn")
    assert ends >= 2
    _, fsyncs = histogram(samples, "doze_fsync_duration_seconds")
    assert fsyncs > 0
    _, commits = histogram(samples, "doze_group_commit_appends")
    assert commits == fsyncs
    # Batches, not records: at least one of the data topic's, three
    # transactions' and two markers.
    assert value(samples, "doze_group_commit_appends_sum") >= 1 + 3 + 2
    histogram(samples, "doze_group_commit_bytes")

    # Connections: at least the hanging producer's.
    assert value(samples, "doze_connections_open") >= 1
    assert value(samples, "doze_connections_accepted_total") >= value(samples, "doze_connections_open")

    for family, kind in [("doze_request_duration_seconds", "histogram"),
                         ("doze_fsync_duration_seconds", "histogram"),
                         ("doze_transactions_open", "gauge"),
                         ("doze_consumer_group_lag_offsets", "gauge"),
                         ("doze_connections_open", "gauge")]:
        assert types.get(family) == kind, f"{family}: type {types.get(family)}, expected {kind}"

    # Only what is real is served.
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(broker.console_url + "nothing-here", timeout=HTTP_TIMEOUT_S)
    assert e.value.code == 404

    hanging.abort_transaction(30)
    samples, _ = scrape(broker)
    assert value(samples, "doze_transactions_open") == 0
    assert value(samples, "doze_transactions_aborted_total") == 2
    assert value(samples, "doze_partition_lso_lag_offsets", topic=txns, partition="0") == 0
    del hanging  # closes its connection before the broker stops


def listening_ports(pid):
    """TCP ports process `pid` listens on (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.timeout(60)
def test_console_none_opens_nothing_and_a_port_opens_one(start_broker):
    off = start_broker(sets=["doze.console.listen=none"], name="off")
    assert listening_ports(off.proc.pid) == {off.port}
    assert off.console_url is None
    assert "console:" not in off.log_tail()

    on = start_broker(console=True, name="on")
    assert listening_ports(on.proc.pid) == {on.port, on.console_port}
    # Kept across a restart.
    on.restart()
    assert on.console_url == f"http://127.0.0.1:{on.console_port}/"
    samples, _ = scrape(on)
    assert value(samples, "doze_transactions_open") == 0


@pytest.mark.timeout(60)
def test_a_bad_console_address_stops_the_start(broker_binary, tmp_path):
    def start(value):
        data_dir = tmp_path / "never"
        p = subprocess.run(
            [str(broker_binary), "--listen", "127.0.0.1:0", "--data-dir", str(data_dir),
             "--set", f"doze.console.listen={value}"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        return p, data_dir.exists()

    for bad in ["bogus", "8092", "127.0.0.1:99999", "", "off"]:
        p, made_dir = start(bad)
        assert p.returncode == 2, f"{bad!r}: exit {p.returncode}\n{p.stderr}"
        assert "doze.console.listen" in p.stderr, p.stderr
        assert not made_dir, f"{bad!r}: a refused start made the data dir"
        assert p.stdout == "", p.stdout

    # A port already taken fails like a Kafka listener's: exit 1, nothing left behind.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p, made_dir = start(f"127.0.0.1:{port}")
    assert p.returncode == 1, f"exit {p.returncode}\n{p.stderr}"
    assert "doze.console.listen" in p.stderr, p.stderr
    assert not made_dir
