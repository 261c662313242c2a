//! A hand-driven world for core tests: a clock the test moves, the
//! simulator's disk (doze-simdisk's `SimDisk`: durable prefixes, directory
//! entries, renames and removals a power cut undoes), meta.db as a map, and
//! a client that speaks the Kafka protocol through kafka-protocol's real
//! codecs.
#![allow(dead_code)]

pub mod authz;
pub mod groups;
pub mod requests;
pub mod txn;

use std::collections::{BTreeMap, VecDeque};

use bytes::{Bytes, BytesMut};
use doze_core::log::clean::work::{CleanerFiles, CleanerOutcome, CleanerWork};
use doze_core::{
    Broker, BrokerConfig, ConnId, DiskOp, FileRange, FileStage, FramePart, Input, IoError, IoId,
    MetaOp, Output, PartitionDir, SegmentFile, SyncScope,
};
use doze_simdisk::disk::{live_key, SimDisk, SimFile};
use kafka_protocol::messages::{ApiKey, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use rand::rngs::ChaCha8Rng;
use rand::SeedableRng;

/// A live segment file's name: partition, segment base, kind.
pub type LiveKey = (PartitionDir, i64, SegmentFile);

pub struct World {
    pub broker: Broker,
    pub config: BrokerConfig,
    pub now_ms: i64,
    /// Every segment file, live and the cleaner's staged copies.
    pub disk: SimDisk,
    /// Draws for the disk (only a full disk's short writes draw; the core
    /// tests fill no disk): seeded, so a test replays the same.
    rng: ChaCha8Rng,
    pub meta: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Syncs and meta writes issued but not completed yet.
    pub pending_syncs: VecDeque<(IoId, SyncScope)>,
    pub pending_meta: VecDeque<(IoId, Vec<MetaOp>)>,
    pub pending_reads: VecDeque<(IoId, FileRange)>,
    /// The clean-shutdown file's write or removal, not completed yet.
    pub pending_clean_shutdown: Option<IoId>,
    /// Every disk op carried out but appends and reads, in order (tests
    /// look at what a start-up adopted and synced).
    pub ops_log: Vec<DiskOp>,
    /// The log cleaner's jobs (`Output::Clean`), run when I/O completes.
    pub pending_cleaner_work: VecDeque<(IoId, CleanerWork)>,
    /// Inputs the world owes the broker (a response whose file range failed).
    pending_inputs: VecDeque<Input>,
    /// Every read the broker asked for, in order (tests look at what a
    /// start-up read).
    pub reads_log: Vec<FileRange>,
    /// The next reads fail (EIO).
    pub fail_reads: usize,
    /// When false, the test completes I/O by hand (`complete_syncs`).
    pub auto_io: bool,
    pub fail_next_sync: bool,
    /// The next meta.db write fails (nothing of it is applied).
    pub fail_next_meta: bool,
    /// `Output::Stopped` came (after `Input::Shutdown`).
    pub stopped: bool,
    responses: BTreeMap<ConnId, VecDeque<Bytes>>,
    pub closed: Vec<ConnId>,
    /// Outputs carried out, and the bytes (keys and values) of the meta.db
    /// writes among them: the work a request cost, counted, not timed.
    pub outputs: u64,
    pub meta_bytes: u64,
    /// What `Output::Authenticated` said, in order.
    pub authenticated: Vec<ConnId>,
    /// What `Output::NoResponse` said, in order.
    pub no_responses: Vec<ConnId>,
    next_correlation: i32,
    /// correlation id -> (api key, version), to decode the answer.
    asked: BTreeMap<(ConnId, i32), (ApiKey, i16)>,
    /// What `Output::TopicCompression` said, as a driver keeps it: the
    /// topics whose compression.type is not `producer`.
    pub topic_codecs: BTreeMap<String, doze_core::topic_config::StoredCompression>,
}

pub const T0_MS: i64 = 1_700_000_000_000;

impl World {
    pub fn new(config: BrokerConfig) -> Self {
        let mut w = Self {
            broker: Broker::new(config.clone()),
            config,
            now_ms: T0_MS,
            disk: SimDisk::default(),
            rng: ChaCha8Rng::seed_from_u64(0),
            meta: BTreeMap::new(),
            pending_syncs: VecDeque::new(),
            pending_meta: VecDeque::new(),
            pending_reads: VecDeque::new(),
            pending_clean_shutdown: None,
            ops_log: Vec::new(),
            pending_cleaner_work: VecDeque::new(),
            pending_inputs: VecDeque::new(),
            reads_log: Vec::new(),
            fail_reads: 0,
            auto_io: true,
            fail_next_sync: false,
            fail_next_meta: false,
            stopped: false,
            responses: BTreeMap::new(),
            closed: Vec::new(),
            outputs: 0,
            meta_bytes: 0,
            authenticated: Vec::new(),
            no_responses: Vec::new(),
            next_correlation: 1,
            asked: BTreeMap::new(),
            topic_codecs: BTreeMap::new(),
        };
        w.boot();
        w
    }

    /// Restarts the broker on what is on disk (I/O in flight never
    /// completes). With `power_cut`, what no sync made durable is lost first
    /// (`SimDisk::power_cut_losing_all`: every unsynced byte, every file and
    /// removal, rename or cut no sync covered), and unfinished meta writes.
    pub fn restart(&mut self, power_cut: bool) {
        if power_cut {
            self.disk.power_cut_losing_all();
        } else {
            self.disk.crash();
        }
        self.pending_syncs.clear();
        self.pending_meta.clear();
        self.pending_reads.clear();
        self.pending_clean_shutdown = None;
        self.pending_cleaner_work.clear();
        self.pending_inputs.clear();
        self.responses.clear();
        self.asked.clear();
        self.topic_codecs.clear();
        self.broker = Broker::new(self.config.clone());
        self.stopped = false;
        self.boot();
    }

    fn boot(&mut self) {
        // As a driver starts: it fsyncs the data dir, then lists it.
        self.disk.open_data_dir();
        let mut state = self.disk.boot_state(
            self.meta
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        );
        state.entropy = [3; 32];
        self.input(Input::Boot(state));
    }

    /// A clean stop: `Input::Shutdown` until `Output::Stopped`, then a
    /// restart on the same files (nothing lost).
    pub fn stop_and_restart(&mut self) {
        self.input(Input::Shutdown);
        assert!(self.stopped, "the broker stops once its I/O is done");
        self.restart(false);
    }

    pub fn input(&mut self, input: Input) {
        self.broker.handle(self.now_ms, input);
        self.drain();
    }

    fn handle_now(&mut self, input: Input) {
        self.broker.handle(self.now_ms, input);
        while let Some(out) = self.broker.poll_output() {
            self.apply(out);
        }
    }

    /// Carries out every output; with `auto_io`, completes I/O until quiet.
    pub fn drain(&mut self) {
        loop {
            while let Some(out) = self.broker.poll_output() {
                self.apply(out);
            }
            while let Some(input) = self.pending_inputs.pop_front() {
                self.handle_now(input);
            }
            let idle = self.pending_syncs.is_empty()
                && self.pending_meta.is_empty()
                && self.pending_reads.is_empty()
                && self.pending_clean_shutdown.is_none()
                && self.pending_cleaner_work.is_empty();
            if !self.auto_io || idle {
                return;
            }
            self.complete_io();
        }
    }

    /// The bytes of a range as a reader sees them now.
    pub fn read_range(&mut self, range: &FileRange) -> Result<Bytes, IoError> {
        self.disk.read(range)
    }

    /// A read the driver carries out: EIO while `fail_reads` says so (each
    /// failure uses one up), else the bytes as a reader sees them now.
    fn read_or_injected_failure(&mut self, range: &FileRange) -> Result<Bytes, IoError> {
        if self.fail_reads > 0 {
            self.fail_reads -= 1;
            return Err(IoError("injected EIO".into()));
        }
        self.read_range(range)
    }

    /// The live segment files as a reader sees them, by name.
    pub fn files(&self) -> BTreeMap<LiveKey, &SimFile> {
        self.disk
            .files()
            .iter()
            .filter(|((_, _, (_, stage)), _)| *stage == FileStage::Live)
            .map(|((dir, base, (kind, _)), f)| ((dir.clone(), *base, *kind), f))
            .collect()
    }

    /// The cleaner's staged files (`.cleaned`, `.swap`), by name.
    pub fn staged(&self) -> Vec<(PartitionDir, i64, SegmentFile, FileStage)> {
        self.disk
            .files()
            .keys()
            .filter(|(_, _, (_, stage))| *stage != FileStage::Live)
            .map(|(dir, base, (kind, stage))| (dir.clone(), *base, *kind, *stage))
            .collect()
    }

    /// Removes the live files `gone` picks behind the broker's back (an
    /// operator's `rm`): durably, no power cut brings them back.
    pub fn remove_files(&mut self, gone: impl Fn(&LiveKey) -> bool) {
        let keys: Vec<LiveKey> = self.files().into_keys().filter(|k| gone(k)).collect();
        for (dir, base, kind) in keys {
            self.disk.remove_file(&live_key(dir, base, kind));
        }
    }

    /// Changes a live file's bytes behind the broker's back (a torn write
    /// written back, a flipped bit): what `change` leaves is durable.
    pub fn tamper(&mut self, (dir, base, kind): LiveKey, change: impl FnOnce(&mut Vec<u8>)) {
        let key = live_key(dir, base, kind);
        assert!(self.disk.tamper(&key, change), "no file {key:?}");
    }

    /// Carries out a cleaner job over the files (its reads logged, and
    /// failed while `fail_reads` says so).
    fn run_cleaner_work(&mut self, work: CleanerWork) -> CleanerOutcome {
        let mut files = WorldCleanerFiles {
            world: self,
            dir: work.dir.clone(),
            segment_base: work.segment_base,
        };
        doze_core::log::clean::work::run(work, &mut files)
    }

    fn apply(&mut self, out: Output) {
        self.outputs += 1;
        if let Output::Meta { ops, .. } = &out {
            self.meta_bytes += ops.iter().map(meta_op_bytes).sum::<u64>();
        }
        match out {
            Output::Response { conn, frame } => {
                self.responses.entry(conn).or_default().push_back(frame)
            }
            Output::ResponseParts { conn, parts } => {
                let mut frame = BytesMut::new();
                for part in parts {
                    match part {
                        FramePart::Bytes(b) => frame.extend_from_slice(&b),
                        FramePart::File(range) => match self.read_range(&range) {
                            Ok(b) => frame.extend_from_slice(&b),
                            Err(error) => {
                                self.closed.push(conn);
                                self.pending_inputs.push_back(Input::ResponseReadFailed {
                                    conn,
                                    range,
                                    error,
                                });
                                return;
                            }
                        },
                    }
                }
                self.responses
                    .entry(conn)
                    .or_default()
                    .push_back(frame.freeze())
            }
            Output::Close { conn } => self.closed.push(conn),
            Output::Meta { io, ops } => self.pending_meta.push_back((io, ops)),
            Output::Stopped => self.stopped = true,
            Output::Authenticated { conn } => self.authenticated.push(conn),
            Output::NoResponse { conn } => self.no_responses.push(conn),
            Output::TopicCompression { topic, prep } => {
                use doze_core::topic_config::StoredCompression::Producer;
                match prep.compression {
                    Producer => self.topic_codecs.remove(&topic),
                    codec => self.topic_codecs.insert(topic, codec),
                };
            }
            Output::Disk(DiskOp::Read { io, range }) => {
                self.reads_log.push(range.clone());
                self.pending_reads.push_back((io, range));
            }
            Output::Clean { io, work } => self.pending_cleaner_work.push_back((io, work)),
            Output::Disk(op) => {
                if let DiskOp::Sync { io, scope } = op {
                    self.pending_syncs.push_back((io, scope));
                }
                if let DiskOp::WriteCleanShutdown { io } | DiskOp::RemoveCleanShutdown { io } = op {
                    assert!(self.pending_clean_shutdown.replace(io).is_none());
                }
                let append = matches!(
                    op,
                    DiskOp::Append { .. }
                        | DiskOp::AppendBatch { .. }
                        | DiskOp::AppendCleaned { .. }
                );
                if !append {
                    self.ops_log.push(op.clone());
                }
                self.disk.apply(op, &mut self.rng);
            }
        }
    }

    /// Completes every sync and meta write issued so far (not those the
    /// completions themselves cause).
    pub fn complete_io(&mut self) {
        let metas: Vec<_> = self.pending_meta.drain(..).collect();
        let syncs: Vec<_> = self.pending_syncs.drain(..).collect();
        let clean_shutdown = self.pending_clean_shutdown.take();
        let reads: Vec<_> = self.pending_reads.drain(..).collect();
        for (io, range) in reads {
            let result = self.read_or_injected_failure(&range);
            self.handle_now(Input::ReadDone { io, result });
        }
        let works: Vec<_> = self.pending_cleaner_work.drain(..).collect();
        for (io, work) in works {
            let outcome = self.run_cleaner_work(work);
            self.handle_now(Input::CleanerDone { io, outcome });
        }
        for (io, ops) in metas {
            self.finish_meta(io, ops);
        }
        for (io, scope) in syncs {
            self.finish_sync(io, scope);
        }
        if let Some(io) = clean_shutdown {
            let result = self.disk.complete_clean_shutdown(io, false);
            self.handle_now(Input::CleanShutdownDone { io, result });
        }
    }

    /// Completes the clean-shutdown file's write or removal in flight, if
    /// any (its fsyncs done).
    pub fn complete_clean_shutdown(&mut self) {
        if let Some(io) = self.pending_clean_shutdown.take() {
            let result = self.disk.complete_clean_shutdown(io, false);
            self.handle_now(Input::CleanShutdownDone { io, result });
        }
    }

    /// Completes the oldest meta write in flight (meta.db applies them in
    /// order), leaving the others and every sync in flight.
    pub fn complete_first_meta(&mut self) {
        let (io, ops) = self
            .pending_meta
            .pop_front()
            .expect("a meta write in flight");
        self.finish_meta(io, ops);
    }

    /// Completes every sync issued so far, leaving meta writes in flight.
    pub fn complete_syncs(&mut self) {
        let syncs: Vec<_> = self.pending_syncs.drain(..).collect();
        for (io, scope) in syncs {
            self.finish_sync(io, scope);
        }
    }

    fn finish_meta(&mut self, io: IoId, ops: Vec<MetaOp>) {
        if std::mem::take(&mut self.fail_next_meta) {
            self.broker.handle(
                self.now_ms,
                Input::MetaDone {
                    io,
                    result: Err(doze_core::IoError("injected".into())),
                },
            );
            while let Some(out) = self.broker.poll_output() {
                self.apply(out);
            }
            return;
        }
        for op in ops {
            match op {
                MetaOp::Put { key, value } => {
                    self.meta.insert(key, value);
                }
                MetaOp::Delete { key } => {
                    self.meta.remove(&key);
                }
            }
        }
        self.broker
            .handle(self.now_ms, Input::MetaDone { io, result: Ok(()) });
        while let Some(out) = self.broker.poll_output() {
            self.apply(out);
        }
    }

    fn finish_sync(&mut self, io: IoId, _scope: SyncScope) {
        // The disk covers what was written before the sync was issued (and
        // a `Logs` sync leaves the live index files' appends unsynced).
        let fail = std::mem::take(&mut self.fail_next_sync);
        let result = self.disk.complete_sync(io, fail, false);
        self.broker
            .handle(self.now_ms, Input::SyncDone { io, result });
        while let Some(out) = self.broker.poll_output() {
            self.apply(out);
        }
    }

    /// Moves the clock and delivers a tick if a timer is due.
    pub fn advance(&mut self, ms: i64) {
        self.now_ms += ms;
        if self.broker.poll_timeout().is_some_and(|t| t <= self.now_ms) {
            self.input(Input::Tick);
        }
    }

    /// Sends a request; returns its correlation id.
    pub fn send<R: Request + Encodable>(&mut self, conn: ConnId, version: i16, req: &R) -> i32 {
        self.send_as(conn, version, req, |frame| Input::Frame { conn, frame })
    }

    /// Sends a request handed in as `input` makes its frame an input (a
    /// driver's `Input::CheckedFrame`); returns its correlation id.
    pub fn send_as<R: Request + Encodable>(
        &mut self,
        conn: ConnId,
        version: i16,
        req: &R,
        input: impl FnOnce(Bytes) -> Input,
    ) -> i32 {
        let key = ApiKey::try_from(R::KEY).expect("known key");
        let correlation_id = self.next_correlation;
        self.next_correlation += 1;
        let frame = request_frame(key, version, correlation_id, "core-test", |buf| {
            req.encode(buf, version)
        })
        .unwrap();
        self.asked.insert((conn, correlation_id), (key, version));
        self.input(input(frame));
        correlation_id
    }

    pub fn send_raw(&mut self, conn: ConnId, frame: Bytes) {
        self.input(Input::Frame { conn, frame });
    }

    /// The next response on `conn`, decoded; None if nothing is there yet.
    pub fn recv(&mut self, conn: ConnId) -> Option<(i32, ResponseKind)> {
        let mut frame = self.responses.get_mut(&conn)?.pop_front()?;
        let correlation = i32::from_be_bytes(frame[..4].try_into().unwrap());
        let (key, version) = self
            .asked
            .remove(&(conn, correlation))
            .expect("response to a request we sent");
        let header =
            ResponseHeader::decode(&mut frame, key.response_header_version(version)).unwrap();
        assert_eq!(header.correlation_id, correlation);
        let body = ResponseKind::decode(key, &mut frame, version).unwrap();
        assert!(
            frame.is_empty(),
            "{key:?} v{version}: {} bytes left after the body",
            frame.len()
        );
        Some((correlation, body))
    }

    pub fn raw_response(&mut self, conn: ConnId) -> Option<Bytes> {
        self.responses.get_mut(&conn)?.pop_front()
    }

    /// Durable bytes of a partition's `.log` files.
    pub fn durable_len(&self, dir: &PartitionDir) -> usize {
        self.files()
            .iter()
            .filter(|((d, _, kind), _)| d == dir && *kind == SegmentFile::Log)
            .map(|(_, f)| f.synced_len)
            .sum()
    }
}

fn meta_op_bytes(op: &MetaOp) -> u64 {
    match op {
        MetaOp::Put { key, value } => (key.len() + value.len()) as u64,
        MetaOp::Delete { key } => key.len() as u64,
    }
}

/// A request frame as a client sends it, without its size prefix: the
/// header, then the body `encode_body` writes (its error when the body has
/// fields `version` cannot carry). The framing is doze-testkit's, which
/// net/tests and the simulator's clients use too.
pub fn request_frame(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &'static str,
    encode_body: impl FnOnce(&mut BytesMut) -> anyhow::Result<()>,
) -> anyhow::Result<Bytes> {
    let client_id = Some(StrBytes::from_static_str(client_id));
    doze_testkit::frame::request_frame_with(key, version, correlation_id, client_id, encode_body)
}

/// One uncompressed batch of `values` (keys none), as a producer would send it.
pub fn batch(values: &[&[u8]], timestamp_ms: i64) -> Bytes {
    batch_with(values, timestamp_ms, Compression::None)
}

pub fn batch_with(values: &[&[u8]], timestamp_ms: i64, compression: Compression) -> Bytes {
    producer_batch(
        values,
        timestamp_ms,
        compression,
        Producer {
            id: -1,
            epoch: -1,
            sequence: -1,
            transactional: false,
        },
    )
}

/// Who writes a batch: id -1 for a plain producer.
#[derive(Clone, Copy, Debug)]
pub struct Producer {
    pub id: i64,
    pub epoch: i16,
    /// First sequence of the batch.
    pub sequence: i32,
    pub transactional: bool,
}

/// A batch from an idempotent producer.
pub fn idem_batch(values: &[&[u8]], id: i64, epoch: i16, sequence: i32) -> Bytes {
    producer_batch(
        values,
        T0_MS,
        Compression::None,
        Producer {
            id,
            epoch,
            sequence,
            transactional: false,
        },
    )
}

pub fn producer_batch(
    values: &[&[u8]],
    timestamp_ms: i64,
    compression: Compression,
    p: Producer,
) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: p.transactional,
            control: false,
            partition_leader_epoch: -1,
            producer_id: p.id,
            producer_epoch: p.epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder keeps records in one batch while offset - sequence
            // stays constant; a plain producer's batch has base sequence -1.
            sequence: p.sequence.wrapping_add(i as i32),
            timestamp: timestamp_ms,
            key: None,
            value: Some(Bytes::copy_from_slice(v)),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .unwrap();
    buf.freeze()
}

/// One batch of keyed records (a `None` value is a tombstone).
pub fn keyed_batch(
    records: &[(&[u8], Option<&[u8]>)],
    timestamp_ms: i64,
    compression: Compression,
    p: Producer,
) -> Bytes {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional: p.transactional,
            control: false,
            partition_leader_epoch: -1,
            producer_id: p.id,
            producer_epoch: p.epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: p.sequence.wrapping_add(i as i32),
            timestamp: timestamp_ms,
            key: Some(Bytes::copy_from_slice(k)),
            value: v.map(Bytes::copy_from_slice),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .unwrap();
    buf.freeze()
}

/// The whole batches of a fetch's records bytes: a partial last batch (a
/// range cut at max_bytes, as Kafka's are) is dropped, as clients drop it.
pub fn whole_batches(records: &Bytes) -> Bytes {
    let mut end = 0;
    while records.len() >= end + 12 {
        let len = i32::from_be_bytes(records[end + 8..end + 12].try_into().unwrap()) as usize;
        if records.len() < end + 12 + len {
            break;
        }
        end += 12 + len;
    }
    records.slice(..end)
}

/// Every record value in a fetch's records bytes, with its offset.
pub fn decode_values(records: Bytes) -> Vec<(i64, Bytes)> {
    let mut out = Vec::new();
    let mut records = whole_batches(&records);
    if records.is_empty() {
        return out;
    }
    let sets = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut records).unwrap();
    for set in sets {
        for r in set.records {
            out.push((r.offset, r.value.unwrap_or_default()));
        }
    }
    out
}

/// A cleaner job's files in the test world.
struct WorldCleanerFiles<'a> {
    world: &'a mut World,
    dir: PartitionDir,
    segment_base: i64,
}

impl CleanerFiles for WorldCleanerFiles<'_> {
    fn read(&mut self, position: u64, len: u64) -> Result<Bytes, IoError> {
        let range = FileRange {
            dir: self.dir.clone(),
            segment_base: self.segment_base,
            file: SegmentFile::Log,
            position,
            len,
        };
        self.world.reads_log.push(range.clone());
        self.world.read_or_injected_failure(&range)
    }

    fn append_cleaned(&mut self, bytes: Bytes) -> Result<(), IoError> {
        let world = &mut *self.world;
        let op = DiskOp::AppendCleaned {
            dir: self.dir.clone(),
            segment_base: self.segment_base,
            file: SegmentFile::Log,
            bytes,
        };
        world.disk.apply(op, &mut world.rng);
        Ok(())
    }
}
