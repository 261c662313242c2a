//! The oracle's checks of the group copiers, on the final logs read back
//! after the last power cut and restart:
//!
//! 1. Exactly once: the group's output, read committed, holds each
//!    committed input value exactly as often as the input does.
//! 2. One owner: no input record was copied by committed transactions of
//!    two members (two producer ids), and in each output partition the
//!    committed copies follow their input partition's order. A rebalance
//!    that let two members own a partition at once, or a zombie member's
//!    commit, shows up here.
//! 3. The group's committed offsets, as the last member saw them, are the
//!    input's end (its final high watermark) on every partition.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use crate::history::History;
use crate::oracle_txn::{check_exactly_once, Fate, View};

/// Reported problems of one kind beyond this many are only counted.
const SHOWN_MAX: usize = 10;

pub fn check(h: &History, main: &str, view: &View, out: &mut Vec<String>) {
    let Some(output) = &h.group_output else {
        return;
    };
    if !h.group_copy_finished {
        out.push("the group copiers did not finish copying their input".into());
        return;
    }
    check_exactly_once(main, output, "the group's", view, out);
    check_owners(h, main, output, view, out);
    check_final_offsets(h, out);
}

fn check_owners(h: &History, main: &str, output: &str, view: &View, out: &mut Vec<String>) {
    // Committed input values -> their (partition, offset)s: a value is in
    // the input more than once when a plain producer's resend landed twice,
    // and then its k-th copy in an output partition stands for its k-th
    // place in that input partition.
    let mut input: BTreeMap<&Bytes, VecDeque<(i32, i64)>> = BTreeMap::new();
    for ((topic, p, offset), (value, fate)) in view {
        if topic == main && *fate == Fate::Committed {
            input.entry(value).or_default().push_back((*p, *offset));
        }
    }
    let mut owners: BTreeMap<(i32, i64), BTreeSet<i64>> = BTreeMap::new();
    let mut problems = Vec::new();
    for ((topic, q), batches) in &h.final_batches {
        if topic != output {
            continue;
        }
        let mut last: Option<(i32, i64)> = None;
        for b in batches.iter().filter(|b| b.control.is_none()) {
            for (offset, value) in &b.records {
                let key = (topic.clone(), *q, *offset);
                if view.get(&key).map(|v| v.1) != Some(Fate::Committed) {
                    continue;
                }
                let places = input.get_mut(value);
                let Some(from) = places.and_then(|v| {
                    let i = v.iter().position(|f| f.0 == *q)?;
                    v.remove(i)
                }) else {
                    continue; // counted by the exactly-once check
                };
                owners.entry(from).or_default().insert(b.producer_id);
                if from.0 != *q || last.is_some_and(|l| from <= l) {
                    problems.push(format!(
                        "OUT OF ORDER: {output} p{q}@{offset} is a committed copy of input p{}@{}, after a copy of {:?}",
                        from.0, from.1, last
                    ));
                }
                last = Some(from);
            }
        }
    }
    for (from, pids) in &owners {
        if pids.len() > 1 {
            problems.push(format!(
                "TWO OWNERS: input p{}@{} was copied by committed transactions of producers {pids:?}",
                from.0, from.1
            ));
        }
    }
    let count = problems.len();
    out.extend(problems.into_iter().take(SHOWN_MAX));
    if count > SHOWN_MAX {
        out.push(format!("{count} ownership problems in all"));
    }
}

fn check_final_offsets(h: &History, out: &mut Vec<String>) {
    let committed: BTreeMap<i32, i64> = h.group_final_offsets.iter().copied().collect();
    for (&p, &end) in &h.final_high_watermark {
        if committed.get(&p) != Some(&end) {
            out.push(format!(
                "GROUP OFFSETS: the group's committed offset of p{p} is {:?}, the input ends at {end}",
                committed.get(&p)
            ));
        }
    }
}
