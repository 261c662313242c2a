//! DeleteTopics and a topic created again under the same name: the new
//! topic's record is stored only once a sync covers the removal of the old
//! one's directories, which the two share (a power cut would otherwise bring
//! the old files back as the new topic's).

mod support;

use doze_core::BrokerConfig;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::*;
use support::requests::*;
use support::*;

fn delete_topic(w: &mut World, topic: &str) -> i32 {
    let req = DeleteTopicsRequest::default()
        .with_topics(vec![
            DeleteTopicState::default().with_name(Some(name(topic)))
        ])
        .with_timeout_ms(30_000);
    w.send(9, 6, &req)
}

fn send_create(w: &mut World, topic: &str) {
    let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(1)
        .with_replication_factor(1)]);
    w.send(8, 7, &req);
}

/// A topic with one acknowledged batch, then deleted: answered once meta.db
/// has the deletion, with the sync that covers its directory's removal
/// still in flight (I/O is completed by hand from here on).
fn deleted_with_its_removal_unsynced() -> World {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    w.send(1, 9, &produce_req("t", 0, batch(&[b"old"], T0_MS), -1));
    assert_eq!(produce_answer(&mut w, 1), Some((0, 0)));
    w.auto_io = false;
    delete_topic(&mut w, "t");
    w.complete_io(); // the meta.db write
    match w.recv(9) {
        Some((_, ResponseKind::DeleteTopics(r))) => assert_eq!(r.responses[0].error_code, 0),
        other => panic!("expected a DeleteTopics answer, got {other:?}"),
    }
    assert_eq!(w.pending_syncs.len(), 1, "the removal's sync is in flight");
    w
}

fn created(w: &mut World) -> bool {
    match w.recv(8) {
        Some((_, ResponseKind::CreateTopics(r))) => {
            assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0].error_message);
            true
        }
        None => false,
        other => panic!("expected a CreateTopics answer, got {other:?}"),
    }
}

#[test]
fn a_topic_created_again_is_stored_after_the_old_ones_removal_is_synced() {
    let mut w = deleted_with_its_removal_unsynced();
    send_create(&mut w, "t");
    assert!(
        w.pending_meta.is_empty(),
        "nothing is stored while the removal is not durable"
    );
    assert!(!created(&mut w));
    w.complete_io(); // the removal's sync; the new record's write is issued
    assert_eq!(w.pending_meta.len(), 1, "the new topic's record is written");
    assert!(!created(&mut w), "answered once stored");
    w.complete_io();
    assert!(created(&mut w));
    // The new topic is empty, and takes appends.
    w.auto_io = true;
    w.send(1, 9, &produce_req("t", 0, batch(&[b"new"], T0_MS), -1));
    assert_eq!(produce_answer(&mut w, 1), Some((0, 0)));
}

#[test]
fn a_failed_removal_sync_keeps_the_creation_waiting_for_the_next() {
    let mut w = deleted_with_its_removal_unsynced();
    send_create(&mut w, "t");
    w.fail_next_sync = true;
    w.complete_io(); // the removal's sync fails; the next one is issued
    assert!(
        w.pending_meta.is_empty(),
        "still waiting: {:?}",
        w.pending_meta
    );
    assert!(!created(&mut w));
    assert_eq!(w.pending_syncs.len(), 1, "a sync retries the removal");
    w.complete_io(); // it succeeds; the new record's write is issued
    assert_eq!(w.pending_meta.len(), 1);
    w.complete_io();
    assert!(created(&mut w));
}

#[test]
fn another_topic_is_created_at_once_meanwhile() {
    let mut w = deleted_with_its_removal_unsynced();
    send_create(&mut w, "u");
    assert_eq!(w.pending_meta.len(), 1, "another name does not wait");
    w.complete_io();
    assert!(created(&mut w));
}
