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
//!
//! The records are read once, beside the core (`crate::produce_checks`,
//! which streams them and answers the checks that do not depend on the
//! topic); the core checks the topic's rules against what that found
//! (`check_records`) and reads a batch here (`read_and_check`) only to list
//! the records a rule refuses, within a bound per request.

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::{refused, Refusal};
use crate::batch::{self, BatchHeader};
use crate::limits;
use crate::log::clean::records::{Bound, RebuildError};
use crate::produce_checks::{self, Rebuild, Summary, Verdict};
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

/// What the checks found in an accepted batch.
pub(super) struct Checked {
    /// The records' max timestamp as Kafka computes it (-1 if none is above
    /// -1), which a CreateTime topic stores the batch with.
    pub max_timestamp_ms: i64,
    /// Every record's offset (base offset + delta) is its index, as
    /// LogValidator expects of a compressed batch it keeps in place.
    pub offsets_in_order: bool,
    /// The records section's bytes, decompressed: what a rebuild
    /// (`stored_form`) reads.
    pub plain_bytes: usize,
}

/// Checks the topic's rules against what was read of the batch beside the
/// core (`produce_checks`, see the module's doc). Only when a rule may
/// refuse a record is the batch read again here, to list which (Kafka's
/// record_errors), while `reread_left` (decompressed bytes, of
/// `limits::PRODUCE_RECORD_ERRORS_READ_BYTES_MAX` per request) lasts; past
/// it the batch is refused with the same error and no list.
pub(super) fn check_records(
    header: &BatchHeader,
    bytes: &[u8],
    rules: &RecordRules<'_>,
    verdict: &Verdict,
    reread_left: &mut usize,
) -> Result<Checked, Refusal> {
    let Some(summary) = summary_of(verdict)? else {
        // The core refuses such an entry before its records: a driver that
        // says otherwise is checked the long way.
        return read_and_check(header, bytes, rules);
    };
    let keys_fail = rules.compacted && summary.keyless_records > 0;
    let timestamps_fail = timestamps_may_fail(header, rules, summary);
    if !keys_fail && !timestamps_fail {
        return Ok(Checked {
            max_timestamp_ms: summary.max_timestamp_ms,
            offsets_in_order: summary.offsets_in_order,
            plain_bytes: summary.plain_bytes,
        });
    }
    if summary.plain_bytes <= *reread_left {
        *reread_left -= summary.plain_bytes;
        return read_and_check(header, bytes, rules);
    }
    let message = if timestamps_fail {
        "One or more records have been rejected due to invalid timestamp (not listed: the \
         batch is larger than the broker reads again per request)"
            .to_owned()
    } else {
        format!(
            "One or more records have been rejected due to {} record errors in total (not \
             listed: the batch is larger than the broker reads again per request)",
            summary.keyless_records
        )
    };
    let error = if timestamps_fail {
        ResponseError::InvalidTimestamp
    } else {
        ResponseError::InvalidRecord
    };
    Err(refused(error, Some(message)).by_log())
}

/// Whether a record's timestamp may break the topic's rule, from the
/// least and greatest: the bounds refuse a timestamp below one end or
/// above the other, so if neither extreme is refused none is (a timestamp
/// whose distance from now overflows is taken as refused, and
/// `read_and_check` then decides). A client's LogAppendTime mark is
/// refused on a LogAppendTime topic, and on a CreateTime one for a record
/// without a timestamp.
fn timestamps_may_fail(header: &BatchHeader, rules: &RecordRules<'_>, s: &Summary) -> bool {
    let marked = header.has_log_append_time();
    let Some(bounds) = &rules.bounds else {
        return marked;
    };
    if marked && s.no_timestamp_records > 0 {
        return true;
    }
    let overflows = |t: i64| bounds.now_ms.checked_sub(t).is_none_or(|d| d == i64::MIN);
    // The least is i64::MAX when no record has a timestamp (or the only
    // one is i64::MAX, which the greatest then is); the greatest is -1
    // when none has one above -1 (the least then holds any below).
    let least = (s.min_timestamp_ms != i64::MAX).then_some(s.min_timestamp_ms);
    let greatest = (s.max_timestamp_ms != batch::NO_TIMESTAMP).then_some(s.max_timestamp_ms);
    [least, greatest]
        .into_iter()
        .flatten()
        .any(|t| overflows(t) || bounds.refuse(t))
}

/// Reads and checks every record of the batch here, listing each one a
/// rule refuses (see the module's doc): streamed as the driver reads it
/// (`produce_checks::read_batch_with`), one record held at a time.
fn read_and_check(
    header: &BatchHeader,
    bytes: &[u8],
    rules: &RecordRules<'_>,
) -> Result<Checked, Refusal> {
    let mut record_errors = Vec::new();
    let mut timestamp_error = false;
    // One pass, nothing kept per record but the errors: a batch of a
    // thousand records is the common case.
    let verdict = produce_checks::read_batch_with(
        header,
        bytes,
        rules.topic_name,
        rules.partition,
        limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX,
        |index, r, timestamp| {
            let offset = header.base_offset.wrapping_add(i64::from(r.offset_delta));
            if rules.compacted && r.key.is_none() {
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
                            "Timestamp {timestamp} of message with offset {offset} is out of \
                             range. The timestamp should be within [{}, {}]",
                            bounds.now_ms.wrapping_sub(bounds.before_max_ms),
                            bounds.now_ms.wrapping_add(bounds.after_max_ms),
                        )
                    })
                }
                _ => header.has_log_append_time().then(|| {
                    format!(
                        "Invalid timestamp type in message DefaultRecord(offset={offset}, \
                         timestamp={timestamp}, key={} bytes, value={} bytes). Producer should \
                         not set timestamp type to LogAppendTime.",
                        r.key.map_or(0, <[u8]>::len),
                        r.value.map_or(0, <[u8]>::len),
                    )
                }),
            };
            if let Some(message) = message {
                timestamp_error = true;
                record_errors.push((index as i32, message));
            }
        },
    );
    let Some(summary) = summary_of(&verdict)? else {
        // Never: a reading reads whatever it is handed.
        return Err(refused(ResponseError::InvalidRecord, None).by_log());
    };
    if record_errors.is_empty() {
        return Ok(Checked {
            max_timestamp_ms: summary.max_timestamp_ms,
            offsets_in_order: summary.offsets_in_order,
            plain_bytes: summary.plain_bytes,
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

/// What was read of a batch: what it found (`None`: the batch was not
/// read), or the refusal the reading found, as Produce answers it.
fn summary_of(verdict: &Verdict) -> Result<Option<&Summary>, Refusal> {
    match verdict {
        Verdict::Read(summary) => Ok(Some(summary)),
        Verdict::NotRead => Ok(None),
        Verdict::Refused {
            error,
            message,
            by_log,
        } => {
            let refusal = refused(*error, Some(message.clone()));
            Err(if *by_log { refusal.by_log() } else { refusal })
        }
    }
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
///
/// The driver rebuilds beside the core what needs it
/// (`recompress::prepare_frame`): a batch found here still in another form
/// was not prepared for the topic as it is now. A rebuild the driver found
/// failing for the same codec and level is answered as it failed, not
/// done again, where the core's would fail alike: past the stored bound
/// with a bound no larger here; past the others (records, decompressed
/// bytes, a codec that fails: the same wherever it runs) whatever the
/// stored bound (a smaller one here might have been passed first, and
/// answered with its own too-large error). Any other is rebuilt here while
/// `rebuild_left` (decompressed bytes, of
/// `limits::PRODUCE_CORE_REBUILD_BYTES_MAX` per request) lasts. Past it the
/// batch is answered NOT_ENOUGH_REPLICAS, which every client retries (and
/// which tells it nothing was written: librdkafka's "not persisted"),
/// rather than every other client waiting while the core compresses:
/// nothing is appended, so no acknowledged write is lost. Only a batch the
/// driver did not prepare for the compression.type now in force gets
/// there: the type changed while the request was on its way (the driver,
/// told of the change, prepares the retry, which is then kept in place),
/// or the frame came unprepared (both of doze's drivers prepare every
/// Produce; a driver that did not would see its clients retry until their
/// delivery timeout). Kafka has no such bound: it rebuilds on its request
/// handler threads (num.io.threads, 8), while every client waits on the
/// core.
pub(super) fn stored_form(
    header: &BatchHeader,
    bytes: &[u8],
    checked: &Checked,
    stored: StoredForm<'_>,
    rebuild_left: &mut usize,
) -> Result<Option<Bytes>, Refusal> {
    let StoredForm {
        compression,
        sizes: (segment_bytes, message_bytes_max),
        driver,
    } = stored;
    let batch_bytes_max = segment_bytes.min(message_bytes_max);
    let Some(target) =
        crate::recompress::rebuild_target(header, checked.offsets_in_order, compression)
    else {
        return Ok(None);
    };
    let found = match driver {
        Some(Rebuild::Failed {
            target: tried,
            batch_bytes_max: tried_max,
            error,
        }) if *tried == target => match error {
            RebuildError::TooLarge(Bound::Stored) => batch_bytes_max <= *tried_max,
            _ => true,
        }
        .then(|| error.clone()),
        _ => None,
    };
    let rebuilt = match found {
        Some(error) => Err(error),
        None if checked.plain_bytes <= *rebuild_left => {
            *rebuild_left -= checked.plain_bytes;
            crate::recompress::rebuilt(header, bytes, target, batch_bytes_max)
        }
        None => {
            let m = "The batch is not in the form the topic's compression.type stores, and \
                     the broker rebuilds no more of this request's batches: send it again";
            return Err(refused(ResponseError::NotEnoughReplicas, Some(m.into())));
        }
    };
    rebuilt.map(Some).map_err(|e| match e {
        // Past the smaller of the two: check_size's error for it.
        RebuildError::TooLarge(Bound::Stored) if segment_bytes <= message_bytes_max => {
            refused(ResponseError::RecordListTooLarge, Some(e.to_string()))
        }
        RebuildError::TooLarge(_) => refused(ResponseError::MessageTooLarge, Some(e.to_string())),
        RebuildError::Failed(_) => refused(ResponseError::UnknownServerError, Some(e.to_string())),
    })
}

/// What `stored_form` stores a batch as: the topic's compression.type and
/// sizes (segment.bytes, max.message.bytes), and what the driver did to it.
pub(super) struct StoredForm<'a> {
    pub compression: StoredCompression,
    pub sizes: (usize, usize),
    pub driver: Option<&'a Rebuild>,
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

    /// An uncompressed batch of `count` records (by its header) whose
    /// records section is `body`, read as Produce reads it: each record's
    /// (index, offset delta, timestamp, key and value lengths), or the
    /// message it is refused with.
    fn read(count: i32, body: &[u8]) -> Result<Vec<Seen>, String> {
        let mut h = batch::parse_header(&batch::testing::TestBatch::default().encode()).unwrap();
        h.records_count = count;
        h.last_offset_delta = count - 1;
        h.base_timestamp = 1_000;
        h.batch_length = (batch::BATCH_HEADER_BYTES - 12 + body.len()) as i32;
        let bytes = [&[0u8; batch::BATCH_HEADER_BYTES][..], body].concat();
        let mut read = Vec::new();
        let verdict = produce_checks::read_batch_with(&h, &bytes, "t", 0, 1 << 20, |i, r, ts| {
            let len = |f: Option<&[u8]>| f.map(<[u8]>::len);
            read.push((i, r.offset_delta, ts, len(r.key), len(r.value).unwrap_or(0)));
        });
        match verdict {
            Verdict::Read(_) => Ok(read),
            Verdict::Refused { message, .. } => Err(message),
            Verdict::NotRead => panic!("read"),
        }
    }

    type Seen = (usize, i32, i64, Option<usize>, usize);

    #[test]
    fn records_read_as_kafka_reads_them() {
        let mut body = record(0, Some(b"k"), b"value", &[(b"h", b"v")]);
        body.extend(record(1, None, b"", &[]));
        let summary = read(2, &body).unwrap();
        assert_eq!(summary, [(0, 0, 1_007, Some(1), 5), (1, 1, 1_007, None, 0)]);
    }

    #[test]
    fn a_wrong_shape_is_refused_with_kafkas_reason() {
        let one = record(0, Some(b"k"), b"value", &[]);
        let two = [one.clone(), one.clone()].concat();
        let refuse = |count: i32, body: &[u8]| read(count, body).unwrap_err();
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
