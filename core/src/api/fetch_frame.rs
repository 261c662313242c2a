//! Fetch response frames whose record sets are segment file ranges.
//!
//! The broker core never copies record bytes: the records of a Fetch response
//! go to the network driver as `FramePart::File` ranges, which it copies to the
//! socket itself (sendfile or pread). kafka-protocol's encoder wants the
//! records inline, so this module writes the Fetch response layout by hand,
//! from the Kafka message spec (FetchResponse.json), for versions 4..=12:
//!
//! ```text
//! header      correlation_id int32, [tags]
//! response    throttle_time_ms int32, error_code int16 (v7+), session_id int32 (v7+),
//!             responses [topic], [tags]
//! topic       topic string, partitions [partition], [tags]
//! partition   partition_index int32, error_code int16, high_watermark int64,
//!             last_stable_offset int64, log_start_offset int64 (v5+),
//!             aborted_transactions nullable [producer_id int64, first_offset int64, [tags]],
//!             preferred_read_replica int32 (v11+), records nullable bytes, [tags]
//! ```
//!
//! v12 is the first flexible version: string, array and bytes lengths become
//! unsigned varints of length + 1 (0 for null) instead of int16/int32 lengths
//! (-1 for null), and every struct, the response header included (header v1),
//! ends with a tagged-field section. This encoder writes every section empty
//! (a single 0 byte), which is what kafka-protocol writes when the tagged
//! fields are at their defaults.
//!
//! Fields a version lacks are handled as kafka-protocol handles them, so that
//! both encoders agree on every response: a non-zero `session_id` below v7 and
//! a `preferred_read_replica` other than -1 below v11 are errors; `error_code`
//! below v7, `log_start_offset` below v5, and the tagged fields below v12 are
//! left out. At v12 a tagged field that is set is an error rather than being
//! dropped. `topic_id` (v13+) and `node_endpoints` (v16+) are never written.
//! Lengths above i32::MAX are errors in every version (kafka-protocol would
//! take up to u32::MAX - 1 in compact form): the frame's size prefix is an
//! int32, so nothing longer could be sent.

use std::collections::BTreeMap;
use std::fmt::Display;

use anyhow::{bail, ensure, Context, Result};
use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::FetchResponse;

use crate::io::{FileRange, FramePart};

/// The first Fetch version with flexible encoding (compact lengths, tagged fields).
const FIRST_FLEXIBLE_VERSION: i16 = 12;

/// Encodes a whole Fetch response frame (response header + body, without the
/// 4-byte size prefix) for API version 4..=12. Partitions named in `files`
/// ((topic index, partition index) into `response.responses[t].partitions[p]`)
/// carry those file ranges, one after the other, as their records instead of
/// `records` (which must be None for them); every other partition's
/// `records` is encoded as usual. Adjacent byte parts are merged, so the
/// frame is [Bytes, File.., Bytes, File.., ..., Bytes].
///
/// Below v12 nothing follows a partition's records when it is the last one of
/// the response, so there the frame ends with a File part if that partition
/// is file-backed. No Bytes part is empty and no two Bytes parts touch.
pub fn encode(
    correlation_id: i32,
    version: i16,
    response: &FetchResponse,
    files: &BTreeMap<(usize, usize), Vec<FileRange>>,
) -> Result<Vec<FramePart>> {
    ensure!(
        (4..=12).contains(&version),
        "Fetch v{version}: only v4..=12 responses can carry file ranges"
    );
    check_files(response, files)?;
    let mut w = FrameWriter::new(version >= FIRST_FLEXIBLE_VERSION);
    // Response header: v1 (with tagged fields) for flexible versions, v0 below.
    w.i32(correlation_id);
    w.end_struct();
    write_response(&mut w, version, response, files)?;
    w.finish()
}

/// Every file range must name a partition of the response whose inline
/// records are None: `records` being Some would say there is a second record
/// set for it, and the default `PartitionData` has `Some(empty)`.
fn check_files(
    response: &FetchResponse,
    files: &BTreeMap<(usize, usize), Vec<FileRange>>,
) -> Result<()> {
    for &(t, p) in files.keys() {
        let partition = response
            .responses
            .get(t)
            .and_then(|topic| topic.partitions.get(p))
            .with_context(|| {
                format!("file range for responses[{t}].partitions[{p}], which the response lacks")
            })?;
        ensure!(
            partition.records.is_none(),
            "responses[{t}].partitions[{p}] has a file range and inline records too"
        );
    }
    Ok(())
}

fn write_response(
    w: &mut FrameWriter,
    version: i16,
    response: &FetchResponse,
    files: &BTreeMap<(usize, usize), Vec<FileRange>>,
) -> Result<()> {
    ensure_no_tagged_fields(
        version,
        response.unknown_tagged_fields.is_empty(),
        "the response",
    )?;
    w.i32(response.throttle_time_ms);
    if version >= 7 {
        w.i16(response.error_code);
        w.i32(response.session_id);
    } else {
        ensure!(
            response.session_id == 0,
            "Fetch v{version} has no session id, but it is {}",
            response.session_id
        );
    }
    w.length(Some(response.responses.len()))?;
    for (t, topic) in response.responses.iter().enumerate() {
        write_topic(w, version, t, topic, files)?;
    }
    w.end_struct();
    Ok(())
}

fn write_topic(
    w: &mut FrameWriter,
    version: i16,
    t: usize,
    topic: &FetchableTopicResponse,
    files: &BTreeMap<(usize, usize), Vec<FileRange>>,
) -> Result<()> {
    ensure_no_tagged_fields(
        version,
        topic.unknown_tagged_fields.is_empty(),
        format_args!("responses[{t}]"),
    )?;
    // Up to v12 topics go by name (topic_id replaces it from v13).
    w.string(&topic.topic)?;
    w.length(Some(topic.partitions.len()))?;
    for (p, partition) in topic.partitions.iter().enumerate() {
        let file = files.get(&(t, p)).map(Vec::as_slice);
        write_partition(w, version, partition, file)
            .with_context(|| format!("responses[{t}].partitions[{p}]"))?;
    }
    w.end_struct();
    Ok(())
}

/// `file`, if any, replaces `partition.records` (already checked to be None).
fn write_partition(
    w: &mut FrameWriter,
    version: i16,
    partition: &PartitionData,
    file: Option<&[FileRange]>,
) -> Result<()> {
    // kafka-protocol writes these three as tagged fields 0, 1, 2 when they
    // differ from their defaults; this encoder writes none.
    let untagged = partition.diverging_epoch == Default::default()
        && partition.current_leader == Default::default()
        && partition.snapshot_id == Default::default()
        && partition.unknown_tagged_fields.is_empty();
    ensure_no_tagged_fields(version, untagged, "the partition")?;

    w.i32(partition.partition_index);
    w.i16(partition.error_code);
    w.i64(partition.high_watermark);
    w.i64(partition.last_stable_offset);
    if version >= 5 {
        w.i64(partition.log_start_offset);
    }
    write_aborted_transactions(w, version, partition.aborted_transactions.as_deref())?;
    if version >= 11 {
        w.i32(partition.preferred_read_replica.0);
    } else {
        ensure!(
            partition.preferred_read_replica.0 == -1,
            "Fetch v{version} has no preferred read replica, but it is {}",
            partition.preferred_read_replica.0
        );
    }
    match file {
        Some(ranges) => w.file(ranges)?,
        None => w.records(partition.records.as_deref())?,
    }
    w.end_struct();
    Ok(())
}

fn write_aborted_transactions(
    w: &mut FrameWriter,
    version: i16,
    transactions: Option<&[AbortedTransaction]>,
) -> Result<()> {
    w.length(transactions.map(<[_]>::len))?;
    for transaction in transactions.unwrap_or_default() {
        ensure_no_tagged_fields(
            version,
            transaction.unknown_tagged_fields.is_empty(),
            "an aborted transaction",
        )?;
        w.i64(transaction.producer_id.0);
        w.i64(transaction.first_offset);
        w.end_struct();
    }
    Ok(())
}

/// Below v12 there are no tagged fields on the wire, and kafka-protocol drops
/// them as well; at v12 one that is set would have to be written, and rather
/// than leave it out silently we refuse.
fn ensure_no_tagged_fields(version: i16, untagged: bool, what: impl Display) -> Result<()> {
    if version >= FIRST_FLEXIBLE_VERSION && !untagged {
        bail!("{what} has tagged fields set, which this encoder cannot write");
    }
    Ok(())
}

/// Accumulates a frame. Fields go into `buf`; a file range first closes the
/// bytes written so far into a part of their own, so everything between two
/// file ranges is one Bytes part, and no Bytes part is empty.
struct FrameWriter {
    flexible: bool,
    buf: BytesMut,
    parts: Vec<FramePart>,
    /// Bytes of the finished parts, file ranges included.
    parts_len: u64,
}

impl FrameWriter {
    fn new(flexible: bool) -> Self {
        FrameWriter {
            flexible,
            buf: BytesMut::with_capacity(256),
            parts: Vec::new(),
            parts_len: 0,
        }
    }

    fn i16(&mut self, value: i16) {
        self.buf.put_i16(value);
    }

    fn i32(&mut self, value: i32) {
        self.buf.put_i32(value);
    }

    fn i64(&mut self, value: i64) {
        self.buf.put_i64(value);
    }

    fn unsigned_varint(&mut self, mut value: u32) {
        while value >= 0x80 {
            self.buf.put_u8(value as u8 | 0x80);
            value >>= 7;
        }
        self.buf.put_u8(value as u8);
    }

    /// The length of an array or of a byte string, None for null. Lengths are
    /// capped at i32::MAX in flexible versions too: a frame's size prefix is
    /// an int32, so nothing longer could be sent anyway.
    fn length(&mut self, len: Option<usize>) -> Result<()> {
        let len = len
            .map(|len| i32::try_from(len).with_context(|| format!("length {len} is too long")))
            .transpose()?;
        match (self.flexible, len) {
            // Compact: unsigned varint of length + 1, so that null is 0.
            (true, Some(len)) => self.unsigned_varint(len as u32 + 1),
            (true, None) => self.unsigned_varint(0),
            (false, Some(len)) => self.i32(len),
            (false, None) => self.i32(-1),
        }
        Ok(())
    }

    /// A non-nullable string.
    fn string(&mut self, s: &str) -> Result<()> {
        if self.flexible {
            self.length(Some(s.len()))?;
        } else {
            let len = i16::try_from(s.len())
                .with_context(|| format!("string of {} bytes is too long", s.len()))?;
            self.i16(len);
        }
        self.buf.put_slice(s.as_bytes());
        Ok(())
    }

    /// Inline records (nullable bytes).
    fn records(&mut self, records: Option<&[u8]>) -> Result<()> {
        self.length(records.map(<[u8]>::len))?;
        self.buf.put_slice(records.unwrap_or_default());
        Ok(())
    }

    /// Records that are file ranges: their total length goes into the
    /// bytes, each range becomes a part of its own.
    fn file(&mut self, ranges: &[FileRange]) -> Result<()> {
        let total: u64 = ranges.iter().map(|r| r.len).sum();
        let len = usize::try_from(total).context("file ranges too long")?;
        self.length(Some(len))?;
        self.close_bytes();
        for range in ranges {
            self.parts.push(FramePart::File(range.clone()));
        }
        self.parts_len += total;
        Ok(())
    }

    /// An empty tagged-field section (count 0), in flexible versions only.
    fn end_struct(&mut self) {
        if self.flexible {
            self.unsigned_varint(0);
        }
    }

    fn close_bytes(&mut self) {
        if !self.buf.is_empty() {
            // split() hands over what was written without copying it.
            let bytes = self.buf.split().freeze();
            self.parts_len += bytes.len() as u64;
            self.parts.push(FramePart::Bytes(bytes));
        }
    }

    /// The driver prefixes the frame with the sum of the parts' lengths as an
    /// int32, so a frame longer than that must not leave here.
    fn finish(mut self) -> Result<Vec<FramePart>> {
        self.close_bytes();
        ensure!(
            self.parts_len <= i32::MAX as u64,
            "Fetch response frame of {} bytes is too long for its size prefix",
            self.parts_len
        );
        Ok(self.parts)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::collections::HashMap;

    use bytes::Bytes;

    use kafka_protocol::messages::fetch_response::{EpochEndOffset, LeaderIdAndEpoch, SnapshotId};
    use kafka_protocol::messages::{ApiKey, BrokerId, ProducerId, ResponseHeader, TopicName};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType,
    };
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    use super::*;
    use crate::io::{PartitionDir, SegmentFile};

    /// Stand-in for the segment files: each holds one record set at some
    /// position, with filler before and after it that must not be sent.
    #[derive(Default)]
    struct FakeDisk {
        files: HashMap<(PartitionDir, i64), Vec<u8>>,
    }

    impl FakeDisk {
        fn put(
            &mut self,
            dir: PartitionDir,
            segment_base: i64,
            position: u64,
            records: &[u8],
        ) -> Vec<FileRange> {
            let mut contents = vec![0xEE; position as usize];
            contents.extend_from_slice(records);
            contents.extend_from_slice(&[0xDD; 7]);
            self.files.insert((dir.clone(), segment_base), contents);
            // Two ranges when it splits, as a fetch spanning segments sends.
            let len = records.len() as u64;
            let half = len / 2;
            let range = |position, len| FileRange {
                dir: dir.clone(),
                segment_base,
                file: SegmentFile::Log,
                position,
                len,
            };
            if half > 0 {
                vec![range(position, half), range(position + half, len - half)]
            } else {
                vec![range(position, len)]
            }
        }

        fn read(&self, range: &FileRange) -> &[u8] {
            let contents = &self.files[&(range.dir.clone(), range.segment_base)];
            &contents[range.position as usize..(range.position + range.len) as usize]
        }
    }

    /// What the driver sends: the parts with each file range read from disk.
    fn resolve(parts: &[FramePart], disk: &FakeDisk) -> Vec<u8> {
        let mut frame = Vec::new();
        for part in parts {
            match part {
                FramePart::Bytes(bytes) => frame.extend_from_slice(bytes),
                FramePart::File(range) => frame.extend_from_slice(disk.read(range)),
            }
        }
        frame
    }

    /// kafka-protocol's own frame for the response with its records inline.
    fn reference(correlation_id: i32, version: i16, response: &FetchResponse) -> Result<Vec<u8>> {
        let mut buf = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(&mut buf, ApiKey::Fetch.response_header_version(version))?;
        response.encode(&mut buf, version)?;
        Ok(buf.to_vec())
    }

    fn decode(version: i16, frame: &[u8]) -> Result<(ResponseHeader, FetchResponse)> {
        let mut buf = Bytes::copy_from_slice(frame);
        let header =
            ResponseHeader::decode(&mut buf, ApiKey::Fetch.response_header_version(version))?;
        let response = FetchResponse::decode(&mut buf, version)?;
        ensure!(
            buf.is_empty(),
            "{} bytes left after the response",
            buf.len()
        );
        Ok((header, response))
    }

    /// Starts with Bytes, has no two Bytes parts in a row, no empty Bytes
    /// part, and one File part per file range, in order.
    fn check_shape(parts: &[FramePart], files: &BTreeMap<(usize, usize), Vec<FileRange>>) {
        assert!(
            matches!(parts.first(), Some(FramePart::Bytes(_))),
            "{parts:?}"
        );
        for pair in parts.windows(2) {
            let bytes_twice = matches!(pair, [FramePart::Bytes(_), FramePart::Bytes(_)]);
            assert!(!bytes_twice, "two Bytes parts in a row: {parts:?}");
        }
        for part in parts {
            if let FramePart::Bytes(bytes) = part {
                assert!(!bytes.is_empty(), "empty Bytes part: {parts:?}");
            }
        }
        let ranges: Vec<&FileRange> = parts
            .iter()
            .filter_map(|part| match part {
                FramePart::File(range) => Some(range),
                FramePart::Bytes(_) => None,
            })
            .collect();
        assert_eq!(ranges, files.values().flatten().collect::<Vec<_>>());
    }

    fn topic(name: &str, partitions: Vec<PartitionData>) -> FetchableTopicResponse {
        FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_string(name.to_owned())))
            .with_partitions(partitions)
    }

    fn partition(index: i32, records: Option<&[u8]>) -> PartitionData {
        PartitionData::default()
            .with_partition_index(index)
            .with_high_watermark(100)
            .with_records(records.map(Bytes::copy_from_slice))
    }

    fn range(topic: &str, partition: i32, len: u64) -> FileRange {
        FileRange {
            dir: PartitionDir {
                topic: topic.into(),
                partition,
            },
            segment_base: 0,
            file: SegmentFile::Log,
            position: 0,
            len,
        }
    }

    /// One generated response: the response as the broker builds it (records
    /// None where file-backed), the same with every record set inline, the
    /// file ranges, and the disk they point into.
    struct Case {
        correlation_id: i32,
        with_files: FetchResponse,
        inline: FetchResponse,
        files: BTreeMap<(usize, usize), Vec<FileRange>>,
        disk: FakeDisk,
    }

    impl std::fmt::Debug for Case {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Case")
                .field("correlation_id", &self.correlation_id)
                .field("with_files", &self.with_files)
                .field("files", &self.files)
                .finish()
        }
    }

    /// A partition and, if its records are to be file-backed, (segment base,
    /// position in the segment file).
    fn partition_strategy() -> impl Strategy<Value = (PartitionData, Option<(i64, u64)>)> {
        let aborted = prop::option::of(prop::collection::vec((any::<i64>(), any::<i64>()), 0..4));
        (
            (
                any::<i32>(),
                any::<i16>(),
                any::<i64>(),
                any::<i64>(),
                any::<i64>(),
            ),
            aborted,
            // Anything but -1 is an error below v11 (for both encoders).
            prop_oneof![19 => Just(-1), 1 => any::<i32>()],
            prop::option::weighted(0.8, prop::collection::vec(any::<u8>(), 0..5000)),
            prop::option::of((0..1_000_000i64, 0..64u64)),
        )
            .prop_map(|(fields, aborted, replica, records, file)| {
                let (index, error_code, high_watermark, last_stable, log_start) = fields;
                let aborted = aborted.map(|transactions| {
                    transactions
                        .into_iter()
                        .map(|(producer_id, first_offset)| {
                            AbortedTransaction::default()
                                .with_producer_id(ProducerId(producer_id))
                                .with_first_offset(first_offset)
                        })
                        .collect()
                });
                let file = file.filter(|_| records.is_some());
                let data = PartitionData::default()
                    .with_partition_index(index)
                    .with_error_code(error_code)
                    .with_high_watermark(high_watermark)
                    .with_last_stable_offset(last_stable)
                    .with_log_start_offset(log_start)
                    .with_aborted_transactions(aborted)
                    .with_preferred_read_replica(BrokerId(replica))
                    .with_records(records.map(Bytes::from));
                (data, file)
            })
    }

    fn case_strategy() -> impl Strategy<Value = Case> {
        let name = "[a-z0-9._-]{0,12}|\\PC{0,6}";
        let topics = prop::collection::vec(
            (name, prop::collection::vec(partition_strategy(), 0..=4)),
            0..=3,
        );
        (
            any::<i32>(),
            any::<i32>(),
            any::<i16>(),
            // Anything but 0 is an error below v7 (for both encoders).
            prop_oneof![9 => Just(0), 1 => any::<i32>()],
            topics,
        )
            .prop_map(
                |(correlation_id, throttle, error_code, session_id, topics)| {
                    let mut disk = FakeDisk::default();
                    let mut files = BTreeMap::new();
                    let mut with_files = Vec::new();
                    let mut inline = Vec::new();
                    for (t, (name, partitions)) in topics.into_iter().enumerate() {
                        let mut file_parts = Vec::new();
                        for (p, (data, file)) in partitions.iter().enumerate() {
                            let mut data = data.clone();
                            if let Some((segment_base, position)) = file {
                                let dir = PartitionDir {
                                    topic: name.as_str().into(),
                                    partition: p as i32,
                                };
                                let records = data
                                    .records
                                    .take()
                                    .expect("file-backed partitions have records");
                                files.insert(
                                    (t, p),
                                    disk.put(dir, *segment_base, *position, &records),
                                );
                            }
                            file_parts.push(data);
                        }
                        let inline_parts = partitions.into_iter().map(|(data, _)| data).collect();
                        with_files.push(topic(&name, file_parts));
                        inline.push(topic(&name, inline_parts));
                    }
                    let response = FetchResponse::default()
                        .with_throttle_time_ms(throttle)
                        .with_error_code(error_code)
                        .with_session_id(session_id);
                    Case {
                        correlation_id,
                        with_files: response.clone().with_responses(with_files),
                        inline: response.with_responses(inline),
                        files,
                        disk,
                    }
                },
            )
    }

    /// For every generated response and every version 4..=12: our parts, with
    /// the file ranges read back, are byte for byte kafka-protocol's frame of
    /// the same response with the records inline (or both encoders refuse),
    /// and kafka-protocol decodes them back to the same records.
    #[test]
    fn matches_kafka_protocol_for_every_version() {
        const CASES: u32 = 512;
        let mut runner = TestRunner::new(Config {
            cases: CASES,
            ..Config::default()
        });
        // Counters, to show the comparisons are not crowded out by refusals
        // (the runner takes an Fn, hence the cells).
        let compared = Cell::new(0u32);
        let both_refused = Cell::new(0u32);
        let file_parts = Cell::new(0usize);
        let result = runner.run(&case_strategy(), |case| {
            for version in 4..=12 {
                let ours = encode(case.correlation_id, version, &case.with_files, &case.files);
                let theirs = reference(case.correlation_id, version, &case.inline);
                let (parts, expected) = match (ours, theirs) {
                    (Ok(parts), Ok(expected)) => (parts, expected),
                    (Err(_), Err(_)) => {
                        both_refused.set(both_refused.get() + 1);
                        continue;
                    }
                    (ours, theirs) => {
                        let (ours, theirs) = (ours.map(|_| ()), theirs.map(|_| ()));
                        return Err(TestCaseError::fail(format!(
                            "v{version}: ours {ours:?}, kafka-protocol {theirs:?}"
                        )));
                    }
                };
                check_shape(&parts, &case.files);
                let frame = resolve(&parts, &case.disk);
                if let Some(at) = frame.iter().zip(&expected).position(|(a, b)| a != b) {
                    return Err(TestCaseError::fail(format!(
                        "v{version}: frames differ at byte {at}"
                    )));
                }
                prop_assert_eq!(frame.len(), expected.len(), "v{}: frame lengths", version);

                let (header, decoded) =
                    decode(version, &frame).map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
                prop_assert_eq!(header.correlation_id, case.correlation_id);
                prop_assert_eq!(decoded.responses.len(), case.inline.responses.len());
                for (got, want) in decoded.responses.iter().zip(&case.inline.responses) {
                    prop_assert_eq!(&got.topic, &want.topic);
                    let got: Vec<_> = got.partitions.iter().map(|p| &p.records).collect();
                    let want: Vec<_> = want.partitions.iter().map(|p| &p.records).collect();
                    prop_assert_eq!(got, want, "v{}: records", version);
                }
                compared.set(compared.get() + 1);
                file_parts.set(file_parts.get() + case.files.len());
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
        let (compared, both_refused, file_parts) =
            (compared.get(), both_refused.get(), file_parts.get());
        eprintln!(
            "{CASES} responses x 9 versions: {compared} frames byte-compared \
             ({file_parts} file ranges), {both_refused} refused by both encoders"
        );
        assert!(
            compared > CASES * 9 * 3 / 4,
            "only {compared} frames compared"
        );
        assert!(file_parts > CASES as usize, "only {file_parts} file ranges");
    }

    #[test]
    fn adjacent_bytes_are_merged() {
        let response = FetchResponse::default().with_responses(vec![
            topic(
                "a",
                vec![
                    partition(0, None),
                    partition(1, Some(b"inline")),
                    partition(2, Some(b"")),
                    partition(3, None),
                ],
            ),
            topic("b", vec![partition(0, Some(b"x")), partition(1, None)]),
            topic("c", vec![partition(0, Some(b"y"))]),
        ]);
        let files = BTreeMap::from([
            ((0, 0), vec![range("a", 0, 10)]),
            ((0, 3), vec![range("a", 3, 20)]),
            ((1, 1), vec![range("b", 1, 0)]),
        ]);
        for version in 4..=12 {
            let parts = encode(7, version, &response, &files).unwrap();
            check_shape(&parts, &files);
            assert_eq!(parts.len(), 7, "v{version}: {parts:?}");
            assert!(matches!(parts.last(), Some(FramePart::Bytes(_))));
        }

        // Without file ranges the whole frame is one part.
        let inline = FetchResponse::default()
            .with_responses(vec![topic("a", vec![partition(0, Some(b"r"))])]);
        for version in 4..=12 {
            let parts = encode(7, version, &inline, &BTreeMap::new()).unwrap();
            assert!(
                matches!(parts.as_slice(), [FramePart::Bytes(_)]),
                "{parts:?}"
            );
        }
    }

    /// Below v12 the last partition's records end the frame; from v12 on the
    /// partition's, topic's and response's tagged-field sections follow.
    #[test]
    fn frame_ends_with_the_last_file_below_v12() {
        let response =
            FetchResponse::default().with_responses(vec![topic("a", vec![partition(0, None)])]);
        let files = BTreeMap::from([((0, 0), vec![range("a", 0, 10)])]);
        for version in 4..=11 {
            let parts = encode(1, version, &response, &files).unwrap();
            assert!(matches!(
                parts.as_slice(),
                [FramePart::Bytes(_), FramePart::File(_)]
            ));
        }
        let parts = encode(1, 12, &response, &files).unwrap();
        match parts.as_slice() {
            [FramePart::Bytes(_), FramePart::File(_), FramePart::Bytes(tail)] => {
                assert_eq!(&tail[..], &[0, 0, 0]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rejects_versions_outside_4_to_12() {
        let response = FetchResponse::default();
        for version in [-1, 0, 3, 13, 16, 18] {
            let err = encode(1, version, &response, &BTreeMap::new()).unwrap_err();
            assert!(err.to_string().contains(&format!("v{version}")), "{err}");
        }
        for version in 4..=12 {
            encode(1, version, &response, &BTreeMap::new()).unwrap();
        }
    }

    #[test]
    fn rejects_file_key_out_of_range() {
        let response =
            FetchResponse::default().with_responses(vec![topic("a", vec![partition(0, None)])]);
        for key in [(1, 0), (0, 1), (usize::MAX, 0)] {
            let files = BTreeMap::from([(key, vec![range("a", 0, 10)])]);
            let err = encode(1, 12, &response, &files).unwrap_err();
            assert!(err.to_string().contains("lacks"), "{err}");
        }
    }

    #[test]
    fn rejects_file_backed_partition_with_inline_records() {
        // PartitionData::default() has records Some(empty), not None.
        for records in [Some(&b""[..]), Some(&b"inline"[..])] {
            let response = FetchResponse::default()
                .with_responses(vec![topic("a", vec![partition(0, records)])]);
            let files = BTreeMap::from([((0, 0), vec![range("a", 0, 10)])]);
            let err = encode(1, 12, &response, &files).unwrap_err();
            assert!(err.to_string().contains("inline records"), "{err}");
        }
    }

    /// At v12 a tagged field that is set is refused; below v12 it is left
    /// out, as kafka-protocol leaves it out.
    #[test]
    fn tagged_fields_refused_at_v12_and_dropped_below() {
        let tag = || BTreeMap::from([(99, Bytes::from_static(b"?"))]);
        let base = || {
            FetchResponse::default()
                .with_responses(vec![topic("a", vec![partition(0, Some(b"r"))])])
        };
        let with_partition = |f: fn(PartitionData) -> PartitionData| {
            let mut response = base();
            let p = response.responses[0].partitions.pop().unwrap();
            response.responses[0].partitions.push(f(p));
            response
        };
        let tagged = [
            base().with_unknown_tagged_fields(tag()),
            {
                let mut response = base();
                response.responses[0].unknown_tagged_fields = tag();
                response
            },
            with_partition(|p| p.with_diverging_epoch(EpochEndOffset::default().with_epoch(3))),
            with_partition(|p| {
                p.with_current_leader(LeaderIdAndEpoch::default().with_leader_id(BrokerId(2)))
            }),
            with_partition(|p| p.with_snapshot_id(SnapshotId::default().with_end_offset(5))),
            with_partition(|p| p.with_unknown_tagged_field(7, Bytes::from_static(b"!"))),
            with_partition(|p| {
                p.with_aborted_transactions(Some(vec![
                    AbortedTransaction::default().with_unknown_tagged_field(0, Bytes::new())
                ]))
            }),
        ];
        for response in &tagged {
            let err = encode(1, 12, response, &BTreeMap::new()).unwrap_err();
            assert!(format!("{err:#}").contains("tagged fields"), "{err:#}");
            for version in 4..=11 {
                let parts = encode(1, version, response, &BTreeMap::new()).unwrap();
                let frame = resolve(&parts, &FakeDisk::default());
                assert_eq!(
                    frame,
                    reference(1, version, response).unwrap(),
                    "v{version}"
                );
            }
        }
    }

    #[test]
    fn file_ranges_must_fit_the_size_prefix() {
        let response = FetchResponse::default().with_responses(vec![topic(
            "a",
            vec![partition(0, None), partition(1, None)],
        )]);
        let too_long = BTreeMap::from([((0, 0), vec![range("a", 0, i32::MAX as u64 + 1)])]);
        let too_long_together = BTreeMap::from([
            ((0, 0), vec![range("a", 0, 1 << 30)]),
            ((0, 1), vec![range("a", 1, 1 << 30)]),
        ]);
        for version in [4, 11, 12] {
            assert!(encode(1, version, &response, &too_long).is_err());
            let err = encode(1, version, &response, &too_long_together).unwrap_err();
            assert!(err.to_string().contains("size prefix"), "{err}");
        }
    }

    /// Real record batches served from a file range come back out of
    /// kafka-protocol's decoders: the frame and then the records.
    #[test]
    fn decodes_record_batches_served_from_a_file() {
        let records: Vec<Record> = (0..3)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: 40 + i,
                sequence: -1,
                timestamp: 1_700_000_000_000 + i,
                key: Some(Bytes::from(format!("key-{i}"))),
                value: Some(Bytes::from(format!("value-{i}"))),
                headers: Default::default(),
            })
            .collect();
        let mut batch = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut batch, &records, &options).unwrap();

        let mut disk = FakeDisk::default();
        let dir = PartitionDir {
            topic: "orders".into(),
            partition: 1,
        };
        let files = BTreeMap::from([((0, 1), disk.put(dir, 40, 17, &batch))]);
        let response = FetchResponse::default().with_responses(vec![topic(
            "orders",
            vec![
                partition(0, Some(b"")),
                partition(1, None).with_high_watermark(43),
            ],
        )]);
        for version in 4..=12 {
            let parts = encode(9, version, &response, &files).unwrap();
            let (header, decoded) = decode(version, &resolve(&parts, &disk)).unwrap();
            assert_eq!(header.correlation_id, 9);
            let partitions = &decoded.responses[0].partitions;
            assert_eq!(partitions[0].records.as_deref(), Some(&b""[..]));
            assert_eq!(partitions[1].high_watermark, 43);
            let mut served = partitions[1].records.clone().unwrap();
            // kafka-protocol's encoder puts each of these records in a batch
            // of its own (without a producer, offset - sequence differs), so
            // compare the records, not the batches.
            let served: Vec<Record> = RecordBatchDecoder::decode_all(&mut served)
                .unwrap()
                .into_iter()
                .flat_map(|set| set.records)
                .collect();
            assert_eq!(served, records, "v{version}");
        }
    }
}
