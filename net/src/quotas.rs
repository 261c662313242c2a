//! Connection limits: `max.connections` and `max.connections.per.ip` (with
//! `max.connections.per.ip.overrides`), enforced as Kafka's ConnectionQuotas
//! (core/src/main/scala/kafka/network/ConnectionQuotas.scala) enforces them:
//!
//! - broker-wide, the acceptor waits for a free slot before it takes the
//!   next connection (Kafka's `waitForConnectionSlot` blocks its acceptor):
//!   new clients wait in the listen backlog, nobody is refused;
//! - per address, a connection beyond its address's limit is accepted and
//!   closed at once (Kafka's TooManyConnectionsException); the override
//!   list gives some addresses (or host names, resolved at start-up, as
//!   Kafka's `InetAddress.getByName`) limits of their own.
//!
//! Kafka's defaults are unbounded (2147483647) for both. doze keeps a
//! limit of its own beside them, `CONNECTIONS_MAX`, so that file
//! descriptors remain for its segment files: `max.connections` above it
//! means it.

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};

/// Kafka's default for both limits: no limit.
pub const KAFKA_UNLIMITED: usize = i32::MAX as usize;

/// The connection limits as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// `max.connections`.
    pub max_connections: usize,
    /// `max.connections.per.ip`.
    pub max_connections_per_ip: usize,
    /// `max.connections.per.ip.overrides`, as given (`host:count,...`).
    pub overrides: Vec<(String, usize)>,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: KAFKA_UNLIMITED,
            max_connections_per_ip: KAFKA_UNLIMITED,
            overrides: Vec::new(),
        }
    }
}

impl ConnectionLimits {
    /// Parses one of the three settings into `self`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "max.connections" => self.max_connections = count(key, value)?,
            "max.connections.per.ip" => self.max_connections_per_ip = count(key, value)?,
            "max.connections.per.ip.overrides" => self.overrides = overrides(value)?,
            _ => unreachable!("not a connection limit: {key}"),
        }
        Ok(())
    }

    /// Checks the settings together, as Kafka's KafkaConfig does: a
    /// per-address limit of 0 only makes sense with overrides that let
    /// someone in.
    pub fn check(&self) -> Result<(), String> {
        if self.max_connections_per_ip == 0 && self.overrides.is_empty() {
            return Err(
                "max.connections.per.ip is 0: set max.connections.per.ip.overrides \
                        for the addresses that may connect"
                    .into(),
            );
        }
        Ok(())
    }
}

fn count(key: &str, value: &str) -> Result<usize, String> {
    let n: i64 = value
        .trim()
        .parse()
        .map_err(|_| format!("{key}: expected a number, got {value:?}"))?;
    usize::try_from(n).map_err(|_| format!("{key}: must be at least 0, got {n}"))
}

fn overrides(value: &str) -> Result<Vec<(String, usize)>, String> {
    let key = "max.connections.per.ip.overrides";
    value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            // The count follows the last colon: IPv6 addresses have colons.
            let (host, n) = entry
                .rsplit_once(':')
                .ok_or_else(|| format!("{key}: expected HOST:COUNT, got {entry:?}"))?;
            let host = host.trim().trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() {
                return Err(format!("{key}: expected HOST:COUNT, got {entry:?}"));
            }
            Ok((host.to_string(), count(key, n)?))
        })
        .collect()
}

/// Counts connections per address against their limits. Shared by the
/// acceptors; each accepted connection holds an `IpSlot`.
pub struct PerIp {
    default_max: usize,
    overrides: HashMap<IpAddr, usize>,
    counts: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place under its address's limit, freed when dropped.
pub struct IpSlot {
    per_ip: Arc<PerIp>,
    ip: IpAddr,
}

impl PerIp {
    /// `None` when no address has a limit (Kafka's defaults): nothing to
    /// count. Host names in the overrides are resolved here; one that does
    /// not resolve is an error, as in Kafka.
    pub fn new(limits: &ConnectionLimits) -> Result<Option<Arc<Self>>, String> {
        if limits.max_connections_per_ip >= KAFKA_UNLIMITED && limits.overrides.is_empty() {
            return Ok(None);
        }
        let mut overrides = HashMap::new();
        for (host, n) in &limits.overrides {
            let ips: Vec<IpAddr> = match host.parse::<IpAddr>() {
                Ok(ip) => vec![ip],
                Err(_) => (host.as_str(), 0)
                    .to_socket_addrs()
                    .map_err(|e| {
                        format!("max.connections.per.ip.overrides: cannot resolve {host}: {e}")
                    })?
                    .map(|a| a.ip())
                    .collect(),
            };
            for ip in ips {
                overrides.insert(ip, *n);
            }
        }
        Ok(Some(Arc::new(Self {
            default_max: limits.max_connections_per_ip,
            overrides,
            counts: Mutex::new(HashMap::new()),
        })))
    }

    /// A place for one more connection from `ip`, or `Err(limit)` when it
    /// has as many as its limit allows.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<IpSlot, usize> {
        let ip = canonical(ip);
        let max = self.overrides.get(&ip).copied().unwrap_or(self.default_max);
        let mut counts = self
            .counts
            .lock()
            .expect("never poisoned: no panics inside");
        let n = counts.entry(ip).or_insert(0);
        if *n >= max {
            if *n == 0 {
                counts.remove(&ip);
            }
            return Err(max);
        }
        *n += 1;
        Ok(IpSlot {
            per_ip: Arc::clone(self),
            ip,
        })
    }

    /// Connections from `ip` now.
    pub fn count(&self, ip: IpAddr) -> usize {
        let counts = self.counts.lock().expect("never poisoned");
        counts.get(&canonical(ip)).copied().unwrap_or(0)
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut counts = self.per_ip.counts.lock().expect("never poisoned");
        let n = counts
            .get_mut(&self.ip)
            .expect("a slot's address is counted while the slot lives");
        assert!(*n > 0);
        *n -= 1;
        if *n == 0 {
            // Addresses gone leave nothing behind: the map is as large as
            // the addresses connected now.
            counts.remove(&self.ip);
        }
    }
}

/// An IPv4 client on an IPv6 listener (`::ffff:a.b.c.d`) is its IPv4
/// address, as overrides name it.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(sets: &[(&str, &str)]) -> ConnectionLimits {
        let mut l = ConnectionLimits::default();
        for (k, v) in sets {
            l.set(k, v).unwrap();
        }
        l
    }

    #[test]
    fn kafka_defaults_count_nothing() {
        let l = ConnectionLimits::default();
        assert_eq!(l.max_connections, 2147483647);
        assert!(PerIp::new(&l).unwrap().is_none());
    }

    #[test]
    fn an_address_past_its_limit_is_refused_until_one_of_its_connections_goes() {
        let l = limits(&[
            ("max.connections.per.ip", "2"),
            (
                "max.connections.per.ip.overrides",
                "localhost:1,127.0.0.2:0, [::1]:3",
            ),
        ]);
        l.check().unwrap();
        let per_ip = PerIp::new(&l).unwrap().unwrap();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let one = per_ip.admit(a).unwrap();
        let two = per_ip.admit(a).unwrap();
        assert_eq!(per_ip.admit(a).err(), Some(2));
        // Another address has its own count.
        let b = per_ip.admit("10.0.0.2".parse().unwrap()).unwrap();
        drop(one);
        let three = per_ip.admit(a).unwrap();
        assert_eq!(per_ip.count(a), 2);
        drop((two, three, b));
        assert_eq!(per_ip.count(a), 0);
        assert!(
            per_ip.counts.lock().unwrap().is_empty(),
            "nothing left behind"
        );
        // Overrides: by address, by IPv6 address, and a host name resolved.
        assert_eq!(per_ip.admit("127.0.0.2".parse().unwrap()).err(), Some(0));
        let v6: Vec<IpSlot> = (0..3)
            .map(|_| per_ip.admit("::1".parse().unwrap()).unwrap())
            .collect();
        assert_eq!(per_ip.admit("::1".parse().unwrap()).err(), Some(3));
        drop(v6);
        let local = per_ip.admit("127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(per_ip.admit("127.0.0.1".parse().unwrap()).err(), Some(1));
        // An IPv4 client seen on an IPv6 socket is the same address.
        assert_eq!(
            per_ip.admit("::ffff:127.0.0.1".parse().unwrap()).err(),
            Some(1)
        );
        drop(local);
    }

    #[test]
    fn bad_settings_are_refused() {
        let mut l = ConnectionLimits::default();
        assert!(l.set("max.connections", "-1").is_err());
        assert!(l.set("max.connections.per.ip", "many").is_err());
        assert!(l
            .set("max.connections.per.ip.overrides", "127.0.0.1")
            .is_err());
        assert!(l.set("max.connections.per.ip.overrides", ":5").is_err());
        l.set("max.connections.per.ip", "0").unwrap();
        assert!(l.check().is_err(), "0 without overrides lets nobody in");
        l.set("max.connections.per.ip.overrides", "127.0.0.1:5")
            .unwrap();
        l.check().unwrap();
    }
}
