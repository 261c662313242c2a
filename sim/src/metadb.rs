//! meta.db as the simulator sees it: a map that changes only when a write
//! completes. A write in flight at a crash or power cut may or may not have
//! reached the database (sled may have flushed it just before the process
//! died); the core never learns which, and must cope with both.

use std::collections::BTreeMap;

use doze_core::{IoError, IoId, MetaOp};
use rand::RngExt;

#[derive(Default)]
pub struct SimMeta {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    pending: BTreeMap<IoId, Vec<MetaOp>>,
    pub writes_failed: u64,
}

impl SimMeta {
    pub fn begin(&mut self, io: IoId, ops: Vec<MetaOp>) {
        let before = self.pending.insert(io, ops);
        assert!(before.is_none(), "meta write io {io} issued twice");
    }

    /// Completes write `io`: applied atomically, or, with `fail`, not at all.
    pub fn complete(&mut self, io: IoId, fail: bool) -> Result<(), IoError> {
        let ops = self
            .pending
            .remove(&io)
            .expect("completion of a meta write in flight");
        if fail {
            self.writes_failed += 1;
            return Err(IoError("injected meta.db write failure".into()));
        }
        self.apply(ops);
        Ok(())
    }

    /// The process died (or the power went): each write in flight either
    /// reached the database whole or not at all.
    pub fn crash(&mut self, rng: &mut impl rand::Rng) {
        for (_, ops) in std::mem::take(&mut self.pending) {
            if rng.random_bool(0.5) {
                self.apply(ops);
            }
        }
    }

    pub fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.map
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn apply(&mut self, ops: Vec<MetaOp>) {
        for op in ops {
            match op {
                MetaOp::Put { key, value } => {
                    self.map.insert(key, value);
                }
                MetaOp::Delete { key } => {
                    self.map.remove(&key);
                }
            }
        }
    }
}
