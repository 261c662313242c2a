//! A produced batch in the form its topic's compression.type stores it, as
//! Kafka's LogValidator decides (validateMessagesAndAssignOffsetsCompressed):
//! kept in place, or rebuilt (`log::clean::records::recompressed`) when the
//! topic names a codec other than the batch's, or when a compressed batch's
//! inner offsets are not 0, 1, 2, … ("some older clients do not implement
//! the V1 internal offsets correctly"). An uncompressed batch on a topic
//! that keeps it uncompressed stays as sent, as Kafka's uncompressed path
//! leaves it.
//!
//! Produce calls `stored_batch` on every batch it has checked. Drivers may
//! call `prepared_batch` on a connection task first, for the topics
//! `Output::TopicCompression` names, so that the CPU work of compressing
//! runs beside the core rather than on it; what the core then finds is
//! already in stored form and kept in place.

use bytes::Bytes;

use crate::batch::{self, BatchHeader};
use crate::limits;
use crate::log::clean::codec;
use crate::log::clean::records::{self, Bound, Bounds, RebuildError, RecordsError};
use crate::topic_config::{ProducePrep, StoredCompression};

/// The batch as `compression` stores it: `None` when it is stored as sent.
/// `plain`: its records section decompressed, when the caller has it
/// (Produce's checks decompressed it already). `offsets_in_order`: every record's offset (base offset + delta) is its
/// index. The batch's records were read and checked before (Produce's
/// `check_records`); an error here is the codec's, or a bound's: the
/// rebuilt batch may not pass `batch_bytes_max` (the topic's
/// max.message.bytes and segment.bytes), decompress to more than the
/// broker's readers take (`limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX`:
/// offset deltas rewritten from 0 to 0, 1, 2, … grow each record), or hold
/// more than `limits::BATCH_RECORDS_MAX` records. The records are read and
/// written one at a time and the writing stops at the first bound passed,
/// so a hostile batch costs about the bound, not what it would grow to.
pub fn stored_batch(
    header: &BatchHeader,
    bytes: &[u8],
    plain: Option<&[u8]>,
    offsets_in_order: bool,
    compression: StoredCompression,
    batch_bytes_max: usize,
) -> Result<Option<Bytes>, RebuildError> {
    let source = header.compression_code();
    let (target, level) = match compression {
        StoredCompression::Producer => (source, codec::default_level(source)),
        StoredCompression::Codec { code, level } => (code, level),
    };
    if source == target && (source == 0 || offsets_in_order) {
        return Ok(None);
    }
    if usize::try_from(header.records_count).unwrap_or(0) > limits::BATCH_RECORDS_MAX {
        return Err(RebuildError::TooLarge(Bound::Records));
    }
    let decompressed;
    let plain = match plain {
        Some(plain) => plain,
        None => {
            decompressed = records::decompressed(bytes, header)
                .map_err(|e| RebuildError::Failed(RecordsError(e.to_string())))?;
            &decompressed[..]
        }
    };
    let bounds = Bounds {
        plain_bytes_max: limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX,
        batch_bytes_max,
        records_max: limits::BATCH_RECORDS_MAX,
    };
    let all = records::records(plain, header.records_count);
    records::recompressed(header, all, target, level, bounds).map(Some)
}

/// For a driver's connection task: `batch`, one whole batch of a Produce
/// request, recompressed for a topic that `prep` describes; `None` when it
/// is to be handed in as it came (already in stored form, or not a batch
/// the core would take as sent: larger than the topic takes, a bad CRC, a
/// records section that does not read, a rebuilt batch past its bounds,
/// which the core then refuses with Kafka's error).
pub fn prepared_batch(batch: &Bytes, prep: ProducePrep) -> Option<Bytes> {
    let ProducePrep {
        compression,
        batch_bytes_max,
    } = prep;
    let StoredCompression::Codec { code, .. } = compression else {
        return None;
    };
    if batch.len() > batch_bytes_max {
        return None;
    }
    let header = batch::check_batch(batch).ok()?;
    if header.total_bytes() != batch.len()
        || header.compression_code() == code
        || header.is_control()
    {
        return None;
    }
    stored_batch(&header, batch, None, true, compression, batch_bytes_max)
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::TestBatch;

    #[test]
    fn a_driver_prepares_only_whole_valid_batches_of_another_codec() {
        let plain = TestBatch::records(3).encode();
        let prep = |compression| ProducePrep {
            compression,
            batch_bytes_max: 1 << 20,
        };
        let zstd = prep(StoredCompression::Codec { code: 4, level: 3 });
        let prepared = prepared_batch(&plain, zstd).expect("recompressed");
        let h = batch::check_batch(&prepared).unwrap();
        assert_eq!((h.compression_code(), h.records_count), (4, 3));
        // Already zstd, or `producer`: handed in as it came.
        assert_eq!(prepared_batch(&prepared, zstd), None);
        assert_eq!(
            prepared_batch(&plain, prep(StoredCompression::Producer)),
            None
        );
        // Larger than the topic takes as sent: the core refuses it.
        let small = ProducePrep {
            batch_bytes_max: plain.len() - 1,
            ..zstd
        };
        assert_eq!(prepared_batch(&plain, small), None);
        // A bad CRC is left for the core to refuse, not made valid.
        let mut bad = plain.to_vec();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(prepared_batch(&Bytes::from(bad), zstd), None);
        // So is more than one batch.
        let two = Bytes::from([plain.to_vec(), plain.to_vec()].concat());
        assert_eq!(prepared_batch(&two, zstd), None);
    }
}
