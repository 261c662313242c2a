//! `doze-bench`: a small load generator for `make bench` (bench/bench.py),
//! for the figures a Python client cannot drive on a small machine. It speaks
//! the Kafka protocol with kafka-protocol's real structs, one connection per
//! producer, one request at a time per connection (as a client that waits for
//! each step), and prints one JSON line of results.
//!
//! - `txn`: N transactional producers, each looping AddPartitionsToTxn,
//!   Produce (acks=all, one batch of `records` records), EndTxn(commit).
//!   Reports commits in the measured window and EndTxn request→response
//!   latency percentiles, and the p50 of a bare request's round trip
//!   (ApiVersions, before the transactions start).
//! - `produce`: N connections, each writing its own partition with acks=all,
//!   `inflight` requests pipelined, each one pre-encoded batch of 1 KiB
//!   records; reports acknowledged bytes in the window (the broker's side of
//!   the produce path without a client's per-record CPU). With `--count N`
//!   a fixed load instead of a window: N records in all (whole batches,
//!   split over the connections), every one acknowledged, then it stops
//!   (`make bench`'s callgrind figure needs the same work on every run).
//! - `latency`: N connections, each writing its own partition with acks=all
//!   at a fixed pace, `--rate` records/s over them all: every `--linger-ms`
//!   a connection sends one batch of the records that came due meanwhile
//!   (as a client lingering that long would), up to `inflight` requests
//!   outstanding. Reports each batch's latency from the moment it was due
//!   (the end of its linger) to its acknowledgement, p50/p99, over the
//!   batches due in the measured window: the broker's latency at a given
//!   load, without a client's per-record CPU on a small machine.
//! - `fetch`: reads every partition of a topic from offset 0 to its end
//!   (`--isolation 0` read_uncommitted, `1` read_committed) with Fetch v12,
//!   one connection, without decoding records; reports log bytes per second.
//!
//! Not built for the simulator (`--cfg madsim`): it is a real-network tool.

#[cfg(madsim)]
fn main() {}

#[cfg(not(madsim))]
fn main() -> anyhow::Result<()> {
    real::main()
}

#[cfg(not(madsim))]
mod real {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use anyhow::{anyhow, bail, Context};
    use bytes::{Bytes, BytesMut};
    use clap::Parser;
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, ApiKey, ApiVersionsRequest, BrokerId, EndTxnRequest,
        FetchRequest, FindCoordinatorRequest, InitProducerIdRequest, ProduceRequest, ProducerId,
        RequestHeader, ResponseHeader, ResponseKind, TopicName, TransactionalId,
    };
    use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
    use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
    use tokio::net::TcpStream;

    /// Kafka's retriable answers a transactional client backs off on.
    const CONCURRENT_TRANSACTIONS: i16 = 51;
    const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    /// Kafka just started: its transaction state topic is still being
    /// created, and the one broker is not its coordinator yet. A client
    /// looks the coordinator up again; here it is the same broker, retried.
    const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    const NOT_COORDINATOR: i16 = 16;
    const NOT_ENOUGH_REPLICAS: i16 = 19;
    /// A partition not served yet (Kafka, just after CreateTopics): retried.
    const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    const LEADER_NOT_AVAILABLE: i16 = 5;
    const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    const RETRY_BACKOFF: Duration = Duration::from_millis(5);
    /// A fetch asks for 64 MiB of records; the frame adds headers around them.
    const RESPONSE_BYTES_MAX: usize = 65 * 1024 * 1024;

    #[derive(Parser)]
    struct Args {
        /// txn | produce | latency | fetch
        mode: String,
        #[arg(long)]
        bootstrap: String,
        #[arg(long)]
        topic: String,
        /// Partitions of the topic; producer k writes partition k mod this.
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        #[arg(long, default_value_t = 1)]
        producers: usize,
        #[arg(long, default_value_t = 10)]
        records: usize,
        #[arg(long, default_value_t = 1024)]
        record_bytes: usize,
        /// produce: records per batch (one batch per request; 1000 x 1 KiB
        /// stays under the broker's 1 MiB batch limit).
        #[arg(long, default_value_t = 1000)]
        batch_records: usize,
        /// produce: requests in flight per connection.
        #[arg(long, default_value_t = 4)]
        inflight: usize,
        #[arg(long, default_value_t = 2.0)]
        warmup_s: f64,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        #[arg(long, default_value = "doze-bench")]
        id_prefix: String,
        /// fetch: 0 read_uncommitted, 1 read_committed.
        #[arg(long, default_value_t = 0)]
        isolation: i8,
        /// fetch: read the whole topic this many times (the figure covers all).
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// produce: a fixed load of this many records in all (rounded up to
        /// whole batches per connection) instead of the timed window; 0: timed.
        #[arg(long, default_value_t = 0)]
        count: usize,
        /// fetch: the requests' max_wait_ms (with min_bytes 1 a broker that
        /// has records answers at once; Tansu answers max_wait_ms 0 with an
        /// empty response, so `make bench`'s peers use more).
        #[arg(long, default_value_t = 0)]
        max_wait_ms: i32,
        /// latency: records per second over all connections.
        #[arg(long, default_value_t = 0.0)]
        rate: f64,
        /// latency: each connection sends what came due every this often.
        #[arg(long, default_value_t = 5.0)]
        linger_ms: f64,
    }

    pub fn main() -> anyhow::Result<()> {
        let args = Args::parse();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            match args.mode.as_str() {
                "txn" => txn(args).await,
                "produce" => produce(args).await,
                "fetch" => fetch(args).await,
                "latency" => latency(args).await,
                other => bail!("unknown mode {other:?} (txn | produce | latency | fetch)"),
            }
        })
    }

    /// One connection, one request at a time on the read side.
    struct Conn {
        reader: BufReader<OwnedReadHalf>,
        writer: OwnedWriteHalf,
        next_correlation: i32,
        /// Responses are read into this one buffer, reused once the last
        /// response is dropped. Why: a fresh 64 MiB buffer per Fetch answer
        /// (`vec![0; len]`, mmap'd by glibc) faulted in and zeroed every
        /// page as the answer arrived: perf gave 57% of the loader's time to
        /// `clear_page` while reading a cold 4 GiB topic, where it set the
        /// pace, at half the raw disk's (the broker sat idle, its sendfile
        /// waiting on a full socket). `make bench` measures brokers, not
        /// the loader's page faults.
        rx: BytesMut,
    }

    impl Conn {
        async fn connect(addr: &str) -> anyhow::Result<Self> {
            let stream = TcpStream::connect(addr)
                .await
                .with_context(|| format!("connect {addr}"))?;
            stream.set_nodelay(true)?;
            let (r, w) = stream.into_split();
            Ok(Self {
                reader: BufReader::with_capacity(256 * 1024, r),
                writer: w,
                next_correlation: 1,
                rx: BytesMut::new(),
            })
        }

        async fn send<R: Request + Encodable>(
            &mut self,
            version: i16,
            req: &R,
        ) -> anyhow::Result<()> {
            let frame = encode_request(self.next_correlation, version, req)?;
            self.next_correlation += 1;
            self.writer.write_all(&frame).await?;
            Ok(())
        }

        async fn recv(&mut self, key: ApiKey, version: i16) -> anyhow::Result<ResponseKind> {
            let len = self.reader.read_u32().await? as usize;
            let mut frame = read_reused(&mut self.reader, &mut self.rx, len).await?;
            ResponseHeader::decode(&mut frame, key.response_header_version(version))?;
            ResponseKind::decode(key, &mut frame, version)
        }

        async fn call<R: Request + Encodable>(
            &mut self,
            version: i16,
            req: &R,
        ) -> anyhow::Result<ResponseKind> {
            self.send(version, req).await?;
            let key = ApiKey::try_from(R::KEY).map_err(|_| anyhow!("unknown key"))?;
            self.recv(key, version).await
        }
    }

    /// The next `len` bytes of `reader`, read into `rx`'s spare capacity (not
    /// zeroed first). `reserve` takes `rx`'s whole allocation back when every
    /// `Bytes` cut from it before has been dropped, so a loop that drops each
    /// answer before reading the next reads them all into the same pages.
    async fn read_reused(
        reader: &mut BufReader<OwnedReadHalf>,
        rx: &mut BytesMut,
        len: usize,
    ) -> anyhow::Result<Bytes> {
        if len > RESPONSE_BYTES_MAX {
            bail!("response of {len} bytes");
        }
        rx.clear();
        rx.reserve(len);
        let mut rest = reader.take(len as u64);
        while rx.len() < len {
            if rest.read_buf(rx).await? == 0 {
                bail!("connection closed inside a response");
            }
        }
        Ok(rx.split_to(len).freeze())
    }

    /// A request frame, size prefix included.
    fn encode_request<R: Request + Encodable>(
        correlation_id: i32,
        version: i16,
        req: &R,
    ) -> anyhow::Result<Bytes> {
        let key = ApiKey::try_from(R::KEY).map_err(|_| anyhow!("unknown key"))?;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("doze-bench")));
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[0; 4]);
        header.encode(&mut buf, key.request_header_version(version))?;
        req.encode(&mut buf, version)?;
        let len = (buf.len() - 4) as u32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        Ok(buf.freeze())
    }

    fn batch(args: &Args, count: usize, pid: i64, epoch: i16, seq: i32, txn: bool) -> Bytes {
        let value = Bytes::from(vec![b'x'; args.record_bytes]);
        // Stamped now, as a client stamps CreateTime: a timestamp of 0 is
        // older than any broker's retention.ms, and Kafka's first retention
        // check (30 s after its start) deleted a bench topic filled so while
        // it was being read (Fetch OFFSET_OUT_OF_RANGE at offset 0).
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let records: Vec<Record> = (0..count)
            .map(|i| Record {
                transactional: txn,
                control: false,
                partition_leader_epoch: -1,
                producer_id: pid,
                producer_epoch: epoch,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                // The encoder keeps one batch while offset - sequence is constant;
                // a plain producer's base sequence stays -1 in the header.
                sequence: seq.wrapping_add(i as i32),
                timestamp: now_ms,
                key: None,
                value: Some(value.clone()),
                headers: Default::default(),
                delete_horizon: false,
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
        topic: &str,
        partition: i32,
        records: Bytes,
        txn_id: Option<&str>,
    ) -> ProduceRequest {
        let data = PartitionProduceData::default()
            .with_index(partition)
            .with_records(Some(records));
        let topic = TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![data]);
        ProduceRequest::default()
            .with_transactional_id(txn_id.map(|t| TransactionalId(StrBytes::from_string(t.into()))))
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![topic])
    }

    fn produce_error(r: &ResponseKind) -> i16 {
        match r {
            ResponseKind::Produce(p) => p
                .responses
                .iter()
                .flat_map(|t| t.partition_responses.iter())
                .map(|p| p.error_code)
                .find(|&c| c != 0)
                .unwrap_or(0),
            _ => -1,
        }
    }

    #[derive(Default)]
    struct TxnStats {
        commits: u64,
        endtxn_us: Vec<u64>,
        produce_us: Vec<u64>,
        cycle_us: Vec<u64>,
        retries: u64,
    }

    async fn txn(args: Args) -> anyhow::Result<()> {
        let args = Arc::new(args);
        let stats = Arc::new(Mutex::new(TxnStats::default()));
        // Every producer is set up before the clock starts; retried answers
        // end in an error after a minute, not a loop without end.
        let setup_deadline = Instant::now() + Duration::from_secs(60);
        let mut conns = Vec::new();
        for k in 0..args.producers {
            let id = format!("{}-{k}", args.id_prefix);
            let mut conn = Conn::connect(&args.bootstrap).await?;
            let (pid, epoch) = loop {
                let req = InitProducerIdRequest::default()
                    .with_transactional_id(Some(TransactionalId(StrBytes::from_string(id.clone()))))
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1);
                match conn.call(4, &req).await? {
                    ResponseKind::InitProducerId(r) if r.error_code == 0 => {
                        break (r.producer_id.0, r.producer_epoch)
                    }
                    ResponseKind::InitProducerId(r)
                        if matches!(
                            r.error_code,
                            CONCURRENT_TRANSACTIONS
                                | COORDINATOR_LOAD_IN_PROGRESS
                                | COORDINATOR_NOT_AVAILABLE
                                | NOT_COORDINATOR
                        ) && Instant::now() < setup_deadline =>
                    {
                        if matches!(r.error_code, COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR) {
                            // Kafka creates its transaction state topic when
                            // a client looks for a coordinator, not on
                            // InitProducerId: ask, as a client does.
                            let find = FindCoordinatorRequest::default()
                                .with_key(StrBytes::from_string(id.clone()))
                                .with_key_type(1);
                            conn.call(3, &find).await?;
                        }
                        tokio::time::sleep(RETRY_BACKOFF).await
                    }
                    other => bail!("InitProducerId: {other:?}"),
                }
            };
            conns.push((k, id, conn, pid, epoch));
        }
        let rtt_p50_us = round_trip_p50_us(&args.bootstrap).await;
        let start = Instant::now();
        let window = (
            start + Duration::from_secs_f64(args.warmup_s),
            start + Duration::from_secs_f64(args.warmup_s + args.seconds),
        );
        let mut tasks = Vec::new();
        for (k, id, mut conn, pid, epoch) in conns {
            let args = Arc::clone(&args);
            let stats = Arc::clone(&stats);
            tasks.push(tokio::spawn(async move {
                let partition = k as i32 % args.partitions;
                let topic = TopicName(StrBytes::from_string(args.topic.clone()));
                let tid = TransactionalId(StrBytes::from_string(id.clone()));
                let mut seq = 0i32;
                let mut local = TxnStats::default();
                while Instant::now() < window.1 {
                    let t0 = Instant::now();
                    let add = AddPartitionsToTxnRequest::default()
                        .with_v3_and_below_transactional_id(tid.clone())
                        .with_v3_and_below_producer_id(ProducerId(pid))
                        .with_v3_and_below_producer_epoch(epoch)
                        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                            .with_name(topic.clone())
                            .with_partitions(vec![partition])]);
                    loop {
                        let code = match conn.call(3, &add).await? {
                            ResponseKind::AddPartitionsToTxn(r) => r
                                .results_by_topic_v3_and_below
                                .iter()
                                .flat_map(|t| t.results_by_partition.iter())
                                .map(|p| p.partition_error_code)
                                .find(|&c| c != 0)
                                .unwrap_or(0),
                            other => bail!("AddPartitionsToTxn: {other:?}"),
                        };
                        match code {
                            0 => break,
                            CONCURRENT_TRANSACTIONS => {
                                local.retries += 1;
                                tokio::time::sleep(RETRY_BACKOFF).await
                            }
                            c => bail!("AddPartitionsToTxn error {c}"),
                        }
                    }
                    let records = batch(&args, args.records, pid, epoch, seq, true);
                    let req = produce_request(&args.topic, partition, records, Some(&id));
                    loop {
                        match produce_error(&conn.call(9, &req).await?) {
                            0 => break,
                            NOT_ENOUGH_REPLICAS => {
                                local.retries += 1;
                                tokio::time::sleep(RETRY_BACKOFF).await
                            }
                            c => bail!("Produce error {c}"),
                        }
                    }
                    seq += args.records as i32;
                    let t1 = Instant::now();
                    let end = EndTxnRequest::default()
                        .with_transactional_id(tid.clone())
                        .with_producer_id(ProducerId(pid))
                        .with_producer_epoch(epoch)
                        .with_committed(true);
                    match conn.call(3, &end).await? {
                        ResponseKind::EndTxn(r) if r.error_code == 0 => {}
                        other => bail!("EndTxn: {other:?}"),
                    }
                    let t2 = Instant::now();
                    if t2 >= window.0 && t2 <= window.1 {
                        local.commits += 1;
                        local.endtxn_us.push((t2 - t1).as_micros() as u64);
                        local.produce_us.push((t1 - t0).as_micros() as u64);
                        local.cycle_us.push((t2 - t0).as_micros() as u64);
                    }
                }
                let mut s = stats.lock().unwrap();
                s.commits += local.commits;
                s.retries += local.retries;
                s.endtxn_us.extend(local.endtxn_us);
                s.produce_us.extend(local.produce_us);
                s.cycle_us.extend(local.cycle_us);
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        let mut s = stats.lock().unwrap();
        let (p50, p99) = percentiles(&mut s.endtxn_us);
        let (prod50, _) = percentiles(&mut s.produce_us);
        let (cyc50, _) = percentiles(&mut s.cycle_us);
        println!(
            "{{\"producers\": {}, \"commits\": {}, \"seconds\": {}, \"rate\": {:.1}, \
             \"endtxn_p50_us\": {p50}, \"endtxn_p99_us\": {p99}, \"add_produce_p50_us\": {prod50}, \
             \"cycle_p50_us\": {cyc50}, \"retries\": {}, \"rtt_p50_us\": {rtt_p50_us}}}",
            args.producers,
            s.commits,
            args.seconds,
            s.commits as f64 / args.seconds,
            s.retries
        );
        Ok(())
    }

    /// Round trips measured before the transactions start.
    const ROUND_TRIPS: usize = 500;

    /// The p50 of a bare request's round trip (ApiVersions v0, on a
    /// connection of its own), in µs; 0 when the broker did not answer.
    /// Why: an EndTxn waits for this too, besides its two durable steps, so
    /// `make bench` can tell what part of one commit's time no storage
    /// change can remove (on doze the request goes through the broker task,
    /// as every request does).
    async fn round_trip_p50_us(bootstrap: &str) -> u64 {
        let probe = async {
            let mut conn = Conn::connect(bootstrap).await?;
            let mut us = Vec::with_capacity(ROUND_TRIPS);
            for _ in 0..ROUND_TRIPS {
                let t0 = Instant::now();
                match conn.call(0, &ApiVersionsRequest::default()).await? {
                    ResponseKind::ApiVersions(r) if r.error_code == 0 => {}
                    other => bail!("ApiVersions: {other:?}"),
                }
                us.push(t0.elapsed().as_micros() as u64);
            }
            anyhow::Ok(percentiles(&mut us).0)
        };
        tokio::time::timeout(Duration::from_secs(30), probe)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(0)
    }

    fn percentiles(v: &mut [u64]) -> (u64, u64) {
        if v.is_empty() {
            return (0, 0);
        }
        v.sort_unstable();
        let at = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        (at(0.50), at(0.99))
    }

    async fn produce(args: Args) -> anyhow::Result<()> {
        let args = Arc::new(args);
        let acked = Arc::new(AtomicU64::new(0));
        let retries = Arc::new(AtomicU64::new(0));
        let records = batch(&args, args.batch_records, -1, -1, -1, false);
        let value_bytes = (args.batch_records * args.record_bytes) as u64;
        // --count: requests per connection, every one counted; else unbounded
        // within the timed window.
        let quota = if args.count > 0 {
            let per_conn = args.count.div_ceil(args.producers.max(1));
            per_conn.div_ceil(args.batch_records.max(1))
        } else {
            usize::MAX
        };
        let start = Instant::now();
        let window = if args.count > 0 {
            (start, start + Duration::from_secs(24 * 3600))
        } else {
            (
                start + Duration::from_secs_f64(args.warmup_s),
                start + Duration::from_secs_f64(args.warmup_s + args.seconds),
            )
        };
        let mut tasks = Vec::new();
        for k in 0..args.producers {
            let args = Arc::clone(&args);
            let acked = Arc::clone(&acked);
            let retries = Arc::clone(&retries);
            let records = records.clone();
            tasks.push(tokio::spawn(async move {
                let (mut reader, mut writer, mut rx, frame) =
                    producer_conn(&args, k, records).await?;
                // Pipelined: `inflight` requests outstanding, answers in order.
                // A request refused with a retriable error is sent again (it
                // counts toward --count only once acknowledged).
                let mut sent = 0usize;
                let mut answered = 0usize;
                let mut done = 0usize;
                while (Instant::now() < window.1 && done < quota) || answered < sent {
                    while sent - answered < args.inflight
                        && done + (sent - answered) < quota
                        && Instant::now() < window.1
                    {
                        writer.write_all(&frame).await?;
                        sent += 1;
                    }
                    let (code, r) = produce_answer(&mut reader, &mut rx).await?;
                    answered += 1;
                    match code {
                        0 => done += 1,
                        UNKNOWN_TOPIC_OR_PARTITION
                        | LEADER_NOT_AVAILABLE
                        | NOT_LEADER_OR_FOLLOWER
                        | NOT_ENOUGH_REPLICAS => {
                            retries.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(RETRY_BACKOFF).await;
                            continue;
                        }
                        c => bail!("Produce error {c}: {r:?}"),
                    }
                    let now = Instant::now();
                    if now >= window.0 && now <= window.1 {
                        acked.fetch_add(value_bytes, Ordering::Relaxed);
                    }
                }
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        let bytes = acked.load(Ordering::Relaxed);
        let seconds = if args.count > 0 {
            start.elapsed().as_secs_f64()
        } else {
            args.seconds
        };
        println!(
            "{{\"producers\": {}, \"acked_bytes\": {bytes}, \"records\": {}, \"seconds\": {seconds:.3}, \"mbps\": {:.1}, \"retries\": {}}}",
            args.producers,
            bytes / args.record_bytes.max(1) as u64,
            bytes as f64 / seconds / 1e6,
            retries.load(Ordering::Relaxed)
        );
        Ok(())
    }

    /// Producer `k`'s connection (its reader, writer and answer buffer), and
    /// its one Produce v9 frame (`records` to partition k mod --partitions),
    /// encoded once: the client spends next to no CPU.
    async fn producer_conn(
        args: &Args,
        k: usize,
        records: Bytes,
    ) -> anyhow::Result<(BufReader<OwnedReadHalf>, OwnedWriteHalf, BytesMut, Bytes)> {
        let req = produce_request(&args.topic, k as i32 % args.partitions, records, None);
        let Conn {
            reader, writer, rx, ..
        } = Conn::connect(&args.bootstrap).await?;
        Ok((reader, writer, rx, encode_request(1, 9, &req)?))
    }

    /// The next Produce v9 answer on `reader`: its error code, and itself.
    async fn produce_answer(
        reader: &mut BufReader<OwnedReadHalf>,
        rx: &mut BytesMut,
    ) -> anyhow::Result<(i16, ResponseKind)> {
        let len = reader.read_u32().await? as usize;
        let mut frame = read_reused(reader, rx, len).await?;
        ResponseHeader::decode(&mut frame, ApiKey::Produce.response_header_version(9))?;
        let r = ResponseKind::decode(ApiKey::Produce, &mut frame, 9)?;
        Ok((produce_error(&r), r))
    }

    async fn latency(args: Args) -> anyhow::Result<()> {
        if !(args.rate > 0.0 && args.linger_ms > 0.0) {
            bail!("latency needs --rate > 0 and --linger-ms > 0");
        }
        let args = Arc::new(args);
        let producers = args.producers.max(1);
        let per_conn = args.rate / producers as f64;
        // Each request carries what one linger gathers; the pace is kept by
        // the interval between them, so the rate holds for any rounding.
        let batch_records = ((per_conn * args.linger_ms / 1e3).round() as usize).max(1);
        let interval = Duration::from_secs_f64(batch_records as f64 / per_conn);
        let records = batch(&args, batch_records, -1, -1, -1, false);
        let start = Instant::now() + Duration::from_millis(100);
        let window = (
            start + Duration::from_secs_f64(args.warmup_s),
            start + Duration::from_secs_f64(args.warmup_s + args.seconds),
        );
        let samples = Arc::new(Mutex::new(Vec::<u64>::new()));
        let acked = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for k in 0..producers {
            let args = Arc::clone(&args);
            let samples = Arc::clone(&samples);
            let acked = Arc::clone(&acked);
            let records = records.clone();
            tasks.push(tokio::spawn(async move {
                let (mut reader, mut writer, mut rx, frame) =
                    producer_conn(&args, k, records).await?;
                // The connections start spread over one interval, not together.
                let first = start + interval.mul_f64(k as f64 / producers as f64);
                let mut tick = tokio::time::interval_at(first.into(), interval);
                // Late ticks are sent at once, back to back: their latency
                // counts from when they were due, as a client's queue would.
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                let slots = Arc::new(tokio::sync::Semaphore::new(args.inflight.max(1)));
                let (due_tx, mut due_rx) = tokio::sync::mpsc::unbounded_channel();
                let sender = tokio::spawn(async move {
                    loop {
                        let due = tick.tick().await.into_std();
                        if due >= window.1 {
                            break;
                        }
                        let slot = slots.clone().acquire_owned().await?;
                        writer.write_all(&frame).await?;
                        if due_tx.send((due, slot)).is_err() {
                            break;
                        }
                    }
                    // Kept until every answer is read: dropping the write
                    // half shuts the socket's sending side, and a broker
                    // may close a connection at its end of input.
                    anyhow::Ok(writer)
                });
                let mut mine = Vec::new();
                while let Some((due, slot)) = due_rx.recv().await {
                    let (code, r) = produce_answer(&mut reader, &mut rx).await?;
                    drop(slot);
                    if code != 0 {
                        bail!("Produce error {code}: {r:?}");
                    }
                    if due >= window.0 && due < window.1 {
                        mine.push(due.elapsed().as_micros() as u64);
                        acked.fetch_add(batch_records as u64, Ordering::Relaxed);
                    }
                }
                let writer = sender.await??;
                drop(writer);
                samples
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(mine);
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        let mut v = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
        let (p50, p99) = percentiles(&mut v);
        println!(
            "{{\"producers\": {producers}, \"rate\": {:.1}, \"acked_rate\": {:.1}, \"batch_records\": {batch_records}, \"requests\": {}, \"p50_us\": {p50}, \"p99_us\": {p99}, \"seconds\": {}}}",
            args.rate,
            acked.load(Ordering::Relaxed) as f64 / args.seconds,
            v.len(),
            args.seconds
        );
        Ok(())
    }

    /// The offset after the last whole batch in `records` (RecordBatch v2:
    /// base offset at 0, length at 8, last offset delta at 23), if any.
    fn next_offset(records: &[u8]) -> Option<i64> {
        let mut pos = 0;
        let mut next = None;
        while pos + 27 <= records.len() {
            let base = i64::from_be_bytes(records[pos..pos + 8].try_into().unwrap());
            let len = i32::from_be_bytes(records[pos + 8..pos + 12].try_into().unwrap()) as usize;
            if pos + 12 + len > records.len() {
                break;
            }
            let delta = i32::from_be_bytes(records[pos + 23..pos + 27].try_into().unwrap());
            next = Some(base + delta as i64 + 1);
            pos += 12 + len;
        }
        next
    }

    async fn fetch(args: Args) -> anyhow::Result<()> {
        let mut conn = Conn::connect(&args.bootstrap).await?;
        let topic = TopicName(StrBytes::from_string(args.topic.clone()));
        let mut bytes = 0u64;
        let mut fetches = 0u64;
        // Answers in a row that moved no partition forward: a broker that
        // answers without records below the end would loop to the deadline.
        let mut stalled = 0u32;
        let start = Instant::now();
        // Connecting and the first answer: what a read pays before its
        // first bytes, beside the whole.
        let mut first_s = 0f64;
        let deadline = start + Duration::from_secs_f64(args.seconds);
        for _ in 0..args.repeat {
            let mut offsets = vec![0i64; args.partitions as usize];
            let mut done = vec![false; args.partitions as usize];
            while done.iter().any(|d| !d) {
                if Instant::now() > deadline {
                    bail!("fetch did not reach the end within {} s", args.seconds);
                }
                let partitions = (0..args.partitions)
                    .filter(|&p| !done[p as usize])
                    .map(|p| {
                        FetchPartition::default()
                            .with_partition(p)
                            .with_current_leader_epoch(-1)
                            .with_fetch_offset(offsets[p as usize])
                            .with_log_start_offset(-1)
                            .with_partition_max_bytes(16 * 1024 * 1024)
                    })
                    .collect();
                let req = FetchRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_max_wait_ms(args.max_wait_ms)
                    .with_min_bytes(1)
                    .with_max_bytes(64 * 1024 * 1024)
                    .with_isolation_level(args.isolation)
                    .with_session_id(0)
                    .with_session_epoch(-1)
                    .with_topics(vec![FetchTopic::default()
                        .with_topic(topic.clone())
                        .with_partitions(partitions)]);
                let ResponseKind::Fetch(r) = conn.call(12, &req).await? else {
                    bail!("not a Fetch answer");
                };
                fetches += 1;
                if fetches == 1 {
                    first_s = start.elapsed().as_secs_f64();
                }
                let before = (offsets.clone(), done.clone());
                for t in &r.responses {
                    for p in &t.partitions {
                        if p.error_code != 0 {
                            bail!(
                                "Fetch error {} on partition {}",
                                p.error_code,
                                p.partition_index
                            );
                        }
                        let i = p.partition_index as usize;
                        let end = if args.isolation == 1 {
                            p.last_stable_offset
                        } else {
                            p.high_watermark
                        };
                        if let Some(records) = &p.records {
                            bytes += records.len() as u64;
                            if let Some(next) = next_offset(records) {
                                offsets[i] = next;
                            }
                        }
                        if offsets[i] >= end {
                            done[i] = true;
                        }
                    }
                }
                if (offsets.clone(), done.clone()) == before {
                    stalled += 1;
                    if stalled >= 100 {
                        bail!(
                            "{stalled} Fetch answers in a row moved no partition forward \
                             (offsets {offsets:?}; the last answered {} topic(s); \
                             max_wait_ms {})",
                            r.responses.len(),
                            args.max_wait_ms
                        );
                    }
                } else {
                    stalled = 0;
                }
            }
        }
        let elapsed = start.elapsed().as_secs_f64();
        println!(
            "{{\"isolation\": {}, \"bytes\": {bytes}, \"fetches\": {fetches}, \"seconds\": {elapsed:.3}, \"first_s\": {first_s:.3}, \"mbps\": {:.1}}}",
            args.isolation,
            bytes as f64 / elapsed / 1e6
        );
        Ok(())
    }
}
