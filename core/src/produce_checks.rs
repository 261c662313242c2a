//! A Produce request's records read and checked beside the core: what
//! Kafka's LogValidator asks of every record that does not depend on the
//! topic (a batch's records decompress within the bounds, read as their
//! lengths say, exactly as many as its header counts), and the figures the
//! topic's rules are then checked against (timestamps, keyless records,
//! inner offsets). Issue 38, row A: a 529 KiB Produce of small zstd
//! batches stalled every other client 6.8 s while the core decompressed
//! them.
//!
//! A pure function of the request (`check_frame`, `check_request`): a
//! driver runs it on a connection task before handing the frame in
//! (`Input::CheckedFrame`), with the batches their topic stores in another
//! form rebuilt (`recompress::prepare_frame`), net's driver and the
//! simulator's alike, and the core runs it itself on a frame handed in
//! without it (`Input::Frame`), so both ways answer alike. The core trusts
//! what it is handed, as it trusts the driver's disk results: it
//! decompresses a batch again only to list the records a topic's rule
//! refuses (Kafka's record_errors), at most
//! `limits::PRODUCE_RECORD_ERRORS_READ_BYTES_MAX` per request, or to
//! rebuild one the driver did not, at most
//! `limits::PRODUCE_CORE_REBUILD_BYTES_MAX` per request.
//!
//! Records are read one at a time from the decompressing stream
//! (`codec_stream`, `record::Reader`): only the record being read is held.
//! Each batch decompresses to at most
//! `limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX`, all of a request's
//! batches to at most `limits::PRODUCE_DECOMPRESSED_BYTES_MAX`, and a batch
//! claiming more than `limits::BATCH_RECORDS_MAX` records is not read.

use std::cell::Cell;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};

use bytes::Bytes;
use kafka_protocol::messages::{produce_request, ApiKey, ProduceRequest, RequestHeader};
use kafka_protocol::protocol::Decodable;
use kafka_protocol::ResponseError;

use crate::batch::{self, BatchHeader};
use crate::limits;
use crate::log::clean::codec::DecompressError;
use crate::log::clean::codec_stream;
use crate::log::clean::records::RebuildError;
use crate::record::{Framing, Malformed, Reader, Record, Unread};

/// What was found in each partition entry of a Produce request the core
/// will read (the last entry of each partition, as Produce appends it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProduceChecks {
    entries: HashMap<(String, i32), Verdict>,
    /// The entries whose batch the driver rebuilt, or tried to
    /// (`recompress::prepare_frame`).
    rebuilds: HashMap<(String, i32), Rebuild>,
}

impl ProduceChecks {
    pub(crate) fn get(&self, topic: &str, partition: i32) -> Option<&Verdict> {
        self.entries.get(&(topic.to_owned(), partition))
    }

    pub(crate) fn rebuild(&self, topic: &str, partition: i32) -> Option<&Rebuild> {
        self.rebuilds.get(&(topic.to_owned(), partition))
    }

    /// The entry's batch is now `verdict`'s, as `rebuild` says.
    pub(crate) fn set(&mut self, topic: &str, partition: i32, verdict: Verdict, rebuild: Rebuild) {
        let key = (topic.to_owned(), partition);
        self.entries.insert(key.clone(), verdict);
        self.rebuilds.insert(key, rebuild);
    }

    /// The driver's rebuild of the entry's batch failed, as `rebuild` says.
    pub(crate) fn set_rebuild(&mut self, topic: &str, partition: i32, rebuild: Rebuild) {
        self.rebuilds.insert((topic.to_owned(), partition), rebuild);
    }

    /// How many partition entries were read.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// One partition entry's records, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Not read: the core refuses the entry before its records (no
    /// records, too many bytes, not exactly one batch, a bad CRC, a control
    /// batch).
    NotRead,
    /// Every record read; the figures the topic's rules need.
    Read(Summary),
    /// Refused whatever the topic: the error Kafka gives, its message, and
    /// whether the log found it (`Refusal::by_log`).
    Refused {
        error: ResponseError,
        message: String,
        by_log: bool,
    },
}

/// What a driver did to an entry's batch before handing the frame in
/// (`recompress::prepare_frame`), for Produce to answer as Kafka would
/// have answered the batch the client sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Rebuild {
    /// The batch in the frame is the driver's rebuild of one the client
    /// sent `sent_bytes` long: Kafka checks that one's size against the
    /// topic's before it rebuilds (LogValidator, then UnifiedLog.append
    /// again after).
    Done { sent_bytes: usize },
    /// Rebuilding it for `target` (codec, level) within `batch_bytes_max`
    /// failed so: the core answers that rather than trying again when its
    /// own rebuild would fail the same way (`recompress::stored_batch`).
    Failed {
        target: (u8, i32),
        batch_bytes_max: usize,
        error: RebuildError,
    },
}

/// What the topic's rules are checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The records' max timestamp as Kafka computes it (-1 if none above).
    pub max_timestamp_ms: i64,
    /// The least timestamp other than -1 (`i64::MAX` if none).
    pub min_timestamp_ms: i64,
    /// Records whose timestamp is -1.
    pub no_timestamp_records: u32,
    /// Records without a key.
    pub keyless_records: u32,
    /// Every record's offset (base offset + delta) is its index.
    pub offsets_in_order: bool,
    /// The records section's bytes, decompressed.
    pub plain_bytes: usize,
}

/// `frame` (a request without its size prefix) checked, if it is a Produce
/// request of a version the core serves that decodes; else `None` (the
/// core answers it as it came).
pub fn check_frame(frame: &Bytes) -> Option<ProduceChecks> {
    Some(check_request(&decode(frame)?.request))
}

/// A Produce request frame, decoded.
pub struct Decoded {
    pub header: RequestHeader,
    pub version: i16,
    pub request: ProduceRequest,
}

/// `frame` decoded, if it is a Produce request of a version the core
/// serves that decodes.
pub fn decode(frame: &Bytes) -> Option<Decoded> {
    let key = i16::from_be_bytes(frame.get(..2)?.try_into().ok()?);
    let version = i16::from_be_bytes(frame.get(2..4)?.try_into().ok()?);
    if key != ApiKey::Produce as i16 || !crate::versions::is_supported(ApiKey::Produce, version) {
        return None;
    }
    let header_version = ApiKey::Produce.request_header_version(version);
    // kafka-protocol's decoders can panic on hostile input; the core
    // guards the same call the same way.
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut buf = frame.clone();
        let header = RequestHeader::decode(&mut buf, header_version).ok()?;
        let request = ProduceRequest::decode(&mut buf, version).ok()?;
        Some(Decoded {
            header,
            version,
            request,
        })
    }));
    decoded.ok()?
}

/// Every partition entry of `req` that Produce appends read and checked.
pub fn check_request(req: &ProduceRequest) -> ProduceChecks {
    let mut entries = HashMap::new();
    let mut plain_left = limits::PRODUCE_DECOMPRESSED_BYTES_MAX;
    for (topic, partitions) in entries_by_partition(req) {
        for part in partitions {
            let verdict = match part.records.as_ref().and_then(one_batch) {
                Some((header, bytes)) => {
                    let limit = plain_left.min(limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX);
                    let decompressed = Cell::new(0);
                    let bound = (limit, &decompressed);
                    let verdict = read(
                        &header,
                        &bytes,
                        (topic, part.index),
                        bound,
                        &mut |_, _, _| {},
                    )
                    .unwrap_or_else(|refused| refused);
                    // Refused batches too: what they cost counts.
                    plain_left -= decompressed.get().min(plain_left);
                    verdict
                }
                None => Verdict::NotRead,
            };
            entries.insert((topic.to_owned(), part.index), verdict);
        }
    }
    ProduceChecks {
        entries,
        rebuilds: HashMap::new(),
    }
}

/// The entry's one batch, if the core would go on to read its records.
pub(crate) fn one_batch(records: &Bytes) -> Option<(BatchHeader, Bytes)> {
    if records.len() > limits::RECORD_LIST_BYTES_MAX {
        return None;
    }
    let mut batches = batch::split_produce_records(records, usize::MAX).ok()?;
    if batches.len() != 1 || batches[0].0.is_control() {
        return None;
    }
    batches.pop()
}

/// Counts the bytes read through it.
struct Counted<'a, R> {
    inner: R,
    bytes: &'a Cell<usize>,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.set(self.bytes.get() + n);
        Ok(n)
    }
}

/// The chunk a decompressing stream is read in.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Reads every record of the batch (`header`, `bytes`), decompressing at
/// most `plain_bytes_max`, as Produce's `check_records` describes.
pub(crate) fn read_batch(
    header: &BatchHeader,
    bytes: &[u8],
    topic: &str,
    partition: i32,
    plain_bytes_max: usize,
) -> Verdict {
    read_batch_with(
        header,
        bytes,
        topic,
        partition,
        plain_bytes_max,
        |_, _, _| {},
    )
}

/// `read_batch`, handing each record as it is read to `each`, with its
/// index and its timestamp as Kafka's iterator gives it (the batch's max
/// timestamp when the client marked it LogAppendTime). A record that does
/// not read refuses the batch at once, whatever `each` was handed before.
pub(crate) fn read_batch_with(
    header: &BatchHeader,
    bytes: &[u8],
    topic: &str,
    partition: i32,
    plain_bytes_max: usize,
    mut each: impl FnMut(usize, &Record<'_>, i64),
) -> Verdict {
    let decompressed = Cell::new(0);
    read(
        header,
        bytes,
        (topic, partition),
        (plain_bytes_max, &decompressed),
        &mut each,
    )
    .unwrap_or_else(|refused| refused)
}

fn invalid(message: String) -> Verdict {
    Verdict::Refused {
        error: ResponseError::InvalidRecord,
        message,
        by_log: true,
    }
}

fn decompress_refusal(e: DecompressError) -> Verdict {
    match e {
        DecompressError::TooLarge(_) => Verdict::Refused {
            error: ResponseError::MessageTooLarge,
            message: e.to_string(),
            by_log: false,
        },
        // Kafka's record stream wraps the codec's IOException in a
        // KafkaException ("Failed to decompress record stream"), which
        // reaches the client as UNKNOWN_SERVER_ERROR.
        DecompressError::Corrupt(_) => Verdict::Refused {
            error: ResponseError::UnknownServerError,
            message: e.to_string(),
            by_log: true,
        },
    }
}

fn unread(e: Unread) -> Verdict {
    match e {
        Unread::Framing(Framing::CutOff) => {
            invalid("Incorrect declared batch size, premature EOF reached".to_owned())
        }
        Unread::Framing(Framing::Invalid { length, remaining }) => invalid(format!(
            "Invalid record size: expected {length} bytes in record payload, but instead the \
             buffer has only {remaining} remaining bytes."
        )),
        Unread::Malformed(m) => invalid(malformed(m)),
        Unread::Stream(e) => decompress_refusal(codec_stream::stream_error(&e)),
    }
}

/// Kafka's InvalidRecordException text for a record that does not read.
pub(crate) fn malformed(m: Malformed) -> String {
    match m {
        Malformed::EndsIn(_) => "Found invalid record structure".to_owned(),
        Malformed::NegativeHeaderCount(n) => format!("Found invalid number of record headers {n}"),
        Malformed::NegativeHeaderKey(n) => format!("Invalid negative header key size {n}"),
        Malformed::Leftover { length, read } => format!(
            "Invalid record size: expected to read {length} bytes in record payload, but \
             instead read {read}"
        ),
    }
}

/// See `read_batch_with`; `decompressed` counts the bytes the codec gave,
/// also of a batch refused.
fn read(
    header: &BatchHeader,
    bytes: &[u8],
    (topic, partition): (&str, i32),
    (plain_bytes_max, decompressed): (usize, &Cell<usize>),
    each: &mut dyn FnMut(usize, &Record<'_>, i64),
) -> Result<Verdict, Verdict> {
    if i64::from(header.records_count) != i64::from(header.last_offset_delta) + 1 {
        return Err(invalid(format!(
            "Inconsistent batch offset range [{}, {}] and count of records {} in topic partition {}-{}",
            header.base_offset,
            header.last_offset(),
            header.records_count,
            topic,
            partition
        )));
    }
    // Before anything is decompressed: past it the records are not read
    // (`limits::BATCH_RECORDS_MAX`; Kafka has no such bound).
    let count = usize::try_from(header.records_count).unwrap_or(0);
    if count > limits::BATCH_RECORDS_MAX {
        let m = format!(
            "The batch holds {} records, more than the {} the broker takes",
            header.records_count,
            limits::BATCH_RECORDS_MAX
        );
        return Err(Verdict::Refused {
            error: ResponseError::MessageTooLarge,
            message: m,
            by_log: false,
        });
    }
    let end = header.total_bytes().min(bytes.len());
    let body = &bytes[batch::BATCH_HEADER_BYTES.min(end)..end];
    let stream = codec_stream::decompressing(header.compression_code(), body, plain_bytes_max)
        .map_err(decompress_refusal)?;
    let counted = Counted {
        inner: stream,
        bytes: decompressed,
    };
    let mut reader = Reader::new(BufReader::with_capacity(READ_CHUNK_BYTES, counted));
    let log_append_time_ms = header.has_log_append_time().then_some(header.max_timestamp);
    let mut s = Summary {
        max_timestamp_ms: batch::NO_TIMESTAMP,
        min_timestamp_ms: i64::MAX,
        no_timestamp_records: 0,
        keyless_records: 0,
        offsets_in_order: true,
        plain_bytes: 0,
    };
    for index in 0..count {
        let r = reader.next_record().map_err(unread)?;
        let timestamp =
            log_append_time_ms.unwrap_or(header.base_timestamp.wrapping_add(r.timestamp_delta));
        s.max_timestamp_ms = s.max_timestamp_ms.max(timestamp);
        if timestamp == batch::NO_TIMESTAMP {
            s.no_timestamp_records += 1;
        } else {
            s.min_timestamp_ms = s.min_timestamp_ms.min(timestamp);
        }
        s.keyless_records += u32::from(r.key.is_none());
        let offset = header.base_offset.wrapping_add(i64::from(r.offset_delta));
        s.offsets_in_order &= offset == index as i64;
        each(index, &r, timestamp);
    }
    let mut rest = reader.into_inner();
    let more = loop {
        match rest.fill_buf() {
            Ok(available) => break !available.is_empty(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(unread(Unread::Stream(e))),
        }
    };
    if more {
        return Err(invalid(
            "Incorrect declared batch size, records still remaining in file".into(),
        ));
    }
    s.plain_bytes = decompressed.get();
    Ok(Verdict::Read(s))
}

/// The request's partition entries grouped by topic name, each topic and
/// partition once, in the order they first appear, with the entry that
/// came last: Kafka keys a Produce's entries by partition
/// (KafkaApis.handleProduceRequest's `authorizedRequestInfo`, a map), so a
/// partition named twice is appended once, from its last entry, and
/// answered once. A request repeating one partition thousands of times
/// costs one batch's checks, not thousands. The Produce handler
/// (`api::produce`) reads them the same way; it is here, below `api`.
pub(crate) fn entries_by_partition(
    req: &ProduceRequest,
) -> Vec<(&str, Vec<&produce_request::PartitionProduceData>)> {
    let mut topics: Vec<(&str, Vec<&produce_request::PartitionProduceData>)> = Vec::new();
    let mut at: HashMap<(&str, i32), (usize, usize)> = HashMap::new();
    for topic in &req.topic_data {
        let name: &str = &topic.name.0;
        for part in &topic.partition_data {
            match at.entry((name, part.index)) {
                Entry::Occupied(o) => {
                    let (ti, pi) = *o.get();
                    topics[ti].1[pi] = part;
                }
                Entry::Vacant(v) => {
                    let ti = match topics.iter().position(|(n, _)| *n == name) {
                        Some(ti) => ti,
                        None => {
                            topics.push((name, Vec::new()));
                            topics.len() - 1
                        }
                    };
                    v.insert((ti, topics[ti].1.len()));
                    topics[ti].1.push(part);
                }
            }
        }
        // A topic named with no partitions is answered with none, as
        // Kafka's map has nothing of it to answer.
    }
    topics
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::TestBatch;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;

    /// A batch of `records` records of `value_bytes` each, zstd'd.
    fn zstd_batch(records: usize, value_bytes: usize) -> Bytes {
        let plain = TestBatch {
            timestamp_deltas: vec![0; records],
            value_bytes,
            ..TestBatch::default()
        }
        .encode();
        let at = batch::BATCH_HEADER_BYTES;
        let mut b = plain[..at].to_vec();
        b.extend(zstd::bulk::compress(&plain[at..], 1).unwrap());
        let length = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&length.to_be_bytes());
        b[21..23].copy_from_slice(&4i16.to_be_bytes());
        batch::write_crc(&mut b);
        Bytes::from(b)
    }

    fn request(batches: Vec<Bytes>) -> ProduceRequest {
        let parts = batches
            .into_iter()
            .enumerate()
            .map(|(i, b)| {
                PartitionProduceData::default()
                    .with_index(i as i32)
                    .with_records(Some(b))
            })
            .collect();
        ProduceRequest::default().with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_data(parts)])
    }

    fn refused_too_large(v: &Verdict) -> bool {
        matches!(v, Verdict::Refused { error, .. } if *error == ResponseError::MessageTooLarge)
    }

    /// Four batches of 60 MiB decompressed fit in the request's 256 MiB;
    /// the fifth passes it, and what it cost counts, so the small one
    /// after it finds nothing left.
    #[test]
    fn a_requests_batches_decompress_to_at_most_the_request_bound() {
        let mib = 1 << 20;
        let big = zstd_batch(60, mib);
        assert!(big.len() < mib, "{} bytes", big.len());
        let mut batches = vec![big; 5];
        batches.push(zstd_batch(1, 10));
        let checks = check_request(&request(batches));
        assert_eq!(checks.len(), 6);
        for p in 0..4 {
            match checks.get("t", p) {
                Some(Verdict::Read(s)) => assert!(s.plain_bytes > 60 * mib, "{s:?}"),
                other => panic!("partition {p}: {other:?}"),
            }
        }
        for p in [4, 5] {
            let v = checks.get("t", p).unwrap();
            assert!(refused_too_large(v), "partition {p}: {v:?}");
        }
        // Alone, the small one reads.
        let alone = check_request(&request(vec![zstd_batch(1, 10)]));
        assert!(matches!(alone.get("t", 0), Some(Verdict::Read(_))));
    }
}
