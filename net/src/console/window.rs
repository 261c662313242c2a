//! A page of a partition's log, as the partition page draws it: the
//! batches of one Fetch window (read with `batches`, the parser
//! `dump-log` uses), each with its records, its marker if it is a control
//! batch, and what a read_committed reader does with it.
//!
//! What a read_committed reader sees is worked out as a Kafka consumer
//! works it out (Java's `CompletedFetch.nextFetchedRecord`), from the
//! read_committed Fetch's own answer: only the batches that answer
//! carried (the broker sends nothing at or above the LSO); the aborted
//! transactions it listed, each as (producer id, first offset), taken in
//! order of first offset; a producer joins the aborted set once a batch's
//! last offset reaches that first offset, and leaves it at its ABORT
//! marker; a transactional data batch of a producer in the set is
//! skipped; control batches are never delivered.
//!
//! Pure: bytes in, structs out. The page renders them (`partition.rs`).

use std::collections::{BTreeMap, BTreeSet};

use doze_core::batch::BatchHeader;

use super::html;
use crate::batches::{self, Marker, Next};

/// What a read_committed reader does with a batch of the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Its records are delivered.
    Delivered,
    /// Skipped: its transaction was aborted.
    Aborted,
    /// Not sent: at or above the last stable offset.
    BeyondLso,
    /// Below the LSO but not in the read_committed answer (the log moved
    /// between the two fetches, or that answer's window was shorter).
    NotFetched,
    /// A control batch (a marker): no reader is given it.
    Control,
}

impl Fate {
    /// The `data-rc` attribute of the batch's row.
    pub fn name(self) -> &'static str {
        match self {
            Fate::Delivered => "delivered",
            Fate::Aborted => "aborted",
            Fate::BeyondLso => "beyond-lso",
            Fate::NotFetched => "not-fetched",
            Fate::Control => "control",
        }
    }
}

/// A control batch's meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Control {
    Marker {
        marker: Marker,
        coordinator_epoch: Option<i32>,
    },
    /// Another control type (`LEADER_CHANGE(2)`), or why it is unreadable.
    Other(String),
}

/// One record, ready to show (key and value already HTML-escaped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShownRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub key_html: String,
    pub value_html: String,
    pub headers: usize,
}

/// One batch of the page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShownBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub transactional: bool,
    pub control: Option<Control>,
    pub count: i32,
    pub codec: &'static str,
    pub size: usize,
    pub crc_ok: bool,
    /// Its data records at or after the page's `from` (none for a control
    /// batch), at most as many as the page has room for.
    pub records: Vec<ShownRecord>,
    /// Records before `from` (the fetch returns the whole batch; a reader
    /// starting at `from` skips them).
    pub records_before_from: usize,
    /// Records after the page's room ran out (the next page starts there).
    pub records_left_out: usize,
    /// Why (some of) its records could not be read.
    pub records_error: Option<String>,
    pub fate: Fate,
}

impl ShownBatch {
    pub fn marker(&self) -> Option<Marker> {
        match self.control {
            Some(Control::Marker { marker, .. }) => Some(marker),
            _ => None,
        }
    }
}

/// The batches of a window and where the next window starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub batches: Vec<ShownBatch>,
    /// The offset the next page starts at; None when this page reached
    /// the end of what the fetch could see.
    pub next_from: Option<i64>,
}

/// The batches of a Fetch answer's `records` from offset `from`, with at
/// most `records_max` data records shown: whole batches until the bytes
/// end (a last batch cut by the fetch's byte limit is left for the next
/// page) or the records run out of room. `end_offset` is the answer's
/// high watermark: a next page is offered if the page stops before it.
/// Fates are `NotFetched` (data) or `Control` until
/// `judge_read_committed` says more.
pub fn read_window(
    bytes: &[u8],
    from: i64,
    end_offset: i64,
    records_max: usize,
    value_chars: usize,
) -> Window {
    let size = bytes.len() as u64;
    let mut window = Window::default();
    let mut position = 0u64;
    let mut shown = 0usize;
    loop {
        let (header, batch_bytes) = match batches::next_batch(bytes, position, size) {
            Ok(Next::Batch(header, batch_bytes)) => (header, batch_bytes),
            // The end of the answer, or a batch cut by the byte limit (or
            // bytes that are not a batch): this page ends here.
            Ok(Next::End) | Ok(Next::Invalid(_)) | Err(_) => {
                // Not even one whole batch: nothing to page over.
                window.next_from = window
                    .batches
                    .last()
                    .map(|b| b.last_offset + 1)
                    .filter(|&next| next < end_offset);
                return window;
            }
        };
        position += batch_bytes.len() as u64;
        if header.last_offset() < from {
            continue; // wholly before the page (compaction can leave these)
        }
        let room = records_max.saturating_sub(shown);
        if room == 0 && !header.is_control() {
            window.next_from = Some(header.base_offset.max(from));
            return window;
        }
        let batch = shown_batch(&header, &batch_bytes, from, room, value_chars);
        shown += batch.records.len();
        let left_out = batch.records_left_out;
        let resume = batch.records.last().map(|r| r.offset + 1);
        window.batches.push(batch);
        if left_out > 0 {
            window.next_from = resume;
            return window;
        }
    }
}

fn shown_batch(
    header: &BatchHeader,
    bytes: &[u8],
    from: i64,
    room: usize,
    value_chars: usize,
) -> ShownBatch {
    let (crc_ok, _) = batches::crc_check(bytes);
    let mut records = Vec::new();
    let mut records_before_from = 0;
    let mut records_left_out = 0;
    let mut records_error = None;
    let mut control = None;
    match batches::records(header, bytes, crc_ok) {
        Err(e) => records_error = Some(e),
        Ok(mut stream) if header.is_control() => {
            // A control batch means what its first record says.
            control = Some(match stream.next() {
                None => Control::Other("a control batch without a record".into()),
                Some(Err(e)) => {
                    records_error = Some(e.clone());
                    Control::Other(e)
                }
                Some(Ok(first)) => match batches::control_record(first.key, first.value) {
                    Err(e) => Control::Other(e),
                    Ok(c) => match c.marker() {
                        Some(marker) => Control::Marker {
                            marker,
                            coordinator_epoch: c.coordinator_epoch,
                        },
                        None => Control::Other(format!("{}({})", c.type_name(), c.type_id)),
                    },
                },
            });
        }
        Ok(mut stream) => {
            // One record at a time, and none read once the page is full:
            // the rest of the batch is counted from its header.
            while records.len() < room {
                let r = match stream.next() {
                    None => break,
                    Some(Err(e)) => {
                        records_error = Some(e);
                        break;
                    }
                    Some(Ok(r)) => r,
                };
                let offset = header.base_offset.wrapping_add(i64::from(r.offset_delta));
                if offset < from {
                    records_before_from += 1;
                    continue;
                }
                let timestamp = if header.has_log_append_time() {
                    header.max_timestamp
                } else {
                    header.base_timestamp.wrapping_add(r.timestamp_delta)
                };
                records.push(ShownRecord {
                    offset,
                    timestamp,
                    key_html: html::record_bytes(r.key, value_chars),
                    value_html: html::record_bytes(r.value, value_chars),
                    headers: r.header_count,
                });
            }
            records_left_out = stream.left();
        }
    }
    if header.is_control() && control.is_none() {
        control = Some(Control::Other(
            records_error.clone().unwrap_or_else(|| "unreadable".into()),
        ));
    }
    ShownBatch {
        base_offset: header.base_offset,
        last_offset: header.last_offset(),
        producer_id: header.producer_id,
        producer_epoch: header.producer_epoch,
        transactional: header.is_transactional(),
        fate: if header.is_control() {
            Fate::Control
        } else {
            Fate::NotFetched
        },
        control,
        count: header.records_count,
        codec: codec_name(header.compression_code()),
        size: bytes.len(),
        crc_ok,
        records,
        records_before_from,
        records_left_out,
        records_error,
    }
}

fn codec_name(code: u8) -> &'static str {
    match code {
        0 => "none",
        1 => "gzip",
        2 => "snappy",
        3 => "lz4",
        4 => "zstd",
        _ => "unknown",
    }
}

/// A batch as a read_committed reader meets it: enough of the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeenBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub producer_id: i64,
    pub transactional: bool,
    /// For a control batch: its marker, if it reads as one.
    pub control: Option<Option<Marker>>,
}

/// The batches of a read_committed Fetch answer (whole ones).
pub fn seen_batches(bytes: &[u8]) -> Vec<SeenBatch> {
    let size = bytes.len() as u64;
    let mut out = Vec::new();
    let mut position = 0u64;
    while let Ok(Next::Batch(header, batch_bytes)) = batches::next_batch(bytes, position, size) {
        position += batch_bytes.len() as u64;
        out.push(SeenBatch {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            producer_id: header.producer_id,
            transactional: header.is_transactional(),
            control: header
                .is_control()
                .then(|| batches::batch_marker(&header, &batch_bytes)),
        });
    }
    out
}

/// Kafka's consumer over a read_committed answer: the base offsets of the
/// data batches it delivers, and of those it skips as aborted.
pub fn read_committed(
    seen: &[SeenBatch],
    aborted: &[(i64, i64)],
) -> (BTreeSet<i64>, BTreeSet<i64>) {
    // Ordered by first offset, as the consumer's priority queue.
    let mut queue: Vec<(i64, i64)> = aborted.iter().map(|&(pid, first)| (first, pid)).collect();
    queue.sort_unstable();
    let mut queue = queue.into_iter().peekable();
    let mut aborted_producers: BTreeSet<i64> = BTreeSet::new();
    let mut delivered = BTreeSet::new();
    let mut skipped = BTreeSet::new();
    for b in seen {
        // Kafka checks `batch.hasProducerId()`: -1 has none.
        if b.producer_id >= 0 {
            while let Some(&(first, pid)) = queue.peek() {
                if first > b.last_offset {
                    break;
                }
                aborted_producers.insert(pid);
                queue.next();
            }
            if b.control == Some(Some(Marker::Abort)) {
                aborted_producers.remove(&b.producer_id);
            } else if b.transactional && aborted_producers.contains(&b.producer_id) {
                skipped.insert(b.base_offset);
                continue;
            }
        }
        if b.control.is_none() {
            delivered.insert(b.base_offset);
        }
    }
    (delivered, skipped)
}

/// Sets each data batch's fate from what the read_committed reader did
/// (`read_committed`) and the LSO its answer gave.
pub fn judge_read_committed(
    window: &mut Window,
    delivered: &BTreeSet<i64>,
    skipped: &BTreeSet<i64>,
    lso: i64,
) {
    for b in &mut window.batches {
        if b.control.is_some() {
            b.fate = Fate::Control;
        } else if delivered.contains(&b.base_offset) {
            b.fate = Fate::Delivered;
        } else if skipped.contains(&b.base_offset) {
            b.fate = Fate::Aborted;
        } else if b.base_offset >= lso {
            b.fate = Fate::BeyondLso;
        } else {
            b.fate = Fate::NotFetched;
        }
    }
}

/// Where the LSO line goes among the window's batches: before batch `i`
/// (`Some(i)`, `i == len` for after the last), or nowhere on this page.
pub fn lso_line_at(window: &Window, lso: i64, from: i64) -> Option<usize> {
    if lso < from {
        return Some(0);
    }
    match window.batches.iter().position(|b| b.last_offset >= lso) {
        Some(i) => Some(i),
        // After the last batch, if the page reaches the end of the log.
        None if window.next_from.is_none() => Some(window.batches.len()),
        None => None,
    }
}

/// The producers whose data batches on the page are of a transaction still
/// open (from DescribeProducers: producer id to where its open
/// transaction starts).
pub fn open_batches(window: &Window, open: &BTreeMap<i64, i64>) -> BTreeSet<i64> {
    window
        .batches
        .iter()
        .filter(|b| b.transactional && b.control.is_none())
        .filter(|b| {
            open.get(&b.producer_id)
                .is_some_and(|&start| b.base_offset >= start)
        })
        .map(|b| b.base_offset)
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use doze_core::batch;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    /// A data batch at `base` of `values`, by `producer` (transactional or not).
    pub fn data(base: i64, producer: i64, transactional: bool, values: &[&str]) -> Bytes {
        let records: Vec<Record> = values
            .iter()
            .enumerate()
            .map(|(i, v)| Record {
                transactional,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: producer,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: base + i as i64,
                sequence: if producer >= 0 { i as i32 } else { -1 },
                timestamp: 1_000 + i as i64,
                key: Some(Bytes::from(format!("k{}", base + i as i64))),
                value: Some(Bytes::copy_from_slice(v.as_bytes())),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
        buf.freeze()
    }

    pub fn marker(base: i64, producer: i64, commit: bool) -> Bytes {
        let m = doze_core::control::build(producer, 0, commit, 0, 2_000);
        batch::with_base_offset(&m, base)
    }

    /// Producer 7 commits 0-1, producer 8 aborts 3-4, producer 9 is open
    /// from 6; a plain batch of producer -1 at 7.
    pub fn log() -> Vec<u8> {
        let mut log = Vec::new();
        for b in [
            data(0, 7, true, &["c0", "c1"]),
            marker(2, 7, true),
            data(3, 8, true, &["a3", "a4"]),
            marker(5, 8, false),
            data(6, 9, true, &["o6"]),
            data(7, -1, false, &["p7"]),
        ] {
            log.extend_from_slice(&b);
        }
        log
    }

    fn fates(window: &Window) -> Vec<(i64, Fate)> {
        window
            .batches
            .iter()
            .map(|b| (b.base_offset, b.fate))
            .collect()
    }

    #[test]
    fn markers_are_dividers_and_aborted_records_are_skipped() {
        let log = log();
        let mut window = read_window(&log, 0, 8, 100, 50);
        assert_eq!(window.next_from, None, "the whole log fits");
        assert_eq!(window.batches.len(), 6);
        assert_eq!(window.batches[1].marker(), Some(Marker::Commit));
        assert_eq!(window.batches[3].marker(), Some(Marker::Abort));
        assert!(
            window.batches[1].records.is_empty(),
            "a marker shows no records"
        );
        assert_eq!(window.batches[2].records[1].value_html, "a4");

        // The read_committed answer stops at the LSO (6) and lists the
        // aborted transaction of producer 8 from offset 3.
        let lso = 6;
        let committed_end = data(0, 7, true, &["c0", "c1"]).len()
            + marker(2, 7, true).len()
            + data(3, 8, true, &["a3", "a4"]).len()
            + marker(5, 8, false).len();
        let seen = seen_batches(&log[..committed_end]);
        let (delivered, skipped) = read_committed(&seen, &[(8, 3)]);
        assert_eq!(delivered, BTreeSet::from([0]));
        assert_eq!(skipped, BTreeSet::from([3]));
        judge_read_committed(&mut window, &delivered, &skipped, lso);
        assert_eq!(
            fates(&window),
            [
                (0, Fate::Delivered),
                (2, Fate::Control),
                (3, Fate::Aborted),
                (5, Fate::Control),
                (6, Fate::BeyondLso),
                (7, Fate::BeyondLso),
            ]
        );
        // The LSO line goes before the open transaction's first batch.
        assert_eq!(lso_line_at(&window, lso, 0), Some(4));
        let open = open_batches(&window, &BTreeMap::from([(9, 6)]));
        assert_eq!(open, BTreeSet::from([6]));
    }

    #[test]
    fn a_producer_leaves_the_aborted_set_at_its_abort_marker() {
        // Producer 8 aborts 0, then commits 3: only 3 is delivered.
        let mut log = Vec::new();
        for b in [
            data(0, 8, true, &["a0"]),
            marker(1, 8, false),
            data(2, 8, true, &["c2"]),
            marker(3, 8, true),
        ] {
            log.extend_from_slice(&b);
        }
        let (delivered, skipped) = read_committed(&seen_batches(&log), &[(8, 0)]);
        assert_eq!(delivered, BTreeSet::from([2]));
        assert_eq!(skipped, BTreeSet::from([0]));
        // An aborted transaction that began before the page (first offset
        // below its first batch) still applies to it.
        let tail = &log[data(0, 8, true, &["a0"]).len() + marker(1, 8, false).len()..];
        let (delivered, _) = read_committed(&seen_batches(tail), &[]);
        assert_eq!(delivered, BTreeSet::from([2]));
        let mid = &log[..data(0, 8, true, &["a0"]).len()];
        let (delivered, skipped) = read_committed(&seen_batches(mid), &[(8, -5)]);
        assert!(delivered.is_empty());
        assert_eq!(skipped, BTreeSet::from([0]));
    }

    #[test]
    fn pages_end_at_cut_batches_and_at_the_records_room() {
        let log = log();
        // Cut inside the third batch: two whole batches, next from 3.
        let cut_at = data(0, 7, true, &["c0", "c1"]).len() + marker(2, 7, true).len() + 10;
        let window = read_window(&log[..cut_at], 0, 8, 100, 50);
        assert_eq!(window.batches.len(), 2);
        assert_eq!(window.next_from, Some(3));
        // Room for 3 records: 0-1, the marker, then 3 of 3-4; next from 4.
        let window = read_window(&log, 0, 8, 3, 50);
        assert_eq!(window.batches.len(), 3);
        assert_eq!(window.batches[2].records.len(), 1);
        assert_eq!(window.batches[2].records_left_out, 1);
        assert_eq!(window.next_from, Some(4));
        // From 4: the batch 3-4 is fetched whole, its record 3 skipped.
        let from_4 = &log[data(0, 7, true, &["c0", "c1"]).len() + marker(2, 7, true).len()..];
        let window = read_window(from_4, 4, 8, 100, 50);
        assert_eq!(window.batches[0].records_before_from, 1);
        assert_eq!(window.batches[0].records[0].offset, 4);
        // Not even one whole batch: no next page to offer.
        let window = read_window(&log[..20], 0, 8, 100, 50);
        assert!(window.batches.is_empty());
        assert_eq!(window.next_from, None);
    }

    #[test]
    fn the_lso_line_at_the_top_or_the_end() {
        let log = log();
        let window = read_window(&log, 0, 8, 100, 50);
        // Nothing open: LSO = HW = 8, after the last batch.
        assert_eq!(lso_line_at(&window, 8, 0), Some(6));
        // An LSO before the page: at the top.
        let window = read_window(&log, 3, 8, 100, 50);
        assert_eq!(lso_line_at(&window, 1, 3), Some(0));
        // Beyond a page that does not reach the end: not on it.
        let window = read_window(&log, 0, 8, 2, 50);
        assert!(window.next_from.is_some());
        assert_eq!(lso_line_at(&window, 6, 0), None);
    }

    #[test]
    fn hostile_record_bytes_reach_the_page_escaped() {
        let log = data(0, -1, false, &["<script>alert(1)</script>"]);
        let window = read_window(&log, 0, 1, 10, 200);
        let value = &window.batches[0].records[0].value_html;
        assert_eq!(value, "&lt;script&gt;alert(1)&lt;/script&gt;");
    }
}
