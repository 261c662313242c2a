//! The real server (`server.rs`, `conn.rs`, the core) under madsim: a broker
//! node over a simulated store (`simstore.rs`) and client nodes that speak the
//! Kafka protocol over madsim's simulated TCP, while the test kills and
//! restarts the broker (power cuts and process kills), stops and restarts it
//! cleanly (the SIGTERM path: `Input::Shutdown` until `Output::Stopped`),
//! clogs its links and drops connections, all from one seed.
//!
//! Clients: an idempotent producer (acks=-1, one batch in flight, the same
//! batch retried after any failure), a transactional producer (InitProducerId,
//! AddPartitionsToTxn, transactional produce, EndTxn; one transaction in four
//! is aborted on purpose), and at the end a read_committed consumer. Checked:
//! every acknowledged idempotent record is in the log exactly once; every
//! committed transaction is visible to read_committed exactly once; no record
//! of an aborted transaction is; a transaction whose outcome the producer
//! never learnt is visible whole or not at all.
//!
//! Run (a few seeds; see the Makefile's `madsim` target):
//!   RUSTFLAGS="--cfg madsim" CARGO_TARGET_DIR=target/madsim \
//!     cargo test -p doze-net --test madsim_cluster
//! MADSIM_TEST_SEED=<seed> replays one seed; MADSIM_TEST_NUM=<n> runs n seeds.
#![cfg(madsim)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use doze_core::{BrokerConfig, PlantedBug};
use doze_net::config::HostPort;
use doze_net::server::{self, Setup};
use doze_net::simstore::{Crash, Latency, SimStorage, SimStore};
use doze_testkit::frame::{request_frame, size_prefixed};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use madsim::net::{NetSim, TcpListener, TcpStream};
use madsim::rand::{thread_rng, Rng};
use madsim::runtime::Handle;
use madsim::time::{sleep, timeout};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BROKER_IP: &str = "10.0.0.1";
const BROKER_PORT: u16 = 9092;
const TOPIC: &str = "events";
const PARTITIONS: i32 = 3;
const TXN_ID: &str = "madsim-txn";

/// Batches the idempotent producer sends, and transactions the transactional
/// one runs; each one is retried until it is settled.
/// Paced (see the sleeps in the producers) so that a run lasts a few
/// simulated minutes and sees a few dozen faults.
const IDEMPOTENT_BATCHES: u32 = 400;
const TRANSACTIONS: u32 = 80;
/// How long a client waits for an answer before it drops the connection.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// A bound on each client's whole run, in simulated time.
const CLIENT_DEADLINE: Duration = Duration::from_secs(3600);
/// How long a clean stop may take (the server gives the core 30 s).
const CLEAN_STOP_WAIT: Duration = Duration::from_secs(60);

// Kafka error codes the clients act on.
const NONE: i16 = 0;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const TOPIC_ALREADY_EXISTS: i16 = 36;

fn replay_command(seed: u64) -> String {
    format!(
        "MADSIM_TEST_SEED={seed} RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target/madsim \
         cargo test -p doze-net --test madsim_cluster"
    )
}

/// Retriable errors (Kafka's RetriableException subclasses) plus the
/// coordinator's "try again" answers.
fn is_retriable(code: i16) -> bool {
    matches!(
        code,
        2 | 3 | 5 | 6 | 7 | 13 | 14 | 15 | 16 | 19 | 20 | 56 | CONCURRENT_TRANSACTIONS
    )
}

fn topic_name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

fn broker_addr() -> SocketAddr {
    format!("{BROKER_IP}:{BROKER_PORT}").parse().unwrap()
}

// --- the broker node ------------------------------------------------------

/// A deliberately broken core, to see this test catch it:
/// DOZE_PLANT_BUG=end-txn-before-markers-durable or serve-above-lso.
fn planted_bug() -> Option<PlantedBug> {
    match std::env::var("DOZE_PLANT_BUG").ok()?.as_str() {
        "end-txn-before-markers-durable" => Some(PlantedBug::EndTxnBeforeMarkersDurable),
        "serve-above-lso" => Some(PlantedBug::ServeAboveLso),
        other => panic!("DOZE_PLANT_BUG={other}: unknown bug"),
    }
}

/// How the fault injector asks the broker node for a clean stop (as a
/// SIGTERM does) and learns that it is over.
#[derive(Default)]
struct CleanStop {
    /// A permit waits if the broker is not listening yet.
    asked: tokio::sync::Notify,
    done: tokio::sync::Notify,
}

async fn run_broker(store: Arc<SimStore>, clean_stop: Arc<CleanStop>) {
    let listener = TcpListener::bind(broker_addr())
        .await
        .expect("the broker binds its address");
    let settings = BrokerConfig {
        advertised_host: BROKER_IP.into(),
        advertised_port: i32::from(BROKER_PORT),
        // Small segments, so that rolling is exercised too.
        segment_bytes: 16 * 1024,
        planted_bug: planted_bug(),
        ..BrokerConfig::default()
    };
    let setup = Setup {
        listeners: vec![server::BoundListener {
            name: "PLAINTEXT".into(),
            protocol: doze_core::security::SecurityProtocol::Plaintext,
            listener,
            advertised: HostPort {
                host: BROKER_IP.into(),
                port: BROKER_PORT,
            },
            tls: None,
        }],
        print_names: false,
        settings,
        // Lists what is there without making it durable, as boot.rs does:
        // the core must adopt what a killed process left unsynced.
        boot: store.boot_state(),
        storage: SimStorage(store),
        console: None,
        metrics: Default::default(),
        limits: Default::default(),
    };
    // Runs until the node is killed, or stopped cleanly when asked.
    server::serve(setup, clean_stop.asked.notified())
        .await
        .expect("a clean stop succeeds");
    clean_stop.done.notify_one();
    // The node stays up, serving nothing, until the test restarts it.
    std::future::pending::<()>().await;
}

// --- an async Kafka client over simulated TCP ------------------------------

/// One client's connection to the broker, reopened on demand. Every failure
/// (refused, reset, closed, timed out) drops the connection; the caller
/// retries the same request.
struct Conn {
    name: &'static str,
    stream: Option<TcpStream>,
    next_correlation: i32,
    /// Chance that the client drops the connection right after sending a
    /// request, before its answer: the request may or may not be carried out.
    drop_after_send: f64,
}

impl Conn {
    fn new(name: &'static str, drop_after_send: f64) -> Self {
        Self {
            name,
            stream: None,
            next_correlation: 1,
            drop_after_send,
        }
    }

    async fn request<R: Request + Encodable>(
        &mut self,
        version: i16,
        req: &R,
    ) -> io::Result<ResponseKind> {
        let result = timeout(REQUEST_TIMEOUT, self.try_request(version, req)).await;
        let result = result.unwrap_or_else(|_| Err(io::Error::other("request timed out")));
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    async fn try_request<R: Request + Encodable>(
        &mut self,
        version: i16,
        req: &R,
    ) -> io::Result<ResponseKind> {
        if self.stream.is_none() {
            self.stream = Some(TcpStream::connect(broker_addr()).await?);
        }
        let stream = self.stream.as_mut().expect("connected above");
        let key = ApiKey::try_from(R::KEY).expect("a known api key");
        let correlation_id = self.next_correlation;
        self.next_correlation += 1;
        let client_id = Some(StrBytes::from_static_str(self.name));
        let frame =
            request_frame(version, correlation_id, client_id, req).expect("the request encodes");
        stream.write_all(&size_prefixed(&frame)).await?;
        stream.flush().await?;
        if thread_rng().gen_bool(self.drop_after_send) {
            return Err(io::Error::other("dropped by the client after sending"));
        }
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).await?;
        let size = i32::from_be_bytes(size);
        assert!(size > 0, "{}: response size {size}", self.name);
        let mut frame = vec![0u8; size as usize];
        stream.read_exact(&mut frame).await?;
        let mut frame = Bytes::from(frame);
        let h = ResponseHeader::decode(&mut frame, key.response_header_version(version))
            .expect("the response header decodes");
        assert_eq!(
            h.correlation_id, correlation_id,
            "{}: answers in order",
            self.name
        );
        Ok(ResponseKind::decode(key, &mut frame, version).expect("the response decodes"))
    }

    /// Sends `req` until it gets an answer, backing off between attempts.
    async fn request_until_answered<R: Request + Encodable>(
        &mut self,
        version: i16,
        req: &R,
    ) -> ResponseKind {
        let mut attempt = 0u32;
        loop {
            match self.request(version, req).await {
                Ok(response) => return response,
                Err(_) => {
                    attempt += 1;
                    backoff(attempt).await;
                }
            }
        }
    }
}

/// Kafka's retry.backoff.ms (100) doubling to 1 s, with jitter.
async fn backoff(attempt: u32) {
    let base_ms = (100u64 << attempt.min(4)).min(1000);
    let ms = base_ms * thread_rng().gen_range(80..=120) / 100;
    sleep(Duration::from_millis(ms)).await;
}

/// Milliseconds since the UNIX epoch on madsim's clock.
fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

fn batch(pid: i64, epoch: i16, seq: i32, transactional: bool, values: &[String]) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, value)| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: seq + i as i32,
            // The simulated wall clock, which the broker reads too: a
            // fixed date may lie more than message.timestamp.after.max.ms
            // (an hour) ahead of it, and such records are refused.
            timestamp: now_ms(),
            key: None,
            value: Some(Bytes::from(value.clone())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("a batch encodes");
    buf.freeze()
}

fn produce_request(
    transactional_id: Option<&str>,
    partition: i32,
    records: Bytes,
) -> ProduceRequest {
    ProduceRequest::default()
        .with_transactional_id(
            transactional_id.map(|id| TransactionalId(StrBytes::from_string(id.to_string()))),
        )
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name())
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

/// Sends one produce until it is settled; returns its error code (NONE, or a
/// duplicate, both meaning the batch is in the log once).
async fn produce_until_settled(conn: &mut Conn, req: &ProduceRequest) -> i16 {
    let mut attempt = 0u32;
    loop {
        let code = match conn.request(9, req).await {
            Ok(ResponseKind::Produce(r)) => r.responses[0].partition_responses[0].error_code,
            Ok(other) => panic!("{}: Produce answered {other:?}", conn.name),
            Err(_) => -1,
        };
        if code == NONE || code == DUPLICATE_SEQUENCE_NUMBER {
            return code;
        }
        assert!(
            code == -1 || is_retriable(code),
            "{}: produce failed with error {code}",
            conn.name
        );
        attempt += 1;
        backoff(attempt).await;
    }
}

async fn create_topic(conn: &mut Conn) {
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name())
            .with_num_partitions(PARTITIONS)
            .with_replication_factor(1)]);
    let mut attempt = 0;
    loop {
        match conn.request_until_answered(7, &req).await {
            ResponseKind::CreateTopics(r) => {
                let code = r.topics[0].error_code;
                if code == NONE || code == TOPIC_ALREADY_EXISTS {
                    return;
                }
                assert!(is_retriable(code), "CreateTopics failed with error {code}");
            }
            other => panic!("CreateTopics answered {other:?}"),
        }
        attempt += 1;
        backoff(attempt).await;
    }
}

/// InitProducerId until it succeeds: (producer id, epoch).
async fn init_producer_id(conn: &mut Conn, transactional_id: Option<&str>) -> (i64, i16) {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(
            transactional_id.map(|id| TransactionalId(StrBytes::from_string(id.to_string()))),
        )
        .with_transaction_timeout_ms(120_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let mut attempt = 0;
    loop {
        match conn.request_until_answered(4, &req).await {
            ResponseKind::InitProducerId(r) if r.error_code == NONE => {
                return (r.producer_id.0, r.producer_epoch)
            }
            ResponseKind::InitProducerId(r) => assert!(
                is_retriable(r.error_code),
                "{}: InitProducerId failed with error {}",
                conn.name,
                r.error_code
            ),
            other => panic!("InitProducerId answered {other:?}"),
        }
        attempt += 1;
        backoff(attempt).await;
    }
}

// --- the clients ----------------------------------------------------------

/// What the producers learnt, for the final check.
#[derive(Default, Debug)]
struct Outcomes {
    /// Values of acknowledged idempotent records.
    acked: BTreeSet<String>,
    /// Values of each transaction, by its outcome as the producer knows it.
    committed: Vec<Vec<String>>,
    aborted: Vec<Vec<String>>,
    unknown: Vec<Vec<String>>,
}

/// Asks the fault injector to power-cut the broker now: right after an
/// answer that promised durability is the moment that tests the promise.
type CrashNow = Arc<tokio::sync::Notify>;

async fn idempotent_producer(crash_now: CrashNow) -> Outcomes {
    let mut conn = Conn::new("idempotent", 0.05);
    create_topic(&mut conn).await;
    let (pid, epoch) = init_producer_id(&mut conn, None).await;
    let mut next_seq = [0i32; PARTITIONS as usize];
    let mut outcomes = Outcomes::default();
    for n in 0..IDEMPOTENT_BATCHES {
        let partition = thread_rng().gen_range(0..PARTITIONS);
        let count = thread_rng().gen_range(1..=4);
        let values: Vec<String> = (0..count).map(|i| format!("idem-{n}-{i}")).collect();
        let seq = next_seq[partition as usize];
        let records = batch(pid, epoch, seq, false, &values);
        let req = produce_request(None, partition, records);
        produce_until_settled(&mut conn, &req).await;
        next_seq[partition as usize] += count;
        outcomes.acked.extend(values);
        if thread_rng().gen_bool(0.03) {
            crash_now.notify_one();
        }
        sleep(Duration::from_millis(thread_rng().gen_range(0..600))).await;
    }
    outcomes
}

async fn transactional_producer(crash_now: CrashNow) -> Outcomes {
    let mut conn = Conn::new("transactional", 0.05);
    create_topic(&mut conn).await;
    let txn_id = TransactionalId(StrBytes::from_static_str(TXN_ID));
    let (mut pid, mut epoch) = init_producer_id(&mut conn, Some(TXN_ID)).await;
    let mut next_seq = [0i32; PARTITIONS as usize];
    let mut outcomes = Outcomes::default();
    for t in 0..TRANSACTIONS {
        let commit = thread_rng().gen_ratio(3, 4);
        let partitions: Vec<i32> = (0..PARTITIONS)
            .filter(|_| thread_rng().gen_bool(0.6))
            .collect();
        let partitions = if partitions.is_empty() {
            vec![0]
        } else {
            partitions
        };

        // AddPartitionsToTxn, retried until added.
        let add = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(txn_id.clone())
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(topic_name())
                .with_partitions(partitions.clone())]);
        let mut attempt = 0;
        let mut failed = None;
        loop {
            match conn.request_until_answered(3, &add).await {
                ResponseKind::AddPartitionsToTxn(r) => {
                    let codes: Vec<i16> = r.results_by_topic_v3_and_below[0]
                        .results_by_partition
                        .iter()
                        .map(|p| p.partition_error_code)
                        .collect();
                    if codes.iter().all(|&c| c == NONE) {
                        break;
                    }
                    // 53 OPERATION_NOT_ATTEMPTED comes with another error.
                    let code = codes.iter().copied().find(|&c| c != NONE && c != 53);
                    let code = code.unwrap_or(53);
                    if !is_retriable(code) {
                        failed = Some(code);
                        break;
                    }
                }
                other => panic!("AddPartitionsToTxn answered {other:?}"),
            }
            attempt += 1;
            backoff(attempt).await;
        }
        let mut values_all = Vec::new();
        if failed.is_none() {
            for &partition in &partitions {
                let count = thread_rng().gen_range(1..=3);
                let values: Vec<String> = (0..count)
                    .map(|i| format!("txn-{t}-p{partition}-{i}"))
                    .collect();
                let seq = next_seq[partition as usize];
                let records = batch(pid, epoch, seq, true, &values);
                let req = produce_request(Some(TXN_ID), partition, records);
                produce_until_settled(&mut conn, &req).await;
                next_seq[partition as usize] += count;
                values_all.extend(values);
            }
        }

        // EndTxn, retried until answered with a final result.
        let end = EndTxnRequest::default()
            .with_transactional_id(txn_id.clone())
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_committed(commit && failed.is_none());
        let mut attempt = 0;
        let code = loop {
            match conn.request_until_answered(3, &end).await {
                ResponseKind::EndTxn(r) if is_retriable(r.error_code) => {}
                ResponseKind::EndTxn(r) => break r.error_code,
                other => panic!("EndTxn answered {other:?}"),
            }
            attempt += 1;
            backoff(attempt).await;
        };
        match (code, commit && failed.is_none()) {
            (NONE, true) => {
                outcomes.committed.push(values_all);
                if thread_rng().gen_bool(0.25) {
                    crash_now.notify_one();
                }
            }
            (NONE, false) => outcomes.aborted.push(values_all),
            (code, _) => {
                // Fenced or timed out: the producer starts over with a new
                // epoch (which aborts whatever was left open).
                eprintln!(
                    "transactional: EndTxn of txn {t} failed with error {code}; re-initialising"
                );
                outcomes.unknown.push(values_all);
                (pid, epoch) = init_producer_id(&mut conn, Some(TXN_ID)).await;
                next_seq = [0; PARTITIONS as usize];
            }
        }
        sleep(Duration::from_millis(thread_rng().gen_range(0..2000))).await;
    }
    outcomes
}

/// One partition read with read_committed, as a Java consumer does: records
/// of aborted transactions are dropped using the fetch response's aborted
/// transactions and the abort markers.
struct PartitionReader {
    partition: i32,
    position: i64,
    /// Producers whose records are being skipped: an aborted transaction of
    /// theirs has started and its abort marker has not been read yet.
    aborting: BTreeSet<i64>,
    /// Aborted transactions announced but not reached: first offset -> pids.
    aborted_ahead: BTreeMap<i64, Vec<i64>>,
    announced: BTreeSet<(i64, i64)>,
}

/// What one fetch of a partition gave.
struct Fetched {
    /// (offset, value) of the records handed to the application.
    records: Vec<(i64, String)>,
    /// Read to the end, and nothing is waiting to be decided.
    at_end: bool,
}

impl PartitionReader {
    fn new(partition: i32) -> Self {
        Self {
            partition,
            position: 0,
            aborting: BTreeSet::new(),
            aborted_ahead: BTreeMap::new(),
            announced: BTreeSet::new(),
        }
    }

    /// One fetch; `None` if it failed (the caller backs off and retries).
    async fn fetch(&mut self, conn: &mut Conn) -> Option<Fetched> {
        let partition = self.partition;
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_isolation_level(1)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name())
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(self.position)
                    .with_partition_max_bytes(1 << 20)])]);
        let r = match conn.request(12, &req).await.ok()? {
            ResponseKind::Fetch(r) => r,
            other => panic!("Fetch answered {other:?}"),
        };
        let data = &r.responses[0].partitions[0];
        assert_ne!(
            data.error_code, OFFSET_OUT_OF_RANGE,
            "p{partition}: OFFSET_OUT_OF_RANGE at position {} (high watermark {}): \
             the log lost records it had already served",
            self.position, data.high_watermark
        );
        if data.error_code != NONE {
            assert!(
                is_retriable(data.error_code),
                "fetch error {}",
                data.error_code
            );
            return None;
        }
        for a in data.aborted_transactions.iter().flatten() {
            if self.announced.insert((a.producer_id.0, a.first_offset)) {
                self.aborted_ahead
                    .entry(a.first_offset)
                    .or_default()
                    .push(a.producer_id.0);
            }
        }
        let mut records = data.records.clone().unwrap_or_default();
        let mut out = Vec::new();
        if !records.is_empty() {
            let sets = RecordBatchDecoder::decode_all(&mut records).expect("records decode");
            for record in sets.into_iter().flat_map(|set| set.records) {
                if record.offset < self.position {
                    continue;
                }
                assert!(
                    record.offset < data.last_stable_offset,
                    "p{partition}: read_committed was served offset {} at or above the LSO {}",
                    record.offset,
                    data.last_stable_offset
                );
                while let Some(entry) = self.aborted_ahead.first_entry() {
                    if *entry.key() > record.offset {
                        break;
                    }
                    self.aborting.extend(entry.remove());
                }
                self.position = record.offset + 1;
                if record.control {
                    // Either marker ends the producer's transaction; only an
                    // aborted one was being skipped.
                    self.aborting.remove(&record.producer_id);
                    continue;
                }
                if record.transactional && self.aborting.contains(&record.producer_id) {
                    continue;
                }
                let value = record.value.expect("every record has a value");
                let value = String::from_utf8(value.to_vec()).expect("utf-8 values");
                out.push((record.offset, value));
            }
        }
        let at_end =
            data.last_stable_offset == data.high_watermark && self.position >= data.high_watermark;
        Some(Fetched {
            records: out,
            at_end,
        })
    }
}

/// Reads every partition to its end with read_committed: (partition,
/// offset) -> value.
async fn read_committed_all() -> BTreeMap<(i32, i64), String> {
    let mut conn = Conn::new("final-consumer", 0.0);
    let mut seen = BTreeMap::new();
    for partition in 0..PARTITIONS {
        let mut reader = PartitionReader::new(partition);
        loop {
            let Some(fetched) = reader.fetch(&mut conn).await else {
                backoff(1).await;
                continue;
            };
            let progressed = !fetched.records.is_empty();
            for (offset, value) in fetched.records {
                seen.insert((partition, offset), value);
            }
            if fetched.at_end {
                break;
            }
            if !progressed {
                // Waiting for the LSO: a transaction is still being completed.
                sleep(Duration::from_millis(200)).await;
            }
        }
    }
    seen
}

/// A read_committed consumer that tails every partition while the faults go
/// on, until `stop`. What it was served must all be in the final log, at the
/// same offsets: a consumer must never see what a crash then takes back.
async fn live_consumer(stop: Arc<AtomicBool>) -> BTreeMap<(i32, i64), String> {
    let mut conn = Conn::new("live-consumer", 0.02);
    let mut readers: Vec<PartitionReader> = (0..PARTITIONS).map(PartitionReader::new).collect();
    let mut seen = BTreeMap::new();
    while !stop.load(Ordering::SeqCst) {
        for reader in &mut readers {
            match reader.fetch(&mut conn).await {
                Some(fetched) => {
                    for (offset, value) in fetched.records {
                        seen.insert((reader.partition, offset), value);
                    }
                }
                None => backoff(1).await,
            }
        }
        sleep(Duration::from_millis(thread_rng().gen_range(50..500))).await;
    }
    seen
}

// --- faults ---------------------------------------------------------------

/// Kills and restarts the broker, clogs links and nodes, until told to stop.
/// Returns a log of what it did.
async fn chaos(
    store: Arc<SimStore>,
    clean_stop: Arc<CleanStop>,
    broker: madsim::task::NodeId,
    clients: Vec<madsim::task::NodeId>,
    stop: Arc<AtomicBool>,
    crash_now: CrashNow,
) -> Vec<String> {
    let handle = Handle::current();
    let net = NetSim::current();
    let mut log = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let pause = Duration::from_millis(thread_rng().gen_range(200..3000));
        let asked = tokio::select! {
            () = sleep(pause) => false,
            () = crash_now.notified() => true,
        };
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let now = madsim::time::Instant::now();
        if asked {
            handle.kill(broker);
            store.crash(Crash::PowerCut);
            handle.restart(broker);
            log.push(format!(
                "{now:?}: broker PowerCut right after an acknowledgement"
            ));
            continue;
        }
        match thread_rng().gen_range(0..10) {
            0..=3 => {
                let how = if thread_rng().gen_bool(0.5) {
                    Crash::PowerCut
                } else {
                    Crash::ProcessKill
                };
                handle.kill(broker);
                store.crash(how);
                let down = Duration::from_millis(thread_rng().gen_range(0..1500));
                sleep(down).await;
                handle.restart(broker);
                log.push(format!("{now:?}: broker {how:?}, down {down:?}"));
            }
            4..=5 => {
                let client = clients[thread_rng().gen_range(0..clients.len())];
                let d = Duration::from_millis(thread_rng().gen_range(100..4000));
                net.clog_link(client, broker);
                net.clog_link(broker, client);
                sleep(d).await;
                net.unclog_link(client, broker);
                net.unclog_link(broker, client);
                log.push(format!("{now:?}: link {client}<->broker clogged {d:?}"));
            }
            6 => {
                let d = Duration::from_millis(thread_rng().gen_range(100..4000));
                net.clog_node_out(broker);
                sleep(d).await;
                net.unclog_node_out(broker);
                log.push(format!("{now:?}: broker out clogged {d:?}"));
            }
            7 => {
                let d = Duration::from_millis(thread_rng().gen_range(100..4000));
                net.clog_node_in(broker);
                sleep(d).await;
                net.unclog_node_in(broker);
                log.push(format!("{now:?}: broker in clogged {d:?}"));
            }
            8 => {
                clean_stop.asked.notify_one();
                if timeout(CLEAN_STOP_WAIT, clean_stop.done.notified())
                    .await
                    .is_err()
                {
                    panic!("the broker did not stop cleanly within {CLEAN_STOP_WAIT:?}");
                }
                handle.kill(broker);
                if let Err(e) = store.stopped_cleanly() {
                    panic!("{e}");
                }
                handle.restart(broker);
                log.push(format!("{now:?}: broker stopped cleanly and restarted"));
            }
            _ => {} // a quiet spell
        }
    }
    log
}

// --- the test ---------------------------------------------------------------

#[madsim::test]
async fn kills_clogs_and_drops_keep_every_acknowledged_record_once() {
    let handle = Handle::current();
    let seed = handle.seed();
    // One hook for every seed of the run; it names the seed that failed.
    static SEED: AtomicU64 = AtomicU64::new(0);
    static HOOK: Once = Once::new();
    SEED.store(seed, Ordering::SeqCst);
    HOOK.call_once(|| {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            hook(info);
            let seed = SEED.load(Ordering::SeqCst);
            eprintln!(
                "\nmadsim_cluster failed; replay with:\n  {}\n",
                replay_command(seed)
            );
        }));
    });

    // A slow disk: syncs and meta writes long enough that kills often land
    // while one is in flight, so that power cuts lose unsynced bytes.
    let store = SimStore::new(Latency {
        sync_us: (500, 150_000),
        meta_us: (500, 100_000),
        read_us: (10, 20_000),
    });
    let broker_store = Arc::clone(&store);
    let clean_stop = Arc::new(CleanStop::default());
    let broker_stop = Arc::clone(&clean_stop);
    let broker = handle
        .create_node()
        .name("broker")
        .ip(BROKER_IP.parse().unwrap())
        .init(move || run_broker(Arc::clone(&broker_store), Arc::clone(&broker_stop)))
        .build();
    let idem_node = handle
        .create_node()
        .name("idempotent")
        .ip("10.0.0.2".parse().unwrap())
        .build();
    let txn_node = handle
        .create_node()
        .name("transactional")
        .ip("10.0.0.3".parse().unwrap())
        .build();
    let consumer_node = handle
        .create_node()
        .name("consumer")
        .ip("10.0.0.4".parse().unwrap())
        .build();

    let stop = Arc::new(AtomicBool::new(false));
    let crash_now = CrashNow::default();
    let chaos_task = handle.create_node().name("chaos").build().spawn(chaos(
        Arc::clone(&store),
        clean_stop,
        broker.id(),
        vec![idem_node.id(), txn_node.id(), consumer_node.id()],
        Arc::clone(&stop),
        Arc::clone(&crash_now),
    ));
    let live = consumer_node.spawn(live_consumer(Arc::clone(&stop)));
    let idem = idem_node.spawn(timeout(
        CLIENT_DEADLINE,
        idempotent_producer(Arc::clone(&crash_now)),
    ));
    let txn = txn_node.spawn(timeout(
        CLIENT_DEADLINE,
        transactional_producer(Arc::clone(&crash_now)),
    ));
    let idem = idem
        .await
        .unwrap()
        .expect("the idempotent producer finishes in time");
    let txn = txn
        .await
        .unwrap()
        .expect("the transactional producer finishes in time");
    stop.store(true, Ordering::SeqCst);
    let chaos_log = chaos_task.await.unwrap();
    let live_seen = live.await.unwrap();

    // One more crash after the producers are done: what they were told is
    // durable must survive it.
    handle.kill(broker.id());
    store.crash(Crash::PowerCut);
    handle.restart(broker.id());

    let seen = consumer_node
        .spawn(timeout(CLIENT_DEADLINE, read_committed_all()))
        .await
        .unwrap()
        .expect("the final read_committed consumer reaches the end (a stuck LSO never does)");

    let mut count: HashMap<&str, usize> = HashMap::new();
    for v in seen.values() {
        *count.entry(v.as_str()).or_default() += 1;
    }
    let summary = format!(
        "seed {seed}: {} faults, {} records read live, {} acked idempotent records, {} committed / {} aborted / {} unknown transactions, {} records read; store: {}",
        chaos_log.len(),
        live_seen.len(),
        idem.acked.len(),
        txn.committed.len(),
        txn.aborted.len(),
        txn.unknown.len(),
        count.values().sum::<usize>(),
        store.stats()
    );
    eprintln!("{summary}");
    let fail = |what: String| -> ! {
        for line in &chaos_log {
            eprintln!("  fault {line}");
        }
        panic!("{what}\n{summary}");
    };
    for v in &idem.acked {
        match count.get(v.as_str()) {
            Some(1) => {}
            Some(n) => fail(format!("acknowledged record {v} read {n} times")),
            None => fail(format!("acknowledged record {v} is missing")),
        }
    }
    for txn_values in &txn.committed {
        for v in txn_values {
            match count.get(v.as_str()) {
                Some(1) => {}
                Some(n) => fail(format!("committed record {v} read {n} times")),
                None => fail(format!("committed record {v} is missing")),
            }
        }
    }
    for txn_values in &txn.aborted {
        for v in txn_values {
            if count.contains_key(v.as_str()) {
                fail(format!("record {v} of an aborted transaction is visible"));
            }
        }
    }
    for txn_values in &txn.unknown {
        let visible = txn_values
            .iter()
            .filter(|v| count.contains_key(v.as_str()))
            .count();
        if visible != 0 && visible != txn_values.len() {
            fail(format!(
                "a transaction is partly visible: {visible} of {txn_values:?}"
            ));
        }
        if txn_values
            .iter()
            .any(|v| count.get(v.as_str()).is_some_and(|&n| n > 1))
        {
            fail(format!("a record of {txn_values:?} is read more than once"));
        }
    }
    for (&(partition, offset), value) in &live_seen {
        match seen.get(&(partition, offset)) {
            Some(v) if v == value => {}
            other => fail(format!(
                "the live consumer read {value} at p{partition} offset {offset}; the final log has {other:?}"
            )),
        }
        let aborted = txn.aborted.iter().flatten().any(|v| v == value);
        if aborted {
            fail(format!(
                "the live consumer read {value} of an aborted transaction"
            ));
        }
    }
    // A clean stop checkpoints every partition: the start after it reads
    // the index files, not the log.
    let clean_reads = store.clean_start_log_bytes_read();
    if clean_reads != 0 {
        fail(format!(
            "starts after a clean stop read {clean_reads} bytes of .log files"
        ));
    }
    let expected: usize = idem.acked.len() + txn.committed.iter().map(Vec::len).sum::<usize>();
    let unknown_seen: usize = txn
        .unknown
        .iter()
        .flatten()
        .filter(|v| count.contains_key(v.as_str()))
        .count();
    let total: usize = count.values().sum();
    if total != expected + unknown_seen {
        fail(format!(
            "read {total} records, expected {expected} (+{unknown_seen} of unknown outcome)"
        ));
    }
}
