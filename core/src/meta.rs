//! meta.db records. Keys are namespaced byte strings; values are JSON, so an
//! operator can read meta.db with any sled tool and a later version can add
//! fields (serde ignores unknown fields, and new fields take defaults).
//!
//! Nothing in memory runs ahead of meta.db: a handler builds the record, emits
//! `Output::Meta`, and applies the change only when `Input::MetaDone` says Ok.
//!
//! Here: the keys and records of what no one module above owns, and the
//! encoding every record is written with. Each subsystem (groups,
//! transactions, checkpoints, security, producer ids) owns its own keys and
//! records and writes them through `encode`; reading them all back at boot
//! is the broker's (`broker/meta_entry.rs`), above every one of them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub(crate) const TOPIC_PREFIX: &str = "topic/";

/// One topic, as stored under `topic/<name>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    /// The topic id (Metadata v10+), as 16 big-endian bytes in hex.
    pub id: String,
    pub partitions: i32,
    /// Topic-level config overrides (name -> value), as CreateTopics gave them.
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

pub fn topic_key(name: &str) -> Vec<u8> {
    format!("{TOPIC_PREFIX}{name}").into_bytes()
}

pub(crate) const LOG_START_PREFIX: &str = "logstart/";

/// A partition's log start offset as DeleteRecords moved it, stored under
/// `logstart/<topic id>/<partition>` (Kafka keeps the same in its
/// log-start-offset-checkpoint file). Start-up takes the larger of it and
/// the first segment's base: retention moves the start by deleting whole
/// segments, which needs no record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogStartRecord {
    pub offset: i64,
}

/// `logstart/<topic id>/<partition>`, the topic id hyphenated as in `ckpt/`.
pub fn log_start_key(topic_id: &uuid::Uuid, partition: i32) -> Vec<u8> {
    format!("{LOG_START_PREFIX}{}/{partition}", topic_id.hyphenated()).into_bytes()
}

/// The meta.db deletes of a deleted topic's log start records.
pub fn log_start_delete_ops(topic_id: &uuid::Uuid, partitions: i32) -> Vec<crate::io::MetaOp> {
    (0..partitions)
        .map(|p| crate::io::MetaOp::Delete {
            key: log_start_key(topic_id, p),
        })
        .collect()
}

pub fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    serde_json::to_vec(record).expect("meta records always serialize")
}
