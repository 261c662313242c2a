//! Produce's check of every record of a batch, as Kafka's LogValidator
//! (storage/src/main/java/org/apache/kafka/storage/internals/log/
//! LogValidator.java) and DefaultRecordBatch's record iterators
//! (clients/src/main/java/org/apache/kafka/common/record/
//! DefaultRecordBatch.java, DefaultRecord.java) make it.
//!
//! A batch of more than `limits::BATCH_RECORDS_MAX` records is
//! MESSAGE_TOO_LARGE, its records unread. A compressed batch is
//! decompressed first, never past
//! `limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX` (MESSAGE_TOO_LARGE); a
//! stream its codec cannot read is UNKNOWN_SERVER_ERROR, as from Kafka. Then:
//! - the header's count must match its offset range (validateBatch);
//! - the records must be exactly that many, each laid out as its length
//!   says (INVALID_RECORD, "Incorrect declared batch size" and kin);
//! - on a compacted topic each record has a key (validateKey);
//! - on a CreateTime topic a timestamp other than -1 lies within the
//!   bounds, and otherwise a batch the client marked LogAppendTime is
//!   refused (validateTimestamp).
//!
//! A record's key or timestamp error lists it in the answer; any timestamp
//! error makes the batch INVALID_TIMESTAMP, key errors alone INVALID_RECORD
//! (processRecordErrors).

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::{refused, Refusal};
use crate::batch::{self, BatchHeader};
use crate::limits;
use crate::log::clean::codec::DecompressError;
use crate::log::clean::records::{self as decompress, Bound, RebuildError};
use crate::record::{self, Framing, Malformed};
use crate::topic_config::StoredCompression;

/// The bounds a CreateTime topic puts on record timestamps.
pub(super) struct TimestampBounds {
    pub now_ms: i64,
    /// message.timestamp.before.max.ms
    pub before_max_ms: i64,
    /// message.timestamp.after.max.ms
    pub after_max_ms: i64,
}

impl TimestampBounds {
    /// Kafka's LogValidator.recordHasInvalidTimestamp, in Java's wrapping
    /// arithmetic.
    fn refuse(&self, timestamp: i64) -> bool {
        let diff = self.now_ms.wrapping_sub(timestamp);
        diff > self.before_max_ms || diff.wrapping_neg() > self.after_max_ms
    }
}

/// What a topic asks of every record of a batch.
pub(super) struct RecordRules<'a> {
    /// A CreateTime topic's bounds; `None` on a LogAppendTime topic.
    pub bounds: Option<TimestampBounds>,
    pub compacted: bool,
    pub topic_name: &'a str,
    pub partition: i32,
}

/// What the checks need of one record.
#[derive(Debug)]
struct RecordInfo {
    offset_delta: i32,
    /// The batch's max timestamp when the client marked it LogAppendTime,
    /// as Kafka's iterator gives it.
    timestamp: i64,
    key_bytes: Option<usize>,
    value_bytes: usize,
}

/// What the checks found in an accepted batch.
pub(super) struct Checked {
    /// The records' max timestamp as Kafka computes it (-1 if none is above
    /// -1), which a CreateTime topic stores the batch with.
    pub max_timestamp_ms: i64,
    /// Every record's offset (base offset + delta) is its index, as
    /// LogValidator expects of a compressed batch it keeps in place.
    pub offsets_in_order: bool,
    /// A compressed batch's records, decompressed: a rebuild
    /// (`stored_form`) reads them from here rather than decompressing them
    /// again.
    pub plain: Option<Bytes>,
}

/// Checks every record of the batch (see the module's doc).
pub(super) fn check_records(
    header: &BatchHeader,
    bytes: &[u8],
    rules: &RecordRules<'_>,
) -> Result<Checked, Refusal> {
    // Found inside Kafka's log, which then reports its start offset
    // (ReplicaManager.appendToLocalLog), as for every refusal here but
    // MESSAGE_TOO_LARGE (RecordTooLargeException).
    let invalid = |why: String| refused(ResponseError::InvalidRecord, Some(why)).by_log();
    if i64::from(header.records_count) != i64::from(header.last_offset_delta) + 1 {
        return Err(invalid(format!(
            "Inconsistent batch offset range [{}, {}] and count of records {} in topic partition {}-{}",
            header.base_offset,
            header.last_offset(),
            header.records_count,
            rules.topic_name,
            rules.partition
        )));
    }
    // Before anything is decompressed: past it the records are not read
    // (`limits::BATCH_RECORDS_MAX`; Kafka has no such bound).
    if usize::try_from(header.records_count).unwrap_or(0) > limits::BATCH_RECORDS_MAX {
        let m = format!(
            "The batch holds {} records, more than the {} the broker takes",
            header.records_count,
            limits::BATCH_RECORDS_MAX
        );
        return Err(refused(ResponseError::MessageTooLarge, Some(m)));
    }
    let end = header.total_bytes().min(bytes.len());
    let mut plain = None;
    let body: &[u8] = if header.compression_code() == 0 {
        &bytes[batch::BATCH_HEADER_BYTES.min(end)..end]
    } else {
        let decompressed = decompress::decompressed(bytes, header).map_err(|e| match e {
            DecompressError::TooLarge(_) => {
                refused(ResponseError::MessageTooLarge, Some(e.to_string()))
            }
            // Kafka's record stream wraps the codec's IOException in a
            // KafkaException ("Failed to decompress record stream"), which
            // reaches the client as UNKNOWN_SERVER_ERROR.
            DecompressError::Corrupt(_) => {
                refused(ResponseError::UnknownServerError, Some(e.to_string())).by_log()
            }
        })?;
        plain.insert(decompressed)
    };
    let mut record_errors = Vec::new();
    let mut timestamp_error = false;
    let mut max_timestamp = batch::NO_TIMESTAMP;
    let mut offsets_in_order = true;
    // One pass, nothing kept per record: a batch of a thousand records is
    // the common case. A record that does not read refuses the batch at
    // once, whatever errors came before it, as Kafka's iterator throws.
    read_records(header, body, |index, r| {
        max_timestamp = max_timestamp.max(r.timestamp);
        let offset = header.base_offset.wrapping_add(i64::from(r.offset_delta));
        offsets_in_order &= offset == index as i64;
        let timestamp = r.timestamp;
        if rules.compacted && r.key_bytes.is_none() {
            let message = format!(
                "Compacted topic cannot accept message without key in topic partition {}-{}",
                rules.topic_name, rules.partition
            );
            record_errors.push((index as i32, message));
            return;
        }
        let message = match &rules.bounds {
            Some(bounds) if timestamp != batch::NO_TIMESTAMP => {
                bounds.refuse(timestamp).then(|| {
                    format!(
                        "Timestamp {timestamp} of message with offset {offset} is out of range. \
                         The timestamp should be within [{}, {}]",
                        bounds.now_ms.wrapping_sub(bounds.before_max_ms),
                        bounds.now_ms.wrapping_add(bounds.after_max_ms),
                    )
                })
            }
            _ => header.has_log_append_time().then(|| {
                format!(
                    "Invalid timestamp type in message DefaultRecord(offset={offset}, \
                     timestamp={timestamp}, key={} bytes, value={} bytes). Producer should not \
                     set timestamp type to LogAppendTime.",
                    r.key_bytes.unwrap_or(0),
                    r.value_bytes,
                )
            }),
        };
        if let Some(message) = message {
            timestamp_error = true;
            record_errors.push((index as i32, message));
        }
    })
    .map_err(invalid)?;
    if record_errors.is_empty() {
        return Ok(Checked {
            max_timestamp_ms: max_timestamp,
            offsets_in_order,
            plain,
        });
    }
    let (error, message) = if timestamp_error {
        let message = "One or more records have been rejected due to invalid timestamp";
        (ResponseError::InvalidTimestamp, message.to_owned())
    } else {
        let shown: Vec<String> = record_errors
            .iter()
            .take(3)
            .map(|(index, message)| format!("RecordError(batchIndex={index}, message='{message}')"))
            .collect();
        let message = format!(
            "One or more records have been rejected due to {} record errors in total, and only \
             showing the first three errors at most: [{}]",
            record_errors.len(),
            shown.join(", ")
        );
        (ResponseError::InvalidRecord, message)
    };
    Err(Refusal {
        record_errors,
        ..refused(error, Some(message)).by_log()
    })
}

/// The batch as the topic's compression.type stores it (`None`: as sent),
/// `crate::recompress`, no larger than `batch_bytes_max` (the smaller of
/// the topic's max.message.bytes and segment.bytes). A rebuilt batch past
/// a bound is refused as Kafka refuses one too large once rebuilt
/// (UnifiedLog.append, messageSizeMaybeChanged): `check_size`'s error (a
/// batch larger than a segment RECORD_LIST_TOO_LARGE, else
/// MESSAGE_TOO_LARGE); one whose records would decompress to more than the
/// broker reads (the offset deltas written anew are longer)
/// MESSAGE_TOO_LARGE, as the same batch sent that way; one of more than
/// `limits::BATCH_RECORDS_MAX` records MESSAGE_TOO_LARGE. A codec that
/// fails is UNKNOWN_SERVER_ERROR.
pub(super) fn stored_form(
    header: &BatchHeader,
    bytes: &[u8],
    checked: &Checked,
    compression: StoredCompression,
    sizes: (usize, usize),
) -> Result<Option<Bytes>, Refusal> {
    let (segment_bytes, message_bytes_max) = sizes;
    let batch_bytes_max = segment_bytes.min(message_bytes_max);
    let stored = crate::recompress::stored_batch(
        header,
        bytes,
        checked.plain.as_deref(),
        checked.offsets_in_order,
        compression,
        batch_bytes_max,
    );
    stored.map_err(|e| match e {
        // Past the smaller of the two: check_size's error for it.
        RebuildError::TooLarge(Bound::Stored) if segment_bytes <= message_bytes_max => {
            refused(ResponseError::RecordListTooLarge, Some(e.to_string()))
        }
        RebuildError::TooLarge(_) => refused(ResponseError::MessageTooLarge, Some(e.to_string())),
        RebuildError::Failed(_) => refused(ResponseError::UnknownServerError, Some(e.to_string())),
    })
}

/// Reads the batch's records from its (decompressed) records section as
/// Kafka's DefaultRecord.readFrom reads them (`crate::record`), handing
/// each to `each` with its index: exactly `records_count`, each taking the
/// bytes its length says, with nothing left over; else Kafka's
/// InvalidRecordException text.
fn read_records(
    header: &BatchHeader,
    body: &[u8],
    mut each: impl FnMut(usize, RecordInfo),
) -> Result<(), String> {
    let count = usize::try_from(header.records_count).unwrap_or(0);
    let log_append_time_ms = header.has_log_append_time().then_some(header.max_timestamp);
    let mut at = 0;
    for index in 0..count {
        let bytes = record::next(body, &mut at).map_err(|e| match e {
            Framing::CutOff => "Incorrect declared batch size, premature EOF reached".to_owned(),
            Framing::Invalid { length, remaining } => format!(
                "Invalid record size: expected {length} bytes in record payload, but instead the \
                 buffer has only {remaining} remaining bytes."
            ),
        })?;
        let r = record::read(bytes).map_err(|e| match e {
            Malformed::EndsIn(_) => "Found invalid record structure".to_owned(),
            Malformed::NegativeHeaderCount(n) => {
                format!("Found invalid number of record headers {n}")
            }
            Malformed::NegativeHeaderKey(n) => format!("Invalid negative header key size {n}"),
            Malformed::Leftover { length, read } => format!(
                "Invalid record size: expected to read {length} bytes in record payload, but \
                 instead read {read}"
            ),
        })?;
        let timestamp =
            log_append_time_ms.unwrap_or(header.base_timestamp.wrapping_add(r.timestamp_delta));
        each(
            index,
            RecordInfo {
                offset_delta: r.offset_delta,
                timestamp,
                key_bytes: r.key.map(<[u8]>::len),
                value_bytes: r.value.map_or(0, <[u8]>::len),
            },
        );
    }
    if at != body.len() {
        return Err("Incorrect declared batch size, records still remaining in file".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::put_varlong as varint;
    use crate::record::testing::{body, framed};

    /// A record, framed: attributes 0, timestamp delta 7, `offset_delta`,
    /// key, value, headers (key, value).
    fn record(
        offset_delta: i64,
        key: Option<&[u8]>,
        value: &[u8],
        headers: &[(&[u8], &[u8])],
    ) -> Vec<u8> {
        framed(&body(offset_delta, key, Some(value), headers))
    }

    fn header(count: i32) -> BatchHeader {
        let mut h = batch::parse_header(&batch::testing::TestBatch::default().encode()).unwrap();
        h.records_count = count;
        h.base_timestamp = 1_000;
        h
    }

    #[test]
    fn records_read_as_kafka_reads_them() {
        let mut body = record(0, Some(b"k"), b"value", &[(b"h", b"v")]);
        body.extend(record(1, None, b"", &[]));
        let mut summary = Vec::new();
        read_records(&header(2), &body, |i, r| {
            summary.push((i, r.offset_delta, r.timestamp, r.key_bytes, r.value_bytes))
        })
        .unwrap();
        assert_eq!(summary, [(0, 0, 1_007, Some(1), 5), (1, 1, 1_007, None, 0)]);
    }

    #[test]
    fn a_wrong_shape_is_refused_with_kafkas_reason() {
        let one = record(0, Some(b"k"), b"value", &[]);
        let two = [one.clone(), one.clone()].concat();
        let refuse =
            |count: i32, body: &[u8]| read_records(&header(count), body, |_, _| {}).unwrap_err();
        assert!(refuse(3, &two).contains("premature EOF"));
        assert!(refuse(1, &two).contains("records still remaining"));
        assert!(refuse(2, &two[..two.len() - 1]).contains("Invalid record size"));
        // A record whose length claims a byte more than its fields take.
        let mut long = one.clone();
        long[0] += 2; // zigzag: length + 1
        long.push(0);
        assert!(refuse(1, &long).contains("expected to read"));
        // A header whose key is null.
        let mut null_header_key = vec![0u8];
        for v in [5, 0, -1, 0, 1, -1] {
            varint(&mut null_header_key, v);
        }
        let mut framed = Vec::new();
        varint(&mut framed, null_header_key.len() as i64);
        framed.extend(null_header_key);
        assert!(refuse(1, &framed).contains("negative header key size"));
        // A record cut inside its fields.
        let mut cut = vec![0u8];
        varint(&mut cut, 5);
        let mut framed = Vec::new();
        varint(&mut framed, cut.len() as i64);
        framed.extend(cut);
        assert_eq!(refuse(1, &framed), "Found invalid record structure");
    }
}
