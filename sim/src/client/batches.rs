//! Record batches as a consumer sees them, and read_committed filtering as
//! Kafka's consumer does it (clients/.../internals/CompletedFetch.java:
//! `nextFetchedRecord`, `consumeAbortedTransactionsUpTo`): the fetch answer
//! names the aborted transactions (producer id, first offset) touching what
//! it returned; a transactional batch is dropped when its producer has an
//! aborted transaction starting at or before the batch's last offset, until
//! that producer's abort marker; control batches are never handed out.
//!
//! Also the encoder the transactional clients use: one batch of
//! self-describing values (`values.rs`), the same bytes on every resend.

use std::collections::BTreeSet;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// One decoded batch, with what the oracle needs of its header.
#[derive(Clone, Debug)]
pub struct BatchView {
    pub base_offset: i64,
    pub last_offset: i64,
    pub producer_id: i64,
    pub epoch: i16,
    pub transactional: bool,
    /// A control batch: Some(true) a commit marker, Some(false) an abort.
    pub control: Option<bool>,
    pub records: Vec<(i64, Bytes)>,
}

/// Batch header bytes up to and including the length field: base offset
/// (i64) and batch length (i32, the bytes after it).
const LOG_OVERHEAD_BYTES: usize = 12;

/// The whole batches at the front of a fetch answer's records. The broker
/// sends a file range cut at max_bytes, as Kafka does, so the last batch may
/// be partial; a consumer drops it without complaint (Kafka's
/// ByteBufferLogInputStream stops at a batch that does not fit) and fetches
/// it whole next time. A negative length is no cut: it is an error.
pub fn whole_batches(records: &Bytes) -> Result<Bytes, String> {
    let mut end = 0usize;
    while let Some(header) = records.get(end..end + LOG_OVERHEAD_BYTES) {
        let len = i32::from_be_bytes([header[8], header[9], header[10], header[11]]);
        let len = usize::try_from(len)
            .map_err(|_| format!("batch length {len} at byte {end} of the records"))?;
        let next = end + LOG_OVERHEAD_BYTES + len;
        if next > records.len() {
            break;
        }
        end = next;
    }
    Ok(records.slice(..end))
}

/// Decodes every whole batch of a fetch answer's records (a partial last
/// one is dropped: `whole_batches`). The batches may start below the fetch
/// offset; the caller skips the records it already has.
pub fn decode(records: Bytes) -> Result<Vec<BatchView>, String> {
    let mut rest = whole_batches(&records)?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let header = doze_core::batch::parse_header(&rest).map_err(|e| e.to_string())?;
        let mut one = rest.split_to(header.total_bytes());
        if header.records_count == 0 {
            // An empty batch the cleaner kept (for its offsets, or for its
            // producer's last sequence): it hands out nothing, and the
            // position moves past it, as a Java consumer's does.
            out.push(BatchView {
                base_offset: header.base_offset,
                last_offset: header.last_offset(),
                producer_id: header.producer_id,
                epoch: header.producer_epoch,
                transactional: false,
                control: None,
                records: Vec::new(),
            });
            continue;
        }
        let sets = RecordBatchDecoder::decode_all(&mut one).map_err(|e| e.to_string())?;
        decode_sets(sets, &mut out)?;
    }
    Ok(out)
}

fn decode_sets(
    sets: Vec<kafka_protocol::records::RecordSet>,
    out: &mut Vec<BatchView>,
) -> Result<(), String> {
    for set in sets {
        let (Some(first), Some(last)) = (set.records.first(), set.records.last()) else {
            continue;
        };
        let control = if first.control {
            Some(marker_is_commit(first).ok_or("a control record without a valid key")?)
        } else {
            None
        };
        out.push(BatchView {
            base_offset: first.offset,
            last_offset: last.offset,
            producer_id: first.producer_id,
            epoch: first.producer_epoch,
            transactional: first.transactional,
            control,
            records: set
                .records
                .iter()
                .map(|r| (r.offset, r.value.clone().unwrap_or_default()))
                .collect(),
        });
    }
    Ok(())
}

/// A control record's key is (version i16, type i16): 0 abort, 1 commit.
fn marker_is_commit(record: &Record) -> Option<bool> {
    let key = record.key.as_ref()?;
    if key.len() < 4 {
        return None;
    }
    match i16::from_be_bytes([key[2], key[3]]) {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// The read_committed filter of one partition's fetch answer.
pub struct AbortedFilter {
    /// (first offset, producer id), smallest first offset first.
    pending: Vec<(i64, i64)>,
    aborted_producers: BTreeSet<i64>,
}

impl AbortedFilter {
    pub fn new(mut aborted: Vec<(i64, i64)>) -> Self {
        aborted.sort();
        aborted.reverse(); // popped from the end: smallest first
        Self {
            pending: aborted,
            aborted_producers: BTreeSet::new(),
        }
    }

    /// Whether a read_committed consumer hands out the batch's records.
    pub fn visible(&mut self, batch: &BatchView) -> bool {
        if batch.producer_id >= 0 {
            while self
                .pending
                .last()
                .is_some_and(|&(first, _)| first <= batch.last_offset)
            {
                let (_, pid) = self.pending.pop().expect("checked");
                self.aborted_producers.insert(pid);
            }
            if batch.control == Some(false) {
                self.aborted_producers.remove(&batch.producer_id);
            } else if batch.transactional && self.aborted_producers.contains(&batch.producer_id) {
                return false;
            }
        }
        batch.control.is_none()
    }
}

/// A transactional (or idempotent) batch of `values`; `keyed`: each record
/// carries its key (`values::key`), as on a compacted topic.
pub fn encode(
    values: &[Bytes],
    producer_id: i64,
    epoch: i16,
    base_seq: i32,
    transactional: bool,
    created_ms: i64,
    keyed: bool,
) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, value)| Record {
            transactional,
            control: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: base_seq.wrapping_add(i as i32),
            timestamp: created_ms,
            key: keyed
                .then(|| super::values::decode(value).map(super::values::key))
                .flatten(),
            value: Some(value.clone()),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("a batch encodes");
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base: i64, pid: i64, control: Option<bool>) -> BatchView {
        BatchView {
            base_offset: base,
            last_offset: base,
            producer_id: pid,
            epoch: 0,
            transactional: true,
            control,
            records: vec![(base, Bytes::new())],
        }
    }

    #[test]
    fn a_partial_last_batch_is_dropped_silently() {
        let one = encode(&[Bytes::from_static(b"a")], 1, 0, 0, false, 0, false);
        let two = encode(&[Bytes::from_static(b"bb")], 1, 0, 1, false, 0, false);
        let mut both = BytesMut::from(&one[..]);
        both.extend_from_slice(&two);
        let both = both.freeze();
        for cut in 0..=both.len() {
            let decoded = decode(both.slice(..cut)).expect("a cut answer decodes");
            let expected = match cut {
                c if c == both.len() => 2,
                c if c >= one.len() => 1,
                _ => 0,
            };
            assert_eq!(decoded.len(), expected, "cut at {cut}");
        }
    }

    #[test]
    fn drops_aborted_batches_until_the_abort_marker() {
        let mut f = AbortedFilter::new(vec![(1, 7)]);
        assert!(f.visible(&batch(0, 7, None)), "before the aborted txn");
        assert!(!f.visible(&batch(1, 7, None)));
        assert!(f.visible(&batch(2, 8, None)), "another producer");
        assert!(!f.visible(&batch(3, 7, Some(false))), "markers are hidden");
        assert!(f.visible(&batch(4, 7, None)), "after the abort marker");
    }
}
