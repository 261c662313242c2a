//! Per-partition producer state, as Kafka's ProducerStateManager and
//! ProducerAppendInfo keep it (storage/src/main/java/org/apache/kafka/storage/
//! internals/log/ProducerAppendInfo.java, ProducerStateEntry.java):
//!
//! - each producer id has its current epoch and the sequence ranges and
//!   offsets of its last `PRODUCER_BATCHES_RETAINED` (5) batches;
//! - a batch whose epoch and first/last sequence match a retained batch is a
//!   duplicate: it is not written again, and is answered with the original
//!   offsets (UnifiedLog.analyzeAndValidateProducerState);
//! - an epoch below the current one is INVALID_PRODUCER_EPOCH (checkProducerEpoch);
//! - a new epoch must start at sequence 0, unless the producer has no state
//!   (checkSequence); the same epoch must continue at last sequence + 1
//!   (wrapping at i32::MAX), else OUT_OF_ORDER_SEQUENCE_NUMBER;
//! - a producer with no state here (new, expired, or older than the rebuild
//!   window) is accepted at any sequence. Kafka 4.x does the same: it no longer
//!   answers UNKNOWN_PRODUCER_ID from Produce ("If there is no current producer
//!   epoch ... accept writes with any sequence number").
//!
//! The state is kept across a restart as Kafka's producer snapshots are: each
//! recovery checkpoint holds the state as of its recovery point (`snapshot_at`),
//! and the batch headers read above the recovery point at start-up continue
//! it, so a batch resent across a crash is still recognised. After a failed
//! sync cut the log, the batches cut are forgotten (`truncate_above`).

use std::collections::{BTreeMap, VecDeque};

use crate::batch::{increment_sequence, BatchHeader};
use serde::{Deserialize, Serialize};

use crate::limits::PRODUCER_BATCHES_RETAINED;

/// One retained batch of a producer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct BatchMeta {
    first_seq: i32,
    last_seq: i32,
    first_offset: i64,
    last_offset: i64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct ProducerEntry {
    epoch: i16,
    /// Oldest first; at most PRODUCER_BATCHES_RETAINED.
    batches: VecDeque<BatchMeta>,
    /// The timestamp of the producer's last batch here (its max timestamp,
    /// or its log append time; a marker's is the broker's time), for
    /// producer.id.expiration.ms and DescribeProducers, as Kafka's
    /// ProducerStateEntry.lastTimestamp.
    last_write_ms: i64,
    /// The coordinator epoch of the producer's last marker here, -1 before
    /// any (DescribeProducers' CoordinatorEpoch, as Kafka's entry keeps it).
    #[serde(default = "no_coordinator_epoch")]
    coordinator_epoch: i32,
}

fn no_coordinator_epoch() -> i32 {
    -1
}

/// One producer as DescribeProducers reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerDescription {
    pub producer_id: i64,
    pub epoch: i16,
    pub last_sequence: i32,
    pub last_timestamp_ms: i64,
    pub coordinator_epoch: i32,
}

/// What to do with a batch that passed the checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendCheck {
    /// Append it.
    Append,
    /// Already in the log at these offsets: answer with them, write nothing.
    Duplicate { first_offset: i64, last_offset: i64 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProducerError {
    /// The batch's epoch is older than the producer's current epoch.
    InvalidEpoch { current: i16 },
    /// The batch's first sequence does not follow the last one.
    OutOfOrderSequence { expected: i32, got: i32 },
}

impl std::fmt::Display for ProducerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidEpoch { current } => write!(
                f,
                "producer epoch is older than the current epoch {current}"
            ),
            Self::OutOfOrderSequence { expected, got } => {
                write!(
                    f,
                    "out of order sequence number: expected {expected}, got {got}"
                )
            }
        }
    }
}

/// Why a coordinator's marker is refused (`ProducerStates::check_marker`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerFenced {
    /// The marker's producer epoch is older than the producer's current one.
    ProducerEpoch { current: i16 },
    /// The marker's coordinator epoch is older than that of the producer's
    /// last marker here.
    CoordinatorEpoch { current: i32 },
}

impl std::fmt::Display for MarkerFenced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ProducerEpoch { current } => write!(
                f,
                "producer epoch is older than the current epoch {current}"
            ),
            Self::CoordinatorEpoch { current } => write!(
                f,
                "coordinator epoch is older than the current coordinator epoch {current}"
            ),
        }
    }
}

/// All producers' state for one partition.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProducerStates {
    producers: BTreeMap<i64, ProducerEntry>,
}

impl ProducerStates {
    /// Books a batch found by the start-up scan (its max timestamp stands for
    /// the time of the write); `marker` is what a control batch holds.
    pub fn replay(&mut self, h: &BatchHeader, marker: Option<crate::control::EndMarker>) {
        if !h.has_producer_id() {
            return;
        }
        if h.is_control() {
            let coordinator_epoch = marker.map_or(-1, |m| m.coordinator_epoch);
            self.record_marker(
                h.producer_id,
                h.producer_epoch,
                coordinator_epoch,
                h.max_timestamp,
            );
        } else {
            self.record(h, h.base_offset, h.last_offset(), h.max_timestamp);
        }
    }

    /// Each producer's last entry, for the log cleaner: it keeps the batch
    /// holding a producer's last sequence (or its last marker), even
    /// emptied, so that its epoch and sequence survive compaction.
    pub fn last_records(&self) -> BTreeMap<i64, crate::log::clean::filter::LastRecord> {
        self.producers
            .iter()
            .map(|(id, entry)| {
                let last = crate::log::clean::filter::LastRecord {
                    last_data_offset: entry.batches.back().map(|b| b.last_offset),
                    epoch: entry.epoch,
                };
                (*id, last)
            })
            .collect()
    }

    /// The log was cut at `offset`: batches at or past it are forgotten (a
    /// producer keeps its epoch; with no batch left it accepts any sequence).
    pub fn truncate_above(&mut self, offset: i64) {
        for entry in self.producers.values_mut() {
            entry.batches.retain(|b| b.last_offset < offset);
        }
    }

    /// The state as of `offset`: what a recovery checkpoint there keeps.
    pub fn snapshot_at(&self, offset: i64) -> Self {
        let mut snapshot = self.clone();
        snapshot.truncate_above(offset);
        snapshot
    }

    /// Checks a producer's batch (producer id >= 0) before it is appended.
    pub fn check(&self, h: &BatchHeader) -> Result<AppendCheck, ProducerError> {
        assert!(
            h.has_producer_id(),
            "only batches with a producer id are checked"
        );
        let Some(entry) = self.producers.get(&h.producer_id) else {
            return Ok(AppendCheck::Append);
        };
        if h.producer_epoch == entry.epoch {
            let last_seq = h.last_sequence();
            if let Some(dup) = entry
                .batches
                .iter()
                .find(|b| b.first_seq == h.base_sequence && b.last_seq == last_seq)
            {
                return Ok(AppendCheck::Duplicate {
                    first_offset: dup.first_offset,
                    last_offset: dup.last_offset,
                });
            }
        }
        if h.producer_epoch < entry.epoch {
            return Err(ProducerError::InvalidEpoch {
                current: entry.epoch,
            });
        }
        if h.producer_epoch != entry.epoch {
            // A bumped epoch starts again at 0.
            if h.base_sequence != 0 {
                return Err(ProducerError::OutOfOrderSequence {
                    expected: 0,
                    got: h.base_sequence,
                });
            }
            return Ok(AppendCheck::Append);
        }
        // An entry with no batches left (its batches aged out of the window)
        // accepts any sequence, like Kafka's state with no epoch.
        let Some(last) = entry.batches.back() else {
            return Ok(AppendCheck::Append);
        };
        let expected = increment_sequence(last.last_seq, 1);
        if h.base_sequence != expected {
            return Err(ProducerError::OutOfOrderSequence {
                expected,
                got: h.base_sequence,
            });
        }
        Ok(AppendCheck::Append)
    }

    /// Records an appended batch (after `check` said Append); `timestamp_ms`
    /// is the batch's (its max timestamp, or its log append time).
    pub fn record(
        &mut self,
        h: &BatchHeader,
        first_offset: i64,
        last_offset: i64,
        timestamp_ms: i64,
    ) {
        assert!(
            h.has_producer_id(),
            "only batches with a producer id are recorded"
        );
        assert!(
            first_offset <= last_offset,
            "a batch spans at least one offset"
        );
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: h.producer_epoch,
                batches: VecDeque::new(),
                last_write_ms: timestamp_ms,
                coordinator_epoch: -1,
            });
        if h.producer_epoch != entry.epoch {
            // ProducerStateEntry.maybeUpdateProducerEpoch: a new epoch forgets the old batches.
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        // Set, not raised: as Kafka's ProducerAppendInfo, the last batch's.
        entry.last_write_ms = timestamp_ms;
        entry.batches.push_back(BatchMeta {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            first_offset,
            last_offset,
        });
        while entry.batches.len() > PRODUCER_BATCHES_RETAINED {
            entry.batches.pop_front();
        }
    }

    /// Forgets producers idle for longer than `expiration_ms`
    /// (producer.id.expiration.ms).
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) {
        // Saturating: last_write_ms is a batch's timestamp as the client
        // sent it, which may be anything (found by core/tests/fuzz_requests.rs).
        self.producers
            .retain(|_, e| now_ms.saturating_sub(e.last_write_ms) <= expiration_ms);
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Checks a marker a coordinator asks for (WriteTxnMarkers) before it is
    /// appended, as ProducerAppendInfo.appendEndTxnMarker does for an append
    /// of origin COORDINATOR: an epoch older than the producer's current one
    /// is fenced (INVALID_PRODUCER_EPOCH), then a coordinator epoch older
    /// than the one of the producer's last marker here
    /// (TRANSACTION_COORDINATOR_FENCED). A producer with no state here
    /// passes both.
    pub fn check_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<(), MarkerFenced> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if epoch < entry.epoch {
            return Err(MarkerFenced::ProducerEpoch {
                current: entry.epoch,
            });
        }
        if entry.coordinator_epoch > coordinator_epoch {
            return Err(MarkerFenced::CoordinatorEpoch {
                current: entry.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// A transaction marker of `producer_id` at `epoch` was appended: the
    /// epoch becomes current (a raised epoch fences older writers here, as
    /// ProducerAppendInfo.appendEndTxnMarker does), and so does the
    /// coordinator epoch. The coordinator epoch never goes down: a marker
    /// WriteTxnMarkers appends passed `check_marker`, and this broker's own
    /// coordinator (epoch 0, unchecked) must not undo a fence an admin's
    /// marker with a higher one set.
    pub fn record_marker(
        &mut self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
        now_ms: i64,
    ) {
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch,
                batches: VecDeque::new(),
                last_write_ms: now_ms,
                coordinator_epoch,
            });
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.last_write_ms = now_ms;
        entry.coordinator_epoch = entry.coordinator_epoch.max(coordinator_epoch);
    }

    /// Every producer's state, for DescribeProducers.
    pub fn describe(&self) -> Vec<ProducerDescription> {
        self.producers
            .iter()
            .map(|(id, e)| ProducerDescription {
                producer_id: *id,
                epoch: e.epoch,
                last_sequence: e.batches.back().map_or(-1, |b| b.last_seq),
                last_timestamp_ms: e.last_write_ms,
                coordinator_epoch: e.coordinator_epoch,
            })
            .collect()
    }

    /// The producer's current epoch here, if it has state.
    pub fn epoch(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|e| e.epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pid: i64, epoch: i16, seq: i32, count: i32) -> BatchHeader {
        BatchHeader {
            base_offset: 0,
            batch_length: 100,
            partition_leader_epoch: -1,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            records_count: count,
        }
    }

    #[test]
    fn in_order_duplicate_and_gap() {
        let mut s = ProducerStates::default();
        let h0 = header(7, 0, 0, 3);
        assert_eq!(s.check(&h0), Ok(AppendCheck::Append));
        s.record(&h0, 10, 12, 0);
        assert_eq!(
            s.check(&h0),
            Ok(AppendCheck::Duplicate {
                first_offset: 10,
                last_offset: 12
            })
        );
        let gap = header(7, 0, 4, 1);
        assert_eq!(
            s.check(&gap),
            Err(ProducerError::OutOfOrderSequence {
                expected: 3,
                got: 4
            })
        );
        let next = header(7, 0, 3, 1);
        assert_eq!(s.check(&next), Ok(AppendCheck::Append));
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut s = ProducerStates::default();
        for i in 0..6 {
            s.record(&header(1, 0, i, 1), i as i64, i as i64, 0);
        }
        assert_eq!(
            s.check(&header(1, 0, 5, 1)),
            Ok(AppendCheck::Duplicate {
                first_offset: 5,
                last_offset: 5
            })
        );
        assert_eq!(
            s.check(&header(1, 0, 1, 1)),
            Ok(AppendCheck::Duplicate {
                first_offset: 1,
                last_offset: 1
            })
        );
        // The first batch fell out of the window: neither duplicate nor in order.
        assert!(matches!(
            s.check(&header(1, 0, 0, 1)),
            Err(ProducerError::OutOfOrderSequence { .. })
        ));
    }

    #[test]
    fn epochs() {
        let mut s = ProducerStates::default();
        s.record(&header(1, 3, 0, 1), 0, 0, 0);
        assert_eq!(
            s.check(&header(1, 2, 1, 1)),
            Err(ProducerError::InvalidEpoch { current: 3 })
        );
        assert!(matches!(
            s.check(&header(1, 4, 5, 1)),
            Err(ProducerError::OutOfOrderSequence { expected: 0, .. })
        ));
        assert_eq!(s.check(&header(1, 4, 0, 1)), Ok(AppendCheck::Append));
        // Unknown producers are accepted at any sequence, as Kafka 4 does.
        assert_eq!(s.check(&header(2, 0, 42, 1)), Ok(AppendCheck::Append));
    }

    #[test]
    fn sequence_wraps_at_i32_max() {
        let mut s = ProducerStates::default();
        s.record(&header(1, 0, i32::MAX - 1, 2), 0, 1, 0);
        assert_eq!(s.check(&header(1, 0, 0, 1)), Ok(AppendCheck::Append));
    }

    #[test]
    fn idle_producers_expire() {
        let mut s = ProducerStates::default();
        s.record(&header(1, 0, 0, 1), 0, 0, 1_000);
        s.record(&header(2, 0, 0, 1), 1, 1, 5_000);
        s.expire(6_000, 2_000);
        assert_eq!(s.epoch(1), None);
        assert_eq!(s.epoch(2), Some(0));
    }

    #[test]
    fn a_batch_timestamp_at_the_extremes_does_not_overflow_expiry() {
        // The last write time is the batch's timestamp as the client sent
        // it: the subtraction overflowed in a debug build (fuzz_requests).
        let mut s = ProducerStates::default();
        s.record(&header(1, 0, 0, 1), 0, 0, i64::MIN);
        s.record(&header(2, 0, 0, 1), 1, 1, i64::MAX);
        s.expire(1_700_000_000_000, 86_400_000);
        assert_eq!(s.epoch(1), None, "a time far in the past is long idle");
        assert_eq!(s.epoch(2), Some(0), "a time in the future is not idle");
    }
}
