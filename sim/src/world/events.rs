//! The event queue: events ordered by simulated time, then by the order they
//! were scheduled, so equal times replay in one order on every run.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use bytes::Bytes;
use doze_core::{ConnId, FileRange, IoError, IoId};

use crate::faults::FaultKind;

#[derive(Debug)]
pub enum Event {
    ClientWake(usize),
    /// A request frame reaches the broker.
    ToBroker {
        conn: ConnId,
        frame: Bytes,
    },
    /// A response frame reaches its client.
    ToClient {
        conn: ConnId,
        frame: Bytes,
    },
    Connected {
        client: usize,
        conn: ConnId,
    },
    /// A client learns its connection (or attempt) is gone.
    ClientDisconnected {
        client: usize,
        conn: ConnId,
    },
    /// I/O completions and timers of broker incarnation `gen`; stale ones
    /// (from before a crash) are dropped.
    SyncDone {
        gen: u64,
        io: IoId,
    },
    MetaDone {
        gen: u64,
        io: IoId,
    },
    /// The clean-shutdown file's write or removal completes (its fsyncs).
    CleanShutdownDone {
        gen: u64,
        io: IoId,
    },
    Tick {
        gen: u64,
    },
    /// A `DiskOp::Read` completes; its bytes were taken when it was issued
    /// (the driver carries out disk ops in order).
    ReadDone {
        gen: u64,
        io: IoId,
        result: Result<Bytes, IoError>,
    },
    /// An `Output::Clean` job completes; it was carried out when issued.
    CleanerDone {
        gen: u64,
        io: IoId,
        outcome: doze_core::log::clean::work::CleanerOutcome,
    },
    /// The world could not read a file range of a response to `conn`; the
    /// core learns it after the outputs at hand are carried out.
    ResponseReadFailed {
        gen: u64,
        conn: ConnId,
        range: FileRange,
        error: IoError,
    },
    /// The process of incarnation `gen` is killed (with `power`, the
    /// machine too), aimed at the time it is still recovering.
    KillDuringRecovery {
        gen: u64,
        power: bool,
    },
    /// The operator restarts the broker (a clean stop) after a read error
    /// may have taken a partition offline.
    OperatorRestart {
        gen: u64,
    },
    /// A clean stop of incarnation `gen` that has not ended by now never will.
    StopTimeout {
        gen: u64,
    },
    BrokerStart,
    /// A fault from the scenario script.
    Fault(FaultKind),
    /// A lasting fault (disk full, slow fsync) ends.
    FaultEnd(FaultKind),
    /// A random fault of the swarm; it schedules its next occurrence.
    SwarmFault(FaultKind),
    EndDrain,
}

struct Entry {
    at_ms: i64,
    seq: u64,
    event: Event,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ms, self.seq) == (other.at_ms, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at_ms, self.seq).cmp(&(other.at_ms, other.seq))
    }
}

#[derive(Default)]
pub struct EventQueue {
    heap: BinaryHeap<Reverse<Entry>>,
    next_seq: u64,
}

impl EventQueue {
    pub fn push(&mut self, at_ms: i64, event: Event) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Reverse(Entry { at_ms, seq, event }));
    }

    pub fn pop(&mut self) -> Option<(i64, Event)> {
        self.heap.pop().map(|Reverse(e)| (e.at_ms, e.event))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_then_schedule_order() {
        let mut q = EventQueue::default();
        q.push(5, Event::ClientWake(1));
        q.push(3, Event::ClientWake(2));
        q.push(5, Event::ClientWake(3));
        let order: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|(t, e)| match e {
                Event::ClientWake(c) => (t, c),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(order, vec![(3, 2), (5, 1), (5, 3)]);
    }
}
