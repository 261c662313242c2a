//! Where the pages' facts come from.
//!
//! - The Kafka protocol, through `client::Client` over the broker's own
//!   in-process connections (`server::InternalConnector`; why not TCP is
//!   said there): Metadata, ListOffsets, Fetch, DescribeProducers,
//!   ListTransactions, DescribeTransactions, ListGroups, DescribeGroups,
//!   OffsetFetch. Those connections may DESCRIBE and READ everything
//!   whatever the ACLs say (`Listener::internal`). A page opens a client,
//!   asks, and drops it: no state is kept between pages.
//! - The data directory, for what no API the broker serves tells (it does
//!   not serve DescribeLogDirs): a partition's segment count and size on
//!   disk, from a listing of `logs/<topic>-<partition>/`.
//! - The broker's settings, for what only they say (`BrokerFacts`).
//!
//! Every request is bounded by `CONSOLE_REQUEST_MS_MAX` and a whole page
//! by `CONSOLE_PAGE_MS_MAX` (`mod.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use doze_core::limits::{CONSOLE_REQUEST_MS_MAX, CONSOLE_RESPONSE_BYTES_MAX};

use crate::client::{self, Client, ClientConfig, TopicPartition};
use crate::server::InternalConnector;

pub type ConsoleClient = Client<InternalConnector>;

/// A client of this broker over an in-process connection.
pub async fn connect(connector: &InternalConnector) -> Result<ConsoleClient, client::Error> {
    let bound = Duration::from_millis(CONSOLE_REQUEST_MS_MAX);
    let config = ClientConfig {
        client_id: "doze-console".into(),
        connect_timeout: bound,
        request_timeout: bound,
        response_bytes_max: CONSOLE_RESPONSE_BYTES_MAX,
        // The internal connection is not a SASL listener: no login.
        sasl: None,
    };
    Client::connect_with(connector.clone(), connector.bootstrap(), config).await
}

/// A partition's segments on disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUse {
    /// `.log` files (segments), without the ones the cleaner stages.
    pub segments: usize,
    /// Their bytes (what Kafka's DescribeLogDirs calls a partition's size).
    pub log_bytes: u64,
    /// The index files beside them (`.index`, `.timeindex`, `.txnindex`).
    pub index_bytes: u64,
}

/// The segments of `tp` under `logs_dir`; None if its directory cannot be
/// read. Blocking: run it off the runtime's threads.
pub fn disk_use(logs_dir: &Path, tp: &TopicPartition) -> Option<DiskUse> {
    let name = doze_core::PartitionDir::new(tp.topic.clone(), tp.partition).dir_name();
    // Kafka's topic names never hold a path separator; make sure.
    if name.contains('/') || name.starts_with('.') {
        return None;
    }
    let mut used = DiskUse::default();
    for entry in std::fs::read_dir(logs_dir.join(name)).ok()? {
        let Ok(entry) = entry else { continue };
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else {
            continue;
        };
        let Some((stem, ext)) = file_name.split_once('.') else {
            continue;
        };
        if stem.parse::<i64>().is_err() {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        match ext {
            "log" => {
                used.segments += 1;
                used.log_bytes += meta.len();
            }
            "index" | "timeindex" | "txnindex" => used.index_bytes += meta.len(),
            _ => {} // .cleaned, .swap: the cleaner's, for a moment
        }
    }
    Some(used)
}

/// `disk_use` of each partition, on a blocking thread; none without a
/// data directory (or if the thread failed).
pub async fn disk_use_of(
    logs_dir: Option<PathBuf>,
    partitions: Vec<TopicPartition>,
) -> BTreeMap<TopicPartition, DiskUse> {
    let Some(logs_dir) = logs_dir else {
        return BTreeMap::new();
    };
    tokio::task::spawn_blocking(move || {
        partitions
            .into_iter()
            .filter_map(|tp| disk_use(&logs_dir, &tp).map(|used| (tp, used)))
            .collect()
    })
    .await
    .unwrap_or_default()
}

/// Wall-clock milliseconds, to age transactions against their timeouts.
pub fn now_ms() -> i64 {
    crate::tools::now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_counted_from_the_directory() {
        let dir = std::env::temp_dir().join(format!("doze-console-disk-{}", std::process::id()));
        let part = dir.join("t-0");
        std::fs::create_dir_all(&part).unwrap();
        for (name, len) in [
            ("00000000000000000000.log", 100),
            ("00000000000000000000.index", 8),
            ("00000000000000000042.log", 50),
            ("00000000000000000042.txnindex", 34),
            ("00000000000000000042.log.cleaned", 999),
            ("notes.txt", 5),
        ] {
            std::fs::write(part.join(name), vec![0u8; len]).unwrap();
        }
        let used = disk_use(&dir, &TopicPartition::new("t", 0)).unwrap();
        assert_eq!(
            used,
            DiskUse {
                segments: 2,
                log_bytes: 150,
                index_bytes: 42,
            }
        );
        assert_eq!(disk_use(&dir, &TopicPartition::new("t", 1)), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
