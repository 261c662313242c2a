//! DescribeProducers (key 61), v0.
//!
//! The active producers of each partition, from its producer state: id,
//! epoch, last sequence, last timestamp, and the first offset of its open
//! transaction there (-1 when none). Coordinator epochs are not kept (one
//! node): -1.
//!
//! ACL: READ on each topic (TOPIC_AUTHORIZATION_FAILED, with Kafka's text,
//! for its partitions).

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, ProducerId, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::security::acl::{resource, Op};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: DescribeProducersRequest) {
    let mut topics = Vec::new();
    for t in &req.topics {
        let name = t.name.0.to_string();
        let readable = b.core.authorized(&ctx, Op::Read, resource::TOPIC, &name);
        let mut partitions = Vec::new();
        for &p in &t.partition_indexes {
            let mut pr = PartitionResponse::default().with_partition_index(p);
            if !readable {
                pr.error_code = ResponseError::TopicAuthorizationFailed.code();
                pr.error_message = Some(StrBytes::from_static_str("Topic authorization failed."));
                partitions.push(pr);
                continue;
            }
            let part = match b.core.partition_view(&name, p) {
                Ok(part) => part,
                Err(e) => {
                    pr.error_code = e.code();
                    partitions.push(pr);
                    continue;
                }
            };
            let states = part.producers().map(|s| s.describe()).unwrap_or_default();
            let txns = part.txns();
            pr.active_producers = states
                .into_iter()
                .map(|d| {
                    let open = txns
                        .and_then(|t| t.ongoing().find(|(pid, _)| *pid == d.producer_id))
                        .map_or(-1, |(_, o)| o);
                    ProducerState::default()
                        .with_producer_id(ProducerId(d.producer_id))
                        .with_producer_epoch(d.epoch as i32)
                        .with_last_sequence(d.last_sequence)
                        .with_last_timestamp(d.last_timestamp_ms)
                        .with_coordinator_epoch(d.coordinator_epoch)
                        .with_current_txn_start_offset(open)
                })
                .collect();
            partitions.push(pr);
        }
        topics.push(
            TopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions),
        );
    }
    b.core.respond(
        &ctx,
        ResponseKind::DescribeProducers(DescribeProducersResponse::default().with_topics(topics)),
    );
}
