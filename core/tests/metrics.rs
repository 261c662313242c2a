//! `Broker::metrics_snapshot`: what the produce, fetch and transaction paths
//! count, and the gauges built from the coordinators (open transactions,
//! LSO lag, consumer lag).

mod support;

use doze_core::metrics::{Counters, TopicCounters};
use doze_core::BrokerConfig;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use support::requests::*;
use support::txn::*;
use support::*;

const NONE: i16 = 0;

fn topic_counters(w: &World, topic: &str) -> TopicCounters {
    let snapshot = w.broker.metrics_snapshot();
    let t = snapshot.topics.iter().find(|t| t.topic == topic);
    t.unwrap_or_else(|| panic!("no topic {topic}")).counters
}

fn lso_lag(w: &World, topic: &str, partition: i32) -> i64 {
    let snapshot = w.broker.metrics_snapshot();
    let p = snapshot
        .partitions
        .iter()
        .find(|p| p.topic == topic && p.partition == partition);
    p.unwrap_or_else(|| panic!("no partition {topic}-{partition}"))
        .lso_lag()
}

fn produce(w: &mut World, topic: &str, records: bytes::Bytes, acks: i16) {
    w.send(1, 9, &produce_req(topic, 0, records, acks));
    if acks != 0 {
        assert_eq!(produce_answer(w, 1).unwrap().0, NONE);
    }
}

/// Whole fetch answers, from `offset`, at most `partition_max_bytes`.
fn fetch(w: &mut World, topic: &str, offset: i64, partition_max_bytes: i32) {
    let mut req = fetch_req(topic, 0, offset, 0, 0);
    req.topics[0].partitions[0].partition_max_bytes = partition_max_bytes;
    w.send(2, 12, &req);
    assert_eq!(fetch_answer(w, 2).unwrap().error_code, NONE);
}

#[test]
fn produced_and_fetched_bytes_and_records_are_counted_per_topic() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "a", 1);
    create_topic(&mut w, "quiet", 1);
    let batches = [
        batch(&[b"0", b"1"], T0_MS),
        batch(&[b"2", b"3", b"4"], T0_MS),
        batch(&[b"5"], T0_MS),
    ];
    let sizes: Vec<u64> = batches.iter().map(|b| b.len() as u64).collect();
    let total: u64 = sizes.iter().sum();
    produce(&mut w, "a", batches[0].clone(), -1);
    produce(&mut w, "a", batches[1].clone(), 1);
    produce(&mut w, "a", batches[2].clone(), 0); // acks=0 is appended too
    w.drain();
    // Refused: nothing appended, nothing counted.
    w.send(1, 9, &produce_req("a", 7, batch(&[b"x"], T0_MS), -1));
    assert_ne!(produce_answer(&mut w, 1).unwrap().0, NONE);
    let counted = topic_counters(&w, "a");
    assert_eq!(counted.produced_records, 6);
    assert_eq!(counted.produced_bytes, total);
    assert_eq!(topic_counters(&w, "quiet"), TopicCounters::default());

    fetch(&mut w, "a", 0, 1 << 20);
    let counted = topic_counters(&w, "a");
    assert_eq!((counted.fetched_bytes, counted.fetched_records), (total, 6));

    // From the middle of the second batch: the client skips 2, so 3..6.
    fetch(&mut w, "a", 3, 1 << 20);
    let counted = topic_counters(&w, "a");
    assert_eq!(counted.fetched_records, 6 + 3);
    assert_eq!(counted.fetched_bytes, total + sizes[1] + sizes[2]);

    // Cut by the size limit inside the second batch: the first whole one
    // counts, the part of the second sent does not.
    let cut = sizes[0] + 5;
    fetch(&mut w, "a", 0, cut as i32);
    let counted = topic_counters(&w, "a");
    assert_eq!(counted.fetched_records, 6 + 3 + 2);
    assert_eq!(counted.fetched_bytes, total + sizes[1] + sizes[2] + cut);

    // Nothing to send: nothing counted.
    fetch(&mut w, "a", 6, 1 << 20);
    assert_eq!(topic_counters(&w, "a").fetched_records, 11);
    assert_eq!(topic_counters(&w, "quiet"), TopicCounters::default());
}

#[test]
fn transactions_are_counted_and_open_ones_show_as_lso_lag() {
    let mut w = World::new(BrokerConfig {
        transaction_abort_check_interval_ms: 1_000,
        ..Default::default()
    });
    create_topic(&mut w, "a", 1);
    let run = |w: &mut World, id: &str, timeout_ms: i32| {
        let (err, pid, epoch) = init_txn(w, 1, id, timeout_ms);
        assert_eq!(err, NONE);
        assert_eq!(
            add_partitions(w, 1, id, pid, epoch, &[("a", 0)]),
            vec![NONE]
        );
        produce(w, "a", txn_batch(&[b"t0", b"t1"], pid, epoch, 0), -1);
        (pid, epoch)
    };
    let (pid, epoch) = run(&mut w, "committed", 60_000);
    assert_eq!(w.broker.metrics_snapshot().txns_open, 1);
    assert_eq!(lso_lag(&w, "a", 0), 2, "the open transaction holds 0 and 1");
    assert_eq!(
        end_txn(&mut w, 1, "committed", pid, epoch, true),
        Some(NONE)
    );
    let (pid, epoch) = run(&mut w, "aborted", 60_000);
    assert_eq!(end_txn(&mut w, 1, "aborted", pid, epoch, false), Some(NONE));
    run(&mut w, "hanging", 5_000);

    let snapshot = w.broker.metrics_snapshot();
    assert_eq!(
        snapshot.counters,
        Counters {
            txns_committed: 1,
            txns_aborted: 1,
            txns_timed_out: 0,
            fetches_incremental: 0,
        }
    );
    assert_eq!(snapshot.txns_open, 1);
    // 0-1 committed, 2 marker, 3-4 aborted, 5 marker, 6-7 open.
    assert_eq!(lso_lag(&w, "a", 0), 2);
    assert_eq!(
        topic_counters(&w, "a").produced_records,
        6,
        "markers are not produced"
    );

    for _ in 0..7 {
        w.advance(1_000);
    }
    let snapshot = w.broker.metrics_snapshot();
    assert_eq!(
        snapshot.counters,
        Counters {
            txns_committed: 1,
            txns_aborted: 2,
            txns_timed_out: 1,
            fetches_incremental: 0,
        }
    );
    assert_eq!(snapshot.txns_open, 0);
    assert_eq!(lso_lag(&w, "a", 0), 0);
}

#[test]
fn consumer_lag_is_the_gap_to_the_high_watermark() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "a", 2);
    produce(&mut w, "a", batch(&[b"0", b"1", b"2", b"3"], T0_MS), -1);
    let partition = |index: i32, offset: i64| {
        OffsetCommitRequestPartition::default()
            .with_partition_index(index)
            .with_committed_offset(offset)
            .with_committed_leader_epoch(-1)
    };
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(name("a"))
            .with_partitions(vec![partition(0, 1), partition(1, 0)])]);
    w.send(3, 8, &commit);
    match w.recv(3) {
        Some((_, ResponseKind::OffsetCommit(r))) => {
            assert!(r.topics[0].partitions.iter().all(|p| p.error_code == NONE))
        }
        other => panic!("expected an OffsetCommit answer, got {other:?}"),
    }
    let lags: Vec<(String, String, i32, i64)> = w
        .broker
        .metrics_snapshot()
        .consumer_offsets
        .iter()
        .map(|c| (c.group.clone(), c.topic.clone(), c.partition, c.lag()))
        .collect();
    assert_eq!(
        lags,
        vec![
            ("g".into(), "a".into(), 0, 3),
            ("g".into(), "a".into(), 1, 0),
        ]
    );
}
