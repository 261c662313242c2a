//! The records inside a batch, for the cleaner and for Produce (its checks
//! of every record, `api::produce::check_records`, and the batches it
//! stores with the topic's compression.type: `recompressed`); the rest of
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

/// Reads `count` records from decompressed records bytes
/// (`crate::record`); bytes after the last are not looked at.
pub fn parse_records(bytes: &[u8], count: i32) -> Result<Vec<Record<'_>>, RecordsError> {
    let mut records = Vec::with_capacity(count.clamp(0, 4096) as usize);
    let mut at = 0;
    for index in 0..count.max(0) {
        let record = record::next(bytes, &mut at)
            .map_err(|_| RecordsError(format!("record {index} runs past its batch")))
            .and_then(|body| {
                record::read(body)
                    .map_err(|e| RecordsError(format!("record {index} does not read: {e:?}")))
            })?;
        records.push(record);
    }
    Ok(records)
}

fn put_varlong(buf: &mut BytesMut, value: i64) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        buf.put_u8((raw as u8 & 0x7f) | 0x80);
        raw >>= 7;
    }
    buf.put_u8(raw as u8);
}

/// The batch `header` heads, holding only `kept` (records of it, in order),
/// its base timestamp moved to `delete_horizon_ms` when one is given (the
/// records' timestamp deltas moved with it so their timestamps stay).
/// An empty `kept` makes the empty batch Kafka keeps to remember a
/// producer's last sequence (`DefaultRecordBatch.writeEmptyHeader`).
pub fn rebuild(
    header: &BatchHeader,
    kept: &[Record<'_>],
    delete_horizon_ms: Option<i64>,
) -> Result<Bytes, RecordsError> {
    let base_timestamp = delete_horizon_ms.unwrap_or(header.base_timestamp);
    let shift = header.base_timestamp.wrapping_sub(base_timestamp);
    let mut records = BytesMut::new();
    let mut max_timestamp = batch::NO_TIMESTAMP;
    for r in kept {
        let timestamp_delta = r.timestamp_delta.wrapping_add(shift);
        max_timestamp = max_timestamp.max(base_timestamp.wrapping_add(timestamp_delta));
        let mut body = BytesMut::with_capacity(r.after_offset_delta().len() + 16);
        body.put_u8(r.attributes);
        put_varlong(&mut body, timestamp_delta);
        put_varlong(&mut body, i64::from(r.offset_delta));
        body.extend_from_slice(r.after_offset_delta());
        put_varlong(&mut records, body.len() as i64);
        records.extend_from_slice(&body);
    }
    if header.has_log_append_time() || kept.is_empty() {
        max_timestamp = header.max_timestamp;
    }
    let records = compress(header.compression_code(), records.freeze())?;
    let mut attributes = header.attributes;
    let mut first_timestamp = base_timestamp;
    if delete_horizon_ms.is_some() {
        attributes |= DELETE_HORIZON_BIT;
    } else if kept.is_empty() && attributes & DELETE_HORIZON_BIT == 0 {
        // Kafka's empty header carries the max timestamp as its base.
        first_timestamp = header.max_timestamp;
    }
    let fields = Fields {
        attributes,
        last_offset_delta: header.last_offset_delta,
        first_timestamp,
        max_timestamp,
        count: kept.len(),
    };
    assemble(header, &fields, &records)
}

/// The batch `header` heads with all of its `records`, written anew as
/// Kafka's LogValidator.buildRecordsAndAssignOffsets writes a produced
/// batch it cannot store in place (the topic's compression.type names
/// another codec, or the records' inner offsets are not 0, 1, 2, …):
/// compressed with `codec` at `level`; offset deltas 0, 1, 2, …; the base
/// timestamp the first record's, as MemoryRecordsBuilder sets it, and every
/// record's own timestamp unchanged (the batch's max timestamp, in a batch
/// marked LogAppendTime); record attributes 0, as
/// DefaultRecord.writeTo writes them. The producer id, epoch, base
/// sequence, transactional bit and timestamp type stay.
pub fn recompressed(
    header: &BatchHeader,
    records: &[Record<'_>],
    codec: u8,
    level: i32,
) -> Result<Bytes, RecordsError> {
    // A batch marked LogAppendTime gives every record its max timestamp,
    // as Kafka's record iterator reads it.
    let timestamp = |r: &Record<'_>| match header.has_log_append_time() {
        true => header.max_timestamp,
        false => header.base_timestamp.wrapping_add(r.timestamp_delta),
    };
    let base_timestamp = records.first().map_or(header.base_timestamp, timestamp);
    let mut plain = BytesMut::new();
    let mut max_timestamp = batch::NO_TIMESTAMP;
    for (offset_delta, r) in records.iter().enumerate() {
        max_timestamp = max_timestamp.max(timestamp(r));
        let mut body = BytesMut::with_capacity(r.after_offset_delta().len() + 16);
        body.put_u8(0);
        put_varlong(&mut body, timestamp(r).wrapping_sub(base_timestamp));
        put_varlong(&mut body, offset_delta as i64);
        body.extend_from_slice(r.after_offset_delta());
        put_varlong(&mut plain, body.len() as i64);
        plain.extend_from_slice(&body);
    }
    if header.has_log_append_time() || records.is_empty() {
        max_timestamp = header.max_timestamp;
    }
    let packed = codec::compress(codec, level, &plain).map_err(RecordsError)?;
    let fields = Fields {
        attributes: (header.attributes & !batch::COMPRESSION_MASK & !DELETE_HORIZON_BIT)
            | i16::from(codec),
        last_offset_delta: i32::try_from(records.len()).unwrap_or(i32::MAX) - 1,
        first_timestamp: base_timestamp,
        max_timestamp,
        count: records.len(),
    };
    assemble(header, &fields, &packed)
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
    rebuild(&plain, &[], None)
}

/// The kept records compressed as the batch was, at Kafka's default level
/// for its codec, as Kafka's cleaner writes them.
fn compress(codec: u8, records: Bytes) -> Result<Bytes, RecordsError> {
    codec::compress(codec, codec::default_level(codec), &records).map_err(RecordsError)
}

/// The batch's delete horizon, when its base timestamp is one.
pub fn delete_horizon_ms(header: &BatchHeader) -> Option<i64> {
    (header.attributes & DELETE_HORIZON_BIT != 0).then_some(header.base_timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::TestBatch;

    #[test]
    fn records_round_trip_and_rebuild_keeps_the_header() {
        let batch = TestBatch::records(3).encode();
        let header = batch::check_batch(&batch).unwrap();
        let bytes = records_bytes(&batch, &header).unwrap();
        let records = parse_records(&bytes, header.records_count).unwrap();
        assert_eq!(records.len(), 3);
        // All kept, same base: the same bytes.
        let same = rebuild(&header, &records, None).unwrap();
        assert_eq!(same, batch);
        // One kept, a horizon: CRC valid, last offset and count right, the
        // record's timestamp unchanged.
        let one = rebuild(&header, &records[1..2], Some(header.base_timestamp + 1000)).unwrap();
        let h = batch::check_batch(&one).unwrap();
        assert_eq!(h.last_offset(), header.last_offset());
        assert_eq!(h.records_count, 1);
        assert_eq!(delete_horizon_ms(&h), Some(header.base_timestamp + 1000));
        let kept = records_bytes(&one, &h).unwrap();
        let kept = parse_records(&kept, 1).unwrap();
        assert_eq!(kept[0].offset_delta, records[1].offset_delta);
        assert_eq!(
            h.base_timestamp + kept[0].timestamp_delta,
            header.base_timestamp + records[1].timestamp_delta
        );
        // None kept: an empty batch with the same offsets and producer.
        let empty = rebuild(&header, &[], None).unwrap();
        let e = batch::check_stored_batch(&empty).unwrap();
        assert_eq!(
            (e.base_offset, e.last_offset()),
            (header.base_offset, header.last_offset())
        );
        assert_eq!(e.records_count, 0);
        assert_eq!(e.producer_id, header.producer_id);
    }
}
