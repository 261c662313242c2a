//! Topic-level configs: which ones exist, their defaults (taken from the
//! broker's config, as Kafka does), how a value is checked and written
//! (`normalize`), how the alter operations change a topic's overrides
//! (`alter`), and the typed view the log cleaner reads (`CleanupConfig`).
//!
//! Names, defaults, ranges and error messages are Kafka 4.3.1's (LogConfig,
//! TopicConfig, ConfigDef; the messages were seen on the wire from a 4.3.1
//! broker). Kafka keeps a value as given and shows it parsed and printed
//! again in DescribeConfigs; we store the printed form, so what is described
//! is the same (" 5 " is "5", "1e-1" is "0.1", "compact,compact" is
//! "compact").

use std::collections::BTreeMap;

use crate::config::BrokerConfig;

pub const CLEANUP_POLICY: &str = "cleanup.policy";
pub const CLEANUP_POLICY_COMPACT: &str = "compact";
pub const CLEANUP_POLICY_DELETE: &str = "delete";

/// What a topic config accepts, by Kafka's ConfigDef type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// A 64-bit whole number at least this large.
    Long { min: i64 },
    /// A 32-bit whole number at least this large.
    Int { min: i32 },
    /// A number within `[min, max]`.
    Double { min: f64, max: f64 },
    /// One of these words.
    Choice(&'static [&'static str]),
    /// A comma-separated list of these words (possibly empty).
    List(&'static [&'static str]),
}

impl Kind {
    /// Kafka's ConfigType code for DescribeConfigs (v3+).
    pub fn describe_type(&self) -> i8 {
        match self {
            Kind::Choice(_) => 2,
            Kind::Int { .. } => 3,
            Kind::Long { .. } => 5,
            Kind::Double { .. } => 6,
            Kind::List(_) => 7,
        }
    }
}

/// Every topic config this broker knows: (name, kind), by name.
///
/// The words of a choice are in the order Kafka's error message lists them.
/// segment.bytes may go as low as 1024 here (Kafka 4.x: 1 MiB), so that tests
/// roll segments without writing megabytes.
pub const TOPIC_CONFIGS: &[(&str, Kind)] = &[
    (
        CLEANUP_POLICY,
        Kind::List(&[CLEANUP_POLICY_COMPACT, CLEANUP_POLICY_DELETE]),
    ),
    (
        "compression.type",
        Kind::Choice(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
    ),
    ("delete.retention.ms", Kind::Long { min: 0 }),
    ("max.compaction.lag.ms", Kind::Long { min: 1 }),
    ("max.message.bytes", Kind::Int { min: 0 }),
    (
        "message.timestamp.type",
        Kind::Choice(&["CreateTime", "LogAppendTime"]),
    ),
    (
        "min.cleanable.dirty.ratio",
        Kind::Double { min: 0.0, max: 1.0 },
    ),
    ("min.compaction.lag.ms", Kind::Long { min: 0 }),
    ("min.insync.replicas", Kind::Int { min: 1 }),
    // Kafka gives retention.bytes no lower bound: every negative is "no limit".
    ("retention.bytes", Kind::Long { min: i64::MIN }),
    ("retention.ms", Kind::Long { min: -1 }),
    ("segment.bytes", Kind::Int { min: 1024 }),
    ("segment.ms", Kind::Long { min: 1 }),
];

/// The kind of a topic config, or `None` if it is unknown.
pub fn kind(key: &str) -> Option<Kind> {
    TOPIC_CONFIGS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, kind)| *kind)
}

/// The default of a topic config on this broker, or `None` if it is unknown.
pub fn default_value(broker: &BrokerConfig, key: &str) -> Option<String> {
    Some(match key {
        CLEANUP_POLICY => broker.cleanup_policy.clone(),
        "compression.type" => "producer".into(),
        "delete.retention.ms" => broker.delete_retention_ms.to_string(),
        "max.compaction.lag.ms" => broker.max_compaction_lag_ms.to_string(),
        "max.message.bytes" => broker.message_max_bytes.to_string(),
        "message.timestamp.type" => "CreateTime".into(),
        "min.cleanable.dirty.ratio" => java_double(broker.min_cleanable_ratio),
        "min.compaction.lag.ms" => broker.min_compaction_lag_ms.to_string(),
        "min.insync.replicas" => "1".into(),
        "retention.bytes" => broker.retention_bytes.to_string(),
        "retention.ms" => broker.retention_ms.to_string(),
        "segment.bytes" => broker.segment_bytes.to_string(),
        "segment.ms" => broker.segment_ms.to_string(),
        _ => return None,
    })
}

/// Checks one topic config; `Err` is the message for INVALID_CONFIG.
pub fn validate(key: &str, value: &str) -> Result<(), String> {
    normalize(key, value).map(|_| ())
}

/// Checks one topic config and returns the value as it is stored and
/// described (Kafka's parse, then print); `Err` is the message for
/// INVALID_CONFIG, Kafka's own.
pub fn normalize(key: &str, value: &str) -> Result<String, String> {
    let Some(kind) = kind(key) else {
        return Err(format!("Unknown topic config name: {key}"));
    };
    // Kafka names the value as given when it does not parse, and as parsed
    // (then printed) when a rule refuses it: "2" is "Invalid value 2.0" for
    // a double.
    let invalid =
        |shown: &str, why: String| format!("Invalid value {shown} for configuration {key}: {why}");
    let trimmed = value.trim();
    match kind {
        Kind::Long { min } => {
            let v: i64 = trimmed
                .parse()
                .map_err(|_| invalid(value, "Not a number of type LONG".into()))?;
            if v < min {
                let why = format!("Value must be at least {min}");
                return Err(invalid(&v.to_string(), why));
            }
            Ok(v.to_string())
        }
        Kind::Int { min } => {
            let v: i32 = trimmed
                .parse()
                .map_err(|_| invalid(value, "Not a number of type INT".into()))?;
            if v < min {
                let why = format!("Value must be at least {min}");
                return Err(invalid(&v.to_string(), why));
            }
            Ok(v.to_string())
        }
        Kind::Double { min, max } => {
            // Kafka lets NaN through (every comparison with it is false); a
            // ratio that compares false with everything would turn the
            // cleaner's dirty-ratio rule off without saying so, so not here.
            // Rust also reads "inf" and "infinity" in any case; Java only "Infinity".
            let java_spelling = !trimmed.to_ascii_lowercase().contains("inf")
                || trimmed.trim_start_matches(['+', '-']) == "Infinity";
            let v: f64 = trimmed
                .parse()
                .ok()
                .filter(|v: &f64| !v.is_nan() && java_spelling)
                .ok_or_else(|| invalid(value, "Not a number of type DOUBLE".into()))?;
            if v < min {
                let why = format!("Value must be at least {}", number(min));
                return Err(invalid(&java_double(v), why));
            }
            if v > max {
                let why = format!("Value must be no more than {}", number(max));
                return Err(invalid(&java_double(v), why));
            }
            Ok(java_double(v))
        }
        Kind::Choice(words) => {
            if words.contains(&trimmed) {
                Ok(trimmed.to_string())
            } else {
                let why = format!("String must be one of: {}", words.join(", "));
                Err(invalid(trimmed, why))
            }
        }
        Kind::List(words) => {
            let mut items: Vec<&str> = Vec::new();
            for item in list_items(value) {
                if item.is_empty() {
                    return Err(format!("Configuration '{key}' values must not be empty."));
                }
                // Kafka 4.3.1 takes "compact,compact" and describes it as
                // "compact": a repeat is dropped, not refused.
                if !items.contains(&item) {
                    items.push(item);
                }
            }
            for item in &items {
                if !words.contains(item) {
                    let why = format!("String must be one of: {}", words.join(", "));
                    return Err(format!(
                        "Invalid value {item} for configuration {key}: {why}"
                    ));
                }
            }
            Ok(items.join(","))
        }
    }
}

/// The items of a LIST value as Kafka's ConfigDef splits it: trimmed, split
/// at commas with the blanks around them; an empty value is an empty list,
/// and an empty item ("a,,b", "a,") is kept (for `normalize` to refuse).
fn list_items(value: &str) -> Vec<&str> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Vec::new();
    }
    trimmed.split(',').map(str::trim).collect()
}

/// A bound of a range as Kafka's message prints it (`between(0, 1)` holds
/// integers, so "1", not "1.0").
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        java_double(v)
    }
}

/// `v` as Java's Double.toString prints it: "0.5", "1.0", "1.0E-4", "NaN".
pub fn java_double(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let magnitude = v.abs();
    if magnitude == 0.0 || (1e-3..1e7).contains(&magnitude) {
        // Rust's Debug form is the shortest that reads back, with ".0" on
        // whole numbers, as Java's in this range.
        return format!("{v:?}");
    }
    let scientific = format!("{v:e}"); // "1e-4", "1.5e7"
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("{:e} always has an exponent");
    let mantissa = if mantissa.contains('.') {
        mantissa.to_string()
    } else {
        format!("{mantissa}.0")
    };
    format!("{mantissa}E{exponent}")
}

/// One change of IncrementalAlterConfigs (its `config_operation` codes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AlterOp {
    /// 0: the value becomes the override.
    Set(String),
    /// 1: the override goes; the default applies again.
    Delete,
    /// 2: the items join a LIST value (those not in it yet, at its end).
    Append(String),
    /// 3: the items leave a LIST value.
    Subtract(String),
}

/// The overrides after `ops` (each on a different key) change `current`,
/// checked as Kafka checks them: APPEND / SUBTRACT only on a LIST, then
/// every name known, then every value valid; `Err` is INVALID_CONFIG's
/// message. APPEND and SUBTRACT start from the default when there is no
/// override, as Kafka's controller does. DELETE of a name nobody set, even
/// one that is unknown, changes nothing and is no error (Kafka 4.3.1).
pub fn alter(
    broker: &BrokerConfig,
    current: &BTreeMap<String, String>,
    ops: &[(String, AlterOp)],
) -> Result<BTreeMap<String, String>, String> {
    let mut next = current.clone();
    for (key, op) in ops {
        let list_of = |verb: &str| match kind(key) {
            Some(Kind::List(_)) => Ok(current
                .get(key)
                .cloned()
                .or_else(|| default_value(broker, key))
                .unwrap_or_default()),
            _ => Err(format!(
                "Can't {verb} to key {key} because its type is not LIST."
            )),
        };
        match op {
            AlterOp::Set(value) => {
                next.insert(key.clone(), value.clone());
            }
            AlterOp::Delete => {
                next.remove(key);
            }
            AlterOp::Append(value) => {
                let old = list_of("APPEND")?;
                let mut items = old_parts(&old);
                for item in java_split(value) {
                    if !items.contains(&item) {
                        items.push(item);
                    }
                }
                next.insert(key.clone(), items.join(","));
            }
            AlterOp::Subtract(value) => {
                let old = list_of("SUBTRACT")?;
                let gone = java_split(value);
                let items: Vec<&str> = old_parts(&old)
                    .into_iter()
                    .filter(|item| !gone.contains(item))
                    .collect();
                next.insert(key.clone(), items.join(","));
            }
        }
    }
    check_all(&next)
}

/// The items of a list value before APPEND / SUBTRACT, as Kafka's controller
/// takes them (ConfigurationControlManager.getParts): split at commas, empty
/// items dropped, no trimming.
fn old_parts(value: &str) -> Vec<&str> {
    value.split(',').filter(|p| !p.is_empty()).collect()
}

/// An APPEND / SUBTRACT operand split as Java's `String.split(",")`: no
/// trimming, trailing empty items dropped, and a value without a comma is
/// itself the one item (so "" appends an empty item, which the check then
/// refuses in a non-empty list, as Kafka does).
fn java_split(value: &str) -> Vec<&str> {
    if !value.contains(',') {
        return vec![value];
    }
    let mut items: Vec<&str> = value.split(',').collect();
    while items.last().is_some_and(|i| i.is_empty()) {
        items.pop();
    }
    items
}

/// The overrides checked whole (names first, then values) and stored
/// normalized; `Err` is INVALID_CONFIG's message.
pub fn check_all(configs: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String> {
    if let Some(unknown) = configs.keys().find(|k| kind(k).is_none()) {
        return Err(format!("Unknown topic config name: {unknown}"));
    }
    configs
        .iter()
        .map(|(key, value)| Ok((key.clone(), normalize(key, value)?)))
        .collect()
}

/// Whether a cleanup.policy value names `compact` and `delete`. An empty
/// list names neither: the log is kept whole forever (Kafka 4.x).
pub fn cleanup_policy(value: &str) -> (bool, bool) {
    let items = list_items(value);
    (
        items.contains(&CLEANUP_POLICY_COMPACT),
        items.contains(&CLEANUP_POLICY_DELETE),
    )
}

/// What the log cleaner and retention need of one topic's configs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CleanupConfig {
    /// cleanup.policy has `compact`: the cleaner keeps the last record of each key.
    pub compact: bool,
    /// cleanup.policy has `delete`: retention.ms and retention.bytes apply.
    pub delete: bool,
    /// min.cleanable.dirty.ratio, in [0, 1].
    pub min_cleanable_dirty_ratio: f64,
    /// min.compaction.lag.ms (>= 0).
    pub min_compaction_lag_ms: i64,
    /// max.compaction.lag.ms (>= 1).
    pub max_compaction_lag_ms: i64,
    /// delete.retention.ms (>= 0): how long a tombstone (and a transaction
    /// marker) outlives the clean that first passed it.
    pub delete_retention_ms: i64,
}

impl CleanupConfig {
    /// The view of a topic's effective configs; `value(key)` is the override
    /// or the broker default. Values were checked when stored; one that is
    /// not a number now is a broken invariant.
    pub fn from_values(value: impl Fn(&str) -> String) -> Self {
        let long = |key: &str| {
            let v = value(key);
            v.trim()
                .parse::<i64>()
                .unwrap_or_else(|_| panic!("topic config {key} holds {v:?}, not a number"))
        };
        let ratio = value("min.cleanable.dirty.ratio");
        let ratio: f64 = ratio
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("min.cleanable.dirty.ratio holds {ratio:?}"));
        let (compact, delete) = cleanup_policy(&value(CLEANUP_POLICY));
        Self {
            compact,
            delete,
            min_cleanable_dirty_ratio: ratio,
            min_compaction_lag_ms: long("min.compaction.lag.ms"),
            max_compaction_lag_ms: long("max.compaction.lag.ms"),
            delete_retention_ms: long("delete.retention.ms"),
        }
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
            let stored =
                normalize(key, &v).unwrap_or_else(|e| panic!("{key}: default {v} invalid: {e}"));
            assert_eq!(stored, v, "{key}: a default is already in its stored form");
        }
        let names: Vec<&str> = TOPIC_CONFIGS.iter().map(|(k, _)| *k).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted, "TOPIC_CONFIGS is kept by name");
    }

    #[test]
    fn kafka_defaults() {
        let broker = BrokerConfig::default();
        let d = |k| default_value(&broker, k).unwrap();
        assert_eq!(d("cleanup.policy"), "delete");
        assert_eq!(d("min.cleanable.dirty.ratio"), "0.5");
        assert_eq!(d("min.compaction.lag.ms"), "0");
        assert_eq!(d("max.compaction.lag.ms"), "9223372036854775807");
        assert_eq!(d("delete.retention.ms"), "86400000");
        assert_eq!(d("segment.ms"), "604800000");
    }

    #[test]
    fn bad_values_are_refused_with_kafkas_messages() {
        let err = |k, v| normalize(k, v).unwrap_err();
        assert_eq!(
            err("retention.ms", "abc"),
            "Invalid value abc for configuration retention.ms: Not a number of type LONG"
        );
        assert_eq!(
            err("retention.ms", "-2"),
            "Invalid value -2 for configuration retention.ms: Value must be at least -1"
        );
        assert!(validate("segment.bytes", "10").is_err());
        assert_eq!(
            err("segment.bytes", "99999999999"),
            "Invalid value 99999999999 for configuration segment.bytes: Not a number of type INT"
        );
        assert_eq!(
            err("no.such.config", "1"),
            "Unknown topic config name: no.such.config"
        );
        assert_eq!(
            err("cleanup.policy", "none"),
            "Invalid value none for configuration cleanup.policy: String must be one of: compact, delete"
        );
        assert_eq!(
            err("cleanup.policy", "Compact"),
            "Invalid value Compact for configuration cleanup.policy: String must be one of: compact, delete"
        );
        assert_eq!(
            err("cleanup.policy", "compact,"),
            "Configuration 'cleanup.policy' values must not be empty."
        );
        assert_eq!(
            err("cleanup.policy", "compact,,delete"),
            "Configuration 'cleanup.policy' values must not be empty."
        );
        assert_eq!(
            err("min.cleanable.dirty.ratio", "1.5"),
            "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"
        );
        assert_eq!(
            err("min.cleanable.dirty.ratio", "2"),
            "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"
        );
        assert_eq!(
            err("segment.ms", " -007"),
            "Invalid value -7 for configuration segment.ms: Value must be at least 1"
        );
        assert_eq!(
            err("min.cleanable.dirty.ratio", "-0.1"),
            "Invalid value -0.1 for configuration min.cleanable.dirty.ratio: Value must be at least 0"
        );
        assert_eq!(
            err("min.cleanable.dirty.ratio", "abc"),
            "Invalid value abc for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"
        );
        assert!(validate("min.cleanable.dirty.ratio", "NaN").is_err());
        assert_eq!(
            err("min.cleanable.dirty.ratio", "Infinity"),
            "Invalid value Infinity for configuration min.cleanable.dirty.ratio: Value must be no more than 1"
        );
        assert_eq!(
            err("min.cleanable.dirty.ratio", "inf"),
            "Invalid value inf for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"
        );
        assert_eq!(
            err("max.compaction.lag.ms", "0"),
            "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1"
        );
        assert_eq!(
            err("min.compaction.lag.ms", "-1"),
            "Invalid value -1 for configuration min.compaction.lag.ms: Value must be at least 0"
        );
        assert_eq!(
            err("delete.retention.ms", "-1"),
            "Invalid value -1 for configuration delete.retention.ms: Value must be at least 0"
        );
        assert_eq!(
            err("segment.ms", "0"),
            "Invalid value 0 for configuration segment.ms: Value must be at least 1"
        );
        assert_eq!(
            err("compression.type", "GZIP"),
            "Invalid value GZIP for configuration compression.type: String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"
        );
        assert_eq!(
            err("message.timestamp.type", "foo"),
            "Invalid value foo for configuration message.timestamp.type: String must be one of: CreateTime, LogAppendTime"
        );
    }

    #[test]
    fn values_are_stored_as_kafka_describes_them() {
        let ok = |k, v| normalize(k, v).unwrap();
        assert_eq!(ok("cleanup.policy", "compact"), "compact");
        assert_eq!(ok("cleanup.policy", " delete , compact "), "delete,compact");
        assert_eq!(ok("cleanup.policy", "compact,delete"), "compact,delete");
        assert_eq!(ok("cleanup.policy", "compact,compact"), "compact");
        assert_eq!(ok("cleanup.policy", ""), "");
        assert_eq!(ok("cleanup.policy", "  "), "");
        assert_eq!(ok("min.cleanable.dirty.ratio", "1e-1"), "0.1");
        assert_eq!(ok("min.cleanable.dirty.ratio", "1"), "1.0");
        assert_eq!(ok("min.cleanable.dirty.ratio", " .5 "), "0.5");
        assert_eq!(ok("min.cleanable.dirty.ratio", "0"), "0.0");
        assert_eq!(ok("min.cleanable.dirty.ratio", "0.0001"), "1.0E-4");
        assert_eq!(ok("segment.ms", "007"), "7");
        assert_eq!(ok("segment.ms", "+7"), "7");
        assert_eq!(ok("segment.ms", " 5 "), "5");
        assert_eq!(
            ok("message.timestamp.type", " LogAppendTime "),
            "LogAppendTime"
        );
        assert_eq!(ok("retention.bytes", "-5"), "-5");
    }

    #[test]
    fn policy_words() {
        assert_eq!(cleanup_policy("delete"), (false, true));
        assert_eq!(cleanup_policy("compact"), (true, false));
        assert_eq!(cleanup_policy("compact,delete"), (true, true));
        assert_eq!(cleanup_policy("delete, compact"), (true, true));
        assert_eq!(cleanup_policy(""), (false, false));
    }

    fn ops(list: &[(&str, AlterOp)]) -> Vec<(String, AlterOp)> {
        list.iter()
            .map(|(k, op)| (k.to_string(), op.clone()))
            .collect()
    }

    #[test]
    fn alter_appends_and_subtracts_as_kafka() {
        let broker = BrokerConfig::default();
        let none = BTreeMap::new();
        let policy = |m: &BTreeMap<String, String>| m.get("cleanup.policy").cloned();
        // APPEND starts from the default "delete".
        let m = alter(
            &broker,
            &none,
            &ops(&[("cleanup.policy", AlterOp::Append("compact".into()))]),
        )
        .unwrap();
        assert_eq!(policy(&m).as_deref(), Some("delete,compact"));
        let again = alter(
            &broker,
            &m,
            &ops(&[("cleanup.policy", AlterOp::Append("compact,delete".into()))]),
        )
        .unwrap();
        assert_eq!(policy(&again).as_deref(), Some("delete,compact"));
        let m = alter(
            &broker,
            &m,
            &ops(&[("cleanup.policy", AlterOp::Subtract("delete".into()))]),
        )
        .unwrap();
        assert_eq!(policy(&m).as_deref(), Some("compact"));
        // Subtracting what is not there (even a bad word) changes nothing.
        let same = alter(
            &broker,
            &m,
            &ops(&[("cleanup.policy", AlterOp::Subtract("foo".into()))]),
        )
        .unwrap();
        assert_eq!(same, m);
        let m = alter(
            &broker,
            &m,
            &ops(&[("cleanup.policy", AlterOp::Subtract("compact".into()))]),
        )
        .unwrap();
        assert_eq!(policy(&m).as_deref(), Some(""));
        // Kafka splits "" into one empty item: appended to an empty list it
        // leaves the list empty, appended to "compact" it is refused.
        let still = alter(
            &broker,
            &m,
            &ops(&[("cleanup.policy", AlterOp::Append("".into()))]),
        )
        .unwrap();
        assert_eq!(policy(&still).as_deref(), Some(""));
        let compact = alter(
            &broker,
            &m,
            &ops(&[("cleanup.policy", AlterOp::Append("compact,".into()))]),
        )
        .unwrap();
        assert_eq!(policy(&compact).as_deref(), Some("compact"));
        let err = alter(
            &broker,
            &compact,
            &ops(&[("cleanup.policy", AlterOp::Append("".into()))]),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "Configuration 'cleanup.policy' values must not be empty."
        );
        let err = alter(
            &broker,
            &m,
            &ops(&[("cleanup.policy", AlterOp::Append("foo".into()))]),
        )
        .unwrap_err();
        assert!(err.starts_with("Invalid value foo"), "{err}");
        let err = alter(
            &broker,
            &m,
            &ops(&[("retention.ms", AlterOp::Append("5".into()))]),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "Can't APPEND to key retention.ms because its type is not LIST."
        );
        let err = alter(
            &broker,
            &m,
            &ops(&[("retention.ms", AlterOp::Subtract("5".into()))]),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "Can't SUBTRACT to key retention.ms because its type is not LIST."
        );
    }

    #[test]
    fn alter_checks_names_before_values_and_ignores_deleting_the_unknown() {
        let broker = BrokerConfig::default();
        let none = BTreeMap::new();
        let err = alter(
            &broker,
            &none,
            &ops(&[
                ("retention.ms", AlterOp::Set("x".into())),
                ("zzz.unknown", AlterOp::Set("1".into())),
            ]),
        )
        .unwrap_err();
        assert_eq!(err, "Unknown topic config name: zzz.unknown");
        let m = alter(&broker, &none, &ops(&[("no.such", AlterOp::Delete)])).unwrap();
        assert!(m.is_empty());
        let mut current = BTreeMap::new();
        current.insert("retention.ms".to_string(), "5".to_string());
        let m = alter(
            &broker,
            &current,
            &ops(&[
                ("retention.ms", AlterOp::Delete),
                ("segment.ms", AlterOp::Set(" 100 ".into())),
            ]),
        )
        .unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m["segment.ms"], "100");
    }

    #[test]
    fn cleanup_config_from_values() {
        let broker = BrokerConfig::default();
        let c = CleanupConfig::from_values(|k| default_value(&broker, k).unwrap());
        assert_eq!(
            c,
            CleanupConfig {
                compact: false,
                delete: true,
                min_cleanable_dirty_ratio: 0.5,
                min_compaction_lag_ms: 0,
                max_compaction_lag_ms: i64::MAX,
                delete_retention_ms: 86_400_000,
            }
        );
    }

    #[test]
    fn java_doubles() {
        assert_eq!(java_double(0.5), "0.5");
        assert_eq!(java_double(1.0), "1.0");
        assert_eq!(java_double(0.0), "0.0");
        assert_eq!(java_double(0.25), "0.25");
        assert_eq!(java_double(1e-4), "1.0E-4");
        assert_eq!(java_double(1.5e-5), "1.5E-5");
        assert_eq!(java_double(0.001), "0.001");
    }
}
