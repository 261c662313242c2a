//! DescribeClientQuotas (key 48), v0–v1.
//!
//! doze enforces no client quotas, so every filter matches nothing: an empty
//! list of entries, as Kafka answers when none is set. Served because
//! Kafka's `kafka-configs --describe --entity-type users` asks it beside
//! DescribeUserScramCredentials. Needs DESCRIBE_CONFIGS on the cluster
//! (CLUSTER_AUTHORIZATION_FAILED), as Kafka's KafkaApis asks.

use kafka_protocol::messages::{
    DescribeClientQuotasRequest, DescribeClientQuotasResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::security::acl::{resource, Op};

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, _req: DescribeClientQuotasRequest) {
    let response = if b.core.authorized(
        &ctx,
        Op::DescribeConfigs,
        resource::CLUSTER,
        "kafka-cluster",
    ) {
        DescribeClientQuotasResponse::default().with_entries(Some(Vec::new()))
    } else {
        DescribeClientQuotasResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(StrBytes::from_static_str(
                "Cluster authorization failed.",
            )))
    };
    b.core
        .respond(&ctx, ResponseKind::DescribeClientQuotas(response));
}
