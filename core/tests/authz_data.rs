//! The ACLs of the data and topic admin APIs, with the authorizer on and
//! no ACL meaning no access: User:alice (a TLS principal) is refused with
//! Kafka's error codes until User:admin (a super user) grants her the
//! operation by CreateAcls; nothing is written for a refused request.

mod support;

use doze_core::security::acl::{pattern, permission, resource, Op};
use doze_core::BrokerConfig;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use support::authz::*;
use support::requests::*;
use support::txn::{tid, txn_batch};
use support::*;
use uuid::Uuid;

/// Connections: User:admin (a super user) and User:alice.
const ADMIN: u64 = 1;
const ALICE: u64 = 2;

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
const UNKNOWN_TOPIC_ID: i16 = 100;

/// Config resource types.
const CONFIG_TOPIC: i8 = 2;
const CONFIG_BROKER: i8 = 4;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn world() -> World {
    let mut w = World::new(BrokerConfig {
        authorizer: authorizer_on(),
        ..Default::default()
    });
    connect_as(&mut w, ADMIN, "User:admin");
    connect_as(&mut w, ALICE, "User:alice");
    w
}

/// The admin adds one ACL for User:alice from any host.
fn acl(w: &mut World, pattern_type: i8, resource_type: i8, name: &str, op: Op, permission: i8) {
    let acl = Acl {
        principal: "User:alice",
        resource_type,
        name,
        pattern_type,
        op,
        permission,
    };
    create_acl(w, ADMIN, acl);
}

/// ALLOW `op` on the resource named exactly `name`.
fn allow(w: &mut World, resource_type: i8, name: &str, op: Op) {
    acl(
        w,
        pattern::LITERAL,
        resource_type,
        name,
        op,
        permission::ALLOW,
    );
}

/// The admin creates `topic` with one partition.
fn create(w: &mut World, topic: &str) {
    let (code, _) = create_as(w, ADMIN, topic);
    assert_eq!(code, 0, "the admin creates {topic}");
}

/// CreateTopics v7 of one topic from `conn`: the topic's result.
fn create_as(
    w: &mut World,
    conn: u64,
    topic: &str,
) -> (i16, create_topics_response::CreatableTopicResult) {
    let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(1)
        .with_replication_factor(1)]);
    w.send(conn, 7, &req);
    match w.recv(conn) {
        Some((_, ResponseKind::CreateTopics(r))) => (r.topics[0].error_code, r.topics[0].clone()),
        other => panic!("expected a CreateTopics answer, got {other:?}"),
    }
}

fn log_end(w: &World, topic: &str) -> i64 {
    w.broker.partition(topic, 0).unwrap().log_end_offset()
}

fn produce(w: &mut World, conn: u64, topic: &str) -> Option<(i16, i64)> {
    w.send(conn, 9, &produce_req(topic, 0, batch(&[b"v"], T0_MS), -1));
    produce_answer(w, conn)
}

fn metadata(
    w: &mut World,
    topics: Option<&[&str]>,
) -> Vec<metadata_response::MetadataResponseTopic> {
    let topics = topics.map(|names| {
        (names.iter())
            .map(|n| MetadataRequestTopic::default().with_name(Some(name(n))))
            .collect()
    });
    let req = MetadataRequest::default()
        .with_topics(topics)
        .with_allow_auto_topic_creation(true);
    w.send(ALICE, 12, &req);
    match w.recv(ALICE) {
        Some((_, ResponseKind::Metadata(r))) => r.topics,
        other => panic!("expected a Metadata answer, got {other:?}"),
    }
}

/// (name, error) of each topic of a Metadata answer.
fn named_errors(topics: &[metadata_response::MetadataResponseTopic]) -> Vec<(String, i16)> {
    topics
        .iter()
        .map(|t| (t.name.as_ref().unwrap().0.to_string(), t.error_code))
        .collect()
}

#[test]
fn produce_needs_write_on_the_topic() {
    let mut w = world();
    create(&mut w, "t");
    assert_eq!(
        produce(&mut w, ALICE, "t"),
        Some((TOPIC_AUTHORIZATION_FAILED, -1))
    );
    assert_eq!(log_end(&w, "t"), 0, "nothing appended");
    // An unknown topic is refused too: the ACLs come before existence.
    assert_eq!(
        produce(&mut w, ALICE, "nope"),
        Some((TOPIC_AUTHORIZATION_FAILED, -1))
    );

    allow(&mut w, resource::TOPIC, "t", Op::Write);
    assert_eq!(produce(&mut w, ALICE, "t"), Some((0, 0)));
    assert_eq!(log_end(&w, "t"), 1);
}

#[test]
fn a_refused_acks_0_produce_closes_the_connection() {
    let mut w = world();
    create(&mut w, "t");
    w.send(ALICE, 9, &produce_req("t", 0, batch(&[b"v"], T0_MS), 0));
    assert!(w.recv(ALICE).is_none(), "acks=0: no answer");
    assert!(w.closed.contains(&ALICE), "but the connection is closed");
    assert_eq!(log_end(&w, "t"), 0, "nothing appended");
}

#[test]
fn transactional_produce_needs_write_on_the_transactional_id() {
    let mut w = world();
    create(&mut w, "t");
    allow(&mut w, resource::TOPIC, "t", Op::Write);
    let send = |w: &mut World| {
        let req = produce_req("t", 0, txn_batch(&[b"v"], 7, 0, 0), -1)
            .with_transactional_id(Some(tid("tx")));
        w.send(ALICE, 9, &req);
        produce_answer(w, ALICE).unwrap()
    };
    assert_eq!(send(&mut w), (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1));
    assert_eq!(log_end(&w, "t"), 0, "nothing appended");
    // A transactional batch naming no transactional id is refused too.
    w.send(
        ALICE,
        9,
        &produce_req("t", 0, txn_batch(&[b"v"], 7, 0, 0), -1),
    );
    assert_eq!(
        produce_answer(&mut w, ALICE),
        Some((TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1))
    );

    // Allowed, the batch goes on to the transaction checks (no such
    // producer here).
    allow(&mut w, resource::TRANSACTIONAL_ID, "tx", Op::Write);
    assert_eq!(send(&mut w), (INVALID_PRODUCER_ID_MAPPING, -1));
}

#[test]
fn fetch_needs_read_and_a_refused_one_does_not_wait() {
    let mut w = world();
    create(&mut w, "t");
    assert_eq!(produce(&mut w, ADMIN, "t"), Some((0, 0)));

    // min_bytes would make an allowed fetch wait; a refused one is answered
    // at once.
    w.send(ALICE, 12, &fetch_req("t", 0, 0, 10_000, 1_000_000));
    let p = fetch_answer(&mut w, ALICE).expect("answered without waiting");
    assert_eq!(p.error_code, TOPIC_AUTHORIZATION_FAILED);
    assert_eq!(p.high_watermark, -1);
    assert!(p.records.is_none_or(|r| r.is_empty()), "no records");

    allow(&mut w, resource::TOPIC, "t", Op::Read);
    w.send(ALICE, 12, &fetch_req("t", 0, 0, 0, 1));
    let p = fetch_answer(&mut w, ALICE).unwrap();
    assert_eq!(p.error_code, 0);
    assert_eq!(p.high_watermark, 1);
    assert!(p.records.is_some_and(|r| !r.is_empty()));
}

#[test]
fn list_offsets_needs_describe() {
    let mut w = world();
    create(&mut w, "t");
    assert_eq!(produce(&mut w, ADMIN, "t"), Some((0, 0)));
    let latest = |w: &mut World| {
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name("t"))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-1)])]);
        w.send(ALICE, 7, &req);
        match w.recv(ALICE) {
            Some((_, ResponseKind::ListOffsets(r))) => {
                let p = &r.topics[0].partitions[0];
                (p.error_code, p.offset)
            }
            other => panic!("expected a ListOffsets answer, got {other:?}"),
        }
    };
    assert_eq!(latest(&mut w), (TOPIC_AUTHORIZATION_FAILED, -1));
    // READ implies DESCRIBE.
    allow(&mut w, resource::TOPIC, "t", Op::Read);
    assert_eq!(latest(&mut w), (0, 1));
}

#[test]
fn metadata_hides_or_refuses_what_may_not_be_described() {
    let mut w = world();
    create(&mut w, "seen");
    create(&mut w, "hidden");
    allow(&mut w, resource::TOPIC, "seen", Op::Describe);

    let all = metadata(&mut w, None);
    assert_eq!(named_errors(&all), vec![("seen".to_string(), 0)]);

    // Named, a topic refused answers the same whether it exists or not, and
    // tells nothing more.
    let named = metadata(&mut w, Some(&["hidden", "missing"]));
    assert_eq!(
        named_errors(&named),
        vec![
            ("hidden".to_string(), TOPIC_AUTHORIZATION_FAILED),
            ("missing".to_string(), TOPIC_AUTHORIZATION_FAILED),
        ]
    );
    for t in &named {
        assert!(t.partitions.is_empty());
        assert_eq!(t.topic_id, Uuid::nil());
    }
    assert!(w.broker.partition("missing", 0).is_none(), "not created");
}

#[test]
fn metadata_auto_creation_needs_create() {
    let mut w = world();
    allow(&mut w, resource::TOPIC, "auto", Op::Describe);
    let answer = metadata(&mut w, Some(&["auto"]));
    assert_eq!(
        named_errors(&answer),
        vec![("auto".to_string(), TOPIC_AUTHORIZATION_FAILED)]
    );
    assert!(w.broker.partition("auto", 0).is_none(), "not created");

    allow(&mut w, resource::TOPIC, "auto", Op::Create);
    let answer = metadata(&mut w, Some(&["auto"]));
    assert_eq!(named_errors(&answer), vec![("auto".to_string(), 0)]);
    assert!(w.broker.partition("auto", 0).is_some(), "created");

    // CREATE on the cluster covers any topic (DESCRIBE is still asked).
    allow(&mut w, resource::CLUSTER, "kafka-cluster", Op::Create);
    acl(
        &mut w,
        pattern::PREFIXED,
        resource::TOPIC,
        "more-",
        Op::Describe,
        permission::ALLOW,
    );
    let answer = metadata(&mut w, Some(&["more-1"]));
    assert_eq!(named_errors(&answer), vec![("more-1".to_string(), 0)]);
}

#[test]
fn create_topics_by_prefix_and_configs_need_describe_configs() {
    let mut w = world();
    acl(
        &mut w,
        pattern::PREFIXED,
        resource::TOPIC,
        "app-",
        Op::Create,
        permission::ALLOW,
    );

    let (code, result) = create_as(&mut w, ALICE, "other");
    assert_eq!(code, TOPIC_AUTHORIZATION_FAILED);
    assert_eq!(
        result.error_message.as_deref(),
        Some("Authorization failed.")
    );
    assert!(w.broker.partition("other", 0).is_none());

    // Created, but without DESCRIBE_CONFIGS its configs are not shown.
    let (code, result) = create_as(&mut w, ALICE, "app-1");
    assert_eq!(code, 0);
    assert!(w.broker.partition("app-1", 0).is_some());
    assert_eq!(result.topic_config_error_code, TOPIC_AUTHORIZATION_FAILED);
    assert_eq!(result.configs.as_deref().map(<[_]>::len), Some(0));
    assert_eq!(result.num_partitions, -1);
    assert_ne!(result.topic_id, Uuid::nil());

    allow(&mut w, resource::TOPIC, "app-2", Op::DescribeConfigs);
    let (code, result) = create_as(&mut w, ALICE, "app-2");
    assert_eq!(code, 0);
    assert_eq!(result.topic_config_error_code, 0);
    assert!(result.configs.is_some_and(|c| !c.is_empty()));
    assert_eq!(result.num_partitions, 1);
}

#[test]
fn a_deny_beats_an_allow() {
    let mut w = world();
    acl(
        &mut w,
        pattern::PREFIXED,
        resource::TOPIC,
        "app-",
        Op::Create,
        permission::ALLOW,
    );
    acl(
        &mut w,
        pattern::LITERAL,
        resource::TOPIC,
        "app-secret",
        Op::Create,
        permission::DENY,
    );
    assert_eq!(create_as(&mut w, ALICE, "app-open").0, 0);
    assert_eq!(
        create_as(&mut w, ALICE, "app-secret").0,
        TOPIC_AUTHORIZATION_FAILED
    );
}

/// DeleteTopics v6: (name, id, error) of each asked topic, in order.
fn delete_topics(w: &mut World, asked: &[DeleteTopicState]) -> Vec<(Option<String>, Uuid, i16)> {
    w.send(
        ALICE,
        6,
        &DeleteTopicsRequest::default()
            .with_topics(asked.to_vec())
            .with_timeout_ms(30_000),
    );
    match w.recv(ALICE) {
        Some((_, ResponseKind::DeleteTopics(r))) => r
            .responses
            .iter()
            .map(|t| {
                let name = t.name.as_ref().map(|n| n.0.to_string());
                (name, t.topic_id, t.error_code)
            })
            .collect(),
        other => panic!("expected a DeleteTopics answer, got {other:?}"),
    }
}

fn by_name(topic: &str) -> DeleteTopicState {
    DeleteTopicState::default().with_name(Some(name(topic)))
}

fn by_id(id: Uuid) -> DeleteTopicState {
    DeleteTopicState::default().with_topic_id(id)
}

/// The topic's id, as the admin's Metadata tells it.
fn topic_id(w: &mut World, topic: &str) -> Uuid {
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(name(topic)))
    ]));
    w.send(ADMIN, 12, &req);
    match w.recv(ADMIN) {
        Some((_, ResponseKind::Metadata(r))) => r.topics[0].topic_id,
        other => panic!("expected a Metadata answer, got {other:?}"),
    }
}

#[test]
fn delete_topics_needs_delete_and_hides_names_by_id() {
    let mut w = world();
    create(&mut w, "secret");
    create(&mut w, "known");
    let (secret, known) = (topic_id(&mut w, "secret"), topic_id(&mut w, "known"));
    allow(&mut w, resource::TOPIC, "known", Op::Describe);
    let unknown = Uuid::from_u128(42);
    let answers = delete_topics(
        &mut w,
        &[
            by_name("secret"),
            by_name("missing"),
            by_name("known"),
            by_id(secret),
            by_id(known),
            by_id(unknown),
        ],
    );
    let nil = Uuid::nil();
    let some = |n: &str| Some(n.to_string());
    assert_eq!(
        answers,
        vec![
            (some("secret"), nil, TOPIC_AUTHORIZATION_FAILED),
            (some("missing"), nil, TOPIC_AUTHORIZATION_FAILED),
            (some("known"), nil, TOPIC_AUTHORIZATION_FAILED),
            (None, secret, TOPIC_AUTHORIZATION_FAILED),
            (some("known"), known, TOPIC_AUTHORIZATION_FAILED),
            (None, unknown, UNKNOWN_TOPIC_ID),
        ]
    );
    assert!(w.broker.partition("secret", 0).is_some());

    // Described, a missing topic is unknown; DELETE deletes.
    allow(&mut w, resource::TOPIC, "missing", Op::Describe);
    allow(&mut w, resource::TOPIC, "known", Op::Delete);
    let answers = delete_topics(&mut w, &[by_name("missing"), by_id(known)]);
    assert_eq!(
        answers,
        vec![
            (some("missing"), nil, UNKNOWN_TOPIC_OR_PARTITION),
            (some("known"), known, 0),
        ]
    );
    assert!(w.broker.partition("known", 0).is_none(), "deleted");
}

#[test]
fn delete_records_needs_delete() {
    let mut w = world();
    create(&mut w, "t");
    assert_eq!(produce(&mut w, ADMIN, "t"), Some((0, 0)));
    let delete = |w: &mut World| {
        let req = DeleteRecordsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![DeleteRecordsTopic::default()
                .with_name(name("t"))
                .with_partitions(vec![DeleteRecordsPartition::default()
                    .with_partition_index(0)
                    .with_offset(1)])]);
        w.send(ALICE, 2, &req);
        match w.recv(ALICE) {
            Some((_, ResponseKind::DeleteRecords(r))) => {
                let p = &r.topics[0].partitions[0];
                (p.error_code, p.low_watermark)
            }
            other => panic!("expected a DeleteRecords answer, got {other:?}"),
        }
    };
    assert_eq!(delete(&mut w), (TOPIC_AUTHORIZATION_FAILED, -1));
    assert_eq!(w.broker.partition("t", 0).unwrap().log_start_offset(), 0);

    allow(&mut w, resource::TOPIC, "t", Op::Delete);
    assert_eq!(delete(&mut w), (0, 1));
}

#[test]
fn create_partitions_needs_alter() {
    let mut w = world();
    create(&mut w, "t");
    let grow = |w: &mut World| {
        let req = CreatePartitionsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(name("t"))
                .with_count(3)
                .with_assignments(None)]);
        w.send(ALICE, 3, &req);
        match w.recv(ALICE) {
            Some((_, ResponseKind::CreatePartitions(r))) => r.results[0].error_code,
            other => panic!("expected a CreatePartitions answer, got {other:?}"),
        }
    };
    assert_eq!(grow(&mut w), TOPIC_AUTHORIZATION_FAILED);
    assert!(w.broker.partition("t", 1).is_none());

    allow(&mut w, resource::TOPIC, "t", Op::Alter);
    assert_eq!(grow(&mut w), 0);
    assert!(w.broker.partition("t", 2).is_some());
}

/// DescribeConfigs v4 of one resource: (error, message, configs shown).
fn describe_configs(
    w: &mut World,
    resource_type: i8,
    name: &str,
) -> (i16, Option<String>, Vec<(String, String)>) {
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
            .with_configuration_keys(None)]);
    w.send(ALICE, 4, &req);
    match w.recv(ALICE) {
        Some((_, ResponseKind::DescribeConfigs(r))) => {
            let r = &r.results[0];
            let message = r.error_message.as_ref().map(|m| m.to_string());
            let configs = (r.configs.iter())
                .map(|c| (c.name.to_string(), c.value.as_deref().unwrap_or("").into()))
                .collect();
            (r.error_code, message, configs)
        }
        other => panic!("expected a DescribeConfigs answer, got {other:?}"),
    }
}

#[test]
fn describe_configs_needs_describe_configs() {
    let mut w = world();
    create(&mut w, "t");
    assert_eq!(
        describe_configs(&mut w, CONFIG_TOPIC, "t"),
        (
            TOPIC_AUTHORIZATION_FAILED,
            Some("Topic authorization failed.".into()),
            vec![]
        )
    );
    assert_eq!(
        describe_configs(&mut w, CONFIG_BROKER, "1"),
        (
            CLUSTER_AUTHORIZATION_FAILED,
            Some("Cluster authorization failed.".into()),
            vec![]
        )
    );

    // ALTER_CONFIGS implies DESCRIBE_CONFIGS.
    allow(&mut w, resource::TOPIC, "t", Op::AlterConfigs);
    allow(
        &mut w,
        resource::CLUSTER,
        "kafka-cluster",
        Op::DescribeConfigs,
    );
    let (code, _, shown) = describe_configs(&mut w, CONFIG_TOPIC, "t");
    assert_eq!(code, 0);
    assert!(!shown.is_empty());
    let (code, _, shown) = describe_configs(&mut w, CONFIG_BROKER, "1");
    assert_eq!(code, 0);
    assert!(!shown.is_empty());
}

/// IncrementalAlterConfigs v1 of one resource and one change: its error.
fn alter_config(w: &mut World, resource_type: i8, name: &str, op: i8, key: &str) -> i16 {
    let value = (op == 0).then(|| s("1000"));
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s(key))
                .with_config_operation(op)
                .with_value(value)]),
    ]);
    w.send(ALICE, 1, &req);
    match w.recv(ALICE) {
        Some((_, ResponseKind::IncrementalAlterConfigs(r))) => r.responses[0].error_code,
        other => panic!("expected an IncrementalAlterConfigs answer, got {other:?}"),
    }
}

const SET: i8 = 0;
const DELETE: i8 = 1;

#[test]
fn alter_configs_need_alter_configs() {
    let mut w = world();
    create(&mut w, "t");
    assert_eq!(
        alter_config(&mut w, CONFIG_TOPIC, "t", SET, "segment.ms"),
        TOPIC_AUTHORIZATION_FAILED
    );
    assert_eq!(
        alter_config(&mut w, CONFIG_BROKER, "1", DELETE, "log.retention.ms"),
        CLUSTER_AUTHORIZATION_FAILED
    );
    // The legacy AlterConfigs asks the same.
    let legacy = AlterConfigsRequest::default().with_resources(vec![
        alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(CONFIG_TOPIC)
            .with_resource_name(s("t"))
            .with_configs(vec![alter_configs_request::AlterableConfig::default()
                .with_name(s("segment.ms"))
                .with_value(Some(s("1000")))]),
    ]);
    w.send(ALICE, 2, &legacy);
    match w.recv(ALICE) {
        Some((_, ResponseKind::AlterConfigs(r))) => {
            assert_eq!(r.responses[0].error_code, TOPIC_AUTHORIZATION_FAILED)
        }
        other => panic!("expected an AlterConfigs answer, got {other:?}"),
    }

    allow(&mut w, resource::TOPIC, "t", Op::AlterConfigs);
    allow(&mut w, resource::CLUSTER, "kafka-cluster", Op::AlterConfigs);
    let segment_ms = ("segment.ms".to_string(), "1000".to_string());
    let (_, _, shown) = describe_configs(&mut w, CONFIG_TOPIC, "t");
    assert!(
        !shown.contains(&segment_ms),
        "the refused changes did nothing"
    );
    assert_eq!(
        alter_config(&mut w, CONFIG_TOPIC, "t", SET, "segment.ms"),
        0
    );
    assert_eq!(
        alter_config(&mut w, CONFIG_BROKER, "1", DELETE, "log.retention.ms"),
        0
    );
    let (_, _, shown) = describe_configs(&mut w, CONFIG_TOPIC, "t");
    assert!(shown.contains(&segment_ms), "the change is in force");
}

#[test]
fn describe_cluster_is_answered_without_acls_as_on_kafka_brokers() {
    let mut w = world();
    w.send(
        ALICE,
        1,
        &DescribeClusterRequest::default().with_endpoint_type(1),
    );
    match w.recv(ALICE) {
        Some((_, ResponseKind::DescribeCluster(r))) => {
            assert_eq!(r.error_code, 0);
            assert_eq!(r.brokers.len(), 1);
        }
        other => panic!("expected a DescribeCluster answer, got {other:?}"),
    }
}

/// The broker's own in-process connection (the console's client) with the
/// authorizer on and no ACL: it sees topics, reads them, describes their
/// configs and a group's offsets, and may change nothing.
#[test]
fn the_internal_connection_reads_everything_and_writes_nothing() {
    use doze_core::security::{Listener, SecurityProtocol};
    use doze_core::Input;
    const CONSOLE: u64 = 9;
    let mut w = world();
    w.input(Input::Connected {
        conn: CONSOLE,
        client_host: "/127.0.0.1".into(),
        listener: Listener {
            name: "doze-console".into(),
            protocol: SecurityProtocol::Plaintext,
            tls_principal: None,
            internal: true,
        },
    });
    create(&mut w, "t");
    assert_eq!(produce(&mut w, ADMIN, "t"), Some((0, 0)));

    // Metadata of all topics lists it.
    w.send(CONSOLE, 12, &MetadataRequest::default().with_topics(None));
    match w.recv(CONSOLE) {
        Some((_, ResponseKind::Metadata(r))) => {
            assert_eq!(named_errors(&r.topics), [("t".to_string(), 0)])
        }
        other => panic!("expected a Metadata answer, got {other:?}"),
    }
    // Fetch reads it.
    w.send(CONSOLE, 12, &fetch_req("t", 0, 0, 0, 1));
    let p = fetch_answer(&mut w, CONSOLE).unwrap();
    assert_eq!((p.error_code, p.high_watermark), (0, 1));
    // Its configs.
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(CONFIG_TOPIC)
            .with_resource_name(s("t"))
            .with_configuration_keys(None)]);
    w.send(CONSOLE, 4, &req);
    match w.recv(CONSOLE) {
        Some((_, ResponseKind::DescribeConfigs(r))) => assert_eq!(r.results[0].error_code, 0),
        other => panic!("expected a DescribeConfigs answer, got {other:?}"),
    }

    // Nothing that changes anything: a produce, a topic.
    assert_eq!(
        produce(&mut w, CONSOLE, "t"),
        Some((TOPIC_AUTHORIZATION_FAILED, -1))
    );
    assert_eq!(log_end(&w, "t"), 1);
    let (code, _) = create_as(&mut w, CONSOLE, "u");
    assert_eq!(code, TOPIC_AUTHORIZATION_FAILED);
    // Anyone else is still refused.
    w.send(ALICE, 12, &fetch_req("t", 0, 0, 0, 1));
    let p = fetch_answer(&mut w, ALICE).unwrap();
    assert_eq!(p.error_code, TOPIC_AUTHORIZATION_FAILED);
}
