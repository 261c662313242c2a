//! meta.db's journal: the one file a meta.db write waits for.
//!
//! A durable sled flush costs two device round trips and more (sled writes
//! its log with `sync_file_range`, then we `fdatasync` it: `sledsync.rs`),
//! and grows with the pages a round touched: 3 ms a round under 64
//! transactional producers. A transaction's commit waits for one meta.db
//! write, so the meta worker (`metadb.rs`) makes a round durable here
//! instead, with one `pwrite` and one `fdatasync` of a file whose blocks are
//! already allocated and written (no size or extent change for the file
//! system to commit), and answers. What the journal holds reaches sled at a
//! checkpoint (`metastore.rs`), applied and durably flushed: when the
//! journal is full, at a clean stop and at start-up. Start-up replays the records of the current
//! generation into sled before anything reads it.
//!
//! ```text
//! header, at 0, one block:  magic "DOZEMJ01" | generation u64 | crc32c u32
//! records, from JOURNAL_HEADER_BYTES on, back to back:
//!   crc32c u32 (of what follows, to the body's end) | body_len u32 |
//!   generation u64 | seq u64 | body
//! body: ops u32, then per op: kind u8 (0 put, 1 delete) | key_len u32 | key
//!       and, for a put, value_len u32 | value
//! ```
//!
//! Replay takes records while each checks: its CRC, the header's
//! generation, and the next sequence number. A torn last record (a crash
//! during a write nobody was answered for) or a zeroed block ends it, and so
//! does a record of an older generation: a checkpoint starts a new
//! generation after sled is durable, and the new records overwrite the old
//! ones from the start, so what lies past the last new record is already in
//! sled. A header that does not check is a torn checkpoint, after which sled
//! held everything: the journal is empty.
//!
//! Replaying a record sled already holds is harmless: puts and deletes
//! applied again in the same order leave each key as the last one left it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use doze_core::limits::{META_JOURNAL_BYTES_MAX, META_JOURNAL_GROWTH_BYTES};
use doze_core::MetaOp;

const MAGIC: &[u8; 8] = b"DOZEMJ01";
/// The header's own block; records start after it.
pub const JOURNAL_HEADER_BYTES: u64 = 4096;
/// crc, body_len, generation, seq.
const RECORD_HEAD_BYTES: usize = 4 + 4 + 8 + 8;
const PUT: u8 = 0;
const DELETE: u8 = 1;

pub struct Journal {
    file: File,
    generation: u64,
    /// The sequence number of the next record.
    next_seq: u64,
    /// Where the next record goes.
    end: u64,
    /// Bytes of the file written with zeros or records (never less than the
    /// file's length: growth writes zeros before it is used).
    zeroed: u64,
    /// A failed write or sync leaves the file's state unknown (a later
    /// fdatasync may report success for pages the kernel dropped): nothing
    /// more is appended, and start-up replays what reached the disk.
    failed: bool,
}

/// What `append` could not do.
#[derive(Debug)]
pub enum AppendError {
    /// The records do not fit before `META_JOURNAL_BYTES_MAX`: checkpoint
    /// and try again (or, if they are larger than an empty journal, store
    /// them in sled directly).
    Full,
    Io(io::Error),
}

impl Journal {
    /// Opens the journal at `path`, creating it if absent, and returns it
    /// with the batches of its current generation, in order, for replay.
    /// Appending starts after them; call `reset` once sled holds them.
    pub fn open(path: &Path) -> io::Result<(Journal, Vec<Vec<MetaOp>>)> {
        let created = !path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let mut journal = Journal {
            file,
            generation: 0,
            next_seq: 0,
            end: JOURNAL_HEADER_BYTES,
            zeroed: 0,
            failed: false,
        };
        if created {
            journal.write_header(1)?;
            journal.grow()?;
            crate::datadir::sync_dir(crate::datadir::parent_dir(path))?;
            return Ok((journal, Vec::new()));
        }
        journal.zeroed = journal.file.metadata()?.len();
        let Some(generation) = journal.read_header()? else {
            // Records of any earlier generation may lie in the file, and
            // the generation counter is lost with the header: zeros first,
            // so that none of them can pass for the new generation's.
            tracing::warn!(path = %path.display(), "meta.db journal header torn: empty");
            let zeros = vec![0u8; journal.zeroed.saturating_sub(JOURNAL_HEADER_BYTES) as usize];
            journal.file.write_all_at(&zeros, JOURNAL_HEADER_BYTES)?;
            journal.write_header(1)?;
            return Ok((journal, Vec::new()));
        };
        journal.generation = generation;
        let batches = journal.read_records()?;
        Ok((journal, batches))
    }

    /// Appends one record per batch, in order, and makes them durable.
    pub fn append(&mut self, batches: &[&[MetaOp]]) -> Result<(), AppendError> {
        if self.failed {
            return Err(AppendError::Io(io::Error::other(
                "an earlier meta.db journal write failed",
            )));
        }
        let mut bytes = Vec::new();
        let mut seq = self.next_seq;
        for ops in batches {
            encode_record(&mut bytes, self.generation, seq, ops);
            seq += 1;
        }
        let end = self.end + bytes.len() as u64;
        if end > META_JOURNAL_BYTES_MAX {
            return Err(AppendError::Full);
        }
        while end > self.zeroed {
            self.grow().map_err(|e| self.fail(e))?;
        }
        self.file
            .write_all_at(&bytes, self.end)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| self.fail(e))?;
        self.end = end;
        self.next_seq = seq;
        Ok(())
    }

    /// Starts a new generation: what was appended so far is forgotten. Only
    /// once sled holds it durably.
    pub fn reset(&mut self) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other("an earlier meta.db journal write failed"));
        }
        let generation = self.generation + 1;
        self.write_header(generation)
            .inspect_err(|_| self.failed = true)
    }

    /// Bytes of records appended since the last reset.
    pub fn used_bytes(&self) -> u64 {
        self.end - JOURNAL_HEADER_BYTES
    }

    fn fail(&mut self, e: io::Error) -> AppendError {
        self.failed = true;
        AppendError::Io(e)
    }

    fn write_header(&mut self, generation: u64) -> io::Result<()> {
        let mut header = vec![0u8; JOURNAL_HEADER_BYTES as usize];
        header[..8].copy_from_slice(MAGIC);
        header[8..16].copy_from_slice(&generation.to_be_bytes());
        let crc = crc32c::crc32c(&header[..16]);
        header[16..20].copy_from_slice(&crc.to_be_bytes());
        self.file.write_all_at(&header, 0)?;
        self.file.sync_data()?;
        self.generation = generation;
        self.next_seq = 0;
        self.end = JOURNAL_HEADER_BYTES;
        self.zeroed = self.zeroed.max(JOURNAL_HEADER_BYTES);
        Ok(())
    }

    fn read_header(&self) -> io::Result<Option<u64>> {
        let mut header = [0u8; 20];
        match self.file.read_exact_at(&mut header, 0) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let crc = u32::from_be_bytes(header[16..20].try_into().expect("4 bytes"));
        if &header[..8] != MAGIC || crc32c::crc32c(&header[..16]) != crc {
            return Ok(None);
        }
        Ok(Some(u64::from_be_bytes(
            header[8..16].try_into().expect("8 bytes"),
        )))
    }

    /// Zeros for the next `META_JOURNAL_GROWTH_BYTES`, synced with the new
    /// length, so that appends into them change no file metadata.
    fn grow(&mut self) -> io::Result<()> {
        let grown = (self.zeroed + META_JOURNAL_GROWTH_BYTES).min(META_JOURNAL_BYTES_MAX);
        let zeros = vec![0u8; (grown - self.zeroed) as usize];
        self.file.write_all_at(&zeros, self.zeroed)?;
        self.file.sync_all()?;
        self.zeroed = grown;
        Ok(())
    }

    /// The current generation's records from the header on, until one does
    /// not check; `end` and `next_seq` are left after the last.
    fn read_records(&mut self) -> io::Result<Vec<Vec<MetaOp>>> {
        let length = self.file.metadata()?.len();
        let mut batches = Vec::new();
        let mut head = [0u8; RECORD_HEAD_BYTES];
        loop {
            if self.end + RECORD_HEAD_BYTES as u64 > length {
                break;
            }
            self.file.read_exact_at(&mut head, self.end)?;
            let crc = u32::from_be_bytes(head[0..4].try_into().expect("4 bytes"));
            let body_len = u32::from_be_bytes(head[4..8].try_into().expect("4 bytes")) as u64;
            let generation = u64::from_be_bytes(head[8..16].try_into().expect("8 bytes"));
            let seq = u64::from_be_bytes(head[16..24].try_into().expect("8 bytes"));
            let record_end = self.end + RECORD_HEAD_BYTES as u64 + body_len;
            if body_len == 0
                || record_end > length
                || generation != self.generation
                || seq != self.next_seq
            {
                break;
            }
            let mut body = vec![0u8; body_len as usize];
            self.file
                .read_exact_at(&mut body, self.end + RECORD_HEAD_BYTES as u64)?;
            let mut checked = crc32c::crc32c(&head[4..]);
            checked = crc32c::crc32c_append(checked, &body);
            if checked != crc {
                break;
            }
            let Some(ops) = decode_body(&body) else {
                // The CRC matched what we wrote: a body we cannot read is a
                // bug, not a torn write, and replaying around it would
                // drop an answered write.
                return Err(io::Error::other(format!(
                    "meta.db journal record {seq} does not decode"
                )));
            };
            batches.push(ops);
            self.end = record_end;
            self.next_seq += 1;
        }
        Ok(batches)
    }
}

fn encode_record(out: &mut Vec<u8>, generation: u64, seq: u64, ops: &[MetaOp]) {
    let start = out.len();
    out.extend_from_slice(&[0u8; 8]); // crc and body_len, filled below
    out.extend_from_slice(&generation.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    let body_start = out.len();
    out.extend_from_slice(&(ops.len() as u32).to_be_bytes());
    for op in ops {
        match op {
            MetaOp::Put { key, value } => {
                out.push(PUT);
                put_bytes(out, key);
                put_bytes(out, value);
            }
            MetaOp::Delete { key } => {
                out.push(DELETE);
                put_bytes(out, key);
            }
        }
    }
    let body_len = u32::try_from(out.len() - body_start).expect("a meta.db batch under 4 GiB");
    out[start + 4..start + 8].copy_from_slice(&body_len.to_be_bytes());
    let crc = crc32c::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_be_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).expect("a meta.db key or value under 4 GiB");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
}

fn decode_body(mut body: &[u8]) -> Option<Vec<MetaOp>> {
    let count = take_u32(&mut body)?;
    let mut ops = Vec::new();
    for _ in 0..count {
        let (&kind, rest) = body.split_first()?;
        body = rest;
        let key = take_bytes(&mut body)?;
        ops.push(match kind {
            PUT => MetaOp::Put {
                key,
                value: take_bytes(&mut body)?,
            },
            DELETE => MetaOp::Delete { key },
            _ => return None,
        });
    }
    body.is_empty().then_some(ops)
}

fn take_u32(body: &mut &[u8]) -> Option<u32> {
    let (head, rest) = body.split_at_checked(4)?;
    *body = rest;
    Some(u32::from_be_bytes(head.try_into().ok()?))
}

fn take_bytes(body: &mut &[u8]) -> Option<Vec<u8>> {
    let len = take_u32(body)? as usize;
    let (bytes, rest) = body.split_at_checked(len)?;
    *body = rest;
    Some(bytes.to_vec())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A put of strings (also for `metastore.rs`'s tests).
    pub(crate) fn put(k: &str, v: &str) -> MetaOp {
        MetaOp::Put {
            key: k.as_bytes().to_vec(),
            value: v.as_bytes().to_vec(),
        }
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("doze-journal-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("meta.journal")
    }

    #[test]
    fn appended_batches_come_back_in_order_after_a_crash() {
        let path = scratch("order");
        let (mut journal, replay) = Journal::open(&path).unwrap();
        assert!(replay.is_empty());
        let first = vec![put("a", "1"), put("b", "2")];
        let second = vec![MetaOp::Delete { key: b"a".to_vec() }];
        journal.append(&[&first, &second]).unwrap();
        journal.append(&[&[put("c", "3")]]).unwrap();
        drop(journal); // no reset: a crash
        let (journal, replay) = Journal::open(&path).unwrap();
        assert_eq!(replay, vec![first, second, vec![put("c", "3")]]);
        assert_eq!(journal.next_seq, 3);
    }

    #[test]
    fn a_torn_last_record_ends_the_replay_and_is_overwritten() {
        let path = scratch("torn");
        let (mut journal, _) = Journal::open(&path).unwrap();
        journal.append(&[&[put("a", "1")]]).unwrap();
        let kept_end = journal.end;
        journal.append(&[&[put("b", "2")]]).unwrap();
        // The second record's last byte never reached the disk.
        let last = journal.end - 1;
        journal.file.write_all_at(&[0xff], last).unwrap();
        drop(journal);
        let (mut journal, replay) = Journal::open(&path).unwrap();
        assert_eq!(replay, vec![vec![put("a", "1")]]);
        assert_eq!(journal.end, kept_end);
        journal.append(&[&[put("c", "3")]]).unwrap();
        drop(journal);
        let (_, replay) = Journal::open(&path).unwrap();
        assert_eq!(replay, vec![vec![put("a", "1")], vec![put("c", "3")]]);
    }

    #[test]
    fn records_older_than_a_reset_are_never_replayed() {
        let path = scratch("reset");
        let (mut journal, _) = Journal::open(&path).unwrap();
        journal
            .append(&[
                &[put("old1", "x")],
                &[put("old2", "x")],
                &[put("old3", "x")],
            ])
            .unwrap();
        journal.reset().unwrap();
        // One short new record: the old second and third lie past it.
        journal.append(&[&[put("n", "1")]]).unwrap();
        drop(journal);
        let (mut journal, replay) = Journal::open(&path).unwrap();
        assert_eq!(replay, vec![vec![put("n", "1")]]);
        journal.reset().unwrap();
        drop(journal);
        let (_, replay) = Journal::open(&path).unwrap();
        assert!(replay.is_empty(), "a reset forgets everything: {replay:?}");
    }

    #[test]
    fn a_torn_header_is_an_empty_journal() {
        let path = scratch("header");
        let (mut journal, _) = Journal::open(&path).unwrap();
        journal.append(&[&[put("a", "1")]]).unwrap();
        journal.file.write_all_at(&[0xff], 10).unwrap();
        drop(journal);
        let (mut journal, replay) = Journal::open(&path).unwrap();
        assert!(replay.is_empty());
        journal.append(&[&[put("b", "2")]]).unwrap();
        drop(journal);
        let (_, replay) = Journal::open(&path).unwrap();
        assert_eq!(replay, vec![vec![put("b", "2")]]);
    }

    #[test]
    fn a_full_journal_refuses_and_grows_until_then() {
        let path = scratch("full");
        let (mut journal, _) = Journal::open(&path).unwrap();
        let value = "v".repeat(64 * 1024);
        let mut appended = 0;
        loop {
            match journal.append(&[&[put("k", &value)]]) {
                Ok(()) => appended += 1,
                Err(AppendError::Full) => break,
                Err(AppendError::Io(e)) => panic!("{e}"),
            }
        }
        let per_record = (64 * 1024 + 64) as u64;
        assert!(
            appended as u64 >= (META_JOURNAL_BYTES_MAX - JOURNAL_HEADER_BYTES) / per_record - 1
        );
        assert!(std::fs::metadata(&path).unwrap().len() <= META_JOURNAL_BYTES_MAX);
        journal.reset().unwrap();
        journal.append(&[&[put("k", "small")]]).unwrap();
        drop(journal);
        let (_, replay) = Journal::open(&path).unwrap();
        assert_eq!(replay, vec![vec![put("k", "small")]]);
    }

    #[test]
    fn bodies_round_trip() {
        let ops = vec![
            put("", ""),
            MetaOp::Delete { key: vec![0, 1, 2] },
            put("key", "value"),
        ];
        let mut bytes = Vec::new();
        encode_record(&mut bytes, 7, 9, &ops);
        assert_eq!(decode_body(&bytes[RECORD_HEAD_BYTES..]), Some(ops));
        assert_eq!(
            decode_body(&bytes[RECORD_HEAD_BYTES..bytes.len() - 1]),
            None
        );
    }
}
