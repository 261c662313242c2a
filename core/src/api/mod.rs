//! One file per Kafka API key, each opening with the versions it serves and
//! how it behaves. Handlers stay thin: each reads as a recipe from request to
//! response through its context (`Cx`): the core's methods (the log, the
//! coordinators) and the bookkeeping of parked requests, never their fields.
//! Nothing here names the broker above; nothing below names `api`.

use crate::core_state::Core;
use kafka_protocol::messages::RequestKind;

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_configs;
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub(crate) mod config_writes;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_producers;
pub mod describe_topic_partitions;
pub mod describe_transactions;
pub mod describe_user_scram_credentials;
pub mod end_txn;
pub mod fetch;
pub mod fetch_frame;
pub mod find_coordinator;
mod frame;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub(crate) mod parked;
pub mod produce;
pub(crate) mod reads;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod write_txn_markers;

pub use crate::request::RequestCtx;
pub(crate) use frame::handle_frame;
pub(crate) use parked::{Cx, Parked};

/// What to do when an API handler's own meta.db write completes (Ok or not).
/// The core's own writes (producer id blocks, transactional ids,
/// checkpoints) are `core_state::MetaAction`s.
pub enum ApiWrite {
    CreateTopics(create_topics::PendingCreate),
    DeleteTopics(delete_topics::PendingDelete),
    CreatePartitions(create_partitions::PendingGrow),
    OffsetCommit(offset_commit::PendingCommit),
    OffsetDelete(offset_delete::PendingOffsetDelete),
    DeleteGroups(delete_groups::PendingDeleteGroups),
    AlterConfigs(config_writes::PendingConfigs),
    DeleteRecords(delete_records::PendingDeleteRecords),
    CreateAcls(create_acls::PendingCreateAcls),
    DeleteAcls(delete_acls::PendingDeleteAcls),
    AlterScram(alter_user_scram_credentials::PendingAlterScram),
}

/// Topic names an admin request changes; while one has a meta.db change in
/// flight the request waits (see `Topics::busy`).
fn admin_topics(request: &RequestKind) -> Option<Vec<String>> {
    Some(match request {
        RequestKind::CreateTopics(r) => r.topics.iter().map(|t| t.name.0.to_string()).collect(),
        RequestKind::DeleteTopics(r) => {
            let by_name = r.topic_names.iter().map(|n| n.0.to_string());
            by_name
                .chain(
                    r.topics
                        .iter()
                        .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string())),
                )
                .collect()
        }
        RequestKind::CreatePartitions(r) => r.topics.iter().map(|t| t.name.0.to_string()).collect(),
        RequestKind::AlterConfigs(r) => r
            .resources
            .iter()
            .filter(|r| r.resource_type == config_writes::RESOURCE_TOPIC)
            .map(|r| r.resource_name.to_string())
            .collect(),
        RequestKind::IncrementalAlterConfigs(r) => r
            .resources
            .iter()
            .filter(|r| r.resource_type == config_writes::RESOURCE_TOPIC)
            .map(|r| r.resource_name.to_string())
            .collect(),
        RequestKind::DeleteRecords(r) => r.topics.iter().map(|t| t.name.0.to_string()).collect(),
        _ => return None,
    })
}

/// The transactional ids a transactional request names.
fn txn_ids(request: &RequestKind) -> Vec<&str> {
    match request {
        RequestKind::InitProducerId(r) => {
            r.transactional_id.iter().map(|id| id.0.as_str()).collect()
        }
        RequestKind::AddPartitionsToTxn(r) => {
            std::iter::once(r.v3_and_below_transactional_id.0.as_str())
                .chain(r.transactions.iter().map(|t| t.transactional_id.0.as_str()))
                .collect()
        }
        RequestKind::AddOffsetsToTxn(r) => vec![r.transactional_id.0.as_str()],
        RequestKind::TxnOffsetCommit(r) => vec![r.transactional_id.0.as_str()],
        RequestKind::EndTxn(r) => vec![r.transactional_id.0.as_str()],
        _ => Vec::new(),
    }
}

/// Whether `request` would see a transaction whose EndTxn was answered
/// while its Complete record is still being stored: the id's own next
/// request, DescribeTransactions or ListTransactions (which would show it
/// still preparing), or an OffsetFetch of a group it commits offsets to
/// (which would not show them yet). Such a request waits for that write,
/// one meta.db write at most (txn/complete.rs says why).
fn waits_for_settling(b: &Core, request: &RequestKind) -> bool {
    let txns = b.txns();
    if !txns.completing().any(|(_, c)| c.settling()) && !txns.any_flushing() {
        return false; // the common case: nothing settling, nothing to look up
    }
    let settling_id = |id: &str| txns.get(id).is_some_and(|e| e.settling());
    let settling_group = |group: &str| {
        txns.iter()
            .any(|(_, e)| e.settling() && e.record.staged_offsets.contains_key(group))
    };
    match request {
        RequestKind::DescribeTransactions(r) => r
            .transactional_ids
            .iter()
            .any(|id| settling_id(id.0.as_str())),
        RequestKind::ListTransactions(_) => true,
        RequestKind::OffsetFetch(r) => {
            settling_group(r.group_id.0.as_str())
                || r.groups
                    .iter()
                    .any(|g| settling_group(g.group_id.0.as_str()))
        }
        _ => txn_ids(request).into_iter().any(settling_id),
    }
}

pub(crate) fn dispatch(b: &mut Cx, ctx: RequestCtx, request: RequestKind) {
    if waits_for_settling(b.core, &request) {
        return b.defer_until_stored(ctx, request);
    }
    if let Some(names) = admin_topics(&request) {
        // A v6 DeleteTopics by id is resolved when it runs; any change in
        // flight defers it, to keep the order simple.
        let by_id = matches!(&request, RequestKind::DeleteTopics(r) if r.topics.iter().any(|t| t.name.is_none()));
        let topics = b.core.topics();
        let busy = names.iter().any(|n| topics.is_busy(n)) || (by_id && topics.busy_count() > 0);
        if busy {
            return b.defer_until_stored(ctx, request);
        }
    }
    match request {
        RequestKind::ApiVersions(r) => api_versions::handle(b, ctx, r),
        RequestKind::SaslHandshake(r) => sasl_handshake::handle(b, ctx, r),
        RequestKind::SaslAuthenticate(r) => sasl_authenticate::handle(b, ctx, r),
        RequestKind::DescribeAcls(r) => describe_acls::handle(b, ctx, r),
        RequestKind::DescribeClientQuotas(r) => describe_client_quotas::handle(b, ctx, r),
        RequestKind::CreateAcls(r) => create_acls::handle(b, ctx, r),
        RequestKind::DeleteAcls(r) => delete_acls::handle(b, ctx, r),
        RequestKind::DescribeUserScramCredentials(r) => {
            describe_user_scram_credentials::handle(b, ctx, r)
        }
        RequestKind::AlterUserScramCredentials(r) => {
            alter_user_scram_credentials::handle(b, ctx, r)
        }
        RequestKind::Metadata(r) => metadata::handle(b, ctx, r),
        RequestKind::Produce(r) => produce::handle(b, ctx, r),
        RequestKind::Fetch(r) => fetch::handle(b, ctx, r),
        RequestKind::ListOffsets(r) => list_offsets::handle(b, ctx, r),
        RequestKind::CreateTopics(r) => create_topics::handle(b, ctx, r),
        RequestKind::DeleteTopics(r) => delete_topics::handle(b, ctx, r),
        RequestKind::CreatePartitions(r) => create_partitions::handle(b, ctx, r),
        RequestKind::DescribeConfigs(r) => describe_configs::handle(b, ctx, r),
        RequestKind::AlterConfigs(r) => alter_configs::handle(b, ctx, r),
        RequestKind::IncrementalAlterConfigs(r) => incremental_alter_configs::handle(b, ctx, r),
        RequestKind::DescribeCluster(r) => describe_cluster::handle(b, ctx, r),
        RequestKind::DescribeTopicPartitions(r) => describe_topic_partitions::handle(b, ctx, r),
        RequestKind::InitProducerId(r) => init_producer_id::handle(b, ctx, r),
        RequestKind::FindCoordinator(r) => find_coordinator::handle(b, ctx, r),
        RequestKind::JoinGroup(r) => join_group::handle(b, ctx, r),
        RequestKind::SyncGroup(r) => sync_group::handle(b, ctx, r),
        RequestKind::Heartbeat(r) => heartbeat::handle(b, ctx, r),
        RequestKind::LeaveGroup(r) => leave_group::handle(b, ctx, r),
        RequestKind::OffsetCommit(r) => offset_commit::handle(b, ctx, r),
        RequestKind::OffsetFetch(r) => offset_fetch::handle(b, ctx, r),
        RequestKind::OffsetDelete(r) => offset_delete::handle(b, ctx, r),
        RequestKind::ListGroups(r) => list_groups::handle(b, ctx, r),
        RequestKind::DescribeGroups(r) => describe_groups::handle(b, ctx, r),
        RequestKind::DeleteGroups(r) => delete_groups::handle(b, ctx, r),
        RequestKind::DeleteRecords(r) => delete_records::handle(b, ctx, r),
        RequestKind::AddPartitionsToTxn(r) => add_partitions_to_txn::handle(b, ctx, r),
        RequestKind::AddOffsetsToTxn(r) => add_offsets_to_txn::handle(b, ctx, r),
        RequestKind::TxnOffsetCommit(r) => txn_offset_commit::handle(b, ctx, r),
        RequestKind::EndTxn(r) => end_txn::handle(b, ctx, r),
        RequestKind::WriteTxnMarkers(r) => write_txn_markers::handle(b, ctx, r),
        RequestKind::DescribeTransactions(r) => describe_transactions::handle(b, ctx, r),
        RequestKind::ListTransactions(r) => list_transactions::handle(b, ctx, r),
        RequestKind::DescribeProducers(r) => describe_producers::handle(b, ctx, r),
        other => {
            // versions::SUPPORTED lists only the keys above, so the frame
            // decoder never lets another through.
            unreachable!("dispatch of an unserved api: {other:?}")
        }
    }
}

/// An API handler's meta.db write completed: the handler finishes.
pub(crate) fn apply_meta(b: &mut Cx, write: ApiWrite, stored: bool) {
    match write {
        ApiWrite::CreateTopics(p) => create_topics::apply(b, p, stored),
        ApiWrite::DeleteTopics(p) => delete_topics::apply(b, p, stored),
        ApiWrite::CreatePartitions(p) => create_partitions::apply(b, p, stored),
        ApiWrite::OffsetCommit(p) => offset_commit::apply(b, p, stored),
        ApiWrite::OffsetDelete(p) => offset_delete::apply(b, p, stored),
        ApiWrite::DeleteGroups(p) => delete_groups::apply(b, p, stored),
        ApiWrite::AlterConfigs(p) => config_writes::apply(b, p, stored),
        ApiWrite::DeleteRecords(p) => delete_records::apply(b, p, stored),
        ApiWrite::CreateAcls(p) => create_acls::apply(b, p, stored),
        ApiWrite::DeleteAcls(p) => delete_acls::apply(b, p, stored),
        ApiWrite::AlterScram(p) => alter_user_scram_credentials::apply(b, p, stored),
    }
}
