//! Idempotent producers: ids, duplicates, gaps, epochs, and dedup across a
//! restart rebuilt from the log's tail.

mod support;

use doze_core::BrokerConfig;
use kafka_protocol::messages::*;
use support::requests::*;
use support::*;

fn init_producer_id(w: &mut World, conn: u64, version: i16) -> (i16, i64, i16) {
    w.send(
        conn,
        version,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000),
    );
    match w.recv(conn) {
        Some((_, ResponseKind::InitProducerId(r))) => {
            (r.error_code, r.producer_id.0, r.producer_epoch)
        }
        other => panic!("expected InitProducerId answer, got {other:?}"),
    }
}

fn values(w: &mut World, topic: &str) -> Vec<Vec<u8>> {
    w.send(50, 12, &fetch_req(topic, 0, 0, 0, 1));
    let p = fetch_answer(w, 50).unwrap();
    decode_values(p.records.unwrap())
        .into_iter()
        .map(|(_, v)| v.to_vec())
        .collect()
}

#[test]
fn producer_ids_are_unique_and_never_reused_after_restart() {
    let mut w = World::new(BrokerConfig::default());
    let mut seen = std::collections::BTreeSet::new();
    for v in [0, 1, 2, 3, 4, 5] {
        let (err, id, epoch) = init_producer_id(&mut w, 1, v);
        assert_eq!((err, epoch), (0, 0));
        assert!(seen.insert(id), "id {id} given twice");
    }
    w.restart(false);
    for _ in 0..3 {
        let (err, id, _) = init_producer_id(&mut w, 1, 4);
        assert_eq!(err, 0);
        assert!(seen.insert(id), "id {id} reused after a restart");
    }
}

#[test]
fn init_producer_id_waits_for_its_block_to_be_stored() {
    let mut w = World::new(BrokerConfig::default());
    w.auto_io = false;
    w.send(
        1,
        4,
        &InitProducerIdRequest::default().with_transactional_id(None),
    );
    assert!(w.recv(1).is_none(), "no id before the block is in meta.db");
    w.complete_io();
    let Some((_, ResponseKind::InitProducerId(r))) = w.recv(1) else {
        panic!("no answer")
    };
    assert_eq!(r.error_code, 0);
}

#[test]
fn duplicate_batch_is_answered_with_its_original_offset_and_not_written() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let (_, pid, epoch) = init_producer_id(&mut w, 1, 4);
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"a", b"b"], pid, epoch, 0), -1),
    );
    assert_eq!(produce_answer(&mut w, 1), Some((0, 0)));
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"c"], pid, epoch, 2), -1),
    );
    assert_eq!(produce_answer(&mut w, 1), Some((0, 2)));
    // The first batch again (a retry after a lost answer).
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"a", b"b"], pid, epoch, 0), -1),
    );
    assert_eq!(
        produce_answer(&mut w, 1),
        Some((0, 0)),
        "duplicate gets the original offset"
    );
    assert_eq!(
        values(&mut w, "t"),
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
    );
}

#[test]
fn duplicate_of_an_unsynced_batch_waits_for_the_original_to_be_durable() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let (_, pid, epoch) = init_producer_id(&mut w, 1, 4);
    w.auto_io = false;
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"a"], pid, epoch, 0), -1),
    );
    w.send(
        2,
        9,
        &produce_req("t", 0, idem_batch(&[b"a"], pid, epoch, 0), -1),
    );
    assert!(
        w.recv(2).is_none(),
        "the duplicate must not claim durability early"
    );
    w.complete_io();
    assert_eq!(produce_answer(&mut w, 1), Some((0, 0)));
    assert_eq!(produce_answer(&mut w, 2), Some((0, 0)));
}

#[test]
fn gaps_and_old_epochs_are_refused() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let (_, pid, _) = init_producer_id(&mut w, 1, 4);
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"a"], pid, 1, 0), -1),
    );
    assert_eq!(produce_answer(&mut w, 1), Some((0, 0)));
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"x"], pid, 1, 5), -1),
    );
    assert_eq!(
        produce_answer(&mut w, 1).unwrap().0,
        45,
        "OUT_OF_ORDER_SEQUENCE_NUMBER"
    );
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"x"], pid, 0, 1), -1),
    );
    assert_eq!(
        produce_answer(&mut w, 1).unwrap().0,
        47,
        "INVALID_PRODUCER_EPOCH"
    );
    // A new epoch must restart at sequence 0.
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"x"], pid, 2, 1), -1),
    );
    assert_eq!(produce_answer(&mut w, 1).unwrap().0, 45);
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"b"], pid, 2, 0), -1),
    );
    assert_eq!(produce_answer(&mut w, 1), Some((0, 1)));
    assert_eq!(values(&mut w, "t"), vec![b"a".to_vec(), b"b".to_vec()]);
}

#[test]
fn dedup_after_a_restart_is_rebuilt_from_the_log_tail() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let (_, pid, epoch) = init_producer_id(&mut w, 1, 4);
    for seq in 0..10 {
        w.send(
            1,
            9,
            &produce_req("t", 0, idem_batch(&[b"v"], pid, epoch, seq), -1),
        );
        assert_eq!(produce_answer(&mut w, 1), Some((0, seq as i64)));
    }
    w.restart(true);
    // The last batch resent across the crash is recognised...
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"v"], pid, epoch, 9), -1),
    );
    assert_eq!(produce_answer(&mut w, 1), Some((0, 9)));
    // ...a gap is still a gap...
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"v"], pid, epoch, 12), -1),
    );
    assert_eq!(produce_answer(&mut w, 1).unwrap().0, 45);
    // ...and the next in order lands.
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"w"], pid, epoch, 10), -1),
    );
    assert_eq!(produce_answer(&mut w, 1), Some((0, 10)));
    assert_eq!(values(&mut w, "t").len(), 11);
}

#[test]
fn a_batch_cut_by_a_failed_sync_is_not_taken_for_a_duplicate() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let (_, pid, epoch) = init_producer_id(&mut w, 1, 4);
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"a"], pid, epoch, 0), -1),
    );
    assert_eq!(produce_answer(&mut w, 1), Some((0, 0)));
    w.fail_next_sync = true;
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"b"], pid, epoch, 1), -1),
    );
    assert_eq!(
        produce_answer(&mut w, 1).unwrap().0,
        56,
        "KAFKA_STORAGE_ERROR"
    );
    // The client retries the same batch: it must be written, not "deduplicated"
    // against the batch the failed sync cut away.
    w.send(
        1,
        9,
        &produce_req("t", 0, idem_batch(&[b"b"], pid, epoch, 1), -1),
    );
    assert_eq!(produce_answer(&mut w, 1), Some((0, 1)));
    assert_eq!(values(&mut w, "t"), vec![b"a".to_vec(), b"b".to_vec()]);
}

#[test]
fn idle_producer_state_expires() {
    let config = BrokerConfig {
        producer_id_expiration_ms: 60_000,
        producer_id_expiration_check_interval_ms: 10_000,
        ..Default::default()
    };
    let mut w = World::new(config);
    create_topic(&mut w, "t", 1);
    w.send(1, 9, &produce_req("t", 0, idem_batch(&[b"a"], 7, 3, 0), -1));
    assert_eq!(produce_answer(&mut w, 1), Some((0, 0)));
    for _ in 0..8 {
        w.advance(10_000);
    }
    // Expired: the old epoch is no longer known, so it is accepted again.
    w.send(1, 9, &produce_req("t", 0, idem_batch(&[b"b"], 7, 2, 0), -1));
    assert_eq!(produce_answer(&mut w, 1), Some((0, 1)));
}
