//! Topic-level configs: which ones exist, their defaults (taken from the
//! broker's config, as Kafka does), and how a value is checked.

use crate::config::BrokerConfig;

/// What a topic config accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A whole number at least this large.
    Long { min: i64 },
    /// One of these words.
    Choice(&'static [&'static str]),
}

/// Every topic config this broker knows: (name, kind).
pub const TOPIC_CONFIGS: &[(&str, Kind)] = &[
    ("cleanup.policy", Kind::Choice(&["delete"])),
    (
        "compression.type",
        Kind::Choice(&["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]),
    ),
    ("max.message.bytes", Kind::Long { min: 0 }),
    (
        "message.timestamp.type",
        Kind::Choice(&["CreateTime", "LogAppendTime"]),
    ),
    ("min.insync.replicas", Kind::Long { min: 1 }),
    ("retention.bytes", Kind::Long { min: -1 }),
    ("retention.ms", Kind::Long { min: -1 }),
    ("segment.bytes", Kind::Long { min: 1024 }),
];

/// The default of a topic config on this broker, or `None` if it is unknown.
pub fn default_value(broker: &BrokerConfig, key: &str) -> Option<String> {
    Some(match key {
        "cleanup.policy" => "delete".into(),
        "compression.type" => "producer".into(),
        "max.message.bytes" => broker.message_max_bytes.to_string(),
        "message.timestamp.type" => "CreateTime".into(),
        "min.insync.replicas" => "1".into(),
        "retention.bytes" => broker.retention_bytes.to_string(),
        "retention.ms" => broker.retention_ms.to_string(),
        "segment.bytes" => broker.segment_bytes.to_string(),
        _ => return None,
    })
}

/// Checks one topic config; `Err` is the message for INVALID_CONFIG.
pub fn validate(key: &str, value: &str) -> Result<(), String> {
    let Some((_, kind)) = TOPIC_CONFIGS.iter().find(|(k, _)| *k == key) else {
        return Err(format!("Unknown topic config name: {key}"));
    };
    match kind {
        Kind::Long { min } => match value.trim().parse::<i64>() {
            Ok(v) if v >= *min => Ok(()),
            _ => Err(format!(
                "Invalid value {value} for configuration {key}: must be a number >= {min}"
            )),
        },
        Kind::Choice(words) if words.contains(&value) => Ok(()),
        Kind::Choice(words) => Err(format!(
            "Invalid value {value} for configuration {key}: one of {words:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_config_has_a_default_that_validates() {
        let broker = BrokerConfig::default();
        for (key, _) in TOPIC_CONFIGS {
            let v = default_value(&broker, key).unwrap_or_else(|| panic!("{key} has no default"));
            validate(key, &v).unwrap_or_else(|e| panic!("{key}: default {v} invalid: {e}"));
        }
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(validate("retention.ms", "abc").is_err());
        assert!(validate("retention.ms", "-2").is_err());
        assert!(validate("segment.bytes", "10").is_err());
        assert!(validate("no.such.config", "1").is_err());
        assert!(validate("cleanup.policy", "compact").is_err());
    }
}
