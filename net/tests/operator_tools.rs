//! `doze-kafka topics | groups | transactions`, through the real binary
//! against a real broker, in human and JSON form:
//!
//! - topics: create (with configs) shows in list and describe with its
//!   partitions; a second create and a describe of nothing fail with
//!   Kafka's error names; delete removes the topic;
//! - groups: a group that committed offsets without members and one with
//!   a live member (JoinGroup, SyncGroup with a consumer assignment) show
//!   the committed offset, log end offset and lag per partition, members
//!   with client id, host and assignment, and their state;
//! - transactions: a producer's open transaction shows in list, describe
//!   and describe-producers and is not hanging (its coordinator expects
//!   the partition); a hanging one (a transactional batch no coordinator
//!   knows of, as a client without partition verification or a lost
//!   coordinator leaves behind: written into a stopped broker's segment)
//!   is reported by find-hanging, and abort ends it: the last stable
//!   offset reaches the high watermark;
//! - usage errors exit 2, an unreachable or silent broker exits 1 soon.
//!
//! Every run of the binary is killed after `RUN_LIMIT`.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use common::{create_topic, produce_to, run_binary, topic, Broker, Client, Run};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as Assigned;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use serde_json::Value;

const RUN_LIMIT: Duration = Duration::from_secs(60);
const MEMBER_ID_REQUIRED: i16 = 79;

/// `doze-kafka <args>`, killed after `RUN_LIMIT`.
fn tool(args: &[&str]) -> Run {
    run_binary(args, RUN_LIMIT)
}

/// `doze-kafka <tool> --bootstrap-server ADDR <args>`; it must exit 0.
fn ok(broker: &Broker, tool_name: &str, args: &[&str]) -> String {
    let run = at(broker, tool_name, args);
    assert_eq!(
        run.code, 0,
        "{tool_name} {args:?}: {}{}",
        run.stdout, run.stderr
    );
    run.stdout
}

/// As `ok` with `--output json`: the one JSON document it prints.
fn ok_json(broker: &Broker, tool_name: &str, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["--output", "json"]);
    let out = ok(broker, tool_name, &args);
    assert_eq!(out.lines().count(), 1, "one document on one line: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn at(broker: &Broker, tool_name: &str, args: &[&str]) -> Run {
    let mut all = vec![tool_name, "--bootstrap-server", broker.addr.as_str()];
    all.extend(args);
    tool(&all)
}

/// The rows of a table printed with headers: each row as header → cell.
/// Kafka-transactions' tables end every cell with a tab; the
/// kafka-consumer-groups ones pad cells to the column's width, so a cell is
/// what lies under its header (headers such as `COORDINATOR (ID)` have a
/// space inside).
fn rows(table: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = table.lines().filter(|l| !l.trim().is_empty());
    let header_line = lines.next().expect("a header line");
    if header_line.contains('\t') {
        let cells = |l: &str| -> Vec<String> {
            l.strip_suffix('\t')
                .unwrap_or_else(|| panic!("{l:?} ends with a tab"))
                .split('\t')
                .map(|c| c.trim().to_string())
                .collect()
        };
        let headers = cells(header_line);
        return lines
            .map(|l| {
                let row = cells(l);
                assert_eq!(row.len(), headers.len(), "{l:?} under {header_line:?}");
                headers.iter().cloned().zip(row).collect()
            })
            .collect();
    }
    // Column starts: where a header word starts, except a `(...)` that
    // belongs to the word before.
    let mut starts: Vec<usize> = Vec::new();
    let bytes = header_line.as_bytes();
    for i in 0..bytes.len() {
        let starts_word = bytes[i] != b' ' && (i == 0 || bytes[i - 1] == b' ');
        if starts_word && bytes[i] != b'(' {
            starts.push(i);
        }
    }
    let cut = |l: &str, k: usize| -> String {
        let from = starts[k].min(l.len());
        let to = starts.get(k + 1).map_or(l.len(), |&e| e.min(l.len()));
        l[from..to].trim().to_string()
    };
    let headers: Vec<String> = (0..starts.len()).map(|k| cut(header_line, k)).collect();
    lines
        .map(|l| {
            (0..starts.len())
                .map(|k| (headers[k].clone(), cut(l, k)))
                .collect()
        })
        .collect()
}

#[test]
fn topics_create_list_describe_delete() {
    let broker = Broker::start("tools-topics");
    assert_eq!(
        ok(
            &broker,
            "topics",
            &[
                "create",
                "--topic",
                "events",
                "--partitions",
                "3",
                "--config",
                "cleanup.policy=compact",
                "--config",
                "retention.ms=3600000",
            ],
        ),
        "Created topic events.\n"
    );
    let created = ok_json(&broker, "topics", &["create", "--topic", "audit"]);
    assert_eq!(created["created"]["name"], "audit");
    assert_eq!(
        created["created"]["partitions"], 1,
        "the broker's num.partitions"
    );
    assert_eq!(created["created"]["replication_factor"], 1);

    assert_eq!(ok(&broker, "topics", &["list"]), "audit\nevents\n");
    let listed = ok_json(&broker, "topics", &["list"]);
    assert_eq!(listed["topics"], serde_json::json!(["audit", "events"]));

    let described = ok(&broker, "topics", &["describe", "--topic", "events"]);
    let lines: Vec<&str> = described.lines().collect();
    assert_eq!(lines.len(), 4, "{described}");
    assert!(
        lines[0].starts_with("Topic: events\tTopicId: "),
        "{described}"
    );
    assert!(
        lines[0].ends_with(
            "\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: cleanup.policy=compact,retention.ms=3600000"
        ),
        "{described}"
    );
    for (p, line) in lines[1..].iter().enumerate() {
        assert_eq!(
            *line,
            format!("\tTopic: events\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1")
        );
    }
    let described = ok_json(&broker, "topics", &["describe", "--topic", "events"]);
    let t = &described["topics"][0];
    assert_eq!(t["name"], "events");
    assert_eq!(t["partition_count"], 3);
    assert_eq!(t["configs"]["cleanup.policy"], "compact");
    assert_eq!(t["configs"]["retention.ms"], "3600000");
    assert!(
        t["configs"].get("segment.bytes").is_none(),
        "defaults left out"
    );
    let partitions = t["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 3);
    for (i, p) in partitions.iter().enumerate() {
        assert_eq!(p["partition"], i);
        assert_eq!(p["leader"], 1);
        assert_eq!(p["replicas"], serde_json::json!([1]));
    }
    let all = ok(&broker, "topics", &["describe"]);
    assert_eq!(
        all.lines().filter(|l| l.starts_with("Topic: ")).count(),
        2,
        "{all}"
    );

    let again = at(&broker, "topics", &["create", "--topic", "events"]);
    assert_eq!(again.code, 1);
    assert!(
        again.stderr.contains("TOPIC_ALREADY_EXISTS"),
        "{}",
        again.stderr
    );

    assert_eq!(
        ok(&broker, "topics", &["delete", "--topic", "events"]),
        "Deleted topic events.\n"
    );
    let deleted = ok_json(&broker, "topics", &["delete", "--topic", "audit"]);
    assert_eq!(deleted["deleted"], "audit");
    assert_eq!(ok(&broker, "topics", &["list"]), "");
    let gone = at(&broker, "topics", &["describe", "--topic", "events"]);
    assert_eq!(gone.code, 1);
    assert!(
        gone.stderr.contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{}",
        gone.stderr
    );
    let gone = at(&broker, "topics", &["delete", "--topic", "events"]);
    assert_eq!(gone.code, 1);
    assert!(
        gone.stderr.contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{}",
        gone.stderr
    );
}

#[test]
fn usage_errors_and_unreachable_brokers() {
    for args in [
        &["topics", "list"][..],
        &["topics", "--bootstrap-server", "no-port", "list"],
        &[
            "topics",
            "--bootstrap-server",
            "h:1",
            "create",
            "--topic",
            "t",
            "--partitions",
            "0",
        ],
        &[
            "topics",
            "--bootstrap-server",
            "h:1",
            "create",
            "--topic",
            "t",
            "--config",
            "x",
        ],
        &["topics", "--bootstrap-server", "h:1", "frobnicate"],
        &["groups", "--bootstrap-server", "h:1", "describe"],
        &[
            "transactions",
            "--bootstrap-server",
            "h:1",
            "abort",
            "--topic",
            "t",
            "--partition",
            "0",
        ],
        &[
            "transactions",
            "--bootstrap-server",
            "h:1",
            "find-hanging",
            "--partition",
            "0",
        ],
        &[
            "transactions",
            "--bootstrap-server",
            "h:1",
            "list",
            "--output",
            "yaml",
        ],
    ] {
        let run = tool(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.starts_with("doze-kafka: error: "),
            "{}",
            run.stderr
        );
        assert!(run.stdout.is_empty());
    }

    // Nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let closed = format!("127.0.0.1:{port}");
    let run = tool(&["topics", "--bootstrap-server", &closed, "list"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("cannot connect to 127.0.0.1:"),
        "{}",
        run.stderr
    );

    // Something accepts and never answers: the request timeout ends it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let holder = std::thread::spawn(move || {
        let (conn, _) = silent.accept().unwrap();
        std::thread::sleep(Duration::from_secs(3));
        drop(conn);
    });
    let started = Instant::now();
    let run = tool(&[
        "transactions",
        "list",
        "--bootstrap-server",
        &addr,
        "--timeout-ms",
        "500",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("timed out after 500 ms"),
        "{}",
        run.stderr
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded by the timeout"
    );
    holder.join().unwrap();
}

// --- groups ---------------------------------------------------------------

fn group_id(s: &str) -> GroupId {
    GroupId(StrBytes::from_string(s.to_string()))
}

fn commit(c: &mut Client, group: &str, generation: i32, member: &str, offsets: &[(i32, i64)]) {
    let req = OffsetCommitRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(StrBytes::from_string(member.to_string()))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic("orders"))
            .with_partitions(
                offsets
                    .iter()
                    .map(|&(p, o)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(p)
                            .with_committed_offset(o)
                            .with_committed_leader_epoch(-1)
                    })
                    .collect(),
            )]);
    match c.request(7, &req) {
        ResponseKind::OffsetCommit(r) => {
            for p in &r.topics[0].partitions {
                assert_eq!(p.error_code, 0, "commit of {group}");
            }
        }
        other => panic!("{other:?}"),
    }
}

/// Joins `group` as its only member (the leader), assigns itself both
/// partitions of `orders`; returns the member id and generation.
fn join_and_sync(c: &mut Client, group: &str) -> (String, i32) {
    let mut subscription = BytesMut::new();
    subscription.put_i16(0);
    ConsumerProtocolSubscription::default()
        .with_topics(vec![StrBytes::from_static_str("orders")])
        .encode(&mut subscription, 0)
        .unwrap();
    let mut member_id = String::new();
    let joined = loop {
        let req = JoinGroupRequest::default()
            .with_group_id(group_id(group))
            .with_session_timeout_ms(60_000)
            .with_rebalance_timeout_ms(60_000)
            .with_member_id(StrBytes::from_string(member_id.clone()))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str("range"))
                .with_metadata(subscription.clone().freeze())]);
        match c.request(5, &req) {
            ResponseKind::JoinGroup(r) if r.error_code == MEMBER_ID_REQUIRED => {
                member_id = r.member_id.to_string();
            }
            ResponseKind::JoinGroup(r) => {
                assert_eq!(r.error_code, 0, "JoinGroup");
                break r;
            }
            other => panic!("{other:?}"),
        }
    };
    let member_id = joined.member_id.to_string();
    assert_eq!(joined.leader.as_str(), member_id, "the only member leads");
    let mut assignment = BytesMut::new();
    assignment.put_i16(0);
    ConsumerProtocolAssignment::default()
        .with_assigned_partitions(vec![Assigned::default()
            .with_topic(topic("orders"))
            .with_partitions(vec![0, 1])])
        .encode(&mut assignment, 0)
        .unwrap();
    let req = SyncGroupRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id(joined.generation_id)
        .with_member_id(joined.member_id.clone())
        .with_assignments(vec![SyncGroupRequestAssignment::default()
            .with_member_id(joined.member_id.clone())
            .with_assignment(assignment.freeze())]);
    match c.request(3, &req) {
        ResponseKind::SyncGroup(r) => assert_eq!(r.error_code, 0, "SyncGroup"),
        other => panic!("{other:?}"),
    }
    (member_id, joined.generation_id)
}

fn values(n: usize) -> Vec<Bytes> {
    (0..n).map(|i| Bytes::from(format!("v{i}"))).collect()
}

#[test]
fn groups_show_offsets_lag_members_and_state() {
    let broker = Broker::start("tools-groups");
    ok(
        &broker,
        "topics",
        &["create", "--topic", "orders", "--partitions", "2"],
    );
    let mut c = broker.connect();
    produce_to(&mut c, "orders", 0, &values(5));
    produce_to(&mut c, "orders", 1, &values(3));

    // A group without members that committed offsets (as a consumer
    // with assign() and commitSync does).
    commit(&mut c, "idle", -1, "", &[(0, 2), (1, 3)]);
    // A group with a live member that has both partitions and committed
    // one of them.
    let (member, generation) = join_and_sync(&mut c, "live");
    commit(&mut c, "live", generation, &member, &[(0, 4)]);

    assert_eq!(ok(&broker, "groups", &["list"]), "idle\nlive\n");
    let listed = ok_json(&broker, "groups", &["list"]);
    let groups = listed["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0]["group_id"], "idle");
    assert_eq!(groups[0]["state"], "Empty");
    assert_eq!(groups[1]["group_id"], "live");
    assert_eq!(groups[1]["state"], "Stable");
    assert_eq!(groups[1]["protocol_type"], "consumer");

    let idle = ok(&broker, "groups", &["describe", "--group", "idle"]);
    assert!(
        idle.starts_with("Consumer group 'idle' has no active members.\n"),
        "{idle}"
    );
    let table = idle.split_once("\n\n").unwrap().1;
    let r = rows(table);
    assert_eq!(r.len(), 2, "{idle}");
    let expect = [("0", "2", "5", "3"), ("1", "3", "3", "0")];
    for (row, (p, current, end, lag)) in r.iter().zip(expect) {
        assert_eq!(row["GROUP"], "idle");
        assert_eq!(row["TOPIC"], "orders");
        assert_eq!(row["PARTITION"], p);
        assert_eq!(row["CURRENT-OFFSET"], current);
        assert_eq!(row["LOG-END-OFFSET"], end);
        assert_eq!(row["LAG"], lag);
        assert_eq!(row["CONSUMER-ID"], "-");
        assert_eq!(row["HOST"], "-");
        assert_eq!(row["CLIENT-ID"], "-");
    }

    let live = ok(&broker, "groups", &["describe", "--group", "live"]);
    let r = rows(&live);
    assert_eq!(r.len(), 2, "{live}");
    assert_eq!(r[0]["PARTITION"], "0");
    assert_eq!(r[0]["CURRENT-OFFSET"], "4");
    assert_eq!(r[0]["LOG-END-OFFSET"], "5");
    assert_eq!(r[0]["LAG"], "1");
    assert_eq!(r[1]["PARTITION"], "1");
    assert_eq!(r[1]["CURRENT-OFFSET"], "-", "assigned, nothing committed");
    assert_eq!(r[1]["LOG-END-OFFSET"], "3");
    assert_eq!(r[1]["LAG"], "-");
    for row in &r {
        assert_eq!(row["CONSUMER-ID"], member);
        assert_eq!(row["CLIENT-ID"], "net-test");
        assert!(row["HOST"].contains("127.0.0.1"), "{live}");
    }

    let json = ok_json(&broker, "groups", &["describe", "--group", "live"]);
    assert_eq!(json["group_id"], "live");
    assert_eq!(json["state"], "Stable");
    assert_eq!(json["protocol"], "range");
    assert_eq!(json["coordinator"]["node_id"], 1);
    assert_eq!(json["members"][0]["member_id"], member.as_str());
    assert_eq!(json["members"][0]["client_id"], "net-test");
    assert_eq!(
        json["members"][0]["assignment"],
        serde_json::json!([
            {"topic": "orders", "partition": 0},
            {"topic": "orders", "partition": 1}
        ])
    );
    let offsets = json["offsets"].as_array().unwrap();
    assert_eq!(offsets[0]["current_offset"], 4);
    assert_eq!(offsets[0]["log_end_offset"], 5);
    assert_eq!(offsets[0]["lag"], 1);
    assert_eq!(offsets[0]["member_id"], member.as_str());
    assert!(offsets[1]["current_offset"].is_null());
    assert!(offsets[1]["lag"].is_null());
    assert_eq!(offsets[1]["log_end_offset"], 3);
    let idle = ok_json(&broker, "groups", &["describe", "--group", "idle"]);
    assert_eq!(idle["state"], "Empty");
    assert_eq!(idle["members"], serde_json::json!([]));
    assert_eq!(idle["offsets"][0]["lag"], 3);
    assert_eq!(idle["offsets"][1]["lag"], 0);

    let members = rows(&ok(
        &broker,
        "groups",
        &["describe", "--group", "live", "--members"],
    ));
    assert_eq!(members.len(), 1);
    assert_eq!(members[0]["CONSUMER-ID"], member);
    assert_eq!(members[0]["CLIENT-ID"], "net-test");
    assert_eq!(members[0]["#PARTITIONS"], "2");
    assert_eq!(members[0]["ASSIGNMENT"], "orders(0,1)");
    let state = ok(
        &broker,
        "groups",
        &["describe", "--group", "live", "--state"],
    );
    let state_rows = rows(&state);
    assert_eq!(state_rows.len(), 1, "{state}");
    assert_eq!(state_rows[0]["STATE"], "Stable");
    assert_eq!(state_rows[0]["ASSIGNMENT-STRATEGY"], "range");
    assert_eq!(state_rows[0]["#MEMBERS"], "1");
    assert_eq!(
        state_rows[0]["COORDINATOR (ID)"],
        format!("{} (1)", broker.addr)
    );

    let missing = at(&broker, "groups", &["describe", "--group", "nobody"]);
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("GROUP_ID_NOT_FOUND"),
        "{}",
        missing.stderr
    );
}

// --- transactions ---------------------------------------------------------

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// One transactional batch of `count` records at `base_offset`.
fn txn_batch(producer_id: i64, epoch: i16, base_offset: i64, count: usize, ts: i64) -> Bytes {
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            transactional: true,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: base_offset + i as i64,
            sequence: i as i32,
            timestamp: ts,
            key: None,
            value: Some(Bytes::from(format!("t{i}"))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
}

/// A transactional producer `id` that writes two records to `topic`-0 and
/// neither commits nor aborts; returns its producer id.
fn leave_open(c: &mut Client, id: &str, topic_name: &str) -> i64 {
    let tid = TransactionalId(StrBytes::from_string(id.to_string()));
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(tid.clone()))
        .with_transaction_timeout_ms(600_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let (pid, epoch) = match c.request(4, &init) {
        ResponseKind::InitProducerId(r) => {
            assert_eq!(r.error_code, 0);
            (r.producer_id.0, r.producer_epoch)
        }
        other => panic!("{other:?}"),
    };
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(tid.clone())
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(topic(topic_name))
            .with_partitions(vec![0])]);
    match c.request(3, &add) {
        ResponseKind::AddPartitionsToTxn(r) => assert_eq!(
            r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
            0
        ),
        other => panic!("{other:?}"),
    }
    let produce = ProduceRequest::default()
        .with_transactional_id(Some(tid))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic(topic_name))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(txn_batch(pid, epoch, 0, 2, now_ms())))])]);
    match c.request(9, &produce) {
        ResponseKind::Produce(r) => {
            assert_eq!(r.responses[0].partition_responses[0].error_code, 0)
        }
        other => panic!("{other:?}"),
    }
    pid
}

/// (high watermark, last stable offset) of `topic`-`partition`.
fn watermarks(c: &mut Client, topic_name: &str, partition: i32) -> (i64, i64) {
    let mut at = |isolation: i8| {
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(isolation)
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic(topic_name))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_timestamp(-1)])]);
        match c.request(7, &req) {
            ResponseKind::ListOffsets(r) => {
                let p = &r.topics[0].partitions[0];
                assert_eq!(p.error_code, 0);
                p.offset
            }
            other => panic!("{other:?}"),
        }
    };
    (at(0), at(1))
}

/// Appends `batch` to the end of `topic`-`partition`'s only segment of a
/// stopped broker's data dir (the scan above the recovery point reads it
/// at the next start).
fn append_to_segment(data_dir: &Path, topic_partition: &str, batch: &[u8]) {
    let path = data_dir
        .join("logs")
        .join(topic_partition)
        .join(format!("{:020}.log", 0));
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.write_all(batch).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn transactions_open_hanging_find_and_abort() {
    let mut broker = Broker::start("tools-txns");
    let mut c = broker.connect();
    create_topic(&mut c, "pay");
    ok(
        &broker,
        "topics",
        &["create", "--topic", "stuck", "--partitions", "2"],
    );
    let open_pid = leave_open(&mut c, "payments-1", "pay");

    // The open transaction, from the coordinator's side and the partition's.
    let listed = rows(&ok(&broker, "transactions", &["list"]));
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["TransactionalId"], "payments-1");
    assert_eq!(listed[0]["Coordinator"], "1");
    assert_eq!(listed[0]["ProducerId"], open_pid.to_string());
    assert_eq!(listed[0]["TransactionState"], "Ongoing");
    let listed = ok_json(&broker, "transactions", &["list"]);
    assert_eq!(
        listed["transactions"],
        serde_json::json!([{
            "transactional_id": "payments-1",
            "coordinator_id": 1,
            "producer_id": open_pid,
            "state": "Ongoing",
        }])
    );

    let described = rows(&ok(
        &broker,
        "transactions",
        &["describe", "--transactional-id", "payments-1"],
    ));
    assert_eq!(described.len(), 1);
    let d = &described[0];
    assert_eq!(d["CoordinatorId"], "1");
    assert_eq!(d["ProducerId"], open_pid.to_string());
    assert_eq!(d["ProducerEpoch"], "0");
    assert_eq!(d["TransactionState"], "Ongoing");
    assert_eq!(d["TransactionTimeoutMs"], "600000");
    assert_eq!(d["TopicPartitions"], "pay-0");
    let start: i64 = d["CurrentTransactionStartTimeMs"].parse().unwrap();
    assert!(
        (now_ms() - start).abs() < 120_000,
        "started just now: {start}"
    );
    let duration: i64 = d["TransactionDurationMs"].parse().unwrap();
    assert!(duration >= 0);
    let described = ok_json(
        &broker,
        "transactions",
        &["describe", "--transactional-id", "payments-1"],
    );
    assert_eq!(described["state"], "Ongoing");
    assert_eq!(described["producer_id"], open_pid);
    assert_eq!(described["timeout_ms"], 600_000);
    assert_eq!(described["start_time_ms"], start);
    assert!(described["duration_ms"].as_i64().unwrap() >= 0);
    assert_eq!(
        described["partitions"],
        serde_json::json!([{"topic": "pay", "partition": 0}])
    );
    let unknown = at(
        &broker,
        "transactions",
        &["describe", "--transactional-id", "nobody"],
    );
    assert_eq!(unknown.code, 1);
    assert!(
        unknown.stderr.contains("TRANSACTIONAL_ID_NOT_FOUND"),
        "{}",
        unknown.stderr
    );

    let producers = rows(&ok(
        &broker,
        "transactions",
        &["describe-producers", "--topic", "pay", "--partition", "0"],
    ));
    assert_eq!(producers.len(), 1);
    assert_eq!(producers[0]["ProducerId"], open_pid.to_string());
    assert_eq!(producers[0]["ProducerEpoch"], "0");
    assert_eq!(producers[0]["LastSequence"], "1");
    assert_eq!(producers[0]["CurrentTransactionStartOffset"], "0");
    let producers = ok_json(
        &broker,
        "transactions",
        &["describe-producers", "--topic", "pay", "--partition", "0"],
    );
    assert_eq!(producers["topic"], "pay");
    assert_eq!(producers["producers"][0]["producer_id"], open_pid);
    assert_eq!(producers["producers"][0]["current_txn_start_offset"], 0);

    // Not hanging: its coordinator expects pay-0, however old it is.
    for args in [
        &["find-hanging"][..],
        &["find-hanging", "--max-transaction-timeout", "0"],
        &[
            "find-hanging",
            "--topic",
            "pay",
            "--max-transaction-timeout",
            "0",
        ],
    ] {
        let out = ok(&broker, "transactions", args);
        assert!(rows(&out).is_empty(), "{args:?}: {out}");
        assert!(out.starts_with("Topic\tPartition\tProducerId\t"), "{out}");
    }
    let none = ok_json(
        &broker,
        "transactions",
        &["find-hanging", "--max-transaction-timeout", "0"],
    );
    assert_eq!(none, serde_json::json!({"hanging": []}));
    assert_eq!(
        watermarks(&mut c, "pay", 0),
        (2, 0),
        "held back by pay-0's open transaction"
    );

    // Hanging transactions: batches of producer ids no coordinator knows,
    // written in November 2023, on both partitions of `stuck`, after a
    // plain record on each (which makes the segment files).
    produce_to(&mut c, "stuck", 0, &values(1));
    produce_to(&mut c, "stuck", 1, &values(1));
    let old_ms = 1_700_000_000_000;
    broker.stop();
    let data_dir = std::mem::take(&mut broker.data_dir);
    drop(broker);
    append_to_segment(&data_dir, "stuck-0", &txn_batch(987_654, 3, 1, 2, old_ms));
    append_to_segment(&data_dir, "stuck-1", &txn_batch(987_655, 0, 1, 1, old_ms));
    let broker = Broker::start_on(data_dir, &[]);
    let mut c = broker.connect();
    assert_eq!(watermarks(&mut c, "stuck", 0), (3, 1));
    assert_eq!(watermarks(&mut c, "stuck", 1), (2, 1));

    let hanging = rows(&ok(&broker, "transactions", &["find-hanging"]));
    assert_eq!(hanging.len(), 2, "{hanging:?}");
    for (h, (p, pid, epoch)) in hanging.iter().zip([(0, 987_654, 3), (1, 987_655, 0)]) {
        assert_eq!(h["Topic"], "stuck");
        assert_eq!(h["Partition"], p.to_string());
        assert_eq!(h["ProducerId"], pid.to_string());
        assert_eq!(h["ProducerEpoch"], epoch.to_string());
        assert_eq!(h["CoordinatorEpoch"], "-1");
        assert_eq!(h["StartOffset"], "1");
        assert_eq!(h["LastTimestamp"], old_ms.to_string());
        let minutes: i64 = h["Duration(min)"].parse().unwrap();
        assert!(minutes > 60 * 24 * 365, "{minutes}");
    }
    let only = ok_json(
        &broker,
        "transactions",
        &["find-hanging", "--topic", "stuck", "--partition", "1"],
    );
    let only = only["hanging"].as_array().unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0]["topic"], "stuck");
    assert_eq!(only[0]["partition"], 1);
    assert_eq!(only[0]["producer_id"], 987_655);
    assert_eq!(only[0]["start_offset"], 1);
    assert!(only[0]["coordinator_epoch"].is_null());
    let pay = ok(&broker, "transactions", &["find-hanging", "--topic", "pay"]);
    assert!(rows(&pay).is_empty(), "{pay}");

    // abort: the producer whose transaction starts at the offset given.
    let wrong = at(
        &broker,
        "transactions",
        &[
            "abort",
            "--topic",
            "stuck",
            "--partition",
            "0",
            "--start-offset",
            "0",
        ],
    );
    assert_eq!(wrong.code, 1);
    assert!(
        wrong
            .stderr
            .contains("could not find any open transaction starting at offset 0"),
        "{}",
        wrong.stderr
    );
    let aborted = ok(
        &broker,
        "transactions",
        &[
            "abort",
            "--topic",
            "stuck",
            "--partition",
            "0",
            "--start-offset",
            "1",
        ],
    );
    assert!(
        aborted.starts_with("Aborted the transaction of producer 987654 (epoch 3)"),
        "{aborted}"
    );
    let aborted = ok_json(
        &broker,
        "transactions",
        &[
            "abort",
            "--topic",
            "stuck",
            "--partition",
            "1",
            "--start-offset",
            "1",
        ],
    );
    assert_eq!(aborted["aborted"]["producer_id"], 987_655);
    assert_eq!(aborted["aborted"]["producer_epoch"], 0);
    assert_eq!(aborted["aborted"]["coordinator_epoch"], 0);
    assert_eq!(aborted["aborted"]["start_offset"], 1);

    // The abort markers (at 3 and 2) end them: LSO = high watermark.
    assert_eq!(watermarks(&mut c, "stuck", 0), (4, 4));
    assert_eq!(watermarks(&mut c, "stuck", 1), (3, 3));
    let none = ok_json(&broker, "transactions", &["find-hanging"]);
    assert_eq!(none, serde_json::json!({"hanging": []}));
    let producers = ok_json(
        &broker,
        "transactions",
        &["describe-producers", "--topic", "stuck", "--partition", "0"],
    );
    assert!(producers["producers"][0]["current_txn_start_offset"].is_null());
    // The live transaction survived the restart, untouched.
    let still = ok_json(
        &broker,
        "transactions",
        &["describe", "--transactional-id", "payments-1"],
    );
    assert_eq!(still["state"], "Ongoing");
}

// --- SASL -------------------------------------------------------------------

/// `doze-kafka users add NAME` into a stopped broker's data dir.
fn add_user(data_dir: &Path, name: &str, mechanism: &str, password: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_doze-kafka"))
        .args(["users", "add", name, "--mechanism", mechanism])
        .args(["--password-stdin", "--data-dir"])
        .arg(data_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sasl_logins_from_a_command_config() {
    let data_dir =
        std::env::temp_dir().join(format!("doze-net-test-tools-sasl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    add_user(&data_dir, "alice", "SCRAM-SHA-256", "alice-secret");
    add_user(&data_dir, "bob", "SCRAM-SHA-512", "bob \"quoted\" secret");
    let broker = Broker::start_on(
        data_dir.clone(),
        &["--set", "listeners=SASL_PLAINTEXT://127.0.0.1:0"],
    );
    let addr = broker.listener("SASL_PLAINTEXT");
    let configs = data_dir.join("client-configs");
    std::fs::create_dir_all(&configs).unwrap();
    let config = |name: &str, mechanism: &str, module: &str, user: &str, password: &str| {
        let path = configs.join(name);
        let password = password.replace('"', "\\\"");
        std::fs::write(
            &path,
            format!(
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n\
                 sasl.jaas.config=org.apache.kafka.common.security.{module} required \\\n  \
                 username=\"{user}\" password=\"{password}\";\n"
            ),
        )
        .unwrap();
        path.to_str().unwrap().to_string()
    };
    let plain = config(
        "plain",
        "PLAIN",
        "plain.PlainLoginModule",
        "alice",
        "alice-secret",
    );
    let scram256 = config(
        "scram256",
        "SCRAM-SHA-256",
        "scram.ScramLoginModule",
        "alice",
        "alice-secret",
    );
    let scram512 = config(
        "scram512",
        "SCRAM-SHA-512",
        "scram.ScramLoginModule",
        "bob",
        "bob \"quoted\" secret",
    );
    let wrong = config(
        "wrong",
        "SCRAM-SHA-256",
        "scram.ScramLoginModule",
        "alice",
        "not-it",
    );
    let run = |config: &str, args: &[&str]| {
        let mut all = vec!["topics", "--bootstrap-server", addr.as_str()];
        all.extend(["--command-config", config]);
        all.extend(args);
        tool(&all)
    };

    let created = run(&plain, &["create", "--topic", "secured"]);
    assert_eq!(created.code, 0, "{}", created.stderr);
    assert_eq!(created.stdout, "Created topic secured.\n");
    for config in [&plain, &scram256, &scram512] {
        let listed = run(config, &["list"]);
        assert_eq!(listed.code, 0, "{config}: {}", listed.stderr);
        assert_eq!(listed.stdout, "secured\n");
    }
    let refused = run(&wrong, &["list"]);
    assert_eq!(refused.code, 1);
    assert!(
        refused.stderr.contains("SASL_AUTHENTICATION_FAILED"),
        "{}",
        refused.stderr
    );
    // No login on a SASL listener: the broker closes the connection.
    let started = Instant::now();
    let anonymous = tool(&["topics", "--bootstrap-server", &addr, "list"]);
    assert_eq!(anonymous.code, 1, "{}", anonymous.stderr);
    assert!(started.elapsed() < Duration::from_secs(30));
    let unsupported = config("ssl", "PLAIN", "plain.PlainLoginModule", "a", "b");
    std::fs::write(&unsupported, "security.protocol=SSL\n").unwrap();
    assert_eq!(run(&unsupported, &["list"]).code, 2);
}
