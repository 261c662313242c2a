//! Which version of each API the client sends: the highest that both the
//! broker (its ApiVersions answer) and the client speak.
//!
//! The client's side is kafka-protocol's range for the request and its
//! response, narrowed by `CLIENT` for the APIs the typed methods build:
//! those ranges are the ones the methods' code handles (e.g. FindCoordinator
//! below and from v4, OffsetFetch below and from v8) and the tests below
//! encode and decode every version of them. kafka-protocol's own tables can
//! disagree with its encoders, so they are not trusted alone.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Message, Request};

/// (API, min, max) the typed methods are written and tested for.
///
/// - Metadata from v1 (v0's empty topic list means all topics); up to v12,
///   the last that names topics in requests without ids.
/// - Fetch up to v12: v13 on names topics by id only.
/// - ListOffsets up to v7 (later versions add only a timeout and offset
///   specs the tools do not ask).
/// - OffsetFetch up to v9 (kafka-protocol's response goes to v10, its
///   request to v9).
pub const CLIENT: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::FindCoordinator, 1, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::WriteTxnMarkers, 1, 1),
];

/// The client's range of `R`: kafka-protocol's request and response ranges,
/// narrowed by `CLIENT` if it lists the API.
pub fn client_range<R: Request>() -> (i16, i16) {
    let req = <R as Message>::VERSIONS;
    let resp = <R::Response as Message>::VERSIONS;
    let (mut min, mut max) = (req.min.max(resp.min), req.max.min(resp.max));
    if let Some(&(_, cmin, cmax)) = CLIENT.iter().find(|(k, _, _)| *k as i16 == R::KEY) {
        min = min.max(cmin);
        max = max.min(cmax);
    }
    (min, max)
}

/// The highest version in both the broker's range and the client's, if
/// the ranges meet.
pub fn negotiate<R: Request>(broker: Option<(i16, i16)>) -> Option<i16> {
    let (bmin, bmax) = broker?;
    let (cmin, cmax) = client_range::<R>();
    let version = bmax.min(cmax);
    (version >= bmin.max(cmin)).then_some(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Decodable, Encodable};

    /// Every version the client may send: a default request encodes, and a
    /// default response encodes and decodes back to itself.
    fn round_trips<R: Request + Default>()
    where
        R::Response: Default + PartialEq + std::fmt::Debug,
    {
        let (min, max) = client_range::<R>();
        assert!(min <= max, "API {} has no version", R::KEY);
        for version in min..=max {
            let mut buf = BytesMut::new();
            R::default()
                .encode(&mut buf, version)
                .unwrap_or_else(|e| panic!("API {} v{version} request: {e}", R::KEY));
            let mut buf = BytesMut::new();
            let response = R::Response::default();
            response
                .encode(&mut buf, version)
                .unwrap_or_else(|e| panic!("API {} v{version} response: {e}", R::KEY));
            let back = R::Response::decode(&mut buf.freeze(), version)
                .unwrap_or_else(|e| panic!("API {} v{version} response back: {e}", R::KEY));
            assert_eq!(back, response, "API {} v{version}", R::KEY);
        }
    }

    #[test]
    fn every_version_the_client_sends_encodes() {
        round_trips::<ApiVersionsRequest>();
        round_trips::<MetadataRequest>();
        round_trips::<CreateTopicsRequest>();
        round_trips::<DeleteTopicsRequest>();
        round_trips::<DescribeConfigsRequest>();
        round_trips::<FindCoordinatorRequest>();
        round_trips::<ListGroupsRequest>();
        round_trips::<DescribeGroupsRequest>();
        round_trips::<OffsetFetchRequest>();
        round_trips::<ListOffsetsRequest>();
        round_trips::<FetchRequest>();
        round_trips::<ListTransactionsRequest>();
        round_trips::<DescribeTransactionsRequest>();
        round_trips::<DescribeProducersRequest>();
        round_trips::<WriteTxnMarkersRequest>();
    }

    #[test]
    fn the_table_stays_inside_the_codec() {
        macro_rules! inside {
            ($($req:ty),*) => {$(
                let key = <$req as Request>::KEY;
                let &(_, min, max) = CLIENT.iter().find(|(k, _, _)| *k as i16 == key).unwrap();
                assert_eq!(client_range::<$req>(), (min, max), "API {key}");
            )*};
        }
        inside!(
            ApiVersionsRequest,
            MetadataRequest,
            CreateTopicsRequest,
            DeleteTopicsRequest,
            DescribeConfigsRequest,
            FindCoordinatorRequest,
            ListGroupsRequest,
            DescribeGroupsRequest,
            OffsetFetchRequest,
            ListOffsetsRequest,
            FetchRequest,
            ListTransactionsRequest,
            DescribeTransactionsRequest,
            DescribeProducersRequest,
            WriteTxnMarkersRequest
        );
    }

    #[test]
    fn negotiation_takes_the_highest_common_version() {
        assert_eq!(negotiate::<MetadataRequest>(Some((0, 13))), Some(12));
        assert_eq!(negotiate::<MetadataRequest>(Some((0, 4))), Some(4));
        assert_eq!(negotiate::<MetadataRequest>(Some((0, 0))), None);
        assert_eq!(negotiate::<MetadataRequest>(None), None);
        assert_eq!(negotiate::<WriteTxnMarkersRequest>(Some((0, 1))), Some(1));
        assert_eq!(negotiate::<WriteTxnMarkersRequest>(Some((0, 0))), None);
    }
}
