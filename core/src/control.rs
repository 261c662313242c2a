//! Control records: the transaction marker, the control batch that ends a
//! transaction in a partition. Kafka's layout (EndTransactionMarker.java): one record whose key
//! is (version i16 = 0, type i16: 0 abort, 1 commit) and whose value is
//! (version i16 = 0, coordinator epoch i32), in a batch with the
//! transactional and control attribute bits, the producer's id and epoch,
//! and no sequence. kafka-protocol does not model control records, so the
//! few bytes are written here by hand.
//!
//! A record format, so it lives beside `batch` and below the log: the log's
//! recovery and the producer state read markers back, and the transaction
//! coordinator (`txn`) above them writes them.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{self, BatchHeader, BATCH_HEADER_BYTES};

const ATTRIBUTES_TRANSACTIONAL_CONTROL: i16 = 0x10 | 0x20;
const CONTROL_TYPE_ABORT: i16 = 0;
const CONTROL_TYPE_COMMIT: i16 = 1;
/// Bytes of the one record's body (after its length varint), see `build`.
const RECORD_BODY_BYTES: u8 = 16;

fn put_zigzag_varint(buf: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        if z < 0x80 {
            buf.put_u8(z as u8);
            return;
        }
        buf.put_u8((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
}

/// The coordinator epoch markers carry: one node, so the transaction
/// coordinator never moves and keeps Kafka's first epoch, 0.
pub const COORDINATOR_EPOCH: i32 = 0;

/// Builds a marker batch (base offset 0; the log assigns the real one).
pub fn build(
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    now_ms: i64,
) -> Bytes {
    let mut record = BytesMut::with_capacity(1 + RECORD_BODY_BYTES as usize);
    put_zigzag_varint(&mut record, RECORD_BODY_BYTES as i64);
    record.put_i8(0); // record attributes
    put_zigzag_varint(&mut record, 0); // timestamp delta
    put_zigzag_varint(&mut record, 0); // offset delta
    put_zigzag_varint(&mut record, 4); // key length
    record.put_i16(0); // key version
    record.put_i16(if commit {
        CONTROL_TYPE_COMMIT
    } else {
        CONTROL_TYPE_ABORT
    });
    put_zigzag_varint(&mut record, 6); // value length
    record.put_i16(0); // value version
    record.put_i32(coordinator_epoch);
    put_zigzag_varint(&mut record, 0); // header count
    assert_eq!(
        record.len(),
        1 + RECORD_BODY_BYTES as usize,
        "marker record layout"
    );

    let total = BATCH_HEADER_BYTES + record.len();
    let mut buf = BytesMut::with_capacity(total);
    buf.put_i64(0); // base offset
    buf.put_i32((total - 12) as i32); // batch length
    buf.put_i32(-1); // partition leader epoch
    buf.put_i8(2); // magic
    buf.put_u32(0); // crc, filled below
    buf.put_i16(ATTRIBUTES_TRANSACTIONAL_CONTROL);
    buf.put_i32(0); // last offset delta
    buf.put_i64(now_ms); // base timestamp
    buf.put_i64(now_ms); // max timestamp
    buf.put_i64(producer_id);
    buf.put_i16(producer_epoch);
    buf.put_i32(-1); // base sequence
    buf.put_i32(1); // records count
    buf.extend_from_slice(&record);
    batch::write_crc(&mut buf);
    buf.freeze()
}

/// What a marker says: commit or abort, and the coordinator epoch it was
/// written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndMarker {
    pub commit: bool,
    /// -1 when the record's value is missing or short (Kafka's markers
    /// always carry it).
    pub coordinator_epoch: i32,
}

/// Whether a control batch is a commit marker (`Some(true)`), an abort marker
/// (`Some(false)`), or not a readable marker (`None`).
pub fn is_commit(header: &BatchHeader, bytes: &[u8]) -> Option<bool> {
    read(header, bytes).map(|m| m.commit)
}

/// The marker a control batch holds, or `None` when it is not a readable
/// marker.
pub fn read(header: &BatchHeader, bytes: &[u8]) -> Option<EndMarker> {
    if !header.is_control() || header.records_count < 1 {
        return None;
    }
    // Record: length varint, attributes, timestamp delta (varlong), offset
    // delta, key length (varints), key, value length, value. Read as
    // varints: a marker the cleaner gave a delete horizon has a negative,
    // multi-byte timestamp delta.
    let mut at = BATCH_HEADER_BYTES;
    crate::batch::read_varint(bytes, &mut at)?;
    at += 1;
    crate::batch::read_varlong(bytes, &mut at)?;
    crate::batch::read_varint(bytes, &mut at)?;
    let key_len = crate::batch::read_varint(bytes, &mut at)?;
    if key_len < 4 {
        return None;
    }
    let key = bytes.get(at..at + 4)?;
    let commit = match i16::from_be_bytes([key[2], key[3]]) {
        CONTROL_TYPE_COMMIT => true,
        CONTROL_TYPE_ABORT => false,
        _ => return None,
    };
    at += key_len as usize;
    let coordinator_epoch = crate::batch::read_varint(bytes, &mut at)
        .filter(|len| *len >= 6)
        .and_then(|_| bytes.get(at + 2..at + 6))
        .map_or(-1, |e| i32::from_be_bytes([e[0], e[1], e[2], e[3]]));
    Some(EndMarker {
        commit,
        coordinator_epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch;

    #[test]
    fn marker_is_a_valid_control_batch() {
        for commit in [true, false] {
            let b = build(42, 7, commit, 0, 1_000);
            let h = batch::check_batch(&b).expect("valid batch");
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.records_count),
                (42, 7, 1)
            );
            assert_eq!(is_commit(&h, &b), Some(commit));
        }
    }

    #[test]
    fn the_coordinator_epoch_reads_back() {
        for epoch in [-1, 0, 7, i32::MAX] {
            let b = build(42, 7, false, epoch, 1_000);
            let h = batch::check_batch(&b).unwrap();
            let m = read(&h, &b).expect("a marker");
            assert_eq!((m.commit, m.coordinator_epoch), (false, epoch));
        }
    }

    #[test]
    fn kafka_protocol_decodes_the_marker_record() {
        let mut b = build(1, 0, true, 0, 5);
        let sets =
            kafka_protocol::records::RecordBatchDecoder::decode_all(&mut b).expect("decodes");
        let r = &sets[0].records[0];
        assert!(r.control && r.transactional);
        assert_eq!(r.key.as_deref(), Some(&[0u8, 0, 0, 1][..]));
    }
}
