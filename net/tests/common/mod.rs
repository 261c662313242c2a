//! Starts the real `doze-kafka` binary on a free loopback port with a fresh
//! data dir, and speaks the Kafka protocol to it over plain TCP with
//! kafka-protocol's codecs. Every read has a timeout so a test cannot hang.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Broker {
    child: Child,
    pub addr: String,
    pub data_dir: std::path::PathBuf,
}

impl Broker {
    pub fn start(name: &str) -> Self {
        let data_dir =
            std::env::temp_dir().join(format!("doze-net-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        let mut child = Command::new(env!("CARGO_BIN_EXE_doze-kafka"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&data_dir)
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("DOZE_TEST_STDERR").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("spawn doze-kafka");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("listening line");
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
        Self {
            child,
            addr,
            data_dir,
        }
    }

    pub fn connect(&self) -> Client {
        let stream = TcpStream::connect(&self.addr).expect("connect");
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            next_correlation: 1,
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

pub struct Client {
    pub stream: TcpStream,
    next_correlation: i32,
}

impl Client {
    pub fn send_frame(&mut self, body: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(&(body.len() as i32).to_be_bytes())?;
        self.stream.write_all(body)
    }

    /// Reads one response frame; None when the broker closed the connection.
    pub fn read_frame(&mut self) -> Option<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).ok()?;
        let mut buf = vec![0u8; i32::from_be_bytes(size) as usize];
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
        let key = ApiKey::try_from(R::KEY).unwrap();
        let correlation_id = self.next_correlation;
        self.next_correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("net-test")));
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, key.request_header_version(version))
            .unwrap();
        req.encode(&mut buf, version).unwrap();
        self.send_frame(&buf).expect("send");
        let mut frame = self.read_frame().expect("a response");
        let h = ResponseHeader::decode(&mut frame, key.response_header_version(version)).unwrap();
        assert_eq!(h.correlation_id, correlation_id);
        ResponseKind::decode(key, &mut frame, version).unwrap()
    }
}
