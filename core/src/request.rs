//! Who asked: the context every request carries from its frame to its
//! answer. It lives below `api` because the coordinators park requests too
//! (a JoinGroup waiting for its rebalance, an EndTxn waiting for its markers)
//! and answer them later.

use kafka_protocol::messages::ApiKey;

use crate::io::ConnId;

/// Who asked, so the answer finds its way back in order.
#[derive(Clone, Debug)]
pub struct RequestCtx {
    pub conn: ConnId,
    /// The request's place in its connection's order.
    pub seq: u64,
    pub api_key: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    /// The client id of the request header ("" when null).
    pub client_id: kafka_protocol::protocol::StrBytes,
}
