//! Broker settings from `--config FILE` and `--set KEY=VALUE`, and the
//! `HOST:PORT` flag type.
//!
//! Every key goes to `BrokerConfig::set`, which knows the Kafka names and
//! rejects unknown keys: a typo in a durability setting should stop the broker,
//! not be ignored. The file is read first and `--set` flags after it, in order,
//! so a flag overrides the file.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use doze_core::BrokerConfig;

/// Builds the broker configuration. The error is one line, for the user.
pub fn load(file: Option<&Path>, sets: &[String]) -> Result<BrokerConfig, String> {
    let mut settings = BrokerConfig::default();
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        let pairs =
            parse_properties(&text).map_err(|e| format!("config file {}: {e}", path.display()))?;
        for (line, key, value) in pairs {
            settings
                .set(&key, &value)
                .map_err(|e| format!("config file {} line {line}: {e}", path.display()))?;
        }
    }
    for set in sets {
        let (key, value) = set
            .split_once('=')
            .ok_or_else(|| format!("--set expects KEY=VALUE, got {set:?}"))?;
        settings
            .set(key.trim(), value.trim())
            .map_err(|e| format!("--set {set}: {e}"))?;
    }
    Ok(settings)
}

/// Parses Java-properties text into `(line number, key, value)` triples.
///
/// Supported, as in `java.util.Properties`: blank lines, `#` and `!` comments,
/// `=` or `:` between key and value, whitespace around both, and a line ending
/// in an odd number of backslashes continuing on the next. Not supported:
/// backslash escapes and whitespace as the only separator; broker configs do
/// not need them, and a line without `=` or `:` is reported, not guessed at.
pub fn parse_properties(text: &str) -> Result<Vec<(usize, String, String)>, String> {
    let mut pairs = Vec::new();
    // A logical line may span several physical lines; it is reported by the
    // number of its first one.
    let mut logical = String::new();
    let mut first_line = 0;
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim_start();
        if logical.is_empty() {
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            first_line = index + 1;
        }
        let backslashes = line.chars().rev().take_while(|&c| c == '\\').count();
        if backslashes % 2 == 1 {
            logical.push_str(&line[..line.len() - 1]);
            continue;
        }
        logical.push_str(line);
        pairs.push(split_pair(first_line, &logical)?);
        logical.clear();
    }
    if !logical.is_empty() {
        // The file ended inside a continuation; what was gathered still counts.
        pairs.push(split_pair(first_line, &logical)?);
    }
    Ok(pairs)
}

fn split_pair(line: usize, text: &str) -> Result<(usize, String, String), String> {
    let Some(at) = text.find(['=', ':']) else {
        return Err(format!("line {line}: expected key=value, got {text:?}"));
    };
    let key = text[..at].trim();
    if key.is_empty() {
        return Err(format!("line {line}: empty key"));
    }
    Ok((line, key.to_string(), text[at + 1..].trim().to_string()))
}

/// A `HOST:PORT` flag value. IPv6 hosts are written in brackets
/// (`[::1]:9092`) and kept without them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl FromStr for HostPort {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("expected HOST:PORT, got {s:?}");
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (host, port) = rest.split_once("]:").ok_or_else(bad)?;
            (host, port)
        } else {
            s.rsplit_once(':').ok_or_else(bad)?
        };
        if host.is_empty() || host.contains(['[', ']']) {
            return Err(bad());
        }
        let port = port.parse().map_err(|_| format!("bad port in {s:?}"))?;
        Ok(Self {
            host: host.to_string(),
            port,
        })
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_comments_separators_and_continuations() {
        let text = "\
# a comment
! another comment

log.segment.bytes = 1048576
num.partitions:3
cluster.id=abc\\
   def
  auto.create.topics.enable=false
";
        let pairs = parse_properties(text).unwrap();
        let pairs: Vec<_> = pairs
            .iter()
            .map(|(l, k, v)| (*l, k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            pairs,
            vec![
                (4, "log.segment.bytes", "1048576"),
                (5, "num.partitions", "3"),
                (6, "cluster.id", "abcdef"),
                (8, "auto.create.topics.enable", "false"),
            ]
        );
    }

    #[test]
    fn properties_errors_name_the_line() {
        let err = parse_properties("a=1\n\njust-a-word\n").unwrap_err();
        assert!(err.starts_with("line 3:"), "{err}");
        let err = parse_properties("=1\n").unwrap_err();
        assert!(err.contains("empty key"), "{err}");
        // An escaped trailing backslash does not continue the line.
        let pairs = parse_properties("a=x\\\\\nb=2\n").unwrap();
        assert_eq!(pairs.len(), 2);
    }

    #[test]
    fn load_applies_file_then_flags() {
        let path = std::env::temp_dir().join(format!(
            "doze-config-test-{}.properties",
            std::process::id()
        ));
        std::fs::write(&path, "log.segment.bytes=1048576\nnum.partitions=3\n").unwrap();
        let settings = load(Some(&path), &["num.partitions=5".to_string()]).unwrap();
        assert_eq!(settings.segment_bytes, 1_048_576);
        assert_eq!(settings.default_partitions, 5);

        std::fs::write(&path, "# fine\nno.such.key=1\n").unwrap();
        let err = load(Some(&path), &[]).unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        std::fs::remove_file(&path).unwrap();

        assert!(load(None, &["missing-equals".to_string()]).is_err());
        assert!(load(None, &["log.segment.bytes=tiny".to_string()]).is_err());
    }

    #[test]
    fn log_cleaner_defaults() {
        let sets = [
            "log.cleanup.policy=compact, delete",
            "log.cleaner.min.cleanable.ratio=0.25",
            "log.cleaner.min.compaction.lag.ms=1000",
            "log.cleaner.max.compaction.lag.ms=60000",
            "log.cleaner.delete.retention.ms=5000",
            "log.roll.hours=2",
        ]
        .map(String::from);
        let settings = load(None, &sets).unwrap();
        assert_eq!(settings.cleanup_policy, "compact,delete");
        assert_eq!(settings.min_cleanable_ratio, 0.25);
        assert_eq!(settings.min_compaction_lag_ms, 1000);
        assert_eq!(settings.max_compaction_lag_ms, 60_000);
        assert_eq!(settings.delete_retention_ms, 5000);
        assert_eq!(settings.segment_ms, 2 * 3_600_000);
        let settings = load(None, &["log.roll.ms=1500".to_string()]).unwrap();
        assert_eq!(settings.segment_ms, 1500);
        for bad in [
            "log.cleanup.policy=none",
            "log.cleaner.min.cleanable.ratio=1.5",
            "log.roll.ms=0",
            "log.cleaner.max.compaction.lag.ms=0",
        ] {
            let err = load(None, &[bad.to_string()]).unwrap_err();
            assert!(err.contains("Invalid value"), "{bad}: {err}");
        }
    }

    #[test]
    fn host_port() {
        let hp: HostPort = "127.0.0.1:9092".parse().unwrap();
        assert_eq!((hp.host.as_str(), hp.port), ("127.0.0.1", 9092));
        let hp: HostPort = "[::1]:19092".parse().unwrap();
        assert_eq!((hp.host.as_str(), hp.port), ("::1", 19092));
        assert_eq!(hp.to_string(), "[::1]:19092");
        assert!("localhost".parse::<HostPort>().is_err());
        assert!(":9092".parse::<HostPort>().is_err());
        assert!("host:99999".parse::<HostPort>().is_err());
        assert!("::1:9092"
            .parse::<HostPort>()
            .is_ok_and(|hp| hp.host == "::1"));
    }
}
