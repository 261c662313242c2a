//! One file per Kafka API key, each opening with the versions it serves and
//! how it behaves. Handlers stay thin: the log, the topics and the broker's
//! helpers do the work.

use kafka_protocol::messages::{ApiKey, RequestKind};

use crate::broker::Broker;
use crate::io::ConnId;

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod api_versions;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_producers;
pub mod describe_transactions;
pub mod end_txn;
pub mod fetch;
pub mod fetch_frame;
pub mod find_coordinator;
pub mod heartbeat;
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
pub mod produce;
pub(crate) mod reads;
pub mod sync_group;
pub mod txn_offset_commit;

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

/// What to do when a meta.db write completes (Ok or not).
pub enum MetaAction {
    CreateTopics(create_topics::PendingCreate),
    DeleteTopics(delete_topics::PendingDelete),
    CreatePartitions(create_partitions::PendingGrow),
    ProducerIdBlock(crate::producer::ids::ProducerIdsRecord),
    OffsetCommit(offset_commit::PendingCommit),
    OffsetDelete(offset_delete::PendingOffsetDelete),
    DeleteGroups(delete_groups::PendingDeleteGroups),
    Txn(crate::txn::write::TxnWrite),
    Checkpoint(crate::checkpoint::PendingCheckpoint),
    /// A checkpoint start-up could not use was deleted (`crate::recovery`).
    CheckpointDropped(crate::topics::PartitionKey),
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
        _ => return None,
    })
}

pub(crate) fn dispatch(b: &mut Broker, ctx: RequestCtx, request: RequestKind) {
    if let Some(names) = admin_topics(&request) {
        // A v6 DeleteTopics by id is resolved when it runs; any change in
        // flight defers it, to keep the order simple.
        let by_id = matches!(&request, RequestKind::DeleteTopics(r) if r.topics.iter().any(|t| t.name.is_none()));
        let busy =
            names.iter().any(|n| b.topics.is_busy(n)) || (by_id && b.topics.busy_count() > 0);
        if busy {
            b.deferred_admin.push((ctx, request));
            return;
        }
    }
    match request {
        RequestKind::ApiVersions(r) => api_versions::handle(b, ctx, r),
        RequestKind::Metadata(r) => metadata::handle(b, ctx, r),
        RequestKind::Produce(r) => produce::handle(b, ctx, r),
        RequestKind::Fetch(r) => fetch::handle(b, ctx, r),
        RequestKind::ListOffsets(r) => list_offsets::handle(b, ctx, r),
        RequestKind::CreateTopics(r) => create_topics::handle(b, ctx, r),
        RequestKind::DeleteTopics(r) => delete_topics::handle(b, ctx, r),
        RequestKind::CreatePartitions(r) => create_partitions::handle(b, ctx, r),
        RequestKind::DescribeConfigs(r) => describe_configs::handle(b, ctx, r),
        RequestKind::DescribeCluster(r) => describe_cluster::handle(b, ctx, r),
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
        RequestKind::AddPartitionsToTxn(r) => add_partitions_to_txn::handle(b, ctx, r),
        RequestKind::AddOffsetsToTxn(r) => add_offsets_to_txn::handle(b, ctx, r),
        RequestKind::TxnOffsetCommit(r) => txn_offset_commit::handle(b, ctx, r),
        RequestKind::EndTxn(r) => end_txn::handle(b, ctx, r),
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

pub(crate) fn apply_meta(b: &mut Broker, action: MetaAction, stored: bool) {
    match action {
        MetaAction::CreateTopics(p) => create_topics::apply(b, p, stored),
        MetaAction::DeleteTopics(p) => delete_topics::apply(b, p, stored),
        MetaAction::CreatePartitions(p) => create_partitions::apply(b, p, stored),
        MetaAction::ProducerIdBlock(r) => init_producer_id::block_stored(b, r, stored),
        MetaAction::OffsetCommit(p) => offset_commit::apply(b, p, stored),
        MetaAction::OffsetDelete(p) => offset_delete::apply(b, p, stored),
        MetaAction::DeleteGroups(p) => delete_groups::apply(b, p, stored),
        MetaAction::Txn(w) => crate::txn::write::done(b, w, stored),
        MetaAction::Checkpoint(p) => crate::checkpoint::written(b, p, stored),
        MetaAction::CheckpointDropped(key) => crate::recovery::checkpoint_dropped(b, key, stored),
    }
    // Admin requests that waited for this change run again, in arrival order.
    for (ctx, request) in std::mem::take(&mut b.deferred_admin) {
        dispatch(b, ctx, request);
    }
}
