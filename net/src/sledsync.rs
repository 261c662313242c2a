//! Durable flushes of meta.db.
//!
//! sled 0.34's `Db::flush` is not a durable write on Linux: it writes its log
//! with `pwrite` and `sync_file_range` (sled `pagecache/iobuf.rs`), which
//! neither flushes the device's volatile write cache nor commits the file's
//! size when the log grew; only its flusher thread calls `fsync`, every
//! 500 ms (sled `flusher.rs`). Values too large for a log buffer go to
//! `blobs/<lsn>` files that are written and never synced (`blob_io.rs`).
//! sled knows (spacejam/sled#1351, #1452, open). The core treats a
//! `MetaDone { Ok }` as durable, so after sled's flush we `fdatasync` its log
//! file ourselves and `fdatasync` every blob file not yet synced, then the
//! blob directory that names them. A power cut can then lose nothing that
//! was answered.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use doze_core::IoError;

use crate::datadir::sync_dir;

/// sled's files inside its directory (sled `config.rs`: `db_path`, `blob_path`).
const LOG_FILE: &str = "db";
const BLOB_DIR: &str = "blobs";

/// Makes sled's flushes durable for one open `sled::Db` at `dir`.
pub struct DurableSled {
    dir: PathBuf,
    log: File,
    /// Blob files already synced; a blob is written once and never changed.
    blobs_synced: HashSet<OsString>,
    /// How long sled's own flush took, the last time (for the debug log).
    last_sled_flush_us: u64,
}

impl DurableSled {
    /// For the `sled::Db` open at `dir`. Syncs `dir` itself once: sled
    /// creates its files but not durably their entries.
    pub fn open(dir: &Path) -> io::Result<Self> {
        let log = File::open(dir.join(LOG_FILE))?;
        sync_dir(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            log,
            blobs_synced: HashSet::new(),
            last_sled_flush_us: 0,
        })
    }

    /// sled's flush, then what it leaves to the page cache.
    pub fn flush(&mut self, db: &sled::Db) -> Result<(), IoError> {
        let started = std::time::Instant::now();
        db.flush()
            .map_err(|e| IoError(format!("meta.db flush: {e}")))?;
        self.last_sled_flush_us = started.elapsed().as_micros() as u64;
        self.log
            .sync_data()
            .map_err(|e| IoError(format!("meta.db fdatasync: {e}")))?;
        self.sync_new_blobs()
            .map_err(|e| IoError(format!("meta.db blobs: {e}")))
    }

    fn sync_new_blobs(&mut self) -> io::Result<()> {
        let blob_dir = self.dir.join(BLOB_DIR);
        let entries = match fs::read_dir(&blob_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut present = HashSet::new();
        let mut new = false;
        for entry in entries {
            let name = entry?.file_name();
            if !self.blobs_synced.contains(&name) {
                match File::open(blob_dir.join(&name)) {
                    Ok(file) => file.sync_data()?,
                    // Removed by sled since the listing: nothing to keep.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
                new = true;
            }
            present.insert(name);
        }
        if new {
            sync_dir(&blob_dir)?;
        }
        // Forget removed blobs, so the set stays as small as the directory.
        self.blobs_synced = present;
        Ok(())
    }

    pub fn last_sled_flush_us(&self) -> u64 {
        self.last_sled_flush_us
    }

    /// Blob files synced so far (for tests).
    pub fn blobs_synced(&self) -> usize {
        self.blobs_synced.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_too_large_for_the_log_lands_in_a_synced_blob() {
        let dir = std::env::temp_dir().join(format!("doze-sledsync-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let db = sled::open(&dir).unwrap();
        let mut durable = DurableSled::open(&dir).unwrap();
        db.insert(b"small", &b"1"[..]).unwrap();
        durable.flush(&db).unwrap();
        assert_eq!(durable.blobs_synced(), 0, "a small value stays in the log");

        // sled puts an item over a quarter of its 512 KiB segment in a blob.
        db.insert(b"large", vec![7u8; 256 * 1024]).unwrap();
        durable.flush(&db).unwrap();
        let blobs = fs::read_dir(dir.join(BLOB_DIR)).unwrap().count();
        assert!(blobs >= 1, "sled wrote the large value to a blob file");
        assert_eq!(durable.blobs_synced(), blobs);
        drop(db);
        let _ = fs::remove_dir_all(&dir);
    }
}
