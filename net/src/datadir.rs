//! The data directory: its layout, and the lock that keeps it to one broker.
//!
//! ```text
//! <data>/LOCK                                   flock'd while a broker runs
//! <data>/meta.db/                               sled
//! <data>/meta.journal                           meta.db's journal (metajournal.rs)
//! <data>/logs/<topic>-<partition>/<base>.log    segment files, each with
//!                                  <base>.index, .timeindex, .txnindex beside it
//!                                  and, while the cleaner replaces it, the same
//!                                  names + .cleaned (being written) or + .swap
//! ```
//!
//! Two brokers on one directory would interleave appends and each believe its
//! own view of the logs, so the lock is taken before anything is read and held
//! until the process has stopped writing.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use doze_core::io::{FileStage, SegmentFile};
use doze_core::{IoError, PartitionDir};

pub struct DataDir {
    root: PathBuf,
    /// Held, never read: the flock lives as long as this open file.
    _lock: File,
}

impl DataDir {
    /// Creates the directory if needed, locks it and makes sure `logs/` exists
    /// durably. Fails with a one-line reason if any of that is impossible.
    pub fn open(root: &Path) -> anyhow::Result<Self> {
        // Directories created here must survive a power cut along with the
        // data synced into them later, so each new one's entry is synced too.
        let missing: Vec<&Path> = root
            .ancestors()
            .take_while(|dir| !dir.as_os_str().is_empty() && !dir.exists())
            .collect();
        fs::create_dir_all(root)
            .with_context(|| format!("cannot create data dir {}", root.display()))?;
        for dir in missing {
            let parent = parent_dir(dir);
            sync_dir(parent).with_context(|| format!("cannot fsync {}", parent.display()))?;
        }
        let lock_path = root.join("LOCK");
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .with_context(|| format!("cannot open {}", lock_path.display()))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(anyhow!(
                    "data dir {} is in use by another doze-kafka process (lock on {})",
                    root.display(),
                    lock_path.display()
                ));
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", lock_path.display()));
            }
        }
        // The holder's pid, for an operator wondering who has the dir. Writing
        // it also proves the directory is writable before we go further.
        lock.set_len(0)
            .and_then(|()| writeln!(lock, "{}", std::process::id()))
            .with_context(|| format!("cannot write {}", lock_path.display()))?;

        let dir = Self {
            root: root.to_path_buf(),
            _lock: lock,
        };
        let logs = dir.logs_dir();
        if !logs.is_dir() {
            fs::create_dir_all(&logs)
                .with_context(|| format!("cannot create {}", logs.display()))?;
            // The disk worker only fsyncs directories below logs/; the entry of
            // logs/ itself becomes durable here.
            sync_dir(root).with_context(|| format!("cannot fsync {}", root.display()))?;
        }
        // A process that died may have removed a deleted topic's partition
        // directories with no fsync of logs/ after. The listing does not
        // show them, so nothing in this process would ever make their
        // removal durable, and a topic created again under the same name
        // could meet their files after a power cut. Made durable here,
        // before anything is listed.
        sync_dir(&logs).with_context(|| format!("cannot fsync {}", logs.display()))?;
        Ok(dir)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn meta_db_path(&self) -> PathBuf {
        self.root.join("meta.db")
    }

    pub fn meta_journal_path(&self) -> PathBuf {
        self.root.join("meta.journal")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }
}

/// The directory holding `path`'s entry (`.` for a bare relative name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// A partition's directory under `logs`. A name that could leave `logs/` is
/// refused here, whatever validated it before: the disk worker runs
/// `remove_dir_all` on this path.
pub fn partition_path(logs: &Path, dir: &PartitionDir) -> Result<PathBuf, IoError> {
    let name = dir.dir_name();
    if name.contains(['/', '\\', '\0']) {
        return Err(IoError(format!(
            "refusing partition directory name {name:?}"
        )));
    }
    Ok(logs.join(name))
}

/// One file of a segment, under `logs`.
pub fn segment_path(
    logs: &Path,
    dir: &PartitionDir,
    segment_base: i64,
    file: SegmentFile,
) -> Result<PathBuf, IoError> {
    staged_path(logs, dir, segment_base, file, FileStage::Live)
}

/// One file of a segment under one of its names: live, or the cleaner's
/// `.cleaned` and `.swap` copies.
pub fn staged_path(
    logs: &Path,
    dir: &PartitionDir,
    segment_base: i64,
    file: SegmentFile,
    stage: FileStage,
) -> Result<PathBuf, IoError> {
    Ok(partition_path(logs, dir)?.join(stage.file_name(file, segment_base)))
}

/// Makes a directory's entries (created, renamed, removed files) durable.
pub fn sync_dir(path: &Path) -> std::io::Result<()> {
    File::open(path)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_open_of_a_locked_dir_fails() {
        let root = std::env::temp_dir().join(format!("doze-datadir-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let first = DataDir::open(&root).unwrap();
        assert!(first.logs_dir().is_dir());
        let err = DataDir::open(&root)
            .err()
            .expect("a locked dir opens twice");
        assert!(err.to_string().contains("in use"), "{err}");
        drop(first);
        // Released with the first handle.
        drop(DataDir::open(&root).unwrap());
        fs::remove_dir_all(&root).unwrap();
    }
}
