//! The meta worker: applies the core's meta.db batches on a dedicated OS
//! thread that owns the `sled::Db`.
//!
//! Each `Output::Meta` becomes one `sled::Batch` (atomic), and is answered
//! with `MetaDone` only after it is durable (`Db::flush` and the fdatasyncs
//! sled leaves out, `sledsync.rs`). As with the
//! disk worker, batches already queued are applied before one flush that
//! covers them all (group commit): a flush writes sled's whole log buffer, so
//! one flush for ten batches costs about as much as one for one.
//!
//! A batch that sled refuses is answered `Err` and is not in the database. A
//! batch that was applied but whose flush failed is answered `Err` too, though
//! sled may still write it later; the core must not rely on it either way, and
//! after a crash it reads back whatever did reach the disk.

use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use doze_core::{Input, IoError, IoId, MetaOp};
use tokio::sync::mpsc::UnboundedSender;
use tracing::{debug, info, warn};

use crate::sledsync::DurableSled;

/// Batches applied in one round before its flush, so that a queue that never
/// empties still gets answered.
const ROUND_BATCHES_MAX: usize = 1024;

/// One `Output::Meta`.
pub struct MetaWrite {
    pub io: IoId,
    pub ops: Vec<MetaOp>,
}

pub struct MetaWorker {
    writes: mpsc::Sender<MetaWrite>,
    thread: thread::JoinHandle<Result<(), IoError>>,
}

impl MetaWorker {
    /// `db` is open at `dir`.
    pub fn spawn(
        db: sled::Db,
        dir: &Path,
        completions: UnboundedSender<Input>,
    ) -> std::io::Result<Self> {
        let durable = DurableSled::open(dir)?;
        let (writes, queue) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("doze-meta".into())
            .spawn(move || run(db, durable, queue, completions))?;
        Ok(Self { writes, thread })
    }

    /// Splits into the queue (for the broker task) and the thread (for the
    /// shutdown). Dropping the queue tells the worker to flush and stop.
    pub fn into_parts(self) -> (MetaQueue, thread::JoinHandle<Result<(), IoError>>) {
        (MetaQueue(self.writes), self.thread)
    }
}

/// The broker task's end of the worker's queue.
pub struct MetaQueue(mpsc::Sender<MetaWrite>);

impl MetaQueue {
    /// Fails only if the worker thread is gone (it panicked).
    pub fn submit(&self, write: MetaWrite) -> Result<(), IoError> {
        self.0
            .send(write)
            .map_err(|_| IoError("the meta.db worker has stopped".into()))
    }
}

fn run(
    db: sled::Db,
    mut durable: DurableSled,
    queue: mpsc::Receiver<MetaWrite>,
    completions: UnboundedSender<Input>,
) -> Result<(), IoError> {
    while let Ok(first) = queue.recv() {
        let started = Instant::now();
        // Each batch with the result of applying it, before the flush.
        let mut round = vec![(first.io, apply(&db, first.ops))];
        while round.len() < ROUND_BATCHES_MAX {
            match queue.try_recv() {
                Ok(write) => round.push((write.io, apply(&db, write.ops))),
                Err(_) => break,
            }
        }
        let applied_us = started.elapsed().as_micros() as u64;
        let flushed = flush(&db, &mut durable);
        debug!(
            batches = round.len(),
            applied_us,
            sled_flush_us = durable.last_sled_flush_us(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "meta.db flushed"
        );
        for (io, applied) in round {
            let result = applied.and_then(|()| flushed.clone());
            // The broker task is gone only during shutdown.
            let _ = completions.send(Input::MetaDone { io, result });
        }
    }
    // The queue closed: the broker is shutting down.
    let result = flush(&db, &mut durable);
    match &result {
        Ok(()) => info!("meta worker: meta.db flushed"),
        Err(e) => warn!(error = %e.0, "meta worker: final flush failed"),
    }
    result
}

fn apply(db: &sled::Db, ops: Vec<MetaOp>) -> Result<(), IoError> {
    let mut batch = sled::Batch::default();
    for op in ops {
        match op {
            MetaOp::Put { key, value } => batch.insert(key, value),
            MetaOp::Delete { key } => batch.remove(key),
        }
    }
    db.apply_batch(batch).map_err(|e| {
        warn!(error = %e, "meta.db batch failed");
        IoError(format!("meta.db batch: {e}"))
    })
}

fn flush(db: &sled::Db, durable: &mut DurableSled) -> Result<(), IoError> {
    durable.flush(db).inspect_err(|e| {
        warn!(error = %e.0, "meta.db flush failed");
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    #[test]
    fn batches_are_applied_and_answered_in_order() {
        let path = std::env::temp_dir().join(format!("doze-meta-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        let db = sled::open(&path).unwrap();
        let (tx, mut done) = unbounded_channel();
        let (queue, thread) = MetaWorker::spawn(db, &path, tx).unwrap().into_parts();
        let put = |k: &[u8], v: &[u8]| MetaOp::Put {
            key: k.to_vec(),
            value: v.to_vec(),
        };
        queue
            .submit(MetaWrite {
                io: 1,
                ops: vec![put(b"a", b"1"), put(b"b", b"2")],
            })
            .unwrap();
        queue
            .submit(MetaWrite {
                io: 2,
                ops: vec![MetaOp::Delete { key: b"a".to_vec() }],
            })
            .unwrap();
        for want in 1..=2 {
            match done.blocking_recv() {
                Some(Input::MetaDone { io, result }) => assert_eq!((io, result), (want, Ok(()))),
                _ => panic!("expected MetaDone {want}"),
            }
        }
        drop(queue);
        assert_eq!(thread.join().unwrap(), Ok(()));

        // sled releases its file lock from a background thread after the
        // last handle drops; reopening may race it, so wait for the lock.
        let reopened = (0..100).find_map(|_| {
            sled::open(&path).ok().or_else(|| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                None
            })
        });
        let db = reopened.expect("meta.db reopens within 5 s");
        assert!(db.get(b"a").unwrap().is_none());
        assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
        drop(db);
        std::fs::remove_dir_all(&path).unwrap();
    }
}
