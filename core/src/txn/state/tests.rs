//! The transition table on records alone: no `Broker`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::*;
use TxnState::*;

const ALL: [TxnState; 6] = [
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
];

fn staged(topic: &str, partition: i32, offset: i64) -> StagedOffset {
    StagedOffset {
        topic: topic.to_string(),
        topic_id: Some(format!("id-{topic}")),
        partition,
        offset,
        leader_epoch: 1,
        metadata: None,
    }
}

/// A record in `state` with something in every field, so a transition that
/// forgets to keep or clear one is seen.
fn record_in(state: TxnState) -> TxnRecord {
    let mut r = TxnRecord::new(7, 60_000, 100);
    r.previous_producer_id = 5;
    r.producer_epoch = 3;
    r.last_producer_epoch = 2;
    r.state = state;
    r.partitions.insert(("a".to_string(), 0));
    r.groups.insert("g".to_string());
    r.staged_offsets
        .insert("g".to_string(), vec![staged("a", 0, 9)]);
    r.start_ms = 150;
    r.last_update_ms = 200;
    r
}

/// Every transition, each made by a function of the current record.
type Make = fn(&TxnRecord) -> Next;
const EVERY_TRANSITION: [(Transition, Make); 9] = [
    (Transition::Init, |r| {
        r.prepare_epoch_bump(30_000, 4, 3, 300)
    }),
    (Transition::Init, |r| r.prepare_rotation(8, 30_000, -1, 300)),
    (Transition::Add, |r| {
        r.prepare_add_partitions([("b".to_string(), 1)], 300)
    }),
    (Transition::Add, |r| {
        r.prepare_add_group("h".to_string(), 300)
    }),
    (Transition::StageOffsets, |r| {
        r.prepare_stage_offsets("g", [staged("a", 1, 4)])
    }),
    (Transition::Decide, |r| r.prepare_decision(true, 300)),
    (Transition::FenceAndAbort, |r| {
        r.prepare_fence_and_abort(300)
    }),
    (Transition::Complete, |r| r.prepare_complete(300)),
    (Transition::WriteOwed, |r| r.owed_complete()),
];

/// The states each transition may start from: what the handlers and the
/// coordinator rely on.
fn starts_from(t: Transition) -> &'static [TxnState] {
    match t {
        Transition::Create => &[],
        Transition::Init => &[Empty, CompleteCommit, CompleteAbort],
        Transition::Add => &[Empty, Ongoing, CompleteCommit, CompleteAbort],
        Transition::StageOffsets | Transition::Decide | Transition::FenceAndAbort => &[Ongoing],
        Transition::Complete => &[PrepareCommit, PrepareAbort],
        Transition::WriteOwed => &[CompleteCommit, CompleteAbort],
    }
}

#[test]
fn every_transition_from_every_state_is_made_or_refused_as_the_table_says() {
    let mut made = 0;
    let mut refused = 0;
    for from in ALL {
        let current = record_in(from);
        for (t, make) in EVERY_TRANSITION {
            let outcome = catch_unwind(AssertUnwindSafe(|| make(&current)));
            let expected = starts_from(t).contains(&from);
            assert_eq!(
                outcome.is_ok(),
                expected,
                "{t:?} from {from:?}: made {}",
                outcome.is_ok()
            );
            if let Ok(next) = outcome {
                assert_eq!(next.transition(), t);
                assert_eq!(next.from(), Some(from));
                made += 1;
            } else {
                refused += 1;
            }
        }
    }
    // 9 ways to ask x 6 states.
    assert_eq!((made, refused), (21, 33));
}

#[test]
fn the_table_is_kafkas_valid_previous_states_without_v2() {
    let expected: [(TxnState, &[TxnState]); 6] = [
        (Empty, &[Empty, CompleteCommit, CompleteAbort]),
        (Ongoing, &[Empty, Ongoing, CompleteCommit, CompleteAbort]),
        (PrepareCommit, &[Ongoing]),
        (PrepareAbort, &[Ongoing]),
        (CompleteCommit, &[PrepareCommit]),
        (CompleteAbort, &[PrepareAbort]),
    ];
    for (to, previous) in expected {
        for from in ALL {
            assert_eq!(
                valid_previous(to).contains(&from),
                previous.contains(&from),
                "{from:?} -> {to:?}"
            );
        }
    }
    // Each transition stays inside the table (but for the owed write, which
    // stores a record already in memory).
    let transitions = [
        Transition::Create,
        Transition::Init,
        Transition::Add,
        Transition::StageOffsets,
        Transition::Decide,
        Transition::FenceAndAbort,
        Transition::Complete,
    ];
    for t in transitions {
        for from in ALL {
            for to in ALL {
                if t.allowed(Some(from), to) {
                    assert!(valid_previous(to).contains(&from), "{t:?} {from:?} {to:?}");
                }
            }
        }
        assert_eq!(t.allowed(None, Empty), t == Transition::Create, "{t:?}");
    }
    assert!(may_expire(Empty) && may_expire(CompleteCommit) && may_expire(CompleteAbort));
    assert!(!may_expire(Ongoing) && !may_expire(PrepareCommit) && !may_expire(PrepareAbort));
}

#[test]
fn create_gives_the_producer_id_at_epoch_zero() {
    let next = TxnRecord::create(42, 10_000, 500);
    assert_eq!(next.from(), None);
    assert_eq!(next.transition(), Transition::Create);
    let r = next.into_record();
    assert_eq!((r.producer_id, r.producer_epoch), (42, 0));
    assert_eq!((r.previous_producer_id, r.last_producer_epoch), (-1, -1));
    assert_eq!(
        (r.state, r.timeout_ms, r.start_ms, r.last_update_ms),
        (Empty, 10_000, -1, 500)
    );
    assert!(r.partitions.is_empty() && r.groups.is_empty() && r.staged_offsets.is_empty());
}

#[test]
fn an_epoch_bump_empties_the_record_and_sets_the_epochs() {
    for from in [Empty, CompleteCommit, CompleteAbort] {
        let r = record_in(from)
            .prepare_epoch_bump(30_000, 4, 3, 300)
            .into_record();
        assert_eq!((r.producer_id, r.previous_producer_id), (7, 5));
        assert_eq!((r.producer_epoch, r.last_producer_epoch), (4, 3));
        assert_eq!(
            (r.state, r.timeout_ms, r.start_ms, r.last_update_ms),
            (Empty, 30_000, -1, 300)
        );
        assert!(r.partitions.is_empty() && r.groups.is_empty() && r.staged_offsets.is_empty());
    }
    // A KIP-360 retry keeps the epoch.
    let r = record_in(Empty)
        .prepare_epoch_bump(30_000, 3, 2, 300)
        .into_record();
    assert_eq!((r.producer_epoch, r.last_producer_epoch), (3, 2));
}

#[test]
fn a_rotation_takes_a_new_producer_id_at_epoch_zero() {
    let r = record_in(CompleteCommit)
        .prepare_rotation(8, 30_000, 3, 300)
        .into_record();
    assert_eq!((r.producer_id, r.previous_producer_id), (8, 7));
    assert_eq!((r.producer_epoch, r.last_producer_epoch), (0, 3));
    assert_eq!((r.state, r.start_ms, r.last_update_ms), (Empty, -1, 300));
    assert!(r.partitions.is_empty() && r.groups.is_empty() && r.staged_offsets.is_empty());
}

#[test]
fn adding_opens_the_transaction_or_keeps_its_start() {
    for from in [Empty, CompleteCommit, CompleteAbort] {
        let r = record_in(from)
            .prepare_add_partitions([("b".to_string(), 1)], 300)
            .into_record();
        assert_eq!((r.state, r.start_ms, r.last_update_ms), (Ongoing, 300, 300));
        assert!(r.partitions.contains(&("b".to_string(), 1)));
    }
    let r = record_in(Ongoing)
        .prepare_add_group("h".to_string(), 300)
        .into_record();
    assert_eq!((r.state, r.start_ms, r.last_update_ms), (Ongoing, 150, 300));
    assert!(r.groups.contains("h") && r.groups.contains("g"));
    assert_eq!(r.partitions.len(), 1);
    assert_eq!(r.producer_epoch, 3);
}

#[test]
fn staging_replaces_an_offset_of_the_same_partition_and_keeps_the_time() {
    let r = record_in(Ongoing)
        .prepare_stage_offsets("g", [staged("a", 0, 11), staged("a", 1, 4)])
        .into_record();
    assert_eq!(
        r.staged_offsets["g"],
        vec![staged("a", 0, 11), staged("a", 1, 4)]
    );
    assert_eq!((r.state, r.last_update_ms), (Ongoing, 200));
}

#[test]
fn a_decision_prepares_a_commit_or_an_abort() {
    for (commit, state) in [(true, PrepareCommit), (false, PrepareAbort)] {
        let r = record_in(Ongoing)
            .prepare_decision(commit, 300)
            .into_record();
        assert_eq!((r.state, r.last_update_ms, r.start_ms), (state, 300, 150));
        assert_eq!(r.staged_offsets.len(), 1);
        assert_eq!(r.producer_epoch, 3);
    }
}

#[test]
fn a_fence_raises_the_epoch_and_prepares_an_abort() {
    let r = record_in(Ongoing)
        .prepare_fence_and_abort(300)
        .into_record();
    assert_eq!((r.producer_epoch, r.last_producer_epoch), (4, -1));
    assert_eq!((r.state, r.last_update_ms), (PrepareAbort, 300));
    assert_eq!(r.partitions.len(), 1);
}

#[test]
fn completing_empties_the_transaction_and_keeps_its_start() {
    for (from, to) in [
        (PrepareCommit, CompleteCommit),
        (PrepareAbort, CompleteAbort),
    ] {
        let r = record_in(from).prepare_complete(300).into_record();
        assert_eq!((r.state, r.start_ms, r.last_update_ms), (to, 150, 300));
        assert!(r.partitions.is_empty() && r.groups.is_empty() && r.staged_offsets.is_empty());
        assert_eq!((r.producer_id, r.producer_epoch), (7, 3));
    }
}

#[test]
fn an_owed_complete_record_is_written_as_it_is() {
    let current = record_in(CompleteAbort);
    let next = current.owed_complete();
    assert_eq!(next.transition(), Transition::WriteOwed);
    assert_eq!(next.into_record(), current);
}

#[test]
#[should_panic(expected = "Decide from Some(Empty) to PrepareCommit is not valid")]
fn a_decision_without_an_open_transaction_panics() {
    record_in(Empty).prepare_decision(true, 300);
}

#[test]
#[should_panic(expected = "Complete from Some(Ongoing) to CompleteAbort is not valid")]
fn completing_an_undecided_transaction_panics() {
    record_in(Ongoing).prepare_complete(300);
}

#[test]
#[should_panic(expected = "FenceAndAbort from Some(CompleteCommit) to PrepareAbort is not valid")]
fn fencing_with_no_open_transaction_panics() {
    record_in(CompleteCommit).prepare_fence_and_abort(300);
}

#[test]
#[should_panic(expected = "Add from Some(PrepareCommit) to Ongoing is not valid")]
fn adding_to_a_decided_transaction_panics() {
    record_in(PrepareCommit).prepare_add_partitions([("b".to_string(), 1)], 300);
}

#[test]
#[should_panic(expected = "Init from Some(Ongoing) to Empty is not valid")]
fn an_epoch_bump_over_an_open_transaction_panics() {
    record_in(Ongoing).prepare_epoch_bump(30_000, 4, 3, 300);
}

#[test]
#[should_panic(expected = "an epoch bump raises the epoch by one or keeps it")]
fn an_epoch_jump_panics() {
    record_in(Empty).prepare_epoch_bump(30_000, 5, 3, 300);
}

#[test]
#[should_panic(expected = "StageOffsets from Some(CompleteCommit) to CompleteCommit is not valid")]
fn staging_with_no_open_transaction_panics() {
    record_in(CompleteCommit).prepare_stage_offsets("g", [staged("a", 1, 4)]);
}

#[test]
#[should_panic(expected = "offsets are staged only for a group added to the transaction")]
fn staging_for_a_group_not_added_panics() {
    record_in(Ongoing).prepare_stage_offsets("other", [staged("a", 1, 4)]);
}

#[test]
#[should_panic(expected = "WriteOwed from Some(PrepareAbort) to PrepareAbort is not valid")]
fn writing_a_decision_as_owed_panics() {
    record_in(PrepareAbort).owed_complete();
}

#[test]
#[should_panic(expected = "a rotation takes a new producer id")]
fn a_rotation_to_the_same_producer_id_panics() {
    record_in(Empty).prepare_rotation(7, 30_000, -1, 300);
}
