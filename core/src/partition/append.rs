//! What a producer, a coordinator or DeleteRecords appends or moves.

use bytes::Bytes;

use super::Partition;
use crate::batch::BatchHeader;
use crate::outbox::Outbox;

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

impl Partition {
    /// Appends a producer's batch, checked (`check_producer`): the log, the
    /// producer and transaction state, and the disk writes.
    pub fn append_batch(
        &mut self,
        header: &BatchHeader,
        bytes: Bytes,
        now_ms: i64,
        log_append_time: bool,
        outbox: &mut Outbox,
    ) -> BatchAppended {
        let info = self.log.append(bytes, now_ms, log_append_time);
        let log_start_offset = self.log.log_start_offset();
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
            self.producers.get_or_insert_default().record(
                header,
                info.base_offset,
                info.last_offset,
                batch_timestamp_ms,
            );
        }
        if header.is_transactional() {
            self.txns
                .get_or_insert_default()
                .on_data(header.producer_id, info.base_offset);
        }
        self.emit_all(info.ops, outbox);
        BatchAppended {
            base_offset: info.base_offset,
            last_offset: info.last_offset,
            log_append_time_ms: info.log_append_time_ms,
            log_start_offset,
        }
    }

    /// Appends a transaction marker of `producer_id` and returns its offset.
    /// An abort of a transaction that wrote here is booked in the segment's
    /// `.txnindex`; a marker of a producer with no transaction open here
    /// changes no transaction state (Kafka's appendEndTxnMarker completes no
    /// transaction then).
    pub fn append_marker(
        &mut self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
        now_ms: i64,
        outbox: &mut Outbox,
    ) -> Result<i64, MarkerRefused> {
        if self.offline {
            return Err(MarkerRefused::Offline);
        }
        let marker = crate::control::build(producer_id, epoch, commit, coordinator_epoch, now_ms);
        let mut info = self.log.append(marker, now_ms, false);
        let aborted =
            self.txns
                .get_or_insert_default()
                .on_marker(producer_id, commit, info.base_offset);
        if let Some(aborted) = aborted {
            info.ops.push(self.log.append_aborted(&aborted));
        }
        self.producers.get_or_insert_default().record_marker(
            producer_id,
            epoch,
            coordinator_epoch,
            now_ms,
        );
        self.emit_all(info.ops, outbox);
        Ok(info.base_offset)
    }

    /// Moves the log start to `offset` (DeleteRecords, once meta.db holds
    /// it), deletes the segments wholly below it, and returns the log start
    /// now (larger than `offset` if retention got further meanwhile).
    ///
    /// Producer state stays as it is: since KIP-360 Kafka keeps a producer
    /// whose batches were all deleted until producer.id.expiration.ms
    /// (ProducerStateManager.onLogStartOffsetIncremented drops only completed
    /// transactions whose marker is below the start, which we forget when
    /// their marker is durable), so an idempotent producer is not answered
    /// UNKNOWN_PRODUCER_ID after its records go. Open transactions stay open;
    /// the stable offset counts from the start (`last_stable_offset`).
    pub fn move_log_start(&mut self, offset: i64, outbox: &mut Outbox) -> i64 {
        self.log.log_start_stored(offset);
        let ops = self.log.increment_log_start(offset);
        let start = self.log.log_start_offset();
        assert!(start >= offset, "the log start never moves back");
        // Aborted transactions wholly below the start are no longer fetched.
        if let Some(txns) = self.txns.as_mut() {
            txns.forget_below(start);
        }
        self.emit_all(ops, outbox);
        start
    }
}
