//! A small async Kafka client, for the operator tools (`doze-kafka topics |
//! groups | transactions`, `tools/`) and anything else in this crate that
//! asks a broker something (a console in the broker process can connect it
//! to its own listener). It speaks only Kafka's protocol, so it works
//! against Apache Kafka as well as doze.
//!
//! - `Client::connect("host:port,...")` opens a connection to the first
//!   bootstrap server that answers, learns the brokers from Metadata, and
//!   opens connections to others as requests need them (a partition's
//!   leader, a group's or transactional id's coordinator).
//! - Every connection is over a `Connector`'s stream: `TcpConnector` by
//!   default, any `AsyncRead + AsyncWrite + Unpin` stream otherwise
//!   (`Client::connect_with`).
//! - Each API goes at the highest version both sides speak (`versions`).
//! - Everything is bounded in time: a connect by `connect_timeout`, each
//!   request by `request_timeout`, and the retries of a coordinator that is
//!   loading or moving by `request_timeout` in all.
//! - Typed methods (`list_topics`, `describe_producers`, `describe_group`,
//!   `fetch_raw`, ...) are in one file per area: `topics.rs`, `groups.rs`,
//!   `transactions.rs`, `fetch.rs`; they return plain structs (serde
//!   `Serialize`) and leave the formatting to the caller. `send` is the way
//!   to any other request.
//!
//! One request at a time per connection: a tool's requests depend on each
//! other's answers, and a broker answers in order anyway.

mod conn;
mod error;
mod fetch;
mod groups;
mod topics;
mod transactions;
pub mod versions;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io;
use std::time::Duration;

use kafka_protocol::protocol::Request;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};

pub use conn::{describe_versions, Connection};
pub use error::{error_name, Error, KafkaError};
pub use fetch::{Isolation, RawFetch};
pub use groups::{
    CommittedOffset, Coordinator, CoordinatorKind, GroupDescription, GroupListing, GroupMember,
    OffsetSpec,
};
pub use topics::{
    Broker, ClusterInfo, ConfigEntry, CreatedTopic, NewTopic, PartitionInfo, TopicInfo,
};
pub use transactions::{
    AbortSpec, ProducerState, TransactionDescription, TransactionFilter, TransactionListing,
};

/// How long a coordinator that is loading or moving is waited for between
/// two asks.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// Settings of a client.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Sent in every request header (brokers log it; groups show it).
    pub client_id: String,
    /// Bound on opening one connection (TCP and whatever the connector adds).
    pub connect_timeout: Duration,
    /// Bound on one request, from writing it to reading its answer.
    pub request_timeout: Duration,
    /// The largest answer accepted (a fetch's records are most of it).
    pub response_bytes_max: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            client_id: "doze-kafka-admin".into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            response_bytes_max: 128 * 1024 * 1024,
        }
    }
}

/// Opens a byte stream to `host:port`.
pub trait Connector: Send + Sync {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send;
    fn connect(&self, addr: &str) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

/// Plain TCP (Kafka's PLAINTEXT listeners).
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpConnector;

impl Connector for TcpConnector {
    type Stream = tokio::net::TcpStream;

    async fn connect(&self, addr: &str) -> io::Result<Self::Stream> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

/// A topic's partition.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Which broker a request goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Any broker (the bootstrap connection): cluster-wide questions.
    Any,
    /// The broker with this node id (a leader, a coordinator).
    Node(i32),
}

/// A client of one cluster. See the module comment.
pub struct Client<C: Connector = TcpConnector> {
    connector: C,
    config: ClientConfig,
    bootstrap: Vec<String>,
    /// Broker addresses by node id (Metadata, FindCoordinator).
    brokers: BTreeMap<i32, String>,
    /// Open connections by address.
    conns: HashMap<String, Connection<C::Stream>>,
    /// The address `Target::Any` goes to.
    any: String,
}

impl Client<TcpConnector> {
    /// A client of the cluster behind `bootstrap` (`host:port`, several
    /// comma-separated), over TCP, with the default settings.
    pub async fn connect(bootstrap: &str) -> Result<Self, Error> {
        Self::connect_with(TcpConnector, bootstrap, ClientConfig::default()).await
    }
}

impl<C: Connector> Client<C> {
    /// A client over `connector`'s streams: opens the first bootstrap server
    /// that answers ApiVersions, and learns the brokers from Metadata.
    pub async fn connect_with(
        connector: C,
        bootstrap: &str,
        config: ClientConfig,
    ) -> Result<Self, Error> {
        let bootstrap = parse_bootstrap(bootstrap)?;
        let mut client = Self {
            connector,
            config,
            bootstrap,
            brokers: BTreeMap::new(),
            conns: HashMap::new(),
            any: String::new(),
        };
        client.open_any().await?;
        client.refresh_brokers().await?;
        Ok(client)
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The brokers known: node id and `host:port`.
    pub fn brokers(&self) -> &BTreeMap<i32, String> {
        &self.brokers
    }

    /// The version a request `R` goes at to `target`.
    pub async fn version<R: Request>(&mut self, target: Target) -> Result<i16, Error> {
        self.conn(target).await?.version::<R>()
    }

    /// Sends `request` to `target` at the highest common version.
    pub async fn send<R: Request>(
        &mut self,
        target: Target,
        request: &R,
    ) -> Result<R::Response, Error> {
        let conn = self.conn(target).await?;
        let result = conn.send(request).await;
        self.forget_if_broken(target);
        result
    }

    /// Sends `request` to `target` at `version` (from `version`).
    pub async fn send_at<R: Request>(
        &mut self,
        target: Target,
        version: i16,
        request: &R,
    ) -> Result<R::Response, Error> {
        let conn = self.conn(target).await?;
        let result = conn.send_at(version, request).await;
        self.forget_if_broken(target);
        result
    }

    /// Every broker's node id, for questions each broker answers for its
    /// own part (ListGroups, ListTransactions).
    pub fn node_ids(&self) -> Vec<i32> {
        self.brokers.keys().copied().collect()
    }

    fn forget_if_broken(&mut self, target: Target) {
        let Some(addr) = self.addr_of(target) else {
            return;
        };
        if self.conns.get(&addr).is_some_and(Connection::is_broken) {
            self.conns.remove(&addr);
        }
    }

    fn addr_of(&self, target: Target) -> Option<String> {
        match target {
            Target::Any => Some(self.any.clone()),
            Target::Node(id) => self.brokers.get(&id).cloned(),
        }
    }

    async fn conn(&mut self, target: Target) -> Result<&mut Connection<C::Stream>, Error> {
        match target {
            Target::Any => self.conn_any().await,
            Target::Node(id) => self.conn_node(id).await,
        }
    }

    /// The connection `Target::Any` uses, opened again if it broke.
    async fn conn_any(&mut self) -> Result<&mut Connection<C::Stream>, Error> {
        if !self.conns.contains_key(&self.any) {
            self.open_any().await?;
        }
        Ok(self.conns.get_mut(&self.any).expect("opened above"))
    }

    /// The connection to broker `id`, asking Metadata for its address if
    /// it is not known yet.
    async fn conn_node(&mut self, id: i32) -> Result<&mut Connection<C::Stream>, Error> {
        if !self.brokers.contains_key(&id) {
            self.refresh_brokers().await?;
        }
        let Some(addr) = self.brokers.get(&id).cloned() else {
            return Err(Error::Protocol {
                addr: self.any.clone(),
                reason: format!("broker {id} is not in the cluster's metadata"),
            });
        };
        if !self.conns.contains_key(&addr) {
            let conn = self.open(&addr).await?;
            self.conns.insert(addr.clone(), conn);
        }
        Ok(self.conns.get_mut(&addr).expect("opened above"))
    }

    /// Opens the connection `Target::Any` uses: the bootstrap servers in
    /// order, then the brokers learnt; the last failure if none answers.
    async fn open_any(&mut self) -> Result<(), Error> {
        let mut candidates = self.bootstrap.clone();
        candidates.extend(self.brokers.values().cloned());
        let mut last = None;
        for addr in candidates {
            match self.open(&addr).await {
                Ok(conn) => {
                    self.conns.insert(addr.clone(), conn);
                    self.any = addr;
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Usage("no bootstrap server".into())))
    }

    async fn open(&self, addr: &str) -> Result<Connection<C::Stream>, Error> {
        let timeout = self.config.connect_timeout;
        let stream = match tokio::time::timeout(timeout, self.connector.connect(addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                return Err(Error::Connect {
                    addr: addr.to_string(),
                    reason: e.to_string(),
                })
            }
            Err(_) => {
                return Err(Error::Timeout {
                    addr: addr.to_string(),
                    what: "connecting".into(),
                    after: timeout,
                })
            }
        };
        Connection::open(stream, addr, &self.config).await
    }

    /// When retries of a retriable Kafka error (a coordinator loading,
    /// moving, not yet elected) end: the request timeout from now.
    fn retry_deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.config.request_timeout
    }

    /// Waits a little if `e` is worth asking again before `deadline`;
    /// gives `e` back otherwise.
    async fn backoff(e: Error, deadline: tokio::time::Instant) -> Result<(), Error> {
        let retriable = e.kafka().is_some_and(KafkaError::is_retriable);
        if !retriable || tokio::time::Instant::now() + RETRY_BACKOFF > deadline {
            return Err(e);
        }
        tokio::time::sleep(RETRY_BACKOFF).await;
        Ok(())
    }
}

/// `host:port[,host:port...]`, each with a port.
fn parse_bootstrap(bootstrap: &str) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    for addr in bootstrap
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        let ok = addr
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !ok {
            return Err(Error::Usage(format!(
                "bad bootstrap server {addr:?}: expected HOST:PORT"
            )));
        }
        out.push(addr.to_string());
    }
    if out.is_empty() {
        return Err(Error::Usage("no bootstrap server given".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_lists() {
        assert_eq!(
            parse_bootstrap("a:1, b:2").unwrap(),
            vec!["a:1".to_string(), "b:2".to_string()]
        );
        assert_eq!(parse_bootstrap("[::1]:9092").unwrap(), vec!["[::1]:9092"]);
        for bad in ["", ",", "a", "a:", ":9092", "a:x", "a:70000"] {
            assert!(
                matches!(parse_bootstrap(bad), Err(Error::Usage(_))),
                "{bad:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_closed_port_is_a_connect_error() {
        // Bound and dropped: nothing listens there now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let Err(e) = Client::connect(&format!("127.0.0.1:{port}")).await else {
            panic!("connected to a closed port");
        };
        assert!(matches!(e, Error::Connect { .. }), "{e}");
    }
}
