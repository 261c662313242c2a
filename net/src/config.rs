//! Broker settings from `--config FILE` and `--set KEY=VALUE`, and the
//! `HOST:PORT` flag type.
//!
//! The keys of the network layer (listeners and TLS, `NetSettings`, and
//! doze's own `doze.*` keys for the driver, such as the console's address)
//! are taken here; every other key goes to `BrokerConfig::set`, which knows the
//! Kafka names and rejects unknown keys: a typo in a durability setting
//! should stop the broker, not be ignored. The file is read first and
//! `--set` flags after it, in order, so a flag overrides the file.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use doze_core::security::SecurityProtocol;
use doze_core::{limits, BrokerConfig};

use crate::quotas::ConnectionLimits;

/// Everything `--config` and `--set` say.
#[derive(Debug, Default)]
pub struct Settings {
    /// For the core.
    pub broker: BrokerConfig,
    /// For the listeners.
    pub net: NetSettings,
    /// One line for each property accepted but ignored (`KAFKA_ONLY`).
    pub warnings: Vec<String>,
    /// `controller.listener.names`: listeners not to open.
    controller_listeners: Vec<String>,
}

/// Kafka broker properties that mean nothing to one doze node (KRaft roles
/// and quorum, thread pools, socket buffers, replication and leadership,
/// the internal topics doze does not have, how Kafka lays out and flushes
/// its files, JMX metrics, ZooKeeper): accepted with one warning line each,
/// so a Kafka user's file loads. Any other unknown key is still refused
/// with its line number.
pub const KAFKA_ONLY: &[&str] = &[
    "process.roles",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "controller.listener.names",
    "inter.broker.listener.name",
    "num.network.threads",
    "num.io.threads",
    "num.replica.fetchers",
    "num.recovery.threads.per.data.dir",
    "background.threads",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "socket.request.max.bytes",
    "log.dirs",
    "log.dir",
    "metadata.log.dir",
    "log.flush.interval.messages",
    "log.flush.interval.ms",
    "offsets.topic.replication.factor",
    "offsets.topic.num.partitions",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "transaction.state.log.num.partitions",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
    "default.replication.factor",
    "min.insync.replicas",
    "delete.topic.enable",
    "zookeeper.connect",
    "zookeeper.connection.timeout.ms",
    // Replication and leadership: one node leads every partition.
    "unclean.leader.election.enable",
    "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds",
    "leader.imbalance.per.broker.percentage",
    "controlled.shutdown.enable",
    "replica.fetch.max.bytes",
    "replica.fetch.wait.max.ms",
    "replica.lag.time.max.ms",
    "replica.socket.timeout.ms",
    "replica.socket.receive.buffer.bytes",
    "replica.high.watermark.checkpoint.interval.ms",
    "security.inter.broker.protocol",
    "broker.rack",
    // A partition's leader asks its coordinator (KIP-890); in doze they
    // are one process, which always checks.
    "transaction.partition.verification.enable",
    // __consumer_offsets and __transaction_state, which doze does not have.
    "offsets.topic.segment.bytes",
    "offsets.load.buffer.size",
    "offsets.commit.timeout.ms",
    "transaction.state.log.segment.bytes",
    "transaction.state.log.load.buffer.size",
    // How Kafka lays out, flushes and cleans its files (doze fsyncs before
    // every answer and indexes every 4 KiB).
    "log.preallocate",
    "log.index.size.max.bytes",
    "log.index.interval.bytes",
    "log.segment.delete.delay.ms",
    "log.flush.scheduler.interval.ms",
    "log.flush.offset.checkpoint.interval.ms",
    "log.flush.start.offset.checkpoint.interval.ms",
    "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.size",
    "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.max.bytes.per.second",
    // JMX metrics (doze serves /metrics on its console).
    "metric.reporters",
    "metrics.num.samples",
    "metrics.sample.window.ms",
    "metrics.recording.level",
];

/// Kafka's group rebalance protocols (GroupCoordinatorConfig), of which
/// doze serves `classic`.
const REBALANCE_PROTOCOLS: &str = "group.coordinator.rebalance.protocols";
const KAFKA_PROTOCOLS: [&str; 4] = ["classic", "consumer", "share", "streams"];
/// Settings of the group protocols doze does not serve (KIP-848's consumer
/// groups, share groups, streams groups): accepted with a warning.
const UNSERVED_GROUP_PREFIXES: [(&str, &str); 3] = [
    ("group.consumer.", "consumer-protocol (KIP-848)"),
    ("group.share.", "share"),
    ("group.streams.", "streams"),
];

/// Kafka broker properties that would limit something doze does not limit
/// by them (idle connections, queued requests, a group's members, whether
/// the cleaner runs): accepted with a warning that says so, so a Kafka
/// user's file loads and its owner knows what does not hold.
pub const NOT_ENFORCED: &[&str] = &[
    "connections.max.idle.ms",
    "queued.max.requests",
    "group.max.size",
    "log.cleaner.enable",
];

/// The settings the core never sees: where to listen, how, and the TLS
/// material. Kept as given; `NetSettings::plan` checks them together once
/// all are read (their order in a file does not matter).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetSettings {
    /// `listeners`: replaces the `--listen` listener when given.
    pub listeners: Option<Vec<Endpoint>>,
    /// `listener.security.protocol.map`: listener name to protocol, for
    /// names that are not a protocol's own.
    pub protocol_map: Vec<(String, SecurityProtocol)>,
    /// `advertised.listeners`: the address to tell clients, per listener.
    pub advertised_listeners: Vec<Endpoint>,
    pub tls: TlsSettings,
    /// `doze.console.listen`: where the HTTP console (`/metrics`) listens.
    pub console: ConsoleListen,
    /// What one client, or all of them, may hold: connections and request
    /// bytes.
    pub limits: ClientLimits,
}

/// The limits on clients the network layer enforces, with Kafka's names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientLimits {
    /// `max.connections`, `max.connections.per.ip`,
    /// `max.connections.per.ip.overrides`.
    pub connections: ConnectionLimits,
    /// `queued.max.request.bytes`: the request budget (`budget.rs`).
    pub queued_request_bytes_max: usize,
    /// `sasl.server.max.receive.size`: the largest frame before a SASL
    /// listener's connection has authenticated.
    pub sasl_server_max_receive_bytes: usize,
}

impl Default for ClientLimits {
    fn default() -> Self {
        Self {
            connections: ConnectionLimits::default(),
            queued_request_bytes_max: limits::QUEUED_REQUEST_BYTES_MAX,
            sasl_server_max_receive_bytes: limits::SASL_SERVER_MAX_RECEIVE_BYTES,
        }
    }
}

impl ClientLimits {
    fn set(&mut self, key: &str, value: &str) -> Result<bool, String> {
        match key {
            "max.connections" | "max.connections.per.ip" | "max.connections.per.ip.overrides" => {
                self.connections.set(key, value)?
            }
            "queued.max.request.bytes" => {
                let n: i64 = value
                    .parse()
                    .map_err(|_| format!("{key}: expected a number of bytes, got {value:?}"))?;
                // Kafka's -1 (no pool) is not offered: every request byte
                // doze holds is bounded.
                let min = limits::REQUEST_BYTES_MAX;
                self.queued_request_bytes_max = usize::try_from(n)
                    .ok()
                    .filter(|&n| n >= min)
                    .ok_or_else(|| {
                        format!(
                            "{key}: must be at least {min} (the largest request doze reads), \
                             got {n}"
                        )
                    })?;
            }
            "sasl.server.max.receive.size" => {
                let n: i64 = value
                    .parse()
                    .map_err(|_| format!("{key}: expected a number of bytes, got {value:?}"))?;
                let max = limits::UNAUTHENTICATED_QUEUED_BYTES_MAX;
                self.sasl_server_max_receive_bytes = usize::try_from(n)
                    .ok()
                    .filter(|&n| n > 0 && n <= max)
                    .ok_or_else(|| {
                        format!(
                            "{key}: must be from 1 to {max} (what unauthenticated \
                             connections may hold together), got {n}"
                        )
                    })?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// `doze.console.listen`: `HOST:PORT` (port 0: any free one), or `none`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleListen(pub Option<HostPort>);

impl ConsoleListen {
    /// On loopback, as a local operator's page: exposing it elsewhere is a
    /// choice to make (`doze.console.listen=0.0.0.0:8092`).
    pub const DEFAULT: &'static str = "127.0.0.1:8092";

    fn parse(value: &str) -> Result<Self, String> {
        if value.eq_ignore_ascii_case("none") {
            return Ok(Self(None));
        }
        value
            .parse()
            .map(|hp| Self(Some(hp)))
            .map_err(|e| format!("doze.console.listen: {e} (or none to open no console)"))
    }
}

impl Default for ConsoleListen {
    fn default() -> Self {
        Self::parse(Self::DEFAULT).expect("the default parses")
    }
}

/// TLS for the SSL and SASL_SSL listeners, with Kafka's names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// `ssl.keystore.location`: one PEM file with the certificate chain
    /// (the broker's first) and its unencrypted private key.
    pub keystore: Option<PathBuf>,
    /// `ssl.truststore.location`: PEM CA certificates that client
    /// certificates must chain to.
    pub truststore: Option<PathBuf>,
    /// `ssl.client.auth`.
    pub client_auth: ClientAuth,
}

/// `ssl.client.auth`: whether SSL listeners ask clients for a certificate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientAuth {
    #[default]
    None,
    /// Asked for; a client without one is served as `User:ANONYMOUS`.
    Requested,
    /// A client without a valid one fails the handshake.
    Required,
}

/// `NAME://host:port` in `listeners` and `advertised.listeners`. An empty
/// host (`PLAINTEXT://:9092`) means every interface for a listener, as in
/// Kafka.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Upper case, as Kafka normalises listener names.
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    pub fn parse(s: &str) -> Result<Self, String> {
        let (name, address) = s
            .split_once("://")
            .ok_or_else(|| format!("expected NAME://HOST:PORT, got {s:?}"))?;
        let name = name.trim().to_ascii_uppercase();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("bad listener name in {s:?}"));
        }
        let (host, port) = match address.strip_prefix(':') {
            Some(port) => (
                String::new(),
                port.parse().map_err(|_| format!("bad port in {s:?}"))?,
            ),
            None => {
                let hp: HostPort = address.parse()?;
                (hp.host, hp.port)
            }
        };
        Ok(Self { name, host, port })
    }

    fn parse_list(value: &str) -> Result<Vec<Self>, String> {
        value
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(Self::parse)
            .collect()
    }

    pub fn host_port(&self) -> HostPort {
        HostPort {
            host: self.host.clone(),
            port: self.port,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.name, self.host_port())
    }
}

impl NetSettings {
    /// Takes `key` if it is one of ours: `Ok(false)` if it is not.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, String> {
        let value = value.trim();
        match key {
            "listeners" => {
                let list = Endpoint::parse_list(value).map_err(|e| format!("listeners: {e}"))?;
                if list.is_empty() {
                    return Err("listeners: at least one listener".into());
                }
                self.listeners = Some(list);
            }
            "advertised.listeners" => {
                self.advertised_listeners = Endpoint::parse_list(value)
                    .map_err(|e| format!("advertised.listeners: {e}"))?;
            }
            "listener.security.protocol.map" => {
                let mut map = Vec::new();
                for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let bad = || {
                        format!(
                            "listener.security.protocol.map: expected NAME:PROTOCOL, got {pair:?}"
                        )
                    };
                    let (name, protocol) = pair.split_once(':').ok_or_else(bad)?;
                    let protocol = SecurityProtocol::parse(protocol.trim()).ok_or_else(|| {
                        format!(
                            "listener.security.protocol.map: unknown security protocol {:?} \
                             (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)",
                            protocol.trim()
                        )
                    })?;
                    let name = name.trim().to_ascii_uppercase();
                    if name.is_empty() {
                        return Err(bad());
                    }
                    map.push((name, protocol));
                }
                self.protocol_map = map;
            }
            "ssl.keystore.type" | "ssl.truststore.type" => {
                if !value.eq_ignore_ascii_case("PEM") {
                    return Err(format!("{key}: only PEM is supported, got {value:?}"));
                }
            }
            "doze.console.listen" => self.console = ConsoleListen::parse(value)?,
            _ if self.limits.set(key, value)? => {}
            "ssl.keystore.location" => self.tls.keystore = non_empty_path(value),
            "ssl.truststore.location" => self.tls.truststore = non_empty_path(value),
            "ssl.client.auth" => {
                self.tls.client_auth = match value.to_ascii_lowercase().as_str() {
                    "none" => ClientAuth::None,
                    "requested" => ClientAuth::Requested,
                    "required" => ClientAuth::Required,
                    _ => {
                        return Err(format!(
                            "ssl.client.auth: expected none, requested or required, got {value:?}"
                        ))
                    }
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The security protocol of a listener name: the map's, else the
    /// protocol of that name (Kafka's default map).
    pub fn protocol_of(&self, name: &str) -> Option<SecurityProtocol> {
        self.protocol_map
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| *p)
            .or_else(|| SecurityProtocol::parse(name))
    }

    /// The listeners to open, checked together. `listen` is the
    /// `--listen` address, used when `listeners` is not given (one
    /// PLAINTEXT listener).
    pub fn plan(&self, listen: &HostPort) -> Result<Vec<PlannedListener>, String> {
        self.limits.connections.check()?;
        let endpoints = match &self.listeners {
            Some(list) => list.clone(),
            None => vec![Endpoint {
                name: SecurityProtocol::Plaintext.name().to_string(),
                host: listen.host.clone(),
                port: listen.port,
            }],
        };
        let mut planned: Vec<PlannedListener> = Vec::new();
        for e in endpoints {
            let protocol = self.protocol_of(&e.name).ok_or_else(|| {
                format!(
                    "listeners: no security protocol for listener {} \
                     (name it after one, or map it in listener.security.protocol.map)",
                    e.name
                )
            })?;
            if planned.iter().any(|p| p.name == e.name) {
                return Err(format!("listeners: {} is given twice", e.name));
            }
            if e.port != 0 && planned.iter().any(|p| p.bind.port == e.port) {
                return Err(format!("listeners: port {} is given twice", e.port));
            }
            planned.push(PlannedListener {
                bind: HostPort {
                    host: if e.host.is_empty() {
                        "0.0.0.0".to_string()
                    } else {
                        e.host.clone()
                    },
                    port: e.port,
                },
                name: e.name,
                protocol,
                advertised: None,
            });
        }
        for a in &self.advertised_listeners {
            let Some(p) = planned.iter_mut().find(|p| p.name == a.name) else {
                return Err(format!(
                    "advertised.listeners: {} is not one of the listeners",
                    a.name
                ));
            };
            if a.host.is_empty() || is_unspecified(&a.host) {
                return Err(format!(
                    "advertised.listeners: {a} is not an address clients can connect to"
                ));
            }
            if p.advertised.replace(a.host_port()).is_some() {
                return Err(format!("advertised.listeners: {} is given twice", a.name));
            }
        }
        let tls = planned.iter().filter(|p| p.protocol.is_tls());
        if let Some(p) = tls.clone().next() {
            if self.tls.keystore.is_none() {
                return Err(format!(
                    "listener {} is {}: set ssl.keystore.location (a PEM file with the \
                     certificate chain and the private key)",
                    p.name,
                    p.protocol.name()
                ));
            }
        }
        if let Some(console) = &self.console.0 {
            let taken = planned.iter().find(|p| p.bind.port == console.port);
            if let Some(p) = taken.filter(|_| console.port != 0) {
                return Err(format!(
                    "doze.console.listen: port {} is listener {}'s",
                    console.port, p.name
                ));
            }
        }
        let asks_certificates = self.tls.client_auth != ClientAuth::None
            && tls.clone().any(|p| p.protocol == SecurityProtocol::Ssl);
        if asks_certificates && self.tls.truststore.is_none() {
            return Err(
                "ssl.client.auth asks for client certificates: set ssl.truststore.location \
                 (PEM CA certificates)"
                    .into(),
            );
        }
        Ok(planned)
    }
}

/// One listener to open, as `NetSettings::plan` checked it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedListener {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub bind: HostPort,
    /// From `advertised.listeners`; else the listener's own address, once
    /// bound (`advertised_address`).
    pub advertised: Option<HostPort>,
}

impl PlannedListener {
    /// Where clients are told to connect: the configured address, else
    /// the bound one, with `fallback_host` for a listener on every
    /// interface (0.0.0.0 is not an address a client can use).
    pub fn advertised_address(&self, bound_port: u16, fallback_host: &str) -> HostPort {
        if let Some(advertised) = &self.advertised {
            return advertised.clone();
        }
        let host = if is_unspecified(&self.bind.host) {
            fallback_host.to_string()
        } else {
            self.bind.host.clone()
        };
        HostPort {
            host,
            port: bound_port,
        }
    }
}

/// 0.0.0.0 or `::`.
pub fn is_unspecified(host: &str) -> bool {
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified())
}

fn non_empty_path(value: &str) -> Option<PathBuf> {
    (!value.is_empty()).then(|| PathBuf::from(value))
}

/// Builds the settings. The error is one line, for the user.
pub fn load(file: Option<&Path>, sets: &[String]) -> Result<Settings, String> {
    let mut settings = Settings::default();
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        let pairs =
            parse_properties(&text).map_err(|e| format!("config file {}: {e}", path.display()))?;
        for (line, key, value) in pairs {
            let at = format!("config file {} line {line}", path.display());
            settings
                .set_or_warn(&key, &value, &at)
                .map_err(|e| format!("{at}: {e}"))?;
        }
    }
    for set in sets {
        let (key, value) = set
            .split_once('=')
            .ok_or_else(|| format!("--set expects KEY=VALUE, got {set:?}"))?;
        settings
            .set_or_warn(key.trim(), value.trim(), &format!("--set {set}"))
            .map_err(|e| format!("--set {set}: {e}"))?;
    }
    settings.drop_controller_listeners();
    Ok(settings)
}

impl Settings {
    /// A setting, or for a `KAFKA_ONLY` key a warning (`at` says where).
    fn set_or_warn(&mut self, key: &str, value: &str, at: &str) -> Result<(), String> {
        if KAFKA_ONLY.contains(&key) {
            if key == "controller.listener.names" {
                self.controller_listeners = value
                    .split(',')
                    .map(|n| n.trim().to_ascii_uppercase())
                    .filter(|n| !n.is_empty())
                    .collect();
            }
            let hint = match key {
                "log.dirs" | "log.dir" | "metadata.log.dir" => " (doze uses --data-dir)",
                _ => "",
            };
            self.warnings.push(format!(
                "{at}: {key} means nothing on one doze node; ignored{hint}"
            ));
            return Ok(());
        }
        if NOT_ENFORCED.contains(&key) {
            self.warnings
                .push(format!("{at}: {key} is not enforced by doze; ignored"));
            return Ok(());
        }
        if key == REBALANCE_PROTOCOLS {
            return self.rebalance_protocols(value, at);
        }
        if let Some((_, kind)) = UNSERVED_GROUP_PREFIXES
            .iter()
            .find(|(prefix, _)| key.starts_with(prefix))
        {
            self.warnings.push(format!(
                "{at}: {key} configures {kind} groups, which doze does not serve; ignored"
            ));
            return Ok(());
        }
        self.set(key, value)
    }

    /// `group.coordinator.rebalance.protocols`: Kafka's names only; doze
    /// serves `classic`, so the list must hold it (Kafka refuses a list
    /// without it too: KafkaConfig.scala, "Disabling the 'classic' protocol
    /// is not supported"), and the others are ignored with a warning.
    fn rebalance_protocols(&mut self, value: &str, at: &str) -> Result<(), String> {
        let listed: Vec<&str> = value
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        if let Some(bad) = listed.iter().find(|p| !KAFKA_PROTOCOLS.contains(p)) {
            return Err(format!(
                "{REBALANCE_PROTOCOLS}: {bad} is not a rebalance protocol ({})",
                KAFKA_PROTOCOLS.join(", ")
            ));
        }
        if !listed.contains(&"classic") {
            return Err(format!(
                "{REBALANCE_PROTOCOLS}: doze serves the classic protocol only, so the list must hold classic"
            ));
        }
        let others: Vec<&str> = listed.into_iter().filter(|p| *p != "classic").collect();
        if !others.is_empty() {
            self.warnings.push(format!(
                "{at}: {REBALANCE_PROTOCOLS}: doze serves the classic protocol only; {} ignored",
                others.join(", ")
            ));
        }
        Ok(())
    }

    /// The listeners `controller.listener.names` names are KRaft's
    /// controller's: doze has none, so they are not opened.
    fn drop_controller_listeners(&mut self) {
        if self.controller_listeners.is_empty() {
            return;
        }
        let controllers = std::mem::take(&mut self.controller_listeners);
        if let Some(list) = self.net.listeners.as_mut() {
            list.retain(|e| !controllers.contains(&e.name));
        }
        self.net
            .advertised_listeners
            .retain(|e| !controllers.contains(&e.name));
        if self.net.listeners.as_ref().is_some_and(|l| l.is_empty()) {
            self.net.listeners = None;
        }
    }

    /// One setting: the network layer's, or the core's.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        if self.net.set(key, value)? {
            return Ok(());
        }
        self.broker.set(key, value)
    }
}

/// Parses Java-properties text into `(line number, key, value)` triples.
///
/// Supported, as in `java.util.Properties`: blank lines, `#` and `!` comments,
/// `=` or `:` between key and value, whitespace around both, and a line ending
/// in an odd number of backslashes continuing on the next. Not supported:
/// backslash escapes and whitespace as the only separator; broker configs do
/// not need them, and a line without `=` or `:` is reported, not guessed at.
pub fn parse_properties(text: &str) -> Result<Vec<(usize, String, String)>, String> {
    let mut pairs = Vec::new();
    // A logical line may span several physical lines; it is reported by the
    // number of its first one.
    let mut logical = String::new();
    let mut first_line = 0;
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim_start();
        if logical.is_empty() {
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            first_line = index + 1;
        }
        let backslashes = line.chars().rev().take_while(|&c| c == '\\').count();
        if backslashes % 2 == 1 {
            logical.push_str(&line[..line.len() - 1]);
            continue;
        }
        logical.push_str(line);
        pairs.push(split_pair(first_line, &logical)?);
        logical.clear();
    }
    if !logical.is_empty() {
        // The file ended inside a continuation; what was gathered still counts.
        pairs.push(split_pair(first_line, &logical)?);
    }
    Ok(pairs)
}

fn split_pair(line: usize, text: &str) -> Result<(usize, String, String), String> {
    let Some(at) = text.find(['=', ':']) else {
        return Err(format!("line {line}: expected key=value, got {text:?}"));
    };
    let key = text[..at].trim();
    if key.is_empty() {
        return Err(format!("line {line}: empty key"));
    }
    Ok((line, key.to_string(), text[at + 1..].trim().to_string()))
}

/// A `HOST:PORT` flag value. IPv6 hosts are written in brackets
/// (`[::1]:9092`) and kept without them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl FromStr for HostPort {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("expected HOST:PORT, got {s:?}");
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (host, port) = rest.split_once("]:").ok_or_else(bad)?;
            (host, port)
        } else {
            s.rsplit_once(':').ok_or_else(bad)?
        };
        if host.is_empty() || host.contains(['[', ']']) {
            return Err(bad());
        }
        let port = port.parse().map_err(|_| format!("bad port in {s:?}"))?;
        Ok(Self {
            host: host.to_string(),
            port,
        })
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    /// The settings of Kafka 4.x's stock KRaft `config/server.properties`,
    /// in its order: it loads, each property that means nothing here gives
    /// one warning, the controller's listener is not opened.
    #[test]
    fn a_stock_kafka_server_properties_loads_with_warnings() {
        let stock = "\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
";
        let dir = std::env::temp_dir().join(format!("doze-stock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("server.properties");
        std::fs::write(&file, stock).unwrap();
        let settings = load(Some(&file), &[]).expect("a stock server.properties loads");
        assert_eq!(settings.warnings.len(), 16, "{:#?}", settings.warnings);
        assert!(settings.warnings[0]
            .ends_with("line 1: process.roles means nothing on one doze node; ignored"));
        assert!(settings
            .warnings
            .iter()
            .any(|w| w.contains("log.dirs") && w.contains("--data-dir")));
        let listen = HostPort::from_str("127.0.0.1:9092").unwrap();
        let planned = settings.net.plan(&listen).unwrap();
        let names: Vec<&str> = planned.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["PLAINTEXT"],
            "the controller's listener is not opened"
        );
        assert_eq!(settings.broker.segment_bytes, 1073741824);

        // A misspelt property is still refused, with its line.
        std::fs::write(&file, format!("{stock}log.segmnet.bytes=1\n")).unwrap();
        let err = load(Some(&file), &[]).unwrap_err();
        assert!(
            err.contains("line 25") && err.contains("log.segmnet.bytes"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    use super::*;

    /// Properties Kafka users set beyond the stock file: each loads, the
    /// ones doze does not honour with one warning that says which kind.
    #[test]
    fn client_limits_take_kafkas_names() {
        let sets = |s: &[&str]| load(None, &s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let defaults = sets(&[]).unwrap().net.limits;
        assert_eq!(defaults.connections.max_connections, 2147483647);
        assert_eq!(defaults.connections.max_connections_per_ip, 2147483647);
        assert_eq!(defaults.queued_request_bytes_max, 64 << 20);
        assert_eq!(defaults.sasl_server_max_receive_bytes, 524288);
        let set = sets(&[
            "max.connections=100",
            "max.connections.per.ip=10",
            "max.connections.per.ip.overrides=127.0.0.1:50,10.1.2.3:0",
            "queued.max.request.bytes=104857600",
            "sasl.server.max.receive.size=65536",
        ])
        .unwrap();
        assert!(set.warnings.is_empty(), "{:?}", set.warnings);
        let l = set.net.limits;
        assert_eq!(l.connections.max_connections, 100);
        assert_eq!(l.connections.max_connections_per_ip, 10);
        assert_eq!(
            l.connections.overrides,
            [("127.0.0.1".to_string(), 50), ("10.1.2.3".to_string(), 0)]
        );
        assert_eq!(l.queued_request_bytes_max, 100 << 20);
        assert_eq!(l.sasl_server_max_receive_bytes, 65536);
        for bad in [
            "queued.max.request.bytes=-1",
            "queued.max.request.bytes=1048576",
            "sasl.server.max.receive.size=0",
            "sasl.server.max.receive.size=104857600",
            "max.connections=lots",
        ] {
            assert!(sets(&[bad]).is_err(), "{bad} is refused");
        }
        // Checked together when the listeners are planned.
        let listen: HostPort = "127.0.0.1:9092".parse().unwrap();
        let alone = sets(&["max.connections.per.ip=0"]).unwrap();
        assert!(alone.net.plan(&listen).is_err());
    }

    #[test]
    fn tuned_kafka_properties_load_with_warnings() {
        let dir = std::env::temp_dir().join(format!("doze-tuned-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("server.properties");
        let mut text = String::new();
        for key in KAFKA_ONLY.iter().chain(NOT_ENFORCED) {
            text.push_str(&format!("{key}=1\n"));
        }
        text.push_str("log.retention.minutes=90\nlog.message.timestamp.type=LogAppendTime\n");
        std::fs::write(&file, text).unwrap();
        let settings = load(Some(&file), &[]).expect("loads");
        assert_eq!(
            settings.warnings.len(),
            KAFKA_ONLY.len() + NOT_ENFORCED.len()
        );
        let not_enforced = settings
            .warnings
            .iter()
            .filter(|w| w.ends_with("is not enforced by doze; ignored"))
            .count();
        assert_eq!(not_enforced, NOT_ENFORCED.len());
        assert_eq!(settings.broker.retention_ms, 90 * 60_000);
        assert_eq!(settings.broker.message_timestamp_type, "LogAppendTime");
        // Kafka 4's default protocols, written out: classic is served, the
        // other is warned about; a list without classic is refused.
        std::fs::write(
            &file,
            "group.coordinator.rebalance.protocols=classic,consumer\n\
             group.consumer.heartbeat.interval.ms=5000\n",
        )
        .unwrap();
        let settings = load(Some(&file), &[]).expect("loads");
        assert_eq!(settings.warnings.len(), 2, "{:#?}", settings.warnings);
        assert!(settings.warnings[0].ends_with("classic protocol only; consumer ignored"));
        for refused in ["consumer", "classic,bogus"] {
            std::fs::write(
                &file,
                format!("group.coordinator.rebalance.protocols={refused}\n"),
            )
            .unwrap();
            let err = load(Some(&file), &[]).unwrap_err();
            assert!(err.contains("line 1"), "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        // No key is both ignored here and the core's.
        for key in KAFKA_ONLY.iter().chain(NOT_ENFORCED) {
            let mut core = doze_core::BrokerConfig::default();
            assert!(core.set(key, "1").is_err(), "{key} is a core property");
        }
    }

    #[test]
    fn properties_comments_separators_and_continuations() {
        let text = "\
# a comment
! another comment

log.segment.bytes = 1048576
num.partitions:3
cluster.id=abc\\
   def
  auto.create.topics.enable=false
";
        let pairs = parse_properties(text).unwrap();
        let pairs: Vec<_> = pairs
            .iter()
            .map(|(l, k, v)| (*l, k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            pairs,
            vec![
                (4, "log.segment.bytes", "1048576"),
                (5, "num.partitions", "3"),
                (6, "cluster.id", "abcdef"),
                (8, "auto.create.topics.enable", "false"),
            ]
        );
    }

    #[test]
    fn properties_errors_name_the_line() {
        let err = parse_properties("a=1\n\njust-a-word\n").unwrap_err();
        assert!(err.starts_with("line 3:"), "{err}");
        let err = parse_properties("=1\n").unwrap_err();
        assert!(err.contains("empty key"), "{err}");
        // An escaped trailing backslash does not continue the line.
        let pairs = parse_properties("a=x\\\\\nb=2\n").unwrap();
        assert_eq!(pairs.len(), 2);
    }

    #[test]
    fn load_applies_file_then_flags() {
        let path = std::env::temp_dir().join(format!(
            "doze-config-test-{}.properties",
            std::process::id()
        ));
        std::fs::write(&path, "log.segment.bytes=1048576\nnum.partitions=3\n").unwrap();
        let settings = load(Some(&path), &["num.partitions=5".to_string()])
            .unwrap()
            .broker;
        assert_eq!(settings.segment_bytes, 1_048_576);
        assert_eq!(settings.default_partitions, 5);

        std::fs::write(&path, "# fine\nno.such.key=1\n").unwrap();
        let err = load(Some(&path), &[]).unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        std::fs::remove_file(&path).unwrap();

        assert!(load(None, &["missing-equals".to_string()]).is_err());
        assert!(load(None, &["log.segment.bytes=tiny".to_string()]).is_err());
    }

    #[test]
    fn log_cleaner_defaults() {
        let sets = [
            "log.cleanup.policy=compact, delete",
            "log.cleaner.min.cleanable.ratio=0.25",
            "log.cleaner.min.compaction.lag.ms=1000",
            "log.cleaner.max.compaction.lag.ms=60000",
            "log.cleaner.delete.retention.ms=5000",
            "log.roll.hours=2",
        ]
        .map(String::from);
        let settings = load(None, &sets).unwrap().broker;
        assert_eq!(settings.cleanup_policy, "compact,delete");
        assert_eq!(settings.min_cleanable_ratio, 0.25);
        assert_eq!(settings.min_compaction_lag_ms, 1000);
        assert_eq!(settings.max_compaction_lag_ms, 60_000);
        assert_eq!(settings.delete_retention_ms, 5000);
        assert_eq!(settings.segment_ms, 2 * 3_600_000);
        let settings = load(None, &["log.roll.ms=1500".to_string()])
            .unwrap()
            .broker;
        assert_eq!(settings.segment_ms, 1500);
        for bad in [
            "log.cleanup.policy=none",
            "log.cleaner.min.cleanable.ratio=1.5",
            "log.roll.ms=0",
            "log.cleaner.max.compaction.lag.ms=0",
        ] {
            let err = load(None, &[bad.to_string()]).unwrap_err();
            assert!(err.contains("Invalid value"), "{bad}: {err}");
        }
    }

    #[test]
    fn host_port() {
        let hp: HostPort = "127.0.0.1:9092".parse().unwrap();
        assert_eq!((hp.host.as_str(), hp.port), ("127.0.0.1", 9092));
        let hp: HostPort = "[::1]:19092".parse().unwrap();
        assert_eq!((hp.host.as_str(), hp.port), ("::1", 19092));
        assert_eq!(hp.to_string(), "[::1]:19092");
        assert!("localhost".parse::<HostPort>().is_err());
        assert!(":9092".parse::<HostPort>().is_err());
        assert!("host:99999".parse::<HostPort>().is_err());
        assert!("::1:9092"
            .parse::<HostPort>()
            .is_ok_and(|hp| hp.host == "::1"));
    }

    fn plan(sets: &[&str]) -> Result<Vec<PlannedListener>, String> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let listen: HostPort = "127.0.0.1:9092".parse().unwrap();
        load(None, &sets)?.net.plan(&listen)
    }

    #[test]
    fn listeners_default_to_listen() {
        let planned = plan(&[]).unwrap();
        assert_eq!(planned.len(), 1);
        assert_eq!(planned[0].name, "PLAINTEXT");
        assert_eq!(planned[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(planned[0].bind.to_string(), "127.0.0.1:9092");
        assert_eq!(planned[0].advertised, None);
        let planned = plan(&["advertised.listeners=PLAINTEXT://example.com:19092"]).unwrap();
        assert_eq!(
            planned[0].advertised.as_ref().map(ToString::to_string),
            Some("example.com:19092".to_string())
        );
    }

    #[test]
    fn listeners_names_protocols_and_advertised_addresses() {
        let planned = plan(&[
            "listeners=PLAINTEXT://127.0.0.1:9092, sasl_ssl://0.0.0.0:9094,INTERNAL://:9095,\
             EXTERNAL://[::1]:9096",
            "listener.security.protocol.map=INTERNAL:SASL_PLAINTEXT,EXTERNAL:SSL",
            "ssl.keystore.location=/keys/broker.pem",
            "advertised.listeners=SASL_SSL://kafka.example.com:9094",
        ])
        .unwrap();
        let summary: Vec<_> = planned
            .iter()
            .map(|p| (p.name.as_str(), p.protocol, p.bind.to_string()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "PLAINTEXT",
                    SecurityProtocol::Plaintext,
                    "127.0.0.1:9092".into()
                ),
                ("SASL_SSL", SecurityProtocol::SaslSsl, "0.0.0.0:9094".into()),
                (
                    "INTERNAL",
                    SecurityProtocol::SaslPlaintext,
                    "0.0.0.0:9095".into()
                ),
                ("EXTERNAL", SecurityProtocol::Ssl, "[::1]:9096".into()),
            ]
        );
        // Configured, else the bound address, 0.0.0.0 replaced.
        let advertised: Vec<_> = planned
            .iter()
            .map(|p| {
                p.advertised_address(p.bind.port + 1, "broker.local")
                    .to_string()
            })
            .collect();
        assert_eq!(
            advertised,
            vec![
                "127.0.0.1:9093",
                "kafka.example.com:9094",
                "broker.local:9096",
                "[::1]:9097"
            ]
        );
    }

    #[test]
    fn console_listen() {
        let console = |sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            load(None, &sets).map(|s| s.net.console.0)
        };
        let default = console(&[]).unwrap().unwrap();
        assert_eq!(default.to_string(), "127.0.0.1:8092");
        assert_eq!(console(&["doze.console.listen=none"]).unwrap(), None);
        assert_eq!(console(&["doze.console.listen=NONE"]).unwrap(), None);
        let any = console(&["doze.console.listen=[::1]:0"]).unwrap().unwrap();
        assert_eq!((any.host.as_str(), any.port), ("::1", 0));
        for bad in [
            "doze.console.listen=",
            "doze.console.listen=8092",
            "doze.console.listen=off",
        ] {
            let err = console(&[bad]).unwrap_err();
            assert!(err.contains("doze.console.listen"), "{bad}: {err}");
        }
        // Not on a Kafka listener's port (0 is any free port, so two may ask).
        let err = plan(&["doze.console.listen=127.0.0.1:9092"]).unwrap_err();
        assert!(err.contains("listener PLAINTEXT's"), "{err}");
        plan(&[
            "doze.console.listen=127.0.0.1:0",
            "listeners=PLAINTEXT://:0",
        ])
        .unwrap();
    }

    #[test]
    fn listener_mistakes_are_refused() {
        let tls = "ssl.keystore.location=/k.pem";
        for (sets, wanted) in [
            (vec!["listeners=CUSTOM://:9092"], "no security protocol"),
            (vec!["listeners=PLAINTEXT"], "NAME://HOST:PORT"),
            (vec!["listeners=PLAINTEXT://:x"], "bad port"),
            (vec!["listeners="], "at least one"),
            (
                vec!["listeners=PLAINTEXT://:9092,plaintext://:9093"],
                "given twice",
            ),
            (
                vec!["listeners=PLAINTEXT://:9092,SASL_PLAINTEXT://:9092"],
                "port 9092 is given twice",
            ),
            (vec!["listeners=SSL://:9093"], "ssl.keystore.location"),
            (
                vec!["listeners=SSL://:9093", tls, "ssl.client.auth=required"],
                "ssl.truststore.location",
            ),
            (vec!["ssl.client.auth=maybe"], "none, requested or required"),
            (vec!["ssl.keystore.type=JKS"], "only PEM"),
            (
                vec!["listener.security.protocol.map=A:TLS"],
                "unknown security protocol",
            ),
            (
                vec!["advertised.listeners=SSL://h:1"],
                "not one of the listeners",
            ),
            (
                vec!["advertised.listeners=PLAINTEXT://0.0.0.0:9092"],
                "not an address clients can connect to",
            ),
        ] {
            let err = plan(&sets).unwrap_err();
            assert!(err.contains(wanted), "{sets:?}: {err}");
        }
        // Client certificates are asked on SSL listeners only.
        plan(&[
            "listeners=SASL_SSL://:9094",
            tls,
            "ssl.client.auth=required",
        ])
        .unwrap();
        // Unknown keys still reach the core, which refuses them.
        assert!(plan(&["ssl.no.such.key=1"])
            .unwrap_err()
            .contains("unknown broker property"));
    }
}
