//! A produced batch in the form its topic's compression.type stores it, as
//! Kafka's LogValidator decides (validateMessagesAndAssignOffsetsCompressed):
//! kept in place, or rebuilt (`log::clean::records::recompressed`) when the
//! topic names a codec other than the batch's, or when a compressed batch's
//! inner offsets are not 0, 1, 2, … ("some older clients do not implement
//! the V1 internal offsets correctly"). An uncompressed batch on a topic
//! that keeps it uncompressed stays as sent, as Kafka's uncompressed path
//! leaves it.
//!
//! Drivers do this work beside the core: `prepare_frame`, on a connection
//! task, checks a Produce request's records (`produce_checks`) and rebuilds
//! every batch that needs it, for the topics `Output::TopicCompression`
//! names with their codec and for every other (compression.type
//! `producer`: a compressed batch with its inner offsets wrong). What the
//! core is then handed is in stored form and kept in place. The core
//! rebuilds only what was not prepared so (a compression.type changed
//! while the request was on its way, a frame handed in unprepared), within
//! a bound per request (`api::produce`'s `stored_form`).
//!
//! A rebuild reads the records one at a time from the decompressing stream
//! (`codec_stream`, `record::Reader`) and writes them as it reads them: it
//! holds one record, and what it has written, never the records section
//! decompressed nor a list of its records.

use std::collections::HashMap;
use std::io::BufReader;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::Encodable;

use crate::batch::{self, BatchHeader};
use crate::limits;
use crate::log::clean::records::{self, Bound, Bounds, RebuildError, RecordsError};
use crate::log::clean::{codec, codec_stream};
use crate::produce_checks::{self, ProduceChecks, Rebuild, Verdict};
use crate::record;
use crate::topic_config::{ProducePrep, StoredCompression};

/// The codec and level `compression` stores the batch with, if it is not
/// stored as sent. `offsets_in_order`: every record's offset (base offset +
/// delta) is its index, as Produce's checks found.
pub fn rebuild_target(
    header: &BatchHeader,
    offsets_in_order: bool,
    compression: StoredCompression,
) -> Option<(u8, i32)> {
    let source = header.compression_code();
    let (target, level) = match compression {
        StoredCompression::Producer => (source, codec::default_level(source)),
        StoredCompression::Codec { code, level } => (code, level),
    };
    let in_place = source == target && (source == 0 || offsets_in_order);
    (!in_place).then_some((target, level))
}

/// What a decompressing stream is read in.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// The batch (`header`, `bytes`), whose records were read and checked
/// before (Produce's checks), written anew with `target` (codec, level).
/// An error is the codec's, or a bound's: the rebuilt batch may not pass
/// `batch_bytes_max` (the topic's max.message.bytes and segment.bytes),
/// decompress to more than the broker's readers take
/// (`limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX`: offset deltas rewritten
/// from 0 to 0, 1, 2, … grow each record), or hold more than
/// `limits::BATCH_RECORDS_MAX` records. The writing stops at the first
/// bound passed, so a hostile batch costs about the bound, not what it
/// would grow to.
pub fn rebuilt(
    header: &BatchHeader,
    bytes: &[u8],
    (code, level): (u8, i32),
    batch_bytes_max: usize,
) -> Result<Bytes, RebuildError> {
    if usize::try_from(header.records_count).unwrap_or(0) > limits::BATCH_RECORDS_MAX {
        return Err(RebuildError::TooLarge(Bound::Records));
    }
    let end = header.total_bytes().min(bytes.len());
    let body = &bytes[batch::BATCH_HEADER_BYTES.min(end)..end];
    let plain_bytes_max = limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX;
    let stream = codec_stream::decompressing(header.compression_code(), body, plain_bytes_max)
        .map_err(|e| RebuildError::Failed(RecordsError(e.to_string())))?;
    let mut reader = record::Reader::new(BufReader::with_capacity(READ_CHUNK_BYTES, stream));
    let bounds = Bounds {
        plain_bytes_max,
        batch_bytes_max,
        records_max: limits::BATCH_RECORDS_MAX,
    };
    // The log gives the batch its base offset as it appends it. Written at
    // 0, the rebuilt batch's offsets are its records' indexes, so it is
    // kept in place from then on: a driver's rebuild is not rebuilt again.
    let at_zero = BatchHeader {
        base_offset: 0,
        ..header.clone()
    };
    records::recompressed(&at_zero, &mut reader, code, level, bounds)
}

/// A Produce request frame as a driver hands it in
/// (`Input::CheckedFrame`): `frame` with its batches in stored form, and
/// what was read of them.
#[derive(Debug)]
pub struct PreparedFrame {
    pub frame: Bytes,
    pub checks: ProduceChecks,
    /// Batches rebuilt.
    pub rebuilt: usize,
}

/// The largest batch a driver rebuilds for a topic it was told nothing of
/// (compression.type `producer`, the default, whose max.message.bytes it
/// does not know): any. The core checks what it is handed against the
/// topic's sizes, both the batch the client sent (`Rebuild::Done`) and the
/// rebuilt one, as Kafka checks both; what the rebuild reads is bounded by
/// the decompressed bound.
const UNTOLD_TOPIC_BATCH_BYTES_MAX: usize = i32::MAX as usize;

/// For a driver's connection task: `frame` (a request without its size
/// prefix) checked (`produce_checks::check_request`), with the batch of
/// every partition entry the core will read (a partition's last) that the
/// topic stores in another form rebuilt, and the request encoded again
/// around them; `prep_of` says what the driver was told of a topic
/// (`Output::TopicCompression`; `None`: compression.type `producer`).
/// `None` if `frame` is not a Produce request the core serves that decodes
/// (the core answers it as it came).
///
/// Not rebuilt, left for the core to refuse with Kafka's error: a batch
/// the checks refused, and one larger than the topic takes as sent. A
/// rebuild that fails is noted in the checks (`Rebuild::Failed`), so that
/// the core answers it without doing it again. A rebuild reads again what
/// the checks read (at most `limits::PRODUCE_DECOMPRESSED_BYTES_MAX` a
/// request), and what it wrote is read once more to check it: a request
/// costs at most about three times that bound, all of it beside the core.
pub fn prepare_frame(
    frame: &Bytes,
    prep_of: impl Fn(&str) -> Option<ProducePrep>,
) -> Option<PreparedFrame> {
    let produce_checks::Decoded {
        header,
        version,
        mut request,
    } = produce_checks::decode(frame)?;
    let mut checks = produce_checks::check_request(&request);
    let mut rebuilt_batches = HashMap::new();
    for (topic, partitions) in produce_checks::entries_by_partition(&request) {
        let prep = prep_of(topic).unwrap_or(ProducePrep {
            compression: StoredCompression::Producer,
            batch_bytes_max: UNTOLD_TOPIC_BATCH_BYTES_MAX,
        });
        for part in partitions {
            let (Some(Verdict::Read(summary)), Some(records)) =
                (checks.get(topic, part.index), &part.records)
            else {
                continue;
            };
            let Ok(header) = batch::parse_header(records) else {
                continue;
            };
            let Some(target) = rebuild_target(&header, summary.offsets_in_order, prep.compression)
            else {
                continue;
            };
            // Read whole, so exactly one valid batch.
            let Some((header, bytes)) = produce_checks::one_batch(records) else {
                continue;
            };
            if bytes.len() > prep.batch_bytes_max {
                continue;
            }
            match rebuilt(&header, &bytes, target, prep.batch_bytes_max) {
                Ok(batch) => {
                    let h = batch::parse_header(&batch).expect("a rebuilt batch");
                    let max = limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX;
                    let verdict = produce_checks::read_batch(&h, &batch, topic, part.index, max);
                    let done = Rebuild::Done {
                        sent_bytes: bytes.len(),
                    };
                    checks.set(topic, part.index, verdict, done);
                    rebuilt_batches.insert((topic.to_owned(), part.index), batch);
                }
                Err(error) => {
                    let failed = Rebuild::Failed {
                        target,
                        batch_bytes_max: prep.batch_bytes_max,
                        error,
                    };
                    checks.set_rebuild(topic, part.index, failed);
                }
            }
        }
    }
    let rebuilt = rebuilt_batches.len();
    if rebuilt == 0 {
        let frame = frame.clone();
        return Some(PreparedFrame {
            frame,
            checks,
            rebuilt,
        });
    }
    // Each into the entry the core reads of its partition: the last.
    for topic in request.topic_data.iter_mut().rev() {
        for part in topic.partition_data.iter_mut().rev() {
            let key = (topic.name.0.to_string(), part.index);
            if let Some(batch) = rebuilt_batches.remove(&key) {
                part.records = Some(batch);
            }
        }
    }
    let mut out = BytesMut::with_capacity(frame.len());
    let header_version = ApiKey::Produce.request_header_version(version);
    let encoded = header
        .encode(&mut out, header_version)
        .and_then(|()| request.encode(&mut out, version));
    match encoded {
        Ok(()) => Some(PreparedFrame {
            frame: out.freeze(),
            checks,
            rebuilt,
        }),
        // What decoded encodes again; were it not so, the frame goes as it
        // came, with its own checks.
        Err(_) => Some(PreparedFrame {
            frame: frame.clone(),
            checks: produce_checks::check_frame(frame)?,
            rebuilt: 0,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::TestBatch;

    #[test]
    fn only_a_batch_stored_in_another_form_is_rebuilt() {
        let plain = TestBatch::records(3).encode();
        let h = batch::check_batch(&plain).unwrap();
        let zstd = StoredCompression::Codec { code: 4, level: 3 };
        assert_eq!(rebuild_target(&h, true, zstd), Some((4, 3)));
        // Uncompressed and kept so, or `producer`: as sent, whatever the
        // offsets.
        let uncompressed = StoredCompression::Codec { code: 0, level: -1 };
        assert_eq!(rebuild_target(&h, false, uncompressed), None);
        assert_eq!(rebuild_target(&h, false, StoredCompression::Producer), None);
        let packed = rebuilt(&h, &plain, (4, 3), 1 << 20).unwrap();
        let p = batch::check_batch(&packed).unwrap();
        assert_eq!((p.compression_code(), p.records_count), (4, 3));
        // Compressed: kept while its offsets are in order, rebuilt with
        // the codec's default level under `producer` when not.
        assert_eq!(rebuild_target(&p, true, StoredCompression::Producer), None);
        assert_eq!(rebuild_target(&p, true, zstd), None);
        assert_eq!(
            rebuild_target(&p, false, StoredCompression::Producer),
            Some((4, 3))
        );
        // Past the stored bound: refused, nothing returned.
        assert_eq!(
            rebuilt(&h, &plain, (4, 3), 70),
            Err(RebuildError::TooLarge(Bound::Stored))
        );
    }
}
