//! Broker properties by their Kafka names: `BrokerConfig::set` takes one
//! from a config file (the binary's flags and file), `describe` lists them
//! for DescribeConfigs.
//!
//! Apart from the settings themselves (`crate::config`), because a broker
//! default of a topic config (`log.retention.ms` for `retention.ms`) is
//! checked and stored by the topic config's rules (`crate::topic_config`),
//! and those rules read their defaults from the settings: the settings
//! below, the topic configs on them, the properties on both.

use crate::config::BrokerConfig;

impl BrokerConfig {
    /// Sets one broker property by its Kafka name (from a config file).
    /// Returns an error text for an unknown key or a bad value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        fn num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, String> {
            v.trim()
                .parse()
                .map_err(|_| format!("bad value {v:?} for {key}"))
        }
        match key {
            "node.id" | "broker.id" => self.node_id = num(key, value)?,
            "cluster.id" => self.cluster_id = value.trim().to_string(),
            "auto.create.topics.enable" => self.auto_create_topics = num(key, value)?,
            "num.partitions" => self.default_partitions = num(key, value)?,
            "log.segment.bytes" => self.segment_bytes = num(key, value)?,
            "log.retention.ms" => self.retention_ms = num(key, value)?,
            // Kafka takes log.retention.ms over .minutes over .hours
            // whatever their order; here the later setting wins.
            "log.retention.hours" => {
                self.retention_ms = num::<i64>(key, value)?.saturating_mul(3_600_000)
            }
            "log.retention.minutes" => {
                self.retention_ms = num::<i64>(key, value)?.saturating_mul(60_000)
            }
            "log.retention.bytes" => self.retention_bytes = num(key, value)?,
            "log.retention.check.interval.ms" => {
                self.retention_check_interval_ms = num(key, value)?
            }
            "log.cleaner.backoff.ms" => self.cleaner_backoff_ms = num(key, value)?,
            "sasl.enabled.mechanisms" => {
                let list: Vec<String> = value
                    .split(',')
                    .map(|m| m.trim().to_string())
                    .filter(|m| !m.is_empty())
                    .collect();
                if let Some(bad) = list
                    .iter()
                    .find(|m| !crate::security::sasl::MECHANISMS.contains(&m.as_str()))
                {
                    return Err(format!(
                        "sasl.enabled.mechanisms: {bad} is not served (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
                    ));
                }
                self.sasl_enabled_mechanisms = list;
            }
            "authorizer.class.name" => {
                let v = value.trim();
                const KNOWN: [&str; 2] = [
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                    "kafka.security.authorizer.AclAuthorizer",
                ];
                if !v.is_empty() && !KNOWN.contains(&v) {
                    return Err(format!(
                        "authorizer.class.name: {v} is not served (use {})",
                        KNOWN[0]
                    ));
                }
                self.authorizer.enabled = !v.is_empty();
            }
            "super.users" => {
                self.authorizer.super_users = value
                    .split(';')
                    .map(|u| u.trim().to_string())
                    .filter(|u| !u.is_empty())
                    .collect();
            }
            "allow.everyone.if.no.acl.found" => self.authorizer.allow_if_no_acl = num(key, value)?,
            // The broker defaults of topic configs take the topic config's rules.
            "log.roll.ms" => self.segment_ms = topic_default(key, "segment.ms", value)?,
            // As log.retention.hours: the later setting wins (Kafka takes
            // log.roll.ms over log.roll.hours whatever their order).
            "log.roll.hours" => {
                let hours: i64 = num(key, value)?;
                let ms = hours
                    .checked_mul(3_600_000)
                    .ok_or_else(|| format!("bad value {value:?} for {key}"))?;
                self.segment_ms = topic_default(key, "segment.ms", &ms.to_string())?
            }
            "log.message.timestamp.type" => {
                self.message_timestamp_type =
                    topic_default(key, crate::topic_config::MESSAGE_TIMESTAMP_TYPE, value)?
            }
            "log.message.timestamp.before.max.ms" => {
                self.message_timestamp_before_max_ms = topic_default(
                    key,
                    crate::topic_config::MESSAGE_TIMESTAMP_BEFORE_MAX_MS,
                    value,
                )?
            }
            "log.message.timestamp.after.max.ms" => {
                self.message_timestamp_after_max_ms = topic_default(
                    key,
                    crate::topic_config::MESSAGE_TIMESTAMP_AFTER_MAX_MS,
                    value,
                )?
            }
            "log.cleanup.policy" => {
                self.cleanup_policy = topic_default(key, "cleanup.policy", value)?
            }
            "compression.type" => {
                self.compression_type = topic_default(key, "compression.type", value)?
            }
            "log.cleaner.min.cleanable.ratio" => {
                self.min_cleanable_ratio = topic_default(key, "min.cleanable.dirty.ratio", value)?
            }
            "log.cleaner.min.compaction.lag.ms" => {
                self.min_compaction_lag_ms = topic_default(key, "min.compaction.lag.ms", value)?
            }
            "log.cleaner.max.compaction.lag.ms" => {
                self.max_compaction_lag_ms = topic_default(key, "max.compaction.lag.ms", value)?
            }
            "log.cleaner.delete.retention.ms" => {
                self.delete_retention_ms = topic_default(key, "delete.retention.ms", value)?
            }
            "message.max.bytes" => self.message_max_bytes = num(key, value)?,
            "group.initial.rebalance.delay.ms" => {
                self.group_initial_rebalance_delay_ms = num(key, value)?
            }
            "group.min.session.timeout.ms" => self.group_min_session_timeout_ms = num(key, value)?,
            "group.max.session.timeout.ms" => self.group_max_session_timeout_ms = num(key, value)?,
            "offsets.retention.minutes" => {
                let minutes: i64 = num(key, value)?;
                if !(1..=i32::MAX as i64).contains(&minutes) {
                    return Err("offsets.retention.minutes must be at least 1".into());
                }
                self.offsets_retention_ms = minutes * 60 * 1000;
            }
            "offsets.retention.check.interval.ms" => {
                let interval_ms: i64 = num(key, value)?;
                if interval_ms < 1 {
                    return Err("offsets.retention.check.interval.ms must be at least 1".into());
                }
                self.offsets_retention_check_interval_ms = interval_ms;
            }
            "producer.id.expiration.ms" => self.producer_id_expiration_ms = num(key, value)?,
            "transaction.max.timeout.ms" => self.transaction_max_timeout_ms = num(key, value)?,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms" => {
                self.transaction_abort_check_interval_ms = num(key, value)?
            }
            "transactional.id.expiration.ms" => {
                self.transactional_id_expiration_ms = num(key, value)?
            }
            "transaction.remove.expired.transaction.cleanup.interval.ms" => {
                self.transactional_id_expiration_check_interval_ms = num(key, value)?
            }
            "producer.id.expiration.check.interval.ms" => {
                self.producer_id_expiration_check_interval_ms = num(key, value)?
            }
            _ => return Err(unknown_property(key)),
        }
        if self.default_partitions < 1
            || self.default_partitions > crate::limits::TOPIC_PARTITIONS_MAX
        {
            return Err(format!(
                "num.partitions must be 1..={}",
                crate::limits::TOPIC_PARTITIONS_MAX
            ));
        }
        if self.group_initial_rebalance_delay_ms < 0 {
            return Err("group.initial.rebalance.delay.ms must not be negative".into());
        }
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms {
            return Err(
                "group.min.session.timeout.ms must not exceed group.max.session.timeout.ms".into(),
            );
        }
        if self.segment_bytes < 1024 {
            return Err("log.segment.bytes must be at least 1024".into());
        }
        self.properties_set
            .insert(key.to_string(), value.trim().to_string());
        Ok(())
    }
}

/// A broker default of a topic config, checked by the topic config's rules
/// and parsed from its stored form.
fn topic_default<T: std::str::FromStr>(
    broker_key: &str,
    topic_key: &str,
    value: &str,
) -> Result<T, String> {
    let stored = crate::topic_config::normalize(topic_key, value)
        .map_err(|e| format!("{broker_key}: {e}"))?;
    stored
        .parse()
        .map_err(|_| format!("bad value {value:?} for {broker_key}"))
}

impl BrokerConfig {
    /// `advertised.listeners` as Kafka prints it: every listener's, else the
    /// default one as PLAINTEXT.
    fn describe_advertised_listeners(&self) -> String {
        if self.advertised_listeners.is_empty() {
            return format!(
                "PLAINTEXT://{}:{}",
                self.advertised_host, self.advertised_port
            );
        }
        self.advertised_listeners
            .iter()
            .map(|(name, host, port)| {
                if host.contains(':') {
                    format!("{name}://[{host}]:{port}")
                } else {
                    format!("{name}://{host}:{port}")
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The properties `set` takes for a described one (`describe`): itself,
    /// and the others that set the same value.
    pub fn set_by(described: &str) -> Vec<&str> {
        match described {
            "node.id" | "broker.id" => vec!["node.id", "broker.id"],
            "log.retention.ms" => vec![
                "log.retention.ms",
                "log.retention.minutes",
                "log.retention.hours",
            ],
            "log.roll.ms" => vec!["log.roll.ms", "log.roll.hours"],
            other => vec![other],
        }
    }

    /// The broker properties DescribeConfigs reports, by their Kafka names.
    pub fn describe(&self) -> Vec<(&'static str, String)> {
        vec![
            ("node.id", self.node_id.to_string()),
            ("broker.id", self.node_id.to_string()),
            ("advertised.listeners", self.describe_advertised_listeners()),
            (
                "auto.create.topics.enable",
                self.auto_create_topics.to_string(),
            ),
            ("num.partitions", self.default_partitions.to_string()),
            ("default.replication.factor", "1".into()),
            ("log.segment.bytes", self.segment_bytes.to_string()),
            ("log.retention.ms", self.retention_ms.to_string()),
            ("log.retention.bytes", self.retention_bytes.to_string()),
            (
                "log.retention.check.interval.ms",
                self.retention_check_interval_ms.to_string(),
            ),
            ("log.roll.ms", self.segment_ms.to_string()),
            (
                "log.cleaner.backoff.ms",
                self.cleaner_backoff_ms.to_string(),
            ),
            ("log.cleanup.policy", self.cleanup_policy.clone()),
            ("compression.type", self.compression_type.clone()),
            (
                "log.cleaner.min.cleanable.ratio",
                crate::topic_config::java_double(self.min_cleanable_ratio),
            ),
            (
                "log.cleaner.min.compaction.lag.ms",
                self.min_compaction_lag_ms.to_string(),
            ),
            (
                "log.cleaner.max.compaction.lag.ms",
                self.max_compaction_lag_ms.to_string(),
            ),
            (
                "log.cleaner.delete.retention.ms",
                self.delete_retention_ms.to_string(),
            ),
            ("message.max.bytes", self.message_max_bytes.to_string()),
            (
                "log.message.timestamp.type",
                self.message_timestamp_type.clone(),
            ),
            (
                "log.message.timestamp.before.max.ms",
                self.message_timestamp_before_max_ms.to_string(),
            ),
            (
                "log.message.timestamp.after.max.ms",
                self.message_timestamp_after_max_ms.to_string(),
            ),
            (
                "group.initial.rebalance.delay.ms",
                self.group_initial_rebalance_delay_ms.to_string(),
            ),
            (
                "group.min.session.timeout.ms",
                self.group_min_session_timeout_ms.to_string(),
            ),
            (
                "group.max.session.timeout.ms",
                self.group_max_session_timeout_ms.to_string(),
            ),
            (
                "offsets.retention.minutes",
                (self.offsets_retention_ms / 60_000).to_string(),
            ),
            (
                "offsets.retention.check.interval.ms",
                self.offsets_retention_check_interval_ms.to_string(),
            ),
            (
                "producer.id.expiration.ms",
                self.producer_id_expiration_ms.to_string(),
            ),
            (
                "producer.id.expiration.check.interval.ms",
                self.producer_id_expiration_check_interval_ms.to_string(),
            ),
            (
                "transaction.max.timeout.ms",
                self.transaction_max_timeout_ms.to_string(),
            ),
            (
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                self.transaction_abort_check_interval_ms.to_string(),
            ),
            (
                "transactional.id.expiration.ms",
                self.transactional_id_expiration_ms.to_string(),
            ),
            (
                "transaction.remove.expired.transaction.cleanup.interval.ms",
                self.transactional_id_expiration_check_interval_ms
                    .to_string(),
            ),
        ]
    }
}

/// The refusal of an unknown key. A topic config's name written as a broker
/// property (`retention.ms` for `log.retention.ms`) is a mistake Kafka
/// passes over with a warning and then ignores, so the setting silently
/// does nothing; doze refuses it, as any unknown key, and names the broker
/// property the user most likely meant.
fn unknown_property(key: &str) -> String {
    let Some(spec) = crate::topic_config::spec_of(key) else {
        return format!("unknown broker property {key:?}");
    };
    let per_topic = "set per topic with CreateTopics or IncrementalAlterConfigs";
    match spec.synonyms.first() {
        Some((broker_key, _)) => format!(
            "unknown broker property {key:?}: {key} is a topic config ({per_topic}); its broker default is {broker_key}"
        ),
        None => format!(
            "unknown broker property {key:?}: {key} is a topic config ({per_topic}); it has no broker default"
        ),
    }
}
