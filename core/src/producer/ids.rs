//! The producer id allocator. Ids are handed out from a block whose end is
//! stored in meta.db before any id of it is used, so an id is never given
//! twice, even across a crash (ids of a block cut short by a restart are
//! skipped, never reused; Kafka's ProducerIdManager does the same with its
//! blocks).

use serde::{Deserialize, Serialize};

use crate::limits::PRODUCER_ID_BLOCK_SIZE;

pub const META_KEY: &[u8] = b"producer_ids";

/// The stored record: every id below `block_end` may have been handed out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerIdsRecord {
    pub block_end: i64,
}

#[derive(Debug, Default)]
pub struct ProducerIds {
    next: i64,
    block_end: i64,
    /// A new block is being stored.
    growing: bool,
}

impl ProducerIds {
    /// Resumes after the last stored block.
    pub fn boot(&mut self, record: &ProducerIdsRecord) {
        self.next = record.block_end;
        self.block_end = record.block_end;
    }

    /// The next id, or None if a new block must be stored first.
    pub fn take(&mut self) -> Option<i64> {
        if self.next >= self.block_end {
            return None;
        }
        let id = self.next;
        self.next += 1;
        Some(id)
    }

    /// The record to store for the next block, unless one is being stored.
    pub fn start_block(&mut self) -> Option<ProducerIdsRecord> {
        if self.growing {
            return None;
        }
        self.growing = true;
        Some(ProducerIdsRecord {
            block_end: self.block_end.max(self.next) + PRODUCER_ID_BLOCK_SIZE,
        })
    }

    /// The block's write completed; `record` is now durable if `stored`.
    pub fn block_done(&mut self, record: &ProducerIdsRecord, stored: bool) {
        assert!(self.growing, "block_done without start_block");
        self.growing = false;
        if stored {
            assert!(record.block_end > self.block_end, "blocks only grow");
            self.next = self.next.max(self.block_end);
            self.block_end = record.block_end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_from_stored_blocks_only() {
        let mut ids = ProducerIds::default();
        assert_eq!(ids.take(), None);
        let rec = ids.start_block().unwrap();
        assert!(ids.start_block().is_none(), "one block write at a time");
        ids.block_done(&rec, true);
        assert_eq!(ids.take(), Some(0));
        assert_eq!(ids.take(), Some(1));
        // After a restart the old block's remaining ids are skipped.
        let mut after = ProducerIds::default();
        after.boot(&rec);
        assert_eq!(after.take(), None);
        let rec2 = after.start_block().unwrap();
        after.block_done(&rec2, true);
        assert_eq!(after.take(), Some(PRODUCER_ID_BLOCK_SIZE));
    }

    #[test]
    fn failed_block_write_hands_out_nothing() {
        let mut ids = ProducerIds::default();
        let rec = ids.start_block().unwrap();
        ids.block_done(&rec, false);
        assert_eq!(ids.take(), None);
    }
}
