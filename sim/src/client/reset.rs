//! auto.offset.reset=earliest, as the real consumers do it: a fetch
//! answered OFFSET_OUT_OF_RANGE carries no log start (Kafka sends -1 for
//! it, and so does doze), so the client asks ListOffsets for the earliest
//! offset (timestamp -2) of those partitions and fetches on from there
//! (Kafka's consumer: `SubscriptionState.requestOffsetReset`, then
//! `OffsetFetcher.resetPositionsIfNeeded`).

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rand::RngExt;

use super::Cx;

/// ListOffsets' timestamp for the earliest offset.
const EARLIEST_TIMESTAMP: i64 = -2;

/// A ListOffsets request for the earliest offset of `partitions`, at a
/// version a client of today might use (1, the first with one offset per
/// partition, to 7).
pub fn earliest_request(
    cx: &mut Cx,
    topic: &str,
    partitions: impl IntoIterator<Item = i32>,
) -> (i16, ListOffsetsRequest) {
    let partitions = partitions
        .into_iter()
        .map(|p| {
            ListOffsetsPartition::default()
                .with_partition_index(p)
                .with_timestamp(EARLIEST_TIMESTAMP)
        })
        .collect();
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(partitions)]);
    (cx.rng.random_range(1..=7), request)
}

/// Each partition's earliest offset, or the first error code.
pub fn earliest_offsets(r: &ListOffsetsResponse) -> Result<Vec<(i32, i64)>, i16> {
    let mut offsets = Vec::new();
    for part in r.topics.iter().flat_map(|t| t.partitions.iter()) {
        if part.error_code != 0 {
            return Err(part.error_code);
        }
        offsets.push((part.partition_index, part.offset));
    }
    Ok(offsets)
}
