//! Fetch sessions (KIP-227): opened by a full fetch with epoch 0, then
//! incremental fetches that name only what changed and get back only what
//! is new, with Kafka's session errors and its cache's eviction.

mod support;

use doze_core::limits;
use doze_core::BrokerConfig;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use support::requests::*;
use support::*;

const V: i16 = 12;

fn part(partition: i32, offset: i64) -> FetchPartition {
    FetchPartition::default()
        .with_partition(partition)
        .with_fetch_offset(offset)
        .with_partition_max_bytes(1024 * 1024)
}

fn fetch(session_id: i32, epoch: i32, topics: Vec<(&str, Vec<FetchPartition>)>) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(50 * 1024 * 1024)
        .with_session_id(session_id)
        .with_session_epoch(epoch)
        .with_topics(
            topics
                .into_iter()
                .map(|(t, ps)| {
                    FetchTopic::default()
                        .with_topic(name(t))
                        .with_partitions(ps)
                })
                .collect(),
        )
}

fn answer(w: &mut World, conn: u64) -> FetchResponse {
    match w.recv(conn) {
        Some((_, ResponseKind::Fetch(r))) => r,
        other => panic!("expected a fetch answer, got {other:?}"),
    }
}

/// (topic, partition, has records) of each partition in an answer, in order.
fn shape(r: &FetchResponse) -> Vec<(String, i32, bool)> {
    r.responses
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let has = p.records.as_ref().is_some_and(|r| !r.is_empty());
                (t.topic.0.to_string(), p.partition_index, has)
            })
        })
        .collect()
}

fn world_with(topic: &str, partitions: i32) -> World {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, topic, partitions);
    w
}

fn produce(w: &mut World, topic: &str, partition: i32, value: &[u8]) {
    w.send(
        9,
        9,
        &produce_req(topic, partition, batch(&[value], T0_MS), -1),
    );
    assert_eq!(produce_answer(w, 9).map(|a| a.0), Some(0));
}

/// Opens a session on partitions 0..n of `topic` at offset 0.
fn open(w: &mut World, topic: &str, n: i32) -> (i32, FetchResponse) {
    w.send(
        1,
        V,
        &fetch(0, 0, vec![(topic, (0..n).map(|p| part(p, 0)).collect())]),
    );
    let r = answer(w, 1);
    assert_eq!(r.error_code, 0);
    assert_ne!(r.session_id, 0, "a full fetch with epoch 0 opens a session");
    (r.session_id, r)
}

#[test]
fn an_incremental_fetch_answers_only_what_changed() {
    let mut w = world_with("t", 3);
    produce(&mut w, "t", 1, b"one");
    let (id, full) = open(&mut w, "t", 3);
    assert_eq!(
        shape(&full),
        vec![
            ("t".into(), 0, false),
            ("t".into(), 1, true),
            ("t".into(), 2, false)
        ],
        "the full answer has every partition"
    );
    // The client moves partition 1 on; nothing new anywhere.
    w.send(1, V, &fetch(id, 1, vec![("t", vec![part(1, 1)])]));
    let r = answer(&mut w, 1);
    assert_eq!((r.error_code, r.session_id), (0, id));
    assert_eq!(shape(&r), vec![], "nothing changed: no partition is sent");
    // Something new on partition 2, named by no request since the first.
    produce(&mut w, "t", 2, b"two");
    w.send(1, V, &fetch(id, 2, vec![]));
    let r = answer(&mut w, 1);
    assert_eq!(shape(&r), vec![("t".into(), 2, true)]);
    assert_eq!(r.responses[0].partitions[0].high_watermark, 1);
    // Partition 2 sent records, so it moved to the end of the session's order;
    // the next answer with everything new lists it last.
    produce(&mut w, "t", 0, b"zero");
    produce(&mut w, "t", 1, b"one again");
    w.send(1, V, &fetch(id, 3, vec![("t", vec![part(2, 1)])]));
    let r = answer(&mut w, 1);
    assert_eq!(
        shape(&r),
        vec![("t".into(), 0, true), ("t".into(), 1, true)],
        "partition 2 is at its end, with nothing new"
    );
    assert_eq!(
        r.responses.len(),
        1,
        "consecutive partitions of a topic share its entry"
    );
}

#[test]
fn session_errors_are_kafkas() {
    let mut w = world_with("t", 1);
    let (id, _) = open(&mut w, "t", 1);
    // The epoch must be the session's: 1 now.
    w.send(1, V, &fetch(id, 5, vec![]));
    let r = answer(&mut w, 1);
    assert_eq!(r.error_code, ResponseError::InvalidFetchSessionEpoch.code());
    assert!(r.responses.is_empty());
    // An id never given.
    w.send(1, V, &fetch(id ^ 1, 1, vec![]));
    let r = answer(&mut w, 1);
    assert_eq!(r.error_code, ResponseError::FetchSessionIdNotFound.code());
    assert_eq!(r.session_id, 0);
    // Session id 0 with an incremental epoch names no session either
    // (FetchManager.newContext).
    w.send(1, V, &fetch(0, 3, vec![]));
    let r = answer(&mut w, 1);
    assert_eq!(r.error_code, ResponseError::FetchSessionIdNotFound.code());
    // The errors did not move the epoch: 1 still works.
    w.send(1, V, &fetch(id, 1, vec![]));
    assert_eq!(answer(&mut w, 1).error_code, 0);
    // A full fetch naming the session with epoch -1 closes it, sessionless.
    w.send(1, V, &fetch(id, -1, vec![("t", vec![part(0, 0)])]));
    let r = answer(&mut w, 1);
    assert_eq!((r.error_code, r.session_id), (0, 0));
    w.send(1, V, &fetch(id, 2, vec![]));
    let r = answer(&mut w, 1);
    assert_eq!(r.error_code, ResponseError::FetchSessionIdNotFound.code());
}

#[test]
fn a_full_fetch_with_epoch_minus_one_opens_no_session() {
    let mut w = world_with("t", 1);
    w.send(1, V, &fetch(0, -1, vec![("t", vec![part(0, 0)])]));
    assert_eq!(answer(&mut w, 1).session_id, 0);
    // Below v7 there are no sessions at all.
    w.send(1, 6, &fetch(0, -1, vec![("t", vec![part(0, 0)])]));
    assert_eq!(answer(&mut w, 1).responses.len(), 1);
}

#[test]
fn forgotten_partitions_leave_and_an_empty_session_closes() {
    let mut w = world_with("t", 2);
    let (id, _) = open(&mut w, "t", 2);
    let forget = |ps: Vec<i32>| {
        vec![ForgottenTopic::default()
            .with_topic(name("t"))
            .with_partitions(ps)]
    };
    w.send(
        1,
        V,
        &fetch(id, 1, vec![]).with_forgotten_topics_data(forget(vec![0])),
    );
    assert_eq!(answer(&mut w, 1).session_id, id);
    produce(&mut w, "t", 0, b"not for this session");
    produce(&mut w, "t", 1, b"for it");
    w.send(1, V, &fetch(id, 2, vec![]));
    let r = answer(&mut w, 1);
    assert_eq!(
        shape(&r),
        vec![("t".into(), 1, true)],
        "partition 0 was forgotten"
    );
    // Forgetting the last closes the session; the fetch runs sessionless on
    // what it named (nothing), and is answered at once.
    w.send(
        1,
        V,
        &fetch(id, 3, vec![]).with_forgotten_topics_data(forget(vec![1])),
    );
    let r = answer(&mut w, 1);
    assert_eq!((r.error_code, r.session_id, r.responses.len()), (0, 0, 0));
    w.send(1, V, &fetch(id, 4, vec![]));
    let r = answer(&mut w, 1);
    assert_eq!(r.error_code, ResponseError::FetchSessionIdNotFound.code());
}

#[test]
fn a_waiting_fetch_overtaken_by_its_session_gets_the_epoch_error() {
    let mut w = world_with("t", 1);
    let (id, _) = open(&mut w, "t", 1);
    // Epoch 1 waits for data; a retry with epoch 1 is refused, and one with
    // epoch 2 moves the session on.
    w.send(1, V, &fetch(id, 1, vec![]).with_max_wait_ms(500));
    assert!(w.recv(1).is_none(), "it waits for data");
    w.send(2, V, &fetch(id, 2, vec![]));
    let r = answer(&mut w, 2);
    assert_eq!((r.error_code, r.session_id), (0, id));
    w.advance(600);
    let r = answer(&mut w, 1);
    assert_eq!(r.error_code, ResponseError::InvalidFetchSessionEpoch.code());
    assert_eq!(
        r.session_id, id,
        "Kafka names the session whose epoch moved"
    );
    // The session goes on at epoch 3.
    produce(&mut w, "t", 0, b"x");
    w.send(2, V, &fetch(id, 3, vec![]).with_max_wait_ms(500));
    assert_eq!(shape(&answer(&mut w, 2)), vec![("t".into(), 0, true)]);
}

#[test]
fn the_cache_keeps_a_thousand_sessions_and_evicts_the_stale() {
    let mut w = world_with("t", 2);
    let mut ids = std::collections::BTreeSet::new();
    for _ in 0..limits::FETCH_SESSIONS_MAX {
        ids.insert(open(&mut w, "t", 1).0);
    }
    assert_eq!(ids.len(), limits::FETCH_SESSIONS_MAX, "ids are unique");
    // Full, and none stale or old: the next fetch runs sessionless.
    w.send(1, V, &fetch(0, 0, vec![("t", vec![part(0, 0)])]));
    assert_eq!(answer(&mut w, 1).session_id, 0);
    // Past the eviction time, with one session used meanwhile, the least
    // recently used one goes for a new session.
    w.advance(limits::FETCH_SESSION_EVICTION_MS / 2);
    let kept = *ids.first().unwrap();
    w.send(1, V, &fetch(kept, 1, vec![]));
    assert_eq!(answer(&mut w, 1).error_code, 0);
    w.advance(limits::FETCH_SESSION_EVICTION_MS / 2 + 1);
    let (new, _) = open(&mut w, "t", 1);
    assert!(!ids.contains(&new));
    w.send(1, V, &fetch(kept, 2, vec![]));
    assert_eq!(
        answer(&mut w, 1).error_code,
        0,
        "the session used recently stays"
    );
}

#[test]
fn a_larger_session_evicts_a_smaller_old_one() {
    let mut w = world_with("t", 2);
    let ids: Vec<i32> = (0..limits::FETCH_SESSIONS_MAX)
        .map(|_| open(&mut w, "t", 1).0)
        .collect();
    // Used within the eviction time (not stale), but made before it (old
    // enough to be evicted for a larger one).
    w.advance(limits::FETCH_SESSION_EVICTION_MS / 2 + 1);
    for &id in &ids {
        w.send(1, V, &fetch(id, 1, vec![]));
        assert_eq!(answer(&mut w, 1).error_code, 0);
    }
    w.advance(limits::FETCH_SESSION_EVICTION_MS / 2 + 1);
    w.send(1, V, &fetch(0, 0, vec![("t", vec![part(0, 0)])]));
    assert_eq!(
        answer(&mut w, 1).session_id,
        0,
        "the same size evicts nothing"
    );
    w.send(
        1,
        V,
        &fetch(0, 0, vec![("t", vec![part(0, 0), part(1, 0)])]),
    );
    assert_ne!(
        answer(&mut w, 1).session_id,
        0,
        "two partitions evict a one"
    );
}

#[test]
fn sessions_cost_bounded_bytes() {
    let mut w = world_with("t", 1);
    let (id, _) = open(&mut w, "t", 1);
    // A hostile incremental fetch naming partitions without end of a topic
    // that does not exist: it would pass the bound, so the session goes.
    let per = limits::FETCH_SESSION_PARTITION_BYTES + "ghost".len();
    let n = (limits::FETCH_SESSIONS_CACHED_BYTES_MAX / per + 10) as i32;
    let many: Vec<_> = (0..n).map(|p| part(p, 0)).collect();
    w.send(1, V, &fetch(id, 1, vec![("ghost", many.clone())]));
    let r = answer(&mut w, 1);
    assert_eq!(r.error_code, ResponseError::FetchSessionIdNotFound.code());
    // A full fetch of that size gets no session but is answered.
    w.send(1, V, &fetch(0, 0, vec![("ghost", many)]));
    let r = answer(&mut w, 1);
    assert_eq!(r.session_id, 0);
    assert_eq!(r.responses[0].partitions.len(), n as usize);
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
}

#[test]
fn an_incremental_fetch_reports_errors_every_time_and_a_new_high_watermark() {
    let mut w = world_with("t", 1);
    w.send(
        1,
        V,
        &fetch(
            0,
            0,
            vec![("t", vec![part(0, 0)]), ("gone", vec![part(0, 0)])],
        ),
    );
    let r = answer(&mut w, 1);
    let id = r.session_id;
    assert_ne!(id, 0);
    for epoch in 1..3 {
        w.send(1, V, &fetch(id, epoch, vec![]));
        let r = answer(&mut w, 1);
        assert_eq!(
            shape(&r),
            vec![("gone".into(), 0, false)],
            "errors are always sent"
        );
    }
    // The client is ahead of the data it was sent (it read offset 0 already):
    // no records for it, but the new high watermark is news.
    w.send(1, V, &fetch(id, 3, vec![("t", vec![part(0, 1)])]));
    answer(&mut w, 1);
    produce(&mut w, "t", 0, b"a");
    w.send(1, V, &fetch(id, 4, vec![("t", vec![part(0, 1)])]));
    let r = answer(&mut w, 1);
    assert_eq!(
        shape(&r),
        vec![("t".into(), 0, false), ("gone".into(), 0, false)],
        "offset 1 is the log end: no records, but high watermark 1 is new"
    );
}
