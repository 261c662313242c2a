//! Kafka RecordBatch v2 (magic 2) headers, read and patched on raw bytes.
//!
//! The broker stores batches as clients sent them (re-encoded only where a
//! topic's compression.type names another codec, or a compressed batch's
//! inner offsets are wrong: `crate::recompress`), so besides Produce's
//! check of every record all it needs is the 61-byte header: it reads it
//! to index the log, and it patches header fields in place of a
//! copy: the base offset (which the CRC does not cover, so the CRC stays
//! valid) and, for `message.timestamp.type=LogAppendTime` or a header whose
//! max timestamp is not its records', the max timestamp and the
//! timestamp-type bit (which it does cover, so the CRC is recomputed).
//!
//! Layout (big-endian), offsets in bytes:
//! baseOffset i64 (0), batchLength i32 (8), partitionLeaderEpoch i32 (12),
//! magic i8 (16), crc u32 (17), attributes i16 (21), lastOffsetDelta i32 (23),
//! baseTimestamp i64 (27), maxTimestamp i64 (35), producerId i64 (43),
//! producerEpoch i16 (51), baseSequence i32 (53), recordsCount i32 (57),
//! records (61..). batchLength counts the bytes after itself, so a batch is
//! `12 + batchLength` bytes long. CRC-32C covers attributes to the end.

use bytes::{Bytes, BytesMut};
use std::fmt;

/// Bytes of a v2 batch header, up to the first record.
pub const BATCH_HEADER_BYTES: usize = 61;
/// Bytes that batchLength does not count: baseOffset and batchLength itself.
pub const BATCH_LOG_OVERHEAD_BYTES: usize = 12;
/// The only record format the broker accepts and stores.
pub const MAGIC_V2: i8 = 2;
/// baseSequence of a batch from a producer that is not idempotent.
pub const NO_SEQUENCE: i32 = -1;
/// producerId of a batch from a producer that is not idempotent.
pub const NO_PRODUCER_ID: i64 = -1;
/// A timestamp that is not set (Kafka's RecordBatch.NO_TIMESTAMP).
pub const NO_TIMESTAMP: i64 = -1;

/// The leader epoch of every partition: one node, leader since creation and
/// never replaced, so epoch 0 as Kafka's first leader has (Metadata and
/// ListOffsets answer it; Kafka 4.3.1 does, seen in conformance). Every
/// stored batch carries it in its partitionLeaderEpoch, as Kafka's leader
/// sets it on each batch it appends, markers too (LogValidator:
/// `batch.setPartitionLeaderEpoch`); producers send -1.
pub const LEADER_EPOCH: i32 = 0;

/// The first bytes of a batch that the log sets as it stores the batch, all
/// outside the CRC: the base offset, the batch length (kept), the partition
/// leader epoch.
pub const STORED_PREFIX_BYTES: usize = PARTITION_LEADER_EPOCH_AT + 4;

const BASE_OFFSET_AT: usize = 0;
const BATCH_LENGTH_AT: usize = 8;
const PARTITION_LEADER_EPOCH_AT: usize = 12;
const MAGIC_AT: usize = 16;
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
const BASE_TIMESTAMP_AT: usize = 27;
const MAX_TIMESTAMP_AT: usize = 35;
const PRODUCER_ID_AT: usize = 43;
const PRODUCER_EPOCH_AT: usize = 51;
const BASE_SEQUENCE_AT: usize = 53;
const RECORDS_COUNT_AT: usize = 57;

/// The smallest batchLength a v2 batch can have: a header with no records.
const BATCH_LENGTH_MIN: i32 = (BATCH_HEADER_BYTES - BATCH_LOG_OVERHEAD_BYTES) as i32;

/// The attribute bits holding the compression codec (0 none … 4 zstd).
pub const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_BIT: i16 = 0x08;
const TRANSACTIONAL_BIT: i16 = 0x10;
const CONTROL_BIT: i16 = 0x20;

/// The header fields of one v2 record batch, as stored in its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Bytes of the whole batch, header included.
    pub fn total_bytes(&self) -> usize {
        assert!(
            self.batch_length >= BATCH_LENGTH_MIN,
            "header was parsed, so its length is sane"
        );
        BATCH_LOG_OVERHEAD_BYTES + self.batch_length as usize
    }

    /// Offset of the batch's last record (the batch spans base..=last).
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    /// Part of a transaction (committed or aborted by a later marker).
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }

    /// A control batch holds a transaction marker (commit or abort).
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }

    /// 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub fn compression_code(&self) -> u8 {
        (self.attributes & COMPRESSION_MASK) as u8
    }

    /// The timestamp type bit: every record's timestamp is the batch's max timestamp.
    pub fn has_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_BIT != 0
    }

    /// Whether the batch comes from an idempotent or transactional producer.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// Sequence of the last record. Sequences wrap from i32::MAX to 0, as
    /// Kafka's DefaultRecordBatch.incrementSequence does; NO_SEQUENCE stays.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        increment_sequence(self.base_sequence, self.last_offset_delta)
    }
}

/// Kafka's DefaultRecordBatch.incrementSequence: adds modulo 2^31 so that a
/// sequence never turns negative.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        return increment - (i32::MAX - sequence) - 1;
    }
    sequence + increment
}

/// Why bytes are not an acceptable v2 record batch. The caller maps these to
/// Kafka errors (BadMagic: UNSUPPORTED_FOR_MESSAGE_FORMAT; TooLarge:
/// MESSAGE_TOO_LARGE; the rest: CORRUPT_MESSAGE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer bytes than the header or the batch length says (or no bytes at all).
    Truncated,
    /// A record format other than v2.
    BadMagic(i8),
    /// batchLength smaller than a header.
    BadLength(i32),
    /// The CRC-32C stored in the batch does not match its bytes.
    CrcMismatch { stored: u32, computed: u32 },
    /// recordsCount or lastOffsetDelta make no sense together.
    BadRecordCount,
    /// The batch is larger than the limit (message.max.bytes).
    TooLarge {
        batch_bytes: usize,
        batch_bytes_max: usize,
    },
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::Truncated => write!(f, "record batch is truncated"),
            BatchError::BadMagic(magic) => write!(f, "unsupported record batch magic {magic}"),
            BatchError::BadLength(length) => write!(f, "bad record batch length {length}"),
            BatchError::CrcMismatch { stored, computed } => {
                write!(
                    f,
                    "record batch crc mismatch: stored {stored:#010x}, computed {computed:#010x}"
                )
            }
            BatchError::BadRecordCount => write!(f, "record count inconsistent with offset delta"),
            BatchError::TooLarge {
                batch_bytes,
                batch_bytes_max,
            } => {
                write!(
                    f,
                    "record batch of {batch_bytes} bytes exceeds {batch_bytes_max}"
                )
            }
        }
    }
}

impl std::error::Error for BatchError {}

fn read_i16(buf: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(buf[at..at + 2].try_into().expect("two bytes"))
}

fn read_i32(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(buf[at..at + 4].try_into().expect("four bytes"))
}

fn read_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(buf[at..at + 4].try_into().expect("four bytes"))
}

fn read_i64(buf: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(buf[at..at + 8].try_into().expect("eight bytes"))
}

/// Reads the header of the batch at the start of `buf` (which may hold more
/// bytes after it, or fewer than the whole batch). Checks magic and that the
/// length is at least a header; does not check the CRC or the record count.
pub fn parse_header(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    // Magic sits at byte 16 in every record format (v0 and v1 too), so an old
    // client's message set is recognised as such before its length is judged.
    if buf.len() <= MAGIC_AT {
        return Err(BatchError::Truncated);
    }
    let magic = buf[MAGIC_AT] as i8;
    if magic != MAGIC_V2 {
        return Err(BatchError::BadMagic(magic));
    }
    let batch_length = read_i32(buf, BATCH_LENGTH_AT);
    if batch_length < BATCH_LENGTH_MIN {
        return Err(BatchError::BadLength(batch_length));
    }
    if buf.len() < BATCH_HEADER_BYTES {
        return Err(BatchError::Truncated);
    }
    Ok(BatchHeader {
        base_offset: read_i64(buf, BASE_OFFSET_AT),
        batch_length,
        partition_leader_epoch: read_i32(buf, PARTITION_LEADER_EPOCH_AT),
        magic,
        crc: read_u32(buf, CRC_AT),
        attributes: read_i16(buf, ATTRIBUTES_AT),
        last_offset_delta: read_i32(buf, LAST_OFFSET_DELTA_AT),
        base_timestamp: read_i64(buf, BASE_TIMESTAMP_AT),
        max_timestamp: read_i64(buf, MAX_TIMESTAMP_AT),
        producer_id: read_i64(buf, PRODUCER_ID_AT),
        producer_epoch: read_i16(buf, PRODUCER_EPOCH_AT),
        base_sequence: read_i32(buf, BASE_SEQUENCE_AT),
        records_count: read_i32(buf, RECORDS_COUNT_AT),
    })
}

/// Checks the CRC-32C of the batch at the start of `batch` (trailing bytes
/// after the batch are ignored).
pub fn verify_crc(batch: &[u8]) -> Result<(), BatchError> {
    let header = parse_header(batch)?;
    let total_bytes = header.total_bytes();
    if batch.len() < total_bytes {
        return Err(BatchError::Truncated);
    }
    let computed = crc32c::crc32c(&batch[ATTRIBUTES_AT..total_bytes]);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    Ok(())
}

/// Checks that the offset range and the record count agree as far as a
/// batch of the log must: non-empty, with no more records than offsets,
/// which is what the offset assignment relies on (a compacted batch has
/// fewer records). Produce demands `recordsCount == lastOffsetDelta + 1`
/// of clients besides, as Kafka does (`api::produce::records`).
fn check_record_count(header: &BatchHeader, empty_ok: bool) -> Result<(), BatchError> {
    if header.last_offset_delta < 0 {
        return Err(BatchError::BadRecordCount);
    }
    if header.records_count < 0 || (header.records_count == 0 && !empty_ok) {
        return Err(BatchError::BadRecordCount);
    }
    if i64::from(header.records_count) > i64::from(header.last_offset_delta) + 1 {
        return Err(BatchError::BadRecordCount);
    }
    Ok(())
}

/// Fully checks the batch at the start of `buf`: header, whole batch present,
/// record count, CRC. Returns its header; the batch is `header.total_bytes()`
/// long. Used both for produce and for the log's start-up scan.
pub fn check_batch(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = parse_header(buf)?;
    check_body(buf, &header, false)?;
    Ok(header)
}

/// `check_batch` for a batch read back from the log, which may hold no
/// records: the log cleaner keeps an emptied batch when it is a producer's
/// last, for its sequence and epoch (Kafka's BatchRetention.RETAIN_EMPTY),
/// and a compacted batch holds fewer records than offsets.
pub fn check_stored_batch(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = parse_header(buf)?;
    check_body(buf, &header, true)?;
    Ok(header)
}

fn check_body(buf: &[u8], header: &BatchHeader, empty_ok: bool) -> Result<(), BatchError> {
    if buf.len() < header.total_bytes() {
        return Err(BatchError::Truncated);
    }
    check_record_count(header, empty_ok)?;
    verify_crc(buf)
}

/// Splits a produce request's records field into its batches (usually one),
/// each a zero-copy slice of `records`, checked: magic 2, consistent lengths,
/// a sane record count, a valid CRC, at most `batch_bytes_max` bytes each, no
/// trailing partial batch, and at least one batch (empty input is `Truncated`).
///
/// Does not judge what the batch means (control batches from clients,
/// sequences, transactional state): that is the caller's business.
pub fn split_produce_records(
    records: &Bytes,
    batch_bytes_max: usize,
) -> Result<Vec<(BatchHeader, Bytes)>, BatchError> {
    if records.is_empty() {
        return Err(BatchError::Truncated);
    }
    let mut batches = Vec::new();
    let mut at = 0;
    while at < records.len() {
        let rest = &records[at..];
        let header = parse_header(rest)?;
        let batch_bytes = header.total_bytes();
        // Judged before the body so that an oversized batch is reported as
        // such even when the client sent only part of it.
        if batch_bytes > batch_bytes_max {
            return Err(BatchError::TooLarge {
                batch_bytes,
                batch_bytes_max,
            });
        }
        check_body(rest, &header, false)?;
        batches.push((header, records.slice(at..at + batch_bytes)));
        at += batch_bytes;
    }
    assert!(
        at == records.len(),
        "batches tile the records field exactly"
    );
    assert!(
        !batches.is_empty(),
        "non-empty input yields a batch or an error"
    );
    Ok(batches)
}

/// A copy of `batch` as the log stores it at `base_offset`: its base offset
/// and partition leader epoch set (`stored_prefix`). The CRC covers
/// neither, so it stays valid.
pub fn with_base_offset(batch: &Bytes, base_offset: i64) -> Bytes {
    rewrite(batch, base_offset, None)
}

/// The first `STORED_PREFIX_BYTES` of `batch` as the log stores it at
/// `base_offset`; the rest of the batch is stored as it is. So net writes a
/// produced batch without copying it: this prefix, then a slice.
pub fn stored_prefix(batch: &[u8], base_offset: i64) -> [u8; STORED_PREFIX_BYTES] {
    assert!(
        batch.len() >= STORED_PREFIX_BYTES,
        "a record batch starts with its base offset, length and leader epoch"
    );
    let mut prefix = [0u8; STORED_PREFIX_BYTES];
    prefix[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&base_offset.to_be_bytes());
    prefix[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4]
        .copy_from_slice(&batch[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4]);
    prefix[PARTITION_LEADER_EPOCH_AT..].copy_from_slice(&LEADER_EPOCH.to_be_bytes());
    prefix
}

/// A copy of `batch` stamped with the broker's time (LogAppendTime): the max
/// timestamp set to `now_ms`, the timestamp-type bit set, the CRC recomputed.
/// Records keep their deltas; consumers read every record's timestamp as the
/// max timestamp when the bit is set.
pub fn with_log_append_time(batch: &Bytes, now_ms: i64) -> Bytes {
    let header = parse_header(batch).expect("with_log_append_time takes a validated batch");
    rewrite(batch, header.base_offset, Some(now_ms))
}

/// A copy of `batch` as Kafka stores a produced batch on a CreateTime
/// topic: the timestamp type CreateTime and the max timestamp the records'
/// own (`records_max_ms`), whatever the client wrote there, the CRC
/// recomputed (LogValidator's `setMaxTimestamp(CREATE_TIME, ...)` after
/// reading the records). Left as sent, a wrong max timestamp would mislead
/// retention.ms, the time index and ListOffsets by timestamp.
pub fn with_create_time_max(batch: &Bytes, records_max_ms: i64) -> Bytes {
    let header = parse_header(batch).expect("with_create_time_max takes a validated batch");
    let mut out = BytesMut::from(&batch[..]);
    set_time(
        &mut out,
        header.attributes & !TIMESTAMP_TYPE_BIT,
        records_max_ms,
    );
    out.freeze()
}

/// One copy that sets the base offset and, when `log_append_time_ms` is set,
/// stamps the batch with it (see `with_log_append_time`).
pub fn rewrite(batch: &Bytes, base_offset: i64, log_append_time_ms: Option<i64>) -> Bytes {
    let header = parse_header(batch).expect("rewrite takes a validated batch");
    assert!(
        batch.len() == header.total_bytes(),
        "rewrite takes exactly one batch"
    );
    let mut out = BytesMut::from(&batch[..]);
    out[..STORED_PREFIX_BYTES].copy_from_slice(&stored_prefix(batch, base_offset));
    if let Some(now_ms) = log_append_time_ms {
        set_time(&mut out, header.attributes | TIMESTAMP_TYPE_BIT, now_ms);
    }
    out.freeze()
}

/// Sets a whole batch's attributes and max timestamp, then its CRC, which
/// covers both.
fn set_time(batch: &mut [u8], attributes: i16, max_timestamp: i64) {
    batch[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&max_timestamp.to_be_bytes());
    write_crc(batch);
}

/// Writes a whole batch's CRC-32C into its header: over the bytes from the
/// attributes to the end, once the batch is built or a field it covers has
/// changed.
pub fn write_crc(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
    batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
}

/// One record's place and time, read from an uncompressed batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordTime {
    pub offset_delta: i32,
    pub timestamp: i64,
}

/// The offset deltas and timestamps of the records of an uncompressed batch,
/// read without decoding keys, values or headers; `None` for a compressed
/// batch (its records are not readable without decompressing). With
/// LogAppendTime every record's timestamp is the batch's max timestamp.
pub fn record_times(batch: &[u8]) -> Option<RecordTimes<'_>> {
    let header = parse_header(batch).ok()?;
    if header.compression_code() != 0 {
        return None;
    }
    let end = header.total_bytes().min(batch.len());
    Some(RecordTimes {
        records: &batch[BATCH_HEADER_BYTES.min(end)..end],
        at: 0,
        remaining: header.records_count.max(0),
        base_timestamp: header.base_timestamp,
        log_append_time_ms: header.has_log_append_time().then_some(header.max_timestamp),
        failed: false,
    })
}

/// Iterator from `record_times`. Yields an error once and stops if a record
/// is malformed (a client can send a valid CRC over nonsense).
pub struct RecordTimes<'a> {
    records: &'a [u8],
    at: usize,
    remaining: i32,
    base_timestamp: i64,
    log_append_time_ms: Option<i64>,
    failed: bool,
}

impl RecordTimes<'_> {
    fn next_record(&mut self) -> Result<RecordTime, BatchError> {
        let length = read_varint(self.records, &mut self.at).ok_or(BatchError::Truncated)?;
        let length = usize::try_from(length).map_err(|_| BatchError::BadLength(length))?;
        let body_end = self.at.checked_add(length).ok_or(BatchError::Truncated)?;
        if body_end > self.records.len() {
            return Err(BatchError::Truncated);
        }
        let body = &self.records[self.at..body_end];
        self.at = body_end;
        // attributes (i8, unused), timestampDelta varlong, offsetDelta varint.
        let mut at = 1;
        if body.is_empty() {
            return Err(BatchError::Truncated);
        }
        let timestamp_delta = read_varlong(body, &mut at).ok_or(BatchError::Truncated)?;
        let offset_delta = read_varint(body, &mut at).ok_or(BatchError::Truncated)?;
        let timestamp = match self.log_append_time_ms {
            Some(ms) => ms,
            None => self.base_timestamp.wrapping_add(timestamp_delta),
        };
        Ok(RecordTime {
            offset_delta,
            timestamp,
        })
    }
}

impl Iterator for RecordTimes<'_> {
    type Item = Result<RecordTime, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let record = self.next_record();
        self.failed = record.is_err();
        Some(record)
    }
}

/// A zigzag varlong as in Kafka's ByteUtils.readVarlong; `None` when the bytes
/// run out or the encoding is longer than 10 bytes.
pub fn read_varlong(buf: &[u8], at: &mut usize) -> Option<i64> {
    // One byte is the common case (small deltas, lengths below 64, -1).
    let first = *buf.get(*at)?;
    if first & 0x80 == 0 {
        *at += 1;
        let raw = u64::from(first);
        return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
    }
    let mut raw: u64 = 0;
    for i in 0..10 {
        let byte = *buf.get(*at)?;
        *at += 1;
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    None
}

/// A zigzag varint; `None` also when the value does not fit an i32.
pub fn read_varint(buf: &[u8], at: &mut usize) -> Option<i32> {
    i32::try_from(read_varlong(buf, at)?).ok()
}

/// A varint-length byte string, `None` inside for a null one (length < 0);
/// `None` when the bytes run out.
pub fn read_bytes<'a>(buf: &'a [u8], at: &mut usize) -> Option<Option<&'a [u8]>> {
    let len = read_varint(buf, at)?;
    let Ok(len) = usize::try_from(len) else {
        return Some(None);
    };
    let end = at.checked_add(len).filter(|end| *end <= buf.len())?;
    let bytes = &buf[*at..end];
    *at = end;
    Some(Some(bytes))
}

/// Hand-built batches for unit tests (of this module and of the log).
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use bytes::BufMut;

    pub(crate) fn put_varlong(out: &mut Vec<u8>, value: i64) {
        let mut raw = ((value << 1) ^ (value >> 63)) as u64;
        while raw >= 0x80 {
            out.push((raw as u8 & 0x7f) | 0x80);
            raw >>= 7;
        }
        out.push(raw as u8);
    }

    /// What a test batch holds; `encode` lays it out as a client would.
    #[derive(Clone, Debug)]
    pub struct TestBatch {
        pub base_offset: i64,
        pub attributes: i16,
        pub base_timestamp: i64,
        /// One entry per record: its timestamp delta from base_timestamp.
        pub timestamp_deltas: Vec<i64>,
        pub producer_id: i64,
        pub producer_epoch: i16,
        pub base_sequence: i32,
        pub value_bytes: usize,
    }

    impl Default for TestBatch {
        fn default() -> Self {
            Self {
                base_offset: 0,
                attributes: 0,
                base_timestamp: 1_000,
                timestamp_deltas: vec![0],
                producer_id: NO_PRODUCER_ID,
                producer_epoch: -1,
                base_sequence: NO_SEQUENCE,
                value_bytes: 10,
            }
        }
    }

    impl TestBatch {
        /// `count` records stamped `base_timestamp`, `base_timestamp + 1`, ...
        pub fn records(count: usize) -> Self {
            Self {
                timestamp_deltas: (0..count as i64).collect(),
                ..Self::default()
            }
        }

        pub fn encode(&self) -> Bytes {
            assert!(!self.timestamp_deltas.is_empty(), "a batch holds a record");
            let mut records = Vec::new();
            for (i, delta) in self.timestamp_deltas.iter().enumerate() {
                let mut body = vec![0u8]; // attributes
                put_varlong(&mut body, *delta);
                put_varlong(&mut body, i as i64);
                put_varlong(&mut body, -1); // null key
                put_varlong(&mut body, self.value_bytes as i64);
                body.extend(std::iter::repeat_n(i as u8, self.value_bytes));
                put_varlong(&mut body, 0); // no headers
                put_varlong(&mut records, body.len() as i64);
                records.extend_from_slice(&body);
            }
            let count = self.timestamp_deltas.len() as i32;
            let max_delta = *self.timestamp_deltas.iter().max().expect("non-empty");
            let mut out = BytesMut::new();
            out.put_i64(self.base_offset);
            out.put_i32((BATCH_HEADER_BYTES - BATCH_LOG_OVERHEAD_BYTES + records.len()) as i32);
            out.put_i32(-1); // partition leader epoch
            out.put_i8(MAGIC_V2);
            out.put_u32(0); // crc, filled below
            out.put_i16(self.attributes);
            out.put_i32(count - 1);
            out.put_i64(self.base_timestamp);
            out.put_i64(self.base_timestamp + max_delta);
            out.put_i64(self.producer_id);
            out.put_i16(self.producer_epoch);
            out.put_i32(self.base_sequence);
            out.put_i32(count);
            out.extend_from_slice(&records);
            write_crc(&mut out);
            out.freeze()
        }
    }

    /// A valid batch of `count` records starting at offset 0.
    pub fn batch(count: usize) -> Bytes {
        TestBatch::records(count).encode()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{batch, TestBatch};
    use super::*;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType,
    };

    fn concat(parts: &[Bytes]) -> Bytes {
        let mut out = BytesMut::new();
        for part in parts {
            out.extend_from_slice(part);
        }
        out.freeze()
    }

    #[test]
    fn parses_a_hand_built_batch() {
        let spec = TestBatch {
            base_offset: 7,
            base_timestamp: 5_000,
            timestamp_deltas: vec![0, 3, 1],
            producer_id: 42,
            producer_epoch: 3,
            base_sequence: 10,
            attributes: TRANSACTIONAL_BIT,
            ..TestBatch::default()
        };
        let bytes = spec.encode();
        let header = check_batch(&bytes).unwrap();
        assert_eq!(header.base_offset, 7);
        assert_eq!(header.total_bytes(), bytes.len());
        assert_eq!(header.last_offset(), 9);
        assert_eq!(header.records_count, 3);
        assert_eq!(header.max_timestamp, 5_003);
        assert_eq!(header.producer_id, 42);
        assert_eq!(header.producer_epoch, 3);
        assert_eq!(header.last_sequence(), 12);
        assert!(header.is_transactional());
        assert!(!header.is_control());
        assert!(!header.has_log_append_time());
        assert_eq!(header.compression_code(), 0);
    }

    #[test]
    fn hand_built_batch_decodes_with_kafka_protocol() {
        let bytes = TestBatch {
            timestamp_deltas: vec![0, 2],
            ..TestBatch::default()
        }
        .encode();
        let mut buf = bytes.clone();
        let set = RecordBatchDecoder::decode(&mut buf).unwrap();
        assert_eq!(set.records.len(), 2);
        assert_eq!(set.records[1].offset, 1);
        assert_eq!(set.records[1].timestamp, 1_002);
    }

    #[test]
    fn parses_a_kafka_protocol_encoded_batch() {
        let records: Vec<Record> = (0..4)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: 9,
                producer_epoch: 1,
                timestamp_type: TimestampType::Creation,
                offset: i,
                sequence: 10 + i as i32,
                timestamp: 100 + i,
                key: None,
                value: Some(Bytes::from_static(b"value")),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
        let bytes = buf.freeze();
        let batches = split_produce_records(&bytes, 1 << 20).unwrap();
        assert_eq!(batches.len(), 1);
        let header = &batches[0].0;
        assert_eq!(header.records_count, 4);
        assert_eq!(header.max_timestamp, 103);
        assert_eq!(header.last_sequence(), 13);
        let times: Vec<_> = record_times(&bytes).unwrap().map(Result::unwrap).collect();
        assert_eq!(times.len(), 4);
        assert_eq!(
            times[2],
            RecordTime {
                offset_delta: 2,
                timestamp: 102
            }
        );
    }

    #[test]
    fn sequence_wraps_like_kafka() {
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 2, 5), 2);
        assert_eq!(increment_sequence(5, 5), 10);
        let header = parse_header(&batch(1)).unwrap();
        assert_eq!(header.last_sequence(), NO_SEQUENCE);
    }

    #[test]
    fn flipped_bit_fails_crc() {
        let bytes = batch(3);
        for at in [ATTRIBUTES_AT, RECORDS_COUNT_AT + 2, bytes.len() - 1] {
            let mut bad = BytesMut::from(&bytes[..]);
            bad[at] ^= 0x04;
            let bad = bad.freeze();
            match split_produce_records(&bad, 1 << 20) {
                Err(BatchError::CrcMismatch { .. }) | Err(BatchError::BadRecordCount) => {}
                other => panic!("flip at {at}: {other:?}"),
            }
            if at != RECORDS_COUNT_AT + 2 {
                assert!(matches!(
                    verify_crc(&bad),
                    Err(BatchError::CrcMismatch { .. })
                ));
            }
        }
    }

    #[test]
    fn truncated_input_is_rejected_at_every_length() {
        let bytes = batch(2);
        for len in 0..bytes.len() {
            let cut = bytes.slice(..len);
            assert_eq!(
                split_produce_records(&cut, 1 << 20),
                Err(BatchError::Truncated),
                "len {len}"
            );
        }
    }

    #[test]
    fn multiple_batches_split_zero_copy() {
        let parts = [batch(1), batch(3), batch(2)];
        let records = concat(&parts);
        let batches = split_produce_records(&records, 1 << 20).unwrap();
        assert_eq!(batches.len(), 3);
        for ((header, bytes), part) in batches.iter().zip(&parts) {
            assert_eq!(bytes, part);
            assert_eq!(header.total_bytes(), part.len());
        }
        // Slices share the request's buffer rather than copying it.
        assert_eq!(batches[1].1.as_ptr(), records[parts[0].len()..].as_ptr());
    }

    #[test]
    fn trailing_partial_batch_is_rejected() {
        let records = concat(&[batch(1), batch(2).slice(..20)]);
        assert_eq!(
            split_produce_records(&records, 1 << 20),
            Err(BatchError::Truncated)
        );
    }

    #[test]
    fn old_magic_and_bad_length_are_rejected() {
        let mut old = BytesMut::from(&batch(1)[..]);
        old[MAGIC_AT] = 1;
        assert_eq!(
            split_produce_records(&old.freeze(), 1 << 20),
            Err(BatchError::BadMagic(1))
        );
        let mut short = BytesMut::from(&batch(1)[..]);
        short[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&10i32.to_be_bytes());
        assert_eq!(
            split_produce_records(&short.freeze(), 1 << 20),
            Err(BatchError::BadLength(10))
        );
        let mut negative = BytesMut::from(&batch(1)[..]);
        negative[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            split_produce_records(&negative.freeze(), 1 << 20),
            Err(BatchError::BadLength(-1))
        );
    }

    #[test]
    fn empty_input_is_rejected() {
        assert_eq!(
            split_produce_records(&Bytes::new(), 1 << 20),
            Err(BatchError::Truncated)
        );
    }

    #[test]
    fn too_large_batch_is_rejected_even_when_incomplete() {
        let bytes = batch(5);
        let max = bytes.len() - 1;
        let expected = BatchError::TooLarge {
            batch_bytes: bytes.len(),
            batch_bytes_max: max,
        };
        assert_eq!(split_produce_records(&bytes, max), Err(expected.clone()));
        assert_eq!(
            split_produce_records(&bytes.slice(..70), max),
            Err(expected)
        );
        assert!(split_produce_records(&bytes, bytes.len()).is_ok());
    }

    #[test]
    fn inconsistent_record_count_is_rejected() {
        let patch = |delta: i32, count: i32| {
            let mut out = BytesMut::from(&batch(2)[..]);
            out[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4]
                .copy_from_slice(&delta.to_be_bytes());
            out[RECORDS_COUNT_AT..RECORDS_COUNT_AT + 4].copy_from_slice(&count.to_be_bytes());
            write_crc(&mut out);
            split_produce_records(&out.freeze(), 1 << 20).map(|_| ())
        };
        assert_eq!(patch(-1, 2), Err(BatchError::BadRecordCount));
        assert_eq!(patch(1, 0), Err(BatchError::BadRecordCount));
        assert_eq!(patch(1, 3), Err(BatchError::BadRecordCount));
        // Fewer records than offsets is what a compacted batch looks like.
        assert_eq!(patch(5, 2), Ok(()));
    }

    #[test]
    fn the_stored_copy_has_its_base_offset_and_leader_epoch_and_a_valid_crc() {
        let bytes = batch(3);
        assert_eq!(
            check_batch(&bytes).unwrap().partition_leader_epoch,
            -1,
            "sent as producers send it"
        );
        let moved = with_base_offset(&bytes, 1_000_000);
        let header = check_batch(&moved).unwrap();
        assert_eq!(header.base_offset, 1_000_000);
        assert_eq!(header.last_offset(), 1_000_002);
        assert_eq!(header.partition_leader_epoch, LEADER_EPOCH);
        assert_eq!(&moved[8..12], &bytes[8..12], "the length is kept");
        assert_eq!(&moved[16..], &bytes[16..]);
        assert_eq!(
            &moved[..STORED_PREFIX_BYTES],
            &stored_prefix(&bytes, 1_000_000)
        );
    }

    #[test]
    fn log_append_time_rewrite_recomputes_crc() {
        let bytes = batch(3);
        let stamped = with_log_append_time(&bytes, 99_999);
        let header = check_batch(&stamped).unwrap();
        assert!(header.has_log_append_time());
        assert_eq!(header.max_timestamp, 99_999);
        assert_eq!(header.base_timestamp, 1_000);
        let times: Vec<_> = record_times(&stamped)
            .unwrap()
            .map(|t| t.unwrap().timestamp)
            .collect();
        assert_eq!(times, vec![99_999; 3]);
        let both = rewrite(&bytes, 50, Some(7));
        let header = check_batch(&both).unwrap();
        assert_eq!((header.base_offset, header.max_timestamp), (50, 7));
    }

    #[test]
    fn record_times_reads_uncompressed_records() {
        let bytes = TestBatch {
            timestamp_deltas: vec![5, -2, 9],
            ..TestBatch::default()
        }
        .encode();
        let times: Vec<_> = record_times(&bytes).unwrap().map(Result::unwrap).collect();
        let expected = [(0, 1_005), (1, 998), (2, 1_009)];
        let got: Vec<_> = times
            .iter()
            .map(|t| (t.offset_delta, t.timestamp))
            .collect();
        assert_eq!(got, expected);
        let compressed = TestBatch {
            attributes: 1,
            ..TestBatch::default()
        }
        .encode();
        assert!(record_times(&compressed).is_none());
    }

    #[test]
    fn record_times_stops_on_malformed_records() {
        let mut bytes = BytesMut::from(&batch(2)[..]);
        // A record length far beyond the batch.
        bytes[BATCH_HEADER_BYTES] = 0x7e;
        let results: Vec<_> = record_times(&bytes).unwrap().collect();
        assert_eq!(results, vec![Err(BatchError::Truncated)]);
    }
}
