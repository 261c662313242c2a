"""Fencing: a second producer with the same transactional.id (InitProducerId)
takes the id over, raises the epoch and aborts what the first left open; the
first producer's next produce or commit fails with a fencing error, and
read_committed sees only what the new owner committed."""

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from txnutil import end_offsets, read_to, txn_producer_conf
from wireutil import create_topic, unique_topic

FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def zombie_and_owner(broker, topic, txn_id, errors):
    zombie = Producer(txn_producer_conf(broker, txn_id, error_cb=errors.append))
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie-0")
    assert zombie.flush(30) == 0
    owner = Producer(txn_producer_conf(broker, txn_id))
    # Fences the zombie; its open transaction (zombie-0) is aborted.
    owner.init_transactions(30)
    return zombie, owner


def owner_commits(owner, topic):
    owner.begin_transaction()
    owner.produce(topic, value=b"owner-0")
    owner.commit_transaction(30)


def fenced_error(exc_or_err):
    err = exc_or_err.args[0] if isinstance(exc_or_err, KafkaException) else exc_or_err
    return err


def check_committed(broker, topic):
    rc = read_to(broker, topic, [0], "read_committed")[0]
    assert [v for _, v in rc] == [b"owner-0"], f"read_committed after fencing: {rc}"
    ru = read_to(broker, topic, [0], "read_uncommitted")[0]
    assert b"owner-0" in [v for _, v in ru]


@pytest.mark.timeout(90)
def test_confluent_fenced_commit_fails(txn_broker):
    topic = create_topic(txn_broker, unique_topic("txn-fence-c"), 1)
    errors = []
    zombie, owner = zombie_and_owner(txn_broker, topic, unique_topic("fence-c"), errors)
    with pytest.raises(KafkaException) as ei:
        zombie.commit_transaction(30)
    err = fenced_error(ei.value)
    assert err.code() in FENCED_CODES, f"zombie commit failed with {err}, not a fencing error"
    assert err.fatal(), f"fencing must be fatal for the zombie: {err}"
    owner_commits(owner, topic)
    check_committed(txn_broker, topic)


@pytest.mark.timeout(90)
def test_confluent_fenced_produce_fails(txn_broker):
    topic = create_topic(txn_broker, unique_topic("txn-fence-p"), 1)
    errors = []
    zombie, owner = zombie_and_owner(txn_broker, topic, unique_topic("fence-p"), errors)
    delivery = []
    zombie.produce(topic, value=b"zombie-1", on_delivery=lambda e, m: delivery.append(e))
    try:
        zombie.flush(15)
    except KafkaException as e:  # the binding raises the fatal error from flush
        errors.append(e.args[0])
    except SystemError as e:
        # confluent-kafka 2.x raises the fatal error while a callback runs, which
        # surfaces as SystemError chained to the KafkaException.
        assert isinstance(e.__cause__, KafkaException), e
        errors.append(e.__cause__.args[0])
    # The produce itself is refused (the record is failed or the producer has
    # raised a fatal error); either way the commit after it must fail.
    with pytest.raises(KafkaException) as ei:
        zombie.commit_transaction(30)
    err = fenced_error(ei.value)
    seen = [e for e in delivery if e is not None] + errors + [err]
    assert any(e.code() in FENCED_CODES for e in seen), (
        f"no fencing error for the zombie's produce/commit: delivery {delivery}, "
        f"error_cb {errors}, commit {err}")
    assert b"zombie-1" not in [v for _, v in read_to(txn_broker, topic, [0], "read_uncommitted")[0]], \
        "the fenced producer's record was written to the log"
    owner_commits(owner, topic)
    check_committed(txn_broker, topic)
    assert end_offsets(txn_broker, topic, [0], "read_committed")[0] == \
        end_offsets(txn_broker, topic, [0], "read_uncommitted")[0]


@pytest.mark.timeout(90)
def test_kafka_python_fenced(txn_broker):
    from kafka import KafkaProducer
    from kafka import errors as kerr
    topic = create_topic(txn_broker, unique_topic("txn-fence-kp"), 1)
    txn_id = unique_topic("fence-kp")
    common = dict(bootstrap_servers=txn_broker.bootstrap, transactional_id=txn_id,
                  transaction_timeout_ms=10000, acks="all", request_timeout_ms=20000,
                  max_block_ms=30000)
    zombie = KafkaProducer(**common)
    owner = KafkaProducer(**common)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(topic, value=b"zombie-0").get(timeout=30)
        owner.init_transactions()
        with pytest.raises(kerr.KafkaError) as ei:
            zombie.send(topic, value=b"zombie-1").get(timeout=30)
            zombie.commit_transaction()
        assert isinstance(ei.value, (kerr.ProducerFencedError, kerr.InvalidProducerEpochError)), (
            f"kafka-python zombie failed with {type(ei.value).__name__}: {ei.value}, "
            f"not a fencing error")
        owner.begin_transaction()
        owner.send(topic, value=b"owner-0").get(timeout=30)
        owner.commit_transaction()
    finally:
        zombie.close(timeout=5)
        owner.close(timeout=5)
    check_committed(txn_broker, topic)
