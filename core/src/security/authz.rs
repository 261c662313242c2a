//! Which ACLs each served API checks, as Kafka 4.x's KafkaApis (and, for
//! the APIs a KRaft broker forwards, ControllerApis) checks them: one row
//! per API key of `versions::SUPPORTED`. The handlers in `crate::api` ask
//! `Broker::authorized`; this table is their summary, for operators and
//! reviewers.
//!
//! "X on R" is operation X on a resource of type R named by the request (the
//! cluster's name is `kafka-cluster`); "X on CLUSTER or TOPIC" means either
//! allows; a refused resource gets the API's *_AUTHORIZATION_FAILED error
//! unless the row says it is left out. Operations imply others as Kafka's
//! (`acl`): READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS
//! implies DESCRIBE_CONFIGS.

use kafka_protocol::messages::ApiKey;

/// One API and the ACLs it checks, in words.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    pub api: ApiKey,
    pub checks: &'static str,
}

const fn row(api: ApiKey, checks: &'static str) -> Row {
    Row { api, checks }
}

pub const TABLE: &[Row] = &[
    row(
        ApiKey::Produce,
        "WRITE on TRANSACTIONAL_ID (if transactional); WRITE on TOPIC",
    ),
    row(ApiKey::Fetch, "READ on TOPIC"),
    row(ApiKey::ListOffsets, "DESCRIBE on TOPIC"),
    row(
        ApiKey::Metadata,
        "DESCRIBE on TOPIC (left out of all-topics answers); \
         CREATE on CLUSTER or TOPIC (auto-creation)",
    ),
    row(ApiKey::ApiVersions, "none"),
    row(
        ApiKey::CreateTopics,
        "CREATE on CLUSTER or TOPIC; DESCRIBE_CONFIGS on TOPIC (configs in the answer)",
    ),
    row(
        ApiKey::DeleteTopics,
        "DELETE on CLUSTER or TOPIC; DESCRIBE on TOPIC (to be told of it)",
    ),
    row(ApiKey::DeleteRecords, "DELETE on TOPIC"),
    row(
        ApiKey::DescribeConfigs,
        "DESCRIBE_CONFIGS on TOPIC; DESCRIBE_CONFIGS on CLUSTER (broker)",
    ),
    row(
        ApiKey::AlterConfigs,
        "ALTER_CONFIGS on TOPIC; ALTER_CONFIGS on CLUSTER (broker)",
    ),
    row(
        ApiKey::IncrementalAlterConfigs,
        "ALTER_CONFIGS on TOPIC; ALTER_CONFIGS on CLUSTER (broker, broker logger)",
    ),
    row(ApiKey::CreatePartitions, "ALTER on TOPIC"),
    // Kafka's brokers answer anyone (only a controller wants ALTER on CLUSTER).
    row(ApiKey::DescribeCluster, "none"),
    row(
        ApiKey::DescribeTopicPartitions,
        "DESCRIBE on TOPIC (left out of all-topics answers)",
    ),
    row(ApiKey::DescribeAcls, "DESCRIBE on CLUSTER"),
    row(
        ApiKey::InitProducerId,
        "WRITE on TRANSACTIONAL_ID; without one, IDEMPOTENT_WRITE on CLUSTER or WRITE on any TOPIC",
    ),
    row(
        ApiKey::FindCoordinator,
        "DESCRIBE on GROUP or TRANSACTIONAL_ID (the key's type)",
    ),
    row(ApiKey::JoinGroup, "READ on GROUP"),
    row(ApiKey::SyncGroup, "READ on GROUP"),
    row(ApiKey::Heartbeat, "READ on GROUP"),
    row(ApiKey::LeaveGroup, "READ on GROUP"),
    row(ApiKey::OffsetCommit, "READ on GROUP; READ on TOPIC"),
    row(ApiKey::OffsetFetch, "DESCRIBE on GROUP; DESCRIBE on TOPIC"),
    row(
        ApiKey::ListGroups,
        "DESCRIBE on CLUSTER lists all; else lists the groups with DESCRIBE on GROUP",
    ),
    row(ApiKey::DescribeGroups, "DESCRIBE on GROUP"),
    row(ApiKey::DeleteGroups, "DELETE on GROUP"),
    row(ApiKey::OffsetDelete, "DELETE on GROUP; READ on TOPIC"),
    row(
        ApiKey::AddPartitionsToTxn,
        "WRITE on TRANSACTIONAL_ID; WRITE on TOPIC",
    ),
    row(
        ApiKey::AddOffsetsToTxn,
        "WRITE on TRANSACTIONAL_ID; READ on GROUP",
    ),
    row(ApiKey::EndTxn, "WRITE on TRANSACTIONAL_ID"),
    row(
        ApiKey::WriteTxnMarkers,
        "ALTER or CLUSTER_ACTION on CLUSTER",
    ),
    row(
        ApiKey::TxnOffsetCommit,
        "WRITE on TRANSACTIONAL_ID; READ on GROUP; READ on TOPIC",
    ),
    row(
        ApiKey::DescribeTransactions,
        "DESCRIBE on TRANSACTIONAL_ID; DESCRIBE on TOPIC (partitions shown)",
    ),
    row(
        ApiKey::ListTransactions,
        "lists the transactional ids with DESCRIBE on TRANSACTIONAL_ID",
    ),
    row(ApiKey::DescribeProducers, "READ on TOPIC"),
    row(ApiKey::SaslHandshake, "none"),
    row(ApiKey::SaslAuthenticate, "none"),
    row(ApiKey::CreateAcls, "ALTER on CLUSTER"),
    row(ApiKey::DeleteAcls, "ALTER on CLUSTER"),
    row(ApiKey::DescribeUserScramCredentials, "DESCRIBE on CLUSTER"),
    row(ApiKey::AlterUserScramCredentials, "ALTER on CLUSTER"),
    row(ApiKey::DescribeClientQuotas, "DESCRIBE_CONFIGS on CLUSTER"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::SUPPORTED;

    #[test]
    fn one_row_per_served_api() {
        for (api, _, _) in SUPPORTED {
            let rows = TABLE.iter().filter(|r| r.api == *api).count();
            assert_eq!(rows, 1, "{api:?} has {rows} rows in authz::TABLE");
        }
        for r in TABLE {
            assert!(
                SUPPORTED.iter().any(|(api, _, _)| *api == r.api),
                "{:?} has a row but is not served",
                r.api
            );
            assert!(!r.checks.is_empty(), "{:?} says nothing", r.api);
        }
        assert_eq!(TABLE.len(), SUPPORTED.len());
    }
}

#[cfg(test)]
mod readme {
    use super::*;

    /// README.md's table of APIs and ACLs (between `<!-- acl-table -->`
    /// and `<!-- /acl-table -->`) is this table, row for row.
    #[test]
    fn the_readme_table_is_this_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
        let text = std::fs::read_to_string(path).expect("README.md");
        let start = text
            .find("<!-- acl-table -->")
            .expect("the table's start marker");
        let end = text
            .find("<!-- /acl-table -->")
            .expect("the table's end marker");
        let rows: Vec<(String, String)> = text[start..end]
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| API ") && !l.starts_with("|---"))
            .map(|l| {
                let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
                assert_eq!(cells.len(), 2, "a row of two cells: {l}");
                (cells[0].trim_matches('`').to_string(), cells[1].to_string())
            })
            .collect();
        let want: Vec<(String, String)> = TABLE
            .iter()
            .map(|r| (format!("{:?}", r.api), r.checks.to_string()))
            .collect();
        assert_eq!(
            rows, want,
            "README.md's ACL table differs from authz::TABLE"
        );
    }
}
