//! DescribeCluster (key 60), v0–v1.
//!
//! One broker, this node, which is also the controller. v1 asks for an
//! endpoint type: brokers (1) are served; controllers (2) get
//! UNSUPPORTED_ENDPOINT_TYPE, as Kafka brokers answer.
//!
//! ACL: none, as on Kafka's brokers (only a KRaft controller asks ALTER on the cluster).

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;

const ENDPOINT_BROKERS: i8 = 1;

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: DescribeClusterRequest) {
    let (host, port) = b.core.advertised_address(ctx.conn);
    let config = b.core.config();
    let mut response = DescribeClusterResponse::default()
        .with_endpoint_type(req.endpoint_type)
        .with_cluster_id(StrBytes::from_string(config.cluster_id.clone()))
        .with_controller_id(BrokerId(config.node_id))
        .with_cluster_authorized_operations(i32::MIN);
    if ctx.version >= 1 && req.endpoint_type != ENDPOINT_BROKERS {
        response.error_code = ResponseError::UnsupportedEndpointType.code();
    } else {
        response.brokers = vec![DescribeClusterBroker::default()
            .with_broker_id(BrokerId(config.node_id))
            .with_host(StrBytes::from_string(host))
            .with_port(port)];
    }
    b.core
        .respond(&ctx, ResponseKind::DescribeCluster(response));
}
