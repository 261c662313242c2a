//! What one partition's log, producer state and transaction state do
//! together, for the API handlers and the transaction coordinator alike:
//! appending a producer's batch or a marker, cutting all three back after a
//! failed sync, and going offline after a failed read.

use bytes::Bytes;

use super::Broker;
use crate::batch::BatchHeader;
use crate::io::FileRange;
use crate::producer::{AppendCheck, MarkerFenced, ProducerError, ProducerStates};
use crate::topics::PartitionKey;

/// Why a marker was not appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MarkerRefused {
    /// The partition is gone (its topic deleted): nothing left to mark.
    Gone,
    /// The partition is offline after a failed read: try again (it comes
    /// back with a restart, which carries the decision out anyway).
    Offline,
}

/// Where a producer's batch landed.
pub(crate) struct BatchAppended {
    pub base_offset: i64,
    pub last_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
}

/// One partition as a handler reads it: its log and its transaction state.
pub(crate) struct PartitionView<'a> {
    pub log: &'a crate::log::PartitionLog,
    pub txns: Option<&'a crate::txn::PartitionTxns>,
    pub producers: Option<&'a ProducerStates>,
}

impl PartitionView<'_> {
    /// The first offset of the oldest open transaction, or the high
    /// watermark. Never below the log start: a transaction that began below
    /// a start DeleteRecords moved stays open, and its first offset counts
    /// as the log start, as Kafka's UnifiedLog.maybeIncrementFirstUnstableOffset
    /// takes max(first unstable offset, log start offset).
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.log.high_watermark();
        let start = self.log.log_start_offset();
        self.txns
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
}

impl Broker {
    /// A partition to read or write, or the error a client is answered with:
    /// UNKNOWN_TOPIC_OR_PARTITION, or KAFKA_STORAGE_ERROR while it is offline.
    pub(crate) fn partition_view(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<PartitionView<'_>, kafka_protocol::ResponseError> {
        let key = self.partition_key(topic, partition)?;
        let log = self
            .topics
            .partition_by_key(&key)
            .expect("checked by partition_key");
        Ok(PartitionView {
            txns: self.partition_txns.get(&key),
            producers: self.producer_states.get(&key),
            log,
        })
    }

    /// The key of a partition to read or write, or the error a client is
    /// answered with, as `partition_view`.
    pub(crate) fn partition_key(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<PartitionKey, kafka_protocol::ResponseError> {
        use kafka_protocol::ResponseError;
        let t = self
            .topics
            .get(topic)
            .filter(|_| self.topics.partition(topic, partition).is_some())
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        let key = t.key(partition);
        if self.offline.contains(&key) {
            return Err(ResponseError::KafkaStorageError);
        }
        Ok(key)
    }

    /// Whether the partition is offline after a failed read.
    pub(crate) fn is_offline(&self, key: &PartitionKey) -> bool {
        self.offline.contains(key)
    }

    /// Whether `producer_id` has a transaction open in the partition.
    pub(crate) fn has_ongoing_txn(&self, key: &PartitionKey, producer_id: i64) -> bool {
        self.partition_txns
            .get(key)
            .is_some_and(|t| t.is_ongoing(producer_id))
    }

    /// Checks a producer's batch against the partition's producer state.
    pub(crate) fn check_producer(
        &mut self,
        key: &PartitionKey,
        header: &BatchHeader,
    ) -> Result<AppendCheck, ProducerError> {
        self.producer_states_mut(key).check(header)
    }

    /// Appends a producer's batch, checked, to a partition: the log, the
    /// producer and transaction state, and the disk writes.
    pub(crate) fn append_batch(
        &mut self,
        key: &PartitionKey,
        header: &BatchHeader,
        bytes: Bytes,
        log_append_time: bool,
    ) -> BatchAppended {
        let now_ms = self.now_ms;
        let (log, counters) = self
            .topics
            .partition_and_counters_mut(key)
            .expect("checked by the caller");
        counters.produced(bytes.len(), header.records_count);
        let info = log.append(bytes, now_ms, log_append_time);
        let log_start_offset = log.log_start_offset();
        if header.has_producer_id() {
            // The producer's last timestamp is its batch's (Kafka's
            // ProducerStateEntry.lastTimestamp: what DescribeProducers shows
            // and producer.id.expiration.ms counts from), the same before and
            // after a restart rebuilds it from the log.
            let batch_timestamp_ms = if log_append_time {
                now_ms
            } else {
                header.max_timestamp
            };
            self.producer_states_mut(key).record(
                header,
                info.base_offset,
                info.last_offset,
                batch_timestamp_ms,
            );
        }
        if header.is_transactional() {
            self.partition_txns
                .entry(key.clone())
                .or_default()
                .on_data(header.producer_id, info.base_offset);
        }
        for op in info.ops {
            self.emit_disk(key.clone(), op);
        }
        BatchAppended {
            base_offset: info.base_offset,
            last_offset: info.last_offset,
            log_append_time_ms: info.log_append_time_ms,
            log_start_offset,
        }
    }

    /// Checks a marker a coordinator asks for (WriteTxnMarkers) against the
    /// producer's state in the partition (`ProducerStates::check_marker`).
    pub(crate) fn check_marker(
        &self,
        key: &PartitionKey,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<(), MarkerFenced> {
        match self.producer_states.get(key) {
            Some(states) => states.check_marker(producer_id, epoch, coordinator_epoch),
            None => Ok(()),
        }
    }

    /// Whether `producer_id`'s transaction is closed on this partition at
    /// `epoch`, durably: nothing of it open, no marker of it that a failed
    /// sync could still cut away, and a batch of `epoch` or later seen (its
    /// marker, or earlier data of the same epoch, in which case a marker
    /// would close nothing). A marker there would change nothing but a
    /// fenced producer's epoch, which this requires to be seen already.
    pub(crate) fn txn_closed_at(&self, key: &PartitionKey, producer_id: i64, epoch: i16) -> bool {
        if self.offline.contains(key) {
            return false;
        }
        let open = self
            .partition_txns
            .get(key)
            .is_some_and(|t| t.is_ongoing(producer_id) || t.has_unsynced_marker(producer_id));
        let seen = self
            .producer_states
            .get(key)
            .and_then(|s| s.epoch(producer_id));
        !open && seen.is_some_and(|e| e >= epoch)
    }

    /// Appends a transaction marker of `producer_id` to a partition and
    /// returns its offset. An abort of a transaction that wrote here is
    /// booked in the segment's `.txnindex`; a marker of a producer with no
    /// transaction open here changes no transaction state (Kafka's
    /// appendEndTxnMarker completes no transaction then).
    pub(crate) fn append_marker(
        &mut self,
        key: &PartitionKey,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
    ) -> Result<i64, MarkerRefused> {
        if self.offline.contains(key) {
            return Err(MarkerRefused::Offline);
        }
        let now_ms = self.now_ms;
        let log = self
            .topics
            .partition_mut_by_key(key)
            .ok_or(MarkerRefused::Gone)?;
        let mut info = log.append(
            crate::control::build(producer_id, epoch, commit, coordinator_epoch, now_ms),
            now_ms,
            false,
        );
        let aborted = self
            .partition_txns
            .entry(key.clone())
            .or_default()
            .on_marker(producer_id, commit, info.base_offset);
        if let Some(aborted) = aborted {
            let log = self
                .topics
                .partition_mut_by_key(key)
                .expect("appended above");
            info.ops.push(log.append_aborted(&aborted));
        }
        self.producer_states_mut(key)
            .record_marker(producer_id, epoch, coordinator_epoch, now_ms);
        for op in info.ops {
            self.emit_disk(key.clone(), op);
        }
        Ok(info.base_offset)
    }

    /// A Fetch response sent `bytes` bytes and `records` offsets of `topic`
    /// (`crate::metrics::TopicCounters::fetched_records`).
    pub(crate) fn count_fetched(&mut self, topic: &str, bytes: u64, records: u64) {
        if let Some(counters) = self.topics.counters_mut(topic) {
            counters.fetched(bytes, records);
        }
    }

    /// Moves a partition's log start to `offset` (DeleteRecords, once meta.db
    /// holds it), deletes the segments wholly below it, and returns the log
    /// start now (larger than `offset` if retention got further meanwhile).
    ///
    /// Producer state stays as it is: since KIP-360 Kafka keeps a producer
    /// whose batches were all deleted until producer.id.expiration.ms
    /// (ProducerStateManager.onLogStartOffsetIncremented drops only completed
    /// transactions whose marker is below the start, which we forget when
    /// their marker is durable), so an idempotent producer is not answered
    /// UNKNOWN_PRODUCER_ID after its records go. Open transactions stay open;
    /// the stable offset counts from the start (`last_stable_offset`).
    pub(crate) fn move_log_start(&mut self, key: &PartitionKey, offset: i64) -> Option<i64> {
        let log = self.topics.partition_mut_by_key(key)?;
        log.log_start_stored(offset);
        let ops = log.increment_log_start(offset);
        let start = log.log_start_offset();
        assert!(start >= offset, "the log start never moves back");
        // Aborted transactions wholly below the start are no longer fetched.
        if let Some(txns) = self.partition_txns.get_mut(key) {
            txns.forget_below(start);
        }
        for op in ops {
            self.emit_disk(key.clone(), op);
        }
        Some(start)
    }

    /// The partition's producer state (empty for a partition never written).
    fn producer_states_mut(&mut self, key: &PartitionKey) -> &mut ProducerStates {
        self.producer_states.entry(key.clone()).or_default()
    }

    /// After a failed sync: cuts the partition back to its high watermark, its
    /// producer and transaction state with it, and emits the cut (and the
    /// repair of the index files of the segment kept).
    pub(super) fn truncate_to_durable(&mut self, key: &PartitionKey) {
        let Some(log) = self.topics.partition_by_key(key) else {
            return;
        };
        let hw = log.high_watermark();
        let hw_segment = log.high_watermark_position().segment_base;
        let aborted_kept = match self.partition_txns.get_mut(key) {
            Some(txns) => {
                txns.truncate_above(hw);
                txns.aborted_in(hw_segment, i64::MAX)
            }
            None => Vec::new(),
        };
        if let Some(states) = self.producer_states.get_mut(key) {
            states.truncate_above(hw);
        }
        let log = self
            .topics
            .partition_mut_by_key(key)
            .expect("present above");
        let ops = log.truncate_to_durable(&aborted_kept);
        for op in ops {
            self.emit_disk(key.clone(), op);
        }
        // Index appends of earlier segments a `SyncScope::Logs` sync left
        // unsynced: the failure may have taken them too.
        let unsynced = self
            .topics
            .partition_by_key(key)
            .map(|log| log.segments_with_unsynced_indexes())
            .unwrap_or_default();
        for base in unsynced.into_iter().filter(|b| *b != hw_segment) {
            self.repair_indexes(key, base);
        }
    }

    /// Repairs a segment's index files from memory (after a failed sync).
    pub(super) fn repair_indexes(&mut self, key: &PartitionKey, segment_base: i64) {
        let Some(log) = self.topics.partition_mut_by_key(key) else {
            return;
        };
        let Some((from, to)) = log.segment_span(segment_base) else {
            return;
        };
        let aborted = self
            .partition_txns
            .get(key)
            .map(|t| t.aborted_in(from, to))
            .unwrap_or_default();
        let ops = log.repair_indexes(segment_base, &aborted);
        for op in ops {
            self.emit_disk(key.clone(), op);
        }
    }

    /// A partition whose files failed a read answers KAFKA_STORAGE_ERROR
    /// until a restart (Kafka takes the failed log dir offline). A read of a
    /// segment the log no longer holds (retention or a topic deletion got
    /// there first) is a race, not a failed disk: the reader was answered
    /// with an error or a closed connection, and nothing goes offline.
    pub(super) fn take_offline(&mut self, range: &FileRange) {
        let dir = &range.dir;
        let Some(topic) = self.topics.get(&dir.topic) else {
            return;
        };
        let key = topic.key(dir.partition);
        let held = self
            .topics
            .partition_by_key(&key)
            .is_some_and(|log| log.holds(range));
        if held && self.offline.insert(key) {
            tracing::error!(dir = %dir.dir_name(), "partition offline until restart");
        }
    }
}
