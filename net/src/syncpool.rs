//! Threads that fdatasync the files of one group-commit round together.
//!
//! Run together, the file system commits its journal once for the lot (ext4's
//! jbd2 joins concurrent commits), so a round of many files costs about one
//! fdatasync; one after the other, 12–30 fdatasyncs took 12–70 ms on a disk
//! where one takes 0.3–4 ms (`make bench`, 64 transactional producers). The
//! threads live as long as the disk worker: spawning them per round cost
//! tens of microseconds each, on every commit of a transaction (a round
//! there is a partition's `.log`, `.index` and `.timeindex`).

use std::fs::File;
use std::io;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;

/// Threads of the pool; with the caller's own, this many files are synced
/// at once.
pub const SYNC_THREADS_MAX: usize = 16;

struct Job {
    index: usize,
    file: File,
    /// fsync (a directory: its entries) rather than fdatasync.
    full: bool,
    done: mpsc::Sender<(usize, io::Result<()>)>,
}

/// One file's sync: fsync when `full`, else fdatasync.
fn sync(file: &File, full: bool) -> io::Result<()> {
    if full {
        file.sync_all()
    } else {
        file.sync_data()
    }
}

pub struct SyncPool {
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl SyncPool {
    /// Starts `SYNC_THREADS_MAX - 1` threads; they stop when the pool is dropped.
    pub fn start() -> io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for n in 1..SYNC_THREADS_MAX {
            let queue = Arc::clone(&queue);
            thread::Builder::new()
                .name(format!("doze-fsync-{n}"))
                .spawn(move || loop {
                    // The lock is held while waiting: one idle thread waits
                    // on the queue, the others on the lock.
                    let job = match queue.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                        Ok(job) => job,
                        Err(_) => return, // the pool is gone
                    };
                    let result = sync(&job.file, job.full);
                    // The round waits for every answer; it is gone only if
                    // its thread panicked.
                    let _ = job.done.send((job.index, result));
                })?;
        }
        Ok(Self {
            jobs: Mutex::new(jobs),
        })
    }

    /// fdatasyncs every file, up to `SYNC_THREADS_MAX` at once (one on the
    /// calling thread), and returns each one's result in order.
    pub fn sync_all(&self, files: &[&File]) -> Vec<io::Result<()>> {
        self.run(files, false)
    }

    /// fsyncs every directory (opened by the caller), as `sync_all` does
    /// files: one after the other, 10,001 directories took 1.2-2.0 s of a
    /// start-up with 10,000 partitions (`make bench`, section 9).
    pub fn fsync_dirs(&self, dirs: &[&File]) -> Vec<io::Result<()>> {
        self.run(dirs, true)
    }

    fn run(&self, files: &[&File], full: bool) -> Vec<io::Result<()>> {
        let mut results: Vec<Option<io::Result<()>>> = files.iter().map(|_| None).collect();
        let Some((first, rest)) = files.split_first() else {
            return Vec::new();
        };
        let (done, answers) = mpsc::channel();
        let mut sent = 0;
        {
            let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
            for (i, file) in rest.iter().enumerate() {
                let index = i + 1;
                // A duplicate descriptor: the job owns it, the round keeps its own.
                match file.try_clone() {
                    Ok(file) => {
                        let job = Job {
                            index,
                            file,
                            full,
                            done: done.clone(),
                        };
                        match jobs.send(job) {
                            Ok(()) => sent += 1,
                            Err(mpsc::SendError(job)) => {
                                results[index] = Some(sync(&job.file, full));
                            }
                        }
                    }
                    Err(e) => results[index] = Some(Err(e)),
                }
            }
        }
        drop(done);
        results[0] = Some(sync(first, full));
        for _ in 0..sent {
            match answers.recv() {
                Ok((index, result)) => results[index] = Some(result),
                Err(_) => break, // a pool thread died: its files report below
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(io::Error::other("an fdatasync thread panicked"))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn every_file_is_synced_and_answered_in_order() {
        let dir = std::env::temp_dir().join(format!("doze-syncpool-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pool = SyncPool::start().unwrap();
        // More files than threads: some threads take several.
        let files: Vec<File> = (0..40)
            .map(|i| {
                let mut f = File::create(dir.join(format!("f{i}"))).unwrap();
                f.write_all(b"x").unwrap();
                f
            })
            .collect();
        let refs: Vec<&File> = files.iter().collect();
        let results = pool.sync_all(&refs);
        assert_eq!(results.len(), 40);
        assert!(results.iter().all(|r| r.is_ok()));
        assert!(pool.sync_all(&[]).is_empty());
        // A descriptor that is not open cannot be synced: an error comes
        // back in its place, and the others are still synced.
        let bad = {
            use std::os::fd::FromRawFd;
            // SAFETY: never closed (ManuallyDrop), and no process here opens
            // a million files, so every use fails with EBADF.
            std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(1_000_000) })
        };
        let refs: Vec<&File> = vec![&files[0], &bad, &files[1]];
        let results = pool.sync_all(&refs);
        assert!(results[0].is_ok() && results[2].is_ok());
        assert!(results[1].is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
