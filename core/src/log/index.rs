//! The sparse indexes of one segment, in memory and in Kafka's file formats
//! (storage/.../log/OffsetIndex.java, TimeIndex.java, TransactionIndex.java).
//!
//! - Offset index: one entry per `index.interval.bytes` (4 KiB) of a segment:
//!   the last offset of a batch, relative to the segment base, and the batch's
//!   position. A lookup gives a batch at or before the one holding an offset;
//!   the rest is found by reading batch headers from there.
//! - Time index: at the same moments, the largest timestamp so far in the
//!   segment and the relative last offset of the batch that reached it, only
//!   when it grew; and once more when the segment is rolled.
//! - Transaction index: one entry per aborted transaction whose marker lies
//!   in the segment.
//!
//! The files are caches of the batch headers: recovery checks them and
//! rebuilds them from the headers when they are absent or inconsistent.

use bytes::{BufMut, Bytes, BytesMut};

pub const OFFSET_ENTRY_BYTES: usize = 8;
pub const TIME_ENTRY_BYTES: usize = 12;
pub const TXN_ENTRY_BYTES: usize = 34;
const TXN_ENTRY_VERSION: i16 = 0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetEntry {
    /// A batch's last offset, relative to the segment base.
    pub relative_offset: u32,
    /// The batch's position in the `.log`.
    pub position: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeEntry {
    /// The largest timestamp of the segment up to this entry.
    pub timestamp_ms: i64,
    /// The last offset (relative) of the batch holding it.
    pub relative_offset: u32,
}

/// An aborted transaction, as Kafka's AbortedTxn: its first data offset in the
/// partition and its marker's offset (`last_offset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    /// The last stable offset when the abort was written (Kafka's field; kept
    /// for the file format, not used to answer).
    pub last_stable_offset: i64,
}

impl OffsetEntry {
    pub fn encode(&self, buf: &mut BytesMut) {
        buf.put_u32(self.relative_offset);
        buf.put_u32(self.position);
    }
}

impl TimeEntry {
    pub fn encode(&self, buf: &mut BytesMut) {
        buf.put_i64(self.timestamp_ms);
        buf.put_u32(self.relative_offset);
    }
}

impl AbortedTxn {
    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::with_capacity(TXN_ENTRY_BYTES);
        buf.put_i16(TXN_ENTRY_VERSION);
        buf.put_i64(self.producer_id);
        buf.put_i64(self.first_offset);
        buf.put_i64(self.last_offset);
        buf.put_i64(self.last_stable_offset);
        assert_eq!(buf.len(), TXN_ENTRY_BYTES, "txnindex entry layout");
        buf.freeze()
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("four bytes"))
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("eight bytes"))
}

/// Decodes a `.index` file; `None` when it is not a whole number of entries or
/// its entries do not both increase (an index a crash tore, or not ours).
pub fn decode_offset_index(bytes: &[u8]) -> Option<Vec<OffsetEntry>> {
    if !bytes.len().is_multiple_of(OFFSET_ENTRY_BYTES) {
        return None;
    }
    let entries: Vec<OffsetEntry> = bytes
        .chunks_exact(OFFSET_ENTRY_BYTES)
        .map(|c| OffsetEntry {
            relative_offset: u32_at(c, 0),
            position: u32_at(c, 4),
        })
        .collect();
    let increasing = entries
        .windows(2)
        .all(|w| w[0].relative_offset < w[1].relative_offset && w[0].position < w[1].position);
    increasing.then_some(entries)
}

/// Decodes a `.timeindex` file; `None` when torn or not increasing.
pub fn decode_time_index(bytes: &[u8]) -> Option<Vec<TimeEntry>> {
    if !bytes.len().is_multiple_of(TIME_ENTRY_BYTES) {
        return None;
    }
    let entries: Vec<TimeEntry> = bytes
        .chunks_exact(TIME_ENTRY_BYTES)
        .map(|c| TimeEntry {
            timestamp_ms: i64_at(c, 0),
            relative_offset: u32_at(c, 8),
        })
        .collect();
    let increasing = entries.windows(2).all(|w| {
        w[0].timestamp_ms < w[1].timestamp_ms && w[0].relative_offset <= w[1].relative_offset
    });
    increasing.then_some(entries)
}

/// Decodes a `.txnindex` file; `None` when torn, of an unknown version, or
/// not in marker order.
pub fn decode_txn_index(bytes: &[u8]) -> Option<Vec<AbortedTxn>> {
    if !bytes.len().is_multiple_of(TXN_ENTRY_BYTES) {
        return None;
    }
    let mut entries = Vec::with_capacity(bytes.len() / TXN_ENTRY_BYTES);
    for c in bytes.chunks_exact(TXN_ENTRY_BYTES) {
        if i16::from_be_bytes([c[0], c[1]]) != TXN_ENTRY_VERSION {
            return None;
        }
        let entry = AbortedTxn {
            producer_id: i64_at(c, 2),
            first_offset: i64_at(c, 10),
            last_offset: i64_at(c, 18),
            last_stable_offset: i64_at(c, 26),
        };
        if entry.first_offset > entry.last_offset {
            return None;
        }
        entries.push(entry);
    }
    let ordered = entries
        .windows(2)
        .all(|w| w[0].last_offset < w[1].last_offset);
    ordered.then_some(entries)
}

/// The position to start reading at to find the batch holding `relative`:
/// the entry with the largest offset at or below it, else the segment start.
pub fn lookup_position(index: &[OffsetEntry], relative: u32) -> u32 {
    let after = index.partition_point(|e| e.relative_offset <= relative);
    after.checked_sub(1).map_or(0, |i| index[i].position)
}

/// The relative offset to start searching from for the first timestamp at or
/// after `timestamp_ms`: the last entry strictly below it (every batch up to
/// it has smaller timestamps), else the segment start (`None`).
pub fn lookup_time(index: &[TimeEntry], timestamp_ms: i64) -> Option<u32> {
    let after = index.partition_point(|e| e.timestamp_ms < timestamp_ms);
    after.checked_sub(1).map(|i| index[i].relative_offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_round_trips_and_finds_positions() {
        let entries = vec![
            OffsetEntry {
                relative_offset: 9,
                position: 4100,
            },
            OffsetEntry {
                relative_offset: 20,
                position: 8300,
            },
        ];
        let mut buf = BytesMut::new();
        entries.iter().for_each(|e| e.encode(&mut buf));
        assert_eq!(decode_offset_index(&buf), Some(entries.clone()));
        assert_eq!(lookup_position(&entries, 3), 0);
        assert_eq!(lookup_position(&entries, 9), 4100);
        assert_eq!(lookup_position(&entries, 19), 4100);
        assert_eq!(lookup_position(&entries, 500), 8300);
        assert_eq!(decode_offset_index(&buf[..7]), None);
        let mut backwards = BytesMut::new();
        entries.iter().rev().for_each(|e| e.encode(&mut backwards));
        assert_eq!(decode_offset_index(&backwards), None);
    }

    #[test]
    fn time_index_finds_the_last_entry_below() {
        let entries = vec![
            TimeEntry {
                timestamp_ms: 100,
                relative_offset: 4,
            },
            TimeEntry {
                timestamp_ms: 200,
                relative_offset: 8,
            },
        ];
        let mut buf = BytesMut::new();
        entries.iter().for_each(|e| e.encode(&mut buf));
        assert_eq!(decode_time_index(&buf), Some(entries.clone()));
        assert_eq!(lookup_time(&entries, 100), None);
        assert_eq!(lookup_time(&entries, 101), Some(4));
        assert_eq!(lookup_time(&entries, 1_000), Some(8));
    }

    #[test]
    fn txn_index_round_trips() {
        let a = AbortedTxn {
            producer_id: 7,
            first_offset: 3,
            last_offset: 9,
            last_stable_offset: 3,
        };
        let b = AbortedTxn {
            last_offset: 12,
            ..a
        };
        let mut buf = a.encode().to_vec();
        buf.extend_from_slice(&b.encode());
        assert_eq!(decode_txn_index(&buf), Some(vec![a, b]));
        assert_eq!(decode_txn_index(&buf[..33]), None);
        buf[0] = 1;
        assert_eq!(decode_txn_index(&buf), None);
    }
}
