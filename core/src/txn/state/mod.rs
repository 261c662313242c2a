//! The transaction state machine in one place: every change of a stored
//! `TxnRecord` is made here, from the id's current record, by one of the
//! `prepare_*` methods (as Kafka's TransactionMetadata.prepareX methods,
//! transaction-coordinator/src/main/java/org/apache/kafka/coordinator/
//! transaction/TransactionMetadata.java), and checked against the states it
//! may start from (TransactionState.validPreviousStates, same directory).
//! What they make is a `Next`, the only thing `write::store` accepts.
//!
//! The Kafka error a request gets is chosen by its handler before it asks
//! for a transition; a transition asked for from a state it cannot start
//! from is a broken invariant, so a panic (DESIGN.md, item 8).

use super::record::{StagedOffset, TxnRecord, TxnState};

/// The states a record may move to `to` from, as Kafka's
/// TransactionState.validPreviousStates, less what this coordinator does
/// not have: transaction v2 (not offered; it lets PrepareAbort follow Empty
/// and Complete*) and PrepareEpochFence (a fence stores PrepareAbort at once).
pub fn valid_previous(to: TxnState) -> &'static [TxnState] {
    use TxnState::*;
    match to {
        Empty => &[Empty, CompleteCommit, CompleteAbort],
        Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
        PrepareCommit => &[Ongoing],
        PrepareAbort => &[Ongoing],
        CompleteCommit => &[PrepareCommit],
        CompleteAbort => &[PrepareAbort],
    }
}

/// Whether an id in `state` may be removed (transactional.id.expiration.ms):
/// Kafka's Dead state follows only these.
pub fn may_expire(state: TxnState) -> bool {
    matches!(
        state,
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
    )
}

/// Why a record changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// InitProducerId on a new id: its producer id, epoch 0, Empty.
    Create,
    /// InitProducerId with no transaction open: the epoch raised (or kept,
    /// for a KIP-360 retry), or a new producer id once it is exhausted.
    Init,
    /// AddPartitionsToTxn or AddOffsetsToTxn: Ongoing.
    Add,
    /// TxnOffsetCommit: offsets staged in the Ongoing transaction.
    StageOffsets,
    /// EndTxn: PrepareCommit or PrepareAbort.
    Decide,
    /// InitProducerId on an open transaction, or its timeout: the producer
    /// fenced (epoch + 1) and PrepareAbort.
    FenceAndAbort,
    /// The decision carried out: CompleteCommit or CompleteAbort.
    Complete,
    /// An owed Complete record (txn/complete.rs), already in memory, written
    /// on its own over the decision meta.db still holds.
    WriteOwed,
}

impl Transition {
    /// Whether this transition may take a record from `from` (None: the id
    /// is new) to `to`.
    pub fn allowed(self, from: Option<TxnState>, to: TxnState) -> bool {
        use TxnState::*;
        let Some(from) = from else {
            return self == Transition::Create && to == Empty;
        };
        let own = match self {
            Transition::Create => false,
            Transition::Init => to == Empty,
            Transition::Add => to == Ongoing,
            Transition::StageOffsets => from == Ongoing && to == Ongoing,
            Transition::Decide => to.is_prepare(),
            Transition::FenceAndAbort => to == PrepareAbort,
            Transition::Complete => to.is_complete(),
            // Memory holds the Complete record; meta.db, the decision it completes.
            Transition::WriteOwed => {
                return from == to && to.is_complete();
            }
        };
        own && valid_previous(to).contains(&from)
    }
}

/// A record made by a transition from an id's current record: the only
/// thing `write::store` stores, so no other record reaches meta.db.
#[derive(Debug)]
pub struct Next {
    /// The state of the record it was made from (None: a new id).
    from: Option<TxnState>,
    transition: Transition,
    record: TxnRecord,
}

impl Next {
    fn new(from: Option<TxnState>, transition: Transition, record: TxnRecord) -> Next {
        assert!(
            transition.allowed(from, record.state),
            "transaction transition {transition:?} from {from:?} to {:?} is not valid",
            record.state
        );
        Next {
            from,
            transition,
            record,
        }
    }

    /// The state of the record this one was made from (None: a new id).
    pub fn from(&self) -> Option<TxnState> {
        self.from
    }

    pub fn transition(&self) -> Transition {
        self.transition
    }

    pub fn record(&self) -> &TxnRecord {
        &self.record
    }

    pub fn into_record(self) -> TxnRecord {
        self.record
    }
}

impl TxnRecord {
    /// A new id's first record (InitProducerId): `producer_id`, epoch 0.
    pub fn create(producer_id: i64, timeout_ms: i32, now_ms: i64) -> Next {
        let mut record = TxnRecord::new(producer_id, timeout_ms, now_ms);
        record.producer_epoch = 0;
        Next::new(None, Transition::Create, record)
    }

    /// InitProducerId with no transaction open, keeping the producer id:
    /// `epoch` is the current one raised, or kept for a KIP-360 retry of the
    /// last bump (TransactionMetadata.prepareIncrementProducerEpoch). The
    /// handler chooses the epoch, and answers PRODUCER_FENCED instead of
    /// asking when none fits.
    pub fn prepare_epoch_bump(
        &self,
        timeout_ms: i32,
        epoch: i16,
        last_epoch: i16,
        now_ms: i64,
    ) -> Next {
        let current = i32::from(self.producer_epoch);
        assert!(
            i32::from(epoch) == current || i32::from(epoch) == current + 1,
            "an epoch bump raises the epoch by one or keeps it (a retry): {current} to {epoch}"
        );
        let record = TxnRecord {
            producer_epoch: epoch,
            last_producer_epoch: last_epoch,
            ..self.emptied(timeout_ms, now_ms)
        };
        Next::new(Some(self.state), Transition::Init, record)
    }

    /// InitProducerId with no transaction open and the epoch exhausted: a
    /// new producer id at epoch 0, the current one kept as the previous
    /// (TransactionMetadata.prepareProducerIdRotation).
    pub fn prepare_rotation(
        &self,
        producer_id: i64,
        timeout_ms: i32,
        last_epoch: i16,
        now_ms: i64,
    ) -> Next {
        assert_ne!(
            producer_id, self.producer_id,
            "a rotation takes a new producer id"
        );
        let record = TxnRecord {
            producer_id,
            previous_producer_id: self.producer_id,
            producer_epoch: 0,
            last_producer_epoch: last_epoch,
            ..self.emptied(timeout_ms, now_ms)
        };
        Next::new(Some(self.state), Transition::Init, record)
    }

    /// The record InitProducerId starts from: Empty, nothing in it, the
    /// timeout asked for.
    fn emptied(&self, timeout_ms: i32, now_ms: i64) -> TxnRecord {
        TxnRecord {
            timeout_ms,
            state: TxnState::Empty,
            partitions: Default::default(),
            groups: Default::default(),
            staged_offsets: Default::default(),
            start_ms: -1,
            last_update_ms: now_ms,
            ..self.clone()
        }
    }

    /// AddPartitionsToTxn: the partitions join the transaction, which is
    /// Ongoing from now (TransactionMetadata.prepareAddPartitions).
    pub fn prepare_add_partitions(
        &self,
        partitions: impl IntoIterator<Item = (String, i32)>,
        now_ms: i64,
    ) -> Next {
        let mut record = self.ongoing(now_ms);
        record.partitions.extend(partitions);
        Next::new(Some(self.state), Transition::Add, record)
    }

    /// AddOffsetsToTxn: the group joins the transaction, which is Ongoing
    /// from now.
    pub fn prepare_add_group(&self, group: String, now_ms: i64) -> Next {
        let mut record = self.ongoing(now_ms);
        record.groups.insert(group);
        Next::new(Some(self.state), Transition::Add, record)
    }

    /// The record once the transaction touches something new: Ongoing, a
    /// new start time if none was open.
    fn ongoing(&self, now_ms: i64) -> TxnRecord {
        let starts = matches!(
            self.state,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        );
        TxnRecord {
            state: TxnState::Ongoing,
            start_ms: if starts { now_ms } else { self.start_ms },
            last_update_ms: now_ms,
            ..self.clone()
        }
    }

    /// TxnOffsetCommit: `offsets` staged for `group`, in order, each
    /// replacing an earlier one of its partition. The state and its time do
    /// not change (Kafka keeps these offsets in the group coordinator).
    pub fn prepare_stage_offsets(
        &self,
        group: &str,
        offsets: impl IntoIterator<Item = StagedOffset>,
    ) -> Next {
        assert!(
            self.groups.contains(group),
            "offsets are staged only for a group added to the transaction"
        );
        let mut record = self.clone();
        for staged in offsets {
            record.stage_offset(group, staged);
        }
        Next::new(Some(self.state), Transition::StageOffsets, record)
    }

    /// EndTxn on an Ongoing transaction: the decision
    /// (TransactionMetadata.prepareAbortOrCommit).
    pub fn prepare_decision(&self, commit: bool, now_ms: i64) -> Next {
        let record = TxnRecord {
            state: if commit {
                TxnState::PrepareCommit
            } else {
                TxnState::PrepareAbort
            },
            last_update_ms: now_ms,
            ..self.clone()
        };
        Next::new(Some(self.state), Transition::Decide, record)
    }

    /// Fences the producer (epoch + 1) and decides to abort its open
    /// transaction (TransactionMetadata.prepareFenceProducerEpoch, then
    /// PrepareAbort): for InitProducerId on an open transaction and for a
    /// timed-out one.
    pub fn prepare_fence_and_abort(&self, now_ms: i64) -> Next {
        let record = TxnRecord {
            producer_epoch: self.producer_epoch.saturating_add(1),
            last_producer_epoch: -1,
            state: TxnState::PrepareAbort,
            last_update_ms: now_ms,
            ..self.clone()
        };
        Next::new(Some(self.state), Transition::FenceAndAbort, record)
    }

    /// The decision is carried out: CompleteCommit or CompleteAbort, with
    /// nothing left in the transaction (TransactionMetadata.prepareComplete).
    pub fn prepare_complete(&self, now_ms: i64) -> Next {
        let state = match self.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            // Any other state is refused by `Next::new`.
            _ => TxnState::CompleteAbort,
        };
        let record = TxnRecord {
            state,
            partitions: Default::default(),
            groups: Default::default(),
            staged_offsets: Default::default(),
            last_update_ms: now_ms,
            ..self.clone()
        };
        Next::new(Some(self.state), Transition::Complete, record)
    }

    /// The owed Complete record (this one, already in memory) written on
    /// its own.
    pub fn owed_complete(&self) -> Next {
        Next::new(Some(self.state), Transition::WriteOwed, self.clone())
    }
}

#[cfg(test)]
mod tests;
