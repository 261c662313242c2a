//! Transactions: the EndTxn decision table, every InitProducerId state,
//! markers and durability, LSO and aborted lists, timeouts, restarts.

mod support;

use bytes::Bytes;
use doze_core::BrokerConfig;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::*;
use support::requests::*;
use support::txn::*;
use support::*;

const NONE: i16 = 0;
const INVALID_REQUEST: i16 = 42;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const NOT_COORDINATOR: i16 = 16;
const PRODUCER_FENCED: i16 = 90;

fn world() -> World {
    world_with(BrokerConfig::default())
}

/// Topics "a" and "b" (one partition each) on a broker with `config`.
fn world_with(config: BrokerConfig) -> World {
    let mut w = World::new(config);
    create_topic(&mut w, "a", 1);
    create_topic(&mut w, "b", 1);
    w
}

/// A broker that looks for timed-out transactions every second.
fn timeout_world() -> World {
    world_with(BrokerConfig {
        transaction_abort_check_interval_ms: 1_000,
        ..Default::default()
    })
}

/// Init, add a0 and b0, write `n` records to each; returns (pid, epoch).
fn open_txn(w: &mut World, id: &str, n: usize) -> (i64, i16) {
    open_txn_with_timeout(w, id, n, 60_000)
}

fn open_txn_with_timeout(w: &mut World, id: &str, n: usize, timeout_ms: i32) -> (i64, i16) {
    let (err, pid, epoch) = init_txn(w, 1, id, timeout_ms);
    assert_eq!(err, NONE);
    assert_eq!(
        add_partitions(w, 1, id, pid, epoch, &[("a", 0), ("b", 0)]),
        vec![NONE, NONE]
    );
    write(w, pid, epoch, 0, n);
    (pid, epoch)
}

fn write(w: &mut World, pid: i64, epoch: i16, seq: i32, n: usize) {
    let values: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("v{}", seq as usize + i).into_bytes())
        .collect();
    let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    for t in ["a", "b"] {
        w.send(
            1,
            9,
            &produce_req(t, 0, txn_batch(&refs, pid, epoch, seq), -1),
        );
        assert_eq!(
            produce_answer(w, 1).unwrap().0,
            NONE,
            "transactional produce to {t}"
        );
    }
}

fn fetch_part(w: &mut World, topic: &str, read_committed: bool) -> fetch_response::PartitionData {
    w.send(7, 12, &fetch_isolated(topic, 0, 0, read_committed));
    fetch_answer(w, 7).unwrap()
}

fn state_of(w: &mut World, id: &str) -> (String, i64, i16) {
    w.send(
        8,
        0,
        &DescribeTransactionsRequest::default().with_transactional_ids(vec![tid(id)]),
    );
    match w.recv(8) {
        Some((_, ResponseKind::DescribeTransactions(r))) => {
            let s = &r.transaction_states[0];
            assert_eq!(s.error_code, NONE);
            (
                s.transaction_state.to_string(),
                s.producer_id.0,
                s.producer_epoch,
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn commit_then_abort_markers_take_offsets_and_readers_see_what_they_should() {
    let mut w = world();
    let (pid, epoch) = open_txn(&mut w, "t1", 3);
    assert_eq!(end_txn(&mut w, 1, "t1", pid, epoch, true), Some(NONE));
    write_again(&mut w, "t1", pid, epoch, 3);
    assert_eq!(end_txn(&mut w, 1, "t1", pid, epoch, false), Some(NONE));
    for t in ["a", "b"] {
        // 3 committed + 1 marker + 3 aborted + 1 marker.
        assert_eq!(latest_offset(&mut w, 2, t, 0, false), 8);
        assert_eq!(latest_offset(&mut w, 2, t, 0, true), 8);
        let rc = fetch_part(&mut w, t, true);
        assert_eq!(rc.last_stable_offset, 8);
        let aborted = rc
            .aborted_transactions
            .clone()
            .expect("read_committed gets a list");
        assert_eq!(aborted.len(), 1);
        assert_eq!(
            (aborted[0].producer_id.0, aborted[0].first_offset),
            (pid, 4)
        );
        let all = decode_values(rc.records.unwrap());
        // Data records only (the decoder also yields markers as control records).
        let data: Vec<i64> = all
            .iter()
            .map(|(o, _)| *o)
            .filter(|o| *o != 3 && *o != 7)
            .collect();
        assert_eq!(data, vec![0, 1, 2, 4, 5, 6]);
        let ru = fetch_part(&mut w, t, false);
        assert!(
            ru.aborted_transactions.is_none(),
            "read_uncommitted gets no aborted list"
        );
    }
}

fn write_again(w: &mut World, id: &str, pid: i64, epoch: i16, seq: i32) {
    assert_eq!(
        add_partitions(w, 1, id, pid, epoch, &[("a", 0), ("b", 0)]),
        vec![NONE, NONE]
    );
    write(w, pid, epoch, seq, 3);
}

#[test]
fn an_open_transaction_holds_read_committed_back() {
    let mut w = world();
    let (pid, epoch) = open_txn(&mut w, "t1", 2);
    // A plain record after the open transaction.
    w.send(1, 9, &produce_req("a", 0, batch(&[b"plain"], T0_MS), -1));
    assert_eq!(produce_answer(&mut w, 1), Some((NONE, 2)));
    assert_eq!(
        latest_offset(&mut w, 2, "a", 0, true),
        0,
        "LSO at the open transaction's first offset"
    );
    assert_eq!(latest_offset(&mut w, 2, "a", 0, false), 3);
    let rc = fetch_part(&mut w, "a", true);
    assert_eq!(rc.last_stable_offset, 0);
    assert!(
        rc.records.unwrap().is_empty(),
        "nothing at or above the LSO"
    );
    assert_eq!(end_txn(&mut w, 1, "t1", pid, epoch, true), Some(NONE));
    assert_eq!(latest_offset(&mut w, 2, "a", 0, true), 4);
    let rc = fetch_part(&mut w, "a", true);
    assert_eq!(
        decode_values(rc.records.unwrap()).len(),
        4,
        "2 data + plain + marker"
    );
}

#[test]
fn decision_table() {
    let mut w = world();
    // Empty: both decisions are INVALID_TXN_STATE.
    let (_, pid, epoch) = init_txn(&mut w, 1, "t", 60_000);
    assert_eq!(
        end_txn(&mut w, 1, "t", pid, epoch, true),
        Some(INVALID_TXN_STATE)
    );
    assert_eq!(
        end_txn(&mut w, 1, "t", pid, epoch, false),
        Some(INVALID_TXN_STATE)
    );
    // Ongoing → commit; while carried out both decisions CONCURRENT_TRANSACTIONS.
    assert_eq!(
        add_partitions(&mut w, 1, "t", pid, epoch, &[("a", 0)]),
        vec![NONE]
    );
    w.auto_io = false;
    send_end_txn(&mut w, 1, "t", pid, epoch, true, 3);
    w.complete_io(); // PrepareCommit stored; markers appended, their sync pending
    assert_eq!(state_of(&mut w, "t").0, "PrepareCommit");
    assert_eq!(
        end_txn(&mut w, 2, "t", pid, epoch, true),
        Some(CONCURRENT_TRANSACTIONS)
    );
    assert_eq!(
        end_txn(&mut w, 2, "t", pid, epoch, false),
        Some(CONCURRENT_TRANSACTIONS)
    );
    w.auto_io = true;
    w.drain();
    assert_eq!(end_txn_answer(&mut w, 1), Some(NONE));
    // CompleteCommit: the same decision succeeds, the other is INVALID_TXN_STATE.
    assert_eq!(end_txn(&mut w, 1, "t", pid, epoch, true), Some(NONE));
    assert_eq!(
        end_txn(&mut w, 1, "t", pid, epoch, false),
        Some(INVALID_TXN_STATE)
    );
    assert_eq!(state_of(&mut w, "t").0, "CompleteCommit");
    // CompleteAbort: the mirror image.
    assert_eq!(
        add_partitions(&mut w, 1, "t", pid, epoch, &[("a", 0)]),
        vec![NONE]
    );
    assert_eq!(end_txn(&mut w, 1, "t", pid, epoch, false), Some(NONE));
    assert_eq!(end_txn(&mut w, 1, "t", pid, epoch, false), Some(NONE));
    assert_eq!(
        end_txn(&mut w, 1, "t", pid, epoch, true),
        Some(INVALID_TXN_STATE)
    );
    assert_eq!(state_of(&mut w, "t").0, "CompleteAbort");
    // Wrong epoch, wrong producer id, unknown id, empty id.
    assert_eq!(
        end_txn(&mut w, 1, "t", pid, epoch + 1, true),
        Some(PRODUCER_FENCED)
    );
    send_end_txn(&mut w, 1, "t", pid, epoch + 1, true, 1);
    assert_eq!(
        end_txn_answer(&mut w, 1),
        Some(INVALID_PRODUCER_EPOCH),
        "v1 predates PRODUCER_FENCED"
    );
    assert_eq!(
        end_txn(&mut w, 1, "t", pid + 1, epoch, true),
        Some(INVALID_PRODUCER_ID_MAPPING)
    );
    assert_eq!(
        end_txn(&mut w, 1, "nope", pid, epoch, true),
        Some(INVALID_PRODUCER_ID_MAPPING)
    );
    assert_eq!(
        end_txn(&mut w, 1, "", pid, epoch, true),
        Some(INVALID_REQUEST)
    );
}

#[test]
fn end_txn_is_answered_once_the_decision_and_markers_are_durable() {
    let mut w = world();
    let (pid, epoch) = open_txn(&mut w, "t", 1);
    w.auto_io = false;
    send_end_txn(&mut w, 1, "t", pid, epoch, true, 3);
    assert!(end_txn_answer(&mut w, 1).is_none());
    w.complete_io(); // decision stored
    assert_eq!(
        w.pending_syncs.len(),
        1,
        "markers appended and a sync asked for"
    );
    assert!(
        end_txn_answer(&mut w, 1).is_none(),
        "markers not yet durable"
    );
    w.complete_io(); // markers durable: answered
    assert_eq!(
        end_txn_answer(&mut w, 1),
        Some(NONE),
        "two durable steps: the decision and the markers"
    );
    assert!(
        w.pending_meta.is_empty(),
        "a commit without offsets owes its Complete record instead of writing it"
    );
    assert_eq!(state_of(&mut w, "t").0, "CompleteCommit");
    // The producer's next transaction starts at once, and its record
    // supersedes the decision in meta.db.
    w.send(
        1,
        3,
        &AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(tid("t"))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(name("a"))
                .with_partitions(vec![0])]),
    );
    assert_eq!(w.pending_meta.len(), 1, "one write: the Ongoing record");
    w.complete_io();
    match w.recv(1) {
        Some((_, ResponseKind::AddPartitionsToTxn(r))) => {
            let p = &r.results_by_topic_v3_and_below[0].results_by_partition[0];
            assert_eq!(p.partition_error_code, NONE);
        }
        other => panic!("expected AddPartitionsToTxn answer, got {other:?}"),
    }
    assert_eq!(state_of(&mut w, "t").0, "Ongoing");
    w.advance(doze_core::limits::TXN_COMPLETE_OWED_MS * 2);
    assert!(
        w.pending_meta.is_empty(),
        "nothing owed once the next record is stored"
    );
}

#[test]
fn an_owed_complete_record_is_written_in_time_and_retried_until_stored() {
    let mut w = world();
    let (pid, epoch) = open_txn(&mut w, "t", 2);
    assert_eq!(end_txn(&mut w, 1, "t", pid, epoch, true), Some(NONE));
    w.auto_io = false;
    assert!(w.pending_meta.is_empty(), "owed, not written");
    w.advance(doze_core::limits::TXN_COMPLETE_OWED_MS);
    assert_eq!(w.pending_meta.len(), 1, "written once its time came");
    w.fail_next_meta = true;
    w.complete_io(); // the write fails: still owed
    assert_eq!(state_of(&mut w, "t").0, "CompleteCommit");
    w.advance(doze_core::limits::TXN_COMPLETE_OWED_MS);
    assert_eq!(w.pending_meta.len(), 1, "tried again");
    w.complete_io();
    w.auto_io = true;
    // Stored: a power cut now finds CompleteCommit, and nothing is redone.
    w.restart(true);
    assert_eq!(state_of(&mut w, "t").0, "CompleteCommit");
    assert_eq!(
        latest_offset(&mut w, 2, "a", 0, true),
        3,
        "2 records + 1 marker, not written again"
    );
}

#[test]
fn a_stopping_broker_writes_the_owed_complete_records() {
    let mut w = world();
    let (pid, epoch) = open_txn(&mut w, "t", 2);
    assert_eq!(end_txn(&mut w, 1, "t", pid, epoch, false), Some(NONE));
    w.stop_and_restart();
    assert_eq!(state_of(&mut w, "t").0, "CompleteAbort");
    assert_eq!(
        latest_offset(&mut w, 2, "a", 0, false),
        3,
        "2 records + 1 marker: the clean stop stored the Complete record"
    );
}

#[test]
fn a_power_cut_after_end_txn_before_the_complete_record_keeps_the_commit_and_its_offsets() {
    let mut w = world();
    let (_, pid, epoch) = init_txn(&mut w, 1, "t", 60_000);
    assert_eq!(
        add_partitions(&mut w, 1, "t", pid, epoch, &[("a", 0), ("b", 0)]),
        vec![NONE, NONE]
    );
    write(&mut w, pid, epoch, 0, 2);
    stage_offset(&mut w, "t", pid, epoch, "g", "a", 9);
    w.auto_io = false;
    send_end_txn(&mut w, 1, "t", pid, epoch, true, 3);
    w.complete_io(); // decision (with the staged offset) stored
    w.complete_io(); // markers durable
    assert_eq!(end_txn_answer(&mut w, 1), Some(NONE));
    assert_eq!(w.pending_meta.len(), 1, "Complete record not yet stored");
    w.auto_io = true;
    w.restart(true); // the Complete write is lost
    assert_eq!(state_of(&mut w, "t").0, "CompleteCommit");
    assert_eq!(
        committed(&mut w, "g"),
        9,
        "the commit's offset was stored with the decision"
    );
    // The stored decision is carried out again at start-up, but the marker
    // is durable in the log already: it is not written a second time. The
    // LSO (read_committed latest) is the log end: nothing is held back.
    let log = w.broker.partition("a", 0).unwrap();
    assert_eq!(log.log_end_offset(), 3);
    assert_eq!(latest_offset(&mut w, 2, "a", 0, true), 3);
}

#[test]
fn a_failed_marker_sync_answers_concurrent_and_the_coordinator_finishes_alone() {
    let mut w = world();
    let (pid, epoch) = open_txn(&mut w, "t", 2);
    w.auto_io = false;
    send_end_txn(&mut w, 1, "t", pid, epoch, true, 3);
    w.complete_io(); // decision stored, markers appended
    w.fail_next_sync = true;
    w.complete_io(); // the marker sync fails: logs cut back, markers lost
    assert_eq!(end_txn_answer(&mut w, 1), Some(CONCURRENT_TRANSACTIONS));
    assert_eq!(
        state_of(&mut w, "t").0,
        "PrepareCommit",
        "the decision stands"
    );
    // A client asking again meanwhile: still being carried out.
    assert_eq!(
        end_txn(&mut w, 2, "t", pid, epoch, false),
        Some(CONCURRENT_TRANSACTIONS)
    );
    w.auto_io = true;
    w.drain();
    w.advance(doze_core::limits::TXN_RETRY_BACKOFF_MS);
    assert_eq!(state_of(&mut w, "t").0, "CompleteCommit");
    assert_eq!(
        end_txn(&mut w, 1, "t", pid, epoch, true),
        Some(NONE),
        "asking again gets the outcome"
    );
    assert_eq!(
        end_txn(&mut w, 1, "t", pid, epoch, false),
        Some(INVALID_TXN_STATE)
    );
    assert_eq!(
        latest_offset(&mut w, 2, "a", 0, true),
        3,
        "2 records + 1 marker, committed"
    );
}

#[test]
fn a_failed_decision_write_is_not_coordinator_and_changes_nothing() {
    let mut w = world();
    let (pid, epoch) = open_txn(&mut w, "t", 1);
    w.fail_next_meta = true;
    assert_eq!(
        end_txn(&mut w, 1, "t", pid, epoch, true),
        Some(NOT_COORDINATOR)
    );
    assert_eq!(state_of(&mut w, "t").0, "Ongoing");
    assert_eq!(
        end_txn(&mut w, 1, "t", pid, epoch, false),
        Some(NONE),
        "the client may still decide"
    );
    assert_eq!(state_of(&mut w, "t").0, "CompleteAbort");
}

#[test]
fn a_failed_complete_write_is_retried_and_the_commit_stands() {
    let mut w = world();
    // A commit with offsets stores its Complete record at once.
    let (pid, epoch) = open_txn(&mut w, "t", 1);
    stage_offset(&mut w, "t", pid, epoch, "g", "a", 9);
    w.auto_io = false;
    send_end_txn(&mut w, 1, "t", pid, epoch, true, 3);
    w.complete_io(); // decision
    w.complete_io(); // markers durable, EndTxn answered, Complete write emitted
    assert_eq!(end_txn_answer(&mut w, 1), Some(NONE));
    w.fail_next_meta = true;
    w.complete_io(); // Complete write fails
    assert_eq!(
        state_of(&mut w, "t").0,
        "PrepareCommit",
        "memory follows meta.db"
    );
    assert_eq!(
        end_txn(&mut w, 2, "t", pid, epoch, true),
        Some(CONCURRENT_TRANSACTIONS),
        "while the coordinator retries"
    );
    w.auto_io = true;
    w.advance(doze_core::limits::TXN_RETRY_BACKOFF_MS);
    assert_eq!(state_of(&mut w, "t").0, "CompleteCommit");
    assert_eq!(end_txn(&mut w, 2, "t", pid, epoch, true), Some(NONE));
}

#[test]
fn init_producer_id_states() {
    let mut w = world();
    assert_eq!(init_txn(&mut w, 1, "", 1000).0, INVALID_REQUEST);
    assert_eq!(
        init_txn(&mut w, 1, "t", 15 * 60 * 1000 + 1).0,
        INVALID_TRANSACTION_TIMEOUT
    );
    assert_eq!(init_txn(&mut w, 1, "t", 0).0, INVALID_TRANSACTION_TIMEOUT);
    // New: epoch 0. Again from Empty: the epoch is raised, fencing the first.
    let (e, pid, epoch0) = init_txn(&mut w, 1, "t", 60_000);
    assert_eq!((e, epoch0), (NONE, 0));
    let (e, pid1, epoch1) = init_txn(&mut w, 2, "t", 60_000);
    assert_eq!((e, pid1, epoch1), (NONE, pid, 1));
    assert_eq!(
        add_partitions(&mut w, 1, "t", pid, epoch0, &[("a", 0)]),
        vec![PRODUCER_FENCED]
    );
    // Ongoing: the owner is fenced and its transaction aborted; CONCURRENT_TRANSACTIONS.
    assert_eq!(
        add_partitions(&mut w, 2, "t", pid, epoch1, &[("a", 0)]),
        vec![NONE]
    );
    w.send(
        2,
        9,
        &produce_req("a", 0, txn_batch(&[b"x"], pid, epoch1, 0), -1),
    );
    assert_eq!(produce_answer(&mut w, 2).unwrap().0, NONE);
    assert_eq!(init_txn(&mut w, 3, "t", 60_000).0, CONCURRENT_TRANSACTIONS);
    assert_eq!(state_of(&mut w, "t").0, "CompleteAbort");
    let (e, _, epoch3) = init_txn(&mut w, 3, "t", 60_000);
    assert_eq!(
        (e, epoch3),
        (NONE, 3),
        "fenced at 2 for the abort, raised to 3 on the retry"
    );
    // The fenced producer's late writes and decisions are refused.
    w.send(
        2,
        9,
        &produce_req("a", 0, txn_batch(&[b"late"], pid, epoch1, 1), -1),
    );
    assert_eq!(produce_answer(&mut w, 2).unwrap().0, INVALID_PRODUCER_EPOCH);
    assert_eq!(
        end_txn(&mut w, 2, "t", pid, epoch1, true),
        Some(PRODUCER_FENCED)
    );
    // read_committed sees nothing of the aborted transaction.
    let rc = fetch_part(&mut w, "a", true);
    assert_eq!(rc.aborted_transactions.unwrap().len(), 1);
    // Prepare*: CONCURRENT_TRANSACTIONS.
    assert_eq!(
        add_partitions(&mut w, 3, "t", pid, epoch3, &[("a", 0)]),
        vec![NONE]
    );
    w.auto_io = false;
    send_end_txn(&mut w, 3, "t", pid, epoch3, true, 3);
    w.complete_io();
    assert_eq!(init_txn(&mut w, 4, "t", 60_000).0, CONCURRENT_TRANSACTIONS);
    w.auto_io = true;
    w.drain();
    assert_eq!(end_txn_answer(&mut w, 3), Some(NONE));
}

#[test]
fn init_producer_id_kip_360() {
    let mut w = world();
    let (_, pid, e0) = init_txn(&mut w, 1, "t", 60_000);
    // The current owner bumps its own epoch.
    let (e, pid_b, e1) = init_txn_v(&mut w, 1, "t", 60_000, 4, Some((pid, e0)));
    assert_eq!((e, pid_b, e1), (NONE, pid, e0 + 1));
    // A retry naming the previous epoch gets the same epoch back.
    let (e, _, e1_again) = init_txn_v(&mut w, 1, "t", 60_000, 4, Some((pid, e0)));
    assert_eq!((e, e1_again), (NONE, e1));
    // Another producer id: fenced (INVALID_PRODUCER_EPOCH before v4).
    assert_eq!(
        init_txn_v(&mut w, 1, "t", 60_000, 4, Some((pid + 100, 0))).0,
        PRODUCER_FENCED
    );
    assert_eq!(
        init_txn_v(&mut w, 1, "t", 60_000, 3, Some((pid + 100, 0))).0,
        INVALID_PRODUCER_EPOCH
    );
}

#[test]
fn an_exhausted_epoch_gets_a_new_producer_id() {
    let mut w = world();
    let (_, pid, _) = init_txn(&mut w, 1, "t", 60_000);
    let mut last = (pid, 0);
    for _ in 0..(i16::MAX as i32) {
        let (e, p, ep) = init_txn(&mut w, 1, "t", 60_000);
        assert_eq!(e, NONE);
        last = (p, ep);
        if p != pid {
            break;
        }
    }
    assert_ne!(last.0, pid, "a new producer id once the epoch is exhausted");
    assert_eq!(last.1, 0);
}

#[test]
fn a_timed_out_transaction_is_aborted_and_its_producer_fenced() {
    let mut w = timeout_world();
    let (pid, epoch) = open_txn_with_timeout(&mut w, "t", 2, 5_000);
    assert_eq!(latest_offset(&mut w, 2, "a", 0, true), 0);
    for _ in 0..5 {
        w.advance(1_000);
    }
    assert_eq!(state_of(&mut w, "t").0, "Ongoing", "not before the timeout");
    w.advance(1_000);
    w.advance(1_000);
    let (state, _, new_epoch) = state_of(&mut w, "t");
    assert_eq!(state, "CompleteAbort");
    assert_eq!(new_epoch, epoch + 1, "the producer is fenced");
    assert_eq!(
        latest_offset(&mut w, 2, "a", 0, true),
        3,
        "the LSO moved past the dead transaction"
    );
    assert_eq!(
        end_txn(&mut w, 1, "t", pid, epoch, true),
        Some(PRODUCER_FENCED)
    );
    w.send(
        1,
        9,
        &produce_req("a", 0, txn_batch(&[b"z"], pid, epoch, 2), -1),
    );
    assert_eq!(produce_answer(&mut w, 1).unwrap().0, INVALID_PRODUCER_EPOCH);
}

#[test]
fn an_open_transaction_survives_a_restart_and_its_timeout_restarts() {
    let mut w = timeout_world();
    let (pid, epoch) = open_txn_with_timeout(&mut w, "t", 2, 10_000);
    for _ in 0..8 {
        w.advance(1_000);
    }
    w.restart(true);
    assert_eq!(
        state_of(&mut w, "t").0,
        "Ongoing",
        "never aborted at start-up"
    );
    assert_eq!(
        latest_offset(&mut w, 2, "a", 0, true),
        0,
        "the LSO is rebuilt from the log"
    );
    for _ in 0..8 {
        w.advance(1_000);
    }
    assert_eq!(
        state_of(&mut w, "t").0,
        "Ongoing",
        "the timeout counts from the restart"
    );
    assert_eq!(
        end_txn(&mut w, 1, "t", pid, epoch, true),
        Some(NONE),
        "the live producer commits"
    );
    assert_eq!(latest_offset(&mut w, 2, "a", 0, true), 3);
}

#[test]
fn a_stored_decision_is_carried_out_after_a_power_cut() {
    let mut w = world();
    let (pid, epoch) = open_txn(&mut w, "t", 2);
    w.auto_io = false;
    send_end_txn(&mut w, 1, "t", pid, epoch, true, 3);
    w.complete_io(); // PrepareCommit stored; markers appended but not synced
    w.restart(true); // the markers are lost with the unsynced bytes
    w.auto_io = true;
    w.drain();
    assert_eq!(
        state_of(&mut w, "t").0,
        "CompleteCommit",
        "the stored commit was carried out"
    );
    for t in ["a", "b"] {
        assert_eq!(latest_offset(&mut w, 2, t, 0, true), 3);
        let rc = fetch_part(&mut w, t, true);
        assert!(rc.aborted_transactions.unwrap().is_empty());
    }
    assert_eq!(end_txn(&mut w, 1, "t", pid, epoch, true), Some(NONE));
}

#[test]
fn a_committed_transaction_survives_a_power_cut() {
    let mut w = world();
    let (pid, epoch) = open_txn(&mut w, "t", 2);
    assert_eq!(end_txn(&mut w, 1, "t", pid, epoch, true), Some(NONE));
    w.restart(true);
    assert_eq!(state_of(&mut w, "t").0, "CompleteCommit");
    // The Complete record was still owed: start-up carried the stored
    // decision out again, finding the markers already in the logs.
    for t in ["a", "b"] {
        assert_eq!(
            latest_offset(&mut w, 2, t, 0, true),
            3,
            "2 records + 1 marker, not written again"
        );
    }
    let rc = fetch_part(&mut w, "a", true);
    assert!(rc.aborted_transactions.unwrap().is_empty());
    assert_eq!(
        end_txn(&mut w, 1, "t", pid, epoch, false),
        Some(INVALID_TXN_STATE)
    );
}

#[test]
fn transactional_produce_refusals() {
    let mut w = world();
    let (_, pid, epoch) = init_txn(&mut w, 1, "t", 60_000);
    w.send(
        1,
        9,
        &produce_req("a", 0, txn_batch(&[b"x"], pid, epoch, 0), -1),
    );
    assert_eq!(
        produce_answer(&mut w, 1).unwrap().0,
        INVALID_TXN_STATE,
        "partition not added"
    );
    assert_eq!(
        add_partitions(&mut w, 1, "t", pid, epoch, &[("a", 0)]),
        vec![NONE]
    );
    w.send(
        1,
        9,
        &produce_req("a", 0, txn_batch(&[b"x"], pid, epoch - 1, 0), -1),
    );
    assert_eq!(
        produce_answer(&mut w, 1).unwrap().0,
        INVALID_PRODUCER_EPOCH,
        "stale epoch"
    );
    w.send(
        1,
        9,
        &produce_req("a", 0, txn_batch(&[b"x"], pid + 77, 0, 0), -1),
    );
    assert_eq!(
        produce_answer(&mut w, 1).unwrap().0,
        INVALID_PRODUCER_ID_MAPPING,
        "unknown producer id"
    );
    assert_eq!(
        add_partitions(&mut w, 1, "t", pid, epoch, &[("nope", 0), ("a", 0)]),
        vec![3, 55]
    );
    assert_eq!(
        w.broker.partition("a", 0).unwrap().log_end_offset(),
        0,
        "nothing was written"
    );
}

#[test]
fn staged_offsets_apply_on_commit_only() {
    let mut w = world();
    let (_, pid, epoch) = init_txn(&mut w, 1, "t", 60_000);
    assert_eq!(
        txn_offset_commit(&mut w, 1, "t", pid, epoch, "g", "a", 0, 5),
        INVALID_TXN_STATE,
        "group not added"
    );
    stage_offset(&mut w, "t", pid, epoch, "g", "a", 5);
    assert_eq!(end_txn(&mut w, 1, "t", pid, epoch, false), Some(NONE));
    assert_eq!(committed(&mut w, "g"), -1, "an abort drops staged offsets");
    stage_offset(&mut w, "t", pid, epoch, "g", "a", 7);
    assert_eq!(committed(&mut w, "g"), -1, "not before the commit");
    assert_eq!(end_txn(&mut w, 1, "t", pid, epoch, true), Some(NONE));
    assert_eq!(committed(&mut w, "g"), 7);
    w.restart(true);
    assert_eq!(committed(&mut w, "g"), 7, "stored with the commit");
}

/// As Kafka's OffsetMetadataManager.onPartitionsDeleted drops pending
/// transactional offsets: an offset staged before its topic was deleted is
/// not applied by the commit, even with the topic created again meanwhile.
#[test]
fn a_commit_drops_offsets_staged_for_a_topic_deleted_since() {
    for created_again in [false, true] {
        let mut w = world();
        let (_, pid, epoch) = init_txn(&mut w, 1, "t", 60_000);
        stage_offset(&mut w, "t", pid, epoch, "g", "a", 5);
        support::groups::delete_topic(&mut w, "a");
        if created_again {
            create_topic(&mut w, "a", 1);
        }
        assert_eq!(end_txn(&mut w, 1, "t", pid, epoch, true), Some(NONE));
        assert_eq!(committed(&mut w, "g"), -1, "created again: {created_again}");
        w.restart(true);
        assert_eq!(committed(&mut w, "g"), -1, "created again: {created_again}");
    }
}

/// The window the test above leaves: the topic's deletion is still in
/// meta.db when the commit's offsets are written. The Complete record waits
/// for that write, so the offsets do not land after the deletion removed
/// every group's offsets of the topic, and a topic created again under the
/// name starts with none.
#[test]
fn a_commit_waits_for_a_deletion_in_flight_of_a_staged_offsets_topic() {
    let mut w = world();
    let (_, pid, epoch) = init_txn(&mut w, 1, "t", 60_000);
    stage_offset(&mut w, "t", pid, epoch, "g", "a", 5);
    w.auto_io = false;
    send_end_txn(&mut w, 1, "t", pid, epoch, true, 3);
    let req = DeleteTopicsRequest::default()
        .with_topic_names(vec![name("a")])
        .with_timeout_ms(30_000);
    w.send(9, 5, &req);
    assert_eq!(w.pending_meta.len(), 2, "the decision, then the deletion");
    w.complete_first_meta();
    w.complete_syncs();
    assert_eq!(
        end_txn_answer(&mut w, 1),
        Some(NONE),
        "the outcome is durable: answered without waiting"
    );
    w.auto_io = true;
    w.complete_io();
    w.advance(1_000);
    assert!(matches!(
        w.recv(9),
        Some((_, ResponseKind::DeleteTopics(r))) if r.responses[0].error_code == NONE
    ));
    assert!(
        !w.meta.keys().any(|k| k.starts_with(b"offset/")),
        "no offset of the deleted topic in meta.db"
    );
    create_topic(&mut w, "a", 1);
    assert_eq!(committed(&mut w, "g"), -1);
    w.restart(true);
    assert_eq!(committed(&mut w, "g"), -1);
    // The id is free again: its next transaction begins.
    let (_, pid2, _) = init_txn(&mut w, 1, "t", 60_000);
    assert_eq!(pid2, pid);
}

fn committed(w: &mut World, group: &str) -> i64 {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(kafka_protocol::protocol::StrBytes::from_string(
            group.to_string(),
        )))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(name("a"))
            .with_partition_indexes(vec![0])]));
    w.send(9, 5, &req);
    match w.recv(9) {
        Some((_, ResponseKind::OffsetFetch(r))) => r.topics[0].partitions[0].committed_offset,
        other => panic!("{other:?}"),
    }
}

#[test]
fn tooling_lists_and_describes() {
    let mut w = world();
    let (pid, _) = open_txn(&mut w, "t1", 1);
    let _ = init_txn(&mut w, 2, "t2", 60_000);
    w.send(
        5,
        1,
        &ListTransactionsRequest::default()
            .with_state_filters(vec!["Ongoing".into(), "Bogus".into()])
            .with_duration_filter(-1),
    );
    let Some((_, ResponseKind::ListTransactions(r))) = w.recv(5) else {
        panic!()
    };
    assert_eq!(r.transaction_states.len(), 1);
    assert_eq!(r.transaction_states[0].transactional_id.0.as_str(), "t1");
    assert_eq!(r.unknown_state_filters.len(), 1);
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    w.send(
        5,
        0,
        &DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
            .with_name(name("a"))
            .with_partition_indexes(vec![0])]),
    );
    let Some((_, ResponseKind::DescribeProducers(r))) = w.recv(5) else {
        panic!()
    };
    let producers = &r.topics[0].partitions[0].active_producers;
    assert_eq!(producers.len(), 1);
    assert_eq!(
        (
            producers[0].producer_id.0,
            producers[0].current_txn_start_offset
        ),
        (pid, 0)
    );
    w.send(
        8,
        0,
        &DescribeTransactionsRequest::default().with_transactional_ids(vec![tid("zz")]),
    );
    let Some((_, ResponseKind::DescribeTransactions(r))) = w.recv(8) else {
        panic!()
    };
    assert_eq!(
        r.transaction_states[0].error_code, 105,
        "TRANSACTIONAL_ID_NOT_FOUND"
    );
}

#[test]
fn require_stable_sees_offsets_staged_by_an_open_transaction() {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    let mut w = world();
    let (_, pid, epoch) = init_txn(&mut w, 1, "t", 60_000);
    stage_offset(&mut w, "t", pid, epoch, "g", "a", 3);
    let fetch = |stable: bool| {
        OffsetFetchRequest::default()
            .with_group_id(GroupId(
                kafka_protocol::protocol::StrBytes::from_static_str("g"),
            ))
            .with_require_stable(stable)
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(name("a"))
                .with_partition_indexes(vec![0])]))
    };
    w.send(9, 7, &fetch(true));
    let Some((_, ResponseKind::OffsetFetch(r))) = w.recv(9) else {
        panic!()
    };
    assert_eq!(
        r.topics[0].partitions[0].error_code, 88,
        "UNSTABLE_OFFSET_COMMIT"
    );
    w.send(9, 7, &fetch(false));
    let Some((_, ResponseKind::OffsetFetch(r))) = w.recv(9) else {
        panic!()
    };
    assert_eq!(
        (
            r.topics[0].partitions[0].error_code,
            r.topics[0].partitions[0].committed_offset
        ),
        (0, -1)
    );
    assert_eq!(end_txn(&mut w, 1, "t", pid, epoch, true), Some(NONE));
    w.send(9, 7, &fetch(true));
    let Some((_, ResponseKind::OffsetFetch(r))) = w.recv(9) else {
        panic!()
    };
    assert_eq!(
        (
            r.topics[0].partitions[0].error_code,
            r.topics[0].partitions[0].committed_offset
        ),
        (0, 3)
    );
}

/// The planted bugs really break what they claim to, so a simulator that
/// misses them is blind, not lucky.
#[test]
fn planted_bugs_do_break_the_guarantees() {
    let config = BrokerConfig {
        planted_bug: Some(doze_core::PlantedBug::EndTxnBeforeMarkersDurable),
        ..Default::default()
    };
    let mut w = world_with(config);
    let (pid, epoch) = open_txn(&mut w, "t", 1);
    w.auto_io = false;
    send_end_txn(&mut w, 1, "t", pid, epoch, true, 3);
    w.complete_io(); // decision stored, markers appended (not synced)
    w.complete_io(); // the Complete write: answered before any marker sync completed
    assert_eq!(end_txn_answer(&mut w, 1), Some(NONE), "answered early");

    let config = BrokerConfig {
        planted_bug: Some(doze_core::PlantedBug::ServeAboveLso),
        ..Default::default()
    };
    let mut w = world_with(config);
    open_txn(&mut w, "t", 2);
    let rc = fetch_part(&mut w, "a", true);
    assert_eq!(
        decode_values(rc.records.unwrap()).len(),
        2,
        "open transaction served to read_committed"
    );
}

/// A topic deleted, and created again under its name, in the middle of a
/// transaction that wrote to it. Kafka names a transaction's partitions by
/// topic name, so the commit's marker goes to the new topic, where the
/// producer has nothing open (harmless, as in Kafka). The commit completes,
/// the other partition's records become visible, and the new topic serves
/// none of the deleted one's records, with its last stable offset free.
#[test]
fn a_topic_deleted_and_created_again_in_the_middle_of_a_transaction() {
    for commit in [true, false] {
        let mut w = world();
        let (pid, epoch) = open_txn(&mut w, "t", 3);
        support::groups::delete_topic(&mut w, "a");
        create_topic(&mut w, "a", 1);
        // The partition is in the transaction by name: the new a takes a
        // batch of it (its first there, sequence 0).
        w.send(
            1,
            9,
            &produce_req("a", 0, txn_batch(&[b"new"], pid, epoch, 0), -1),
        );
        assert_eq!(produce_answer(&mut w, 1).unwrap().0, NONE);
        assert_eq!(end_txn(&mut w, 1, "t", pid, epoch, commit), Some(NONE));
        for restarted in [false, true] {
            let when = format!("commit={commit} restarted={restarted}");
            // b: the 3 records and the marker; an abort lists them aborted.
            let b = fetch_part(&mut w, "b", true);
            assert_eq!(b.last_stable_offset, 4, "{when}");
            let aborted: Vec<(i64, i64)> = b
                .aborted_transactions
                .clone()
                .unwrap_or_default()
                .iter()
                .map(|t| (t.producer_id.0, t.first_offset))
                .collect();
            let expected = if commit { vec![] } else { vec![(pid, 0)] };
            assert_eq!(aborted, expected, "{when}");
            // The new a: its one record and the marker, nothing of the old.
            assert_eq!(latest_offset(&mut w, 2, "a", 0, false), 2, "{when}");
            assert_eq!(latest_offset(&mut w, 2, "a", 0, true), 2, "{when}: LSO");
            let a = fetch_part(&mut w, "a", true);
            let aborted = a.aborted_transactions.clone().unwrap_or_default();
            assert_eq!(aborted.len(), usize::from(!commit), "{when}");
            let values: Vec<Bytes> = decode_values(a.records.unwrap_or_default())
                .into_iter()
                .map(|(_, v)| v)
                .filter(|v| v.as_ref() == b"new" || v.starts_with(b"v"))
                .collect();
            assert_eq!(values, vec![Bytes::from_static(b"new")], "{when}");
            w.restart(true);
        }
        // The id goes on: its next transaction commits.
        let (pid2, epoch2) = open_txn(&mut w, "t", 1);
        assert_eq!(end_txn(&mut w, 1, "t", pid2, epoch2, true), Some(NONE));
    }
}
