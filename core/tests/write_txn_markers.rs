//! WriteTxnMarkers, as `kafka-transactions.sh abort` sends it for a hanging
//! transaction: the abort marker ends the partition's open transaction (the
//! LSO moves on, read_committed readers skip its records), is answered only
//! once fsynced, survives a power cut; Kafka's per-partition errors and the
//! CLUSTER_ACTION (or ALTER) check on the cluster.

mod support;

use doze_core::security::acl::{pattern, permission, resource, Op};
use doze_core::BrokerConfig;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use support::authz::*;
use support::requests::*;
use support::txn::*;
use support::*;

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = ResponseError::UnknownTopicOrPartition.code();
const INVALID_PRODUCER_EPOCH: i16 = ResponseError::InvalidProducerEpoch.code();
const COORDINATOR_FENCED: i16 = ResponseError::TransactionCoordinatorFenced.code();
const CLUSTER_DENIED: i16 = ResponseError::ClusterAuthorizationFailed.code();
const STORAGE_ERROR: i16 = ResponseError::KafkaStorageError.code();
const INVALID_REQUEST: i16 = ResponseError::InvalidRequest.code();

/// The connection the admin tool's requests come on.
const TOOL: u64 = 5;

fn world() -> World {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "a", 1);
    create_topic(&mut w, "b", 1);
    w
}

/// A hanging transaction: `id` writes `n` records to a-0 on `conn` and never
/// ends. Returns (producer id, epoch).
fn hang(w: &mut World, conn: u64, id: &str, n: usize) -> (i64, i16) {
    let (error, pid, epoch) = init_txn(w, conn, id, 60_000);
    assert_eq!(error, NONE);
    assert_eq!(
        add_partitions(w, conn, id, pid, epoch, &[("a", 0)]),
        vec![NONE]
    );
    let values: Vec<Vec<u8>> = (0..n).map(|i| format!("t{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    let req = produce_req("a", 0, txn_batch(&refs, pid, epoch, 0), -1)
        .with_transactional_id(Some(tid(id)));
    w.send(conn, 9, &req);
    assert_eq!(produce_answer(w, conn).unwrap().0, NONE);
    (pid, epoch)
}

/// A plain record on a-0 from `conn`; returns its offset.
fn plain(w: &mut World, conn: u64) -> i64 {
    w.send(conn, 9, &produce_req("a", 0, batch(&[b"plain"], T0_MS), -1));
    let (error, offset) = produce_answer(w, conn).unwrap();
    assert_eq!(error, NONE);
    offset
}

fn marker(
    pid: i64,
    epoch: i16,
    coordinator_epoch: i32,
    commit: bool,
    parts: &[(&str, i32)],
) -> WritableTxnMarker {
    let mut topics: Vec<WritableTxnMarkerTopic> = Vec::new();
    for (t, p) in parts {
        match topics.iter_mut().find(|x| x.name.0.as_str() == *t) {
            Some(x) => x.partition_indexes.push(*p),
            None => topics.push(
                WritableTxnMarkerTopic::default()
                    .with_name(name(t))
                    .with_partition_indexes(vec![*p]),
            ),
        }
    }
    WritableTxnMarker::default()
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_coordinator_epoch(coordinator_epoch)
        .with_transaction_result(commit)
        .with_topics(topics)
}

fn send_markers(w: &mut World, conn: u64, markers: Vec<WritableTxnMarker>) {
    w.send(
        conn,
        1,
        &WriteTxnMarkersRequest::default().with_markers(markers),
    );
}

/// Every partition result of the answer on `conn`, if there is one yet:
/// (producer id, topic, partition, error), in answer order.
fn markers_answer(w: &mut World, conn: u64) -> Option<Vec<(i64, String, i32, i16)>> {
    match w.recv(conn)? {
        (_, ResponseKind::WriteTxnMarkers(r)) => Some(
            r.markers
                .iter()
                .flat_map(|m| {
                    m.topics.iter().flat_map(move |t| {
                        t.partitions.iter().map(move |p| {
                            (
                                m.producer_id.0,
                                t.name.0.to_string(),
                                p.partition_index,
                                p.error_code,
                            )
                        })
                    })
                })
                .collect(),
        ),
        other => panic!("expected a WriteTxnMarkers answer, got {other:?}"),
    }
}

/// What `kafka-transactions.sh abort` sends for a-0: the error of a-0.
fn abort_a0(w: &mut World, conn: u64, pid: i64, epoch: i16, coordinator_epoch: i32) -> i16 {
    send_markers(
        w,
        conn,
        vec![marker(pid, epoch, coordinator_epoch, false, &[("a", 0)])],
    );
    let results = markers_answer(w, conn).expect("answered");
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!((results[0].0, results[0].2), (pid, 0));
    results[0].3
}

fn fetch_a0(w: &mut World, read_committed: bool) -> fetch_response::PartitionData {
    w.send(7, 12, &fetch_isolated("a", 0, 0, read_committed));
    fetch_answer(w, 7).unwrap()
}

/// a-0's aborted transactions as a read_committed fetch from 0 lists them:
/// (producer id, first offset).
fn aborted_a0(w: &mut World) -> Vec<(i64, i64)> {
    fetch_a0(w, true)
        .aborted_transactions
        .expect("read_committed gets a list")
        .iter()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect()
}

/// a-0's producers as DescribeProducers shows them: (id, epoch,
/// coordinator epoch, current transaction start offset).
fn producers_a0(w: &mut World) -> Vec<(i64, i32, i32, i64)> {
    let req = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(name("a"))
        .with_partition_indexes(vec![0])]);
    w.send(8, 0, &req);
    let Some((_, ResponseKind::DescribeProducers(r))) = w.recv(8) else {
        panic!("expected a DescribeProducers answer");
    };
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, NONE);
    p.active_producers
        .iter()
        .map(|s| {
            (
                s.producer_id.0,
                s.producer_epoch,
                s.coordinator_epoch,
                s.current_txn_start_offset,
            )
        })
        .collect()
}

#[test]
fn an_abort_ends_a_hanging_transaction_once_its_marker_is_synced() {
    let mut w = world();
    let (pid, epoch) = hang(&mut w, 1, "t", 3); // offsets 0-2
    assert_eq!(plain(&mut w, 2), 3);
    assert_eq!(latest_offset(&mut w, 2, "a", 0, true), 0, "held back");
    assert_eq!(latest_offset(&mut w, 2, "a", 0, false), 4);
    // What kafka-transactions.sh finds: the transaction starting at 0, and a
    // producer that never had a marker (coordinator epoch -1; the tool then
    // sends 0).
    assert_eq!(producers_a0(&mut w), vec![(pid, epoch as i32, -1, 0)]);

    w.auto_io = false;
    send_markers(
        &mut w,
        TOOL,
        vec![marker(pid, epoch, 0, false, &[("a", 0)])],
    );
    assert_eq!(
        markers_answer(&mut w, TOOL),
        None,
        "not answered before the marker is synced"
    );
    assert_eq!(
        latest_offset(&mut w, 2, "a", 0, true),
        0,
        "the LSO waits for the marker to be durable"
    );
    assert_eq!(latest_offset(&mut w, 2, "a", 0, false), 4);
    w.complete_io();
    assert_eq!(
        markers_answer(&mut w, TOOL),
        Some(vec![(pid, "a".into(), 0, NONE)])
    );
    w.auto_io = true;

    // The marker is at 4: the LSO is the high watermark.
    assert_eq!(latest_offset(&mut w, 2, "a", 0, false), 5);
    assert_eq!(latest_offset(&mut w, 2, "a", 0, true), 5);
    let rc = fetch_a0(&mut w, true);
    assert_eq!((rc.high_watermark, rc.last_stable_offset), (5, 5));
    assert_eq!(aborted_a0(&mut w), vec![(pid, 0)]);
    // The records are all sent; the client drops 0-2 (aborted) and the marker.
    let offsets: Vec<i64> = decode_values(rc.records.unwrap())
        .iter()
        .map(|(o, _)| *o)
        .collect();
    assert_eq!(offsets, vec![0, 1, 2, 3, 4]);
    assert!(fetch_a0(&mut w, false).aborted_transactions.is_none());
    // No transaction open any more; the marker's coordinator epoch is kept.
    assert_eq!(producers_a0(&mut w), vec![(pid, epoch as i32, 0, -1)]);
}

#[test]
fn the_abort_survives_a_power_cut() {
    let mut w = world();
    let (pid, epoch) = hang(&mut w, 1, "t", 2); // 0-1
    assert_eq!(plain(&mut w, 2), 2);
    assert_eq!(abort_a0(&mut w, TOOL, pid, epoch, 4), NONE); // marker at 3
    w.restart(true);
    assert_eq!(latest_offset(&mut w, 2, "a", 0, false), 4);
    assert_eq!(latest_offset(&mut w, 2, "a", 0, true), 4);
    assert_eq!(aborted_a0(&mut w), vec![(pid, 0)]);
    assert_eq!(
        producers_a0(&mut w),
        vec![(pid, epoch as i32, 4, -1)],
        "the coordinator epoch is read back from the marker"
    );
    // And the fence it sets holds after the restart too.
    assert_eq!(abort_a0(&mut w, TOOL, pid, epoch, 3), COORDINATOR_FENCED);
    assert_eq!(
        latest_offset(&mut w, 2, "a", 0, false),
        4,
        "nothing written"
    );
}

#[test]
fn unknown_partitions_fail_alone() {
    let mut w = world();
    let (pid, epoch) = hang(&mut w, 1, "t", 1);
    send_markers(
        &mut w,
        TOOL,
        vec![marker(
            pid,
            epoch,
            0,
            false,
            &[("nope", 0), ("a", 5), ("a", -1), ("a", 0)],
        )],
    );
    let results = markers_answer(&mut w, TOOL).unwrap();
    assert_eq!(
        results,
        vec![
            (pid, "nope".into(), 0, UNKNOWN_TOPIC_OR_PARTITION),
            (pid, "a".into(), 5, UNKNOWN_TOPIC_OR_PARTITION),
            (pid, "a".into(), -1, UNKNOWN_TOPIC_OR_PARTITION),
            (pid, "a".into(), 0, NONE),
        ]
    );
    assert_eq!(latest_offset(&mut w, 2, "a", 0, true), 2);
}

#[test]
fn epochs_are_checked_as_for_a_coordinator_append() {
    let mut w = world();
    let (pid, epoch) = hang(&mut w, 1, "t", 1);
    // A new InitProducerId fences the producer: the coordinator aborts the
    // transaction with a marker at epoch + 1 (answering
    // CONCURRENT_TRANSACTIONS), and the retry raises the epoch again.
    let (error, _, _) = init_txn(&mut w, 1, "t", 60_000);
    assert_eq!(error, ResponseError::ConcurrentTransactions.code());
    let (error, pid2, epoch2) = init_txn(&mut w, 1, "t", 60_000);
    assert_eq!((error, pid2, epoch2), (NONE, pid, epoch + 2));
    let end = latest_offset(&mut w, 2, "a", 0, false);
    assert_eq!(latest_offset(&mut w, 2, "a", 0, true), end);
    assert_eq!(
        abort_a0(&mut w, TOOL, pid, epoch, 0),
        INVALID_PRODUCER_EPOCH,
        "an older producer epoch"
    );
    // The coordinator's marker carried coordinator epoch 0: -1 is older.
    assert_eq!(abort_a0(&mut w, TOOL, pid, epoch2, -1), COORDINATOR_FENCED);
    assert_eq!(
        latest_offset(&mut w, 2, "a", 0, false),
        end,
        "refused markers are not written"
    );
    // A producer id and epoch the request cannot mean.
    assert_eq!(abort_a0(&mut w, TOOL, -1, 0, 0), INVALID_REQUEST);
    assert_eq!(abort_a0(&mut w, TOOL, pid, -1, 0), INVALID_REQUEST);
    // The current epochs pass, with no transaction open here: appended all
    // the same, and nothing else changes.
    assert_eq!(abort_a0(&mut w, TOOL, pid, epoch2, 0), NONE);
    assert_eq!(latest_offset(&mut w, 2, "a", 0, false), end + 1);
    assert_eq!(latest_offset(&mut w, 2, "a", 0, true), end + 1);
    assert_eq!(aborted_a0(&mut w), vec![(pid, 0)], "only the first abort");
    // A producer a-0 never saw passes any epoch.
    assert_eq!(abort_a0(&mut w, TOOL, 4242, 3, -1), NONE);
    assert!(producers_a0(&mut w).contains(&(4242, 3, -1, -1)));
}

#[test]
fn results_are_grouped_by_producer_and_topic() {
    let mut w = world();
    let (p1, e1) = hang(&mut w, 1, "t1", 1);
    let (p2, e2) = hang(&mut w, 2, "t2", 1);
    assert_eq!(latest_offset(&mut w, 3, "a", 0, true), 0);
    send_markers(
        &mut w,
        TOOL,
        vec![
            marker(p1, e1, 0, false, &[("a", 0)]),
            marker(p2, e2, 0, false, &[("a", 0), ("b", 0)]),
            marker(p1, e1, 0, false, &[("b", 0)]),
        ],
    );
    assert_eq!(
        markers_answer(&mut w, TOOL).unwrap(),
        vec![
            (p1, "a".into(), 0, NONE),
            (p1, "b".into(), 0, NONE),
            (p2, "a".into(), 0, NONE),
            (p2, "b".into(), 0, NONE),
        ]
    );
    assert_eq!(aborted_a0(&mut w), vec![(p1, 0), (p2, 1)]);
    assert_eq!(latest_offset(&mut w, 3, "a", 0, true), 4);
}

#[test]
fn the_coordinator_ending_the_transaction_later_changes_nothing_here() {
    let mut w = world();
    let (pid, epoch) = hang(&mut w, 1, "t", 2);
    assert_eq!(abort_a0(&mut w, TOOL, pid, epoch, 0), NONE); // marker at 2
                                                             // The coordinator still holds "t" Ongoing with a-0 added: the producer
                                                             // commits, and the coordinator's marker finds nothing open on a-0.
    assert_eq!(end_txn(&mut w, 1, "t", pid, epoch, true), Some(NONE));
    assert_eq!(latest_offset(&mut w, 2, "a", 0, false), 4);
    assert_eq!(latest_offset(&mut w, 2, "a", 0, true), 4);
    assert_eq!(
        aborted_a0(&mut w),
        vec![(pid, 0)],
        "still aborted: read_committed readers skip the records"
    );
    assert_eq!(producers_a0(&mut w), vec![(pid, epoch as i32, 0, -1)]);
}

#[test]
fn a_marker_cut_by_a_failed_sync_fails_and_the_transaction_is_open_again() {
    let mut w = world();
    let (pid, epoch) = hang(&mut w, 1, "t", 2);
    w.fail_next_sync = true;
    assert_eq!(abort_a0(&mut w, TOOL, pid, epoch, 0), STORAGE_ERROR);
    assert_eq!(
        latest_offset(&mut w, 2, "a", 0, false),
        2,
        "the marker is cut"
    );
    assert_eq!(latest_offset(&mut w, 2, "a", 0, true), 0, "open again");
    assert!(aborted_a0(&mut w).is_empty());
    assert_eq!(abort_a0(&mut w, TOOL, pid, epoch, 0), NONE, "the retry");
    assert_eq!(latest_offset(&mut w, 2, "a", 0, true), 3);
    assert_eq!(aborted_a0(&mut w), vec![(pid, 0)]);
}

// ---- with the authorizer on ---------------------------------------------

const ADMIN: u64 = 99;
const ALICE: u64 = 1;
const BOB: u64 = 2;

/// The admin allows `principal` `op` on the cluster.
fn allow_on_cluster(w: &mut World, principal: &str, op: Op) {
    let acl = Acl {
        principal,
        resource_type: resource::CLUSTER,
        name: "kafka-cluster",
        pattern_type: pattern::LITERAL,
        op,
        permission: permission::ALLOW,
    };
    create_acl(w, ADMIN, acl);
}

#[test]
fn cluster_action_or_alter_on_the_cluster_is_needed() {
    let mut w = World::new(BrokerConfig {
        authorizer: authorizer_on(),
        ..Default::default()
    });
    connect_as(&mut w, ADMIN, "User:admin");
    connect_as(&mut w, ALICE, "User:alice");
    connect_as(&mut w, BOB, "User:bob");
    create_topic(&mut w, "a", 1);
    create_topic(&mut w, "b", 1);
    let (pid, epoch) = hang(&mut w, ADMIN, "t", 2);
    let lso = |w: &mut World| latest_offset(w, ADMIN, "a", 0, true);

    // Nobody allowed: every partition refused, nothing written.
    send_markers(
        &mut w,
        ALICE,
        vec![marker(pid, epoch, 0, false, &[("a", 0), ("nope", 1)])],
    );
    assert_eq!(
        markers_answer(&mut w, ALICE).unwrap(),
        vec![
            (pid, "a".into(), 0, CLUSTER_DENIED),
            (pid, "nope".into(), 1, CLUSTER_DENIED),
        ]
    );
    assert_eq!(latest_offset(&mut w, ADMIN, "a", 0, false), 2);
    assert_eq!(lso(&mut w), 0);

    // CLUSTER_ACTION on the cluster allows it; so does ALTER (Kafka checks
    // ALTER first); a super user needs no ACL.
    allow_on_cluster(&mut w, "User:alice", Op::ClusterAction);
    assert_eq!(abort_a0(&mut w, ALICE, pid, epoch, 0), NONE);
    assert_eq!(lso(&mut w), 3);
    assert_eq!(abort_a0(&mut w, BOB, pid, epoch, 0), CLUSTER_DENIED);
    allow_on_cluster(&mut w, "User:bob", Op::Alter);
    assert_eq!(abort_a0(&mut w, BOB, pid, epoch, 0), NONE);
    assert_eq!(abort_a0(&mut w, ADMIN, pid, epoch, 0), NONE);
    assert_eq!(latest_offset(&mut w, ADMIN, "a", 0, false), 5);
    assert_eq!(lso(&mut w), 5);
}
