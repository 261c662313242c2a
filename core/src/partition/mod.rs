//! One partition and all it holds: its log, its producers' state, its open
//! and aborted transactions, whether it is offline, and where it stands
//! with the syncs (`durability`). A topic holds its partitions
//! (`crate::topics::Topic`), so deleting a topic drops all of it at once;
//! nothing else keeps state keyed by partition.
//!
//! A partition writes its disk operations to an `Outbox` and names no
//! broker: it can be tested alone (`tests`). Kafka's `UnifiedLog` owns its
//! producer state and last stable offset the same way.
//!
//! - `append`: a producer's batch, a transaction marker, a moved log start;
//! - `durability`: dirty and index-lagging flags, the sync point in flight,
//!   the cut back after a failed sync, going offline after a failed read.

mod append;
mod cleaning;
mod durability;
mod recovering;
#[cfg(test)]
mod tests;
pub mod txns;

pub(crate) use append::{BatchAppended, MarkerRefused};
pub use cleaning::CleanerProgress;
pub(crate) use cleaning::Cleaning;
pub(crate) use recovering::Recovering;

use crate::batch::BatchHeader;
use crate::checkpoint::CheckpointState;
use crate::log::{PartitionLog, SyncPoint};
use crate::producer::{AppendCheck, MarkerFenced, ProducerError, ProducerStates};
pub use txns::{AbortedTxn, PartitionTxns};

pub(crate) struct Partition {
    log: PartitionLog,
    /// Producer state; `None` until the partition is first written or
    /// recovered (a checkpoint stores an absent state as an empty one).
    producers: Option<ProducerStates>,
    /// Open and aborted transactions; `None`: none ever.
    txns: Option<PartitionTxns>,
    /// Its files failed a read: KAFKA_STORAGE_ERROR until a restart.
    offline: bool,
    /// Disk operations not yet covered by a sync.
    dirty: bool,
    /// A `SyncScope::Logs` sync covered it since the last `All` one that
    /// did: it may hold unsynced index appends, which an `All` sync covers
    /// (even when it is not dirty), a failed sync has it repair, and a
    /// clean stop syncs.
    index_lagging: bool,
    /// Its due checkpoint waits for an `All` sync; that sync's completion
    /// writes it.
    checkpoint_after_index_sync: bool,
    /// The durability point the sync in flight brings it to, if it covers it.
    sync_point: Option<SyncPoint>,
    /// Its last recovery checkpoint (`crate::checkpoint`).
    checkpoint: CheckpointState,
    /// What the log cleaner keeps of it.
    cleaning: Cleaning,
    /// At start-up, until its recovered log is installed.
    recovering: Option<Box<Recovering>>,
}

impl Partition {
    pub fn new(log: PartitionLog) -> Self {
        Self {
            log,
            producers: None,
            txns: None,
            offline: false,
            dirty: false,
            index_lagging: false,
            checkpoint_after_index_sync: false,
            sync_point: None,
            checkpoint: CheckpointState::default(),
            cleaning: Cleaning::default(),
            recovering: None,
        }
    }

    pub fn log(&self) -> &PartitionLog {
        &self.log
    }

    /// The log, for a change of the log alone (configs, retention, the
    /// cleaner); whatever it returns to write is the caller's to emit.
    pub fn log_mut(&mut self) -> &mut PartitionLog {
        &mut self.log
    }

    /// Puts the log recovery rebuilt in place of the empty one, with the
    /// roll limits the empty one was given; the partition's other state
    /// (disk operations recovery emitted for it) stays.
    pub fn install(&mut self, mut log: PartitionLog) {
        let (segment_bytes, segment_ms) = self.log.roll_limits();
        log.set_segment_bytes(segment_bytes);
        log.set_segment_ms(segment_ms);
        self.log = log;
    }

    /// The producer and transaction state recovery rebuilt.
    pub fn install_state(&mut self, producers: ProducerStates, txns: PartitionTxns) {
        self.producers = Some(producers);
        self.txns = Some(txns);
    }

    pub fn producers(&self) -> Option<&ProducerStates> {
        self.producers.as_ref()
    }

    pub fn producers_mut(&mut self) -> Option<&mut ProducerStates> {
        self.producers.as_mut()
    }

    pub fn txns(&self) -> Option<&PartitionTxns> {
        self.txns.as_ref()
    }

    pub fn txns_mut(&mut self) -> Option<&mut PartitionTxns> {
        self.txns.as_mut()
    }

    pub fn checkpoint(&self) -> &CheckpointState {
        &self.checkpoint
    }

    pub fn checkpoint_mut(&mut self) -> &mut CheckpointState {
        &mut self.checkpoint
    }

    /// Start-up begins recovering it.
    pub fn start_recovering(&mut self, recovering: Recovering) {
        assert!(self.recovering.is_none(), "a partition is recovered once");
        self.recovering = Some(Box::new(recovering));
    }

    /// Its recovery at start-up, while it runs.
    pub fn recovering(&self) -> Option<&Recovering> {
        self.recovering.as_deref()
    }

    pub fn recovering_mut(&mut self) -> Option<&mut Recovering> {
        self.recovering.as_deref_mut()
    }

    /// Its recovery ends (finished, or given up: offline).
    pub fn take_recovering(&mut self) -> Option<Recovering> {
        self.recovering.take().map(|r| *r)
    }

    pub fn cleaning(&self) -> &Cleaning {
        &self.cleaning
    }

    pub fn cleaning_mut(&mut self) -> &mut Cleaning {
        &mut self.cleaning
    }

    pub fn is_offline(&self) -> bool {
        self.offline
    }

    /// The first offset of the oldest open transaction, or the high
    /// watermark. Never below the log start: a transaction that began below
    /// a start DeleteRecords moved stays open, and its first offset counts
    /// as the log start, as Kafka's UnifiedLog.maybeIncrementFirstUnstableOffset
    /// takes max(first unstable offset, log start offset).
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.log.high_watermark();
        let start = self.log.log_start_offset();
        self.txns
            .as_ref()
            .and_then(|t| t.first_unstable_offset())
            .map_or(hw, |first| first.max(start).min(hw))
    }

    /// What a reader may see up to: the LSO under read_committed, else the
    /// high watermark.
    pub fn read_bound(&self, read_committed: bool) -> i64 {
        if read_committed {
            self.last_stable_offset()
        } else {
            self.log.high_watermark()
        }
    }

    /// Whether `producer_id` has a transaction open here.
    pub fn has_ongoing_txn(&self, producer_id: i64) -> bool {
        self.txns
            .as_ref()
            .is_some_and(|t| t.is_ongoing(producer_id))
    }

    /// Checks a producer's batch against the producer state. The state is
    /// made (empty) if there was none, as the append that follows would.
    pub fn check_producer(&mut self, header: &BatchHeader) -> Result<AppendCheck, ProducerError> {
        self.producers.get_or_insert_default().check(header)
    }

    /// Checks a marker a coordinator asks for (WriteTxnMarkers) against the
    /// producer's state here (`ProducerStates::check_marker`).
    pub fn check_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<(), MarkerFenced> {
        match &self.producers {
            Some(states) => states.check_marker(producer_id, epoch, coordinator_epoch),
            None => Ok(()),
        }
    }

    /// Whether `producer_id`'s transaction is closed here at `epoch`,
    /// durably: nothing of it open, no marker of it that a failed sync could
    /// still cut away, and a batch of `epoch` or later seen (its marker, or
    /// earlier data of the same epoch, in which case a marker would close
    /// nothing). A marker here would change nothing but a fenced producer's
    /// epoch, which this requires to be seen already.
    pub fn txn_closed_at(&self, producer_id: i64, epoch: i16) -> bool {
        if self.offline {
            return false;
        }
        let open = self
            .txns
            .as_ref()
            .is_some_and(|t| t.is_ongoing(producer_id) || t.has_unsynced_marker(producer_id));
        let seen = self.producers.as_ref().and_then(|s| s.epoch(producer_id));
        !open && seen.is_some_and(|e| e >= epoch)
    }
}
