//! DescribeTopicPartitions (key 75): served at v0 as Kafka 4.3.1 serves it,
//! paged by response_partition_limit and the cursor as Kafka's
//! DescribeTopicPartitionsRequestHandler pages, unknown and refused topics
//! answered with Kafka's errors.

mod support;

use doze_core::security::acl::{pattern, permission, resource, Op};
use doze_core::BrokerConfig;
use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use kafka_protocol::messages::*;
use support::authz::*;
use support::requests::*;
use support::*;

const CONN: u64 = 1;
const INVALID_REQUEST: i16 = 42;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_TOPIC_EXCEPTION: i16 = 17;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
/// READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS,
/// ALTER_CONFIGS as AclOperation bits: what Kafka answers without an authorizer.
const ALL_TOPIC_OPERATIONS: i32 = 3576;

fn request(
    topics: &[&str],
    limit: i32,
    cursor: Option<(&str, i32)>,
) -> DescribeTopicPartitionsRequest {
    DescribeTopicPartitionsRequest::default()
        .with_topics(
            topics
                .iter()
                .map(|t| TopicRequest::default().with_name(name(t)))
                .collect(),
        )
        .with_response_partition_limit(limit)
        .with_cursor(cursor.map(|(t, p)| {
            Cursor::default()
                .with_topic_name(name(t))
                .with_partition_index(p)
        }))
}

fn describe(
    w: &mut World,
    conn: u64,
    req: &DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    w.send(conn, 0, req);
    match w.recv(conn) {
        Some((_, ResponseKind::DescribeTopicPartitions(r))) => r,
        other => panic!("expected a DescribeTopicPartitions answer, got {other:?}"),
    }
}

/// (topic, error, partition indexes) of each topic, and the next cursor.
type Page = (Vec<(String, i16, Vec<i32>)>, Option<(String, i32)>);

fn page(r: &DescribeTopicPartitionsResponse) -> Page {
    let topics = r
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                t.error_code,
                t.partitions.iter().map(|p| p.partition_index).collect(),
            )
        })
        .collect();
    let next = r
        .next_cursor
        .as_ref()
        .map(|c| (c.topic_name.0.to_string(), c.partition_index));
    (topics, next)
}

fn topics(list: &[(&str, i16, &[i32])]) -> Vec<(String, i16, Vec<i32>)> {
    list.iter()
        .map(|(t, e, p)| (t.to_string(), *e, p.to_vec()))
        .collect()
}

fn next(topic: &str, partition: i32) -> Option<(String, i32)> {
    Some((topic.to_string(), partition))
}

fn world_with_topics() -> World {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "a", 3);
    create_topic(&mut w, "b", 2);
    create_topic(&mut w, "c", 1);
    w
}

#[test]
fn served_at_v0_as_kafka() {
    let mut w = World::new(BrokerConfig::default());
    w.send(CONN, 3, &ApiVersionsRequest::default());
    let Some((_, ResponseKind::ApiVersions(r))) = w.recv(CONN) else {
        panic!("no ApiVersions answer")
    };
    let key = r
        .api_keys
        .iter()
        .find(|k| k.api_key == 75)
        .expect("DescribeTopicPartitions is listed");
    assert_eq!((key.min_version, key.max_version), (0, 0));
}

#[test]
fn describes_each_partition_as_the_only_replica() {
    let mut w = world_with_topics();
    let r = describe(&mut w, CONN, &request(&["b"], 2000, None));
    assert_eq!(r.next_cursor, None);
    let [t] = &r.topics[..] else {
        panic!("one topic: {r:?}")
    };
    assert_eq!(t.error_code, 0);
    assert!(!t.topic_id.is_nil());
    assert!(!t.is_internal);
    assert_eq!(t.topic_authorized_operations, ALL_TOPIC_OPERATIONS);
    assert_eq!(t.partitions.len(), 2);
    for (i, p) in t.partitions.iter().enumerate() {
        let node = BrokerId(1);
        assert_eq!(p.error_code, 0);
        assert_eq!(p.partition_index, i as i32);
        assert_eq!(p.leader_id, node);
        assert_eq!(p.leader_epoch, 0);
        assert_eq!(p.replica_nodes, vec![node]);
        assert_eq!(p.isr_nodes, vec![node]);
        // Empty, not null: kafka-topics prints "Elr: " as against Kafka
        // (null would read "N/A").
        assert_eq!(p.eligible_leader_replicas, Some(vec![]));
        assert_eq!(p.last_known_elr, Some(vec![]));
        assert!(p.offline_replicas.is_empty());
    }
    // The same id as Metadata's.
    let m = MetadataRequest::default().with_topics(None);
    w.send(CONN, 12, &m);
    let Some((_, ResponseKind::Metadata(m))) = w.recv(CONN) else {
        panic!("no Metadata answer")
    };
    let b = m
        .topics
        .iter()
        .find(|x| x.name.as_ref().is_some_and(|n| n.0.as_str() == "b"))
        .unwrap();
    assert_eq!(b.topic_id, t.topic_id);
}

#[test]
fn all_topics_in_name_order_when_none_is_named() {
    let mut w = world_with_topics();
    let r = describe(&mut w, CONN, &request(&[], 2000, None));
    assert_eq!(
        page(&r),
        (
            topics(&[("a", 0, &[0, 1, 2]), ("b", 0, &[0, 1]), ("c", 0, &[0])]),
            None
        )
    );
}

#[test]
fn pages_by_the_partition_limit_and_the_cursor() {
    let mut w = world_with_topics();
    // A topic cut short: the cursor names it and its first partition left out.
    let r = describe(&mut w, CONN, &request(&["c", "a", "b"], 2, None));
    assert_eq!(page(&r), (topics(&[("a", 0, &[0, 1])]), next("a", 2)));
    let r = describe(&mut w, CONN, &request(&["c", "a", "b"], 2, Some(("a", 2))));
    assert_eq!(
        page(&r),
        (topics(&[("a", 0, &[2]), ("b", 0, &[0])]), next("b", 1))
    );
    // The limit reached exactly at a topic's end: the next topic, at 0.
    let r = describe(&mut w, CONN, &request(&["c", "a", "b"], 1, Some(("b", 1))));
    assert_eq!(page(&r), (topics(&[("b", 0, &[1])]), next("c", 0)));
    let r = describe(&mut w, CONN, &request(&["c", "a", "b"], 2, Some(("b", 1))));
    assert_eq!(page(&r), (topics(&[("b", 0, &[1]), ("c", 0, &[0])]), None));
    let r = describe(&mut w, CONN, &request(&["c", "a", "b"], 2, Some(("c", 0))));
    assert_eq!(page(&r), (topics(&[("c", 0, &[0])]), None));
    // Every topic, in pages of one partition.
    let mut seen = Vec::new();
    let mut cursor: Option<(String, i32)> = None;
    for _ in 0..10 {
        let c = cursor.as_ref().map(|(t, p)| (t.as_str(), *p));
        let r = describe(&mut w, CONN, &request(&[], 1, c));
        let (listed, next) = page(&r);
        for (t, _, parts) in listed {
            seen.extend(parts.into_iter().map(|p| (t.clone(), p)));
        }
        cursor = next;
        if cursor.is_none() {
            break;
        }
    }
    let want: Vec<(String, i32)> = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("c", 0)]
        .iter()
        .map(|(t, p)| (t.to_string(), *p))
        .collect();
    assert_eq!(seen, want);
}

#[test]
fn the_limit_is_at_least_one_and_at_most_kafkas() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "big", 2100);
    create_topic(&mut w, "small", 1);
    let r = describe(&mut w, CONN, &request(&["small"], 0, None));
    assert_eq!(page(&r), (topics(&[("small", 0, &[0])]), None));
    let r = describe(&mut w, CONN, &request(&["small"], -5, None));
    assert_eq!(page(&r).0.len(), 1);
    let r = describe(&mut w, CONN, &request(&["big", "small"], i32::MAX, None));
    assert_eq!(r.topics[0].partitions.len(), 2000);
    assert_eq!(page(&r).1, next("big", 2000));
    let r = describe(
        &mut w,
        CONN,
        &request(&["big", "small"], i32::MAX, Some(("big", 2000))),
    );
    assert_eq!(r.topics[0].partitions.len(), 100);
    assert_eq!(r.topics[1].partitions.len(), 1);
    assert_eq!(r.next_cursor, None);
}

#[test]
fn unknown_and_illegal_topics_take_nothing_of_the_limit() {
    let mut w = world_with_topics();
    let r = describe(
        &mut w,
        CONN,
        &request(&["a", "nope", "b", "bad/name"], 4, None),
    );
    assert_eq!(
        page(&r),
        (
            topics(&[("a", 0, &[0, 1, 2]), ("b", 0, &[0]),]),
            next("b", 1)
        )
    );
    // Sorted, "bad/name" and "nope" come after "b"'s cut, so they are not
    // reached; on their own they are answered.
    let r = describe(&mut w, CONN, &request(&["nope", "bad/name"], 4, None));
    assert_eq!(
        page(&r),
        (
            topics(&[
                ("bad/name", INVALID_TOPIC_EXCEPTION, &[]),
                ("nope", UNKNOWN_TOPIC_OR_PARTITION, &[]),
            ]),
            None
        )
    );
    assert!(r.topics.iter().all(|t| t.topic_id.is_nil()));
    // A missing topic after the limit is used up exactly is the next cursor.
    let r = describe(&mut w, CONN, &request(&["c", "d"], 1, None));
    assert_eq!(page(&r), (topics(&[("c", 0, &[0])]), next("d", 0)));
}

#[test]
fn a_bad_cursor_is_an_invalid_request_for_every_topic() {
    let mut w = world_with_topics();
    // The cursor's topic must be among those named.
    let r = describe(&mut w, CONN, &request(&["a", "c"], 10, Some(("b", 0))));
    assert_eq!(
        page(&r),
        (
            topics(&[("a", INVALID_REQUEST, &[]), ("c", INVALID_REQUEST, &[])]),
            None
        )
    );
    let r = describe(&mut w, CONN, &request(&["a"], 10, Some(("a", -1))));
    assert_eq!(page(&r), (topics(&[("a", INVALID_REQUEST, &[])]), None));
    // With every topic asked, any cursor topic goes (those before it are
    // left out), but not a negative partition.
    let r = describe(&mut w, CONN, &request(&[], 10, Some(("bb", 0))));
    assert_eq!(page(&r), (topics(&[("c", 0, &[0])]), None));
    let r = describe(&mut w, CONN, &request(&[], 10, Some(("a", -1))));
    assert_eq!(page(&r), (vec![], None));
    // A cursor past the topic's partitions: the topic, with none.
    let r = describe(&mut w, CONN, &request(&["b"], 10, Some(("b", 7))));
    assert_eq!(page(&r), (topics(&[("b", 0, &[])]), None));
}

#[test]
fn describe_on_the_topic_is_needed() {
    const ADMIN: u64 = 1;
    const ALICE: u64 = 2;
    let mut w = World::new(BrokerConfig {
        authorizer: authorizer_on(),
        ..Default::default()
    });
    connect_as(&mut w, ADMIN, "User:admin");
    connect_as(&mut w, ALICE, "User:alice");
    // create_topic's connection.
    connect_as(&mut w, 99, "User:admin");
    create_topic(&mut w, "a", 1);
    create_topic(&mut w, "b", 1);
    let grant = |w: &mut World, name: &str, op: Op| {
        create_acl(
            w,
            ADMIN,
            Acl {
                principal: "User:alice",
                resource_type: resource::TOPIC,
                name,
                pattern_type: pattern::LITERAL,
                op,
                permission: permission::ALLOW,
            },
        )
    };
    // Refused: named, TOPIC_AUTHORIZATION_FAILED after the others, whether
    // the topic exists or not; left out of all topics.
    let r = describe(&mut w, ALICE, &request(&["a", "zz"], 10, None));
    assert_eq!(
        page(&r),
        (
            topics(&[
                ("a", TOPIC_AUTHORIZATION_FAILED, &[]),
                ("zz", TOPIC_AUTHORIZATION_FAILED, &[]),
            ]),
            None
        )
    );
    assert!(r.topics.iter().all(|t| t.topic_id.is_nil()));
    let r = describe(&mut w, ALICE, &request(&[], 10, None));
    assert_eq!(page(&r), (vec![], None));

    grant(&mut w, "b", Op::Read);
    let r = describe(&mut w, ALICE, &request(&["a", "b"], 10, None));
    assert_eq!(
        page(&r),
        (
            topics(&[("b", 0, &[0]), ("a", TOPIC_AUTHORIZATION_FAILED, &[])]),
            None
        )
    );
    // READ implies DESCRIBE: those two operations are hers.
    let bits = (1 << Op::Read.code()) | (1 << Op::Describe.code());
    assert_eq!(r.topics[0].topic_authorized_operations, bits);
    assert_eq!(r.topics[1].topic_authorized_operations, i32::MIN);
    let r = describe(&mut w, ALICE, &request(&[], 10, None));
    assert_eq!(page(&r), (topics(&[("b", 0, &[0])]), None));
    // The admin sees everything.
    let r = describe(&mut w, ADMIN, &request(&[], 10, None));
    assert_eq!(page(&r), (topics(&[("a", 0, &[0]), ("b", 0, &[0])]), None));
    assert_eq!(
        r.topics[0].topic_authorized_operations,
        ALL_TOPIC_OPERATIONS
    );
}
