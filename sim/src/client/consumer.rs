//! A consumer that reads every partition of the topic from offset 0 with
//! plain Fetch requests (no group: it assigns itself all partitions, as
//! `consumer.assign()` does), and records every record it is given.
//!
//! `Follow` long-polls (max_wait 200–500 ms) for the whole workload;
//! `ReadToEnd` reads up to the high watermark with max_wait 0 and stops: the
//! verifier that reads the final log back after the last power cut.
//!
//! Half the `Follow` consumers with Fetch v7+ (odd client numbers) read
//! through a fetch session (KIP-227), as the Java client and franz-go do:
//! a full fetch with epoch 0 opens it, later ones name only the partitions
//! whose position moved, and answers leave out partitions with nothing new.
//! A restart loses the broker's sessions (FETCH_SESSION_ID_NOT_FOUND: start
//! over with a full fetch); with one fetch in flight an epoch error is a bug.
//!
//! Checks made on the spot: a record is never at or above the high watermark
//! of the answer that carried it (only durable data is served), and a
//! position the broker served is never out of range later (served data does
//! not go away).

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::FetchTopic;
use kafka_protocol::messages::{
    BrokerId, FetchRequest, ListOffsetsResponse, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rand::RngExt;

use super::batches::{self, AbortedFilter};
use super::{backoff_ms, is_retriable, reset, Client, Cx};
use crate::history::{HwSeen, Seen};

const OFFSET_OUT_OF_RANGE: i16 = 1;
const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;

/// A consumer's fetch session, as the client keeps it.
struct Session {
    /// 0 until the broker gave one.
    id: i32,
    /// The epoch of the next fetch; 0 opens a new session (closing `id`).
    epoch: i32,
    /// The positions the session holds, per partition.
    told: Vec<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Follow,
    ReadToEnd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    ReadUncommitted,
    /// Sends isolation level 1, and drops what the aborted-transaction list
    /// names, as Kafka's consumer does (`batches::AbortedFilter`).
    ReadCommitted,
}

pub struct Consumer {
    client: u32,
    topic: String,
    mode: Mode,
    isolation: Isolation,
    fetch_version: i16,
    positions: Vec<i64>,
    /// Per partition, the position not reached through served records (the
    /// start, or the log start the broker named): an out-of-range answer
    /// there is no loss, only an empty or moved log start.
    floors: Vec<i64>,
    /// The fetch in flight: (correlation id, when it was sent, elapsed ms).
    asked: Option<(i32, i64)>,
    /// Partitions a fetch found out of range: their earliest offsets are
    /// asked before the next fetch (`reset`).
    resets: Vec<i32>,
    stopped: bool,
    done: bool,
    failures: u32,
    records_seen: u64,
    /// The workload's topic: its records go to the history's `seen` (and
    /// the final log); another topic's only to `final_batches`.
    main: bool,
    /// ReadToEnd: how long to wait for open transactions to end.
    lso_wait_ms_max: i64,
    started_ms: Option<i64>,
    /// Wait this long before the next fetch (then back to 0).
    pause_ms: i64,
    /// Some when this consumer reads through a fetch session.
    session: Option<Session>,
}

impl Consumer {
    pub fn new(
        client: u32,
        topic: String,
        partitions: i32,
        mode: Mode,
        isolation: Isolation,
        rng: &mut impl rand::Rng,
    ) -> Self {
        let fetch_version = rng.random_range(5..=12);
        let sessions = mode == Mode::Follow && fetch_version >= 7 && client % 2 == 1;
        Self {
            session: sessions.then(|| Session {
                id: 0,
                epoch: 0,
                told: Vec::new(),
            }),
            client,
            topic,
            mode,
            isolation,
            fetch_version,
            positions: vec![0; partitions as usize],
            floors: vec![0; partitions as usize],
            asked: None,
            resets: Vec::new(),
            stopped: false,
            done: false,
            failures: 0,
            records_seen: 0,
            main: true,
            lso_wait_ms_max: 0,
            started_ms: None,
            pause_ms: 0,
        }
    }

    /// A verifier of another topic than the workload's (the copier's output).
    pub fn not_main(mut self) -> Self {
        self.main = false;
        self
    }

    /// A verifier waits this long for open transactions to end.
    pub fn with_lso_wait(mut self, lso_wait_ms_max: i64) -> Self {
        self.lso_wait_ms_max = lso_wait_ms_max;
        self
    }

    fn fetch(&mut self, cx: &mut Cx) {
        let max_wait_ms = match self.mode {
            Mode::Follow => cx.rng.random_range(200..=500),
            Mode::ReadToEnd => 0,
        };
        let mut partitions = super::fetch_partitions(&self.positions);
        let (session_id, session_epoch) = match &mut self.session {
            None => (0, -1),
            Some(s) => {
                if s.epoch != 0 {
                    partitions.retain(|fp| s.told[fp.partition as usize] != fp.fetch_offset);
                }
                s.told = self.positions.clone();
                (s.id, s.epoch)
            }
        };
        let topics = if partitions.is_empty() {
            Vec::new()
        } else {
            vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(self.topic.clone())))
                .with_partitions(partitions)]
        };
        let isolation_level = match self.isolation {
            Isolation::ReadUncommitted => 0,
            Isolation::ReadCommitted => 1,
        };
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(1024 * 1024)
            .with_isolation_level(isolation_level)
            .with_session_id(session_id)
            .with_session_epoch(session_epoch)
            .with_topics(topics);
        if let Some(corr) = cx.wire.send(self.fetch_version, &req) {
            self.asked = Some((corr, cx.elapsed_ms));
        }
    }

    fn on_fetch(&mut self, cx: &mut Cx, sent_ms: i64, r: kafka_protocol::messages::FetchResponse) {
        if let Some(s) = &mut self.session {
            match r.error_code {
                0 if s.epoch == 0 || r.session_id == 0 => {
                    // Opened (or, with id 0, none given: ask again next time).
                    s.id = r.session_id;
                    s.epoch = i32::from(r.session_id != 0);
                }
                0 => s.epoch = if s.epoch == i32::MAX { 1 } else { s.epoch + 1 },
                FETCH_SESSION_ID_NOT_FOUND => {
                    cx.note(format!(
                        "fetch session {} not found: a full fetch next",
                        s.id
                    ));
                    (s.id, s.epoch) = (0, 0);
                    self.failures += 1;
                    let delay_ms = backoff_ms(cx.rng, self.failures.min(3));
                    return cx.wake_in(delay_ms);
                }
                INVALID_FETCH_SESSION_EPOCH => {
                    cx.violation(format!(
                        "fetch session {} epoch {} refused with one fetch in flight",
                        s.id, s.epoch
                    ));
                    s.epoch = 0;
                }
                _ => {}
            }
        }
        if r.error_code != 0 {
            return self.retry(cx, r.error_code);
        }
        let mut caught_up = true;
        let mut open: Option<(i32, i64, i64)> = None;
        let mut answered = vec![false; self.positions.len()];
        for topic in &r.responses {
            for part in &topic.partitions {
                let p = part.partition_index;
                let Some(slot) = usize::try_from(p)
                    .ok()
                    .filter(|&p| p < self.positions.len())
                else {
                    cx.violation(format!("fetch answer names partition {p}, never asked"));
                    continue;
                };
                answered[slot] = true;
                match part.error_code {
                    0 => {}
                    OFFSET_OUT_OF_RANGE => {
                        let position = self.positions[slot];
                        // Without retention the log start never passes a
                        // served position. With it, it may, and a power cut
                        // may then move it back (segments whose deletion was
                        // not durable return), so ListOffsets cannot tell
                        // either: served data that went away is found by
                        // the oracle's check of the final log instead.
                        if position > self.floors[slot] && !cx.history.retention {
                            cx.violation(format!(
                                "p{p}: position {position} out of range: served data went away"
                            ));
                        }
                        // auto.offset.reset=earliest, through ListOffsets.
                        if !self.resets.contains(&p) {
                            self.resets.push(p);
                        }
                        caught_up = false;
                        continue;
                    }
                    c => {
                        caught_up = false;
                        self.retry(cx, c);
                        continue;
                    }
                }
                let hw = part.high_watermark;
                if self.main {
                    cx.history.hws.push(HwSeen {
                        sent_ms,
                        received_ms: cx.elapsed_ms,
                        consumer: self.client,
                        partition: p,
                        high_watermark: hw,
                        last_stable_offset: part.last_stable_offset,
                        log_start_offset: part.log_start_offset,
                    });
                }
                let aborted: Vec<(i64, i64)> = part
                    .aborted_transactions
                    .iter()
                    .flatten()
                    .map(|a| (a.first_offset, a.producer_id.0))
                    .collect();
                if self.isolation == Isolation::ReadUncommitted && !aborted.is_empty() {
                    cx.violation(format!(
                        "p{p}: a read_uncommitted fetch was sent aborted transactions {aborted:?}"
                    ));
                }
                let lso = part.last_stable_offset;
                let limit = match self.isolation {
                    Isolation::ReadCommitted => lso.min(hw),
                    Isolation::ReadUncommitted => hw,
                };
                let records = part.records.clone().unwrap_or_default();
                self.take_records(cx, slot, limit, aborted, records);
                if self.positions[slot] < limit {
                    caught_up = false;
                }
                if self.mode == Mode::ReadToEnd && lso < hw {
                    // A transaction is still open: wait for its end (or its
                    // timeout), so that the final log holds every marker.
                    open = Some((p, lso, hw));
                }
                if self.mode == Mode::ReadToEnd && self.main {
                    cx.history.final_high_watermark.insert(p, hw);
                }
            }
        }
        if self.mode != Mode::ReadToEnd || !caught_up || !answered.iter().all(|&a| a) {
            return;
        }
        if let Some((p, lso, hw)) = open {
            let waited_ms = cx.elapsed_ms - *self.started_ms.get_or_insert(cx.elapsed_ms);
            if waited_ms <= self.lso_wait_ms_max {
                self.pause_ms = 50;
                return;
            }
            cx.violation(format!(
                "{} p{p}: LSO {lso} still below the high watermark {hw} {waited_ms} ms after the final restart: an open transaction was not aborted within its timeout plus the check interval",
                self.topic
            ));
        }
        self.done = true;
        cx.history.final_reads_pending = cx.history.final_reads_pending.saturating_sub(1);
        cx.history.final_read_done = cx.history.final_reads_pending == 0;
        cx.note(format!(
            "final read of {} done: {} records",
            self.topic, self.records_seen
        ));
    }

    fn ask_earliest(&mut self, cx: &mut Cx) {
        let (version, req) = reset::earliest_request(cx, &self.topic, self.resets.clone());
        if let Some(corr) = cx.wire.send(version, &req) {
            self.asked = Some((corr, cx.elapsed_ms));
        }
    }

    fn on_earliest(&mut self, cx: &mut Cx, r: &ListOffsetsResponse) {
        let offsets = match reset::earliest_offsets(r) {
            Ok(offsets) => offsets,
            Err(code) => return self.retry(cx, code),
        };
        for (p, start) in offsets {
            let Some(slot) = usize::try_from(p)
                .ok()
                .filter(|&p| p < self.positions.len() && self.resets.contains(&(p as i32)))
            else {
                cx.violation(format!(
                    "ListOffsets answer names partition {p}, never asked"
                ));
                continue;
            };
            let position = self.positions[slot];
            cx.note(format!(
                "p{p}: position {position} out of range; reset to the earliest offset {start}"
            ));
            self.positions[slot] = start.max(0);
            self.floors[slot] = start.max(0);
            if self.mode == Mode::ReadToEnd && self.main {
                cx.history.final_log_start.insert(p, start.max(0));
            }
        }
        self.resets.clear();
    }

    fn take_records(
        &mut self,
        cx: &mut Cx,
        slot: usize,
        limit: i64,
        aborted: Vec<(i64, i64)>,
        records: Bytes,
    ) {
        if records.is_empty() {
            return;
        }
        let p = slot as i32;
        let batches = match batches::decode(records) {
            Ok(b) => b,
            Err(e) => {
                return cx.violation(format!("p{p}: undecodable records from the broker: {e}"))
            }
        };
        let read_committed = self.isolation == Isolation::ReadCommitted;
        let mut filter = AbortedFilter::new(aborted);
        for batch in batches {
            if batch.last_offset >= limit {
                let what = if read_committed {
                    "the last stable offset (or high watermark)"
                } else {
                    "the high watermark"
                };
                cx.violation(format!(
                    "{} p{p}: batch {}..={} served at or above {what} {limit}",
                    self.topic, batch.base_offset, batch.last_offset
                ));
            }
            // Kafka's consumer runs every batch through the filter, even one
            // it skips, so the aborted producers are tracked right.
            let visible = !read_committed || filter.visible(&batch);
            let visible = visible && batch.control.is_none();
            if batch.last_offset < self.positions[slot] {
                continue;
            }
            if self.mode == Mode::ReadToEnd {
                let key = (self.topic.clone(), p);
                cx.history
                    .final_batches
                    .entry(key)
                    .or_default()
                    .push(batch.clone());
            }
            let next = batch.last_offset + 1;
            for (offset, value) in batch.records {
                // A fetch starts at the batch holding the position: skip what
                // was already consumed, as a consumer does.
                if !visible || offset < self.positions[slot] {
                    continue;
                }
                self.records_seen += 1;
                if !self.main {
                    continue;
                }
                if self.mode == Mode::ReadToEnd {
                    let log = cx.history.final_log.entry(p).or_default();
                    log.push((offset, value.clone()));
                }
                let seen = Seen {
                    at_ms: cx.elapsed_ms,
                    consumer: self.client,
                    partition: p,
                    offset,
                    value,
                    read_committed,
                };
                cx.history.seen.push(seen);
            }
            // Markers and dropped batches move the position too, as
            // Kafka's consumer skips them.
            self.positions[slot] = self.positions[slot].max(next);
        }
    }

    fn retry(&mut self, cx: &mut Cx, code: i16) {
        if !is_retriable(code) {
            cx.violation(format!("fetch or ListOffsets: unexpected error {code}"));
        }
        self.failures += 1;
        let delay_ms = backoff_ms(cx.rng, self.failures.min(3));
        cx.wake_in(delay_ms);
    }
}

impl Client for Consumer {
    fn name(&self) -> String {
        format!(
            "c{} consumer {:?} {:?} fetch v{}{}",
            self.client,
            self.mode,
            self.isolation,
            self.fetch_version,
            if self.session.is_some() {
                " session"
            } else {
                ""
            }
        )
    }

    fn on_wake(&mut self, cx: &mut Cx) {
        if self.stopped || self.done || self.asked.is_some() {
            return;
        }
        if cx.wire.conn().is_none() {
            return cx.connect();
        }
        if self.resets.is_empty() {
            self.fetch(cx);
        } else {
            self.ask_earliest(cx);
        }
    }

    fn on_response(&mut self, cx: &mut Cx, corr: i32, response: ResponseKind) {
        let Some((asked, sent_ms)) = self.asked.take() else {
            panic!("a fetch answer with none in flight")
        };
        assert_eq!(asked, corr, "one request in flight");
        let failures_before = self.failures;
        match response {
            ResponseKind::Fetch(r) => self.on_fetch(cx, sent_ms, r),
            ResponseKind::ListOffsets(r) => self.on_earliest(cx, &r),
            other => panic!("Fetch or ListOffsets answered with {other:?}"),
        }
        if self.failures == failures_before {
            self.failures = 0;
            match std::mem::take(&mut self.pause_ms) {
                0 => self.on_wake(cx),
                pause_ms => cx.wake_in(pause_ms),
            }
        }
    }

    fn on_disconnect(&mut self, cx: &mut Cx) {
        self.asked = None;
        if let Some(s) = &mut self.session {
            // The fetch in flight may or may not have moved the epoch.
            s.epoch = 0;
        }
        self.failures += 1;
        let delay_ms = backoff_ms(cx.rng, self.failures.min(3));
        cx.wake_in(delay_ms);
    }

    fn finish(&mut self) {
        self.stopped = true;
    }

    fn is_done(&self) -> bool {
        self.done || self.stopped
    }

    fn status(&self) -> String {
        format!(
            "{}: positions {:?}, {} records seen",
            self.name(),
            self.positions,
            self.records_seen
        )
    }
}
