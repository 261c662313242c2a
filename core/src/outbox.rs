//! What the core has for the driver, in the order it must be done: the
//! outputs, and the I/O ids that name the disk and meta.db operations among
//! them. The layers below the broker (`crate::partition`) write here, never
//! into the broker: a partition emits its own disk operations without
//! knowing who holds it.

use std::collections::VecDeque;

use crate::boundary::Output;
use crate::io::{DiskOp, IoId};

#[derive(Debug)]
pub(crate) struct Outbox {
    outputs: VecDeque<Output>,
    /// The id the next disk or meta.db operation gets (from 1).
    next_io: IoId,
    /// The clean-shutdown file is written: nothing may be written after it
    /// (`core_state::clean_shutdown`).
    sealed: bool,
}

impl Default for Outbox {
    fn default() -> Self {
        Self {
            outputs: VecDeque::new(),
            next_io: 1,
            sealed: false,
        }
    }
}

impl Outbox {
    pub fn push(&mut self, output: Output) {
        if self.sealed {
            let writes = match &output {
                Output::Disk(op) => !matches!(op, DiskOp::Read { .. }),
                Output::Meta { .. } | Output::Clean { .. } => true,
                _ => false,
            };
            assert!(
                !writes,
                "a write after the clean-shutdown file's: {output:?}"
            );
        }
        self.outputs.push_back(output);
    }

    /// From now on only reads and answers go out: the clean-shutdown file
    /// claims that nothing was written after it.
    pub fn seal(&mut self) {
        self.sealed = true;
    }

    /// A partition's disk operation (not a sync or a read: those carry an
    /// id and their completion is awaited, so the broker issues them).
    pub fn disk(&mut self, op: DiskOp) {
        assert!(
            !matches!(op, DiskOp::Sync { .. } | DiskOp::Read { .. }),
            "syncs are started by request_sync, reads by emit_read"
        );
        self.push(Output::Disk(op));
    }

    pub fn pop(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// A fresh id for an operation whose completion comes back as an input.
    pub fn take_io(&mut self) -> IoId {
        let io = self.next_io;
        self.next_io += 1;
        io
    }

    /// The id the next `take_io` gives: an operation issued from now on has
    /// it or a later one.
    pub fn next_io(&self) -> IoId {
        self.next_io
    }

    /// The outputs not yet polled, oldest first (tests).
    #[cfg(test)]
    pub fn drain(&mut self) -> Vec<Output> {
        self.outputs.drain(..).collect()
    }
}
