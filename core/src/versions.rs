//! The one table of supported API versions. It feeds the ApiVersions response
//! and the request decoder: a request outside its range is refused before it
//! is decoded. A test checks every version here against kafka-protocol's own
//! range and that the codec really encodes a default response at it.

use kafka_protocol::messages::ApiKey;

/// (api key, min version, max version) for every API this broker serves.
///
/// Produce stops at v9 and EndTxn at v4, so clients stay on the classic
/// transaction protocol (KIP-890 part 2 needs Produce v12 and EndTxn v5).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeCluster, 0, 1),
    // What a 4.x admin's describeTopics asks first (KIP-966); Kafka 4.x's range.
    (ApiKey::DescribeTopicPartitions, 0, 0),
    // Without an authorizer: SECURITY_DISABLED, as Kafka without one.
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::InitProducerId, 0, 5),
    // Consumer groups, classic protocol only (no ConsumerGroupHeartbeat):
    // Kafka 4.x's ranges (it dropped OffsetCommit v0-1 and OffsetFetch v0).
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::AddOffsetsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 4),
    // From an admin ending a hanging transaction (`kafka-transactions.sh
    // abort`); Kafka 4.x's range.
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::TxnOffsetCommit, 0, 3),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::DescribeProducers, 0, 0),
    // SASL on SASL listeners (`security::sasl`); v0 handshakes take the
    // tokens unframed.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    // ACLs and SCRAM users (`security`); Kafka 4.x's ranges.
    (ApiKey::CreateAcls, 2, 3),
    (ApiKey::DeleteAcls, 2, 3),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    // No quotas: an empty answer (kafka-configs --describe asks it).
    (ApiKey::DescribeClientQuotas, 0, 1),
];

/// The supported range of an API key, if it is served at all.
pub fn range(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|&(_, min, max)| (min, max))
}

/// Whether `version` of `key` is served.
pub fn is_supported(key: ApiKey, version: i16) -> bool {
    matches!(range(key), Some((min, max)) if (min..=max).contains(&version))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Encodable, Message};

    fn codec_range(key: ApiKey) -> (i16, i16) {
        macro_rules! r {
            ($req:ty, $resp:ty) => {{
                let req = <$req as Message>::VERSIONS;
                let resp = <$resp as Message>::VERSIONS;
                (req.min.max(resp.min), req.max.min(resp.max))
            }};
        }
        match key {
            ApiKey::Produce => r!(ProduceRequest, ProduceResponse),
            ApiKey::Fetch => r!(FetchRequest, FetchResponse),
            ApiKey::ListOffsets => r!(ListOffsetsRequest, ListOffsetsResponse),
            ApiKey::Metadata => r!(MetadataRequest, MetadataResponse),
            ApiKey::ApiVersions => r!(ApiVersionsRequest, ApiVersionsResponse),
            ApiKey::CreateTopics => r!(CreateTopicsRequest, CreateTopicsResponse),
            ApiKey::DeleteTopics => r!(DeleteTopicsRequest, DeleteTopicsResponse),
            ApiKey::DeleteRecords => r!(DeleteRecordsRequest, DeleteRecordsResponse),
            ApiKey::DescribeConfigs => r!(DescribeConfigsRequest, DescribeConfigsResponse),
            ApiKey::AlterConfigs => r!(AlterConfigsRequest, AlterConfigsResponse),
            ApiKey::IncrementalAlterConfigs => {
                r!(
                    IncrementalAlterConfigsRequest,
                    IncrementalAlterConfigsResponse
                )
            }
            ApiKey::CreatePartitions => r!(CreatePartitionsRequest, CreatePartitionsResponse),
            ApiKey::DescribeCluster => r!(DescribeClusterRequest, DescribeClusterResponse),
            ApiKey::DescribeTopicPartitions => r!(
                DescribeTopicPartitionsRequest,
                DescribeTopicPartitionsResponse
            ),
            ApiKey::DescribeAcls => r!(DescribeAclsRequest, DescribeAclsResponse),
            ApiKey::InitProducerId => r!(InitProducerIdRequest, InitProducerIdResponse),
            ApiKey::FindCoordinator => r!(FindCoordinatorRequest, FindCoordinatorResponse),
            ApiKey::JoinGroup => r!(JoinGroupRequest, JoinGroupResponse),
            ApiKey::SyncGroup => r!(SyncGroupRequest, SyncGroupResponse),
            ApiKey::Heartbeat => r!(HeartbeatRequest, HeartbeatResponse),
            ApiKey::LeaveGroup => r!(LeaveGroupRequest, LeaveGroupResponse),
            ApiKey::OffsetCommit => r!(OffsetCommitRequest, OffsetCommitResponse),
            ApiKey::OffsetFetch => r!(OffsetFetchRequest, OffsetFetchResponse),
            ApiKey::ListGroups => r!(ListGroupsRequest, ListGroupsResponse),
            ApiKey::DescribeGroups => r!(DescribeGroupsRequest, DescribeGroupsResponse),
            ApiKey::DeleteGroups => r!(DeleteGroupsRequest, DeleteGroupsResponse),
            ApiKey::OffsetDelete => r!(OffsetDeleteRequest, OffsetDeleteResponse),
            ApiKey::AddPartitionsToTxn => r!(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
            ApiKey::AddOffsetsToTxn => r!(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
            ApiKey::EndTxn => r!(EndTxnRequest, EndTxnResponse),
            ApiKey::WriteTxnMarkers => r!(WriteTxnMarkersRequest, WriteTxnMarkersResponse),
            ApiKey::TxnOffsetCommit => r!(TxnOffsetCommitRequest, TxnOffsetCommitResponse),
            ApiKey::DescribeTransactions => {
                r!(DescribeTransactionsRequest, DescribeTransactionsResponse)
            }
            ApiKey::ListTransactions => r!(ListTransactionsRequest, ListTransactionsResponse),
            ApiKey::DescribeProducers => r!(DescribeProducersRequest, DescribeProducersResponse),
            ApiKey::SaslHandshake => r!(SaslHandshakeRequest, SaslHandshakeResponse),
            ApiKey::SaslAuthenticate => r!(SaslAuthenticateRequest, SaslAuthenticateResponse),
            ApiKey::CreateAcls => r!(CreateAclsRequest, CreateAclsResponse),
            ApiKey::DeleteAcls => r!(DeleteAclsRequest, DeleteAclsResponse),
            ApiKey::DescribeUserScramCredentials => r!(
                DescribeUserScramCredentialsRequest,
                DescribeUserScramCredentialsResponse
            ),
            ApiKey::DescribeClientQuotas => {
                r!(DescribeClientQuotasRequest, DescribeClientQuotasResponse)
            }
            ApiKey::AlterUserScramCredentials => r!(
                AlterUserScramCredentialsRequest,
                AlterUserScramCredentialsResponse
            ),
            other => panic!("no codec range known for {other:?}; add it to this test"),
        }
    }

    fn default_response(key: ApiKey) -> ResponseKind {
        match key {
            ApiKey::Produce => ResponseKind::Produce(Default::default()),
            ApiKey::Fetch => ResponseKind::Fetch(Default::default()),
            ApiKey::ListOffsets => ResponseKind::ListOffsets(Default::default()),
            ApiKey::Metadata => ResponseKind::Metadata(Default::default()),
            ApiKey::ApiVersions => ResponseKind::ApiVersions(Default::default()),
            ApiKey::CreateTopics => ResponseKind::CreateTopics(Default::default()),
            ApiKey::DeleteTopics => ResponseKind::DeleteTopics(Default::default()),
            ApiKey::DeleteRecords => ResponseKind::DeleteRecords(Default::default()),
            ApiKey::DescribeConfigs => ResponseKind::DescribeConfigs(Default::default()),
            ApiKey::AlterConfigs => ResponseKind::AlterConfigs(Default::default()),
            ApiKey::IncrementalAlterConfigs => {
                ResponseKind::IncrementalAlterConfigs(Default::default())
            }
            ApiKey::CreatePartitions => ResponseKind::CreatePartitions(Default::default()),
            ApiKey::DescribeCluster => ResponseKind::DescribeCluster(Default::default()),
            ApiKey::DescribeTopicPartitions => {
                ResponseKind::DescribeTopicPartitions(Default::default())
            }
            ApiKey::DescribeAcls => ResponseKind::DescribeAcls(Default::default()),
            ApiKey::InitProducerId => ResponseKind::InitProducerId(Default::default()),
            ApiKey::FindCoordinator => ResponseKind::FindCoordinator(Default::default()),
            ApiKey::JoinGroup => ResponseKind::JoinGroup(Default::default()),
            ApiKey::SyncGroup => ResponseKind::SyncGroup(Default::default()),
            ApiKey::Heartbeat => ResponseKind::Heartbeat(Default::default()),
            ApiKey::LeaveGroup => ResponseKind::LeaveGroup(Default::default()),
            ApiKey::OffsetCommit => ResponseKind::OffsetCommit(Default::default()),
            ApiKey::OffsetFetch => ResponseKind::OffsetFetch(Default::default()),
            ApiKey::ListGroups => ResponseKind::ListGroups(Default::default()),
            ApiKey::DescribeGroups => ResponseKind::DescribeGroups(Default::default()),
            ApiKey::DeleteGroups => ResponseKind::DeleteGroups(Default::default()),
            ApiKey::OffsetDelete => ResponseKind::OffsetDelete(Default::default()),
            ApiKey::AddPartitionsToTxn => ResponseKind::AddPartitionsToTxn(Default::default()),
            ApiKey::AddOffsetsToTxn => ResponseKind::AddOffsetsToTxn(Default::default()),
            ApiKey::EndTxn => ResponseKind::EndTxn(Default::default()),
            ApiKey::WriteTxnMarkers => ResponseKind::WriteTxnMarkers(Default::default()),
            ApiKey::TxnOffsetCommit => ResponseKind::TxnOffsetCommit(Default::default()),
            ApiKey::DescribeTransactions => ResponseKind::DescribeTransactions(Default::default()),
            ApiKey::ListTransactions => ResponseKind::ListTransactions(Default::default()),
            ApiKey::DescribeProducers => ResponseKind::DescribeProducers(Default::default()),
            ApiKey::SaslHandshake => ResponseKind::SaslHandshake(Default::default()),
            ApiKey::SaslAuthenticate => ResponseKind::SaslAuthenticate(Default::default()),
            ApiKey::CreateAcls => ResponseKind::CreateAcls(Default::default()),
            ApiKey::DeleteAcls => ResponseKind::DeleteAcls(Default::default()),
            ApiKey::DescribeUserScramCredentials => {
                ResponseKind::DescribeUserScramCredentials(Default::default())
            }
            ApiKey::AlterUserScramCredentials => {
                ResponseKind::AlterUserScramCredentials(Default::default())
            }
            ApiKey::DescribeClientQuotas => ResponseKind::DescribeClientQuotas(Default::default()),
            other => panic!("no default response for {other:?}; add it to this test"),
        }
    }

    #[test]
    fn table_is_within_the_codec_and_encodes() {
        for &(key, min, max) in SUPPORTED {
            assert!(min <= max, "{key:?}: empty range");
            let (cmin, cmax) = codec_range(key);
            assert!(min >= cmin, "{key:?}: min {min} below codec min {cmin}");
            assert!(max <= cmax, "{key:?}: max {max} above codec max {cmax}");
            for v in min..=max {
                let mut buf = BytesMut::new();
                default_response(key)
                    .encode(&mut buf, v)
                    .unwrap_or_else(|e| panic!("{key:?} v{v} does not encode: {e}"));
            }
        }
    }

    #[test]
    fn api_versions_v0_body_encodes_for_unsupported_reply() {
        let resp = ApiVersionsResponse::default().with_error_code(35);
        let mut buf = BytesMut::new();
        resp.encode(&mut buf, 0).unwrap();
        assert_eq!(&buf[..2], &35i16.to_be_bytes());
    }
}
