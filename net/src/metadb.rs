//! The meta worker: stores the core's meta.db batches on a dedicated OS
//! thread that owns meta.db (`metastore.rs`).
//!
//! Each `Output::Meta` is one atomic batch, answered with `MetaDone` only
//! once it is durable: in the journal (one fdatasync, `metajournal.rs`),
//! which a checkpoint later empties into sled. As with the disk worker, batches
//! already queued are written together with one fdatasync (group commit).
//!
//! A batch that could not be stored is answered `Err`; it may still have
//! reached the disk, and the core must not rely on it either way: after a
//! crash it reads back whatever did.

use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use crate::storage::Completions;
use doze_core::{Input, IoError, IoId, MetaOp};
use tracing::{debug, info, warn};

use crate::metastore::{MetaStore, Stored};

/// Batches stored in one round, so that a queue that never empties still
/// gets answered.
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
    pub fn spawn(store: MetaStore, completions: Completions) -> std::io::Result<Self> {
        let (writes, queue) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("doze-meta".into())
            .spawn(move || run(store, queue, completions))?;
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
    mut store: MetaStore,
    queue: mpsc::Receiver<MetaWrite>,
    completions: Completions,
) -> Result<(), IoError> {
    while let Ok(first) = queue.recv() {
        let started = Instant::now();
        let mut round = vec![first];
        while round.len() < ROUND_BATCHES_MAX {
            match queue.try_recv() {
                Ok(write) => round.push(write),
                Err(_) => break,
            }
        }
        let count = round.len();
        let batches: Vec<&[MetaOp]> = round.iter().map(|w| w.ops.as_slice()).collect();
        let stored = store.store(&batches);
        let stored_us = started.elapsed().as_micros() as u64;
        let journaled = matches!(stored, Ok(Stored::Journaled));
        let results = match stored {
            Ok(Stored::Journaled) => vec![Ok(()); round.len()],
            Ok(Stored::Flushed(results)) => results,
            Err(e) => vec![Err(e); round.len()],
        };
        // Handed to the core here (`Completions::deliver`): what waited
        // for the write goes on without a trip through the broker task.
        for (write, result) in round.iter().zip(results) {
            let _ = completions.deliver(Input::MetaDone {
                io: write.io,
                result,
            });
        }
        if journaled {
            store.apply_journaled(round.into_iter().map(|w| w.ops).collect());
        }
        debug!(
            batches = count,
            journaled,
            stored_us,
            elapsed_us = started.elapsed().as_micros() as u64,
            "meta.db stored"
        );
    }
    // The queue closed: the broker is shutting down.
    let result = store.checkpoint();
    match &result {
        Ok(()) => info!("meta worker: meta.db flushed"),
        Err(e) => warn!(error = %e.0, "meta worker: final flush failed"),
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    #[test]
    fn batches_are_applied_and_answered_in_order() {
        let root = std::env::temp_dir().join(format!("doze-meta-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let data = crate::datadir::DataDir::open(&root).unwrap();
        let store = MetaStore::open(&data).unwrap();
        let (tx, mut done) = unbounded_channel();
        let (queue, thread) = MetaWorker::spawn(store, tx.into()).unwrap().into_parts();
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

        // A clean stop checkpoints: sled itself holds both batches. sled
        // releases its file lock from a background thread after the last
        // handle drops; `open_sled` waits for it.
        let db = crate::metastore::open_sled(&data.meta_db_path()).unwrap();
        assert!(db.get(b"a").unwrap().is_none());
        assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
        drop(db);
        drop(data);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
