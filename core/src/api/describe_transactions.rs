//! DescribeTransactions (key 65), v0.
//!
//! Each id's state as TransactionCoordinator.handleDescribeTransactions gives
//! it: state name, timeout, start time, producer id and epoch, and the
//! partitions added; an unknown id TRANSACTIONAL_ID_NOT_FOUND, an empty one
//! INVALID_REQUEST.
//!
//! ACL: DESCRIBE on each transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED
//! for that one); topics the principal may not DESCRIBE are left out of the
//! partitions, as KafkaApis filters them.

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::security::acl::{resource, Op};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: DescribeTransactionsRequest) {
    let states = req
        .transactional_ids
        .iter()
        .map(|id| {
            // Kafka answers an id it cannot describe with the message's
            // defaults (producer id, epoch and start time 0; seen in
            // conformance), not with -1s.
            let base = TransactionState::default().with_transactional_id(id.clone());
            if !b.core.authorized(
                &ctx,
                Op::Describe,
                resource::TRANSACTIONAL_ID,
                id.0.as_str(),
            ) {
                let error = ResponseError::TransactionalIdAuthorizationFailed;
                return base.with_error_code(error.code());
            }
            if id.0.is_empty() {
                return base.with_error_code(ResponseError::InvalidRequest.code());
            }
            let Some(entry) = b.core.txns().get(id.0.as_str()) else {
                return base.with_error_code(ResponseError::TransactionalIdNotFound.code());
            };
            let r = &entry.record;
            let mut topics: Vec<TopicData> = Vec::new();
            for (t, p) in &r.partitions {
                if !b.core.authorized(&ctx, Op::Describe, resource::TOPIC, t) {
                    continue;
                }
                match topics.iter_mut().find(|d| d.topic.0.as_str() == t) {
                    Some(d) => d.partitions.push(*p),
                    None => topics.push(
                        TopicData::default()
                            .with_topic(super::metadata::topic_name(t))
                            .with_partitions(vec![*p]),
                    ),
                }
            }
            base.with_transaction_state(StrBytes::from_static_str(r.state.name()))
                .with_transaction_timeout_ms(r.timeout_ms)
                .with_transaction_start_time_ms(r.start_ms)
                .with_producer_id(ProducerId(r.producer_id))
                .with_producer_epoch(r.producer_epoch)
                .with_topics(topics)
        })
        .collect();
    let response = DescribeTransactionsResponse::default().with_transaction_states(states);
    b.core
        .respond(&ctx, ResponseKind::DescribeTransactions(response));
}
