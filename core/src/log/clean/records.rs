//! The records inside a batch, for the cleaner and for Produce (the
//! batches it stores with the topic's compression.type, written anew as
//! they are read from a decompressing stream: `recompressed`); the rest of
//! the broker never looks past a batch's header (`crate::batch`).
//! Compacting needs each record's key and whether it has a value, and writing back the records it
//! keeps as a batch with the same header fields, as Kafka's
//! `MemoryRecords.filterTo` does (clients/src/main/java/org/apache/kafka/
//! common/record/MemoryRecords.java): same base offset, same last offset
//! (`overrideLastOffset`, so the producer's last sequence survives), same
//! producer id, epoch and base sequence, same compression codec.
//!
//! Records are read by `crate::record`. A kept record's bytes are copied as
//! they are, except its timestamp delta when the batch's base timestamp
//! moves to a delete horizon (KIP-534).

use std::io::BufRead;

use bytes::{BufMut, Bytes, BytesMut};

use super::codec::{self, DecompressError};
use crate::batch::{self, BatchHeader, BATCH_HEADER_BYTES, BATCH_LOG_OVERHEAD_BYTES};
use crate::limits;
use crate::record;

/// Attribute bit saying the base timestamp is a delete horizon (KIP-534:
/// tombstones and markers of empty transactions go once it has passed).
pub const DELETE_HORIZON_BIT: i16 = 0x40;

/// Why a batch's records could not be read or written back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordsError(pub String);

pub use crate::record::Record;

/// The records section of a batch, decompressed.
pub fn records_bytes(batch: &[u8], header: &BatchHeader) -> Result<Bytes, RecordsError> {
    decompressed(batch, header).map_err(|e| RecordsError(e.to_string()))
}

/// The records section of a batch, decompressed, at most
/// `limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX` bytes (`codec`).
pub fn decompressed(batch: &[u8], header: &BatchHeader) -> Result<Bytes, DecompressError> {
    let end = header.total_bytes().min(batch.len());
    let body = &batch[BATCH_HEADER_BYTES.min(end)..end];
    codec::decompress(
        header.compression_code(),
        body,
        limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX,
    )
}

/// The `count` records of decompressed records bytes, one at a time
/// (`crate::record`), borrowed from them: nothing is held per record, so a
/// batch of millions costs what its bytes cost. Bytes after the last are
/// not looked at. After an error the iterator ends.
pub fn records(bytes: &[u8], count: i32) -> Records<'_> {
    Records {
        bytes,
        at: 0,
        index: 0,
        count: count.max(0),
    }
}

/// See `records`.
pub struct Records<'a> {
    bytes: &'a [u8],
    at: usize,
    index: i32,
    count: i32,
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, RecordsError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.index >= self.count {
            return None;
        }
        let index = self.index;
        self.index += 1;
        let record = record::next(self.bytes, &mut self.at)
            .map_err(|_| RecordsError(format!("record {index} runs past its batch")))
            .and_then(|body| {
                record::read(body)
                    .map_err(|e| RecordsError(format!("record {index} does not read: {e:?}")))
            });
        if record.is_err() {
            self.index = self.count;
        }
        Some(record)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, usize::try_from(self.count - self.index).ok())
    }
}

fn put_varlong(buf: &mut Vec<u8>, value: i64) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        buf.push((raw as u8 & 0x7f) | 0x80);
        raw >>= 7;
    }
    buf.push(raw as u8);
}

/// Why a batch could not be written anew.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RebuildError {
    /// It would pass one of its `Bounds` (the writing stopped there).
    TooLarge(Bound),
    /// A record that does not read, or the codec failed.
    Failed(RecordsError),
}

/// Which bound a rebuilt batch would pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// Its records section would decompress to more than `plain_bytes_max`.
    Decompressed,
    /// It would be larger than `batch_bytes_max`.
    Stored,
    /// It would hold more than `records_max` records.
    Records,
}

impl From<RecordsError> for RebuildError {
    fn from(e: RecordsError) -> Self {
        Self::Failed(e)
    }
}

impl From<RebuildError> for RecordsError {
    fn from(e: RebuildError) -> Self {
        match e {
            RebuildError::Failed(e) => e,
            RebuildError::TooLarge(bound) => {
                RecordsError(format!("the batch is too large ({bound:?})"))
            }
        }
    }
}

impl std::fmt::Display for RebuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge(Bound::Decompressed) => write!(
                f,
                "the rebuilt batch's records would decompress to more than the broker reads"
            ),
            Self::TooLarge(Bound::Stored) => write!(f, "the rebuilt batch would be too large"),
            Self::TooLarge(Bound::Records) => write!(f, "the batch holds too many records"),
            Self::Failed(e) => write!(f, "{}", e.0),
        }
    }
}

/// What a batch written anew may reach: past any of them the writing stops
/// at once, having held at most about that much.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Its records section, decompressed: what the broker's readers (the
    /// cleaner, Produce's checks) take, `limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX`.
    pub plain_bytes_max: usize,
    /// The whole batch as stored (a topic's max.message.bytes and
    /// segment.bytes, for a produced batch).
    pub batch_bytes_max: usize,
    pub records_max: usize,
}

impl Bounds {
    /// The bounds of the broker's readers, and no other: what the cleaner
    /// writes back must read again.
    pub const READABLE: Bounds = Bounds {
        plain_bytes_max: limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX,
        batch_bytes_max: i32::MAX as usize,
        records_max: i32::MAX as usize,
    };
}

/// A batch's records section written anew record by record, compressed as
/// it goes (`codec::Packer`), checked against its `Bounds` after each
/// record: a hostile batch stops being written as soon as it passes one,
/// having cost about the bound, not the whole of what it would have grown
/// to.
struct RecordsWriter {
    packer: codec::Packer,
    bounds: Bounds,
    count: usize,
    /// One record's bytes, reused.
    scratch: Vec<u8>,
    length: Vec<u8>,
}

impl RecordsWriter {
    fn new(codec: u8, level: i32, bounds: Bounds) -> Result<Self, RebuildError> {
        Ok(Self {
            packer: codec::Packer::new(codec, level)
                .map_err(|e| RebuildError::Failed(RecordsError(e)))?,
            bounds,
            count: 0,
            scratch: Vec::new(),
            length: Vec::new(),
        })
    }

    /// Writes a record: `attributes`, its deltas, then `rest` (key, value
    /// and headers, as they were).
    fn push(
        &mut self,
        attributes: u8,
        timestamp_delta: i64,
        offset_delta: i64,
        rest: &[u8],
    ) -> Result<(), RebuildError> {
        let failed = |e: String| RebuildError::Failed(RecordsError(e));
        self.count += 1;
        if self.count > self.bounds.records_max {
            return Err(RebuildError::TooLarge(Bound::Records));
        }
        self.scratch.clear();
        self.scratch.push(attributes);
        put_varlong(&mut self.scratch, timestamp_delta);
        put_varlong(&mut self.scratch, offset_delta);
        self.scratch.extend_from_slice(rest);
        self.length.clear();
        put_varlong(&mut self.length, self.scratch.len() as i64);
        let plain = self.packer.plain_bytes() + self.length.len() + self.scratch.len();
        if plain > self.bounds.plain_bytes_max {
            return Err(RebuildError::TooLarge(Bound::Decompressed));
        }
        self.packer.write(&self.length).map_err(failed)?;
        self.packer.write(&self.scratch).map_err(failed)?;
        if BATCH_HEADER_BYTES + self.packer.packed_bytes() > self.bounds.batch_bytes_max {
            return Err(RebuildError::TooLarge(Bound::Stored));
        }
        Ok(())
    }

    /// The records written, and how many.
    fn finish(self) -> Result<(Bytes, usize), RebuildError> {
        let packed = self
            .packer
            .finish()
            .map_err(|e| RebuildError::Failed(RecordsError(e)))?;
        if BATCH_HEADER_BYTES + packed.len() > self.bounds.batch_bytes_max {
            return Err(RebuildError::TooLarge(Bound::Stored));
        }
        Ok((packed, self.count))
    }
}

/// The batch `header` heads, holding only `kept` (records of it, in order,
/// read one at a time as they are written), its base timestamp moved to
/// `delete_horizon_ms` when one is given (the records' timestamp deltas
/// moved with it so their timestamps stay), compressed as the batch was at
/// Kafka's default level for its codec, as Kafka's cleaner writes them.
/// An empty `kept` makes the empty batch Kafka keeps to remember a
/// producer's last sequence (`DefaultRecordBatch.writeEmptyHeader`).
/// Larger deltas can make the records longer than they were: past what the
/// broker's readers take (`Bounds::READABLE`) it is `TooLarge`.
pub fn rebuild<'a>(
    header: &BatchHeader,
    kept: impl IntoIterator<Item = Result<Record<'a>, RecordsError>>,
    delete_horizon_ms: Option<i64>,
) -> Result<Bytes, RebuildError> {
    let base_timestamp = delete_horizon_ms.unwrap_or(header.base_timestamp);
    let shift = header.base_timestamp.wrapping_sub(base_timestamp);
    let codec = header.compression_code();
    let mut out = RecordsWriter::new(codec, codec::default_level(codec), Bounds::READABLE)?;
    let mut max_timestamp = batch::NO_TIMESTAMP;
    for r in kept {
        let r = r?;
        let timestamp_delta = r.timestamp_delta.wrapping_add(shift);
        max_timestamp = max_timestamp.max(base_timestamp.wrapping_add(timestamp_delta));
        out.push(
            r.attributes,
            timestamp_delta,
            i64::from(r.offset_delta),
            r.after_offset_delta(),
        )?;
    }
    let (records, count) = out.finish()?;
    if header.has_log_append_time() || count == 0 {
        max_timestamp = header.max_timestamp;
    }
    let mut attributes = header.attributes;
    let mut first_timestamp = base_timestamp;
    if delete_horizon_ms.is_some() {
        attributes |= DELETE_HORIZON_BIT;
    } else if count == 0 && attributes & DELETE_HORIZON_BIT == 0 {
        // Kafka's empty header carries the max timestamp as its base.
        first_timestamp = header.max_timestamp;
    }
    let fields = Fields {
        attributes,
        last_offset_delta: header.last_offset_delta,
        first_timestamp,
        max_timestamp,
        count,
    };
    Ok(assemble(header, &fields, &records)?)
}

/// The batch `header` heads with all of its `records_count` records (read
/// one at a time from `records`, a stream of its records section, as they
/// are written: only the record being copied is held), written anew as
/// Kafka's LogValidator.buildRecordsAndAssignOffsets writes a produced
/// batch it cannot store in place (the topic's compression.type names
/// another codec, or the records' inner offsets are not 0, 1, 2, …):
/// compressed with `codec` at `level`; offset deltas 0, 1, 2, …; the base
/// timestamp the first record's, as MemoryRecordsBuilder sets it, and
/// every record's own timestamp unchanged (the batch's max timestamp, in a
/// batch marked LogAppendTime); record attributes 0, as
/// DefaultRecord.writeTo writes them. The producer id, epoch, base
/// sequence, transactional bit and timestamp type stay. The writing stops
/// as soon as it passes `bounds` (`TooLarge`): Kafka checks the rebuilt
/// batch's size once it is whole (UnifiedLog.append,
/// messageSizeMaybeChanged), after holding every record.
pub fn recompressed<R: BufRead>(
    header: &BatchHeader,
    records: &mut record::Reader<R>,
    codec: u8,
    level: i32,
    bounds: Bounds,
) -> Result<Bytes, RebuildError> {
    // A batch marked LogAppendTime gives every record its max timestamp,
    // as Kafka's record iterator reads it.
    let timestamp = |r: &Record<'_>| match header.has_log_append_time() {
        true => header.max_timestamp,
        false => header.base_timestamp.wrapping_add(r.timestamp_delta),
    };
    let mut out = RecordsWriter::new(codec, level, bounds)?;
    let mut base_timestamp = None;
    let mut max_timestamp = batch::NO_TIMESTAMP;
    let count = usize::try_from(header.records_count).unwrap_or(0);
    for offset_delta in 0..count {
        let r = records.next_record().map_err(|e| {
            RebuildError::Failed(RecordsError(format!(
                "record {offset_delta} does not read: {e:?}"
            )))
        })?;
        let at = timestamp(&r);
        let base = *base_timestamp.get_or_insert(at);
        max_timestamp = max_timestamp.max(at);
        out.push(
            0,
            at.wrapping_sub(base),
            offset_delta as i64,
            r.after_offset_delta(),
        )?;
    }
    let (packed, count) = out.finish()?;
    if header.has_log_append_time() || count == 0 {
        max_timestamp = header.max_timestamp;
    }
    let fields = Fields {
        attributes: (header.attributes & !batch::COMPRESSION_MASK & !DELETE_HORIZON_BIT)
            | i16::from(codec),
        last_offset_delta: i32::try_from(count).unwrap_or(i32::MAX) - 1,
        first_timestamp: base_timestamp.unwrap_or(header.base_timestamp),
        max_timestamp,
        count,
    };
    Ok(assemble(header, &fields, &packed)?)
}

/// The header fields a rebuilt batch does not take from the old one.
struct Fields {
    attributes: i16,
    last_offset_delta: i32,
    first_timestamp: i64,
    max_timestamp: i64,
    count: usize,
}

/// A v2 batch: `header`'s base offset, leader epoch and producer fields,
/// `fields`, and `records` (already compressed), its CRC computed.
fn assemble(header: &BatchHeader, fields: &Fields, records: &[u8]) -> Result<Bytes, RecordsError> {
    let too_large = || RecordsError("batch too large".into());
    let batch_length = BATCH_HEADER_BYTES - BATCH_LOG_OVERHEAD_BYTES + records.len();
    let batch_length = i32::try_from(batch_length).map_err(|_| too_large())?;
    let count = i32::try_from(fields.count).map_err(|_| too_large())?;
    let mut out = BytesMut::with_capacity(BATCH_HEADER_BYTES + records.len());
    out.put_i64(header.base_offset);
    out.put_i32(batch_length);
    out.put_i32(header.partition_leader_epoch);
    out.put_i8(batch::MAGIC_V2);
    out.put_u32(0); // the CRC, set below
    out.put_i16(fields.attributes);
    out.put_i32(fields.last_offset_delta);
    out.put_i64(fields.first_timestamp);
    out.put_i64(fields.max_timestamp);
    out.put_i64(header.producer_id);
    out.put_i16(header.producer_epoch);
    out.put_i32(header.base_sequence);
    out.put_i32(count);
    out.extend_from_slice(records);
    batch::write_crc(&mut out);
    Ok(out.freeze())
}

/// An empty batch standing for `header`'s offsets and nothing else: no
/// producer, not transactional, not control, not compressed. The cleaner
/// keeps one where a segment or a pass must end on an offset, when the
/// batch there is not its producer's last: a transactional empty batch
/// whose marker later went would look, to the start-up scan, like a
/// transaction left open.
pub fn placeholder(header: &BatchHeader) -> Result<Bytes, RecordsError> {
    const TIMESTAMP_TYPE_BIT: i16 = 0x08;
    let plain = BatchHeader {
        attributes: header.attributes & (TIMESTAMP_TYPE_BIT | DELETE_HORIZON_BIT),
        producer_id: batch::NO_PRODUCER_ID,
        producer_epoch: -1,
        base_sequence: -1,
        ..header.clone()
    };
    Ok(rebuild(&plain, std::iter::empty(), None)?)
}

/// The batch's delete horizon, when its base timestamp is one.
pub fn delete_horizon_ms(header: &BatchHeader) -> Option<i64> {
    (header.attributes & DELETE_HORIZON_BIT != 0).then_some(header.base_timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::TestBatch;

    fn all<'a>(bytes: &'a [u8], count: i32) -> Vec<Record<'a>> {
        records(bytes, count).map(Result::unwrap).collect()
    }

    #[test]
    fn records_round_trip_and_rebuild_keeps_the_header() {
        let batch = TestBatch::records(3).encode();
        let header = batch::check_batch(&batch).unwrap();
        let bytes = records_bytes(&batch, &header).unwrap();
        let rs = all(&bytes, header.records_count);
        assert_eq!(rs.len(), 3);
        // All kept, same base: the same bytes.
        let same = rebuild(&header, records(&bytes, 3), None).unwrap();
        assert_eq!(same, batch);
        // One kept, a horizon: CRC valid, last offset and count right, the
        // record's timestamp unchanged.
        let second = records(&bytes, 3).skip(1).take(1);
        let one = rebuild(&header, second, Some(header.base_timestamp + 1000)).unwrap();
        let h = batch::check_batch(&one).unwrap();
        assert_eq!(h.last_offset(), header.last_offset());
        assert_eq!(h.records_count, 1);
        assert_eq!(delete_horizon_ms(&h), Some(header.base_timestamp + 1000));
        let kept = records_bytes(&one, &h).unwrap();
        let kept = all(&kept, 1);
        assert_eq!(kept[0].offset_delta, rs[1].offset_delta);
        assert_eq!(
            h.base_timestamp + kept[0].timestamp_delta,
            header.base_timestamp + rs[1].timestamp_delta
        );
        // None kept: an empty batch with the same offsets and producer.
        let empty = rebuild(&header, std::iter::empty(), None).unwrap();
        let e = batch::check_stored_batch(&empty).unwrap();
        assert_eq!(
            (e.base_offset, e.last_offset()),
            (header.base_offset, header.last_offset())
        );
        assert_eq!(e.records_count, 0);
        assert_eq!(e.producer_id, header.producer_id);
    }

    #[test]
    fn the_iterator_stops_at_the_first_record_that_does_not_read() {
        let batch = TestBatch::records(3).encode();
        let header = batch::check_batch(&batch).unwrap();
        let bytes = records_bytes(&batch, &header).unwrap();
        // Claims a fourth record that is not there.
        let read: Vec<bool> = records(&bytes, 4).map(|r| r.is_ok()).collect();
        assert_eq!(read, [true, true, true, false]);
        // Cut inside the second: one record, an error, then nothing.
        let first_len = usize::from(bytes[0] >> 1) + 1;
        let read: Vec<bool> = records(&bytes[..first_len + 3], 3)
            .map(|r| r.is_ok())
            .collect();
        assert_eq!(read, [true, false]);
    }

    /// A rebuild stops as soon as what it wrote passes a bound, and says
    /// which; within them it writes every record.
    #[test]
    fn a_rebuild_stops_at_its_bounds() {
        let batch = TestBatch::records(1000).encode();
        let header = batch::check_batch(&batch).unwrap();
        let bytes = records_bytes(&batch, &header).unwrap();
        let all_fit = Bounds {
            plain_bytes_max: bytes.len(),
            batch_bytes_max: batch.len(),
            records_max: 1000,
        };
        let stream = record::Reader::new;
        let same = recompressed(&header, &mut stream(&bytes[..]), 0, -1, all_fit).unwrap();
        assert_eq!(batch::check_batch(&same).unwrap().records_count, 1000);
        let too_large = |bounds: Bounds| {
            recompressed(&header, &mut stream(&bytes[..]), 0, -1, bounds).unwrap_err()
        };
        let plain = Bounds {
            plain_bytes_max: bytes.len() - 1,
            ..all_fit
        };
        assert_eq!(
            too_large(plain),
            RebuildError::TooLarge(Bound::Decompressed)
        );
        let stored = Bounds {
            batch_bytes_max: batch.len() - 1,
            ..all_fit
        };
        assert_eq!(too_large(stored), RebuildError::TooLarge(Bound::Stored));
        let count = Bounds {
            records_max: 999,
            ..all_fit
        };
        assert_eq!(too_large(count), RebuildError::TooLarge(Bound::Records));
        // It stops reading at the bound: the records past it are never
        // looked at, so a broken one there is not found.
        let mut cut = bytes.to_vec();
        cut.truncate(cut.len() - 1);
        let early = Bounds {
            batch_bytes_max: 1000,
            ..all_fit
        };
        assert_eq!(
            recompressed(&header, &mut stream(&cut[..]), 0, -1, early),
            Err(RebuildError::TooLarge(Bound::Stored))
        );
    }
}
