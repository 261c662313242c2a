//! Starts the real `doze-kafka` binary on a free loopback port with a fresh
//! data dir, and speaks the Kafka protocol to it over plain TCP with
//! kafka-protocol's codecs. Every read has a timeout so a test cannot hang.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use doze_testkit::frame::{request_frame, size_prefixed};
use kafka_protocol::messages::{ApiKey, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a SIGTERM'd broker may take to exit (it gives its core 30 s).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(40);

pub struct Broker {
    child: Child,
    pub addr: String,
    /// The console's URL (`http://host:port/`), when the arguments open one
    /// (`--set doze.console.listen=127.0.0.1:0`); by default none is opened,
    /// so that brokers started side by side do not all want port 8092.
    pub console: Option<String>,
    /// Removed when the broker is dropped (empty: handed on by `restart`).
    pub data_dir: PathBuf,
    args: Vec<String>,
}

impl Broker {
    pub fn start(name: &str) -> Self {
        Self::start_with(name, &[])
    }

    /// With extra command-line arguments (e.g. `--set key=value`).
    pub fn start_with(name: &str, args: &[&str]) -> Self {
        let data_dir =
            std::env::temp_dir().join(format!("doze-net-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        let args = args.iter().map(|a| a.to_string()).collect();
        Self::start_in(data_dir, args)
    }

    /// On `data_dir` as it is (removed when the broker is dropped).
    pub fn start_on(data_dir: PathBuf, args: &[&str]) -> Self {
        Self::start_in(data_dir, args.iter().map(|a| a.to_string()).collect())
    }

    fn start_in(data_dir: PathBuf, args: Vec<String>) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_doze-kafka"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&data_dir)
            .args(["--set", "doze.console.listen=none"])
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("DOZE_TEST_STDERR").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("spawn doze-kafka");
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut line).expect("listening line");
        let addr = line
            .trim()
            .rsplit(' ')
            .next()
            .expect("an address")
            .to_string();
        assert!(
            line.contains("listening on"),
            "unexpected first line: {line:?}"
        );
        let console_asked = args
            .iter()
            .rev()
            .find_map(|a| a.strip_prefix("doze.console.listen="))
            .is_some_and(|at| !at.eq_ignore_ascii_case("none"));
        let console = console_asked.then(|| {
            let mut line = String::new();
            stdout.read_line(&mut line).expect("console line");
            let url = line.trim().strip_prefix("doze-kafka console: ");
            url.unwrap_or_else(|| panic!("unexpected second line: {line:?}"))
                .to_string()
        });
        Self {
            child,
            addr,
            console,
            data_dir,
            args,
        }
    }

    /// SIGTERM, then waits for the exit (killed after `STOP_TIMEOUT`).
    pub fn stop(&mut self) -> ExitStatus {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "SIGTERM sent");
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the broker") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the broker did not exit within {STOP_TIMEOUT:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, then starts again on the same data dir and arguments: the
    /// start-up after a crash.
    pub fn crash_restart(mut self) -> Self {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let data_dir = std::mem::take(&mut self.data_dir);
        let args = std::mem::take(&mut self.args);
        Self::start_in(data_dir, args)
    }

    /// Stops cleanly (exit status 0 asserted) and starts again on the same
    /// data dir and arguments.
    pub fn restart(mut self) -> Self {
        let status = self.stop();
        assert!(status.success(), "a clean stop exits 0, got {status}");
        let data_dir = std::mem::take(&mut self.data_dir);
        let args = std::mem::take(&mut self.args);
        Self::start_in(data_dir, args)
    }

    pub fn connect(&self) -> Client {
        connect(&self.addr)
    }

    /// The broker's process id (for its memory in /proc).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The address of listener `name`, when the broker was started with
    /// `listeners` (its listening line names each: `NAME://host:port,...`).
    pub fn listener(&self, name: &str) -> String {
        self.addr
            .split(',')
            .find_map(|l| l.strip_prefix(&format!("{name}://")))
            .unwrap_or_else(|| panic!("no listener {name} in {}", self.addr))
            .to_string()
    }
}

/// A plain TCP client of `addr`, with the I/O timeouts.
pub fn connect(addr: &str) -> Client {
    Client::new(tcp(addr))
}

/// A TCP stream to `addr` with the I/O timeouts, for a client to wrap.
pub fn tcp(addr: &str) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.data_dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
    }
}

/// A Kafka client over a byte stream: plain TCP, or TLS over it.
pub struct Client<S = TcpStream> {
    pub stream: S,
    next_correlation: i32,
}

impl<S: Read + Write> Client<S> {
    pub fn new(stream: S) -> Self {
        Self {
            stream,
            next_correlation: 1,
        }
    }

    /// Sends `frame` (header and body) with its size in front.
    pub fn send_frame(&mut self, frame: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(&size_prefixed(frame))
    }

    /// Reads one response frame; None when the broker closed the connection.
    pub fn read_frame(&mut self) -> Option<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).ok()?;
        // Not a response (e.g. a TLS alert read as plaintext): no 300 MB buffer.
        let size = usize::try_from(i32::from_be_bytes(size))
            .ok()
            .filter(|&n| n <= 64 << 20)?;
        let mut buf = vec![0u8; size];
        self.stream.read_exact(&mut buf).ok()?;
        Some(Bytes::from(buf))
    }

    /// Whether the broker closed the connection (EOF or reset) within the timeout.
    pub fn is_closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.stream.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    }

    pub fn request<R: Request + Encodable>(&mut self, version: i16, req: &R) -> ResponseKind {
        self.try_request(version, req).expect("a response")
    }

    /// As `request`, but None if the connection fails or closes instead.
    pub fn try_request<R: Request + Encodable>(
        &mut self,
        version: i16,
        req: &R,
    ) -> Option<ResponseKind> {
        let key = ApiKey::try_from(R::KEY).unwrap();
        let correlation_id = self.next_correlation;
        self.next_correlation += 1;
        let client_id = Some(StrBytes::from_static_str("net-test"));
        let frame = request_frame(version, correlation_id, client_id, req).unwrap();
        self.send_frame(&frame).ok()?;
        let mut frame = self.read_frame()?;
        let h = ResponseHeader::decode(&mut frame, key.response_header_version(version)).unwrap();
        assert_eq!(h.correlation_id, correlation_id);
        Some(ResponseKind::decode(key, &mut frame, version).unwrap())
    }
}

/// A topic name for a request.
pub fn topic(s: &str) -> kafka_protocol::messages::TopicName {
    kafka_protocol::messages::TopicName(StrBytes::from_string(s.to_string()))
}

/// Creates `name` with one partition; it must succeed.
pub fn create_topic<S: Read + Write>(c: &mut Client<S>, name: &str) {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    let req = kafka_protocol::messages::CreateTopicsRequest::default().with_topics(vec![
        CreatableTopic::default()
            .with_name(topic(name))
            .with_num_partitions(1)
            .with_replication_factor(1),
    ]);
    match c.request(7, &req) {
        ResponseKind::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0),
        other => panic!("{other:?}"),
    }
}

/// One batch of `values` to partition 0 of `name`, acks=all, no producer
/// id; it must succeed. Returns its base offset.
pub fn produce<S: Read + Write>(c: &mut Client<S>, name: &str, values: &[Bytes]) -> i64 {
    produce_to(c, name, 0, values)
}

/// As `produce`, to partition `partition`.
pub fn produce_to<S: Read + Write>(
    c: &mut Client<S>,
    name: &str,
    partition: i32,
    values: &[Bytes],
) -> i64 {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, value)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32,
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(value.clone()),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
    let req = kafka_protocol::messages::ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic(name))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(buf.freeze()))])]);
    match c.request(9, &req) {
        ResponseKind::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            assert_eq!(p.error_code, 0, "{:?}", p.error_message);
            p.base_offset
        }
        other => panic!("{other:?}"),
    }
}

/// One run of the binary: its exit code and what it printed.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `doze-kafka <args>` to its end, killed (and the test failed) if it
/// takes longer than `limit`; a panic in its output fails the test too.
pub fn run_binary(args: &[&str], limit: Duration) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_doze-kafka"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).unwrap();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).unwrap();
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("doze-kafka {args:?} ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let run = Run {
        code: status.code().expect("exited, not killed"),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    run
}

/// One RecordBatch v2 of `count` tiny records at `base_offset` (offset
/// deltas 0, 1, ...; timestamps all `timestamp`; no key; a one-byte value
/// `v`; no headers, no producer id), its records section compressed with
/// `codec` (Kafka's attribute bits: 4 is zstd). What a hostile client can
/// pack into a small batch: a million such records are 10 MB plain.
pub fn tiny_records_batch(base_offset: i64, count: i32, codec: u8, timestamp: i64) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, value: i64) {
        let mut raw = ((value << 1) ^ (value >> 63)) as u64;
        while raw >= 0x80 {
            out.push((raw as u8 & 0x7f) | 0x80);
            raw >>= 7;
        }
        out.push(raw as u8);
    }
    let mut plain = Vec::with_capacity(count as usize * 12);
    let mut record = Vec::new();
    for delta in 0..i64::from(count) {
        record.clear();
        record.push(0); // attributes
        varint(&mut record, 0); // timestamp delta
        varint(&mut record, delta);
        varint(&mut record, -1); // null key
        varint(&mut record, 1);
        record.push(b'v');
        varint(&mut record, 0); // headers
        varint(&mut plain, record.len() as i64);
        plain.extend_from_slice(&record);
    }
    let section = doze_core::log::clean::codec::compress(
        codec,
        doze_core::log::clean::codec::default_level(codec),
        &plain,
    )
    .expect("compressed");
    let mut b = Vec::with_capacity(61 + section.len());
    b.extend_from_slice(&base_offset.to_be_bytes());
    let batch_length = (61 - 12 + section.len()) as i32;
    b.extend_from_slice(&batch_length.to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // partition leader epoch
    b.push(2); // magic
    b.extend_from_slice(&[0; 4]); // CRC, written below
    b.extend_from_slice(&i16::from(codec).to_be_bytes()); // attributes
    b.extend_from_slice(&(count - 1).to_be_bytes()); // last offset delta
    b.extend_from_slice(&timestamp.to_be_bytes()); // base timestamp
    b.extend_from_slice(&timestamp.to_be_bytes()); // max timestamp
    b.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
    b.extend_from_slice(&(-1i16).to_be_bytes()); // producer epoch
    b.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    b.extend_from_slice(&count.to_be_bytes());
    b.extend_from_slice(&section);
    doze_core::batch::write_crc(&mut b);
    b
}

/// Linux's peak resident set size of process `pid` (VmHWM), in KiB.
pub fn peak_rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmHWM:")
}

/// The same, or `None` once the process is gone (for sampling a child
/// that may exit between two looks).
pub fn try_peak_rss_kib(pid: u32) -> Option<u64> {
    try_proc_status_kib(pid, "VmHWM:")
}

/// Linux's resident set size of process `pid` (VmRSS), in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmRSS:")
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    try_proc_status_kib(pid, field).unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn try_proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
}

/// Resets process `pid`'s peak resident set size (VmHWM) to its current
/// one (proc(5), clear_refs: "5").
pub fn reset_peak_rss(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("write clear_refs");
}
