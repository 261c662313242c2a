//! Topics and their partition logs, as the broker holds them in memory.
//! Changes arrive here only after meta.db has stored them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::io::{DiskOp, PartitionDir};
use crate::log::PartitionLog;
use crate::meta::TopicRecord;
use crate::metrics::TopicCounters;
use crate::partition::Partition;
use crate::topic_config::{self, ProducePrep, StoredCompression};

pub use crate::partition_key::PartitionKey;

pub(crate) struct Topic {
    pub id: Uuid,
    /// The topic's name, shared by its partitions' keys and directories.
    pub name: Arc<str>,
    /// The same name as a protocol string, which responses share.
    pub name_bytes: kafka_protocol::protocol::StrBytes,
    pub record: TopicRecord,
    /// The configs a produce checks, read from `record` and the broker's
    /// defaults whenever `record` changes (never per request).
    pub append: topic_config::AppendConfig,
    /// The partitions, by index; each holds all its state, so removing the
    /// topic drops it all.
    pub partitions: Vec<Partition>,
    /// Bytes and records in and out, for operators (`crate::metrics`).
    pub counters: TopicCounters,
}

impl Topic {
    /// The effective value of a topic config: the override, else the broker default.
    pub fn config(&self, broker: &BrokerConfig, key: &str) -> Option<String> {
        effective_config(&self.record, broker, key)
    }

    pub fn config_i64(&self, broker: &BrokerConfig, key: &str) -> i64 {
        self.config(broker, key)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("topic config {key} has no numeric value"))
    }

    /// What the log cleaner and retention need of this topic's configs.
    pub fn cleanup_config(&self, broker: &BrokerConfig) -> topic_config::CleanupConfig {
        topic_config::CleanupConfig::from_values(|key| {
            self.config(broker, key)
                .unwrap_or_else(|| panic!("topic config {key} is unknown"))
        })
    }

    /// segment.bytes and segment.ms, which every partition log is given.
    fn roll_limits(&self, broker: &BrokerConfig) -> (u64, i64) {
        let segment_bytes = self.config_i64(broker, "segment.bytes");
        let segment_bytes = u64::try_from(segment_bytes).expect("segment.bytes is positive");
        (segment_bytes, self.config_i64(broker, "segment.ms"))
    }

    /// Puts a stored record in force, with the produce checks read from it
    /// (`append`): where a topic's record changes after `insert`. Returns
    /// whether what a driver needs to prepare Produce batches changed
    /// (`produce_prep`), for a topic that stores a codec before or after.
    fn set_record(&mut self, broker: &BrokerConfig, record: TopicRecord) -> bool {
        let before = self.append.produce_prep();
        self.append = append_config(&record, broker);
        self.record = record;
        let after = self.append.produce_prep();
        let codec = |p: ProducePrep| p.compression != StoredCompression::Producer;
        after != before && (codec(before) || codec(after))
    }

    /// A new partition `p` with an empty log, with the topic's roll limits.
    fn new_partition(&self, broker: &BrokerConfig, p: i32) -> Partition {
        let (segment_bytes, segment_ms) = self.roll_limits(broker);
        let dir = PartitionDir::new(Arc::clone(&self.name), p);
        let mut log = PartitionLog::new(dir, segment_bytes);
        log.set_segment_ms(segment_ms);
        Partition::new(log)
    }

    /// The disk operations that delete the topic's data, partition by
    /// partition (once it is removed).
    pub fn delete_ops(&self) -> Vec<(PartitionKey, DiskOp)> {
        (0..)
            .zip(self.partitions.iter())
            .map(|(p, part)| (self.key(p), part.log().delete_all()))
            .collect()
    }

    pub fn key(&self, partition: i32) -> PartitionKey {
        PartitionKey {
            topic: Arc::clone(&self.name),
            id: self.id,
            partition,
        }
    }
}

#[derive(Default)]
pub(crate) struct Topics {
    map: BTreeMap<String, Topic>,
    /// Names with a meta.db change in flight (create, grow, delete). Admin
    /// requests touching one wait until it completes, so meta.db and memory
    /// see the changes of one topic in the same order.
    busy: BTreeSet<String>,
    /// Topic ids made so far (feeds `new_topic_id`).
    ids_made: u64,
    /// Topics whose compression.type changed from or to something other
    /// than `producer` (created, altered, deleted: `Producer`), not yet
    /// told to the driver (`Output::TopicCompression`).
    compression_changes: Vec<(String, ProducePrep)>,
}

impl Topics {
    pub fn next_id(&mut self, name: &str, now_ms: i64) -> Uuid {
        self.ids_made += 1;
        new_topic_id(name, now_ms, self.ids_made)
    }

    /// The compression.type changes the driver has not been told of.
    pub fn take_compression_changes(&mut self) -> Vec<(String, ProducePrep)> {
        std::mem::take(&mut self.compression_changes)
    }

    pub fn mark_busy(&mut self, name: &str) {
        let fresh = self.busy.insert(name.to_string());
        assert!(fresh, "topic {name} already has a change in flight");
    }

    pub fn unmark_busy(&mut self, name: &str) {
        let was = self.busy.remove(name);
        assert!(was, "topic {name} had no change in flight");
    }

    pub fn is_busy(&self, name: &str) -> bool {
        self.busy.contains(name)
    }

    pub fn busy_count(&self) -> usize {
        self.busy.len()
    }

    pub fn get(&self, name: &str) -> Option<&Topic> {
        self.map.get(name)
    }

    pub fn names(&self) -> Vec<String> {
        self.map.keys().cloned().collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Topic)> {
        self.map.iter()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionLog> {
        let p = usize::try_from(partition).ok()?;
        self.map.get(topic)?.partitions.get(p).map(Partition::log)
    }

    pub fn partition_by_key(&self, key: &PartitionKey) -> Option<&PartitionLog> {
        self.get_partition(key).map(Partition::log)
    }

    /// The partition a key names; `None` once its topic is deleted (a key
    /// of an earlier incarnation names nothing).
    pub fn get_partition(&self, key: &PartitionKey) -> Option<&Partition> {
        let topic = self.map.get(&*key.topic).filter(|t| t.id == key.id)?;
        topic.partitions.get(usize::try_from(key.partition).ok()?)
    }

    pub fn get_partition_mut(&mut self, key: &PartitionKey) -> Option<&mut Partition> {
        let topic = self.map.get_mut(&*key.topic).filter(|t| t.id == key.id)?;
        topic
            .partitions
            .get_mut(usize::try_from(key.partition).ok()?)
    }

    /// Every partition with its key, in key order (topic name, then
    /// partition: only one incarnation of a name exists at a time), which is
    /// the order of a `BTreeSet<PartitionKey>` of them.
    pub fn partitions(&self) -> impl Iterator<Item = (PartitionKey, &Partition)> {
        self.map.values().flat_map(|t| {
            (0..)
                .zip(t.partitions.iter())
                .map(|(p, part)| (t.key(p), part))
        })
    }

    /// `partitions`, to change.
    pub fn partitions_mut(&mut self) -> impl Iterator<Item = (PartitionKey, &mut Partition)> {
        self.map.values_mut().flat_map(|t| {
            let Topic {
                id,
                name,
                partitions,
                ..
            } = t;
            (0..).zip(partitions.iter_mut()).map(|(p, part)| {
                let key = PartitionKey {
                    topic: Arc::clone(name),
                    id: *id,
                    partition: p,
                };
                (key, part)
            })
        })
    }

    /// A partition with its topic's counters, in one lookup (the produce
    /// path bumps them with every append).
    pub fn partition_and_counters_mut(
        &mut self,
        key: &PartitionKey,
    ) -> Option<(&mut Partition, &mut TopicCounters)> {
        let topic = self.map.get_mut(&*key.topic).filter(|t| t.id == key.id)?;
        let log = topic
            .partitions
            .get_mut(usize::try_from(key.partition).ok()?)?;
        Some((log, &mut topic.counters))
    }

    /// A topic's counters, by name; `None` once it is gone.
    pub fn counters_mut(&mut self, name: &str) -> Option<&mut TopicCounters> {
        self.map.get_mut(name).map(|t| &mut t.counters)
    }

    /// Adds a topic whose record meta.db has stored.
    pub fn insert(&mut self, config: &BrokerConfig, name: &str, record: TopicRecord) {
        let id = parse_id(&record.id);
        let mut topic = Topic {
            id,
            name: Arc::from(name),
            name_bytes: kafka_protocol::protocol::StrBytes::from_string(name.to_owned()),
            append: append_config(&record, config),
            record: record.clone(),
            partitions: Vec::new(),
            counters: TopicCounters::default(),
        };
        for p in 0..record.partitions {
            let partition = topic.new_partition(config, p);
            topic.partitions.push(partition);
        }
        if topic.append.compression != StoredCompression::Producer {
            let change = (name.to_string(), topic.append.produce_prep());
            self.compression_changes.push(change);
        }
        let previous = self.map.insert(name.to_string(), topic);
        assert!(previous.is_none(), "topic {name} inserted twice");
    }

    /// Grows a topic to the partition count of its stored record.
    pub fn grow(&mut self, config: &BrokerConfig, name: &str, record: TopicRecord) {
        let topic = self.map.get_mut(name).expect("grow of a missing topic");
        assert!(
            record.partitions >= topic.partitions.len() as i32,
            "partitions never shrink"
        );
        // Growing keeps the configs.
        let _ = topic.set_record(config, record);
        for p in topic.partitions.len() as i32..topic.record.partitions {
            let partition = topic.new_partition(config, p);
            topic.partitions.push(partition);
        }
    }

    /// Replaces a topic's config overrides with those of its stored record;
    /// the logs take the new roll limits at once (the next append), and the
    /// other configs are read where they are used.
    pub fn set_configs(&mut self, config: &BrokerConfig, name: &str, record: TopicRecord) {
        let topic = self
            .map
            .get_mut(name)
            .expect("config change of a missing topic");
        assert_eq!(
            topic.record.id, record.id,
            "config change of another incarnation"
        );
        assert_eq!(
            topic.record.partitions, record.partitions,
            "a config change keeps the partitions"
        );
        if topic.set_record(config, record) {
            let change = (name.to_string(), topic.append.produce_prep());
            self.compression_changes.push(change);
        }
        let (segment_bytes, segment_ms) = topic.roll_limits(config);
        for log in topic.partitions.iter_mut().map(Partition::log_mut) {
            log.set_segment_bytes(segment_bytes);
            log.set_segment_ms(segment_ms);
        }
    }

    /// Removes a topic, with its partitions and all they hold, and returns
    /// it; the caller emits the deletion of its data (`Topic::delete_ops`).
    pub fn remove(&mut self, name: &str) -> Option<Topic> {
        let topic = self.map.remove(name)?;
        if topic.append.compression != StoredCompression::Producer {
            let gone = ProducePrep {
                compression: StoredCompression::Producer,
                ..topic.append.produce_prep()
            };
            self.compression_changes.push((name.to_string(), gone));
        }
        Some(topic)
    }

    /// Loads the topics stored in meta.db (in its order), each partition
    /// with an empty log until its recovery installs the real one
    /// (`install`).
    pub fn load(&mut self, config: &BrokerConfig, stored: Vec<(String, TopicRecord)>) {
        for (name, record) in stored {
            self.insert(config, &name, record);
        }
    }

    /// The partition a directory found at start-up belongs to, with its
    /// segment.bytes; `None` for a directory no topic owns.
    pub fn recovering(
        &self,
        config: &BrokerConfig,
        dir: &PartitionDir,
    ) -> Option<(PartitionKey, u64)> {
        let topic = self.map.get(&*dir.topic)?;
        let p = usize::try_from(dir.partition).ok()?;
        topic.partitions.get(p)?;
        let (segment_bytes, _) = topic.roll_limits(config);
        Some((topic.key(dir.partition), segment_bytes))
    }

    /// Puts a recovered log in its partition's place. It takes the roll
    /// limits of the empty log it replaces, which `insert` gave the topic's.
    pub fn install(&mut self, key: &PartitionKey, log: PartitionLog) -> &mut Partition {
        let slot = self
            .get_partition_mut(key)
            .expect("a recovering partition exists");
        slot.install(log);
        slot
    }

    /// Every partition's key.
    pub fn keys(&self) -> Vec<PartitionKey> {
        self.map
            .values()
            .flat_map(|t| (0..t.partitions.len() as i32).map(|p| t.key(p)))
            .collect()
    }

    /// Deletes segments past retention in every partition. retention.ms and
    /// retention.bytes apply only where cleanup.policy has `delete`, as in
    /// Kafka's UnifiedLog.deleteOldSegments; a compacted topic keeps its
    /// segments for the cleaner (both rules off: -1).
    /// `skip` is a partition the log cleaner is rewriting: its segments stay
    /// put until the pass is over (the next check deletes what is due).
    /// A busy topic (a meta.db change in flight) is skipped too: a
    /// DeleteRecords storing a start must answer the start it stored, not
    /// one retention moved past it meanwhile, which a power cut could undo
    /// (found by the simulator, swarm seed 76112353).
    pub fn apply_retention(
        &mut self,
        config: &BrokerConfig,
        now_ms: i64,
        skip: Option<&PartitionKey>,
    ) -> Vec<(PartitionKey, DiskOp)> {
        let mut ops = Vec::new();
        let busy = &self.busy;
        for topic in self.map.values_mut() {
            if busy.contains(&*topic.name) {
                continue;
            }
            let (retention_ms, retention_bytes) = if topic.cleanup_config(config).delete {
                (
                    topic.config_i64(config, "retention.ms"),
                    topic.config_i64(config, "retention.bytes"),
                )
            } else {
                (-1, -1)
            };
            let (id, name) = (topic.id, &topic.name);
            for (p, part) in topic.partitions.iter_mut().enumerate() {
                let key = PartitionKey {
                    topic: Arc::clone(name),
                    id,
                    partition: p as i32,
                };
                if skip == Some(&key) {
                    continue;
                }
                for op in part
                    .log_mut()
                    .apply_retention(now_ms, retention_ms, retention_bytes)
                {
                    ops.push((key.clone(), op));
                }
            }
        }
        ops
    }
}

/// The effective value of a topic config: the record's override, else the
/// broker default.
fn effective_config(record: &TopicRecord, broker: &BrokerConfig, key: &str) -> Option<String> {
    record
        .configs
        .get(key)
        .cloned()
        .or_else(|| topic_config::default_value(broker, key))
}

/// What a produce checks of a topic with `record`.
fn append_config(record: &TopicRecord, broker: &BrokerConfig) -> topic_config::AppendConfig {
    topic_config::AppendConfig::from_values(|key| {
        effective_config(record, broker, key)
            .unwrap_or_else(|| panic!("topic config {key} is unknown"))
    })
}

/// A new topic id. The core has no OS randomness, so ids are derived from the
/// name, the time and a count; they only need to differ between incarnations.
pub(crate) fn new_topic_id(name: &str, now_ms: i64, counter: u64) -> Uuid {
    // FNV-1a over the inputs, widened to 128 bits by two rounds.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in name
        .bytes()
        .chain(now_ms.to_be_bytes())
        .chain(counter.to_be_bytes())
    {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    let hi = h;
    let lo = h.rotate_left(29).wrapping_mul(0x9e3779b97f4a7c15) ^ counter;
    let mut id = ((hi as u128) << 64) | lo as u128;
    // Version 4 / variant bits, so tools print it as a normal UUID.
    id = (id & !(0xf << 76)) | (0x4 << 76);
    id = (id & !(0x3 << 62)) | (0x2 << 62);
    Uuid::from_u128(id)
}

pub(crate) fn parse_id(hex: &str) -> Uuid {
    Uuid::parse_str(hex).unwrap_or_else(|_| Uuid::nil())
}
