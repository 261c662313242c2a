//! `doze-kafka dump-log`: prints segment files offline, as Kafka's
//! `kafka-dump-log.sh --files` does (tools/.../DumpLogSegments.java): a
//! `Dumping <path>` line, `Log starting offset: <base>` from the file name,
//! one line per batch with Kafka's field names in Kafka's order, and with
//! `--deep-iteration` or `--print-data-log` a `| offset: ...` line per record.
//!
//! Differences from Kafka's tool, on purpose:
//! - A control batch's line ends with its marker (`endTxnMarker: COMMIT
//!   coordinatorEpoch: 0`) without deep iteration too, so that markers can be
//!   found with grep in the default output.
//! - Keys and values are printed as UTF-8 (invalid bytes replaced) with
//!   control characters, bidi overrides and backslashes escaped, so that a
//!   record cannot drive the terminal.
//! - Bytes that are not a whole v2 batch end the dump with Kafka's
//!   `Found N invalid bytes at the end of <name>` plus where and why; a batch
//!   whose CRC does not match prints `isvalid: false` and the dump goes on.
//!   A compressed batch's records are decompressed only when its CRC matches.
//! - Only `.log` files are read; anything else is skipped with a note.
//! - `--output json`: one JSON object per file, on one line.
//!
//! Nothing here panics on bad input: a file is read a batch at a time (never
//! more than its size), and every length read from it is checked.
//!
//! Nothing is held but the batch being read and its current record: a
//! batch's records are decompressed and printed one at a time
//! (`batches::Records`), so a batch of millions of tiny records costs a
//! few MiB (held whole, a million took 342 MiB; 6.7 million, 2.1 GiB).
//! Past `limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX` of a batch's
//! records, or where its compressed stream breaks, the records read so far
//! are printed, then the error.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use doze_core::batch::{BatchHeader, NO_SEQUENCE};
use doze_core::log::clean::records::delete_horizon_ms;

use crate::batches::{self, next_batch, Next, ReadAt, Record};

/// How the dump is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Kafka's `kafka-dump-log.sh` lines.
    Human,
    /// One JSON object per file, one per line.
    Json,
}

#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub format: Format,
    /// Each record's metadata: offset, timestamp, sizes, sequence, header keys.
    pub deep_iteration: bool,
    /// Each record's key and value too (implies `deep_iteration`).
    pub print_data_log: bool,
}

/// Dumps each of `files` to `out`, notes and errors to `err`. Returns how
/// many files could not be read at all (missing, unreadable, a read that
/// failed halfway); corrupt contents are reported, not counted. An error is
/// a failed write to `out` or `err`.
pub fn dump_files(
    files: &[PathBuf],
    options: Options,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> io::Result<usize> {
    let mut failed = 0;
    for path in files {
        if !dump_file(path, options, out, err)? {
            failed += 1;
        }
    }
    Ok(failed)
}

/// One file; `Ok(false)` when it could not be read.
fn dump_file(
    path: &Path,
    options: Options,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> io::Result<bool> {
    let shown = path.to_string_lossy().into_owned();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| shown.clone());
    let Some(stem) = name.strip_suffix(".log") else {
        let reason = "not a .log segment (dump-log reads .log files only)";
        match options.format {
            Format::Human => {
                out.flush()?;
                writeln!(
                    err,
                    "doze-kafka: skipping {}: {reason}",
                    escape_text(&shown)
                )?;
            }
            Format::Json => {
                let note = serde_json::json!({ "file": shown, "skipped": reason });
                writeln!(out, "{note}")?;
            }
        }
        return Ok(true);
    };
    // Kafka reads the base offset off the name (`<20 digits>.log`).
    let log_start_offset = stem.parse::<i64>().ok();

    let opened = File::open(path).and_then(|file| {
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        Ok((file, meta.len()))
    });
    let (file, size) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            let reason = format!("cannot read {shown}: {e}");
            match options.format {
                Format::Human => {
                    writeln!(out, "Dumping {}", escape_text(&shown))?;
                    out.flush()?;
                    writeln!(err, "doze-kafka: error: {}", escape_text(&reason))?;
                }
                Format::Json => {
                    let note = serde_json::json!({ "file": shown, "error": reason });
                    writeln!(out, "{note}")?;
                }
            }
            return Ok(false);
        }
    };

    let mut sink: Box<dyn Sink + '_> = match options.format {
        Format::Human => Box::new(Human { out, err, options }),
        Format::Json => Box::new(Json {
            out,
            first: true,
            first_record: true,
        }),
    };
    let end = dump_segment(
        &file,
        size,
        &shown,
        log_start_offset,
        options,
        sink.as_mut(),
    )?;
    let read_ok = end.read_error.is_none();
    sink.end(&name, &end)?;
    Ok(read_ok)
}

/// Bytes at the end of a file that are not a whole batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InvalidBytes {
    pub position: u64,
    pub bytes: u64,
    pub reason: String,
}

/// How the dump of a segment ended.
#[derive(Clone, Debug, Default)]
pub struct SegmentEnd {
    pub invalid: Option<InvalidBytes>,
    /// A read that failed (an I/O error, not bad contents).
    pub read_error: Option<String>,
}

/// One batch as printed. Field names are Kafka's (camelCase in JSON).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchDump {
    pub base_offset: i64,
    pub last_offset: i64,
    pub count: i32,
    pub base_sequence: i32,
    pub last_sequence: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub partition_leader_epoch: i32,
    pub is_transactional: bool,
    pub is_control: bool,
    pub delete_horizon_ms: Option<i64>,
    pub position: u64,
    /// `CreateTime` or `LogAppendTime`: what `max_timestamp` is.
    pub timestamp_type: &'static str,
    pub max_timestamp: i64,
    pub size: u64,
    pub magic: i8,
    pub compress_codec: String,
    pub crc: u32,
    pub is_valid: bool,
    /// The CRC of the bytes, when it is not the stored one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub computed_crc: Option<u32>,
    /// For a control batch: its (first) record's marker.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlDump>,
    // With deep iteration the records follow, each handed to the sink as
    // it is read (`Sink::record`), then why the rest could not be read
    // (`Sink::batch_end`): JSON's "records" and "recordsError".
}

/// One record as printed.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordDump {
    pub offset: i64,
    pub timestamp: i64,
    pub key_size: i32,
    pub value_size: i32,
    pub sequence: i32,
    pub header_keys: Vec<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlDump>,
    /// With `--print-data-log`, for a data record with a key: UTF-8, lossy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// With `--print-data-log`, for a data record with a value: UTF-8, lossy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
}

/// What a control record says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlDump {
    /// `COMMIT` or `ABORT` for a transaction marker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_txn_marker: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordinator_epoch: Option<i32>,
    /// Another control type, as Kafka names it: `LEADER_CHANGE(2)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_type: Option<String>,
    /// Why the control record could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_error: Option<String>,
}

/// Receives a segment's dump as it is read: nothing is held but the batch
/// being read and its current record, whatever the batch holds.
trait Sink {
    fn start(&mut self, file: &str, log_start_offset: Option<i64>, size: u64) -> io::Result<()>;
    /// A batch; with `deep` its records follow (`record`), then `batch_end`.
    fn batch(&mut self, batch: &BatchDump, deep: bool) -> io::Result<()>;
    fn record(&mut self, batch: &BatchDump, record: &RecordDump) -> io::Result<()>;
    /// The end of a deep batch's records, and why the rest could not be
    /// read.
    fn batch_end(&mut self, records_error: Option<&str>) -> io::Result<()>;
    fn end(&mut self, name: &str, end: &SegmentEnd) -> io::Result<()>;
}

/// Reads the batches of a segment of `size` bytes one at a time, handing
/// each to `sink`. Stops at the first bytes that are not a whole v2 batch.
fn dump_segment(
    source: &(impl ReadAt + ?Sized),
    size: u64,
    shown: &str,
    log_start_offset: Option<i64>,
    options: Options,
    sink: &mut dyn Sink,
) -> io::Result<SegmentEnd> {
    sink.start(shown, log_start_offset, size)?;
    let mut end = SegmentEnd::default();
    let mut position = 0u64;
    loop {
        match next_batch(source, position, size) {
            Ok(Next::End) => break,
            Ok(Next::Invalid(reason)) => {
                end.invalid = Some(InvalidBytes {
                    position,
                    bytes: size - position,
                    reason,
                });
                break;
            }
            Ok(Next::Batch(header, bytes)) => {
                dump_batch(&header, &bytes, position, options, sink)?;
                position += bytes.len() as u64;
            }
            Err(e) => {
                end.read_error = Some(format!("cannot read {shown} at position {position}: {e}"));
                break;
            }
        }
    }
    Ok(end)
}

/// Kafka's `DefaultRecordBatch.incrementSequence` (sequences wrap at
/// 2^31), in wider arithmetic so that a corrupt batch cannot overflow it.
fn add_sequence(base: i32, delta: i32) -> i32 {
    if base == NO_SEQUENCE {
        return NO_SEQUENCE;
    }
    let sum = i64::from(base) + i64::from(delta);
    let wrapped = if sum > i64::from(i32::MAX) {
        sum - (1i64 << 31)
    } else {
        sum
    };
    wrapped as i32
}

fn codec_name(code: u8) -> String {
    match code {
        0 => "none".into(),
        1 => "gzip".into(),
        2 => "snappy".into(),
        3 => "lz4".into(),
        4 => "zstd".into(),
        other => format!("unknown({other})"),
    }
}

/// One batch to `sink`: its line, then with deep iteration its records,
/// each as it is read.
fn dump_batch(
    header: &BatchHeader,
    bytes: &[u8],
    position: u64,
    options: Options,
    sink: &mut dyn Sink,
) -> io::Result<()> {
    let (is_valid, computed_crc) = batches::crc_check(bytes);
    let deep = options.deep_iteration || options.print_data_log;
    let with_data = options.print_data_log;
    let mut records = None;
    let mut records_error = None;
    if deep || header.is_control() {
        match batches::records(header, bytes, is_valid) {
            Ok(stream) => records = Some(stream),
            Err(e) => records_error = Some(e),
        }
    }
    // A control batch's line ends with what its first record says: that
    // record is read first, and printed first.
    let mut first = None;
    let control = if header.is_control() {
        Some(match records.as_mut().and_then(|stream| stream.next()) {
            Some(Ok(record)) => {
                let dump = record_dump(header, &record, with_data);
                let control = dump.control.clone().unwrap_or_default();
                first = Some(dump);
                control
            }
            Some(Err(e)) => {
                records_error = Some(e.clone());
                ControlDump {
                    control_error: Some(e),
                    ..ControlDump::default()
                }
            }
            None => ControlDump {
                control_error: Some(
                    records_error
                        .clone()
                        .unwrap_or_else(|| "the control batch holds no record".into()),
                ),
                ..ControlDump::default()
            },
        })
    } else {
        None
    };
    let dump = BatchDump {
        base_offset: header.base_offset,
        last_offset: header
            .base_offset
            .wrapping_add(i64::from(header.last_offset_delta)),
        count: header.records_count,
        base_sequence: header.base_sequence,
        last_sequence: add_sequence(header.base_sequence, header.last_offset_delta),
        producer_id: header.producer_id,
        producer_epoch: header.producer_epoch,
        partition_leader_epoch: header.partition_leader_epoch,
        is_transactional: header.is_transactional(),
        is_control: header.is_control(),
        delete_horizon_ms: delete_horizon_ms(header),
        position,
        timestamp_type: timestamp_type(header),
        max_timestamp: header.max_timestamp,
        size: bytes.len() as u64,
        magic: header.magic,
        compress_codec: codec_name(header.compression_code()),
        crc: header.crc,
        is_valid,
        computed_crc,
        control,
    };
    sink.batch(&dump, deep)?;
    if !deep {
        // A control batch's record error is its control error already.
        return Ok(());
    }
    if let Some(first) = &first {
        sink.record(&dump, first)?;
    }
    if let Some(stream) = records.as_mut() {
        while let Some(read) = stream.next() {
            match read {
                Ok(record) => sink.record(&dump, &record_dump(header, &record, with_data))?,
                // The last: the stream ends after an error.
                Err(e) => records_error = Some(e),
            }
        }
    }
    sink.batch_end(records_error.as_deref())
}

fn timestamp_type(header: &BatchHeader) -> &'static str {
    if header.has_log_append_time() {
        "LogAppendTime"
    } else {
        "CreateTime"
    }
}

fn record_dump(header: &BatchHeader, record: &Record<'_>, with_data: bool) -> RecordDump {
    let timestamp = if header.has_log_append_time() {
        header.max_timestamp
    } else {
        header.base_timestamp.wrapping_add(record.timestamp_delta)
    };
    let size = |b: Option<&[u8]>| b.map_or(-1, |b| i32::try_from(b.len()).unwrap_or(i32::MAX));
    let control = header
        .is_control()
        .then(|| control_record(record.key, record.value));
    let text = |b: Option<&[u8]>| {
        b.filter(|_| with_data && control.is_none())
            .map(|b| String::from_utf8_lossy(b).into_owned())
    };
    RecordDump {
        offset: header
            .base_offset
            .wrapping_add(i64::from(record.offset_delta)),
        timestamp,
        key_size: size(record.key),
        value_size: size(record.value),
        sequence: add_sequence(header.base_sequence, record.offset_delta),
        header_keys: record
            .header_keys()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect(),
        key: text(record.key),
        payload: text(record.value),
        control,
    }
}

/// A control record as printed: a transaction marker with its
/// coordinator epoch, another control type by name, or why it is unreadable.
fn control_record(key: Option<&[u8]>, value: Option<&[u8]>) -> ControlDump {
    let control = match batches::control_record(key, value) {
        Ok(control) => control,
        Err(e) => {
            return ControlDump {
                control_error: Some(e),
                ..ControlDump::default()
            }
        }
    };
    let Some(marker) = control.marker() else {
        return ControlDump {
            control_type: Some(format!("{}({})", control.type_name(), control.type_id)),
            ..ControlDump::default()
        };
    };
    ControlDump {
        end_txn_marker: Some(marker.name()),
        coordinator_epoch: control.coordinator_epoch,
        control_error: control.coordinator_epoch.is_none().then(|| {
            format!(
                "a marker value of {} bytes (6 expected)",
                control.value_bytes
            )
        }),
        ..ControlDump::default()
    }
}

/// Text safe to print on a terminal: backslash, control characters (C0,
/// DEL, C1) and the bidi controls that reorder a line are escaped.
pub fn escape_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || is_bidi_control(c) => {
                out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out
}

fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// Kafka's lines.
struct Human<'a> {
    out: &'a mut dyn Write,
    err: &'a mut dyn Write,
    options: Options,
}

impl Human<'_> {
    fn control_suffix(line: &mut String, control: &ControlDump) {
        if let Some(marker) = control.end_txn_marker {
            line.push_str(&format!(" endTxnMarker: {marker}"));
            if let Some(epoch) = control.coordinator_epoch {
                line.push_str(&format!(" coordinatorEpoch: {epoch}"));
            }
        }
        if let Some(kind) = &control.control_type {
            line.push_str(&format!(" controlType: {kind}"));
        }
        if let Some(error) = &control.control_error {
            line.push_str(&format!(" controlError: {}", escape_text(error)));
        }
    }
}

impl Sink for Human<'_> {
    fn start(&mut self, file: &str, log_start_offset: Option<i64>, _size: u64) -> io::Result<()> {
        writeln!(self.out, "Dumping {}", escape_text(file))?;
        match log_start_offset {
            Some(offset) => writeln!(self.out, "Log starting offset: {offset}"),
            None => writeln!(
                self.out,
                "Log starting offset: unknown (the file name is not <offset>.log)"
            ),
        }
    }

    fn batch(&mut self, b: &BatchDump, _deep: bool) -> io::Result<()> {
        let horizon = match b.delete_horizon_ms {
            Some(ms) => format!("OptionalLong[{ms}]"),
            None => "OptionalLong.empty".into(),
        };
        let mut line = format!(
            "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} \
             producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} \
             isControl: {} deleteHorizonMs: {horizon} position: {} {}: {} size: {} magic: {} \
             compresscodec: {} crc: {} isvalid: {}",
            b.base_offset,
            b.last_offset,
            b.count,
            b.base_sequence,
            b.last_sequence,
            b.producer_id,
            b.producer_epoch,
            b.partition_leader_epoch,
            b.is_transactional,
            b.is_control,
            b.position,
            b.timestamp_type,
            b.max_timestamp,
            b.size,
            b.magic,
            b.compress_codec,
            b.crc,
            b.is_valid,
        );
        if let Some(control) = &b.control {
            Self::control_suffix(&mut line, control);
        }
        writeln!(self.out, "{line}")
    }

    fn record(&mut self, b: &BatchDump, r: &RecordDump) -> io::Result<()> {
        let keys: Vec<String> = r.header_keys.iter().map(|k| escape_text(k)).collect();
        let mut line = format!(
            "| offset: {} {}: {} keySize: {} valueSize: {} sequence: {} headerKeys: [{}]",
            r.offset,
            b.timestamp_type,
            r.timestamp,
            r.key_size,
            r.value_size,
            r.sequence,
            keys.join(","),
        );
        if let Some(control) = &r.control {
            Self::control_suffix(&mut line, control);
        }
        if self.options.print_data_log {
            if let Some(key) = &r.key {
                line.push_str(&format!(" key: {}", escape_text(key)));
            }
            if let Some(payload) = &r.payload {
                line.push_str(&format!(" payload: {}", escape_text(payload)));
            }
        }
        writeln!(self.out, "{line}")
    }

    fn batch_end(&mut self, records_error: Option<&str>) -> io::Result<()> {
        if let Some(error) = records_error {
            writeln!(self.out, "| error: {}", escape_text(error))?;
        }
        Ok(())
    }

    fn end(&mut self, name: &str, end: &SegmentEnd) -> io::Result<()> {
        if let Some(invalid) = &end.invalid {
            writeln!(
                self.out,
                "Found {} invalid bytes at the end of {} (position {}: {})",
                invalid.bytes,
                escape_text(name),
                invalid.position,
                escape_text(&invalid.reason)
            )?;
        }
        if let Some(error) = &end.read_error {
            self.out.flush()?;
            writeln!(self.err, "doze-kafka: error: {}", escape_text(error))?;
        }
        Ok(())
    }
}

/// One JSON object per file, written as the batches (and their records)
/// are read:
/// `{"file", "logStartOffset", "size", "batches": [...], "invalidBytes"?, "error"?}`,
/// a deep batch's `"records": [...]` and `"recordsError"?` last in it.
struct Json<'a> {
    out: &'a mut dyn Write,
    /// No batch written yet (of this file), no record yet (of this batch).
    first: bool,
    first_record: bool,
}

impl Sink for Json<'_> {
    fn start(&mut self, file: &str, log_start_offset: Option<i64>, size: u64) -> io::Result<()> {
        write!(
            self.out,
            "{{\"file\":{},\"logStartOffset\":{},\"size\":{size},\"batches\":[",
            serde_json::to_string(file)?,
            serde_json::to_string(&log_start_offset)?,
        )
    }

    fn batch(&mut self, batch: &BatchDump, deep: bool) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",")?;
        }
        self.first = false;
        let mut object = serde_json::to_vec(batch)?;
        if !deep {
            return self.out.write_all(&object);
        }
        // Left open for its records.
        assert_eq!(object.pop(), Some(b'}'), "a batch is a JSON object");
        self.out.write_all(&object)?;
        self.first_record = true;
        self.out.write_all(b",\"records\":[")
    }

    fn record(&mut self, _batch: &BatchDump, record: &RecordDump) -> io::Result<()> {
        if !self.first_record {
            self.out.write_all(b",")?;
        }
        self.first_record = false;
        serde_json::to_writer(&mut *self.out, record)?;
        Ok(())
    }

    fn batch_end(&mut self, records_error: Option<&str>) -> io::Result<()> {
        self.out.write_all(b"]")?;
        if let Some(error) = records_error {
            write!(
                self.out,
                ",\"recordsError\":{}",
                serde_json::to_string(error)?
            )?;
        }
        self.out.write_all(b"}")
    }

    fn end(&mut self, _name: &str, end: &SegmentEnd) -> io::Result<()> {
        self.out.write_all(b"]")?;
        if let Some(invalid) = &end.invalid {
            write!(
                self.out,
                ",\"invalidBytes\":{}",
                serde_json::to_string(invalid)?
            )?;
        }
        if let Some(error) = &end.read_error {
            write!(self.out, ",\"error\":{}", serde_json::to_string(error)?)?;
        }
        self.out.write_all(b"}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use doze_core::batch;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    fn batch(base_offset: i64, values: &[&str], compression: Compression) -> Bytes {
        let records: Vec<Record> = values
            .iter()
            .enumerate()
            .map(|(i, v)| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: 3,
                producer_epoch: 1,
                timestamp_type: TimestampType::Creation,
                offset: base_offset + i as i64,
                sequence: i as i32,
                timestamp: 1_000 + i as i64,
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::copy_from_slice(v.as_bytes())),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
        buf.freeze()
    }

    /// Three batches, and where each ends.
    fn segment_and_ends() -> (Vec<u8>, Vec<usize>) {
        let marker = doze_core::control::build(3, 1, false, 5, 2_000);
        let mut s = Vec::new();
        let mut ends = Vec::new();
        for b in [
            batch(0, &["a", "bb"], Compression::None),
            batch(2, &["ccc"], Compression::Gzip),
            batch::with_base_offset(&marker, 3),
        ] {
            s.extend_from_slice(&b);
            ends.push(s.len());
        }
        (s, ends)
    }

    fn segment() -> Vec<u8> {
        segment_and_ends().0
    }

    fn dump(bytes: &[u8], options: Options) -> (String, SegmentEnd) {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let mut sink: Box<dyn Sink> = match options.format {
            Format::Human => Box::new(Human {
                out: &mut out,
                err: &mut err,
                options,
            }),
            Format::Json => Box::new(Json {
                out: &mut out,
                first: true,
                first_record: true,
            }),
        };
        let end = dump_segment(
            bytes,
            bytes.len() as u64,
            "seg.log",
            Some(0),
            options,
            sink.as_mut(),
        )
        .unwrap();
        sink.end("seg.log", &end).unwrap();
        drop(sink);
        (String::from_utf8(out).unwrap(), end)
    }

    const DATA: Options = Options {
        format: Format::Human,
        deep_iteration: false,
        print_data_log: true,
    };

    #[test]
    fn a_segment_reads_whole() {
        let (text, end) = dump(&segment(), DATA);
        assert!(end.invalid.is_none() && end.read_error.is_none(), "{text}");
        assert!(text.contains("| offset: 1 CreateTime: 1001 keySize: 2 valueSize: 2 sequence: 1 headerKeys: [] key: k1 payload: bb"), "{text}");
        assert!(text.contains("compresscodec: gzip"), "{text}");
        assert!(text.contains("payload: ccc"), "{text}");
        assert!(
            text.contains("isvalid: true endTxnMarker: ABORT coordinatorEpoch: 5\n"),
            "{text}"
        );
        assert!(text.contains("| offset: 3 CreateTime: 2000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 5\n"), "{text}");
    }

    /// Every truncation and every flipped byte of a segment: no panic, and
    /// the batches before the damage read as before.
    #[test]
    fn damage_never_panics() {
        let (good, ends) = segment_and_ends();
        for format in [Format::Human, Format::Json] {
            let options = Options { format, ..DATA };
            for cut in 0..good.len() {
                let (_, end) = dump(&good[..cut], options);
                assert!(end.read_error.is_none());
                let whole = cut == 0 || ends.contains(&cut);
                assert_eq!(end.invalid.is_some(), !whole, "cut {cut}");
            }
            for at in 0..good.len() {
                for flip in [0x01u8, 0x80, 0xff] {
                    let mut bad = good.clone();
                    bad[at] ^= flip;
                    let (text, end) = dump(&bad, options);
                    assert!(end.read_error.is_none());
                    if format == Format::Json {
                        serde_json::from_str::<serde_json::Value>(&text).expect("valid JSON");
                    }
                }
            }
        }
    }

    #[test]
    fn sequences_wrap_as_kafka_does() {
        assert_eq!(add_sequence(-1, 5), -1);
        assert_eq!(add_sequence(10, 5), 15);
        assert_eq!(add_sequence(i32::MAX, 1), 0);
        assert_eq!(add_sequence(i32::MAX - 1, 3), 1);
        // Corrupt deltas do not overflow.
        let _ = add_sequence(i32::MIN, i32::MIN);
        let _ = add_sequence(5, i32::MIN);
    }

    #[test]
    fn escaping_keeps_terminals_safe() {
        assert_eq!(escape_text("plain é"), "plain é");
        assert_eq!(escape_text("a\x1b[31mb\n"), "a\\u{1b}[31mb\\n");
        assert_eq!(escape_text("\\ \u{202e} \u{9b}"), "\\\\ \\u{202e} \\u{9b}");
    }
}
