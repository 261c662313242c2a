//! meta.db as the simulator sees it: a map that changes only when a write
//! completes. Writes complete in the order they were issued, as net's one
//! meta.db worker answers them (`net/src/metadb.rs`), and the core relies
//! on it (`group::offsets`). The writes in flight at a crash or power cut
//! may or may not have reached the database: a prefix of them did (the
//! journal is appended in order, and a torn tail is dropped at the next
//! start); the core never learns how long a prefix, and must cope with any.

use std::collections::BTreeMap;

use doze_core::{IoError, IoId, MetaOp};
use rand::RngExt;

#[derive(Default)]
pub struct SimMeta {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    pending: BTreeMap<IoId, Vec<MetaOp>>,
    /// When the last write issued completes (`completion_ms`).
    last_done_ms: i64,
    pub writes_failed: u64,
}

impl SimMeta {
    pub fn begin(&mut self, io: IoId, ops: Vec<MetaOp>) {
        let before = self.pending.insert(io, ops);
        assert!(before.is_none(), "meta write io {io} issued twice");
    }

    /// When a write issued now completes: at `earliest_ms`, or with the
    /// write issued before it if that one completes later (writes complete
    /// in order).
    pub fn completion_ms(&mut self, earliest_ms: i64) -> i64 {
        self.last_done_ms = self.last_done_ms.max(earliest_ms);
        self.last_done_ms
    }

    /// Completes write `io`: applied atomically, or, with `fail`, not at all.
    pub fn complete(&mut self, io: IoId, fail: bool) -> Result<(), IoError> {
        let (&first, _) = self
            .pending
            .first_key_value()
            .expect("completion of a meta write in flight");
        assert_eq!(first, io, "meta writes complete in the order issued");
        let ops = self.pending.remove(&io).expect("the first in flight");
        if fail {
            self.writes_failed += 1;
            return Err(IoError("injected meta.db write failure".into()));
        }
        self.apply(ops);
        Ok(())
    }

    /// The process died (or the power went): of the writes in flight, in
    /// the order issued, a prefix reached the database, each whole.
    pub fn crash(&mut self, rng: &mut impl rand::Rng) {
        let pending = std::mem::take(&mut self.pending);
        let reached = rng.random_range(0..=pending.len());
        for (_, ops) in pending.into_iter().take(reached) {
            self.apply(ops);
        }
        self.last_done_ms = i64::MIN;
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn put(key: &str) -> Vec<MetaOp> {
        vec![MetaOp::Put {
            key: key.as_bytes().to_vec(),
            value: b"v".to_vec(),
        }]
    }

    #[test]
    fn writes_complete_in_the_order_issued() {
        let mut m = SimMeta::default();
        assert_eq!(m.completion_ms(100), 100);
        assert_eq!(m.completion_ms(90), 100, "not before the one issued first");
        assert_eq!(m.completion_ms(120), 120);
    }

    /// Whatever a crash keeps of the writes in flight, a later one is never
    /// there without every earlier one.
    #[test]
    fn a_crash_keeps_a_prefix_of_the_writes_in_flight() {
        let mut kept = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let mut rng = rand::rngs::ChaCha8Rng::seed_from_u64(seed);
            let mut m = SimMeta::default();
            for io in 1..=4 {
                m.begin(io, put(&io.to_string()));
            }
            m.crash(&mut rng);
            let present: Vec<bool> = (1..=4)
                .map(|io: u64| m.map.contains_key(io.to_string().as_bytes()))
                .collect();
            let n = present.iter().filter(|p| **p).count();
            assert!(
                present.iter().take(n).all(|p| *p),
                "seed {seed}: {present:?}"
            );
            kept.insert(n);
        }
        assert_eq!(kept.len(), 5, "every prefix length happens: {kept:?}");
    }
}
