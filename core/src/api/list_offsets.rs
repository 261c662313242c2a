//! ListOffsets (key 2), v1–v7.
//!
//! Per partition, by the timestamp asked:
//! - -2 (EARLIEST): the log start offset;
//! - -1 (LATEST): the high watermark, or the last stable offset under
//!   read_committed (v2+ isolation level);
//! - -3 (MAX_TIMESTAMP, v7): the offset and timestamp of the largest timestamp;
//! - t >= 0: the first offset whose timestamp is >= t, or offset -1 and
//!   timestamp -1 when there is none (Kafka's answer).
//!
//! Only durable data (below the high watermark) is ever reported.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, ResponseKind};
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::broker::Broker;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const READ_COMMITTED: i8 = 1;

pub(crate) fn handle(b: &mut Broker, ctx: RequestCtx, req: ListOffsetsRequest) {
    let read_committed = req.isolation_level == READ_COMMITTED;
    let mut topics = Vec::with_capacity(req.topics.len());
    for topic in &req.topics {
        let name = topic.name.0.as_str();
        let partitions = topic
            .partitions
            .iter()
            .map(|p| {
                let base = ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_timestamp(-1)
                    .with_offset(-1)
                    .with_leader_epoch(-1);
                let Some(log) = b.topics.partition(name, p.partition_index) else {
                    return base.with_error_code(ResponseError::UnknownTopicOrPartition.code());
                };
                let hw = log.high_watermark();
                let key = b
                    .topics
                    .get(name)
                    .expect("partition found above")
                    .key(name, p.partition_index);
                let lso = super::fetch::last_stable_offset(b.partition_txns.get(&key), hw);
                let upper = if read_committed { lso } else { hw };
                match p.timestamp {
                    LATEST => base.with_offset(upper),
                    EARLIEST => base.with_offset(log.log_start_offset()),
                    MAX_TIMESTAMP => match log.max_timestamp(upper) {
                        Some((offset, ts)) => base.with_offset(offset).with_timestamp(ts),
                        None => base,
                    },
                    ts if ts >= 0 => match log.offset_for_timestamp(ts, upper) {
                        Some((offset, found_ts)) => {
                            base.with_offset(offset).with_timestamp(found_ts)
                        }
                        None => base,
                    },
                    _ => base.with_error_code(ResponseError::InvalidRequest.code()),
                }
            })
            .collect();
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    b.respond(
        &ctx,
        ResponseKind::ListOffsets(ListOffsetsResponse::default().with_topics(topics)),
    );
}
