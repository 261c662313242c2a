//! What the core counts for an operator, and the snapshot a driver reads of
//! it (`Broker::metrics_snapshot`), for net's `/metrics` page.
//!
//! Counters are kept where the work happens and bumped through methods from
//! the produce, fetch and transaction paths: per topic in the topic itself
//! (`TopicCounters`, reached in the lookup the path makes anyway, so a
//! produce pays no extra map search), broker-wide here (`Counters`). They
//! are plain integers: the core is single-threaded. Nothing the core decides
//! ever reads them, so they cannot change its outputs (the simulator's
//! determinism test runs the same seeds with them).
//!
//! Gauges (open transactions, LSO lag, consumer lag) are not kept at all:
//! the snapshot asks the coordinators and the logs for them when a driver
//! wants one, which costs a scrape, not a request. The snapshot is built
//! where all of them are in reach, in `broker` (`broker/metrics.rs`); this
//! module, below the topics that hold its counters, names none of them.

/// Bytes and records in and out of one topic since it was created (or since
/// the broker started). A topic deleted and created again starts from zero,
/// which Prometheus reads as a counter reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TopicCounters {
    /// Record batch bytes appended from Produce requests (as the client
    /// sent them, compressed or not: Kafka's BytesInPerSec).
    pub produced_bytes: u64,
    /// Records in those batches (Kafka's MessagesInPerSec).
    pub produced_records: u64,
    /// Log bytes sent in Fetch responses (Kafka's BytesOutPerSec).
    pub fetched_bytes: u64,
    /// Offsets sent in Fetch responses, from each partition's fetch offset
    /// to the end of the last whole batch sent. A transaction marker counts
    /// as one, as it takes one offset; records below the fetch offset in the
    /// first batch (which the client skips) do not.
    pub fetched_records: u64,
}

impl TopicCounters {
    /// A batch of `records` records and `bytes` bytes was appended.
    pub(crate) fn produced(&mut self, bytes: usize, records: i32) {
        self.produced_bytes += bytes as u64;
        self.produced_records += u64::try_from(records).unwrap_or(0);
    }

    /// A Fetch response carried `bytes` bytes and `records` offsets of it.
    pub(crate) fn fetched(&mut self, bytes: u64, records: u64) {
        self.fetched_bytes += bytes;
        self.fetched_records += records;
    }
}

/// Broker-wide counters since the broker started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Transactions whose commit was carried out (decision and markers
    /// durable, EndTxn answered; the Complete record may still be on its way).
    pub txns_committed: u64,
    /// Transactions whose abort was carried out, whoever asked for it (the
    /// client, a timeout, a new InitProducerId).
    pub txns_aborted: u64,
    /// Ongoing transactions the coordinator found past their timeout and
    /// began to abort (each is counted in `txns_aborted` too once done).
    pub txns_timed_out: u64,
    /// Fetches served through a fetch session, naming only what changed
    /// (KIP-227): how much of the reading goes incremental.
    pub fetches_incremental: u64,
}

impl Counters {
    /// A decision's outcome became durable (its markers synced).
    pub(crate) fn txn_completed(&mut self, commit: bool) {
        if commit {
            self.txns_committed += 1;
        } else {
            self.txns_aborted += 1;
        }
    }

    /// A transaction timed out and its abort began.
    pub(crate) fn txn_timed_out(&mut self) {
        self.txns_timed_out += 1;
    }
}

/// What the core can say about itself at one moment. Lists are sorted (topic,
/// partition; group, topic, partition), so two snapshots of the same state
/// render the same.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub counters: Counters,
    /// Transactions begun and not yet completed (Ongoing, PrepareCommit,
    /// PrepareAbort).
    pub txns_open: u64,
    /// Fetch sessions open (KIP-227).
    pub fetch_sessions: u64,
    pub topics: Vec<TopicSnapshot>,
    /// Every partition that is online.
    pub partitions: Vec<PartitionSnapshot>,
    /// Every committed offset of every group whose partition exists.
    pub consumer_offsets: Vec<ConsumerOffset>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicSnapshot {
    pub topic: String,
    pub counters: TopicCounters,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionSnapshot {
    pub topic: String,
    pub partition: i32,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
}

impl PartitionSnapshot {
    /// Offsets a read_committed consumer cannot see yet because a
    /// transaction is open below them.
    pub fn lso_lag(&self) -> i64 {
        self.high_watermark - self.last_stable_offset
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerOffset {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub committed_offset: i64,
    pub high_watermark: i64,
}

impl ConsumerOffset {
    /// Offsets between the group's committed position and the high
    /// watermark; never negative (a committed offset past the end, which
    /// Kafka accepts, is no lag).
    pub fn lag(&self) -> i64 {
        (self.high_watermark - self.committed_offset).max(0)
    }
}
