//! A partition being recovered at start-up: its log's scan and the state the
//! batches read rebuild, until the log is installed. The procedure is
//! start-up's (`core_state::recovery`); the state is the partition's, as in
//! Kafka each `UnifiedLog` recovers itself when `LogManager` loads it.

use crate::io::DiskOp;
use crate::log::recovery::LogRecovery;
use crate::producer::ProducerStates;

use super::PartitionTxns;

pub(crate) struct Recovering {
    pub recovery: LogRecovery,
    /// A checkpoint it could not use must be gone from meta.db before the
    /// index files it vouched for are rewritten (a crash midway would leave
    /// short files under a checkpoint that trusts them): the repairs wait here.
    pub held_ops: Option<Vec<DiskOp>>,
    pub producers: ProducerStates,
    pub txns: PartitionTxns,
    pub checkpoint_offset: Option<i64>,
    /// The cleaner's first dirty offset the checkpoint held (0: none).
    pub cleaner_first_dirty_offset: i64,
    /// The log start DeleteRecords stored (`meta::LogStartRecord`), if any.
    pub stored_log_start: Option<i64>,
    /// Reads of it that failed; past a few it goes offline.
    pub failures: u32,
}
