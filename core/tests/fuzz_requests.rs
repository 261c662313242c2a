//! Structure-aware fuzzing of the core: a valid request of every API and
//! version the broker serves (`versions::SUPPORTED`), mutated, sent to a
//! broker with topics, data, a transaction and a group in it, between
//! random I/O completions, failed syncs and meta.db writes, clock moves
//! and restarts (clean, crash, power cut).
//!
//! `net/tests/bad_input.rs` sends random bytes, which mostly fail in the
//! header. Here the header and most of the body stay valid, so mutated
//! values reach the handlers: negative counts and indexes, extreme offsets,
//! timestamps and timeouts, odd versions of a body, unknown tagged fields,
//! and produce batches whose CRC is made right again after their header or
//! records were changed (else the CRC check would stop them all).
//!
//! What must hold (the project's rule for bad input):
//! - the core never panics (its own assertions included);
//! - every request is answered or its connection closed once I/O is done
//!   and the clock has passed every timeout, but for those Kafka does not
//!   answer (acks=0) or may hold that long (a Fetch's max_wait_ms);
//! - an answer to a request whose header was left alone decodes as that
//!   API's response at that version, with nothing left over;
//! - after every round the broker still takes a produce and returns it.
//!
//! A failure prints the seed, round and frame, and the command that
//! replays it: `DOZE_FUZZ_SEED=<seed> cargo test -p doze-core --test
//! fuzz_requests`. `DOZE_FUZZ_SEEDS=<n>` runs n seeds from 1 (default 20,
//! a few seconds in a debug build), or from `DOZE_FUZZ_START`; `make
//! fuzz-ci` runs 1,000 in release.

mod support;

/// As in the broker binary (net/src/main.rs): an array length off the wire
/// sizes a Vec before its elements are read, so a fuzzed length asks for
/// hundreds of GiB, and the system allocator's refusal would abort the test.
#[global_allocator]
static ALLOC: doze_net::alloc::GuardedAlloc = doze_net::alloc::GuardedAlloc;

use std::panic::{self, AssertUnwindSafe};

use bytes::Bytes;
use doze_core::versions::SUPPORTED;
use doze_core::BrokerConfig;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::records::Compression;
use support::requests::*;
use support::txn::*;
use support::*;

/// Frames sent per round, and rounds per seed: enough to reach every API
/// and version several times (about 250 of them) at a few seconds a seed.
const FRAMES_PER_ROUND: usize = 250;
const ROUNDS: usize = 8;
/// How far the clock moves before the round's answers are checked: past
/// every timeout a request can wait on here (a JoinGroup waits at most for
/// the other members' sessions, capped by group.max.session.timeout.ms at
/// 30 minutes), so a request still unanswered then is hung.
const SETTLE_MS: i64 = 31 * 60 * 1000;
const SETTLE_STEP_MS: i64 = 5_000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic, no extra crate.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Values that break code which assumes sane input, as big-endian bytes.
fn interesting(rng: &mut Rng, width: usize) -> Vec<u8> {
    let v: i64 = match rng.below(9) {
        0 => 0,
        1 => -1,
        2 => 1,
        3 => i64::MAX,
        4 => i64::MIN,
        5 => rng.below(16) as i64,
        6 => -(rng.below(16) as i64) - 2,
        7 => rng.next() as i64,
        _ => 1 << rng.below(62),
    };
    // The extremes are the width's own (i16::MAX for two bytes).
    let half = 1i128 << (width * 8 - 1);
    let v = match v {
        i64::MAX => half - 1,
        i64::MIN => -half,
        _ => i128::from(v),
    };
    v.to_be_bytes()[16 - width..].to_vec()
}

// ---- the seeds: one or more valid requests per API ----

/// The state the seeds name: the broker's topics, its transactional and
/// idempotent producers, its group.
struct Known {
    txn_pid: i64,
    txn_epoch: i16,
    idem_pid: i64,
}

fn seeds(k: &Known) -> Vec<RequestKind> {
    use kafka_protocol::messages::add_offsets_to_txn_request::AddOffsetsToTxnRequest as AddOffsets;
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource as IncResource, AlterableConfig as IncConfig,
    };
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::write_txn_markers_request::{
        WritableTxnMarker, WritableTxnMarkerTopic,
    };

    let txn = producer_batch(
        &[b"t1", b"t2"],
        T0_MS,
        Compression::None,
        Producer {
            id: k.txn_pid,
            epoch: k.txn_epoch,
            sequence: 0,
            transactional: true,
        },
    );
    let group = GroupId(s("g"));
    let member = s("m-1");
    vec![
        RequestKind::Produce(produce_req("a", 0, batch(&[b"v1", b"v2"], T0_MS), -1)),
        RequestKind::Produce(produce_req(
            "a",
            1,
            batch_with(&[b"zzzzzzzz", b"zzzzzzzz"], T0_MS, Compression::Gzip),
            1,
        )),
        RequestKind::Produce(produce_req(
            "c",
            0,
            keyed_batch(
                &[(b"k1", Some(b"v")), (b"k1", None)],
                T0_MS,
                Compression::Lz4,
                Producer {
                    id: -1,
                    epoch: -1,
                    sequence: -1,
                    transactional: false,
                },
            ),
            -1,
        )),
        RequestKind::Produce(produce_req(
            "b",
            0,
            idem_batch(&[b"i1"], k.idem_pid, 0, 0),
            -1,
        )),
        RequestKind::Produce(produce_req("a", 2, txn, -1).with_transactional_id(Some(tid("t")))),
        RequestKind::Fetch(fetch_req("a", 0, 0, 0, 1)),
        RequestKind::Fetch(fetch_req("c", 0, 0, 100, 1).with_isolation_level(1)),
        RequestKind::Fetch(fetch_req("b", 0, 1, 500, 1_000_000)),
        RequestKind::ListOffsets(
            ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_isolation_level(1)
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(name("a"))
                    .with_partitions(
                        [-1i64, -2, -3, T0_MS]
                            .iter()
                            .enumerate()
                            .map(|(i, ts)| {
                                ListOffsetsPartition::default()
                                    .with_partition_index(i as i32 % 3)
                                    .with_timestamp(*ts)
                            })
                            .collect(),
                    )]),
        ),
        RequestKind::Metadata(MetadataRequest::default().with_topics(None)),
        RequestKind::Metadata(
            MetadataRequest::default()
                .with_allow_auto_topic_creation(true)
                .with_topics(Some(
                    ["a", "auto"]
                        .iter()
                        .map(|t| MetadataRequestTopic::default().with_name(Some(name(t))))
                        .collect(),
                )),
        ),
        RequestKind::ApiVersions(
            ApiVersionsRequest::default()
                .with_client_software_name(s("fuzz"))
                .with_client_software_version(s("1")),
        ),
        RequestKind::CreateTopics(
            CreateTopicsRequest::default()
                .with_timeout_ms(1000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(name("new"))
                    .with_num_partitions(2)
                    .with_replication_factor(1)
                    .with_configs(vec![
                        CreatableTopicConfig::default()
                            .with_name(s("segment.bytes"))
                            .with_value(Some(s("1048576"))),
                        CreatableTopicConfig::default()
                            .with_name(s("cleanup.policy"))
                            .with_value(Some(s("compact,delete"))),
                        CreatableTopicConfig::default()
                            .with_name(s("compression.type"))
                            .with_value(Some(s("gzip"))),
                    ])]),
        ),
        RequestKind::DeleteTopics(
            DeleteTopicsRequest::default()
                .with_topic_names(vec![name("new")])
                .with_timeout_ms(1000),
        ),
        RequestKind::DeleteRecords(DeleteRecordsRequest::default().with_topics(vec![
            DeleteRecordsTopic::default()
                .with_name(name("a"))
                .with_partitions(vec![DeleteRecordsPartition::default()
                    .with_partition_index(0)
                    .with_offset(1)]),
        ])),
        RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("a")),
            DescribeConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(s("1")),
        ])),
        RequestKind::AlterConfigs(AlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("c"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(s("retention.ms"))
                    .with_value(Some(s("1000")))]),
        ])),
        RequestKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsRequest::default().with_resources(vec![IncResource::default()
                .with_resource_type(2)
                .with_resource_name(s("a"))
                .with_configs(vec![IncConfig::default()
                    .with_name(s("segment.ms"))
                    .with_config_operation(0)
                    .with_value(Some(s("10")))])]),
        ),
        RequestKind::CreatePartitions(
            CreatePartitionsRequest::default()
                .with_timeout_ms(1000)
                .with_topics(vec![CreatePartitionsTopic::default()
                    .with_name(name("b"))
                    .with_count(2)]),
        ),
        RequestKind::DescribeCluster(DescribeClusterRequest::default()),
        RequestKind::DescribeTopicPartitions(
            DescribeTopicPartitionsRequest::default()
                .with_response_partition_limit(2)
                .with_topics(vec![
                    describe_topic_partitions_request::TopicRequest::default().with_name(name("a")),
                ]),
        ),
        RequestKind::DescribeAcls(DescribeAclsRequest::default().with_resource_type_filter(1)),
        RequestKind::InitProducerId(
            InitProducerIdRequest::default()
                .with_transactional_id(Some(tid("t")))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(k.txn_pid))
                .with_producer_epoch(k.txn_epoch),
        ),
        RequestKind::InitProducerId(
            InitProducerIdRequest::default()
                .with_transaction_timeout_ms(-1)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
        RequestKind::FindCoordinator(
            FindCoordinatorRequest::default()
                .with_key(s("g"))
                .with_key_type(0)
                .with_coordinator_keys(vec![s("g"), s("t")]),
        ),
        RequestKind::JoinGroup(
            JoinGroupRequest::default()
                .with_group_id(group.clone())
                .with_session_timeout_ms(10_000)
                .with_rebalance_timeout_ms(20_000)
                .with_protocol_type(s("consumer"))
                .with_protocols(
                    [("range", "r"), ("cooperative-sticky", "c")]
                        .iter()
                        .map(|(n, m)| {
                            JoinGroupRequestProtocol::default()
                                .with_name(s(n))
                                .with_metadata(Bytes::from_static(m.as_bytes()))
                        })
                        .collect(),
                ),
        ),
        RequestKind::SyncGroup(
            SyncGroupRequest::default()
                .with_group_id(group.clone())
                .with_generation_id(1)
                .with_member_id(member.clone())
                .with_protocol_type(Some(s("consumer")))
                .with_protocol_name(Some(s("range")))
                .with_assignments(vec![SyncGroupRequestAssignment::default()
                    .with_member_id(member.clone())
                    .with_assignment(Bytes::from_static(b"\x00\x01assign"))]),
        ),
        RequestKind::Heartbeat(
            HeartbeatRequest::default()
                .with_group_id(group.clone())
                .with_generation_id(1)
                .with_member_id(member.clone()),
        ),
        RequestKind::LeaveGroup(
            LeaveGroupRequest::default()
                .with_group_id(group.clone())
                .with_member_id(member.clone())
                .with_members(vec![
                    leave_group_request::MemberIdentity::default().with_member_id(member.clone())
                ]),
        ),
        RequestKind::OffsetCommit(
            OffsetCommitRequest::default()
                .with_group_id(group.clone())
                .with_generation_id_or_member_epoch(-1)
                .with_member_id(s(""))
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(name("a"))
                    .with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(1)
                        .with_committed_metadata(Some(s("meta")))])]),
        ),
        RequestKind::OffsetFetch(
            OffsetFetchRequest::default()
                .with_group_id(group.clone())
                .with_require_stable(true)
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(name("a"))
                    .with_partition_indexes(vec![0, 1, 7])])),
        ),
        RequestKind::ListGroups(
            ListGroupsRequest::default().with_states_filter(vec![s("Stable"), s("Empty")]),
        ),
        RequestKind::DescribeGroups(
            DescribeGroupsRequest::default()
                .with_groups(vec![group.clone(), GroupId(s("none"))])
                .with_include_authorized_operations(true),
        ),
        RequestKind::DeleteGroups(
            DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("gone"))]),
        ),
        RequestKind::OffsetDelete(
            OffsetDeleteRequest::default()
                .with_group_id(group.clone())
                .with_topics(vec![
                    offset_delete_request::OffsetDeleteRequestTopic::default()
                        .with_name(name("a"))
                        .with_partitions(vec![
                            offset_delete_request::OffsetDeleteRequestPartition::default()
                                .with_partition_index(0),
                        ]),
                ]),
        ),
        RequestKind::AddPartitionsToTxn(
            AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(tid("t"))
                .with_v3_and_below_producer_id(ProducerId(k.txn_pid))
                .with_v3_and_below_producer_epoch(k.txn_epoch)
                .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(name("a"))
                    .with_partitions(vec![0, 2])]),
        ),
        RequestKind::AddOffsetsToTxn(
            AddOffsets::default()
                .with_transactional_id(tid("t"))
                .with_producer_id(ProducerId(k.txn_pid))
                .with_producer_epoch(k.txn_epoch)
                .with_group_id(group.clone()),
        ),
        RequestKind::EndTxn(
            EndTxnRequest::default()
                .with_transactional_id(tid("t"))
                .with_producer_id(ProducerId(k.txn_pid))
                .with_producer_epoch(k.txn_epoch)
                .with_committed(true),
        ),
        RequestKind::WriteTxnMarkers(WriteTxnMarkersRequest::default().with_markers(vec![
            WritableTxnMarker::default()
                .with_producer_id(ProducerId(k.txn_pid))
                .with_producer_epoch(k.txn_epoch)
                .with_transaction_result(false)
                .with_coordinator_epoch(0)
                .with_topics(vec![WritableTxnMarkerTopic::default()
                    .with_name(name("a"))
                    .with_partition_indexes(vec![2])]),
        ])),
        RequestKind::TxnOffsetCommit(
            TxnOffsetCommitRequest::default()
                .with_transactional_id(tid("t"))
                .with_group_id(group.clone())
                .with_producer_id(ProducerId(k.txn_pid))
                .with_producer_epoch(k.txn_epoch)
                .with_generation_id(-1)
                .with_member_id(s(""))
                .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                    .with_name(name("a"))
                    .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(1)
                        .with_committed_offset(3)])]),
        ),
        RequestKind::DescribeTransactions(
            DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![tid("t"), tid("none")]),
        ),
        RequestKind::ListTransactions(
            ListTransactionsRequest::default()
                .with_state_filters(vec![s("Ongoing")])
                .with_producer_id_filters(vec![ProducerId(k.txn_pid)])
                .with_duration_filter(0),
        ),
        RequestKind::DescribeProducers(DescribeProducersRequest::default().with_topics(vec![
            TopicRequest::default()
                .with_name(name("a"))
                .with_partition_indexes(vec![0, 2]),
        ])),
        RequestKind::SaslHandshake(SaslHandshakeRequest::default().with_mechanism(s("PLAIN"))),
        RequestKind::SaslAuthenticate(
            SaslAuthenticateRequest::default()
                .with_auth_bytes(Bytes::from_static(b"\0user\0password")),
        ),
        RequestKind::CreateAcls(CreateAclsRequest::default().with_creations(vec![
            create_acls_request::AclCreation::default()
                .with_resource_type(2)
                .with_resource_name(s("a"))
                .with_resource_pattern_type(3)
                .with_principal(s("User:x"))
                .with_host(s("*"))
                .with_operation(3)
                .with_permission_type(3),
        ])),
        RequestKind::DeleteAcls(DeleteAclsRequest::default().with_filters(vec![
            delete_acls_request::DeleteAclsFilter::default()
                .with_resource_type_filter(1)
                .with_pattern_type_filter(1)
                .with_operation(1)
                .with_permission_type(1),
        ])),
        RequestKind::DescribeUserScramCredentials(
            DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
                describe_user_scram_credentials_request::UserName::default().with_name(s("x")),
            ])),
        ),
        RequestKind::AlterUserScramCredentials(
            AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                    .with_name(s("x"))
                    .with_mechanism(1)
                    .with_iterations(4096)
                    .with_salt(Bytes::from_static(b"salt"))
                    .with_salted_password(Bytes::from_static(&[7; 32])),
            ]),
        ),
        RequestKind::DescribeClientQuotas(DescribeClientQuotasRequest::default()),
    ]
}

fn api_key(req: &RequestKind) -> ApiKey {
    macro_rules! keys {
        ($($v:ident),*) => {
            match req {
                $(RequestKind::$v(_) => ApiKey::$v,)*
                other => panic!("no seed expected for {other:?}"),
            }
        };
    }
    keys!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        DescribeConfigs,
        AlterConfigs,
        IncrementalAlterConfigs,
        CreatePartitions,
        DescribeCluster,
        DescribeTopicPartitions,
        DescribeAcls,
        InitProducerId,
        FindCoordinator,
        JoinGroup,
        SyncGroup,
        Heartbeat,
        LeaveGroup,
        OffsetCommit,
        OffsetFetch,
        ListGroups,
        DescribeGroups,
        DeleteGroups,
        OffsetDelete,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        WriteTxnMarkers,
        TxnOffsetCommit,
        DescribeTransactions,
        ListTransactions,
        DescribeProducers,
        SaslHandshake,
        SaslAuthenticate,
        CreateAcls,
        DeleteAcls,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeClientQuotas
    )
}

/// A request frame (header and body) at `version`, or None when the seed
/// has fields that version cannot carry.
fn encode_at(req: &RequestKind, version: i16, correlation_id: i32) -> Option<Bytes> {
    request_frame(api_key(req), version, correlation_id, "fuzz", |buf| {
        req.encode(buf, version)
    })
    .ok()
}

/// Where the body starts in a frame we encoded: after the header.
fn body_at(key: ApiKey, version: i16) -> usize {
    // key, version, correlation id, client id "fuzz"; flexible headers add
    // an empty tagged-field count.
    let base = 2 + 2 + 4 + 2 + 4;
    base + usize::from(key.request_header_version(version) >= 2)
}

// ---- mutations ----

const BATCH_ATTRIBUTES_AT: usize = 21;
const BATCH_HEADER_BYTES: usize = 61;

/// Changes a record batch's header or records, then makes its CRC right
/// again, so the change gets past the CRC check to what lies behind it.
fn mutate_batch(rng: &mut Rng, batch: &[u8]) -> Vec<u8> {
    let mut b = batch.to_vec();
    if b.len() < BATCH_HEADER_BYTES {
        return b;
    }
    for _ in 0..1 + rng.below(2) {
        match rng.below(10) {
            // attributes: codec 0-7, timestamp type, transactional, control
            0 => {
                let a = (rng.next() as u16) & 0x3f;
                b[BATCH_ATTRIBUTES_AT..BATCH_ATTRIBUTES_AT + 2].copy_from_slice(&a.to_be_bytes());
            }
            // lastOffsetDelta, recordsCount
            1 => b[23..27].copy_from_slice(&interesting(rng, 4)),
            2 => b[57..61].copy_from_slice(&interesting(rng, 4)),
            // base and max timestamps
            3 => b[27..35].copy_from_slice(&interesting(rng, 8)),
            4 => b[35..43].copy_from_slice(&interesting(rng, 8)),
            // producer id, epoch, base sequence
            5 => b[43..51].copy_from_slice(&interesting(rng, 8)),
            6 => b[51..53].copy_from_slice(&interesting(rng, 2)),
            7 => b[53..57].copy_from_slice(&interesting(rng, 4)),
            // the records: bytes changed, or cut (batchLength kept true)
            8 if b.len() > BATCH_HEADER_BYTES => {
                let at = BATCH_HEADER_BYTES + rng.below(b.len() - BATCH_HEADER_BYTES);
                b[at] = rng.next() as u8;
            }
            _ if b.len() > BATCH_HEADER_BYTES => {
                let cut = BATCH_HEADER_BYTES + rng.below(b.len() - BATCH_HEADER_BYTES);
                b.truncate(cut);
                let len = (b.len() - 12) as i32;
                b[8..12].copy_from_slice(&len.to_be_bytes());
            }
            _ => {}
        }
    }
    doze_core::batch::write_crc(&mut b);
    b
}

/// A produce seed with each partition's batch changed (`mutate_batch`),
/// and now and then its acks or a partition index.
fn mutate_produce(rng: &mut Rng, req: &ProduceRequest) -> ProduceRequest {
    let mut req = req.clone();
    if rng.chance(20) {
        req.acks = i16::from_be_bytes(interesting(rng, 2).try_into().unwrap());
    }
    for t in &mut req.topic_data {
        for p in &mut t.partition_data {
            if let Some(records) = &p.records {
                p.records = Some(Bytes::from(mutate_batch(rng, records)));
            }
            if rng.chance(10) {
                p.index = i32::from_be_bytes(interesting(rng, 4).try_into().unwrap());
            }
        }
    }
    req
}

/// The body of a frame changed in one of several ways.
fn mutate_body(rng: &mut Rng, frame: &[u8], body_at: usize, other: &[u8]) -> (Vec<u8>, String) {
    let mut f = frame.to_vec();
    let body_len = f.len().saturating_sub(body_at);
    if body_len == 0 {
        f.extend((0..1 + rng.below(8)).map(|_| rng.next() as u8));
        return (f, "bytes after an empty body".into());
    }
    match rng.below(6) {
        0 => {
            let n = 1 + rng.below(4);
            for _ in 0..n {
                let at = body_at + rng.below(body_len);
                f[at] = rng.next() as u8;
            }
            (f, format!("{n} random bytes"))
        }
        1 | 2 => {
            let width = [1, 2, 4, 8][rng.below(4)];
            let at = body_at + rng.below(body_len);
            let v = interesting(rng, width);
            let end = (at + width).min(f.len());
            f[at..end].copy_from_slice(&v[..end - at]);
            (f, format!("a {width}-byte value at {at}"))
        }
        3 => {
            let cut = body_at + rng.below(body_len);
            f.truncate(cut);
            (f, format!("cut at {cut}"))
        }
        4 => {
            let n = 1 + rng.below(16);
            f.extend((0..n).map(|_| rng.next() as u8));
            (f, format!("{n} bytes appended"))
        }
        _ => {
            // Another API's body under this header.
            f.truncate(body_at);
            f.extend_from_slice(other);
            (f, "another request's body".into())
        }
    }
}

// ---- what is expected of an answer ----

/// What a sent frame may end in.
#[derive(Debug)]
struct Sent {
    conn: u64,
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    /// The header was left as encoded: an answer must decode as this API's.
    header_intact: bool,
    /// Kafka may not answer at all (acks=0), or hold it past the settle
    /// time (a long max_wait_ms): an unanswered frame is then no hang.
    may_stay_silent: bool,
    what: String,
    frame: Bytes,
}

/// Whether a (possibly mutated) frame is one Kafka may leave unanswered.
fn may_stay_silent(key: ApiKey, version: i16, frame: &[u8], body_at: usize) -> bool {
    let mut body = Bytes::copy_from_slice(&frame[body_at.min(frame.len())..]);
    match key {
        ApiKey::Produce => ProduceRequest::decode(&mut body, version).map_or(true, |r| r.acks == 0),
        ApiKey::Fetch => FetchRequest::decode(&mut body, version)
            .map_or(true, |r| i64::from(r.max_wait_ms) >= SETTLE_MS),
        _ => false,
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn replay_hint(seed: u64) -> String {
    format!("replay: DOZE_FUZZ_SEED={seed} cargo test -p doze-core --test fuzz_requests")
}

/// Checks every frame of a round once the clock has passed its timeouts:
/// each connection's answers come in the order of its frames; a frame
/// Kafka may leave unanswered is skipped, and one it may hold (a long
/// fetch) holds every later answer of its connection.
fn check_answers(w: &mut World, sent: &[Vec<Sent>], seed: u64, round: usize, tally: &mut Tally) {
    for frames in sent {
        let Some(first) = frames.first() else {
            continue;
        };
        let closed = w.closed.contains(&first.conn);
        let mut answer = w.raw_response(first.conn);
        for s in frames {
            let context = || {
                format!(
                    "seed {seed} round {round}: {:?} v{} ({})\nframe {}\n{}",
                    s.key,
                    s.version,
                    s.what,
                    hex(&s.frame),
                    replay_hint(seed)
                )
            };
            tally.frames += 1;
            // The next answer is this frame's unless its correlation id is
            // a later frame's (a changed header's answer is taken as its).
            let ours = answer.as_ref().is_some_and(|f| {
                !s.header_intact
                    || i32::from_be_bytes(f[..4].try_into().unwrap()) == s.correlation_id
            });
            if !ours {
                assert!(
                    closed || s.may_stay_silent,
                    "neither answered nor closed after {SETTLE_MS} ms (the next answer on \
                     its connection: {}): {}",
                    answer.as_ref().map_or("none".into(), |f| hex(&f[..4])),
                    context()
                );
                if closed {
                    tally.closed += 1;
                } else {
                    tally.silent += 1;
                }
                if s.key == ApiKey::Fetch {
                    break;
                }
                continue;
            }
            let frame = std::mem::replace(&mut answer, w.raw_response(s.conn))
                .expect("`ours` is an answer");
            if !s.header_intact {
                tally.answered_changed_header += 1;
                continue;
            }
            let mut frame = frame;
            let header =
                ResponseHeader::decode(&mut frame, s.key.response_header_version(s.version))
                    .unwrap_or_else(|e| {
                        panic!("answer header does not decode: {e}\n{}", context())
                    });
            assert_eq!(header.correlation_id, s.correlation_id, "{}", context());
            ResponseKind::decode(s.key, &mut frame, s.version)
                .unwrap_or_else(|e| panic!("answer does not decode: {e}\n{}", context()));
            tally.decoded += 1;
            assert!(
                frame.is_empty(),
                "{} bytes left after the answer's body\n{}",
                frame.len(),
                context()
            );
        }
    }
}

/// The broker still takes a record and gives it back.
fn still_serves(w: &mut World, conn: u64, seed: u64, round: usize) {
    w.auto_io = true;
    let value = format!("alive-{seed}-{round}");
    // "alive" may have been deleted, or recreated with odd configs, by a
    // fuzzed request: make it anew under a name of this round's own.
    let topic = format!("alive-{round}");
    create_topic(w, &topic, 1);
    w.send(
        conn,
        9,
        &produce_req(&topic, 0, batch(&[value.as_bytes()], w.now_ms), -1),
    );
    let (err, offset) = produce_answer(w, conn).expect("produce answered");
    assert_eq!(err, 0, "seed {seed} round {round}: produce after the round");
    w.send(conn, 12, &fetch_req(&topic, 0, offset, 0, 1));
    let p = fetch_answer(w, conn).expect("fetch answered");
    assert_eq!(p.error_code, 0);
    let values = decode_values(p.records.expect("records"));
    assert_eq!(
        values.first().map(|(_, v)| v.to_vec()),
        Some(value.into_bytes()),
        "seed {seed} round {round}: the record just produced reads back\n{}",
        replay_hint(seed)
    );
}

fn setup() -> (World, Known) {
    let mut w = World::new(BrokerConfig::default());
    create_topic(&mut w, "a", 3);
    // The topic that recompresses what it is sent (the idempotent
    // producer's batches land here).
    let (err, _) = create_with(&mut w, "b", &[("compression.type", "zstd")]);
    assert_eq!(err, 0);
    let (err, _) = create_with(&mut w, "c", &[("cleanup.policy", "compact")]);
    assert_eq!(err, 0);
    for p in 0..3 {
        w.send(1, 9, &produce_req("a", p, batch(&[b"x", b"y"], T0_MS), -1));
        assert_eq!(produce_answer(&mut w, 1).map(|a| a.0), Some(0));
    }
    let (err, txn_pid, txn_epoch) = init_txn(&mut w, 2, "t", 60_000);
    assert_eq!(err, 0);
    let req = InitProducerIdRequest::default()
        .with_transaction_timeout_ms(-1)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    w.send(3, 4, &req);
    let Some((_, ResponseKind::InitProducerId(r))) = w.recv(3) else {
        panic!("InitProducerId answered")
    };
    let known = Known {
        txn_pid,
        txn_epoch,
        idem_pid: r.producer_id.0,
    };
    (w, known)
}

/// Starts the transactional producer "t" over (InitProducerId, retried
/// while its last transaction completes) and opens a transaction on "a"
/// with the group's offsets in it, so that the transactional seeds carry
/// its current epoch: fuzzed InitProducerIds bump it, and a stale epoch
/// would leave every later transactional request at its first check.
fn refresh(w: &mut World, known: &mut Known, conn: u64) {
    let (auto_io, fail_sync, fail_meta) = (w.auto_io, w.fail_next_sync, w.fail_next_meta);
    w.auto_io = true;
    w.fail_next_sync = false;
    w.fail_next_meta = false;
    w.drain();
    for _ in 0..3 {
        let (err, pid, epoch) = init_txn(w, conn, "t", 60_000);
        if err == 0 {
            known.txn_pid = pid;
            known.txn_epoch = epoch;
            add_partitions(w, conn, "t", pid, epoch, &[("a", 0), ("a", 1), ("a", 2)]);
            add_offsets(w, conn, "t", pid, epoch, "g");
            break;
        }
        w.advance(1_000);
    }
    (w.auto_io, w.fail_next_sync, w.fail_next_meta) = (auto_io, fail_sync, fail_meta);
}

/// What a run's frames ended in, printed so a run shows what it covered.
#[derive(Default)]
struct Tally {
    frames: u64,
    /// Answers checked to decode as their API's response.
    decoded: u64,
    answered_changed_header: u64,
    /// Unanswered, the connection closed.
    closed: u64,
    /// Unanswered, as Kafka may leave them (acks=0, a long fetch wait).
    silent: u64,
}

fn run_seed(seed: u64, tally: &mut Tally) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let (mut w, mut known) = setup();
    let mut seeds = seeds(&known);
    // Connections of the harness's own requests (`refresh`), apart from
    // the fuzzed ones.
    let mut helper_conn: u64 = 500_000_000;
    let mut conn: u64 = 1000;
    let mut correlation_id = 1;
    for round in 0..ROUNDS {
        w.auto_io = false;
        let mut sent = Vec::new();
        for i in 0..FRAMES_PER_ROUND {
            // I/O and time between frames: completions, failures, the clock.
            match rng.below(10) {
                0..=2 => w.complete_io(),
                3 => w.fail_next_sync = true,
                4 => w.fail_next_meta = true,
                5 => w.advance(1 + rng.below(20_000) as i64),
                _ => {}
            }
            if rng.chance(3) {
                helper_conn += 1;
                refresh(&mut w, &mut known, helper_conn);
                seeds = self::seeds(&known);
            }
            let seed_req = &seeds[rng.below(seeds.len())];
            let key = api_key(seed_req);
            let (min, max) = SUPPORTED
                .iter()
                .find(|(k, _, _)| *k == key)
                .map(|&(_, min, max)| (min, max))
                .expect("a seed of a served API");
            let version = min + rng.below((max - min + 1) as usize) as i16;
            correlation_id += 1;
            let mutated_produce;
            let req = match seed_req {
                RequestKind::Produce(p) if rng.chance(50) => {
                    mutated_produce = RequestKind::Produce(mutate_produce(&mut rng, p));
                    &mutated_produce
                }
                other => other,
            };
            let encoded = encode_at(req, version, correlation_id)
                .or_else(|| encode_at(&empty(key), version, correlation_id))
                .unwrap_or_else(|| panic!("{key:?} v{version}: an empty request encodes"));
            let at = body_at(key, version);
            let (frame, what, header_intact) =
                if matches!(req, RequestKind::Produce(_)) && !std::ptr::eq(req, seed_req) {
                    (
                        encoded.to_vec(),
                        "produce batch changed, CRC made right".into(),
                        true,
                    )
                } else if rng.chance(15) {
                    (encoded.to_vec(), "unchanged".into(), true)
                } else if rng.chance(5) {
                    // A mutation in the header itself.
                    let mut f = encoded.to_vec();
                    let pos = rng.below(at.min(f.len()));
                    f[pos] = rng.next() as u8;
                    (f, format!("header byte {pos} changed"), pos >= 8)
                } else {
                    let other = &seeds[rng.below(seeds.len())];
                    let other_body = encode_at(other, 0, 0)
                        .map(|b| b[body_at(api_key(other), 0)..].to_vec())
                        .unwrap_or_default();
                    let (f, what) = mutate_body(&mut rng, &encoded, at, &other_body);
                    (f, what, true)
                };
            // A client id mutated in length shifts the body: its answer
            // header is still the API's, but treat it as changed.
            let header_intact = header_intact && frame.len() >= at;
            let frame = Bytes::from(frame);
            let silent = may_stay_silent(key, version, &frame, at);
            // A frame on a fresh connection, or on the last one (requests
            // in a row on one connection: ordering, in-flight limits). A
            // changed header goes alone: its answer cannot be told apart.
            let follows = header_intact
                && !w.closed.contains(&conn)
                && !sent.is_empty()
                && sent
                    .last()
                    .is_some_and(|c: &Vec<Sent>| c.iter().all(|s| s.header_intact))
                && rng.chance(20);
            if !follows {
                conn += 1;
                sent.push(Vec::new());
            }
            let this = Sent {
                conn,
                key,
                version,
                correlation_id,
                header_intact,
                may_stay_silent: silent,
                what: format!("frame {i}: {what}"),
                frame: frame.clone(),
            };
            let sent_ok = panic::catch_unwind(AssertUnwindSafe(|| w.send_raw(conn, frame)));
            if let Err(e) = sent_ok {
                eprintln!(
                    "seed {seed} round {round}: the core panicked on {:?} v{} ({})\nframe {}\n{}",
                    key,
                    version,
                    this.what,
                    hex(&this.frame),
                    replay_hint(seed)
                );
                panic::resume_unwind(e);
            }
            sent.last_mut().expect("pushed above").push(this);
        }
        // Settle: I/O healthy, the clock past every timeout.
        w.fail_next_sync = false;
        w.fail_next_meta = false;
        let mut moved = 0;
        while moved < SETTLE_MS {
            w.complete_io();
            w.advance(SETTLE_STEP_MS);
            moved += SETTLE_STEP_MS;
        }
        w.complete_io();
        check_answers(&mut w, &sent, seed, round, tally);
        // Then a restart of some kind, and the broker must still serve.
        w.auto_io = true;
        match rng.below(4) {
            0 => w.restart(true),
            1 => w.restart(false),
            2 => w.stop_and_restart(),
            _ => {}
        }
        conn += 1;
        still_serves(&mut w, conn, seed, round);
    }
}

/// The API's request with every field at its default.
fn empty(key: ApiKey) -> RequestKind {
    macro_rules! empties {
        ($($v:ident => $t:ty),*) => {
            match key {
                $(ApiKey::$v => RequestKind::$v(<$t>::default()),)*
                other => panic!("no empty request for {other:?}"),
            }
        };
    }
    empties!(
        Produce => ProduceRequest, Fetch => FetchRequest, ListOffsets => ListOffsetsRequest,
        Metadata => MetadataRequest, ApiVersions => ApiVersionsRequest,
        CreateTopics => CreateTopicsRequest, DeleteTopics => DeleteTopicsRequest,
        DeleteRecords => DeleteRecordsRequest, DescribeConfigs => DescribeConfigsRequest,
        AlterConfigs => AlterConfigsRequest,
        IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
        CreatePartitions => CreatePartitionsRequest, DescribeCluster => DescribeClusterRequest,
        DescribeTopicPartitions => DescribeTopicPartitionsRequest,
        DescribeAcls => DescribeAclsRequest, InitProducerId => InitProducerIdRequest,
        FindCoordinator => FindCoordinatorRequest, JoinGroup => JoinGroupRequest,
        SyncGroup => SyncGroupRequest, Heartbeat => HeartbeatRequest,
        LeaveGroup => LeaveGroupRequest, OffsetCommit => OffsetCommitRequest,
        OffsetFetch => OffsetFetchRequest, ListGroups => ListGroupsRequest,
        DescribeGroups => DescribeGroupsRequest, DeleteGroups => DeleteGroupsRequest,
        OffsetDelete => OffsetDeleteRequest, AddPartitionsToTxn => AddPartitionsToTxnRequest,
        AddOffsetsToTxn => AddOffsetsToTxnRequest, EndTxn => EndTxnRequest,
        WriteTxnMarkers => WriteTxnMarkersRequest, TxnOffsetCommit => TxnOffsetCommitRequest,
        DescribeTransactions => DescribeTransactionsRequest,
        ListTransactions => ListTransactionsRequest,
        DescribeProducers => DescribeProducersRequest, SaslHandshake => SaslHandshakeRequest,
        SaslAuthenticate => SaslAuthenticateRequest, CreateAcls => CreateAclsRequest,
        DeleteAcls => DeleteAclsRequest,
        DescribeUserScramCredentials => DescribeUserScramCredentialsRequest,
        AlterUserScramCredentials => AlterUserScramCredentialsRequest,
        DescribeClientQuotas => DescribeClientQuotasRequest
    )
}

#[test]
fn every_served_api_has_a_seed() {
    let known = Known {
        txn_pid: 0,
        txn_epoch: 0,
        idem_pid: 1,
    };
    let keys: Vec<ApiKey> = seeds(&known).iter().map(api_key).collect();
    for (key, min, max) in SUPPORTED {
        assert!(keys.contains(key), "{key:?} has no seed");
        for v in *min..=*max {
            assert!(
                encode_at(&empty(*key), v, 1).is_some(),
                "{key:?} v{v}: the empty request encodes"
            );
        }
    }
}

#[test]
fn mutated_requests_are_answered_or_closed_never_a_panic() {
    let seeds: Vec<u64> = match std::env::var("DOZE_FUZZ_SEED") {
        Ok(one) => vec![one.parse().expect("DOZE_FUZZ_SEED is a number")],
        Err(_) => {
            let n: u64 = std::env::var("DOZE_FUZZ_SEEDS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(20);
            // DOZE_FUZZ_START: the first seed, for campaigns past CI's.
            let start: u64 = std::env::var("DOZE_FUZZ_START")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            (start..start.saturating_add(n)).collect()
        }
    };
    let mut tally = Tally::default();
    let count = seeds.len();
    for seed in seeds {
        let run = panic::catch_unwind(AssertUnwindSafe(|| run_seed(seed, &mut tally)));
        if let Err(e) = run {
            eprintln!("seed {seed} failed; {}", replay_hint(seed));
            panic::resume_unwind(e);
        }
    }
    eprintln!(
        "fuzz: {count} seeds, {} frames: {} answers decoded as their API's, {} answered \
         under a changed header, {} connections closed, {} left unanswered as Kafka may",
        tally.frames, tally.decoded, tally.answered_changed_header, tally.closed, tally.silent
    );
}
