//! The oracle's transaction checks, on the final logs read back after the
//! last power cut and restart (every batch, markers included):
//!
//! 1. No aborted read: a record a read_committed consumer was given belongs
//!    to no transaction that aborted, nor to one still open at the end.
//! 2. Atomic transactions: a transaction's records are all committed or
//!    none; an EndTxn answered with success is the outcome (never lost or
//!    reversed by a crash); a transaction its producer never asked to
//!    commit (fenced, timed out, dead) did not commit.
//! 3. Fencing: no transactional batch lands after a marker of a higher
//!    epoch of its producer id, and nothing a zombie sent after being told
//!    it is fenced is in the log.
//! 4. Exactly-once copy: the copier's output, read committed, holds each
//!    committed input value exactly as often as the input does.
//! 5. The group copiers (`oracle_group`): exactly-once too, no input copied
//!    by two members, the group's offsets at the input's end.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::client::values::{self, RecordId};
use crate::history::History;
use crate::oracle_compact::Compaction;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Committed,
    Aborted,
    Open,
}

/// (topic, partition, offset) -> (value, fate), from the final batches.
pub(crate) type View = BTreeMap<(String, i32, i64), (Bytes, Fate)>;

pub fn check(
    h: &History,
    main_topic: &str,
    view: &View,
    compaction: Option<&Compaction>,
    out: &mut Vec<String>,
) {
    check_reads(h, main_topic, view, out);
    check_atomic(h, main_topic, view, compaction, out);
    check_zombies(h, view, out);
    check_copy(h, main_topic, view, out);
    crate::oracle_group::check(h, main_topic, view, out);
}

/// Every record of the final logs with its fate (and fenced writes found
/// on the way).
pub(crate) fn committed_view(h: &History, out: &mut Vec<String>) -> View {
    let mut view = View::new();
    for ((topic, p), batches) in &h.final_batches {
        // Per producer id: offsets waiting for their marker, and the
        // highest epoch a marker carried.
        let mut pending: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        let mut fence_epoch: BTreeMap<i64, i16> = BTreeMap::new();
        for b in batches {
            if let Some(commit) = b.control {
                let fate = if commit {
                    Fate::Committed
                } else {
                    Fate::Aborted
                };
                for offset in pending.remove(&b.producer_id).unwrap_or_default() {
                    let entry = view
                        .get_mut(&(topic.clone(), *p, offset))
                        .expect("pending offsets are in the view");
                    entry.1 = fate;
                }
                let e = fence_epoch.entry(b.producer_id).or_insert(b.epoch);
                *e = (*e).max(b.epoch);
                continue;
            }
            let fate = if b.transactional {
                if let Some(&e) = fence_epoch.get(&b.producer_id).filter(|&&e| b.epoch < e) {
                    out.push(format!(
                        "FENCED WRITE LANDED: {topic} p{p} batch at {} of producer {} epoch {} follows its marker of epoch {e}",
                        b.base_offset, b.producer_id, b.epoch
                    ));
                }
                let list = pending.entry(b.producer_id).or_default();
                list.extend(b.records.iter().map(|r| r.0));
                Fate::Open
            } else {
                Fate::Committed
            };
            for (offset, value) in &b.records {
                view.insert((topic.clone(), *p, *offset), (value.clone(), fate));
            }
        }
    }
    view
}

fn check_reads(h: &History, main: &str, view: &View, out: &mut Vec<String>) {
    for seen in h.seen.iter().filter(|s| s.read_committed) {
        let key = (main.to_string(), seen.partition, seen.offset);
        match view.get(&key).map(|v| v.1) {
            Some(Fate::Aborted) => out.push(format!(
                "ABORTED READ: read_committed consumer c{} was given p{}@{} (t={}ms), a record of a transaction that aborted",
                seen.consumer, seen.partition, seen.offset, seen.at_ms
            )),
            Some(Fate::Open) => out.push(format!(
                "READ OF AN OPEN TRANSACTION: read_committed consumer c{} was given p{}@{} (t={}ms), whose transaction never ended",
                seen.consumer, seen.partition, seen.offset, seen.at_ms
            )),
            _ => {}
        }
    }
}

/// Per record id of the main topic, the fates of its copies in the log.
fn fates_by_id(main: &str, view: &View) -> BTreeMap<RecordId, Vec<Fate>> {
    let mut fates: BTreeMap<RecordId, Vec<Fate>> = BTreeMap::new();
    for ((topic, _, _), (value, fate)) in view {
        if topic != main {
            continue;
        }
        if let Some(id) = values::decode(value) {
            fates.entry(id).or_default().push(*fate);
        }
    }
    fates
}

/// Said of the records `check_atomic` counts as committed though gone.
const GONE_BY_RIGHT: &str =
    " (or gone by right: overwritten by later ones of their keys, or below the log start)";

/// A transaction's records all committed or none. On a compacted topic a
/// committed record may be gone, overwritten by a later committed record of
/// its key, and on one with retention, below the final log start: it
/// counts as committed (`whole`) when its acknowledgement says where it
/// was and the cleaner or retention had that right there.
fn check_atomic(
    h: &History,
    main: &str,
    view: &View,
    compaction: Option<&Compaction>,
    out: &mut Vec<String>,
) {
    let fates = fates_by_id(main, view);
    let acked: BTreeMap<RecordId, (i32, i64)> = h
        .acks
        .iter()
        .map(|a| (a.id, (a.partition, a.offset)))
        .collect();
    for t in &h.txns {
        let is_committed =
            |id: &RecordId| fates.get(id).is_some_and(|f| f.contains(&Fate::Committed));
        let committed = t.ids.iter().filter(|id| is_committed(id)).count();
        // A record not in the final log counts as committed where it was
        // acknowledged when the cleaner had the right to take it there, or
        // retention deleted the segment it was in.
        let gone_by_right = |id: &RecordId| {
            !fates.contains_key(id)
                && acked.get(id).is_some_and(|&(p, o)| {
                    compaction.is_some_and(|c| c.overwritten(p, o, *id))
                        || crate::oracle::below_log_start(h, p, o)
                })
        };
        let whole = t
            .ids
            .iter()
            .filter(|id| is_committed(id) || gone_by_right(id))
            .count();
        let all = t.ids.len();
        let what = format!(
            "transaction of c{} ({} producer {} epoch {}, {} records from {})",
            t.client,
            t.transactional_id,
            t.producer_id,
            t.epoch,
            all,
            t.ids.first().map(|i| i.to_string()).unwrap_or_default()
        );
        if committed > 0 && whole < all {
            out.push(format!(
                "TORN: {what}: {whole} of {all} records committed{}",
                if whole > committed { GONE_BY_RIGHT } else { "" }
            ));
        }
        match t.answered {
            Some(true) if whole < all => out.push(format!(
                "LOST COMMIT: {what}: EndTxn answered commit, but after the final restart only {whole} of {all} records are committed{}",
                if whole > committed { GONE_BY_RIGHT } else { "" }
            )),
            Some(false) if committed > 0 => out.push(format!(
                "ABORT REVERSED: {what}: EndTxn answered abort, but {committed} records are committed"
            )),
            None if !t.commit_sent && committed > 0 => out.push(format!(
                "UNASKED COMMIT: {what}: never asked to commit (fenced {}), yet {committed} records are committed",
                t.fenced
            )),
            _ => {}
        }
    }
}

fn check_zombies(h: &History, view: &View, out: &mut Vec<String>) {
    if h.zombie_writes.is_empty() {
        return;
    }
    for ((topic, p, offset), (value, _)) in view {
        if let Some(id) = values::decode(value).filter(|id| h.zombie_writes.contains(id)) {
            out.push(format!(
                "ZOMBIE WRITE LANDED: {id}, sent after its producer was told it is fenced, is at {topic} p{p}@{offset}"
            ));
        }
    }
}

fn check_copy(h: &History, main: &str, view: &View, out: &mut Vec<String>) {
    let Some(output) = &h.copier_output else {
        return;
    };
    if !h.copier_finished {
        out.push("the copier did not finish copying its input".into());
        return;
    }
    check_exactly_once(main, output, "the copier's", view, out);
}

/// Each committed input value is committed in `output` exactly as often.
pub(crate) fn check_exactly_once(
    main: &str,
    output: &str,
    whose: &str,
    view: &View,
    out: &mut Vec<String>,
) {
    let mut count: BTreeMap<Bytes, (i64, i64)> = BTreeMap::new();
    for ((topic, _, _), (value, fate)) in view {
        if *fate != Fate::Committed {
            continue;
        }
        if topic == main {
            count.entry(value.clone()).or_default().0 += 1;
        } else if topic == output {
            count.entry(value.clone()).or_default().1 += 1;
        }
    }
    let mut wrong = 0;
    for (value, (input, copied)) in &count {
        if input != copied {
            wrong += 1;
            if wrong <= 10 {
                out.push(format!(
                    "NOT EXACTLY ONCE: {:?} is committed {input} times in the input and {copied} times in {whose} output",
                    String::from_utf8_lossy(value).split('|').next().unwrap_or("")
                ));
            }
        }
    }
    if wrong > 10 {
        out.push(format!("NOT EXACTLY ONCE: {wrong} values in all"));
    }
}
