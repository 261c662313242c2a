//! One partition by its key, for the API handlers and the transaction
//! coordinator: the lookups and the errors a client is answered with, and
//! the calls into the `crate::partition::Partition` that holds the log,
//! producer state and transaction state together.

use bytes::Bytes;

use super::Core;
use crate::batch::BatchHeader;
use crate::io::FileRange;
use crate::partition::{BatchAppended, MarkerRefused, Partition};
use crate::producer::{AppendCheck, MarkerFenced, ProducerError};
use crate::topics::PartitionKey;

impl Core {
    /// A partition to read or write, or the error a client is answered with:
    /// UNKNOWN_TOPIC_OR_PARTITION, or KAFKA_STORAGE_ERROR while it is offline.
    pub(crate) fn partition_view(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<&Partition, kafka_protocol::ResponseError> {
        let key = self.partition_key(topic, partition)?;
        Ok(self
            .topics
            .get_partition(&key)
            .expect("checked by partition_key"))
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
        if self.is_offline(&key) {
            return Err(ResponseError::KafkaStorageError);
        }
        Ok(key)
    }

    /// Whether the partition is offline after a failed read.
    pub(crate) fn is_offline(&self, key: &PartitionKey) -> bool {
        self.topics
            .get_partition(key)
            .is_some_and(Partition::is_offline)
    }

    /// Whether `producer_id` has a transaction open in the partition.
    pub(crate) fn has_ongoing_txn(&self, key: &PartitionKey, producer_id: i64) -> bool {
        self.topics
            .get_partition(key)
            .is_some_and(|p| p.has_ongoing_txn(producer_id))
    }

    /// Checks a producer's batch against the partition's producer state.
    pub(crate) fn check_producer(
        &mut self,
        key: &PartitionKey,
        header: &BatchHeader,
    ) -> Result<AppendCheck, ProducerError> {
        match self.topics.get_partition_mut(key) {
            Some(partition) => partition.check_producer(header),
            // A partition gone has no producers: what a fresh state says.
            None => crate::producer::ProducerStates::default().check(header),
        }
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
        let (partition, counters) = self
            .topics
            .partition_and_counters_mut(key)
            .expect("checked by the caller");
        counters.produced(bytes.len(), header.records_count);
        partition.append_batch(
            header,
            bytes,
            self.now_ms,
            log_append_time,
            &mut self.outbox,
        )
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
        match self.topics.get_partition(key) {
            Some(partition) => partition.check_marker(producer_id, epoch, coordinator_epoch),
            None => Ok(()),
        }
    }

    /// Appends a transaction marker of `producer_id` to a partition and
    /// returns its offset (`Partition::append_marker`).
    pub(crate) fn append_marker(
        &mut self,
        key: &PartitionKey,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
    ) -> Result<i64, MarkerRefused> {
        let partition = self
            .topics
            .get_partition_mut(key)
            .ok_or(MarkerRefused::Gone)?;
        partition.append_marker(
            producer_id,
            epoch,
            coordinator_epoch,
            commit,
            self.now_ms,
            &mut self.outbox,
        )
    }

    /// A Fetch response sent `bytes` bytes and `records` offsets of `topic`
    /// (`crate::metrics::TopicCounters::fetched_records`).
    pub(crate) fn count_fetched(&mut self, topic: &str, bytes: u64, records: u64) {
        if let Some(counters) = self.topics.counters_mut(topic) {
            counters.fetched(bytes, records);
        }
    }

    /// Moves a partition's log start to `offset` (DeleteRecords, once meta.db
    /// holds it) and returns the log start now (`Partition::move_log_start`);
    /// `None` for a partition gone.
    pub(crate) fn move_log_start(&mut self, key: &PartitionKey, offset: i64) -> Option<i64> {
        let partition = self.topics.get_partition_mut(key)?;
        Some(partition.move_log_start(offset, &mut self.outbox))
    }

    /// Repairs a segment's index files from memory (after a failed sync).
    pub(super) fn repair_indexes(&mut self, key: &PartitionKey, segment_base: i64) {
        if let Some(partition) = self.topics.get_partition_mut(key) {
            partition.repair_indexes(segment_base, &mut self.outbox);
        }
    }

    /// A read of `range` failed (`Partition::read_failed`). A read of a
    /// partition gone is a race, not a failed disk: the reader was answered
    /// with an error or a closed connection, and nothing goes offline.
    pub(crate) fn take_offline(&mut self, range: &FileRange) {
        let dir = &range.dir;
        let Some(topic) = self.topics.get(&dir.topic) else {
            return;
        };
        let key = topic.key(dir.partition);
        let Some(partition) = self.topics.get_partition_mut(&key) else {
            return;
        };
        if partition.read_failed(range) {
            tracing::error!(dir = %dir.dir_name(), "partition offline until restart");
        }
    }
}
