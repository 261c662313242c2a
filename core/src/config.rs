//! Broker configuration: what the binary's flags and config file set.
//!
//! The settings and their defaults. Reading them by their Kafka property
//! names (`BrokerConfig::set`) and describing them (`describe`) is
//! `crate::properties`: a broker default of a topic config is checked by the
//! topic config's own rules (`crate::topic_config`), which read their
//! defaults from here, so this module stays below them.

use std::collections::BTreeMap;

/// Bugs the simulator must catch (see `BrokerConfig::planted_bug`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// EndTxn answered (and the transaction recorded complete) as soon as
    /// the markers are appended, before they are fsynced.
    EndTxnBeforeMarkersDurable,
    /// read_committed fetches read up to the high watermark, not the LSO.
    ServeAboveLso,
    /// Recovery checkpoints written after any sync, though a
    /// `SyncScope::Logs` sync leaves the index entries below them unsynced.
    CheckpointBeforeIndexesDurable,
    /// A Produce waiting for its sync whose partition is deleted meanwhile
    /// is never answered (nor is anything behind it on its connection).
    HoldProduceOfDeletedPartition,
}

/// Configuration given to `Broker::new`. Defaults follow Apache Kafka.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// A deliberate bug, for proving that the simulator's oracle catches
    /// one. Never set by `set()` (no broker property reaches it) nor by the
    /// binary: only tests and `doze-sim --plant-bug` set it.
    pub planted_bug: Option<PlantedBug>,
    /// How far (bytes made durable) and how long a partition may go without
    /// a recovery checkpoint (`crate::checkpoint`). Not broker properties:
    /// `limits` gives the defaults, and the simulator draws smaller ones so
    /// that its short runs start from checkpoints often.
    pub checkpoint_bytes: u64,
    pub checkpoint_interval_ms: i64,
    pub node_id: i32,
    /// Host and port clients are told to connect to (Metadata, FindCoordinator).
    pub advertised_host: String,
    pub advertised_port: i32,
    pub cluster_id: String,
    /// auto.create.topics.enable
    pub auto_create_topics: bool,
    /// num.partitions
    pub default_partitions: i32,
    /// log.segment.bytes
    pub segment_bytes: u64,
    /// log.retention.ms (-1: forever)
    pub retention_ms: i64,
    /// log.retention.bytes (-1: no limit)
    pub retention_bytes: i64,
    /// log.retention.check.interval.ms
    pub retention_check_interval_ms: i64,
    /// log.roll.ms (or log.roll.hours): the default segment.ms, how old the
    /// active segment may grow before an append rolls it.
    pub segment_ms: i64,
    /// log.cleanup.policy: the default cleanup.policy, stored as
    /// `topic_config::normalize` prints it ("delete", "compact",
    /// "compact,delete", or "" for neither).
    pub cleanup_policy: String,
    /// compression.type: the default of the topic config of that name.
    pub compression_type: String,
    /// log.cleaner.min.cleanable.ratio: the default min.cleanable.dirty.ratio.
    pub min_cleanable_ratio: f64,
    /// log.cleaner.min.compaction.lag.ms: the default min.compaction.lag.ms.
    pub min_compaction_lag_ms: i64,
    /// log.cleaner.max.compaction.lag.ms: the default max.compaction.lag.ms.
    pub max_compaction_lag_ms: i64,
    /// log.cleaner.delete.retention.ms: the default delete.retention.ms.
    pub delete_retention_ms: i64,
    /// log.cleaner.backoff.ms: how long the cleaner waits, when no log is
    /// dirty enough, before it looks again.
    pub cleaner_backoff_ms: i64,
    /// message.max.bytes
    pub message_max_bytes: usize,
    /// group.initial.rebalance.delay.ms: how long a new group waits for more
    /// members before its first generation (0 in tests and small setups).
    pub group_initial_rebalance_delay_ms: i64,
    /// group.min.session.timeout.ms
    pub group_min_session_timeout_ms: i32,
    /// group.max.session.timeout.ms
    pub group_max_session_timeout_ms: i32,
    /// log.message.timestamp.type, log.message.timestamp.before.max.ms and
    /// .after.max.ms: the defaults of the topic configs without `log.`.
    pub message_timestamp_type: String,
    pub message_timestamp_before_max_ms: i64,
    pub message_timestamp_after_max_ms: i64,
    /// offsets.retention.minutes, in ms: how long a group's committed offsets
    /// outlive its last member (or, outside group management, their commit).
    pub offsets_retention_ms: i64,
    /// offsets.retention.check.interval.ms: how often expired offsets are
    /// deleted and Empty groups holding nothing are forgotten.
    pub offsets_retention_check_interval_ms: i64,
    /// producer.id.expiration.ms: producer state idle this long is forgotten.
    pub producer_id_expiration_ms: i64,
    /// producer.id.expiration.check.interval.ms
    pub producer_id_expiration_check_interval_ms: i64,
    /// transaction.max.timeout.ms: the largest transaction.timeout.ms a producer may ask.
    pub transaction_max_timeout_ms: i32,
    /// transaction.abort.timed.out.transaction.cleanup.interval.ms
    pub transaction_abort_check_interval_ms: i64,
    /// transactional.id.expiration.ms: an idle transactional id is forgotten.
    pub transactional_id_expiration_ms: i64,
    /// transaction.remove.expired.transaction.cleanup.interval.ms
    pub transactional_id_expiration_check_interval_ms: i64,
    /// sasl.enabled.mechanisms (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; Kafka's
    /// default, GSSAPI, is not served, so all three are the default here).
    pub sasl_enabled_mechanisms: Vec<String>,
    /// authorizer.class.name, super.users, allow.everyone.if.no.acl.found.
    pub authorizer: crate::security::acl::AuthorizerConfig,
    /// advertised.listeners: (listener name, host, port) to tell a client
    /// that came in on that listener; the default listener is
    /// `advertised_host`:`advertised_port`.
    pub advertised_listeners: Vec<(String, String, i32)>,
    /// Every property `set` took, by its Kafka name, as given (trimmed):
    /// DescribeConfigs reports them as STATIC_BROKER_CONFIG.
    pub properties_set: BTreeMap<String, String>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            planted_bug: None,
            checkpoint_bytes: crate::limits::CHECKPOINT_BYTES,
            checkpoint_interval_ms: crate::limits::CHECKPOINT_INTERVAL_MS,
            node_id: 1,
            advertised_host: "127.0.0.1".into(),
            advertised_port: 9092,
            cluster_id: "doze-kafka-cluster-0001".into(),
            auto_create_topics: true,
            default_partitions: 1,
            segment_bytes: 1024 * 1024 * 1024,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            retention_check_interval_ms: 5 * 60 * 1000,
            segment_ms: 7 * 24 * 3600 * 1000,
            cleanup_policy: "delete".into(),
            compression_type: "producer".into(),
            min_cleanable_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: 24 * 3600 * 1000,
            cleaner_backoff_ms: 15_000,
            message_max_bytes: crate::limits::MESSAGE_BYTES_MAX,
            group_initial_rebalance_delay_ms: 3000,
            group_min_session_timeout_ms: 6000,
            group_max_session_timeout_ms: 30 * 60 * 1000,
            message_timestamp_type: "CreateTime".into(),
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: 3600 * 1000,
            offsets_retention_ms: 7 * 24 * 3600 * 1000,
            offsets_retention_check_interval_ms: 10 * 60 * 1000,
            producer_id_expiration_ms: 24 * 3600 * 1000,
            producer_id_expiration_check_interval_ms: 10 * 60 * 1000,
            transaction_max_timeout_ms: 15 * 60 * 1000,
            transaction_abort_check_interval_ms: 10_000,
            transactional_id_expiration_ms: 7 * 24 * 3600 * 1000,
            transactional_id_expiration_check_interval_ms: 3600 * 1000,
            sasl_enabled_mechanisms: crate::security::sasl::MECHANISMS
                .iter()
                .map(|m| m.to_string())
                .collect(),
            authorizer: Default::default(),
            advertised_listeners: Vec::new(),
            properties_set: BTreeMap::new(),
        }
    }
}
