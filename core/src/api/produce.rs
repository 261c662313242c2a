//! Produce (key 0), v3–v9.
//!
//! Each partition's records are split into RecordBatch v2 batches, checked
//! (magic, lengths, CRC-32C, size against max.message.bytes and the segment
//! size) and appended as the client sent them, with the base offset
//! rewritten by the broker; recompressed first where the topic's
//! compression.type names another codec or a compressed batch's inner
//! offsets are wrong (`crate::recompress`, as Kafka's LogValidator; the
//! driver does that work before the request reaches the core, and the core
//! only what the driver did not, within a bound per request: see
//! `records::stored_form`). acks=1 and
//! acks=-1 are both answered only once the data is fsynced: with one node
//! and no replicas, "on disk" is the promise. acks=0 gets no response at
//! all, as in Kafka.
//!
//! ACL: WRITE on the transactional id (if a batch is transactional) and on each topic.
//!
//! Produce stops at v9 so clients keep the classic transaction protocol.
//! As Kafka requires from v3 on, each partition carries exactly one batch.
//!
//! A batch with a producer id is checked against the partition's producer
//! state (`producer::state`): a duplicate is answered with its original
//! offsets once they are durable and is not written again; an old epoch gets
//! INVALID_PRODUCER_EPOCH, a sequence gap OUT_OF_ORDER_SEQUENCE_NUMBER.
//! Transactional batches must belong to an Ongoing transaction that added
//! the partition (see `check_transaction`).
//!
//! Every record of every batch is read, a compressed batch decompressed
//! (never past `limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX`: a batch that
//! decompresses to more is MESSAGE_TOO_LARGE), by the driver beside the
//! core (`crate::produce_checks`), and checked as Kafka's
//! LogValidator checks it (`check_records`): on a compacted topic each
//! record has a key; on a CreateTime topic each record's timestamp lies
//! within message.timestamp.before.max.ms before and
//! message.timestamp.after.max.ms after the broker's clock (Kafka 4.x: at
//! most an hour ahead by default); and a client may not mark a batch
//! LogAppendTime, except with a time on a CreateTime topic. A refused batch
//! lists its records' errors. An accepted batch is stored with CreateTime
//! and its records' own max timestamp, as Kafka's LogValidator stores it,
//! even if the client wrote another (or the LogAppendTime bit) in its
//! header; on a LogAppendTime topic it is stamped with the broker's time.

mod records;

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::RequestCtx;
use crate::api::Cx;
use crate::batch::{self, BatchError};
use crate::core_state::Core;
use crate::limits;
use crate::produce_checks::{self, Rebuild, Verdict};
use crate::producer::{AppendCheck, ProducerError};
use crate::security::acl::{resource, Op};
use crate::topic_config::AppendConfig;
use crate::topics::{PartitionKey, Topics};
use records::{check_records, stored_form, RecordRules, StoredForm, TimestampBounds};

/// A produce request waiting for its data to be durable.
pub struct PendingProduce {
    ctx: RequestCtx,
    response: ProduceResponse,
    /// (partition, last offset that must be durable, topic index, partition index)
    waits: Vec<(PartitionKey, i64, usize, usize)>,
}

pub(crate) fn handle(b: &mut Cx, ctx: RequestCtx, req: ProduceRequest) {
    // Refused by the ACLs, an acks=0 request closes the connection: that is
    // how Kafka tells a producer that waits for no answer.
    if has_transactional_batch(&req) && !may_write_transactional_id(b.core, &ctx, &req) {
        if req.acks == 0 {
            return b.core.close(ctx.conn);
        }
        let response = error_response(&req, ResponseError::TransactionalIdAuthorizationFailed);
        return b.core.respond(&ctx, ResponseKind::Produce(response));
    }
    if !matches!(req.acks, -1..=1) {
        let response = error_response(&req, ResponseError::InvalidRequiredAcks);
        return b.core.respond(&ctx, ResponseKind::Produce(response));
    }
    // Read beside the core by the driver (`Input::CheckedFrame`); a frame
    // handed in without them, or a request deferred and handled again, is
    // read here.
    let checks = b
        .take_produce_checks()
        .unwrap_or_else(|| produce_checks::check_request(&req));
    let mut left = CoreWork {
        reread_bytes: limits::PRODUCE_RECORD_ERRORS_READ_BYTES_MAX,
        rebuild_bytes: limits::PRODUCE_CORE_REBUILD_BYTES_MAX,
    };
    let mut response = ProduceResponse::default();
    let mut waits = Vec::new();
    let mut refused_a_topic = false;
    for (name, partitions) in produce_checks::entries_by_partition(&req) {
        let writable = b.core.authorized(&ctx, Op::Write, resource::TOPIC, name);
        refused_a_topic |= !writable;
        // Not the decoded name: it is a slice of the request frame, which a
        // response waiting for its fsync would keep whole (every batch of
        // the request) until then. A known topic lends its own.
        let owned_name = b.core.topics().get(name).map_or_else(
            || StrBytes::from_string(name.to_owned()),
            |t| t.name_bytes.clone(),
        );
        let ti = response.responses.len();
        let mut topic_response = TopicProduceResponse::default().with_name(TopicName(owned_name));
        for (pi, part) in partitions.into_iter().enumerate() {
            let mut pr = PartitionProduceResponse::default()
                .with_index(part.index)
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1);
            let appended = if writable {
                let entry = PartitionEntry {
                    topic_name: name,
                    partition: part.index,
                    records: part.records.as_ref(),
                    verdict: checks.get(name, part.index),
                    rebuild: checks.rebuild(name, part.index),
                };
                append_partition(b, entry, &mut left)
            } else {
                Err(refused(ResponseError::TopicAuthorizationFailed, None))
            };
            match appended {
                Ok(appended) => {
                    pr.base_offset = appended.base_offset;
                    pr.log_append_time_ms = appended.log_append_time_ms;
                    pr.log_start_offset = appended.log_start_offset;
                    waits.push((appended.key, appended.last_offset, ti, pi));
                }
                Err(refusal) => {
                    pr.error_code = refusal.error.code();
                    pr.error_message = refusal.message.map(StrBytes::from_string);
                    // Produce v8+ has room for them.
                    if ctx.version >= 8 {
                        pr.record_errors = refusal
                            .record_errors
                            .into_iter()
                            .map(|(index, message)| {
                                BatchIndexAndErrorMessage::default()
                                    .with_batch_index(index)
                                    .with_batch_index_error_message(Some(StrBytes::from_string(
                                        message,
                                    )))
                            })
                            .collect();
                    }
                    if refusal.by_log {
                        pr.log_start_offset = b
                            .core
                            .partition_view(name, part.index)
                            .map_or(-1, |view| view.log().log_start_offset());
                    }
                }
            }
            topic_response.partition_responses.push(pr);
        }
        response.responses.push(topic_response);
    }
    if !waits.is_empty() {
        b.core.request_sync();
    }
    if req.acks == 0 && refused_a_topic {
        return b.core.close(ctx.conn);
    }
    if req.acks == 0 {
        return b.core.respond_none(&ctx);
    }
    if waits.is_empty() {
        return b.core.respond(&ctx, ResponseKind::Produce(response));
    }
    // A duplicate of durable data needs no sync: answer it now.
    let durable = |(key, last_offset, _, _): &(PartitionKey, i64, usize, usize)| {
        b.core
            .topics()
            .partition_by_key(key)
            .is_some_and(|log| log.high_watermark() > *last_offset)
    };
    if waits.iter().all(durable) {
        return b.core.respond(&ctx, ResponseKind::Produce(response));
    }
    b.park_produce(PendingProduce {
        ctx,
        response,
        waits,
    });
}

/// Whether any partition's batch is transactional (Kafka's
/// RequestUtils.hasTransactionalRecords; from v3 a partition carries one
/// batch, and one with more is refused before anything is written).
fn has_transactional_batch(req: &ProduceRequest) -> bool {
    req.topic_data
        .iter()
        .flat_map(|t| &t.partition_data)
        .filter_map(|p| p.records.as_ref())
        .any(|records| batch::parse_header(records).is_ok_and(|h| h.is_transactional()))
}

/// WRITE on the request's transactional id. With the authorizer on, none at
/// all is refused too (Kafka refuses it even with no authorizer; doze then
/// leaves it to the transaction checks).
fn may_write_transactional_id(b: &Core, ctx: &RequestCtx, req: &ProduceRequest) -> bool {
    match &req.transactional_id {
        Some(id) => b.authorized(ctx, Op::Write, resource::TRANSACTIONAL_ID, &id.0),
        None => !b.authorizer_enabled(),
    }
}

struct Appended {
    key: PartitionKey,
    base_offset: i64,
    last_offset: i64,
    log_append_time_ms: i64,
    log_start_offset: i64,
}

type AppendResult = Result<Appended, Refusal>;

/// Why a partition's batch was refused.
struct Refusal {
    error: ResponseError,
    message: Option<String>,
    /// Refused by the partition's log (its producer state), not before it:
    /// Kafka then reports the log start offset with the error
    /// (ReplicaManager.appendToLocalLog; seen in conformance), else -1.
    by_log: bool,
    /// The records that made the batch refused: (index in the batch, why).
    record_errors: Vec<(i32, String)>,
}

impl Refusal {
    fn by_log(self) -> Self {
        Self {
            by_log: true,
            ..self
        }
    }
}

fn refused(error: ResponseError, message: Option<String>) -> Refusal {
    Refusal {
        error,
        message,
        by_log: false,
        record_errors: Vec::new(),
    }
}

/// One partition entry of the request, with what was read of its records
/// (`produce_checks`).
struct PartitionEntry<'a> {
    topic_name: &'a str,
    partition: i32,
    records: Option<&'a bytes::Bytes>,
    verdict: Option<&'a Verdict>,
    /// What the driver did to its batch (`recompress::prepare_frame`).
    rebuild: Option<&'a Rebuild>,
}

/// What is left of the decompressed bytes the core reads again for one
/// request: to list the records a rule refuses
/// (`limits::PRODUCE_RECORD_ERRORS_READ_BYTES_MAX`), and to rebuild a
/// batch the driver did not (`limits::PRODUCE_CORE_REBUILD_BYTES_MAX`).
struct CoreWork {
    reread_bytes: usize,
    rebuild_bytes: usize,
}

fn append_partition(b: &mut Cx, entry: PartitionEntry<'_>, left: &mut CoreWork) -> AppendResult {
    let PartitionEntry {
        topic_name,
        partition,
        records,
        verdict,
        rebuild,
    } = entry;
    let Some(topic) = b.core.topics().get(topic_name) else {
        return Err(refused(ResponseError::UnknownTopicOrPartition, None));
    };
    if partition < 0 || partition as usize >= topic.partitions.len() {
        return Err(refused(ResponseError::UnknownTopicOrPartition, None));
    }
    let key = topic.key(partition);
    if b.core.is_offline(&key) {
        return Err(refused(ResponseError::KafkaStorageError, None));
    }
    let Some(records) = records else {
        return Err(refused(
            ResponseError::CorruptMessage,
            Some("records are null".into()),
        ));
    };
    if records.len() > limits::RECORD_LIST_BYTES_MAX {
        return Err(refused(ResponseError::RecordListTooLarge, None));
    }
    let AppendConfig {
        message_bytes_max,
        segment_bytes,
        log_append_time,
        timestamp_before_max_ms,
        timestamp_after_max_ms,
        compact: compacted,
        compression,
    } = topic.append;
    let rules = RecordRules {
        bounds: (!log_append_time).then(|| TimestampBounds {
            now_ms: b.core.now_ms(),
            before_max_ms: timestamp_before_max_ms,
            after_max_ms: timestamp_after_max_ms,
        }),
        compacted,
        topic_name,
        partition,
    };
    let batches = batch::split_produce_records(records, usize::MAX).map_err(|e| match e {
        BatchError::CrcMismatch { .. } => {
            refused(ResponseError::CorruptMessage, Some(e.to_string()))
        }
        // Kafka's LogValidator.validateBatch finds these inside the log,
        // which then reports its start offset (ReplicaManager.appendToLocalLog).
        BatchError::BadRecordCount => {
            refused(ResponseError::InvalidRecord, Some(e.to_string())).by_log()
        }
        other => refused(ResponseError::InvalidRecord, Some(other.to_string())),
    })?;
    if batches.len() != 1 {
        let m = "Produce requests with version 3 and above carry exactly one record batch";
        return Err(refused(ResponseError::InvalidRecord, Some(m.into())));
    }
    let (mut header, mut bytes) = batches.into_iter().next().expect("exactly one batch");
    if header.is_control() {
        return Err(refused(
            ResponseError::InvalidRecord,
            Some("clients may not write control batches".into()),
        ));
    }
    // The batch the client sent, as Kafka checks it before any rebuild
    // (the driver's is checked as Kafka checks its own, below).
    if let Some(Rebuild::Done { sent_bytes }) = rebuild {
        check_size(*sent_bytes, segment_bytes, message_bytes_max)?;
    }
    check_size(bytes.len(), segment_bytes, message_bytes_max)?;
    // Every entry the core reads was read beside it; one missing is read here.
    let read_here;
    let verdict = match verdict {
        Some(verdict) => verdict,
        None => {
            let max = limits::BATCH_RECORDS_DECOMPRESSED_BYTES_MAX;
            read_here = produce_checks::read_batch(&header, &bytes, topic_name, partition, max);
            &read_here
        }
    };
    let checked = check_records(&header, &bytes, &rules, verdict, &mut left.reread_bytes)?;
    // Stored with the topic's compression.type (`stored_form`), and then
    // as Kafka stores a produced batch: CreateTime, with the records' own
    // max timestamp (`batch::with_create_time_max`). Producers send exactly
    // that, so this copies only a batch whose header was wrong.
    let stored = StoredForm {
        compression,
        sizes: (segment_bytes, message_bytes_max),
        driver: rebuild,
    };
    if let Some(rebuilt) = stored_form(&header, &bytes, &checked, stored, &mut left.rebuild_bytes)?
    {
        // Kafka checks the size again after a rebuild (UnifiedLog.append,
        // messageSizeMaybeChanged).
        check_size(rebuilt.len(), segment_bytes, message_bytes_max)?;
        header = batch::parse_header(&rebuilt).expect("a rebuilt valid batch");
        bytes = rebuilt;
    }
    let records_max_ms = checked.max_timestamp_ms;
    let wrong_max = records_max_ms != header.max_timestamp || header.has_log_append_time();
    if !log_append_time && wrong_max {
        bytes = batch::with_create_time_max(&bytes, records_max_ms);
        header = batch::parse_header(&bytes).expect("a rewritten valid batch");
    }
    check_transaction(b.core, &key, topic_name, partition, &header)?;
    if header.has_producer_id() {
        match b.core.check_producer(&key, &header) {
            Ok(AppendCheck::Append) => {}
            Ok(AppendCheck::Duplicate {
                first_offset,
                last_offset,
            }) => {
                // Answered once the original is durable, like any append.
                let log_start_offset = b
                    .core
                    .topics()
                    .partition_by_key(&key)
                    .expect("exists")
                    .log_start_offset();
                // Kafka answers a duplicate with its stored batch's
                // timestamp in log_append_time_ms (UnifiedLog's duplicate
                // path; seen in conformance). A retried batch carries the
                // same max timestamp; on a LogAppendTime topic Kafka would
                // give the original's append time instead.
                let log_append_time_ms = header.max_timestamp;
                return Ok(Appended {
                    key,
                    base_offset: first_offset,
                    last_offset,
                    log_append_time_ms,
                    log_start_offset,
                });
            }
            Err(e @ ProducerError::InvalidEpoch { .. }) => {
                return Err(
                    refused(ResponseError::InvalidProducerEpoch, Some(e.to_string())).by_log(),
                )
            }
            Err(e @ ProducerError::OutOfOrderSequence { .. }) => {
                return Err(
                    refused(ResponseError::OutOfOrderSequenceNumber, Some(e.to_string())).by_log(),
                )
            }
        }
    }
    let appended = b.core.append_batch(&key, &header, bytes, log_append_time);
    Ok(Appended {
        key,
        base_offset: appended.base_offset,
        last_offset: appended.last_offset,
        log_append_time_ms: appended.log_append_time_ms,
        log_start_offset: appended.log_start_offset,
    })
}

/// A batch larger than a segment is RECORD_LIST_TOO_LARGE; one larger than
/// max.message.bytes MESSAGE_TOO_LARGE.
fn check_size(
    batch_bytes: usize,
    segment_bytes: usize,
    message_bytes_max: usize,
) -> Result<(), Refusal> {
    if batch_bytes > segment_bytes {
        return Err(refused(ResponseError::RecordListTooLarge, None));
    }
    if batch_bytes > message_bytes_max {
        return Err(refused(ResponseError::MessageTooLarge, None));
    }
    Ok(())
}

/// The transaction checks of a produce, as Kafka's partition verification
/// (TransactionCoordinator.handleVerifyPartitionsInTransaction, with the
/// error translation of ReplicaManager for Produce v9 and below): a
/// transactional batch needs a producer id owned by a transactional id
/// (INVALID_PRODUCER_ID_MAPPING), its epoch (INVALID_PRODUCER_EPOCH: Produce
/// has no PRODUCER_FENCED), no decision being carried out
/// (CONCURRENT_TRANSACTIONS becomes NOT_ENOUGH_REPLICAS, which clients retry),
/// and an Ongoing transaction that added this partition (INVALID_TXN_STATE,
/// "Partition was not added to the transaction"). A plain batch from a
/// producer with a transaction open here is INVALID_TXN_STATE
/// (ProducerAppendInfo.appendDataBatch).
fn check_transaction(
    b: &Core,
    key: &PartitionKey,
    topic: &str,
    partition: i32,
    h: &crate::batch::BatchHeader,
) -> Result<(), Refusal> {
    if !h.is_transactional() {
        let open_here = h.has_producer_id() && b.has_ongoing_txn(key, h.producer_id);
        if open_here {
            return Err(refused(
                ResponseError::InvalidTxnState,
                Some("Expected a transactional write".into()),
            )
            .by_log());
        }
        return Ok(());
    }
    let Some((_, entry)) = b.txns().by_producer(h.producer_id) else {
        return Err(refused(ResponseError::InvalidProducerIdMapping, None));
    };
    let r = &entry.record;
    if r.producer_epoch != h.producer_epoch {
        return Err(refused(ResponseError::InvalidProducerEpoch, None));
    }
    if entry.completion.is_some() || r.state.is_prepare() {
        let m = "Unable to verify the partition has been added to the transaction. Underlying error: CONCURRENT_TRANSACTIONS";
        return Err(refused(ResponseError::NotEnoughReplicas, Some(m.into())));
    }
    if r.state != crate::txn::TxnState::Ongoing
        || !r.partitions.contains(&(topic.to_string(), partition))
    {
        return Err(refused(
            ResponseError::InvalidTxnState,
            Some("Partition was not added to the transaction".into()),
        ));
    }
    Ok(())
}

/// Every partition of the request answered `error`, each once (as
/// `entries_by_partition`).
fn error_response(req: &ProduceRequest, error: ResponseError) -> ProduceResponse {
    let responses = produce_checks::entries_by_partition(req)
        .into_iter()
        .map(|(name, partitions)| {
            let parts = partitions
                .into_iter()
                .map(|p| {
                    PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(error.code())
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                .with_partition_responses(parts)
        })
        .collect();
    ProduceResponse::default().with_responses(responses)
}

impl PendingProduce {
    /// Drops the waits whose data is now durable; a wait whose partition is
    /// gone fails with UNKNOWN_TOPIC_OR_PARTITION. Whether none is left.
    /// `hold_deleted`: the planted bug that never answers a wait whose
    /// partition is gone (`PlantedBug::HoldProduceOfDeletedPartition`).
    pub(crate) fn settle(&mut self, topics: &Topics, hold_deleted: bool) -> bool {
        let response = &mut self.response;
        self.waits.retain(
            |(key, last_offset, ti, pi)| match topics.partition_by_key(key) {
                Some(log) => log.high_watermark() <= *last_offset,
                None if hold_deleted => true,
                None => {
                    let pr = &mut response.responses[*ti].partition_responses[*pi];
                    pr.error_code = ResponseError::UnknownTopicOrPartition.code();
                    false
                }
            },
        );
        self.waits.is_empty()
    }

    /// After a failed sync truncated the logs: every wait whose data was cut
    /// away fails with KAFKA_STORAGE_ERROR (retriable: the client sends it again).
    pub(crate) fn fail_cut(&mut self, topics: &Topics) {
        let response = &mut self.response;
        self.waits.retain(
            |(key, last_offset, ti, pi)| match topics.partition_by_key(key) {
                Some(log) if log.log_end_offset() <= *last_offset => {
                    let pr = &mut response.responses[*ti].partition_responses[*pi];
                    pr.error_code = ResponseError::KafkaStorageError.code();
                    pr.base_offset = -1;
                    false
                }
                _ => true,
            },
        );
    }

    /// The request and its answer, once nothing is left to wait for.
    pub(crate) fn answer(self) -> (RequestCtx, ResponseKind) {
        (self.ctx, ResponseKind::Produce(self.response))
    }
}
