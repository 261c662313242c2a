//! meta.db's entries read back at start-up: `decode_entry` tells each
//! stored key/value pair's kind by its key and decodes its record. It names
//! every subsystem's record type, so it lives above all of them, with the
//! boot that reads meta.db once and hands each store its own records
//! (`recovery::start`); `crate::meta`, which the subsystems write through,
//! names none. Public as `doze_core::meta_entry` for tools that read a
//! meta.db.

use crate::meta::{LogStartRecord, TopicRecord, LOG_START_PREFIX, TOPIC_PREFIX};

/// A meta.db entry, decoded at boot.
#[derive(Debug)]
pub enum MetaEntry {
    Topic {
        name: String,
        record: TopicRecord,
    },
    ProducerIds(crate::producer::ids::ProducerIdsRecord),
    /// A committed consumer offset, under `offset/<group>/<topic>/<partition>`.
    GroupOffset {
        group: String,
        topic: String,
        partition: i32,
        record: crate::group::OffsetRecord,
    },
    /// A transactional id's state, under `txn/<id>`.
    Txn {
        id: String,
        record: crate::txn::TxnRecord,
    },
    /// A flag of earlier versions (`txnpart/<topic id>/<partition>`), ignored.
    TxnPartitionFlag {
        topic_id: String,
        partition: i32,
    },
    /// A partition's recovery checkpoint: `ckpt/<topic id>/<partition>`.
    Checkpoint {
        topic_id: String,
        partition: i32,
        record: crate::checkpoint::CheckpointRecord,
    },
    /// A partition's log start moved by DeleteRecords:
    /// `logstart/<topic id>/<partition>`.
    LogStart {
        topic_id: String,
        partition: i32,
        record: LogStartRecord,
    },
    /// A user's SCRAM credential: `scram/<mechanism>/<user>`.
    Scram {
        user: String,
        mechanism: crate::security::scram::Mechanism,
        credential: crate::security::scram::Credential,
    },
    /// An ACL: `acl/<sha-256 of the binding>`.
    Acl(crate::security::acl::AclBinding),
}

/// Decodes one meta.db entry; `Err` names what was wrong (boot refuses to
/// guess at a record it cannot read).
pub fn decode_entry(key: &[u8], value: &[u8]) -> Result<MetaEntry, String> {
    if key == crate::producer::ids::META_KEY {
        let record =
            serde_json::from_slice(value).map_err(|e| format!("meta.db producer_ids: {e}"))?;
        return Ok(MetaEntry::ProducerIds(record));
    }
    let key = std::str::from_utf8(key).map_err(|_| "meta.db key is not UTF-8".to_string())?;
    if let Some(name) = key.strip_prefix(TOPIC_PREFIX) {
        let record: TopicRecord =
            serde_json::from_slice(value).map_err(|e| format!("meta.db {key}: {e}"))?;
        return Ok(MetaEntry::Topic {
            name: name.to_string(),
            record,
        });
    }
    if let Some(id) = key.strip_prefix(crate::txn::record::KEY_PREFIX) {
        let record = serde_json::from_slice(value).map_err(|e| format!("meta.db {key}: {e}"))?;
        return Ok(MetaEntry::Txn {
            id: id.to_string(),
            record,
        });
    }
    if let Some(rest) = key.strip_prefix(crate::txn::record::PARTITION_FLAG_PREFIX) {
        let parsed = rest
            .rsplit_once('/')
            .and_then(|(t, p)| Some((t.to_string(), p.parse::<i32>().ok()?)));
        let (topic_id, partition) = parsed.ok_or_else(|| format!("meta.db: bad key {key:?}"))?;
        return Ok(MetaEntry::TxnPartitionFlag {
            topic_id,
            partition,
        });
    }
    if let Some(rest) = key.strip_prefix(crate::checkpoint::KEY_PREFIX) {
        let (topic_id, partition) = crate::checkpoint::parse_key(rest)
            .ok_or_else(|| format!("meta.db: bad key {key:?}"))?;
        let record = serde_json::from_slice(value).map_err(|e| format!("meta.db {key}: {e}"))?;
        return Ok(MetaEntry::Checkpoint {
            topic_id,
            partition,
            record,
        });
    }
    if let Some(rest) = key.strip_prefix(LOG_START_PREFIX) {
        let parsed = rest
            .rsplit_once('/')
            .and_then(|(t, p)| Some((t.to_string(), p.parse::<i32>().ok()?)));
        let (topic_id, partition) = parsed.ok_or_else(|| format!("meta.db: bad key {key:?}"))?;
        let record = serde_json::from_slice(value).map_err(|e| format!("meta.db {key}: {e}"))?;
        return Ok(MetaEntry::LogStart {
            topic_id,
            partition,
            record,
        });
    }
    if let Some(rest) = key.strip_prefix(crate::security::store::SCRAM_PREFIX) {
        let (user, mechanism) = crate::security::store::parse_scram_key(rest)
            .ok_or_else(|| format!("meta.db: bad key {key:?}"))?;
        let credential =
            serde_json::from_slice(value).map_err(|e| format!("meta.db {key}: {e}"))?;
        return Ok(MetaEntry::Scram {
            user,
            mechanism,
            credential,
        });
    }
    if key.starts_with(crate::security::store::ACL_PREFIX) {
        let binding = serde_json::from_slice(value).map_err(|e| format!("meta.db {key}: {e}"))?;
        return Ok(MetaEntry::Acl(binding));
    }
    if let Some((group, topic, partition)) = crate::group::parse_offset_key(key) {
        let record = serde_json::from_slice(value).map_err(|e| format!("meta.db {key}: {e}"))?;
        return Ok(MetaEntry::GroupOffset {
            group,
            topic,
            partition,
            record,
        });
    }
    Err(format!("meta.db: unknown key {key:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::{encode, log_start_key, topic_key};
    use std::collections::BTreeMap;

    #[test]
    fn topic_record_round_trips() {
        let mut configs = BTreeMap::new();
        configs.insert("retention.ms".to_string(), "1000".to_string());
        let r = TopicRecord {
            id: "00".repeat(16),
            partitions: 3,
            configs,
        };
        match decode_entry(&topic_key("a-b"), &encode(&r)).unwrap() {
            MetaEntry::Topic { name, record } => {
                assert_eq!(name, "a-b");
                assert_eq!(record, r);
            }
            other => panic!("decoded as {other:?}"),
        }
    }

    #[test]
    fn group_offset_round_trips() {
        let r = crate::group::OffsetRecord {
            offset: 42,
            leader_epoch: 3,
            metadata: "m".into(),
            commit_timestamp_ms: 7,
            expire_timestamp_ms: Some(9),
        };
        match decode_entry(&crate::group::offset_key("g/1", "t", 2), &encode(&r)).unwrap() {
            MetaEntry::GroupOffset {
                group,
                topic,
                partition,
                record,
            } => {
                assert_eq!((group.as_str(), topic.as_str(), partition), ("g/1", "t", 2));
                assert_eq!(record, r);
            }
            other => panic!("decoded as {other:?}"),
        }
    }

    #[test]
    fn log_start_round_trips() {
        let id = uuid::Uuid::from_u128(0x1234);
        let key = log_start_key(&id, 3);
        assert_eq!(
            String::from_utf8(key.clone()).unwrap(),
            format!("logstart/{}/3", id.hyphenated())
        );
        match decode_entry(&key, &encode(&LogStartRecord { offset: 42 })).unwrap() {
            MetaEntry::LogStart {
                topic_id,
                partition,
                record,
            } => {
                assert_eq!(topic_id, id.hyphenated().to_string());
                assert_eq!(partition, 3);
                assert_eq!(record.offset, 42);
            }
            other => panic!("decoded as {other:?}"),
        }
    }

    #[test]
    fn unknown_key_is_refused() {
        assert!(decode_entry(b"nope/x", b"{}").is_err());
    }
}
