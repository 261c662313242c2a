//! Topic configs that steer retention and compaction, and the APIs that
//! change them (IncrementalAlterConfigs, AlterConfigs): Kafka's answers,
//! durable before the answer, in force at once, kept across a restart, and
//! nothing changed when meta.db fails.

mod support;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use doze_core::topic_config::CleanupConfig;
use doze_core::BrokerConfig;
use support::requests::*;
use support::*;

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;
const TOPIC: i8 = 2;
const BROKER: i8 = 4;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

type Op<'a> = (&'a str, i8, Option<&'a str>);

fn inc_req(resources: &[(i8, &str, &[Op])], validate_only: bool) -> IncrementalAlterConfigsRequest {
    IncrementalAlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(
            resources
                .iter()
                .map(|(t, n, ops)| {
                    AlterConfigsResource::default()
                        .with_resource_type(*t)
                        .with_resource_name(s(n))
                        .with_configs(
                            ops.iter()
                                .map(|(k, op, v)| {
                                    AlterableConfig::default()
                                        .with_name(s(k))
                                        .with_config_operation(*op)
                                        .with_value(v.map(s))
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// (resource name, error code, message) of each resource.
type Answers = Vec<(String, i16, Option<String>)>;

fn inc_answer(w: &mut World, conn: u64) -> Option<Answers> {
    match w.recv(conn)? {
        (_, ResponseKind::IncrementalAlterConfigs(r)) => Some(
            r.responses
                .iter()
                .map(|a| {
                    (
                        a.resource_name.to_string(),
                        a.error_code,
                        a.error_message.as_ref().map(|m| m.to_string()),
                    )
                })
                .collect(),
        ),
        other => panic!("expected an IncrementalAlterConfigs answer, got {other:?}"),
    }
}

fn inc(w: &mut World, resources: &[(i8, &str, &[Op])]) -> Answers {
    w.send(5, 1, &inc_req(resources, false));
    inc_answer(w, 5).expect("answered")
}

fn alter(w: &mut World, topic: &str, configs: &[(&str, Option<&str>)]) -> (i16, Option<String>) {
    use kafka_protocol::messages::alter_configs_request as ac;
    let req =
        AlterConfigsRequest::default().with_resources(vec![ac::AlterConfigsResource::default()
            .with_resource_type(TOPIC)
            .with_resource_name(s(topic))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        ac::AlterableConfig::default()
                            .with_name(s(k))
                            .with_value(v.map(s))
                    })
                    .collect(),
            )]);
    w.send(6, 2, &req);
    match w.recv(6) {
        Some((_, ResponseKind::AlterConfigs(r))) => {
            let a = &r.responses[0];
            (
                a.error_code,
                a.error_message.as_ref().map(|m| m.to_string()),
            )
        }
        other => panic!("expected an AlterConfigs answer, got {other:?}"),
    }
}

/// The topic's configs as DescribeConfigs shows them: name -> (value, source).
fn describe(w: &mut World, topic: &str) -> std::collections::BTreeMap<String, (String, i8)> {
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(TOPIC)
            .with_resource_name(s(topic))
            .with_configuration_keys(None)]);
    w.send(7, 4, &req);
    let Some((_, ResponseKind::DescribeConfigs(r))) = w.recv(7) else {
        panic!("no DescribeConfigs answer")
    };
    assert_eq!(r.results[0].error_code, 0);
    r.results[0]
        .configs
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                (
                    c.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
                    c.config_source,
                ),
            )
        })
        .collect()
}

fn value(w: &mut World, topic: &str, key: &str) -> String {
    describe(w, topic)[key].0.clone()
}

fn ok(name: &str) -> (String, i16, Option<String>) {
    (name.to_string(), 0, None)
}

#[test]
fn compact_topics_are_created_and_described() {
    let mut w = World::new(BrokerConfig::default());
    assert_eq!(
        create_with(&mut w, "c", &[("cleanup.policy", "compact")]).0,
        0
    );
    assert_eq!(
        create_with(&mut w, "cd", &[("cleanup.policy", " delete , compact ")]).0,
        0
    );
    assert_eq!(create_with(&mut w, "none", &[("cleanup.policy", "")]).0, 0);
    let (code, message) = create_with(&mut w, "bad", &[("cleanup.policy", "none")]);
    assert_eq!(code, 40);
    assert_eq!(
        message.as_deref(),
        Some("Invalid value none for configuration cleanup.policy: String must be one of: compact, delete")
    );
    let d = describe(&mut w, "c");
    assert_eq!(d["cleanup.policy"], ("compact".to_string(), 1));
    assert_eq!(d["min.cleanable.dirty.ratio"], ("0.5".to_string(), 5));
    assert_eq!(d["min.compaction.lag.ms"], ("0".to_string(), 5));
    assert_eq!(
        d["max.compaction.lag.ms"],
        ("9223372036854775807".to_string(), 5)
    );
    assert_eq!(d["delete.retention.ms"], ("86400000".to_string(), 5));
    assert_eq!(d["segment.ms"], ("604800000".to_string(), 5));
    assert_eq!(value(&mut w, "cd", "cleanup.policy"), "delete,compact");
    assert_eq!(value(&mut w, "none", "cleanup.policy"), "");

    let c = w.broker.cleanup_config("c").unwrap();
    assert!(c.compact && !c.delete);
    let cd = w.broker.cleanup_config("cd").unwrap();
    assert!(cd.compact && cd.delete);
    let none = w.broker.cleanup_config("none").unwrap();
    assert!(!none.compact && !none.delete);
    assert!(w.broker.cleanup_config("missing").is_none());
}

#[test]
fn broker_defaults_feed_the_cleanup_config() {
    let mut config = BrokerConfig::default();
    config.set("log.cleanup.policy", "compact").unwrap();
    config
        .set("log.cleaner.min.cleanable.ratio", "0.25")
        .unwrap();
    config
        .set("log.cleaner.min.compaction.lag.ms", "10")
        .unwrap();
    config
        .set("log.cleaner.max.compaction.lag.ms", "20")
        .unwrap();
    config.set("log.cleaner.delete.retention.ms", "30").unwrap();
    config.set("log.roll.hours", "2").unwrap();
    assert!(config.set("log.cleaner.min.cleanable.ratio", "2").is_err());
    assert!(config.set("log.cleanup.policy", "none").is_err());
    assert!(config.set("log.roll.ms", "0").is_err());
    let mut w = World::new(config);
    create_topic(&mut w, "t", 1);
    assert_eq!(
        w.broker.cleanup_config("t").unwrap(),
        CleanupConfig {
            compact: true,
            delete: false,
            min_cleanable_dirty_ratio: 0.25,
            min_compaction_lag_ms: 10,
            max_compaction_lag_ms: 20,
            delete_retention_ms: 30,
        }
    );
    assert_eq!(value(&mut w, "t", "segment.ms"), "7200000");
    assert_eq!(value(&mut w, "t", "cleanup.policy"), "compact");
}

/// log.message.timestamp.type and .before/.after.max.ms are the broker
/// defaults of the topic configs without `log.`, as in Kafka: a topic that
/// overrides nothing stamps its batches with the broker's clock, and
/// refuses a record too far ahead.
#[test]
fn broker_defaults_feed_the_timestamp_configs() {
    let mut config = BrokerConfig::default();
    config
        .set("log.message.timestamp.type", "LogAppendTime")
        .unwrap();
    config
        .set("log.message.timestamp.after.max.ms", "1000")
        .unwrap();
    config
        .set("log.message.timestamp.before.max.ms", "2000")
        .unwrap();
    config.set("log.retention.minutes", "90").unwrap();
    assert!(config.set("log.message.timestamp.type", "Later").is_err());
    assert!(config
        .set("log.message.timestamp.after.max.ms", "-1")
        .is_err());
    // A topic config's name is not a broker property: refused, with the
    // broker default the user most likely meant.
    let err = config
        .set("message.timestamp.type", "CreateTime")
        .unwrap_err();
    assert!(
        err.ends_with("its broker default is log.message.timestamp.type"),
        "{err}"
    );
    let err = config.set("retention.ms", "1000").unwrap_err();
    assert!(
        err.ends_with("its broker default is log.retention.ms"),
        "{err}"
    );
    let err = config.set("retention.msec", "1000").unwrap_err();
    assert_eq!(err, r#"unknown broker property "retention.msec""#);
    let mut w = World::new(config);
    create_topic(&mut w, "t", 1);
    create_with(&mut w, "own", &[("message.timestamp.type", "CreateTime")]);
    assert_eq!(
        value(&mut w, "t", "message.timestamp.type"),
        "LogAppendTime"
    );
    assert_eq!(value(&mut w, "t", "message.timestamp.after.max.ms"), "1000");
    assert_eq!(
        value(&mut w, "t", "message.timestamp.before.max.ms"),
        "2000"
    );
    assert_eq!(value(&mut w, "t", "retention.ms"), "5400000");
    let sent_ms = T0_MS - 60_000;
    for (topic, stamped) in [("t", true), ("own", false)] {
        w.send(1, 9, &produce_req(topic, 0, batch(&[b"a"], sent_ms), -1));
        let (code, _) = produce_answer(&mut w, 1).unwrap();
        // "own" is CreateTime with the broker's 2 s before.max.ms: a record
        // a minute old is refused; "t" stamps it instead.
        let want = if stamped {
            0
        } else {
            ResponseError::InvalidTimestamp.code()
        };
        assert_eq!(code, want, "{topic}");
    }
    w.send(1, 12, &fetch_req("t", 0, 0, 0, 1));
    let records = fetch_answer(&mut w, 1).unwrap().records.unwrap();
    let h = doze_core::batch::parse_header(&records).unwrap();
    assert_eq!((h.max_timestamp, h.has_log_append_time()), (w.now_ms, true));
}

#[test]
fn incremental_alter_is_durable_before_its_answer() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    w.auto_io = false;
    w.send(
        5,
        1,
        &inc_req(
            &[(
                TOPIC,
                "t",
                &[
                    ("cleanup.policy", SET, Some("compact")),
                    ("min.cleanable.dirty.ratio", SET, Some("1e-1")),
                ],
            )],
            false,
        ),
    );
    assert!(
        inc_answer(&mut w, 5).is_none(),
        "no answer before meta.db has it"
    );
    assert!(
        !w.broker.cleanup_config("t").unwrap().compact,
        "nothing changes before meta.db has it"
    );
    assert_eq!(w.pending_meta.len(), 1);
    w.complete_io();
    assert_eq!(inc_answer(&mut w, 5), Some(vec![ok("t")]));
    let c = w.broker.cleanup_config("t").unwrap();
    assert!(c.compact && !c.delete);
    assert_eq!(c.min_cleanable_dirty_ratio, 0.1);
    let stored = String::from_utf8(w.meta[&b"topic/t".to_vec()].clone()).unwrap();
    assert!(
        stored.contains("\"cleanup.policy\":\"compact\""),
        "{stored}"
    );
    w.auto_io = true;
    let d = describe(&mut w, "t");
    assert_eq!(d["min.cleanable.dirty.ratio"], ("0.1".to_string(), 1));

    // Kept across a clean restart and a power cut (meta.db had it).
    w.stop_and_restart();
    assert!(w.broker.cleanup_config("t").unwrap().compact);
    w.restart(true);
    let c = w.broker.cleanup_config("t").unwrap();
    assert!(c.compact && !c.delete);
    assert_eq!(value(&mut w, "t", "min.cleanable.dirty.ratio"), "0.1");
}

#[test]
fn a_failed_meta_write_answers_an_error_and_changes_nothing() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let before = w.meta.clone();
    w.fail_next_meta = true;
    let answers = inc(
        &mut w,
        &[(TOPIC, "t", &[("cleanup.policy", SET, Some("compact"))])],
    );
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].1, -1, "UNKNOWN_SERVER_ERROR: {answers:?}");
    assert!(!w.broker.cleanup_config("t").unwrap().compact);
    assert_eq!(w.meta, before);
    assert_eq!(value(&mut w, "t", "cleanup.policy"), "delete");
    w.restart(true);
    assert!(!w.broker.cleanup_config("t").unwrap().compact);
    // The topic is not left busy: the next change goes through.
    assert_eq!(
        inc(
            &mut w,
            &[(TOPIC, "t", &[("cleanup.policy", SET, Some("compact"))])]
        ),
        vec![ok("t")]
    );
    assert!(w.broker.cleanup_config("t").unwrap().compact);
}

#[test]
fn validate_only_stores_nothing() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let before = w.meta.clone();
    w.send(
        5,
        1,
        &inc_req(
            &[(TOPIC, "t", &[("retention.ms", SET, Some("1000"))])],
            true,
        ),
    );
    assert_eq!(inc_answer(&mut w, 5), Some(vec![ok("t")]));
    w.send(
        5,
        1,
        &inc_req(&[(TOPIC, "t", &[("retention.ms", SET, Some("x"))])], true),
    );
    assert_eq!(inc_answer(&mut w, 5).unwrap()[0].1, 40);
    assert_eq!(w.meta, before);
    assert_eq!(
        describe(&mut w, "t")["retention.ms"].1,
        5,
        "still the default"
    );
}

#[test]
fn operations_and_errors_are_kafkas() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let one = |w: &mut World, ops: &[Op]| inc(w, &[(TOPIC, "t", ops)]).remove(0);
    let policy = |w: &mut World| value(w, "t", "cleanup.policy");

    assert_eq!(
        one(&mut w, &[("cleanup.policy", APPEND, Some("compact"))]),
        ok("t")
    );
    assert_eq!(policy(&mut w), "delete,compact");
    assert_eq!(
        one(&mut w, &[("cleanup.policy", SUBTRACT, Some("delete"))]),
        ok("t")
    );
    assert_eq!(policy(&mut w), "compact");
    assert_eq!(
        one(&mut w, &[("cleanup.policy", SUBTRACT, Some("compact"))]),
        ok("t")
    );
    assert_eq!(policy(&mut w), "");
    assert_eq!(one(&mut w, &[("cleanup.policy", DELETE, None)]), ok("t"));
    assert_eq!(
        describe(&mut w, "t")["cleanup.policy"],
        ("delete".to_string(), 5)
    );

    let refused = |code: i16, message: &str| ("t".to_string(), code, Some(message.to_string()));
    assert_eq!(
        one(&mut w, &[("segment.ms", SET, Some("0"))]),
        refused(
            40,
            "Invalid value 0 for configuration segment.ms: Value must be at least 1"
        )
    );
    assert_eq!(
        one(&mut w, &[("no.such.config", SET, Some("1"))]),
        refused(40, "Unknown topic config name: no.such.config")
    );
    assert_eq!(one(&mut w, &[("no.such.config", DELETE, None)]), ok("t"));
    assert_eq!(
        one(&mut w, &[("retention.ms", APPEND, Some("5"))]),
        refused(
            40,
            "Can't APPEND to key retention.ms because its type is not LIST."
        )
    );
    assert_eq!(
        one(&mut w, &[("retention.ms", SET, None)]),
        refused(42, "Null value not supported for : retention.ms")
    );
    assert_eq!(
        one(
            &mut w,
            &[
                ("retention.ms", SET, Some("5")),
                ("retention.ms", DELETE, None)
            ]
        ),
        refused(42, "Error due to duplicate config keys")
    );
    assert_eq!(one(&mut w, &[("retention.ms", 9, Some("5"))]).1, -1);

    // Configs are checked before the topic is looked for, as Kafka does.
    assert_eq!(
        inc(
            &mut w,
            &[(TOPIC, "nope", &[("retention.ms", SET, Some("x"))])]
        )[0]
        .1,
        40
    );
    assert_eq!(
        inc(
            &mut w,
            &[(TOPIC, "nope", &[("retention.ms", SET, Some("5"))])]
        ),
        vec![(
            "nope".to_string(),
            3,
            Some("The topic 'nope' does not exist.".to_string())
        )]
    );
    assert_eq!(
        inc(&mut w, &[(TOPIC, "", &[("retention.ms", SET, Some("5"))])])[0].1,
        42
    );
    assert_eq!(
        inc(
            &mut w,
            &[(TOPIC, "bad name!", &[("retention.ms", SET, Some("5"))])]
        )[0]
        .1,
        17
    );
    let twice = inc(
        &mut w,
        &[
            (TOPIC, "t", &[("retention.ms", SET, Some("5"))]),
            (TOPIC, "t", &[("retention.ms", SET, Some("6"))]),
        ],
    );
    assert_eq!(twice.len(), 2);
    assert!(twice.iter().all(|a| a.1 == 42), "{twice:?}");
    assert_eq!(
        describe(&mut w, "t")["retention.ms"].1,
        5,
        "nothing was set"
    );

    // Broker properties are static here.
    assert_eq!(
        inc(
            &mut w,
            &[(BROKER, "1", &[("log.retention.ms", SET, Some("5"))])]
        ),
        vec![(
            "1".to_string(),
            42,
            Some("Cannot update these configs dynamically: [log.retention.ms]".to_string())
        )]
    );
    assert_eq!(
        inc(
            &mut w,
            &[(BROKER, "", &[("log.retention.ms", DELETE, None)])]
        ),
        vec![ok("")]
    );
    assert_eq!(
        inc(
            &mut w,
            &[(BROKER, "7", &[("log.retention.ms", SET, Some("5"))])]
        )[0]
        .2,
        Some("Unexpected broker id, expected 1, but received 7".to_string())
    );
    assert_eq!(
        inc(&mut w, &[(99, "x", &[("a", SET, Some("1"))])])[0],
        (
            "x".to_string(),
            42,
            Some("Unknown resource type 99".to_string())
        )
    );

    // One good and one bad resource: the good one is stored.
    create_topic(&mut w, "u", 1);
    let mixed = inc(
        &mut w,
        &[
            (TOPIC, "t", &[("segment.ms", SET, Some("100"))]),
            (TOPIC, "u", &[("segment.ms", SET, Some("0"))]),
        ],
    );
    assert_eq!(mixed[0], ok("t"));
    assert_eq!(mixed[1].1, 40);
    assert_eq!(value(&mut w, "t", "segment.ms"), "100");
    assert_eq!(describe(&mut w, "u")["segment.ms"].1, 5);
}

#[test]
fn alter_configs_replaces_the_whole_set() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    assert_eq!(
        alter(
            &mut w,
            "t",
            &[
                ("cleanup.policy", Some("compact,delete")),
                ("segment.ms", Some("100000"))
            ]
        ),
        (0, None)
    );
    let c = w.broker.cleanup_config("t").unwrap();
    assert!(c.compact && c.delete);
    assert_eq!(
        alter(&mut w, "t", &[("retention.ms", Some("1000"))]),
        (0, None)
    );
    let d = describe(&mut w, "t");
    let overrides: Vec<&String> = d.iter().filter(|(_, v)| v.1 == 1).map(|(k, _)| k).collect();
    assert_eq!(
        overrides,
        vec!["retention.ms"],
        "the others went back to default"
    );
    assert!(!w.broker.cleanup_config("t").unwrap().compact);
    assert_eq!(
        alter(&mut w, "t", &[("retention.ms", Some("x"))]),
        (
            40,
            Some(
                "Invalid value x for configuration retention.ms: Not a number of type LONG".into()
            )
        )
    );
    assert_eq!(alter(&mut w, "t", &[("retention.ms", None)]).0, 42);
    assert_eq!(alter(&mut w, "nope", &[("retention.ms", Some("1"))]).0, 3);
    assert_eq!(alter(&mut w, "t", &[]), (0, None));
    assert!(describe(&mut w, "t").values().all(|v| v.1 == 5));
}

#[test]
fn retention_applies_only_with_the_delete_policy() {
    let config = BrokerConfig {
        segment_bytes: 1024,
        retention_check_interval_ms: 1_000,
        ..Default::default()
    };
    let mut w = World::new(config);
    assert_eq!(
        create_with(
            &mut w,
            "c",
            &[("cleanup.policy", "compact"), ("retention.bytes", "1024")]
        )
        .0,
        0
    );
    // Keyed: a compacted topic refuses records without a key.
    let plain = Producer {
        id: -1,
        epoch: -1,
        sequence: -1,
        transactional: false,
    };
    for i in 0..10u8 {
        let key = [b'k', i];
        let b = keyed_batch(
            &[(key.as_slice(), Some([7u8; 400].as_slice()))],
            w.now_ms,
            kafka_protocol::records::Compression::None,
            plain,
        );
        w.send(1, 9, &produce_req("c", 0, b, -1));
        assert_eq!(produce_answer(&mut w, 1).unwrap().0, 0);
    }
    w.advance(1_000);
    let log = w.broker.partition("c", 0).unwrap();
    assert!(log.segments().count() > 2);
    assert_eq!(
        log.log_start_offset(),
        0,
        "compact alone keeps every segment"
    );

    assert_eq!(
        inc(
            &mut w,
            &[(TOPIC, "c", &[("cleanup.policy", APPEND, Some("delete"))])]
        ),
        vec![ok("c")]
    );
    w.advance(1_000);
    let log = w.broker.partition("c", 0).unwrap();
    assert!(log.log_start_offset() > 0, "compact,delete deletes by size");
}

#[test]
fn segment_ms_rolls_the_active_segment_at_append() {
    let mut w = World::new(BrokerConfig::default());
    assert_eq!(create_with(&mut w, "t", &[("segment.ms", "1000")]).0, 0);
    let t0 = w.now_ms;
    let produce = |w: &mut World, ts: i64| {
        w.send(1, 9, &produce_req("t", 0, batch(&[b"v"], ts), -1));
        produce_answer(w, 1).unwrap();
    };
    let segments = |w: &World| w.broker.partition("t", 0).unwrap().segments().count();
    produce(&mut w, t0);
    produce(&mut w, t0 + 1000);
    assert_eq!(segments(&w), 1, "1000 ms is not more than segment.ms");
    produce(&mut w, t0 + 1001);
    assert_eq!(
        segments(&w),
        2,
        "rolled: measured from the first batch's timestamp"
    );
    // Once the first batch has a timestamp, a batch without one does not
    // age the segment (Kafka measures from timestamp to timestamp).
    produce(&mut w, -1);
    assert_eq!(segments(&w), 2);

    // A live change: segment.ms 1 day; the next batch stays in the segment.
    assert_eq!(
        inc(
            &mut w,
            &[(TOPIC, "t", &[("segment.ms", SET, Some("86400000"))])]
        ),
        vec![ok("t")]
    );
    produce(&mut w, t0 + 5000);
    assert_eq!(segments(&w), 2);
    // And back to 1 s: 2001 ms after the segment's first batch, it rolls.
    assert_eq!(
        inc(
            &mut w,
            &[(TOPIC, "t", &[("segment.ms", SET, Some("1000"))])]
        ),
        vec![ok("t")]
    );
    produce(&mut w, t0 + 3002);
    assert_eq!(segments(&w), 3);
}

#[test]
fn segment_ms_after_a_restart_counts_from_the_first_append() {
    let mut w = World::new(BrokerConfig::default());
    assert_eq!(create_with(&mut w, "t", &[("segment.ms", "1000")]).0, 0);
    let t0 = w.now_ms;
    w.send(1, 9, &produce_req("t", 0, batch(&[b"v"], -1), -1));
    produce_answer(&mut w, 1).unwrap();
    w.stop_and_restart();
    let segments = |w: &World| w.broker.partition("t", 0).unwrap().segments().count();
    assert_eq!(segments(&w), 1);
    w.now_ms = t0 + 5_000;
    w.send(1, 9, &produce_req("t", 0, batch(&[b"v"], -1), -1));
    produce_answer(&mut w, 1).unwrap();
    assert_eq!(
        segments(&w),
        1,
        "the clock starts at the first append after the start"
    );
    w.now_ms = t0 + 6_001;
    w.send(1, 9, &produce_req("t", 0, batch(&[b"v"], -1), -1));
    produce_answer(&mut w, 1).unwrap();
    assert_eq!(segments(&w), 2);
}

/// One keyless 600-byte record to partition 0 of `topic`, stamped now: its
/// partition's answer.
fn produce_600_bytes(w: &mut World, topic: &str) -> produce_response::PartitionProduceResponse {
    let ts = w.now_ms;
    w.send(1, 9, &produce_req(topic, 0, batch(&[&[1u8; 600]], ts), -1));
    match w.recv(1) {
        Some((_, ResponseKind::Produce(mut r))) => {
            r.responses.remove(0).partition_responses.remove(0)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn segment_bytes_and_timestamp_type_change_live() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let produce = |w: &mut World| {
        let p = produce_600_bytes(w, "t");
        assert_eq!(p.error_code, 0);
        p.log_append_time_ms
    };
    assert_eq!(produce(&mut w), -1);
    assert_eq!(
        inc(
            &mut w,
            &[(
                TOPIC,
                "t",
                &[
                    ("segment.bytes", SET, Some("1024")),
                    ("message.timestamp.type", SET, Some("LogAppendTime")),
                ]
            )]
        ),
        vec![ok("t")]
    );
    assert_eq!(produce(&mut w), w.now_ms, "LogAppendTime at once");
    assert_eq!(
        w.broker.partition("t", 0).unwrap().segments().count(),
        2,
        "the second batch did not fit 1024 bytes"
    );
    w.restart(true);
    assert_eq!(
        produce(&mut w),
        w.now_ms,
        "still LogAppendTime after a restart"
    );
    assert_eq!(w.broker.partition("t", 0).unwrap().segments().count(), 3);
}

/// A produce checks the topic's configs as they are now: the broker keeps
/// them typed (`AppendConfig`) and reads them again at every change, so a
/// change must reach the next append, and a deleted override must give the
/// default back.
#[test]
fn append_checks_follow_config_changes() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let produce = |w: &mut World| produce_600_bytes(w, "t").error_code;
    assert_eq!(produce(&mut w), 0);
    let set = |w: &mut World, key: &str, op: i8, value: Option<&str>| {
        assert_eq!(inc(w, &[(TOPIC, "t", &[(key, op, value)])]), vec![ok("t")]);
    };
    set(&mut w, "max.message.bytes", SET, Some("500"));
    assert_eq!(produce(&mut w), ResponseError::MessageTooLarge.code());
    set(&mut w, "max.message.bytes", DELETE, None);
    assert_eq!(produce(&mut w), 0, "the default is back");
    set(&mut w, "cleanup.policy", SET, Some("compact"));
    assert_eq!(
        produce(&mut w),
        ResponseError::InvalidRecord.code(),
        "a keyless record on a compacted topic"
    );
    w.restart(true);
    assert_eq!(
        produce(&mut w),
        ResponseError::InvalidRecord.code(),
        "after a restart"
    );
    set(&mut w, "cleanup.policy", SET, Some("delete"));
    assert_eq!(produce(&mut w), 0);
}

/// DescribeConfigs of a topic, with what it asks besides the values.
fn describe_with(
    w: &mut World,
    version: i16,
    resource_type: i8,
    name: &str,
    keys: &[&str],
    synonyms: bool,
    documentation: bool,
) -> Vec<describe_configs_response::DescribeConfigsResourceResult> {
    let req = DescribeConfigsRequest::default()
        .with_include_synonyms(synonyms)
        .with_include_documentation(documentation)
        .with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
            .with_configuration_keys(Some(keys.iter().map(|k| s(k)).collect()))]);
    w.send(7, version, &req);
    let Some((_, ResponseKind::DescribeConfigs(r))) = w.recv(7) else {
        panic!("no DescribeConfigs answer")
    };
    assert_eq!(r.results[0].error_code, 0);
    r.results[0].configs.clone()
}

/// (name, value, source) of each synonym.
fn synonyms_of(
    c: &describe_configs_response::DescribeConfigsResourceResult,
) -> Vec<(String, String, i8)> {
    c.synonyms
        .iter()
        .map(|s| {
            (
                s.name.to_string(),
                s.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
                s.source,
            )
        })
        .collect()
}

fn syn(name: &str, value: &str, source: i8) -> (String, String, i8) {
    (name.to_string(), value.to_string(), source)
}

#[test]
fn describe_configs_lists_synonyms_and_documentation_when_asked() {
    let mut config = BrokerConfig::default();
    config.set("log.retention.ms", "5000").unwrap();
    let mut w = World::new(config);
    assert_eq!(
        create_with(&mut w, "t", &[("max.message.bytes", "2000000")]).0,
        0
    );
    let keys = [
        "max.message.bytes",
        "retention.ms",
        "min.insync.replicas",
        "preallocate",
    ];
    let configs = describe_with(&mut w, 4, TOPIC, "t", &keys, true, true);
    let by_name = |n: &str| configs.iter().find(|c| c.name.as_str() == n).unwrap();
    let max = by_name("max.message.bytes");
    assert_eq!(
        (max.config_source, max.config_type, max.read_only),
        (1, 3, false)
    );
    assert_eq!(
        synonyms_of(max),
        vec![
            syn("max.message.bytes", "2000000", 1),
            syn("message.max.bytes", "1048588", 5)
        ]
    );
    let retention = by_name("retention.ms");
    assert_eq!(retention.value.as_deref(), Some("5000"));
    assert_eq!((retention.config_source, retention.config_type), (4, 5));
    assert_eq!(
        synonyms_of(retention),
        vec![
            syn("log.retention.ms", "5000", 4),
            syn("log.retention.hours", "168", 5)
        ]
    );
    let min_isr = by_name("min.insync.replicas");
    assert!(
        min_isr
            .documentation
            .as_deref()
            .unwrap()
            .contains("No effect"),
        "{:?}",
        min_isr.documentation
    );
    assert_eq!(by_name("preallocate").config_type, 1, "BOOLEAN");
    assert!(configs.iter().all(|c| c.documentation.is_some()));

    // Not asked: no synonyms, no documentation (null, as Kafka).
    let plain = describe_with(&mut w, 4, TOPIC, "t", &keys, false, false);
    assert!(plain
        .iter()
        .all(|c| c.synonyms.is_empty() && c.documentation.is_none()));
    // v1 has synonyms but no room for documentation.
    let v1 = describe_with(&mut w, 1, TOPIC, "t", &["max.message.bytes"], true, false);
    assert_eq!(synonyms_of(&v1[0]).len(), 2);

    // The broker: a property given is STATIC_BROKER_CONFIG, before doze's
    // default; one not given is the default.
    let broker = describe_with(
        &mut w,
        4,
        BROKER,
        "1",
        &["log.retention.ms", "log.segment.bytes"],
        true,
        false,
    );
    let retention = broker
        .iter()
        .find(|c| c.name.as_str() == "log.retention.ms")
        .unwrap();
    assert_eq!((retention.config_source, retention.read_only), (4, true));
    assert_eq!(
        synonyms_of(retention),
        vec![
            syn("log.retention.ms", "5000", 4),
            syn("log.retention.ms", "604800000", 5)
        ]
    );
    let segment = broker
        .iter()
        .find(|c| c.name.as_str() == "log.segment.bytes")
        .unwrap();
    assert_eq!(segment.config_source, 5);
    assert_eq!(
        synonyms_of(segment),
        vec![syn("log.segment.bytes", "1073741824", 5)]
    );
}

#[test]
fn every_kafka_topic_config_is_taken_or_refused_with_a_message() {
    let mut w = World::new(BrokerConfig::default());
    // No effect on one node: taken, stored, described, as Kafka does.
    let taken = [
        ("min.insync.replicas", "2"),
        ("unclean.leader.election.enable", "TRUE"),
        ("leader.replication.throttled.replicas", "0:1, 1:1"),
        ("follower.replication.throttled.replicas", "*"),
        ("flush.ms", "10"),
        ("index.interval.bytes", "100"),
        ("segment.index.bytes", "4096"),
        ("local.retention.bytes", "10"),
        ("remote.log.delete.on.disable", "true"),
    ];
    assert_eq!(create_with(&mut w, "t", &taken).0, 0);
    let configs = describe(&mut w, "t");
    assert_eq!(configs.len(), 33, "every topic config Kafka 4.3.1 has");
    assert_eq!(
        configs["unclean.leader.election.enable"],
        ("true".into(), 1)
    );
    assert_eq!(
        configs["leader.replication.throttled.replicas"],
        ("0:1,1:1".into(), 1)
    );
    assert_eq!(configs["compression.type"], ("producer".into(), 5));
    // compression.type is served with every value Kafka takes (produce_fetch.rs
    // shows batches stored with it).
    let (code, _) = create_with(&mut w, "u", &[("compression.type", "snappy")]);
    assert_eq!(code, 0);
    assert_eq!(value(&mut w, "u", "compression.type"), "snappy");
    // Kafka takes this; doze does not do what it asks, so refuses it.
    let (code, message) = create_with(&mut w, "v", &[("remote.storage.enable", "true")]);
    assert_eq!(code, 40);
    assert_eq!(
        message.as_deref(),
        Some("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.")
    );
    assert_eq!(
        inc(
            &mut w,
            &[(TOPIC, "t", &[("compression.type", SET, Some("zstd"))])]
        )[0]
        .1,
        0
    );
    assert_eq!(value(&mut w, "t", "compression.type"), "zstd");
    assert_eq!(
        alter(&mut w, "t", &[("compression.type", Some("gzip"))]).0,
        0
    );
    assert_eq!(value(&mut w, "t", "compression.type"), "gzip");
    // Kafka's words only, as its ValidString takes them.
    assert_eq!(
        alter(&mut w, "t", &[("compression.type", Some("GZIP"))]).0,
        40
    );
}

const INVALID_TIMESTAMP: i16 = 32;

/// A v9 (or `version`) produce of `records` to partition 0 of `topic`:
/// (error, message, record errors, log start offset).
fn produce_full(
    w: &mut World,
    version: i16,
    topic: &str,
    records: bytes::Bytes,
) -> (i16, Option<String>, Vec<(i32, String)>, i64) {
    w.send(1, version, &produce_req(topic, 0, records, -1));
    match w.recv(1) {
        Some((_, ResponseKind::Produce(r))) => {
            let p = &r.responses[0].partition_responses[0];
            (
                p.error_code,
                p.error_message.as_ref().map(|m| m.to_string()),
                p.record_errors
                    .iter()
                    .map(|e| {
                        (
                            e.batch_index,
                            e.batch_index_error_message
                                .as_ref()
                                .map(|m| m.to_string())
                                .unwrap_or_default(),
                        )
                    })
                    .collect(),
                p.log_start_offset,
            )
        }
        other => panic!("expected a produce answer, got {other:?}"),
    }
}

#[test]
fn record_timestamps_outside_the_topics_bounds_are_refused() {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "t", 1);
    let now = w.now_ms;
    let hour = 3_600_000;
    let ahead = now + 2 * hour;
    let (code, message, errors, log_start) =
        produce_full(&mut w, 9, "t", batch(&[b"a", b"b"], ahead));
    assert_eq!(code, INVALID_TIMESTAMP);
    assert_eq!(
        message.as_deref(),
        Some("One or more records have been rejected due to invalid timestamp")
    );
    let why = |offset: i64| {
        format!(
            "Timestamp {ahead} of message with offset {offset} is out of range. The timestamp \
             should be within [{}, {}]",
            now.wrapping_sub(i64::MAX),
            now + hour
        )
    };
    assert_eq!(errors, vec![(0, why(0)), (1, why(1))]);
    assert_eq!(log_start, 0, "reported as Kafka's log reports it");
    // Produce v7 has no room for the records' errors.
    let (code, _, errors, _) = produce_full(&mut w, 7, "t", batch(&[b"a"], ahead));
    assert_eq!((code, errors.len()), (INVALID_TIMESTAMP, 0));
    // Compressed: the header's max timestamp says so, the records tell which.
    let lz4 = batch_with(
        &[b"a", b"b"],
        ahead,
        kafka_protocol::records::Compression::Lz4,
    );
    let (code, _, errors, _) = produce_full(&mut w, 9, "t", lz4);
    assert_eq!((code, errors.len()), (INVALID_TIMESTAMP, 2));
    // At the bound, without a timestamp, or long past (before.max.ms is
    // Long.MAX by default): taken.
    for ts in [now + hour, -1, now - 365 * 24 * hour] {
        assert_eq!(
            produce_full(&mut w, 9, "t", batch(&[b"x"], ts)).0,
            0,
            "{ts}"
        );
    }
    assert_eq!(w.broker.partition("t", 0).unwrap().high_watermark(), 3);

    // Bounds set per topic.
    assert_eq!(
        inc(
            &mut w,
            &[(
                TOPIC,
                "t",
                &[
                    ("message.timestamp.before.max.ms", SET, Some("1000")),
                    ("message.timestamp.after.max.ms", SET, Some("0")),
                ]
            )]
        ),
        vec![ok("t")]
    );
    let zstd = batch_with(
        &[b"old"],
        now - 2000,
        kafka_protocol::records::Compression::Zstd,
    );
    let (code, _, errors, _) = produce_full(&mut w, 9, "t", zstd);
    assert_eq!((code, errors.len()), (INVALID_TIMESTAMP, 1));
    assert_eq!(
        produce_full(&mut w, 9, "t", batch(&[b"x"], now + 1)).0,
        INVALID_TIMESTAMP
    );
    assert_eq!(
        produce_full(&mut w, 9, "t", batch(&[b"x"], now - 1000)).0,
        0
    );

    // LogAppendTime: the broker stamps the batch, whatever it carried.
    let lat = [("message.timestamp.type", "LogAppendTime")];
    assert_eq!(create_with(&mut w, "lat", &lat).0, 0);
    assert_eq!(produce_full(&mut w, 9, "lat", batch(&[b"x"], ahead)).0, 0);
}
