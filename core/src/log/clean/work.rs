//! The log cleaner's CPU work, done beside the core rather than in it: the
//! driver runs `run` when it carries out an `Output::Clean` (net on a thread
//! of its own, the simulator at once against its disk model) and hands the
//! outcome back as `Input::CleanerDone`. Kafka runs its cleaner on threads
//! of their own for the same reason (LogCleaner's CleanerThread): mapping
//! the keys of a segment and rebuilding its batches take CPU in proportion
//! to its records, and a segment of one batch of millions of records held
//! every other client up for a second when the core did it.
//!
//! The core still decides everything: which segment, the rules (`Filter`),
//! the staged files and the swap. The work is a pure function of the job
//! and the bytes it reads: no clock (the job carries the pass's `now`), no
//! randomness. It reads the segment in chunks of
//! `limits::CLEANER_IO_BUFFER_BYTES` (a batch larger than that is read
//! whole), batch by batch, and writes what stays to the segment's
//! `.log.cleaned` a chunk at a time, so a segment is never held whole.
//!
//! The offset map is the pass's, shared (`Arc`), never copied: a Map job
//! takes it, fills it and gives it back (the core holds no other reference
//! meanwhile), a Clean job reads it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::filter::{self, Filter, LastRecord, OffsetMap, TxnWalk, Verdict};
use super::CleanedSegment;
use crate::batch;
use crate::io::{IoError, PartitionDir};
use crate::limits;

/// The files one job touches, as the driver opens them: the segment's live
/// `.log` (read) and its `.log.cleaned` copy (appended to; a Clean job only).
pub trait CleanerFiles {
    /// Exactly `len` bytes of the live `.log` at `position`, or an error.
    fn read(&mut self, position: u64, len: u64) -> Result<Bytes, IoError>;
    /// Appends to the `.log.cleaned` copy (created when absent). Durable
    /// only with a sync the core asks for after the job's completion.
    fn append_cleaned(&mut self, bytes: Bytes) -> Result<(), IoError>;
}

/// One job: a segment of a partition, and what to do with it.
#[derive(Clone, Debug, PartialEq)]
pub struct CleanerWork {
    pub dir: PartitionDir,
    pub segment_base: i64,
    /// The segment's `.log` length as the pass saw it: the job reads that much.
    pub size_bytes: u64,
    pub task: CleanerTask,
}

/// The rules of one pass that do not change from segment to segment.
#[derive(Clone, Debug, PartialEq)]
pub struct CleanRules {
    /// Each producer's last entry in the log (`Filter::last_records`).
    pub last_records: BTreeMap<i64, LastRecord>,
    pub delete_retention_ms: i64,
    /// The pass's end (`Filter::end_offset`).
    pub end_offset: i64,
}

#[derive(Clone, PartialEq)]
pub enum CleanerTask {
    /// Books the keys of the segment's batches (`filter::map_batch`) from
    /// offset `from` on, into `map`, until it is full.
    Map {
        map: Arc<OffsetMap>,
        walk: TxnWalk,
        from: i64,
    },
    /// Writes the segment's cleaned copy to `{base}.log.cleaned` and books
    /// its index entries; the index files are the core's to write.
    Clean {
        map: Arc<OffsetMap>,
        walk: TxnWalk,
        rules: Arc<CleanRules>,
        /// The pass's clock (delete horizons are set and passed against it).
        now_ms: i64,
        /// The next segment's base (`Filter::segment_end_offset`).
        segment_end_offset: i64,
    },
}

// By hand: a map of a million keys is not for a trace line.
impl fmt::Debug for CleanerTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CleanerTask::Map { map, from, .. } => f
                .debug_struct("Map")
                .field("map_keys", &map.len())
                .field("from", from)
                .finish_non_exhaustive(),
            CleanerTask::Clean {
                map,
                now_ms,
                segment_end_offset,
                ..
            } => f
                .debug_struct("Clean")
                .field("map_keys", &map.len())
                .field("now_ms", now_ms)
                .field("segment_end_offset", segment_end_offset)
                .finish_non_exhaustive(),
        }
    }
}

/// What a job did.
#[derive(Debug)]
pub struct CleanerOutcome {
    /// Bytes of the live `.log` read, whatever the result.
    pub bytes_read: u64,
    pub result: Result<CleanerDone, CleanerError>,
}

#[derive(Debug)]
pub enum CleanerDone {
    /// The map back, filled; `full`: it filled before the segment's end
    /// (what it covers ends at the last batch booked whole).
    Mapped {
        map: Arc<OffsetMap>,
        walk: TxnWalk,
        full: bool,
    },
    /// The copy's `.log` is written (unsynced); `copy` holds its index
    /// entries and the aborted transactions whose markers it keeps.
    Cleaned {
        copy: Box<CleanedSegment>,
        walk: TxnWalk,
        bytes_written: u64,
    },
}

#[derive(Debug, PartialEq)]
pub enum CleanerError {
    /// The live `.log` could not be read (EIO, or gone).
    Read(IoError),
    /// The copy could not be written.
    Write(IoError),
    /// A batch does not parse or fails its CRC: the partition is left alone.
    Damaged(String),
}

/// Carries out one job against `files`.
pub fn run(work: CleanerWork, files: &mut impl CleanerFiles) -> CleanerOutcome {
    let mut bytes_read = 0;
    let result = match work.task {
        CleanerTask::Map { map, walk, from } => {
            let mut job = MapJob {
                map: Arc::unwrap_or_clone(map),
                walk,
                from,
                full: false,
            };
            each_batch(work.size_bytes, files, &mut bytes_read, |_, h, b| {
                job.batch(h, b)
            })
            .map(|()| CleanerDone::Mapped {
                map: Arc::new(job.map),
                walk: job.walk,
                full: job.full,
            })
        }
        CleanerTask::Clean {
            map,
            walk,
            rules,
            now_ms,
            segment_end_offset,
        } => {
            let mut job = CleanJob {
                filter: Filter {
                    map: &map,
                    walk,
                    last_records: &rules.last_records,
                    now_ms,
                    delete_retention_ms: rules.delete_retention_ms,
                    end_offset: rules.end_offset,
                    segment_end_offset,
                },
                copy: CleanedSegment::new(work.dir.clone(), work.segment_base),
                pending: BytesMut::new(),
                bytes_written: 0,
            };
            let done = each_batch(work.size_bytes, files, &mut bytes_read, |files, h, b| {
                job.batch(files, h, b)
            })
            .and_then(|()| job.flush(files));
            done.map(|()| CleanerDone::Cleaned {
                copy: Box::new(job.copy),
                walk: job.filter.walk,
                bytes_written: job.bytes_written,
            })
        }
    };
    CleanerOutcome { bytes_read, result }
}

/// What one batch's handler says: go on, or stop here (the map is full).
enum Next {
    Continue,
    Stop,
}

/// Reads the segment's first `size_bytes` a chunk at a time and hands each
/// whole batch, CRC checked, to `each`. A chunk cut mid-batch is read again
/// from that batch; a batch larger than a chunk is read whole.
fn each_batch<F: CleanerFiles>(
    size_bytes: u64,
    files: &mut F,
    bytes_read: &mut u64,
    mut each: impl FnMut(&mut F, &batch::BatchHeader, Bytes) -> Result<Next, CleanerError>,
) -> Result<(), CleanerError> {
    let mut position = 0u64;
    let mut want = limits::CLEANER_IO_BUFFER_BYTES as u64;
    while position < size_bytes {
        let len = want.min(size_bytes - position);
        let bytes = files.read(position, len).map_err(CleanerError::Read)?;
        if bytes.len() as u64 != len {
            return Err(CleanerError::Read(IoError(format!(
                "a read of {len} bytes at {position} returned {}",
                bytes.len()
            ))));
        }
        *bytes_read += len;
        let at_end = position + len == size_bytes;
        let mut at = 0usize;
        while at < bytes.len() {
            let rest = &bytes[at..];
            let header = match batch::parse_header(rest) {
                Ok(h) if h.total_bytes() <= rest.len() => h,
                Ok(_) | Err(batch::BatchError::Truncated) if !at_end || at > 0 => break,
                Ok(_) | Err(batch::BatchError::Truncated) => {
                    return Err(CleanerError::Damaged(format!(
                        "a batch at {} runs past the segment's end ({size_bytes})",
                        position + at as u64
                    )))
                }
                Err(e) => {
                    return Err(CleanerError::Damaged(format!(
                        "a batch does not parse: {e}"
                    )))
                }
            };
            let one = bytes.slice(at..at + header.total_bytes());
            batch::check_stored_batch(&one)
                .map_err(|e| CleanerError::Damaged(format!("a batch is damaged: {e}")))?;
            at += header.total_bytes();
            if let Next::Stop = each(files, &header, one)? {
                return Ok(());
            }
        }
        if at == 0 {
            // Not one whole batch: read the first one whole (its header
            // first, when even that was cut).
            want = match batch::parse_header(&bytes) {
                Ok(h) => h.total_bytes() as u64,
                Err(_) => batch::BATCH_HEADER_BYTES as u64,
            };
            assert!(want > len, "a read that held a whole batch took none");
        } else {
            want = limits::CLEANER_IO_BUFFER_BYTES as u64;
        }
        position += at as u64;
    }
    Ok(())
}

struct MapJob {
    map: OffsetMap,
    walk: TxnWalk,
    from: i64,
    full: bool,
}

impl MapJob {
    fn batch(&mut self, header: &batch::BatchHeader, bytes: Bytes) -> Result<Next, CleanerError> {
        let fits = filter::map_batch(&mut self.map, &mut self.walk, header, &bytes, self.from)
            .map_err(|e| CleanerError::Damaged(e.0))?;
        if fits {
            Ok(Next::Continue)
        } else {
            self.full = true;
            Ok(Next::Stop)
        }
    }
}

struct CleanJob<'a> {
    filter: Filter<'a>,
    copy: CleanedSegment,
    /// Kept batches not written yet: flushed once they reach a buffer's worth.
    pending: BytesMut,
    bytes_written: u64,
}

impl CleanJob<'_> {
    fn batch(
        &mut self,
        files: &mut impl CleanerFiles,
        header: &batch::BatchHeader,
        bytes: Bytes,
    ) -> Result<Next, CleanerError> {
        let (verdict, kept_abort) = self
            .filter
            .batch(header, &bytes)
            .map_err(|e| CleanerError::Damaged(e.0))?;
        let kept = match verdict {
            Verdict::Keep => Some(bytes),
            Verdict::Replace(b) => Some(b),
            Verdict::Drop => None,
        };
        if let Some(kept) = kept {
            let h = batch::parse_header(&kept).expect("a kept batch parses");
            self.copy.push(&h);
            self.pending.extend_from_slice(&kept);
        }
        if let Some(aborted) = kept_abort {
            self.copy.keep_aborted(aborted);
        }
        if self.pending.len() >= limits::CLEANER_IO_BUFFER_BYTES {
            self.flush(files)?;
        }
        Ok(Next::Continue)
    }

    fn flush(&mut self, files: &mut impl CleanerFiles) -> Result<(), CleanerError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let bytes = self.pending.split().freeze();
        self.bytes_written += bytes.len() as u64;
        files.append_cleaned(bytes).map_err(CleanerError::Write)
    }
}
