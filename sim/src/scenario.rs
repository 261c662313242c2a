//! Scenarios: named, seeded stories, one plain-text file each in the
//! workspace's `scenarios/` directory (embedded at build time by build.rs).
//!
//! A file is `key = value` lines; `#` starts a comment. Numbers may be ranges
//! (`records = 100..300`), drawn per seed, so each seed tells the story a
//! little differently. Faults are `fault = <kind> at <ms> [for <ms>]` with
//! times counted from the start of the workload (after the topic exists);
//! see `faults::FaultKind` for the kinds. `swarm = true` adds random faults
//! at rates drawn from the seed (`faults::FaultMix`).
//!
//! ```text
//! name = power-cut-mid-produce
//! description = A power cut while producers have batches in flight.
//! partitions = 3
//! idempotent_producers = 2
//! plain_producers = 1
//! consumers = 1
//! records = 200..400
//! fault = power-cut at 50..300
//! ```

use rand::RngExt;

use crate::faults::{FaultSpec, MsRange};

mod builtin {
    include!(concat!(env!("OUT_DIR"), "/scenarios.rs"));
}

fn percent(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(p) if p <= 100 => Ok(p),
        _ => Err(format!("bad percent {text:?}")),
    }
}

/// A `true`/`false` value.
fn flag(key: &str, value: &str) -> Result<bool, String> {
    value.parse().map_err(|_| format!("bad {key} {value:?}"))
}

/// An inclusive range of a count, drawn per seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Count {
    pub min: u64,
    pub max: u64,
}

impl Count {
    fn parse(text: &str) -> Result<Self, String> {
        let r = MsRange::parse(text)?;
        Ok(Self {
            min: r.min_ms as u64,
            max: r.max_ms as u64,
        })
    }

    pub fn draw(self, rng: &mut impl rand::Rng) -> u64 {
        rng.random_range(self.min..=self.max)
    }

    const fn one(n: u64) -> Self {
        Self { min: n, max: n }
    }
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub partitions: Count,
    pub idempotent_producers: Count,
    pub plain_producers: Count,
    /// acks of the plain producers (1 or -1).
    pub plain_acks: i16,
    pub consumers: Count,
    /// Records each producer makes.
    pub records: Count,
    /// log.segment.bytes choices; small ones make segments roll.
    pub segment_bytes: Vec<u64>,
    pub faults: Vec<FaultSpec>,
    pub swarm: bool,
    /// The main topic is compacted (`cleanup.policy=compact`, records with
    /// keys); a swarm run draws it now and then.
    pub compacted: bool,
    /// The main topic has retention (`retention.bytes` or `retention.ms`,
    /// small segments; `compact,delete` when compacted too): the broker
    /// deletes its oldest segments as the run goes; a swarm run draws it
    /// now and then.
    pub retention: bool,
    /// With retention on a topic that is not compacted: an operator also
    /// trims the main topic with DeleteRecords now and then (a swarm run
    /// with retention draws it one time in two).
    pub delete_records: bool,
    /// An operator deletes a scratch topic and creates it again, round
    /// after round (`client::churner`); a swarm run draws it now and then.
    pub churn: bool,
    /// A consumer commits offsets with short retention times to a simple
    /// group and reads them back while the broker expires them
    /// (`client::offset_keeper`); a swarm run draws it now and then.
    pub offset_expiry: bool,
    /// Transactional producers, and the transactions each runs.
    pub txn_producers: Count,
    pub transactions: Count,
    /// Pairs of instances sharing one transactional id: the first becomes
    /// a zombie when the second (started later) takes the id over.
    pub zombies: Count,
    /// When the second instance of a zombie pair starts (ms into the workload).
    pub usurper_at: MsRange,
    /// transaction.timeout.ms of the transactional clients.
    pub txn_timeout_ms: MsRange,
    /// Percent chances, per transaction, of an abort and of going silent past
    /// the timeout; per producer, of dying with its last transaction open.
    pub abort_percent: u64,
    pub silent_percent: u64,
    pub dead_percent: u64,
    pub rc_consumers: Count,
    /// Read-process-write copiers from the main topic to an output topic.
    pub copiers: Count,
    /// Percent chance that the copier process crashes after any answer.
    pub copier_crash_percent: u64,
    /// Group copiers: members of one consumer group copying the main topic
    /// to their own output topic, those started with the workload and
    /// those that join later (at `group_join_at`), each with its own
    /// transactional id. `group_percent`: chance that they run at all.
    pub group_copiers: Count,
    pub group_joiners: Count,
    pub group_join_at: MsRange,
    pub group_percent: u64,
    /// Percent chance that a member process crashes after an answer inside
    /// a transaction (at most `group_crashes_max` times per member).
    pub group_crash_percent: u64,
    pub group_crashes_max: u64,
    /// session.timeout.ms of the members (the broker's minimum is 6000).
    pub group_session_ms: MsRange,
}

impl Scenario {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut s = Scenario {
            name: String::new(),
            description: String::new(),
            partitions: Count::one(2),
            idempotent_producers: Count::one(2),
            plain_producers: Count::one(1),
            plain_acks: 1,
            consumers: Count::one(1),
            records: Count { min: 100, max: 300 },
            segment_bytes: vec![4096, 64 * 1024, 1 << 30],
            faults: Vec::new(),
            swarm: false,
            compacted: false,
            retention: false,
            delete_records: false,
            churn: false,
            offset_expiry: false,
            txn_producers: Count::one(0),
            transactions: Count { min: 5, max: 20 },
            zombies: Count::one(0),
            usurper_at: MsRange {
                min_ms: 50,
                max_ms: 500,
            },
            txn_timeout_ms: MsRange {
                min_ms: 2000,
                max_ms: 6000,
            },
            abort_percent: 25,
            silent_percent: 0,
            dead_percent: 0,
            rc_consumers: Count::one(0),
            copiers: Count::one(0),
            copier_crash_percent: 2,
            group_copiers: Count::one(0),
            group_joiners: Count::one(0),
            group_join_at: MsRange {
                min_ms: 500,
                max_ms: 5000,
            },
            group_percent: 100,
            group_crash_percent: 2,
            group_crashes_max: 2,
            group_session_ms: MsRange {
                min_ms: 6000,
                max_ms: 10_000,
            },
        };
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |e: String| format!("line {}: {e}", i + 1);
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| err(format!("expected key = value: {raw:?}")))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "name" => s.name = value.to_string(),
                "description" => s.description = value.to_string(),
                "partitions" => s.partitions = Count::parse(value).map_err(err)?,
                "idempotent_producers" => {
                    s.idempotent_producers = Count::parse(value).map_err(err)?
                }
                "plain_producers" => s.plain_producers = Count::parse(value).map_err(err)?,
                "plain_acks" => {
                    s.plain_acks = value
                        .parse()
                        .map_err(|_| err(format!("bad acks {value:?}")))?
                }
                "consumers" => s.consumers = Count::parse(value).map_err(err)?,
                "records" => s.records = Count::parse(value).map_err(err)?,
                "segment_bytes" => {
                    let parsed: Result<Vec<u64>, _> =
                        value.split(',').map(|v| v.trim().parse()).collect();
                    s.segment_bytes =
                        parsed.map_err(|_| err(format!("bad segment_bytes {value:?}")))?;
                }
                "fault" => s.faults.push(FaultSpec::parse(value).map_err(err)?),
                "compacted" => s.compacted = flag(key, value).map_err(err)?,
                "retention" => s.retention = flag(key, value).map_err(err)?,
                "delete_records" => s.delete_records = flag(key, value).map_err(err)?,
                "swarm" => s.swarm = flag(key, value).map_err(err)?,
                "churn" => s.churn = flag(key, value).map_err(err)?,
                "offset_expiry" => s.offset_expiry = flag(key, value).map_err(err)?,
                "txn_producers" => s.txn_producers = Count::parse(value).map_err(err)?,
                "transactions" => s.transactions = Count::parse(value).map_err(err)?,
                "zombies" => s.zombies = Count::parse(value).map_err(err)?,
                "usurper_at" => s.usurper_at = MsRange::parse(value).map_err(err)?,
                "txn_timeout_ms" => s.txn_timeout_ms = MsRange::parse(value).map_err(err)?,
                "abort_percent" => s.abort_percent = percent(value).map_err(err)?,
                "silent_percent" => s.silent_percent = percent(value).map_err(err)?,
                "dead_percent" => s.dead_percent = percent(value).map_err(err)?,
                "rc_consumers" => s.rc_consumers = Count::parse(value).map_err(err)?,
                "copiers" => s.copiers = Count::parse(value).map_err(err)?,
                "copier_crash_percent" => s.copier_crash_percent = percent(value).map_err(err)?,
                "group_copiers" => s.group_copiers = Count::parse(value).map_err(err)?,
                "group_joiners" => s.group_joiners = Count::parse(value).map_err(err)?,
                "group_join_at" => s.group_join_at = MsRange::parse(value).map_err(err)?,
                "group_percent" => s.group_percent = percent(value).map_err(err)?,
                "group_crash_percent" => s.group_crash_percent = percent(value).map_err(err)?,
                "group_crashes_max" => s.group_crashes_max = Count::parse(value).map_err(err)?.max,
                "group_session_ms" => s.group_session_ms = MsRange::parse(value).map_err(err)?,
                _ => return Err(err(format!("unknown key {key:?}"))),
            }
        }
        if s.name.is_empty() {
            return Err("a scenario needs a name".into());
        }
        if s.partitions.min < 1
            || s.segment_bytes.is_empty()
            || s.segment_bytes.iter().any(|&b| b < 4096)
        {
            return Err(format!(
                "{}: needs partitions >= 1 and segment_bytes >= 4096",
                s.name
            ));
        }
        if s.txn_timeout_ms.min_ms < 1 || s.copiers.max > 1 {
            return Err(format!(
                "{}: needs txn_timeout_ms >= 1 and at most one copier",
                s.name
            ));
        }
        if s.group_session_ms.min_ms < 6000 {
            return Err(format!(
                "{}: group_session_ms below the broker's group.min.session.timeout.ms (6000)",
                s.name
            ));
        }
        if !matches!(s.plain_acks, 1 | -1) {
            return Err(format!("{}: plain_acks must be 1 or -1", s.name));
        }
        Ok(s)
    }

    /// A scenario shipped in `scenarios/`, by name.
    pub fn builtin(name: &str) -> Option<Scenario> {
        builtin::BUILTIN
            .iter()
            .find(|(stem, _)| *stem == name)
            .map(|(stem, text)| {
                let s =
                    Scenario::parse(text).unwrap_or_else(|e| panic!("scenarios/{stem}.txt: {e}"));
                assert_eq!(
                    s.name, *stem,
                    "scenarios/{stem}.txt must be named after its file"
                );
                s
            })
    }

    pub fn builtin_names() -> Vec<&'static str> {
        builtin::BUILTIN.iter().map(|(stem, _)| *stem).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_and_is_named_after_its_file() {
        let names = Scenario::builtin_names();
        assert!(names.len() >= 8, "scenarios/ holds the stories: {names:?}");
        for name in names {
            let s = Scenario::builtin(name).unwrap();
            assert!(!s.description.is_empty(), "{name} needs a description");
        }
    }

    #[test]
    fn rejects_unknown_keys() {
        assert!(Scenario::parse("name = x\ncolour = blue").is_err());
    }
}
