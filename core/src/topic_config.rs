//! Topic-level configs: every one Kafka 4.3.1 has (`TOPIC_CONFIGS`, the one
//! place their kinds, defaults, broker synonyms and meaning on doze live),
//! how a value is checked and written (`normalize`, then `served`), how the
//! alter operations change a topic's overrides (`alter`), how DescribeConfigs
//! and CreateTopics describe one (`describe`), and the typed view the log
//! cleaner reads (`CleanupConfig`).
//!
//! Names, defaults, ranges and error messages are Kafka 4.3.1's (LogConfig,
//! TopicConfig, ServerTopicConfigSynonyms, ConfigDef; the messages were seen
//! on the wire from a 4.3.1 broker). Kafka keeps a value as given and shows
//! it parsed and printed again in DescribeConfigs; we store the printed
//! form, so what is described is the same (" 5 " is "5", "1e-1" is "0.1",
//! "compact,compact" is "compact", " TRUE " is "true").
//!
//! Each config is one of three (`Effect`):
//! - in force as in Kafka (retention, segments, compaction, record size and
//!   timestamps);
//! - accepted, stored and described as Kafka does, with no effect on one
//!   doze node: replication (min.insync.replicas, unclean leader election,
//!   replication throttles), tiered storage's local retention and switches,
//!   and Kafka's storage tuning that no client can observe (flushing, index
//!   density and size, preallocation, roll jitter, deletion delay);
//! - served for some values only: remote.storage.enable (no tiered
//!   storage, as on a Kafka broker without it). Another value is refused
//!   with INVALID_CONFIG and a message, never stored and ignored.

use std::collections::BTreeMap;

use crate::config::BrokerConfig;

pub const CLEANUP_POLICY: &str = "cleanup.policy";
pub const CLEANUP_POLICY_COMPACT: &str = "compact";
pub const CLEANUP_POLICY_DELETE: &str = "delete";
pub const MESSAGE_TIMESTAMP_TYPE: &str = "message.timestamp.type";
pub const MESSAGE_TIMESTAMP_BEFORE_MAX_MS: &str = "message.timestamp.before.max.ms";
pub const MESSAGE_TIMESTAMP_AFTER_MAX_MS: &str = "message.timestamp.after.max.ms";

/// What a topic config accepts, by Kafka's ConfigDef type and validator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// A 64-bit whole number at least this large.
    Long { min: i64 },
    /// A 32-bit whole number within `[min, max]`.
    Int { min: i32, max: i32 },
    /// compression.gzip.level: a 32-bit whole number in 1..=9, or -1.
    GzipLevel,
    /// A number within `[min, max]`.
    Double { min: f64, max: f64 },
    /// `true` or `false`, in any case.
    Boolean,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// A comma-separated list of these words (possibly empty).
    List(&'static [&'static str]),
    /// The replication throttles: `*`, or a list of `partition:broker`
    /// (Kafka's ThrottledReplicaListValidator).
    ThrottledReplicas,
}

impl Kind {
    /// Kafka's ConfigType code for DescribeConfigs (v3+).
    pub fn describe_type(&self) -> i8 {
        match self {
            Kind::Boolean => 1,
            Kind::Choice(_) => 2,
            Kind::Int { .. } | Kind::GzipLevel => 3,
            Kind::Long { .. } => 5,
            Kind::Double { .. } => 6,
            Kind::List(_) | Kind::ThrottledReplicas => 7,
        }
    }
}

/// Where a topic config's default comes from.
#[derive(Clone, Copy, Debug)]
pub enum DefaultValue {
    /// Kafka's default, which no doze broker property changes.
    Fixed(&'static str),
    /// The broker property doze takes for it (`BrokerConfig`), in its
    /// stored form.
    Broker(fn(&BrokerConfig) -> String),
}

/// What doze does with a topic config.
#[derive(Clone, Copy, Debug)]
pub enum Effect {
    /// In force, as in Kafka.
    Kafka,
    /// Accepted, stored and described; changes nothing on one doze node
    /// (the config's `doc` says why).
    None,
    /// Only these values (in their stored form) are served; another one is
    /// INVALID_CONFIG with the message this makes of the value.
    Only(&'static [&'static str], fn(&str) -> String),
}

/// One topic config.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub name: &'static str,
    pub kind: Kind,
    pub default: DefaultValue,
    /// The broker properties Kafka describes as its synonyms, with Kafka's
    /// default of each (`None`: it has none): ServerTopicConfigSynonyms, the
    /// first being the one Kafka names it by.
    pub synonyms: &'static [(&'static str, Option<&'static str>)],
    pub effect: Effect,
    /// What it does on doze: DescribeConfigs' documentation.
    pub doc: &'static str,
}

const LONG_MAX: &str = "9223372036854775807";
const NO_TIERED_STORAGE: &str =
    "doze-kafka has no tiered storage (remote.storage.enable is always false): no effect.";
const NO_REPLICAS: &str =
    "doze-kafka is one node, the only replica of every partition: no replication to throttle, no effect.";

const fn spec(
    name: &'static str,
    kind: Kind,
    default: DefaultValue,
    synonyms: &'static [(&'static str, Option<&'static str>)],
    effect: Effect,
    doc: &'static str,
) -> Spec {
    Spec {
        name,
        kind,
        default,
        synonyms,
        effect,
        doc,
    }
}

/// Every topic config Kafka 4.3.1 has, by name.
///
/// The words of a choice are in the order Kafka's error message lists them.
/// segment.bytes may go as low as 1024 here (Kafka 4.x: 1 MiB), so that tests
/// roll segments without writing megabytes.
pub const TOPIC_CONFIGS: &[Spec] = &[
    spec(
        CLEANUP_POLICY,
        Kind::List(&[CLEANUP_POLICY_COMPACT, CLEANUP_POLICY_DELETE]),
        DefaultValue::Broker(|b| b.cleanup_policy.clone()),
        &[("log.cleanup.policy", Some("delete"))],
        Effect::Kafka,
        "What becomes of old records: delete (retention.ms and retention.bytes remove whole \
         segments), compact (the log cleaner keeps the last record of each key), both, or \
         neither (an empty list keeps everything).",
    ),
    spec(
        "compression.gzip.level",
        Kind::GzipLevel,
        DefaultValue::Fixed("-1"),
        &[("compression.gzip.level", Some("-1"))],
        Effect::Kafka,
        "The level batches are recompressed with when compression.type is gzip (-1: zlib's \
         default, 6).",
    ),
    spec(
        "compression.lz4.level",
        Kind::Int { min: 1, max: 17 },
        DefaultValue::Fixed("9"),
        &[("compression.lz4.level", Some("9"))],
        Effect::Kafka,
        "The level batches are recompressed with when compression.type is lz4.",
    ),
    spec(
        "compression.type",
        Kind::Choice(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
        DefaultValue::Broker(|b| b.compression_type.clone()),
        &[("compression.type", Some("producer"))],
        Effect::Kafka,
        "producer: record batches are stored and served as the producer compressed them. \
         uncompressed, gzip, snappy, lz4 or zstd: a batch sent with another codec is \
         decompressed and stored with this one (at its compression.*.level), as Kafka's \
         LogValidator recompresses it.",
    ),
    spec(
        "compression.zstd.level",
        Kind::Int {
            min: -131_072,
            max: 22,
        },
        DefaultValue::Fixed("3"),
        &[("compression.zstd.level", Some("3"))],
        Effect::Kafka,
        "The level batches are recompressed with when compression.type is zstd.",
    ),
    spec(
        "delete.retention.ms",
        Kind::Long { min: 0 },
        DefaultValue::Broker(|b| b.delete_retention_ms.to_string()),
        &[("log.cleaner.delete.retention.ms", Some("86400000"))],
        Effect::Kafka,
        "How long a tombstone (and the marker of an emptied transaction) of a compacted \
         topic outlives the cleaner pass that first kept it.",
    ),
    spec(
        "file.delete.delay.ms",
        Kind::Long { min: 0 },
        DefaultValue::Fixed("60000"),
        &[("log.segment.delete.delay.ms", Some("60000"))],
        Effect::None,
        "How long Kafka keeps a deleted segment's files before removing them. doze-kafka \
         removes them at once; nothing is served from them either way: no effect.",
    ),
    spec(
        "flush.messages",
        Kind::Long { min: 1 },
        DefaultValue::Fixed(LONG_MAX),
        &[("log.flush.interval.messages", Some(LONG_MAX))],
        Effect::None,
        "How many messages Kafka writes before it fsyncs. doze-kafka fsyncs every write \
         before acknowledging it, at least what any value asks: no effect.",
    ),
    spec(
        "flush.ms",
        Kind::Long { min: 0 },
        DefaultValue::Fixed(LONG_MAX),
        &[
            ("log.flush.interval.ms", None),
            ("log.flush.scheduler.interval.ms", Some(LONG_MAX)),
        ],
        Effect::None,
        "How long Kafka lets written messages wait for an fsync. doze-kafka fsyncs every \
         write before acknowledging it, at least what any value asks: no effect.",
    ),
    spec(
        "follower.replication.throttled.replicas",
        Kind::ThrottledReplicas,
        DefaultValue::Fixed(""),
        &[],
        Effect::None,
        NO_REPLICAS,
    ),
    spec(
        "index.interval.bytes",
        Kind::Int {
            min: 0,
            max: i32::MAX,
        },
        DefaultValue::Fixed("4096"),
        &[("log.index.interval.bytes", Some("4096"))],
        Effect::None,
        "How many bytes of records Kafka writes between offset index entries. doze-kafka \
         indexes every 4096 bytes whatever the value; reads find the same records: no effect.",
    ),
    spec(
        "leader.replication.throttled.replicas",
        Kind::ThrottledReplicas,
        DefaultValue::Fixed(""),
        &[],
        Effect::None,
        NO_REPLICAS,
    ),
    spec(
        "local.retention.bytes",
        Kind::Long { min: -2 },
        DefaultValue::Fixed("-2"),
        &[("log.local.retention.bytes", Some("-2"))],
        Effect::None,
        NO_TIERED_STORAGE,
    ),
    spec(
        "local.retention.ms",
        Kind::Long { min: -2 },
        DefaultValue::Fixed("-2"),
        &[("log.local.retention.ms", Some("-2"))],
        Effect::None,
        NO_TIERED_STORAGE,
    ),
    spec(
        "max.compaction.lag.ms",
        Kind::Long { min: 1 },
        DefaultValue::Broker(|b| b.max_compaction_lag_ms.to_string()),
        &[("log.cleaner.max.compaction.lag.ms", Some(LONG_MAX))],
        Effect::Kafka,
        "The longest a record of a compacted topic stays uncleaned: a segment older than \
         this is cleaned whatever the dirty ratio.",
    ),
    spec(
        "max.message.bytes",
        Kind::Int {
            min: 0,
            max: i32::MAX,
        },
        DefaultValue::Broker(|b| b.message_max_bytes.to_string()),
        &[("message.max.bytes", Some("1048588"))],
        Effect::Kafka,
        "The largest record batch a producer may write (MESSAGE_TOO_LARGE beyond it).",
    ),
    spec(
        MESSAGE_TIMESTAMP_AFTER_MAX_MS,
        Kind::Long { min: 0 },
        DefaultValue::Broker(|b| b.message_timestamp_after_max_ms.to_string()),
        &[("log.message.timestamp.after.max.ms", Some("3600000"))],
        Effect::Kafka,
        "With CreateTime, how far ahead of the broker's clock a record's timestamp may be \
         (INVALID_TIMESTAMP beyond it).",
    ),
    spec(
        MESSAGE_TIMESTAMP_BEFORE_MAX_MS,
        Kind::Long { min: 0 },
        DefaultValue::Broker(|b| b.message_timestamp_before_max_ms.to_string()),
        &[("log.message.timestamp.before.max.ms", Some(LONG_MAX))],
        Effect::Kafka,
        "With CreateTime, how far behind the broker's clock a record's timestamp may be \
         (INVALID_TIMESTAMP beyond it).",
    ),
    spec(
        MESSAGE_TIMESTAMP_TYPE,
        Kind::Choice(&["CreateTime", "LogAppendTime"]),
        DefaultValue::Broker(|b| b.message_timestamp_type.clone()),
        &[("log.message.timestamp.type", Some("CreateTime"))],
        Effect::Kafka,
        "CreateTime: records keep the producer's timestamps. LogAppendTime: each batch is \
         stamped with the broker's clock as it is appended.",
    ),
    spec(
        "min.cleanable.dirty.ratio",
        Kind::Double { min: 0.0, max: 1.0 },
        DefaultValue::Broker(|b| java_double(b.min_cleanable_ratio)),
        &[("log.cleaner.min.cleanable.ratio", Some("0.5"))],
        Effect::Kafka,
        "How much of a compacted log may be uncleaned before the cleaner passes over it.",
    ),
    spec(
        "min.compaction.lag.ms",
        Kind::Long { min: 0 },
        DefaultValue::Broker(|b| b.min_compaction_lag_ms.to_string()),
        &[("log.cleaner.min.compaction.lag.ms", Some("0"))],
        Effect::Kafka,
        "The shortest a record of a compacted topic stays uncleaned.",
    ),
    spec(
        "min.insync.replicas",
        Kind::Int {
            min: 1,
            max: i32::MAX,
        },
        DefaultValue::Fixed("1"),
        &[("min.insync.replicas", Some("1"))],
        Effect::None,
        "doze-kafka is one node, the only replica of every partition: acks=all is answered \
         once the write is on its disk, whatever the value. No effect.",
    ),
    spec(
        "preallocate",
        Kind::Boolean,
        DefaultValue::Fixed("false"),
        &[("log.preallocate", Some("false"))],
        Effect::None,
        "Whether Kafka preallocates a new segment's file. doze-kafka's segment files grow \
         as they are written: no effect.",
    ),
    spec(
        "remote.log.copy.disable",
        Kind::Boolean,
        DefaultValue::Fixed("false"),
        &[],
        Effect::None,
        NO_TIERED_STORAGE,
    ),
    spec(
        "remote.log.delete.on.disable",
        Kind::Boolean,
        DefaultValue::Fixed("false"),
        &[],
        Effect::None,
        NO_TIERED_STORAGE,
    ),
    spec(
        "remote.storage.enable",
        Kind::Boolean,
        DefaultValue::Fixed("false"),
        &[],
        Effect::Only(&["false"], |_| {
            // What a Kafka broker without tiered storage answers.
            "Tiered Storage functionality is disabled in the broker. Topic cannot be \
             configured with remote log storage."
                .into()
        }),
        "Tiered storage. doze-kafka has none, so only false is served, as on a Kafka \
         broker without it.",
    ),
    spec(
        "retention.bytes",
        // Kafka gives it no lower bound: every negative is "no limit".
        Kind::Long { min: i64::MIN },
        DefaultValue::Broker(|b| b.retention_bytes.to_string()),
        &[("log.retention.bytes", Some("-1"))],
        Effect::Kafka,
        "With the delete policy, the most bytes a partition keeps; its oldest segments go \
         beyond it (negative: no limit).",
    ),
    spec(
        "retention.ms",
        Kind::Long { min: -1 },
        DefaultValue::Broker(|b| b.retention_ms.to_string()),
        &[
            ("log.retention.ms", None),
            ("log.retention.minutes", None),
            ("log.retention.hours", Some("168")),
        ],
        Effect::Kafka,
        "With the delete policy, how long a segment is kept after its last record \
         (-1: forever).",
    ),
    spec(
        "segment.bytes",
        Kind::Int {
            min: 1024,
            max: i32::MAX,
        },
        DefaultValue::Broker(|b| b.segment_bytes.to_string()),
        &[("log.segment.bytes", Some("1073741824"))],
        Effect::Kafka,
        "The size at which a partition's active segment is rolled (retention and \
         compaction work on whole segments).",
    ),
    spec(
        "segment.index.bytes",
        Kind::Int {
            min: 4,
            max: i32::MAX,
        },
        DefaultValue::Fixed("10485760"),
        &[("log.index.size.max.bytes", Some("10485760"))],
        Effect::None,
        "The size Kafka preallocates for a segment's index files, rolling the segment when \
         one fills. doze-kafka's index files grow with their segment: no effect.",
    ),
    spec(
        "segment.jitter.ms",
        Kind::Long { min: 0 },
        DefaultValue::Fixed("0"),
        &[
            ("log.roll.jitter.ms", None),
            ("log.roll.jitter.hours", Some("0")),
        ],
        Effect::None,
        "How much earlier than segment.ms Kafka may roll a segment, at random. doze-kafka \
         rolls at segment.ms: no effect.",
    ),
    spec(
        "segment.ms",
        Kind::Long { min: 1 },
        DefaultValue::Broker(|b| b.segment_ms.to_string()),
        &[("log.roll.ms", None), ("log.roll.hours", Some("168"))],
        Effect::Kafka,
        "The age at which a partition's active segment is rolled by the next append.",
    ),
    spec(
        "unclean.leader.election.enable",
        Kind::Boolean,
        DefaultValue::Fixed("false"),
        &[("unclean.leader.election.enable", Some("false"))],
        Effect::None,
        "doze-kafka is one node, the only replica and always the leader of every \
         partition: there is never another to elect. No effect.",
    ),
];

/// A topic config by name, or `None` if it is unknown.
pub fn spec_of(key: &str) -> Option<&'static Spec> {
    TOPIC_CONFIGS.iter().find(|s| s.name == key)
}

/// The kind of a topic config, or `None` if it is unknown.
pub fn kind(key: &str) -> Option<Kind> {
    spec_of(key).map(|s| s.kind)
}

/// The default of a topic config on this broker, or `None` if it is unknown.
pub fn default_value(broker: &BrokerConfig, key: &str) -> Option<String> {
    Some(match spec_of(key)?.default {
        DefaultValue::Fixed(v) => v.to_string(),
        DefaultValue::Broker(f) => f(broker),
    })
}

/// Checks one topic config; `Err` is the message for INVALID_CONFIG.
pub fn validate(key: &str, value: &str) -> Result<(), String> {
    normalize(key, value).and_then(|v| served(key, &v))
}

/// Whether doze serves a checked value (stored form) of a known config:
/// `Err` is INVALID_CONFIG's message (see `Effect::Only`).
pub fn served(key: &str, stored: &str) -> Result<(), String> {
    match spec_of(key).map(|s| s.effect) {
        Some(Effect::Only(values, message)) if !values.contains(&stored) => Err(message(stored)),
        _ => Ok(()),
    }
}

/// Checks one topic config and returns the value as it is stored and
/// described (Kafka's parse, then print); `Err` is the message for
/// INVALID_CONFIG, Kafka's own. Whether doze serves the value is `served`'s.
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
    let int = || -> Result<i32, String> {
        trimmed
            .parse()
            .map_err(|_| invalid(value, "Not a number of type INT".into()))
    };
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
        Kind::Int { min, max } => {
            let v = int()?;
            if v < min {
                let why = format!("Value must be at least {min}");
                return Err(invalid(&v.to_string(), why));
            }
            if v > max {
                let why = format!("Value must be no more than {max}");
                return Err(invalid(&v.to_string(), why));
            }
            Ok(v.to_string())
        }
        Kind::GzipLevel => {
            let v = int()?;
            if v != -1 && !(1..=9).contains(&v) {
                let why = "Value must be between 1 and 9 or equal to -1".to_string();
                return Err(invalid(&v.to_string(), why));
            }
            Ok(v.to_string())
        }
        Kind::Boolean => match trimmed.to_ascii_lowercase().as_str() {
            v @ ("true" | "false") => Ok(v.to_string()),
            _ => Err(invalid(
                value,
                "Expected value to be either true or false".into(),
            )),
        },
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
        Kind::ThrottledReplicas => {
            let items = list_items(value);
            // Kafka takes "*" alone, or any number of "partition:broker"
            // (an empty item too), and keeps the list as split.
            let pair = |item: &str| match item.split_once(':') {
                Some((p, b)) => is_digits(p) && is_digits(b),
                None => item.is_empty(),
            };
            if !(items.iter().all(|i| pair(i)) || items.concat() == "*") {
                return Err(format!(
                    "Invalid value [{}] for configuration {key}: {key} must be the literal '*' or a \
                     list of replicas in the following format: \
                     [partitionId]:[brokerId],[partitionId]:[brokerId],...",
                    items.join(", ")
                ));
            }
            Ok(items.join(","))
        }
    }
}

/// Whether `s` is one or more ASCII digits (Java's `[0-9]+`).
fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit())
}

/// The items of a LIST value as Kafka's ConfigDef splits it: trimmed, split
/// at commas with the blanks around them; an empty value is an empty list,
/// and an empty item ("a,,b", "a,") is kept (cleanup.policy refuses it,
/// the replication throttles keep it).
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
    let stored = configs
        .iter()
        .map(|(key, value)| Ok((key.clone(), normalize(key, value)?)))
        .collect::<Result<BTreeMap<String, String>, String>>()?;
    check_served(&stored)?;
    Ok(stored)
}

/// Every override (stored form) is a value doze serves (`served`), checked
/// once all are valid, as Kafka checks tiered storage after the values.
pub fn check_served(stored: &BTreeMap<String, String>) -> Result<(), String> {
    stored
        .iter()
        .try_for_each(|(key, value)| served(key, value))
}

/// Where a described value comes from (Kafka's ConfigSource).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The topic's override.
    DynamicTopic,
    /// A broker property set in the config file or by `--set`.
    StaticBroker,
    /// Kafka's default of the config or of its broker property.
    Default,
}

impl Source {
    /// Kafka's ConfigSource code.
    pub fn code(self) -> i8 {
        match self {
            Source::DynamicTopic => 1,
            Source::StaticBroker => 4,
            Source::Default => 5,
        }
    }
}

/// One synonym of a described config: a name, its value, where it is set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Synonym {
    pub name: String,
    pub value: String,
    pub source: Source,
}

/// A topic config as DescribeConfigs and CreateTopics describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    pub value: String,
    pub source: Source,
    /// What DescribeConfigs lists with include_synonyms, in Kafka's order.
    pub synonyms: Vec<Synonym>,
}

/// How Kafka describes `spec` for a topic with `overrides` on `broker`
/// (ConfigHelper.createTopicConfigEntry and configSynonyms): the override
/// first, then the broker synonyms set statically, then those with a
/// default, all in `spec.synonyms` order, and of the broker ones only
/// from the first named by Kafka's own synonym on (so `log.retention.hours`
/// set alone is not listed for retention.ms, whose synonym is
/// `log.retention.ms`). The source is the first synonym's, else DEFAULT.
/// doze has no dynamic broker configs, so none comes from one.
pub fn describe(
    broker: &BrokerConfig,
    overrides: &BTreeMap<String, String>,
    spec: &Spec,
) -> Described {
    let set = spec.synonyms.iter().filter_map(|(name, _)| {
        let value = broker.properties_set.get(*name)?;
        Some((*name, value.clone(), Source::StaticBroker))
    });
    let defaults = spec
        .synonyms
        .iter()
        .filter_map(|(name, default)| Some((*name, (*default)?.to_string(), Source::Default)));
    let mut synonyms: Vec<Synonym> = set
        .chain(defaults)
        .skip_while(|(name, _, _)| {
            spec.synonyms
                .first()
                .is_some_and(|(first, _)| name != first)
        })
        .map(|(name, value, source)| Synonym {
            name: name.to_string(),
            value,
            source,
        })
        .collect();
    let value = match overrides.get(spec.name) {
        Some(value) => {
            synonyms.insert(
                0,
                Synonym {
                    name: spec.name.to_string(),
                    value: value.clone(),
                    source: Source::DynamicTopic,
                },
            );
            value.clone()
        }
        None => default_value(broker, spec.name).expect("a known config has a default"),
    };
    let source = synonyms.first().map_or(Source::Default, |s| s.source);
    Described {
        value,
        source,
        synonyms,
    }
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

/// A numeric config's stored value. Values were checked when stored; one
/// that is not a number now is a broken invariant.
fn stored_long(key: &str, v: &str) -> i64 {
    v.trim()
        .parse::<i64>()
        .unwrap_or_else(|_| panic!("topic config {key} holds {v:?}, not a number"))
}

impl CleanupConfig {
    /// The view of a topic's effective configs; `value(key)` is the override
    /// or the broker default. Values were checked when stored; one that is
    /// not a number now is a broken invariant.
    pub fn from_values(value: impl Fn(&str) -> String) -> Self {
        let long = |key: &str| stored_long(key, &value(key));
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

/// What a produce checks of one topic's configs. The topic keeps it and
/// reads it again only when its configs change, so an append neither looks
/// configs up by name nor parses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendConfig {
    /// max.message.bytes: the largest batch taken.
    pub message_bytes_max: usize,
    /// segment.bytes: a batch larger than a segment is refused too.
    pub segment_bytes: usize,
    /// message.timestamp.type is LogAppendTime: the broker stamps batches.
    pub log_append_time: bool,
    /// message.timestamp.before.max.ms (CreateTime only).
    pub timestamp_before_max_ms: i64,
    /// message.timestamp.after.max.ms (CreateTime only).
    pub timestamp_after_max_ms: i64,
    /// cleanup.policy has `compact`: every record needs a key.
    pub compact: bool,
    /// compression.type, with its codec's level.
    pub compression: StoredCompression,
}

/// A topic's compression.type, and the largest batch it takes as sent
/// (max.message.bytes, segment.bytes): Kafka refuses a larger one before it
/// would recompress it, so a driver leaves such a batch for the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducePrep {
    pub compression: StoredCompression,
    pub batch_bytes_max: usize,
}

/// compression.type: how Produce stores a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredCompression {
    /// `producer`: compressed as the producer sent it.
    Producer,
    /// This codec (the batch attributes' code: 0 uncompressed, 1 gzip,
    /// 2 snappy, 3 lz4, 4 zstd) at this level (compression.<codec>.level;
    /// -1 where the codec has none).
    Codec { code: u8, level: i32 },
}

impl AppendConfig {
    /// The view of a topic's effective configs; `value(key)` is the override
    /// or the broker default, checked when stored.
    pub fn from_values(value: impl Fn(&str) -> String) -> Self {
        let long = |key: &str| stored_long(key, &value(key));
        let size = |key: &str| usize::try_from(long(key).max(0)).unwrap_or(usize::MAX);
        // Checked against the level's range when stored.
        let level = |key: &str| i32::try_from(long(key)).unwrap_or(-1);
        Self {
            message_bytes_max: size("max.message.bytes"),
            segment_bytes: size("segment.bytes"),
            log_append_time: value(MESSAGE_TIMESTAMP_TYPE) == "LogAppendTime",
            timestamp_before_max_ms: long(MESSAGE_TIMESTAMP_BEFORE_MAX_MS),
            timestamp_after_max_ms: long(MESSAGE_TIMESTAMP_AFTER_MAX_MS),
            compact: cleanup_policy(&value(CLEANUP_POLICY)).0,
            compression: match value("compression.type").as_str() {
                "uncompressed" => StoredCompression::Codec { code: 0, level: -1 },
                "gzip" => StoredCompression::Codec {
                    code: 1,
                    level: level("compression.gzip.level"),
                },
                "snappy" => StoredCompression::Codec { code: 2, level: -1 },
                "lz4" => StoredCompression::Codec {
                    code: 3,
                    level: level("compression.lz4.level"),
                },
                "zstd" => StoredCompression::Codec {
                    code: 4,
                    level: level("compression.zstd.level"),
                },
                _ => StoredCompression::Producer,
            },
        }
    }

    /// What a driver needs to recompress this topic's batches before the
    /// core sees them (`Output::TopicCompression`).
    pub fn produce_prep(&self) -> ProducePrep {
        ProducePrep {
            compression: self.compression,
            batch_bytes_max: self.message_bytes_max.min(self.segment_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_config_has_a_default_that_validates() {
        let broker = BrokerConfig::default();
        for spec in TOPIC_CONFIGS {
            let key = spec.name;
            let v = default_value(&broker, key).unwrap_or_else(|| panic!("{key} has no default"));
            let stored =
                normalize(key, &v).unwrap_or_else(|e| panic!("{key}: default {v} invalid: {e}"));
            assert_eq!(stored, v, "{key}: a default is already in its stored form");
            served(key, &v).unwrap_or_else(|e| panic!("{key}: default {v} not served: {e}"));
        }
        let names: Vec<&str> = TOPIC_CONFIGS.iter().map(|s| s.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted, "TOPIC_CONFIGS is kept by name");
    }

    /// Kafka 4.3.1's topic configs (LogConfig.nonInternalConfigNames), and
    /// the default each has on a broker that sets nothing (what
    /// `kafka-configs --describe --all` shows there).
    const KAFKA_4_3_1_DEFAULTS: &[(&str, &str)] = &[
        ("cleanup.policy", "delete"),
        ("compression.gzip.level", "-1"),
        ("compression.lz4.level", "9"),
        ("compression.type", "producer"),
        ("compression.zstd.level", "3"),
        ("delete.retention.ms", "86400000"),
        ("file.delete.delay.ms", "60000"),
        ("flush.messages", "9223372036854775807"),
        ("flush.ms", "9223372036854775807"),
        ("follower.replication.throttled.replicas", ""),
        ("index.interval.bytes", "4096"),
        ("leader.replication.throttled.replicas", ""),
        ("local.retention.bytes", "-2"),
        ("local.retention.ms", "-2"),
        ("max.compaction.lag.ms", "9223372036854775807"),
        ("max.message.bytes", "1048588"),
        ("message.timestamp.after.max.ms", "3600000"),
        ("message.timestamp.before.max.ms", "9223372036854775807"),
        ("message.timestamp.type", "CreateTime"),
        ("min.cleanable.dirty.ratio", "0.5"),
        ("min.compaction.lag.ms", "0"),
        ("min.insync.replicas", "1"),
        ("preallocate", "false"),
        ("remote.log.copy.disable", "false"),
        ("remote.log.delete.on.disable", "false"),
        ("remote.storage.enable", "false"),
        ("retention.bytes", "-1"),
        ("retention.ms", "604800000"),
        ("segment.bytes", "1073741824"),
        ("segment.index.bytes", "10485760"),
        ("segment.jitter.ms", "0"),
        ("segment.ms", "604800000"),
        ("unclean.leader.election.enable", "false"),
    ];

    #[test]
    fn every_kafka_config_with_kafkas_default() {
        let broker = BrokerConfig::default();
        let ours: Vec<(&str, String)> = TOPIC_CONFIGS
            .iter()
            .map(|s| (s.name, default_value(&broker, s.name).unwrap()))
            .collect();
        let kafka: Vec<(&str, String)> = KAFKA_4_3_1_DEFAULTS
            .iter()
            .map(|(k, v)| (*k, v.to_string()))
            .collect();
        assert_eq!(ours, kafka);
    }

    #[test]
    fn the_broker_default_of_a_synonym_is_what_a_doze_broker_defaults_to() {
        // A config doze takes a broker property for: Kafka's default of
        // that property (its first with one) is the topic default here.
        let broker = BrokerConfig::default();
        for spec in TOPIC_CONFIGS {
            let DefaultValue::Broker(f) = spec.default else {
                continue;
            };
            let (property, kafka) = spec
                .synonyms
                .iter()
                .find_map(|(n, d)| d.map(|d| (*n, d)))
                .unwrap_or_else(|| panic!("{} has no broker default", spec.name));
            let ours = f(&broker);
            match property {
                "log.retention.hours" | "log.roll.hours" => {
                    let hours: i64 = kafka.parse().unwrap();
                    assert_eq!(ours, (hours * 3_600_000).to_string(), "{}", spec.name);
                }
                _ => assert_eq!(ours, kafka, "{}", spec.name),
            }
        }
    }

    #[test]
    fn synonyms_as_kafka_lists_them() {
        let mut broker = BrokerConfig::default();
        let spec = |k| spec_of(k).unwrap();
        let syn = |d: &Described| -> Vec<(String, String, i8)> {
            d.synonyms
                .iter()
                .map(|s| (s.name.clone(), s.value.clone(), s.source.code()))
                .collect()
        };
        let s = |n: &str, v: &str, src: i8| (n.to_string(), v.to_string(), src);
        let mut overrides = BTreeMap::new();
        overrides.insert("max.message.bytes".to_string(), "2000000".to_string());
        overrides.insert("retention.ms".to_string(), "86400000".to_string());
        // What Kafka 4.3.1 answers for kt-topic (tests/test_kafka_tools.py).
        let d = describe(&broker, &overrides, spec("max.message.bytes"));
        assert_eq!(
            (d.value.as_str(), d.source),
            ("2000000", Source::DynamicTopic)
        );
        assert_eq!(
            syn(&d),
            vec![
                s("max.message.bytes", "2000000", 1),
                s("message.max.bytes", "1048588", 5)
            ]
        );
        let d = describe(&broker, &overrides, spec("retention.ms"));
        assert_eq!(syn(&d), vec![s("retention.ms", "86400000", 1)]);
        let d = describe(&broker, &overrides, spec("segment.ms"));
        assert_eq!((d.value.as_str(), d.source), ("604800000", Source::Default));
        assert!(d.synonyms.is_empty());
        let d = describe(
            &broker,
            &overrides,
            spec("follower.replication.throttled.replicas"),
        );
        assert_eq!((d.value.as_str(), d.source), ("", Source::Default));
        assert!(d.synonyms.is_empty());
        let d = describe(&broker, &overrides, spec("cleanup.policy"));
        assert_eq!(syn(&d), vec![s("log.cleanup.policy", "delete", 5)]);

        // A broker property set: STATIC_BROKER_CONFIG, before the default.
        broker.set("message.max.bytes", " 3000000 ").unwrap();
        broker.set("log.retention.ms", "5000").unwrap();
        let none = BTreeMap::new();
        let d = describe(&broker, &none, spec("max.message.bytes"));
        assert_eq!(
            (d.value.as_str(), d.source),
            ("3000000", Source::StaticBroker)
        );
        assert_eq!(
            syn(&d),
            vec![
                s("message.max.bytes", "3000000", 4),
                s("message.max.bytes", "1048588", 5)
            ]
        );
        let d = describe(&broker, &none, spec("retention.ms"));
        assert_eq!((d.value.as_str(), d.source), ("5000", Source::StaticBroker));
        assert_eq!(
            syn(&d),
            vec![
                s("log.retention.ms", "5000", 4),
                s("log.retention.hours", "168", 5)
            ]
        );
        // log.retention.hours alone: Kafka lists nothing, since its own
        // synonym (log.retention.ms) is not among them, and says DEFAULT.
        let mut hours = BrokerConfig::default();
        hours.set("log.retention.hours", "24").unwrap();
        let d = describe(&hours, &none, spec("retention.ms"));
        assert_eq!((d.value.as_str(), d.source), ("86400000", Source::Default));
        assert!(d.synonyms.is_empty());
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
    fn new_kinds_are_refused_with_kafkas_messages() {
        let err = |k, v| normalize(k, v).unwrap_err();
        assert_eq!(
            err("compression.gzip.level", " 0 "),
            "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1"
        );
        assert_eq!(
            err("compression.gzip.level", "abc"),
            "Invalid value abc for configuration compression.gzip.level: Not a number of type INT"
        );
        assert_eq!(
            err("compression.lz4.level", "18"),
            "Invalid value 18 for configuration compression.lz4.level: Value must be no more than 17"
        );
        assert_eq!(
            err("compression.zstd.level", "-131073"),
            "Invalid value -131073 for configuration compression.zstd.level: Value must be at least -131072"
        );
        assert_eq!(
            err("preallocate", " yes "),
            "Invalid value  yes  for configuration preallocate: Expected value to be either true or false"
        );
        assert_eq!(
            err("preallocate", "1"),
            "Invalid value 1 for configuration preallocate: Expected value to be either true or false"
        );
        let throttle = "must be the literal '*' or a list of replicas in the following format: \
                        [partitionId]:[brokerId],[partitionId]:[brokerId],...";
        assert_eq!(
            err("leader.replication.throttled.replicas", " a , b "),
            format!(
                "Invalid value [a, b] for configuration leader.replication.throttled.replicas: \
                 leader.replication.throttled.replicas {throttle}"
            )
        );
        for bad in ["*,0:1", "*,*", "-1:1", "0:1:2", "x"] {
            assert!(
                validate("follower.replication.throttled.replicas", bad).is_err(),
                "{bad}"
            );
        }
        assert_eq!(
            err("segment.index.bytes", "3"),
            "Invalid value 3 for configuration segment.index.bytes: Value must be at least 4"
        );
        assert_eq!(
            err("local.retention.ms", "-3"),
            "Invalid value -3 for configuration local.retention.ms: Value must be at least -2"
        );
        assert_eq!(
            err("flush.messages", "0"),
            "Invalid value 0 for configuration flush.messages: Value must be at least 1"
        );
        assert_eq!(
            err("message.timestamp.after.max.ms", "-1"),
            "Invalid value -1 for configuration message.timestamp.after.max.ms: Value must be at least 0"
        );
    }

    #[test]
    fn values_doze_does_not_serve_are_refused() {
        // Valid for Kafka, refused here: doze has no tiered storage.
        assert_eq!(
            validate("remote.storage.enable", "TRUE").unwrap_err(),
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."
        );
        validate("remote.storage.enable", "false").unwrap();
        let mut m = BTreeMap::new();
        m.insert("remote.storage.enable".to_string(), "true".to_string());
        assert!(check_all(&m).is_err());
        // Every compression.type Kafka takes is served, and its view is
        // the codec and level Produce stores batches with.
        assert_eq!(normalize("compression.type", " gzip ").unwrap(), "gzip");
        for v in [
            "uncompressed",
            "gzip",
            "snappy",
            "lz4",
            "zstd",
            " producer ",
        ] {
            validate("compression.type", v).unwrap_or_else(|e| panic!("{v}: {e}"));
        }
        assert!(validate("compression.type", "none").is_err());
        let view = |pairs: &[(&str, &str)]| {
            let m: BTreeMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            AppendConfig::from_values(|k| {
                m.get(k)
                    .cloned()
                    .unwrap_or_else(|| default_value(&BrokerConfig::default(), k).unwrap())
            })
            .compression
        };
        assert_eq!(view(&[]), StoredCompression::Producer);
        assert_eq!(
            view(&[
                ("compression.type", "zstd"),
                ("compression.zstd.level", "-5")
            ]),
            StoredCompression::Codec { code: 4, level: -5 }
        );
        assert_eq!(
            view(&[("compression.type", "gzip")]),
            StoredCompression::Codec { code: 1, level: -1 }
        );
        assert_eq!(
            view(&[("compression.type", "lz4")]),
            StoredCompression::Codec { code: 3, level: 9 }
        );
        // Those with no effect are taken, as Kafka takes them.
        for (k, v) in [
            ("min.insync.replicas", "2"),
            ("unclean.leader.election.enable", "true"),
            ("follower.replication.throttled.replicas", "*"),
            ("leader.replication.throttled.replicas", "0:1,1:1"),
            ("remote.log.copy.disable", "true"),
            ("local.retention.ms", "1000"),
            ("flush.messages", "1"),
            ("preallocate", "true"),
            ("segment.jitter.ms", "100"),
            ("compression.gzip.level", "9"),
        ] {
            validate(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
        }
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
        assert_eq!(ok("preallocate", " TRUE "), "true");
        assert_eq!(ok("unclean.leader.election.enable", "False"), "false");
        assert_eq!(
            ok("follower.replication.throttled.replicas", " 0:1 , 1:2 "),
            "0:1,1:2"
        );
        assert_eq!(
            ok("follower.replication.throttled.replicas", "0:1,0:1"),
            "0:1,0:1"
        );
        assert_eq!(ok("leader.replication.throttled.replicas", " * "), "*");
        assert_eq!(ok("leader.replication.throttled.replicas", "0:1,"), "0:1,");
        assert_eq!(
            ok("leader.replication.throttled.replicas", "0:1,,1:2"),
            "0:1,,1:2"
        );
        assert_eq!(ok("leader.replication.throttled.replicas", ""), "");
        assert_eq!(ok("file.delete.delay.ms", " 07 "), "7");
        assert_eq!(ok("compression.gzip.level", "-1"), "-1");
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
