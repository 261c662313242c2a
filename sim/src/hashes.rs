//! Trace hashes of a fixed set of runs, recorded in a file and checked
//! against it: the proof that a refactor changed no behaviour, byte for
//! byte. `make trace-hashes` records `sim/trace-hashes.txt` (seeds of the
//! swarm and of every named scenario); `make trace-hashes-check` runs every
//! line of it again and names the first run whose trace differs, with the
//! command that replays it.
//!
//! The file is the plan: one `scenario seed hash` line per run (the trace's
//! FNV-1a hash, `trace.rs`, in 16 hex digits; `panic` for a run that
//! panicked), `#` lines are comments. So the check needs no flags, and a
//! file recorded with more or fewer seeds checks those.

use crate::sweep::run_guarded;
use crate::Scenario;

/// One recorded run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashLine {
    pub scenario: String,
    pub seed: u64,
    /// The trace hash; `None`: the run panicked.
    pub hash: Option<u64>,
}

impl HashLine {
    /// The line as the file holds it.
    pub fn format(&self) -> String {
        match self.hash {
            Some(hash) => format!("{} {} {hash:016x}", self.scenario, self.seed),
            None => format!("{} {} panic", self.scenario, self.seed),
        }
    }
}

/// The runs to record: `swarm_seeds` of the swarm, then `scenario_seeds`
/// of every other scenario in name order (the order of the file).
pub fn plan(
    swarm_seeds: impl Iterator<Item = u64> + Clone,
    scenario_seeds: impl Iterator<Item = u64> + Clone,
) -> Vec<(String, u64)> {
    let mut runs: Vec<(String, u64)> = swarm_seeds.map(|s| ("swarm".to_string(), s)).collect();
    for name in Scenario::builtin_names() {
        if name != "swarm" {
            runs.extend(scenario_seeds.clone().map(|s| (name.to_string(), s)));
        }
    }
    runs
}

/// Runs one seed of one scenario and records its trace hash.
pub fn record(scenario: &str, seed: u64) -> HashLine {
    run(scenario, seed).0
}

/// The line of one run, and why it has no hash (its panic, or no such
/// scenario).
fn run(scenario: &str, seed: u64) -> (HashLine, Option<String>) {
    let (hash, problem) = match run_guarded(scenario, seed, None) {
        Ok(result) => (Some(result.trace_hash), None),
        Err(problem) => (None, Some(problem)),
    };
    let line = HashLine {
        scenario: scenario.to_string(),
        seed,
        hash,
    };
    (line, problem)
}

/// Reads a hashes file; an error names the line that does not parse.
pub fn parse(text: &str) -> Result<Vec<HashLine>, String> {
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || format!("line {}: {line:?} is not `scenario seed hash`", i + 1);
        let mut fields = line.split_whitespace();
        let (Some(scenario), Some(seed), Some(hash), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(bad());
        };
        let seed = seed.parse().map_err(|_| bad())?;
        let hash = match hash {
            "panic" => None,
            hex if hex.len() == 16 => Some(u64::from_str_radix(hex, 16).map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        lines.push(HashLine {
            scenario: scenario.to_string(),
            seed,
            hash,
        });
    }
    Ok(lines)
}

/// A run whose hash is not the recorded one.
#[derive(Clone, Debug)]
pub struct Difference {
    pub expected: HashLine,
    pub got: HashLine,
    /// Why the run has no hash, if it has none.
    pub problem: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    pub runs: u64,
    pub differences: Vec<Difference>,
}

/// Runs every line of `expected` again, in order, calling `progress` after
/// each; stops at the first difference when `stop_at_first`.
pub fn check(
    expected: &[HashLine],
    stop_at_first: bool,
    mut progress: impl FnMut(&CheckReport),
) -> CheckReport {
    let mut report = CheckReport::default();
    for line in expected {
        let (got, problem) = run(&line.scenario, line.seed);
        report.runs += 1;
        if got != *line {
            report.differences.push(Difference {
                expected: line.clone(),
                got,
                problem,
            });
        }
        progress(&report);
        if stop_at_first && !report.differences.is_empty() {
            break;
        }
    }
    report
}

/// Scenarios built in that the file has no line of (added since it was
/// recorded).
pub fn unrecorded_scenarios(expected: &[HashLine]) -> Vec<&'static str> {
    Scenario::builtin_names()
        .into_iter()
        .filter(|name| !expected.iter().any(|l| l.scenario == *name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_back_to_what_was_formatted() {
        let lines = vec![
            HashLine {
                scenario: "swarm".into(),
                seed: 1,
                hash: Some(0x0123_4567_89ab_cdef),
            },
            HashLine {
                scenario: "calm".into(),
                seed: 2000,
                hash: None,
            },
        ];
        let text: String = std::iter::once("# a comment\n".to_string())
            .chain(lines.iter().map(|l| format!("{}\n", l.format())))
            .collect();
        assert_eq!(
            text,
            "# a comment\nswarm 1 0123456789abcdef\ncalm 2000 panic\n"
        );
        assert_eq!(parse(&text).unwrap(), lines);
        for bad in [
            "swarm 1",
            "swarm x 0123456789abcdef",
            "swarm 1 12345",
            "a 1 panic b",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.starts_with("line 1: "), "{bad:?}: {err}");
        }
    }

    #[test]
    fn plan_takes_the_swarm_seeds_then_each_other_scenario_in_name_order() {
        let runs = plan(1..=3, 1..=2);
        let names = Scenario::builtin_names();
        assert_eq!(runs.len(), 3 + 2 * (names.len() - 1));
        assert_eq!(
            runs[..3],
            [
                ("swarm".into(), 1),
                ("swarm".into(), 2),
                ("swarm".into(), 3)
            ]
        );
        let others: Vec<&str> = names.into_iter().filter(|n| *n != "swarm").collect();
        assert_eq!(runs[3], (others[0].to_string(), 1));
        assert_eq!(runs[4], (others[0].to_string(), 2));
        assert_eq!(
            runs.last().unwrap(),
            &(others.last().unwrap().to_string(), 2)
        );
    }

    #[test]
    fn check_passes_a_true_record_and_stops_at_a_changed_hash() {
        let recorded: Vec<HashLine> = [1, 2].iter().map(|&seed| record("calm", seed)).collect();
        assert!(recorded.iter().all(|l| l.hash.is_some()), "{recorded:?}");
        assert_ne!(recorded[0].hash, recorded[1].hash);
        assert!(check(&recorded, true, |_| {}).differences.is_empty());

        let mut changed = recorded.clone();
        changed[0].hash = changed[0].hash.map(|h| h ^ 1);
        let report = check(&changed, true, |_| {});
        assert_eq!(report.runs, 1, "stops at the first difference");
        assert_eq!(report.differences.len(), 1);
        assert_eq!(report.differences[0].expected, changed[0]);
        assert_eq!(report.differences[0].got, recorded[0]);
        assert_eq!(check(&changed, false, |_| {}).runs, 2);

        let mut unknown = recorded[..1].to_vec();
        unknown[0].scenario = "no-such-scenario".into();
        let report = check(&unknown, true, |_| {});
        assert_eq!(report.differences[0].got.hash, None);
        let problem = report.differences[0].problem.as_deref().unwrap_or("");
        assert!(problem.contains("no scenario named"), "{problem}");
        assert!(unrecorded_scenarios(&recorded).contains(&"swarm"));
        assert!(!unrecorded_scenarios(&recorded).contains(&"calm"));
    }
}
