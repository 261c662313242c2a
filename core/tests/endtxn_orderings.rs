//! proptest: orderings of EndTxn requests (both decisions, repeats, stale
//! epochs), I/O completions (meta.db writes, marker fsyncs), failed writes and
//! syncs, crashes and power cuts, checked against the transaction
//! invariants:
//! - every EndTxn answer is one the decision table allows;
//! - a decision answered with success is the one carried out, through any
//!   crash or power cut, and the other decision is never carried out;
//! - the transaction is atomic: both partitions end the same way, and
//!   read_committed sees its records only if it committed;
//! - nothing is left hanging: with I/O healthy again the transaction ends.
//!
//! Shrunk failures are kept by proptest under core/tests/endtxn_orderings.
//! proptest-regressions and replayed first on every run.

mod support;

use doze_core::BrokerConfig;
use proptest::prelude::*;
use support::requests::*;
use support::txn::*;
use support::*;

const NONE: i16 = 0;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const NOT_COORDINATOR: i16 = 16;
const PRODUCER_FENCED: i16 = 90;

#[derive(Clone, Debug)]
enum Op {
    EndTxn {
        commit: bool,
        stale_epoch: bool,
        version: i16,
    },
    CompleteIo,
    FailNextSync,
    FailNextMeta,
    Crash {
        power_cut: bool,
    },
    Advance {
        ms: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), prop::bool::weighted(0.15), prop_oneof![Just(1i16), Just(3i16)])
            .prop_map(|(commit, stale_epoch, version)| Op::EndTxn { commit, stale_epoch, version }),
        5 => Just(Op::CompleteIo),
        1 => Just(Op::FailNextSync),
        1 => Just(Op::FailNextMeta),
        1 => any::<bool>().prop_map(|power_cut| Op::Crash { power_cut }),
        1 => (1i64..300).prop_map(|ms| Op::Advance { ms }),
    ]
}

struct Sent {
    conn: u64,
    commit: bool,
    stale: bool,
    version: i16,
    answer: Option<i16>,
    /// The broker restarted before answering: the connection is gone.
    dropped: bool,
}

fn run(config: BrokerConfig, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut w = World::new(config);
    create_topic(&mut w, "a", 1);
    create_topic(&mut w, "b", 1);
    let (err, pid, epoch) = init_txn(&mut w, 1, "t", 600_000);
    prop_assert_eq!(err, NONE);
    prop_assert_eq!(
        add_partitions(&mut w, 1, "t", pid, epoch, &[("a", 0), ("b", 0)]),
        vec![NONE, NONE]
    );
    for t in ["a", "b"] {
        w.send(
            1,
            9,
            &produce_req(t, 0, txn_batch(&[b"x", b"y"], pid, epoch, 0), -1),
        );
        prop_assert_eq!(produce_answer(&mut w, 1).unwrap().0, NONE);
    }
    w.auto_io = false;
    let mut sent: Vec<Sent> = Vec::new();
    let mut next_conn = 100;
    let collect = |w: &mut World, sent: &mut Vec<Sent>| {
        for s in sent.iter_mut().filter(|s| s.answer.is_none() && !s.dropped) {
            if let Some(a) = end_txn_answer(w, s.conn) {
                s.answer = Some(a);
            }
        }
    };
    for op in ops {
        match op {
            Op::EndTxn {
                commit,
                stale_epoch,
                version,
            } => {
                next_conn += 1;
                let e = if stale_epoch { epoch - 1 } else { epoch };
                send_end_txn(&mut w, next_conn, "t", pid, e, commit, version);
                sent.push(Sent {
                    conn: next_conn,
                    commit,
                    stale: stale_epoch,
                    version,
                    answer: None,
                    dropped: false,
                });
            }
            Op::CompleteIo => w.complete_io(),
            Op::FailNextSync => w.fail_next_sync = true,
            Op::FailNextMeta => w.fail_next_meta = true,
            Op::Crash { power_cut } => {
                collect(&mut w, &mut sent);
                for s in sent.iter_mut().filter(|s| s.answer.is_none()) {
                    s.dropped = true;
                }
                w.fail_next_sync = false;
                w.fail_next_meta = false;
                w.restart(power_cut);
            }
            Op::Advance { ms } => w.advance(ms),
        }
        collect(&mut w, &mut sent);
    }
    // Healthy again: let every retry run.
    w.fail_next_sync = false;
    w.fail_next_meta = false;
    w.auto_io = true;
    w.drain();
    for _ in 0..10 {
        w.advance(doze_core::limits::TXN_RETRY_BACKOFF_MS);
    }
    collect(&mut w, &mut sent);

    for s in &sent {
        prop_assert!(
            s.dropped || s.answer.is_some(),
            "an EndTxn on a live connection was never answered"
        );
    }
    let state = describe_state(&mut w);
    let successes: Vec<bool> = sent
        .iter()
        .filter(|s| s.answer == Some(NONE))
        .map(|s| s.commit)
        .collect();
    if let Some(first) = successes.first() {
        prop_assert!(
            successes.iter().all(|c| c == first),
            "both decisions answered with success"
        );
        let want = if *first {
            "CompleteCommit"
        } else {
            "CompleteAbort"
        };
        prop_assert_eq!(&state, want, "an answered decision was lost or reversed");
    }
    for s in &sent {
        let Some(a) = s.answer else { continue };
        if s.stale {
            let fenced = if s.version < 2 {
                INVALID_PRODUCER_EPOCH
            } else {
                PRODUCER_FENCED
            };
            prop_assert_eq!(a, fenced, "a stale epoch must be fenced");
            continue;
        }
        prop_assert!(
            [
                NONE,
                CONCURRENT_TRANSACTIONS,
                INVALID_TXN_STATE,
                NOT_COORDINATOR
            ]
            .contains(&a),
            "answer {} is not in the decision table",
            a
        );
        let decided = match state.as_str() {
            "CompleteCommit" => Some(true),
            "CompleteAbort" => Some(false),
            _ => None,
        };
        if a == NONE {
            prop_assert_eq!(decided, Some(s.commit));
        }
        if a == INVALID_TXN_STATE {
            prop_assert_eq!(
                decided,
                Some(!s.commit),
                "INVALID_TXN_STATE only once the other decision stands"
            );
        }
    }
    // Atomic across partitions, and read_committed agrees with the outcome.
    let mut views = Vec::new();
    for t in ["a", "b"] {
        let lso = latest_offset(&mut w, 2, t, 0, true);
        w.send(7, 12, &fetch_isolated(t, 0, 0, true));
        let p = fetch_answer(&mut w, 7).unwrap();
        let aborted = p
            .aborted_transactions
            .unwrap_or_default()
            .iter()
            .any(|a| a.producer_id.0 == pid);
        views.push((lso > 0, aborted));
    }
    prop_assert_eq!(
        views[0],
        views[1],
        "the partitions disagree on the transaction's outcome"
    );
    match state.as_str() {
        "CompleteCommit" => prop_assert_eq!(views[0], (true, false)),
        "CompleteAbort" => prop_assert_eq!(views[0], (true, true)),
        "Ongoing" => prop_assert_eq!(
            views[0].0,
            false,
            "an open transaction holds the LSO at its first offset"
        ),
        other => prop_assert!(false, "the transaction was left in {}", other),
    }
    Ok(())
}

fn describe_state(w: &mut World) -> String {
    use kafka_protocol::messages::*;
    w.send(
        8,
        0,
        &DescribeTransactionsRequest::default().with_transactional_ids(vec![tid("t")]),
    );
    match w.recv(8) {
        Some((_, ResponseKind::DescribeTransactions(r))) => {
            r.transaction_states[0].transaction_state.to_string()
        }
        other => panic!("{other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn endtxn_orderings_keep_the_invariants(ops in prop::collection::vec(op(), 1..40)) {
        run(BrokerConfig::default(), ops)?;
    }
}

/// The same search finds the planted bug (EndTxn answered before its markers
/// are durable), so passing above means something.
#[test]
fn the_search_catches_a_planted_bug() {
    use proptest::test_runner::{Config, TestRunner};
    let config = BrokerConfig {
        planted_bug: Some(doze_core::PlantedBug::EndTxnBeforeMarkersDurable),
        ..Default::default()
    };
    let mut runner = TestRunner::new(Config {
        cases: 2_000,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(op(), 1..40), |ops| {
        run(config.clone(), ops)
    });
    match result {
        Err(proptest::test_runner::TestError::Fail(why, ops)) => {
            println!("caught: {why}; shrunk to {ops:?}");
        }
        other => panic!("the planted bug was not caught: {other:?}"),
    }
}
