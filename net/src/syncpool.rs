//! Threads that fdatasync the files of one group-commit round together.
//!
//! Run together, the file system commits its journal once for the lot (ext4's
//! jbd2 joins concurrent commits), so a round of many files costs about one
//! fdatasync; one after the other, 12–30 fdatasyncs took 12–70 ms on a disk
//! where one takes 0.3–4 ms (`make bench`, 64 transactional producers). The
//! threads live as long as the disk worker: spawning them per round cost
//! tens of microseconds each, on every commit of a transaction (a round
//! there is a partition's `.log`, `.index` and `.timeindex`).
//!
//! Each thread has a queue of its own, and a round hands its files to the
//! threads directly, so they all wake at once. With one queue shared behind
//! a lock, the threads woke one after the other (each took a job, let go of
//! the lock, and only then could the next one take its own): with the two
//! cores busy (`make bench`'s paced produce, four confluent-kafka client
//! processes beside the broker), the last file of a round of eight started
//! its fdatasync 0.6 ms after the first at the median, 7–17 ms at p90 and
//! 31–56 ms at p99, and every produce of the round waited for it.

use std::fs::File;
use std::io;
use std::sync::mpsc;
use std::sync::Mutex;
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
    /// One queue per thread. The lock is held only while a round hands its
    /// files out (rounds come from the disk worker or its syncer, one at a
    /// time); the pool is shared between those two threads.
    threads: Mutex<Vec<mpsc::Sender<Job>>>,
}

impl SyncPool {
    /// Starts `SYNC_THREADS_MAX - 1` threads; they stop when the pool is dropped.
    pub fn start() -> io::Result<Self> {
        let mut threads = Vec::with_capacity(SYNC_THREADS_MAX - 1);
        for n in 1..SYNC_THREADS_MAX {
            let (jobs, queue) = mpsc::channel::<Job>();
            thread::Builder::new()
                .name(format!("doze-fsync-{n}"))
                .spawn(move || {
                    // Ends when the pool is gone.
                    while let Ok(job) = queue.recv() {
                        let result = sync(&job.file, job.full);
                        // The round waits for every answer; it is gone only
                        // if its thread panicked.
                        let _ = job.done.send((job.index, result));
                    }
                })?;
            threads.push(jobs);
        }
        Ok(Self {
            threads: Mutex::new(threads),
        })
    }

    /// fdatasyncs every file, up to `SYNC_THREADS_MAX` at once (one on the
    /// calling thread), and returns each one's result in order. Past that
    /// many files, a thread takes several, one after the other.
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
            let threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
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
                        match threads[i % threads.len()].send(job) {
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
