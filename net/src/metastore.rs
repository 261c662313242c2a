//! meta.db as the driver keeps it: sled, whose flushes `sledsync.rs` makes
//! durable, behind the journal of `metajournal.rs`, which makes a write
//! durable with one fdatasync.
//!
//! Whatever opens meta.db opens it here (start-up, `doze-kafka users`), so
//! that the journal is replayed into sled before anyone reads sled or writes
//! it directly: a change made offline must not be overwritten by an older
//! journal record at the next start.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use doze_core::limits::{META_DB_APPLY_OPS_MAX, META_DB_CACHE_BYTES};
use doze_core::{IoError, MetaOp};
use tracing::warn;

use crate::datadir::{sync_dir, DataDir};
use crate::metajournal::{AppendError, Journal};
use crate::sledsync::DurableSled;

pub struct MetaStore {
    db: sled::Db,
    durable: DurableSled,
    journal: Journal,
    path: PathBuf,
    /// What the journal holds and sled does not yet, by key (`None`: deleted),
    /// applied to sled at the next checkpoint. Applying each round to sled
    /// as it comes would cost sled's per-batch work (tens of µs) on every
    /// write; here a key rewritten a thousand times between checkpoints (a
    /// transactional id's state) reaches sled once. Bounded by the journal.
    pending: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Set when the journaled writes could not be applied to sled: the
    /// journal then holds writes sled lacks, so it is never reset again and
    /// every later write fails (start-up replays it).
    failed: Option<IoError>,
}

/// How `store` made a round durable.
pub enum Stored {
    /// In the journal: answer, then `apply_journaled`.
    Journaled,
    /// Applied to sled and flushed (a round larger than the journal), with
    /// each batch's result.
    Flushed(Vec<Result<(), IoError>>),
}

impl MetaStore {
    /// Opens meta.db in `data`, replays its journal into it and checkpoints.
    pub fn open(data: &DataDir) -> anyhow::Result<MetaStore> {
        let path = data.meta_db_path();
        let fresh = !path.exists();
        let db = open_sled(&path).with_context(|| format!("cannot open {}", path.display()))?;
        if fresh {
            // meta.db's own entry in ours (its files: sledsync.rs).
            sync_dir(data.root())
                .with_context(|| format!("cannot fsync {}", data.root().display()))?;
        }
        let journal_path = data.meta_journal_path();
        let (journal, replay) = Journal::open(&journal_path)
            .with_context(|| format!("cannot read {}", journal_path.display()))?;
        let replayed = replay.len();
        for ops in replay {
            apply(&db, ops).map_err(|e| anyhow::anyhow!(e.0))?;
        }
        let durable = DurableSled::open(&path)?;
        let mut store = MetaStore {
            db,
            durable,
            journal,
            path,
            pending: BTreeMap::new(),
            failed: None,
        };
        // What a crashed process wrote to sled but never flushed may still
        // sit in the page cache, where sled reads it back; the core treats
        // meta.db as durable, so make it so before handing it over.
        store
            .checkpoint()
            .map_err(|e| anyhow::anyhow!(e.0))
            .with_context(|| format!("cannot flush {}", store.path.display()))?;
        tracing::info!(replayed, "meta.db open");
        Ok(store)
    }

    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// Makes `round` durable, in order.
    pub fn store(&mut self, round: &[&[MetaOp]]) -> Result<Stored, IoError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.journal.append(round) {
            Ok(()) => return Ok(Stored::Journaled),
            Err(AppendError::Io(e)) => return Err(IoError(format!("meta.db journal: {e}"))),
            Err(AppendError::Full) => {}
        }
        self.checkpoint()?;
        match self.journal.append(round) {
            Ok(()) => Ok(Stored::Journaled),
            Err(AppendError::Io(e)) => Err(IoError(format!("meta.db journal: {e}"))),
            Err(AppendError::Full) => {
                // Larger than an empty journal: sled's own durable flush.
                let results: Vec<_> = round
                    .iter()
                    .map(|ops| apply(&self.db, ops.to_vec()))
                    .collect();
                let flushed = self.durable.flush(&self.db);
                Ok(Stored::Flushed(
                    results
                        .into_iter()
                        .map(|r| r.and_then(|()| flushed.clone()))
                        .collect(),
                ))
            }
        }
    }

    /// Takes a journaled round in for the next checkpoint.
    pub fn apply_journaled(&mut self, round: Vec<Vec<MetaOp>>) {
        for op in round.into_iter().flatten() {
            match op {
                MetaOp::Put { key, value } => self.pending.insert(key, Some(value)),
                MetaOp::Delete { key } => self.pending.insert(key, None),
            };
        }
    }

    /// Applies what the journal holds to sled, flushes sled durably and
    /// empties the journal.
    pub fn checkpoint(&mut self) -> Result<(), IoError> {
        if !self.pending.is_empty() && self.failed.is_none() {
            let ops = std::mem::take(&mut self.pending)
                .into_iter()
                .map(|(key, value)| match value {
                    Some(value) => MetaOp::Put { key, value },
                    None => MetaOp::Delete { key },
                })
                .collect();
            if let Err(e) = apply_in_chunks(&self.db, ops) {
                self.failed = Some(e);
            }
        }
        self.durable.flush(&self.db)?;
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.journal
            .reset()
            .map_err(|e| IoError(format!("meta.db journal reset: {e}")))
    }

    /// How long sled's own flush took, the last time (for the debug log).
    pub fn last_sled_flush_us(&self) -> u64 {
        self.durable.last_sled_flush_us()
    }
}

/// sled releases its file lock from a background thread after the last
/// handle of an earlier open in this process drops (`doze-kafka users add`
/// run twice in one test, a start right after a stop). The data dir's lock
/// already keeps other processes out, so a held sled lock is that thread
/// about to let go: wait for it, up to 5 s.
pub(crate) fn open_sled(path: &std::path::Path) -> sled::Result<sled::Db> {
    let mut attempts = 0;
    loop {
        let config = sled::Config::new()
            .path(path)
            .cache_capacity(META_DB_CACHE_BYTES);
        match config.open() {
            // sled wraps the flock failure as ErrorKind::Other (its config.rs).
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock") && attempts < 100 =>
            {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// Applies a checkpoint's writes a few at a time, in order. Why: sled
/// holds a whole batch and its log buffers at once, and one batch of the
/// 50,000 keys a full journal can hold grew the broker by 400 MiB for good
/// (100,000 transactional ids, `make bench` section 9; 1,000 at a time: 100
/// MiB less). The checkpoint needs no atomicity of its own: the journal
/// keeps every write until sled is flushed, and a start-up after a crash
/// in the middle replays it all again, in order, over whatever sled got.
fn apply_in_chunks(db: &sled::Db, ops: Vec<MetaOp>) -> Result<(), IoError> {
    let mut ops = ops.into_iter().peekable();
    while ops.peek().is_some() {
        apply(db, ops.by_ref().take(META_DB_APPLY_OPS_MAX).collect())?;
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metajournal::tests::put;

    /// A fresh data dir named after `test` under the temp dir, and meta.db
    /// open in it.
    fn fresh(test: &str) -> (std::path::PathBuf, DataDir, MetaStore) {
        let root =
            std::env::temp_dir().join(format!("doze-metastore-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let data = DataDir::open(&root).unwrap();
        let store = MetaStore::open(&data).unwrap();
        (root, data, store)
    }

    /// `ops` made durable in the journal and taken in for the next checkpoint.
    fn journal(store: &mut MetaStore, ops: &[MetaOp]) {
        assert!(matches!(store.store(&[ops]), Ok(Stored::Journaled)));
        store.apply_journaled(vec![ops.to_vec()]);
    }

    #[test]
    fn a_journaled_write_sled_never_got_is_there_after_a_crash() {
        let (root, data, mut store) = fresh("test");
        journal(&mut store, &[put("a", "1"), put("b", "2")]);
        store.checkpoint().unwrap();
        // Durable in the journal only: the crash comes before sled is told.
        let second = [MetaOp::Delete { key: b"a".to_vec() }, put("c", "3")];
        assert!(matches!(store.store(&[&second]), Ok(Stored::Journaled)));
        drop(store);
        let store = MetaStore::open(&data).unwrap();
        let db = store.db();
        assert!(db.get(b"a").unwrap().is_none());
        assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(db.get(b"c").unwrap().as_deref(), Some(&b"3"[..]));
        drop(store);
        drop(data);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_round_larger_than_the_journal_is_flushed_to_sled() {
        let (root, data, mut store) = fresh("large");
        let value = "v".repeat(doze_core::limits::META_JOURNAL_BYTES_MAX as usize);
        let large = [put("large", &value)];
        match store.store(&[&large]) {
            Ok(Stored::Flushed(results)) => assert_eq!(results, vec![Ok(())]),
            _ => panic!("expected a direct flush"),
        }
        drop(store);
        let store = MetaStore::open(&data).unwrap();
        assert_eq!(
            store.db().get(b"large").unwrap().map(|v| v.len()),
            Some(value.len())
        );
        drop(store);
        drop(data);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_checkpoint_of_more_writes_than_one_sled_batch_applies_them_all_in_order() {
        let (root, data, mut store) = fresh("chunks");
        let keys = META_DB_APPLY_OPS_MAX * 2 + 7;
        for i in 0..keys {
            journal(&mut store, &[put(&format!("k{i}"), "old")]);
        }
        // A key written again and one deleted: sled gets their last word.
        let last = [
            put("k0", "new"),
            MetaOp::Delete {
                key: b"k1".to_vec(),
            },
        ];
        journal(&mut store, &last);
        store.checkpoint().unwrap();
        drop(store);
        let store = MetaStore::open(&data).unwrap();
        let db = store.db();
        assert_eq!(db.len(), keys - 1);
        assert_eq!(db.get(b"k0").unwrap().as_deref(), Some(&b"new"[..]));
        assert!(db.get(b"k1").unwrap().is_none());
        let tail = format!("k{}", keys - 1);
        assert_eq!(
            db.get(tail.as_bytes()).unwrap().as_deref(),
            Some(&b"old"[..])
        );
        drop(store);
        drop(data);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
