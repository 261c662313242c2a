//! The oracle: checks a run's history against what doze-kafka promises.
//!
//! 1. Nothing went wrong on the spot (clients' and the world's own checks:
//!    records served at or above the high watermark, served positions gone,
//!    unexpected error codes, connections closed on well-formed requests).
//! 2. The final log (read back after a last power cut) has one record per
//!    offset, offsets increasing, and only records some producer made.
//! 3. Every acknowledged record (acks=all or acks=1) is in the final log at
//!    the offset it was acknowledged with.
//! 4. No record of an idempotent producer appears twice, unless it was
//!    resent under a new producer id after an epoch bump (Kafka's promise is
//!    per producer session; those are counted, not failed).
//! 5. Every record a consumer was given is still at its offset in the final
//!    log (served data is never lost or replaced).
//! 6. High watermarks never go back below acknowledged data: a fetch sent
//!    after an acknowledgement sees a high watermark past it, across
//!    restarts too, and so does the final read. Neither the high watermark
//!    nor the last stable offset ever goes back: a fetch sent after another
//!    was answered sees both at least as far (both lie in durable data, and
//!    a transaction that ended stays ended across restarts). With retention
//!    an LSO held at the log start may go back with it
//!    (`log_start_went_back`).
//! 7. A log start DeleteRecords answered never goes back
//!    (`check_deleted_records`).
//! 8. Transactions (`oracle_txn`): no aborted read, atomic outcomes that
//!    match the EndTxn answers, fencing, exactly-once copying.
//!
//! On a compacted main topic, 3, 5 and 8 allow what the log cleaner may
//! remove (`oracle_compact`); on one with retention, what lies below the
//! log start the final read found (`below_log_start`).

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::client::values::{self, RecordId};
use crate::history::History;
use crate::oracle_compact::Compaction;

/// Violations found; empty when the run kept every promise.
pub fn check(h: &History) -> Vec<String> {
    let mut out = h.violations.clone();
    // What the fetches saw is checked even when the run got stuck: a stuck
    // read_committed reader is often an LSO that went back.
    check_monotonic_ends(h, &mut out);
    if !h.final_read_done {
        out.push("the final read-back did not finish, so the log could not be checked".into());
        return out;
    }
    let log = final_log(h, &mut out);
    let main = crate::world::MAIN_TOPIC;
    let view = crate::oracle_txn::committed_view(h, &mut out);
    let compaction = h.compacted.then(|| Compaction::new(h, main, &view));
    let compaction = compaction.as_ref();
    check_acks(h, &log, compaction, &mut out);
    check_duplicates(h, &mut out);
    check_seen(h, &log, compaction, &mut out);
    check_high_watermarks(h, &mut out);
    check_deleted_records(h, &mut out);
    crate::oracle_txn::check(h, main, &view, compaction, &mut out);
    out
}

/// (partition, offset) -> value, checking order and origin on the way.
fn final_log(h: &History, out: &mut Vec<String>) -> BTreeMap<(i32, i64), Bytes> {
    let mut log = BTreeMap::new();
    for (&p, records) in &h.final_log {
        let mut last: Option<i64> = None;
        for (offset, value) in records {
            if last.is_some_and(|l| *offset <= l) {
                out.push(format!(
                    "p{p}: offset {offset} read after offset {}: offsets must increase",
                    last.unwrap()
                ));
            }
            last = Some(*offset);
            match values::decode(value) {
                Some(id) if id.n < h.produced.get(&id.client).copied().unwrap_or(0) => {}
                _ => out.push(format!(
                    "p{p}@{offset}: a record no producer made: {:?}",
                    preview(value)
                )),
            }
            if log.insert((p, *offset), value.clone()).is_some() {
                out.push(format!("p{p}@{offset}: two records at one offset"));
            }
        }
    }
    log
}

fn check_acks(
    h: &History,
    log: &BTreeMap<(i32, i64), Bytes>,
    compaction: Option<&Compaction>,
    out: &mut Vec<String>,
) {
    for ack in &h.acks {
        let at = format!("p{}@{}", ack.partition, ack.offset);
        let cleaned = compaction.is_some_and(|c| c.may_be_gone(ack.partition, ack.offset, ack.id))
            || below_log_start(h, ack.partition, ack.offset);
        match log
            .get(&(ack.partition, ack.offset))
            .map(|v| values::decode(v))
        {
            None if cleaned => {}
            None => out.push(format!(
                "LOST: {} acknowledged at {at} (t={}ms) is not in the final log",
                ack.id, ack.at_ms
            )),
            Some(found) if found != Some(ack.id) => out.push(format!(
                "REPLACED: {} acknowledged at {at} (t={}ms), but the final log holds {}",
                ack.id,
                ack.at_ms,
                found.map_or("garbage".to_string(), |f| f.to_string())
            )),
            Some(_) => {}
        }
    }
}

/// On a main topic with retention, whether `offset` of partition `p` lies
/// below the log start the final read found: retention deleted the
/// segments there, whole and oldest first, so a record there may be gone.
/// At and above that start, every record must be where it was.
pub fn below_log_start(h: &History, p: i32, offset: i64) -> bool {
    h.retention && offset < final_log_start(h, p)
}

/// Where the final read of partition `p` started (0 unless it was sent
/// to the log start).
fn final_log_start(h: &History, p: i32) -> i64 {
    h.final_log_start.get(&p).copied().unwrap_or(0)
}

fn check_duplicates(h: &History, out: &mut Vec<String>) {
    let mut count: BTreeMap<RecordId, Vec<(i32, i64)>> = BTreeMap::new();
    for (&p, records) in &h.final_log {
        for (offset, value) in records {
            if let Some(id) = values::decode(value).filter(|id| h.idempotent.contains(&id.client)) {
                count.entry(id).or_default().push((p, *offset));
            }
        }
    }
    for (id, places) in count {
        if places.len() > 1 && !h.resequenced.contains(&id) {
            out.push(format!(
                "DUPLICATE: idempotent {id} is in the final log {} times: {places:?}",
                places.len()
            ));
        }
    }
}

fn check_seen(
    h: &History,
    log: &BTreeMap<(i32, i64), Bytes>,
    compaction: Option<&Compaction>,
    out: &mut Vec<String>,
) {
    for seen in &h.seen {
        let at = format!("p{}@{}", seen.partition, seen.offset);
        let cleaned = compaction.is_some_and(|c| {
            values::decode(&seen.value)
                .is_some_and(|id| c.may_be_gone(seen.partition, seen.offset, id))
        }) || below_log_start(h, seen.partition, seen.offset);
        match log.get(&(seen.partition, seen.offset)) {
            None if cleaned => {}
            None => out.push(format!(
                "consumer c{} was given {:?} at {at} (t={}ms), which the final log no longer holds",
                seen.consumer,
                preview(&seen.value),
                seen.at_ms
            )),
            Some(v) if *v != seen.value => out.push(format!(
                "consumer c{} was given {:?} at {at} (t={}ms), but the final log holds {:?} there",
                seen.consumer,
                preview(&seen.value),
                seen.at_ms,
                preview(v)
            )),
            Some(_) => {}
        }
    }
}

fn check_high_watermarks(h: &History, out: &mut Vec<String>) {
    // Per partition: acknowledgements in time order, with the running
    // highest acknowledged offset.
    let mut acked: BTreeMap<i32, Vec<(i64, i64)>> = BTreeMap::new();
    for ack in &h.acks {
        acked
            .entry(ack.partition)
            .or_default()
            .push((ack.at_ms, ack.offset));
    }
    for list in acked.values_mut() {
        list.sort();
        let mut high = i64::MIN;
        for entry in list.iter_mut() {
            high = high.max(entry.1);
            entry.1 = high;
        }
    }
    let acked_before = |p: i32, t_ms: i64| -> Option<i64> {
        let list = acked.get(&p)?;
        let n = list.partition_point(|&(at, _)| at < t_ms);
        n.checked_sub(1).map(|i| list[i].1)
    };
    for hw in &h.hws {
        if let Some(offset) = acked_before(hw.partition, hw.sent_ms) {
            if hw.high_watermark <= offset {
                out.push(format!(
                    "p{}: a fetch sent at t={}ms got high watermark {}, below offset {offset} acknowledged before it",
                    hw.partition, hw.sent_ms, hw.high_watermark
                ));
            }
        }
    }
    for (&p, &final_hw) in &h.final_high_watermark {
        if let Some(offset) = acked_before(p, i64::MAX) {
            if final_hw <= offset {
                out.push(format!(
                    "p{p}: final high watermark {final_hw} is below acknowledged offset {offset}"
                ));
            }
        }
    }
}

/// Reported problems of one kind beyond this many are only counted.
const SHOWN_MAX: usize = 10;

fn check_monotonic_ends(h: &History, out: &mut Vec<String>) {
    let mut by_partition: BTreeMap<i32, Vec<&crate::history::HwSeen>> = BTreeMap::new();
    for seen in &h.hws {
        by_partition.entry(seen.partition).or_default().push(seen);
    }
    let mut problems = Vec::new();
    for (p, mut answers) in by_partition {
        answers.sort_by_key(|a| a.received_ms);
        // Fetches by send time, each checked against the answers received
        // strictly before it was sent.
        let mut asked: Vec<&crate::history::HwSeen> = answers.clone();
        asked.sort_by_key(|a| a.sent_ms);
        let mut next = 0;
        let mut best: Option<(i64, &crate::history::HwSeen)> = None;
        let mut best_lso: Option<(i64, &crate::history::HwSeen)> = None;
        for b in asked {
            while next < answers.len() && answers[next].received_ms < b.sent_ms {
                let a = answers[next];
                if best.is_none_or(|(hw, _)| a.high_watermark > hw) {
                    best = Some((a.high_watermark, a));
                }
                if best_lso.is_none_or(|(lso, _)| a.last_stable_offset > lso) {
                    best_lso = Some((a.last_stable_offset, a));
                }
                next += 1;
            }
            if let Some((hw, a)) = best.filter(|(hw, _)| b.high_watermark < *hw) {
                problems.push(format!(
                    "p{p}: HIGH WATERMARK WENT BACK: a fetch of c{} sent at t={}ms got {}, below {hw} that c{} was answered at t={}ms",
                    b.consumer, b.sent_ms, b.high_watermark, a.consumer, a.received_ms
                ));
            }
            if let Some((lso, a)) = best_lso
                .filter(|(lso, _)| b.last_stable_offset < *lso)
                .filter(|(_, a)| !log_start_went_back(h, a, b))
            {
                problems.push(format!(
                    "p{p}: LAST STABLE OFFSET WENT BACK: a fetch of c{} sent at t={}ms got {}, below {lso} that c{} was answered at t={}ms",
                    b.consumer, b.sent_ms, b.last_stable_offset, a.consumer, a.received_ms
                ));
            }
        }
    }
    let count = problems.len();
    out.extend(problems.into_iter().take(SHOWN_MAX));
    if count > SHOWN_MAX {
        out.push(format!(
            "{count} high watermarks or last stable offsets went back in all"
        ));
    }
}

/// A DeleteRecords answer is durable: the log start it answered never
/// goes back, across restarts and power cuts too (the broker stores it in
/// meta.db before answering, and a start takes the stored one over the
/// first segment's base). Every fetch sent after the
/// answer came, and the final read, see the log start at least there.
fn check_deleted_records(h: &History, out: &mut Vec<String>) {
    let mut problems = Vec::new();
    for d in &h.records_deleted {
        let p = d.partition;
        let final_start = final_log_start(h, p);
        if final_start < d.low_watermark {
            problems.push(format!(
                "p{p}: DELETE RECORDS UNDONE: answered the low watermark {} at t={}ms, but the final read started at {final_start}",
                d.low_watermark, d.answered_ms
            ));
        }
        if let Some(b) = h.hws.iter().find(|b| {
            b.partition == p && b.sent_ms > d.answered_ms && b.log_start_offset < d.low_watermark
        }) {
            problems.push(format!(
                "p{p}: LOG START WENT BACK: DeleteRecords answered the low watermark {} at t={}ms, but a fetch of c{} sent at t={}ms got the log start {}",
                d.low_watermark, d.answered_ms, b.consumer, b.sent_ms, b.log_start_offset
            ));
        }
    }
    out.extend(problems.into_iter().take(SHOWN_MAX));
}

/// With retention, an LSO may go back with the log start: an open
/// transaction whose first offset lies below the log start holds the LSO
/// at the log start (Kafka's UnifiedLog takes max(first unstable offset,
/// log start offset)), and a power cut that brings back segments whose
/// deletion was not yet durable moves the log start back, and that LSO
/// with it. Kafka's log start goes back the same way, to its last
/// log-start-offset checkpoint. Data is neither lost nor exposed: the
/// records below the old log start come back as they were.
fn log_start_went_back(
    h: &History,
    earlier: &crate::history::HwSeen,
    later: &crate::history::HwSeen,
) -> bool {
    h.retention
        && earlier.last_stable_offset == earlier.log_start_offset
        && later.log_start_offset < earlier.log_start_offset
}

fn preview(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    text.split('|')
        .next()
        .unwrap_or("")
        .chars()
        .take(40)
        .collect()
}
