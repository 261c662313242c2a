//! What the server needs from storage, so that the same server runs on real
//! files (production) and on a simulated store (madsim tests).
//!
//! The contract is the core's (`doze_core::io`): disk ops are carried out
//! strictly in the order submitted; a `DiskOp::Sync` is answered with
//! `Input::SyncDone` once everything submitted before it is durable; a meta
//! batch is applied atomically and answered with `Input::MetaDone` once it is
//! durable. Completions go to the broker task's completion channel. Submitting
//! never blocks the broker task.

use std::future::Future;
use std::pin::Pin;

use doze_core::{DiskOp, Input, IoError};
use tokio::sync::mpsc::UnboundedSender;

use crate::metadb::MetaWrite;

#[cfg(not(madsim))]
pub use self::production::{DiskAndSled, Workers};

/// Resolves once the storage has carried out everything submitted before the
/// queue was dropped and made it durable; an error means it may not be.
pub type Finished = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// A storage before it starts: `serve` starts it once, before the core boots.
pub trait Storage {
    type Queue: StorageQueue;

    /// Starts the workers. Completions go to `completions`. Dropping the
    /// returned queue tells the workers to finish; the future says when they
    /// have (it does nothing until polled).
    fn start(self, completions: UnboundedSender<Input>) -> anyhow::Result<(Self::Queue, Finished)>;
}

/// The broker task's end of a started storage.
pub trait StorageQueue: Send + 'static {
    /// Queues one disk op, in order. Fails only if the storage is gone, after
    /// which nothing can be made durable.
    fn submit_disk(&self, op: DiskOp) -> Result<(), IoError>;
    /// Queues one meta.db batch. Fails only if the storage is gone.
    fn submit_meta(&self, write: MetaWrite) -> Result<(), IoError>;
}

// Not in a madsim build: madsim forbids OS threads, and its stand-in is
// `simstore::SimStorage`.
#[cfg(not(madsim))]
mod production {
    use std::path::PathBuf;

    use anyhow::{anyhow, Context};
    use doze_core::{DiskOp, Input, IoError};
    use tokio::sync::mpsc::UnboundedSender;

    use super::{Finished, Storage, StorageQueue};
    use crate::disk::{DiskQueue, DiskWorker};
    use crate::metadb::{MetaQueue, MetaWorker, MetaWrite};

    /// Production storage: segment files under `logs_dir` written by the disk
    /// worker thread (`disk.rs`), and meta.db (sled) owned by the meta worker
    /// thread (`metadb.rs`).
    pub struct DiskAndSled {
        pub logs_dir: PathBuf,
        pub db: sled::Db,
    }

    pub struct Workers {
        disk: DiskQueue,
        meta: MetaQueue,
    }

    impl StorageQueue for Workers {
        fn submit_disk(&self, op: DiskOp) -> Result<(), IoError> {
            self.disk.submit(op)
        }

        fn submit_meta(&self, write: MetaWrite) -> Result<(), IoError> {
            self.meta.submit(write)
        }
    }

    impl Storage for DiskAndSled {
        type Queue = Workers;

        fn start(self, completions: UnboundedSender<Input>) -> anyhow::Result<(Workers, Finished)> {
            let (disk, disk_thread) = DiskWorker::spawn(self.logs_dir, completions.clone())
                .context("cannot start the disk worker")?
                .into_parts();
            let (meta, meta_thread) = MetaWorker::spawn(self.db, completions)
                .context("cannot start the meta worker")?
                .into_parts();
            let finished: Finished = Box::pin(async move {
                // Once the queues are dropped the workers finish what was queued,
                // sync or flush it, and stop. Joined off the async threads.
                let (disk_result, meta_result) =
                    tokio::task::spawn_blocking(move || (disk_thread.join(), meta_thread.join()))
                        .await
                        .context("cannot join the workers")?;
                let disk_result = disk_result.map_err(|_| anyhow!("the disk worker panicked"))?;
                let meta_result = meta_result.map_err(|_| anyhow!("the meta worker panicked"))?;
                disk_result.map_err(|e| anyhow!("final disk sync failed: {}", e.0))?;
                meta_result.map_err(|e| anyhow!("final meta.db flush failed: {}", e.0))?;
                Ok(())
            });
            Ok((Workers { disk, meta }, finished))
        }
    }
}
