//! WriteTxnMarkers (key 27), v1 (Kafka 4.x's range: it removed v0).
//!
//! Kafka's transaction coordinators send it to partition leaders; doze's
//! coordinator writes its own markers directly (`txn::complete`), so here it
//! comes from an admin: `kafka-transactions.sh abort --topic T --partition P
//! --start-offset O` (AdminClient.abortTransaction) ends a hanging
//! transaction by writing an abort marker with the producer id and epoch,
//! and the coordinator epoch, that DescribeProducers showed.
//!
//! As KafkaApis.handleWriteTxnMarkersRequest: without ALTER or
//! CLUSTER_ACTION on the cluster every partition is answered
//! CLUSTER_AUTHORIZATION_FAILED and nothing is written. Then per partition of
//! each marker entry:
//! - an unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION (an offline
//!   one: KAFKA_STORAGE_ERROR);
//! - the checks of an append of origin COORDINATOR
//!   (ProducerAppendInfo.appendEndTxnMarker): an epoch older than the
//!   producer's current one there INVALID_PRODUCER_EPOCH; a coordinator
//!   epoch older than that of the producer's last marker there
//!   TRANSACTION_COORDINATOR_FENCED;
//! - else a marker with the request's producer id, epoch, coordinator epoch
//!   and result is appended. A producer with a transaction open there has
//!   it ended: an abort is booked in the `.txnindex` and listed to
//!   read_committed fetches, and the LSO moves past it once the marker is
//!   durable. A marker for a producer with no transaction open there is
//!   appended all the same and changes nothing else (Kafka does the same).
//!
//! The answer leaves once every marker appended is fsynced, as EndTxn's
//! (a marker a failed sync cut away: KAFKA_STORAGE_ERROR, and the
//! transaction is open again; its partition deleted meanwhile:
//! UNKNOWN_TOPIC_OR_PARTITION). Results are grouped by producer id, as
//! Kafka's WriteTxnMarkersResponse is built from a map keyed by it.
//!
//! The transaction coordinator is not told. Kafka's is not either: its
//! state lives apart from the partitions, and the admin abort only fixes the
//! partition. If the coordinator still holds the transactional id Ongoing
//! with this partition added, it later ends the transaction itself (EndTxn,
//! or its timeout) and writes its own markers here; they find no
//! transaction open and change nothing (our coordinator's own markers skip
//! the epoch checks above: it is the only coordinator, at epoch 0). A live
//! producer that writes to the partition again in that transaction opens a
//! new one there, which its EndTxn ends: so the tool is for hanging
//! transactions only, as Kafka's documentation warns.
//!
//! Not as Kafka: a marker entry with a negative producer id or epoch is
//! answered INVALID_REQUEST (Kafka would append a control batch that belongs
//! to no producer).

use kafka_protocol::messages::write_txn_markers_request::WritableTxnMarker;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    ResponseKind, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::core_state::MarkerRefused;
use crate::producer::MarkerFenced;
use crate::security::acl::{resource, Op};
use crate::topics::{PartitionKey, Topics};

/// The cluster resource's one name.
const CLUSTER_NAME: &str = "kafka-cluster";

/// A WriteTxnMarkers request whose markers are not all durable yet.
pub struct PendingMarkers {
    ctx: RequestCtx,
    response: WriteTxnMarkersResponse,
    /// (partition, marker offset that must be durable, where its result is)
    waits: Vec<(PartitionKey, i64, Slot)>,
}

/// Where a partition's result sits: marker result, topic, partition.
#[derive(Clone, Copy, Debug)]
struct Slot(usize, usize, usize);

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: WriteTxnMarkersRequest) {
    let allowed = b
        .core
        .authorized(&ctx, Op::Alter, resource::CLUSTER, CLUSTER_NAME)
        || b.core
            .authorized(&ctx, Op::ClusterAction, resource::CLUSTER, CLUSTER_NAME);
    let mut response = WriteTxnMarkersResponse::default();
    let mut waits = Vec::new();
    for marker in &req.markers {
        for topic in &marker.topics {
            let name = topic.name.0.as_str();
            for &partition in &topic.partition_indexes {
                let written = if allowed {
                    write_marker(b, marker, name, partition)
                } else {
                    Err(ResponseError::ClusterAuthorizationFailed)
                };
                let slot = result_slot(&mut response, marker.producer_id.0, name, partition);
                match written {
                    Ok((key, offset)) => waits.push((key, offset, slot)),
                    Err(error) => set_error(&mut response, slot, error),
                }
            }
        }
    }
    if !waits.is_empty() {
        b.core.request_sync();
    }
    let mut pending = PendingMarkers {
        ctx,
        response,
        waits,
    };
    if pending.settle(b.core.topics()) {
        let (ctx, response) = pending.answer();
        return b.core.respond(&ctx, response);
    }
    b.park_markers(pending);
}

/// Checks and appends one partition's marker: where it landed, or the
/// partition's error.
fn write_marker(
    b: &mut Cx,
    marker: &WritableTxnMarker,
    topic: &str,
    partition: i32,
) -> Result<(PartitionKey, i64), ResponseError> {
    let (producer_id, epoch) = (marker.producer_id.0, marker.producer_epoch);
    if producer_id < 0 || epoch < 0 {
        return Err(ResponseError::InvalidRequest);
    }
    let key = b.core.partition_key(topic, partition)?;
    b.core
        .check_marker(&key, producer_id, epoch, marker.coordinator_epoch)
        .map_err(|fenced| match fenced {
            MarkerFenced::ProducerEpoch { .. } => ResponseError::InvalidProducerEpoch,
            MarkerFenced::CoordinatorEpoch { .. } => ResponseError::TransactionCoordinatorFenced,
        })?;
    let commit = marker.transaction_result;
    let offset = b
        .core
        .append_marker(&key, producer_id, epoch, marker.coordinator_epoch, commit)
        .map_err(|refused| match refused {
            MarkerRefused::Gone => ResponseError::UnknownTopicOrPartition,
            MarkerRefused::Offline => ResponseError::KafkaStorageError,
        })?;
    Ok((key, offset))
}

/// Adds a partition's result (no error yet) under its producer id and topic.
fn result_slot(
    response: &mut WriteTxnMarkersResponse,
    producer_id: i64,
    topic: &str,
    partition: i32,
) -> Slot {
    let mi = match response
        .markers
        .iter()
        .position(|m| m.producer_id.0 == producer_id)
    {
        Some(i) => i,
        None => {
            response.markers.push(
                WritableTxnMarkerResult::default()
                    .with_producer_id(kafka_protocol::messages::ProducerId(producer_id)),
            );
            response.markers.len() - 1
        }
    };
    let topics = &mut response.markers[mi].topics;
    let ti = match topics.iter().position(|t| t.name.0.as_str() == topic) {
        Some(i) => i,
        None => {
            // An owned copy: the decoded name is a slice of the request frame.
            let name = TopicName(StrBytes::from_string(topic.to_string()));
            topics.push(WritableTxnMarkerTopicResult::default().with_name(name));
            topics.len() - 1
        }
    };
    let partitions = &mut topics[ti].partitions;
    partitions.push(WritableTxnMarkerPartitionResult::default().with_partition_index(partition));
    Slot(mi, ti, partitions.len() - 1)
}

fn set_error(response: &mut WriteTxnMarkersResponse, Slot(mi, ti, pi): Slot, e: ResponseError) {
    response.markers[mi].topics[ti].partitions[pi].error_code = e.code();
}

impl PendingMarkers {
    /// Drops the waits whose marker is now durable; a wait whose partition
    /// is gone fails with UNKNOWN_TOPIC_OR_PARTITION. Whether none is left.
    pub(crate) fn settle(&mut self, topics: &Topics) -> bool {
        let response = &mut self.response;
        self.waits
            .retain(|(key, offset, slot)| match topics.partition_by_key(key) {
                Some(log) => log.high_watermark() <= *offset,
                None => {
                    set_error(response, *slot, ResponseError::UnknownTopicOrPartition);
                    false
                }
            });
        self.waits.is_empty()
    }

    /// After a failed sync truncated the logs: every marker cut away fails
    /// with KAFKA_STORAGE_ERROR (its transaction is open again; the admin
    /// asks again).
    pub(crate) fn fail_cut(&mut self, topics: &Topics) {
        let response = &mut self.response;
        self.waits
            .retain(|(key, offset, slot)| match topics.partition_by_key(key) {
                Some(log) if log.log_end_offset() <= *offset => {
                    set_error(response, *slot, ResponseError::KafkaStorageError);
                    false
                }
                _ => true,
            });
    }

    /// The request and its answer, once nothing is left to wait for.
    pub(crate) fn answer(self) -> (RequestCtx, ResponseKind) {
        (self.ctx, ResponseKind::WriteTxnMarkers(self.response))
    }
}
