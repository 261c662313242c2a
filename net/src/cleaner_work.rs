//! The log cleaner's thread: runs the core's `Output::Clean` jobs
//! (`doze_core::log::clean::work::run`) off the broker task and off the disk
//! worker, so neither a client nor an fsync waits for a pass to map or
//! rebuild a segment (Kafka's LogCleaner runs on threads of its own too,
//! log.cleaner.threads, 1 by default). The core keeps one job in flight, so
//! one thread does; its memory is the job's bounded buffers
//! (`limits::CLEANER_IO_BUFFER_BYTES`).
//!
//! The disk worker opens a job's two files when it reaches the op, in order
//! with the ops before it (`disk.rs`), and hands descriptors over: what the
//! job reads is what those ops left, and a segment deleted or a copy
//! discarded meanwhile is one the job still holds open, harmlessly (the core
//! discards or ignores what it wrote). The copy's writes are made durable by
//! the sync the core asks for after the completion: the swap's first step
//! appends to the copy's `.log` again (`CleanedSegment::finish`), which marks
//! the worker's descriptor of it dirty, and its fdatasync covers every write
//! to the file, this thread's included.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread;

use crate::storage::Completions;
use bytes::Bytes;
use doze_core::log::clean::work::{self, CleanerFiles, CleanerWork};
use doze_core::{Input, IoError, IoId};

/// A job with its files open.
pub struct CleanerJob {
    pub io: IoId,
    pub work: CleanerWork,
    pub files: OpenCleanerFiles,
}

/// The segment's live `.log` (read) and its `.log.cleaned` copy (appended
/// to), with their paths for the errors.
pub struct OpenCleanerFiles {
    pub source: File,
    pub source_path: PathBuf,
    pub target: File,
    pub target_path: PathBuf,
}

impl CleanerFiles for OpenCleanerFiles {
    fn read(&mut self, position: u64, len: u64) -> Result<Bytes, IoError> {
        let failed = |e: io::Error| {
            IoError(format!(
                "cannot read {len} bytes at {position} of {}: {e}",
                self.source_path.display()
            ))
        };
        let len = usize::try_from(len).map_err(|_| IoError("a read too large".into()))?;
        let mut bytes = vec![0; len];
        self.source
            .read_exact_at(&mut bytes, position)
            .map_err(failed)?;
        Ok(Bytes::from(bytes))
    }

    fn append_cleaned(&mut self, bytes: Bytes) -> Result<(), IoError> {
        // Opened in append mode by the disk worker: every write lands at the end.
        self.target.write_all(&bytes).map_err(|e| {
            IoError(format!(
                "cannot append to {}: {e}",
                self.target_path.display()
            ))
        })
    }
}

/// The thread; it stops when this is dropped.
pub struct CleanerThread {
    jobs: mpsc::Sender<CleanerJob>,
}

impl CleanerThread {
    /// Starts the thread; completions go to `completions`.
    pub fn start(completions: Completions) -> io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<CleanerJob>();
        thread::Builder::new()
            .name("doze-cleaner".into())
            .spawn(move || {
                while let Ok(CleanerJob {
                    io,
                    work,
                    mut files,
                }) = queue.recv()
                {
                    let outcome = work::run(work, &mut files);
                    // The broker task is gone only during shutdown.
                    let _ = completions.send(Input::CleanerDone { io, outcome });
                }
            })?;
        Ok(Self { jobs })
    }

    /// Queues a job behind the one running, if any.
    pub fn run(&self, job: CleanerJob) {
        // The thread never stops first but by a panic, which the job's
        // missing completion then shows (the pass waits for good).
        let _ = self.jobs.send(job);
    }
}
