//! Reading Kafka's RecordBatch v2 bytes as they lie in a segment file or
//! come back in a Fetch response: the batches one at a time, each read
//! whole and checked, then its records one at a time (decompressed as they
//! are read) and what a control record says. `dump_log` (segment files)
//! and the console's partition page (a fetch's bytes) both read through
//! here.
//!
//! Nothing here panics on bad input: every length is checked against the
//! bytes there are, and a batch is never read past its source's end. A
//! fetch's last batch may be cut by the fetch's byte limit: it reads as
//! `Next::Invalid`, which for a fetch only means "the window ends here".

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;

use doze_core::batch::{self, BatchHeader, BATCH_HEADER_BYTES};
use doze_core::limits;
use doze_core::log::clean::codec_stream;
pub use doze_core::record::Record;
use doze_core::record::{self, Framing, Malformed, Unread};

/// Bytes up to and including the magic byte: fewer than that at the end of a
/// file cannot be told from garbage (Kafka's `HEADER_SIZE_UP_TO_MAGIC`).
const HEADER_BYTES_UP_TO_MAGIC: usize = 17;
const BATCH_LENGTH_AT: usize = 8;
const MAGIC_AT: usize = 16;
/// The smallest batchLength: a header without records.
const BATCH_LENGTH_MIN: i32 = (BATCH_HEADER_BYTES - batch::BATCH_LOG_OVERHEAD_BYTES) as i32;

/// Where the bytes come from: a file, or memory (a fetch, tests).
pub trait ReadAt {
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()>;
}

impl ReadAt for File {
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, position)
    }
}

impl ReadAt for [u8] {
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        let slice = usize::try_from(position)
            .ok()
            .and_then(|at| self.get(at..at.checked_add(buf.len())?))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(slice);
        Ok(())
    }
}

/// What lies at a position.
pub enum Next {
    /// Nothing: the end.
    End,
    /// A whole batch: its header and all its bytes.
    Batch(BatchHeader, Vec<u8>),
    /// The bytes from here to the end are not a (whole) batch, for this reason.
    Invalid(String),
}

/// The batch at `position` of `size` bytes of `source`, read whole, or
/// why there is none.
pub fn next_batch(source: &(impl ReadAt + ?Sized), position: u64, size: u64) -> io::Result<Next> {
    let remaining = size.saturating_sub(position);
    if remaining == 0 {
        return Ok(Next::End);
    }
    if remaining < HEADER_BYTES_UP_TO_MAGIC as u64 {
        return Ok(Next::Invalid(format!(
            "{remaining} bytes are too few for a batch header"
        )));
    }
    let mut head = vec![0u8; remaining.min(BATCH_HEADER_BYTES as u64) as usize];
    source.read_exact_at(&mut head, position)?;
    let magic = head[MAGIC_AT] as i8;
    if magic != batch::MAGIC_V2 {
        return Ok(Next::Invalid(format!(
            "magic {magic}: only v2 record batches (magic 2) are read"
        )));
    }
    let length_bytes: [u8; 4] = head[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4]
        .try_into()
        .expect("four bytes");
    let batch_length = i32::from_be_bytes(length_bytes);
    if batch_length < BATCH_LENGTH_MIN {
        return Ok(Next::Invalid(format!(
            "batch length {batch_length} is less than a batch header's {BATCH_LENGTH_MIN}"
        )));
    }
    let total = batch::BATCH_LOG_OVERHEAD_BYTES as u64 + batch_length as u64;
    if total > remaining {
        return Ok(Next::Invalid(format!(
            "a batch of {total} bytes starts there but only {remaining} bytes are left"
        )));
    }
    let mut bytes = vec![0u8; total as usize];
    source.read_exact_at(&mut bytes, position)?;
    match batch::parse_header(&bytes) {
        Ok(header) => Ok(Next::Batch(header, bytes)),
        // Magic and length were checked above; kept for safety.
        Err(e) => Ok(Next::Invalid(e.to_string())),
    }
}

/// Whether a batch's CRC matches; if not, the CRC its bytes have.
pub fn crc_check(bytes: &[u8]) -> (bool, Option<u32>) {
    match batch::verify_crc(bytes) {
        Ok(()) => (true, None),
        Err(batch::BatchError::CrcMismatch { computed, .. }) => (false, Some(computed)),
        Err(_) => (false, None),
    }
}

/// The records of a batch, read one at a time (`doze_core::record::Reader`)
/// from its records section, decompressed as they are read: a batch of
/// millions of records costs its codec's buffers and one record, never a
/// list of them all (read whole, 6.7 M records cost a console page view
/// 1.3 GiB, dump-log 2.1 GiB; issue 38).
pub struct Records<'a> {
    reader: record::Reader<BufReader<Box<dyn Read + 'a>>>,
    /// The header's count, and how many were read (or tried).
    count: i32,
    read: i32,
    failed: bool,
}

/// Bytes a records stream is read through (a codec gives a few KiB a read).
const STREAM_BUFFER_BYTES: usize = 16 * 1024;

/// The records of a batch (`header.records_count` of them). A compressed
/// batch is decompressed only when its CRC matched: its compressed bytes
/// are then the producer's, not arbitrary ones. Its records section is
/// read to `limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX` at most, the
/// bound of every reader of a batch's records; past it, the record being
/// read fails with "the records decompress to more than ...".
pub fn records<'a>(
    header: &BatchHeader,
    bytes: &'a [u8],
    crc_ok: bool,
) -> Result<Records<'a>, String> {
    if header.compression_code() != 0 && !crc_ok {
        return Err("records not decompressed: the batch's CRC does not match".into());
    }
    let end = header.total_bytes().min(bytes.len());
    let section = &bytes[BATCH_HEADER_BYTES.min(end)..end];
    let stream = codec_stream::decompressing(
        header.compression_code(),
        section,
        limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX,
    )
    .map_err(|e| e.to_string())?;
    Ok(Records {
        reader: record::Reader::new(BufReader::with_capacity(STREAM_BUFFER_BYTES, stream)),
        count: header.records_count.max(0),
        read: 0,
        failed: false,
    })
}

impl Records<'_> {
    /// The next record; `None` after the header's count of them, or after
    /// one that could not be read (its error says why: the rest cannot be
    /// found).
    #[allow(clippy::should_implement_trait)] // a record borrows the reader
    pub fn next(&mut self) -> Option<Result<Record<'_>, String>> {
        if self.failed || self.read >= self.count {
            return None;
        }
        let (index, count) = (self.read, self.count);
        self.read += 1;
        let record = self.reader.next_record();
        self.failed = record.is_err();
        Some(record.map_err(|e| describe(index, count, e)))
    }

    /// Records not read yet, of the header's count.
    pub fn left(&self) -> usize {
        if self.failed {
            return 0;
        }
        (self.count - self.read) as usize
    }
}

/// Why record `index` of `count` could not be read, in dump-log's and the
/// console's words; a stream that failed says so without the record.
fn describe(index: i32, count: i32, e: Unread) -> String {
    let reason = match e {
        Unread::Stream(e) => return codec_stream::stream_error(&e).to_string(),
        Unread::Framing(Framing::CutOff) => "the record's length is cut off".to_owned(),
        Unread::Framing(Framing::Invalid { length, .. }) if length < 0 => {
            format!("record length {length}")
        }
        Unread::Framing(Framing::Invalid { length, .. }) => {
            format!("a record of {length} bytes runs past the batch")
        }
        Unread::Malformed(Malformed::EndsIn(field)) => {
            format!("the record ends inside its {}", field.name())
        }
        Unread::Malformed(Malformed::NegativeHeaderCount(n)) => format!("header count {n}"),
        Unread::Malformed(Malformed::NegativeHeaderKey(_)) => "a header has a null key".to_owned(),
        Unread::Malformed(Malformed::Leftover { length, read }) => {
            format!("{} bytes left after its headers", length - read)
        }
    };
    format!("record {index} of {count}: {reason}")
}

/// What a control record says: its key is (version i16, type i16); a
/// transaction marker's value is (version i16, coordinatorEpoch i32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlRecord {
    /// 0 ABORT, 1 COMMIT, others (LEADER_CHANGE, ...) not transactions'.
    pub type_id: i16,
    /// A marker's coordinator epoch; None if its value is too short.
    pub coordinator_epoch: Option<i32>,
    /// The value's length, for the error of one too short.
    pub value_bytes: usize,
}

/// A transaction marker's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    Abort,
    Commit,
}

impl Marker {
    /// As Kafka names it (`endTxnMarker: COMMIT`).
    pub fn name(self) -> &'static str {
        match self {
            Marker::Abort => "ABORT",
            Marker::Commit => "COMMIT",
        }
    }
}

impl ControlRecord {
    /// The transaction marker it is, if it is one.
    pub fn marker(&self) -> Option<Marker> {
        match self.type_id {
            0 => Some(Marker::Abort),
            1 => Some(Marker::Commit),
            _ => None,
        }
    }

    /// Kafka's name of a control type that is not a marker.
    pub fn type_name(&self) -> &'static str {
        match self.type_id {
            0 => "ABORT",
            1 => "COMMIT",
            2 => "LEADER_CHANGE",
            3 => "SNAPSHOT_HEADER",
            4 => "SNAPSHOT_FOOTER",
            5 => "KRAFT_VERSION",
            6 => "KRAFT_VOTERS",
            _ => "UNKNOWN",
        }
    }
}

/// Reads a control record's key and value; an error if the key is not the
/// four bytes of (version, type).
pub fn control_record(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<ControlRecord, String> {
    let key = key.unwrap_or_default();
    if key.len() < 4 {
        return Err(format!("a control key of {} bytes (4 expected)", key.len()));
    }
    let type_id = i16::from_be_bytes([key[2], key[3]]);
    let value = value.unwrap_or_default();
    let coordinator_epoch = value
        .get(2..6)
        .map(|b| i32::from_be_bytes(b.try_into().expect("four bytes")));
    Ok(ControlRecord {
        type_id,
        coordinator_epoch,
        value_bytes: value.len(),
    })
}

/// The marker of a control batch: its first record's, if it reads as one.
pub fn batch_marker(header: &BatchHeader, bytes: &[u8]) -> Option<Marker> {
    if !header.is_control() {
        return None;
    }
    // A marker batch is never compressed; `records` copes if it is.
    let (crc_ok, _) = crc_check(bytes);
    let mut records = records(header, bytes, crc_ok).ok()?;
    let first = records.next()?.ok()?;
    control_record(first.key, first.value).ok()?.marker()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_read_from_their_batch() {
        for (commit, want) in [(true, Marker::Commit), (false, Marker::Abort)] {
            let marker = doze_core::control::build(7, 2, commit, 5, 2_000);
            let header = batch::parse_header(&marker).unwrap();
            assert_eq!(batch_marker(&header, &marker), Some(want));
        }
        let control = control_record(Some(&[0, 0, 0, 2]), None).unwrap();
        assert_eq!(control.marker(), None);
        assert_eq!(control.type_name(), "LEADER_CHANGE");
        assert!(control_record(Some(&[0, 0]), None).is_err());
    }

    #[test]
    fn a_cut_window_ends_in_invalid_bytes() {
        let marker = doze_core::control::build(7, 2, true, 5, 2_000);
        let cut = &marker[..marker.len() - 1];
        assert!(matches!(
            next_batch(cut, 0, cut.len() as u64).unwrap(),
            Next::Invalid(_)
        ));
        assert!(matches!(
            next_batch(&marker[..], 0, marker.len() as u64).unwrap(),
            Next::Batch(..)
        ));
        assert!(matches!(
            next_batch(&marker[..], marker.len() as u64, marker.len() as u64).unwrap(),
            Next::End
        ));
    }
}
