//! The operator tools: `doze-kafka topics | groups | transactions`, the
//! counterparts of Kafka's `kafka-topics.sh`, `kafka-consumer-groups.sh`
//! and `kafka-transactions.sh`. They speak only the Kafka protocol (through
//! `client`), so they work against any Kafka broker that has the APIs.
//!
//! One file per tool, each a recipe: which questions to ask the cluster, in
//! which order, and how to print the answers. This file has what they
//! share: the connection flags, the output formats, the table printer and
//! what a failure means for the exit code (0 done, 1 the cluster refused or
//! could not be reached, printing Kafka's error name; 2 bad usage).
//!
//! A tool writes its whole output into a `String` that the binary prints
//! once it is done: a failure half-way prints the error alone, not half a
//! table.

pub mod groups;
pub mod topics;
pub mod transactions;

use std::fmt::Write as _;
use std::time::Duration;

use clap::ValueEnum;
use serde::Serialize;

use crate::client::{self, Client, ClientConfig, SaslConfig, SaslMechanism, TcpConnector};

/// How long a tool waits for a connection or an answer, unless told.
pub const TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Connecting is bounded tighter than a request: an address nobody answers
/// at is reported soon.
const CONNECT_TIMEOUT_MAX: Duration = Duration::from_secs(10);

/// The flags every tool takes (before or after its subcommand).
#[derive(clap::Args, Debug, Clone)]
pub struct ConnectArgs {
    /// The broker(s) to ask: HOST:PORT, several comma-separated.
    #[arg(long, value_name = "HOST:PORT", global = true)]
    pub bootstrap_server: Option<String>,

    /// `human`: columns as Kafka's tools print them; `json`: one JSON
    /// document.
    #[arg(long, value_enum, default_value_t = Format::Human, global = true)]
    pub output: Format,

    /// Bound on connecting and on each request, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = TIMEOUT_MS_DEFAULT, global = true)]
    pub timeout_ms: u64,

    /// Kafka client properties: `security.protocol` (PLAINTEXT or
    /// SASL_PLAINTEXT), `sasl.mechanism` (PLAIN, SCRAM-SHA-256,
    /// SCRAM-SHA-512) and `sasl.jaas.config` (`... required username="U"
    /// password="P";`), as Kafka's tools take them.
    #[arg(long, value_name = "FILE", global = true)]
    pub command_config: Option<std::path::PathBuf>,
}

/// How a tool prints its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Human,
    Json,
}

/// Why a tool stopped.
#[derive(Debug)]
pub enum Failure {
    /// Bad flags or values: exit 2.
    Usage(String),
    /// The cluster answered with an error or could not be asked: exit 1.
    Client(client::Error),
    /// Anything else that ends the command (a transaction not found): exit 1.
    Failed(String),
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) | Failure::Client(client::Error::Usage(_)) => 2,
            Failure::Client(_) | Failure::Failed(_) => 1,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Usage(m) | Failure::Failed(m) => f.write_str(m),
            Failure::Client(e) => write!(f, "{e}"),
        }
    }
}

impl From<client::Error> for Failure {
    fn from(e: client::Error) -> Self {
        Failure::Client(e)
    }
}

/// A tool's printed answer.
pub type Output = String;

/// Connects to the cluster the flags name.
pub async fn connect(args: &ConnectArgs) -> Result<Client, Failure> {
    let Some(bootstrap) = &args.bootstrap_server else {
        return Err(Failure::Usage(
            "--bootstrap-server HOST:PORT is required".into(),
        ));
    };
    if args.timeout_ms == 0 {
        return Err(Failure::Usage("--timeout-ms must be above 0".into()));
    }
    let sasl = match &args.command_config {
        Some(path) => command_config(path)?,
        None => None,
    };
    let timeout = Duration::from_millis(args.timeout_ms);
    let config = ClientConfig {
        client_id: "doze-kafka-tools".into(),
        connect_timeout: timeout.min(CONNECT_TIMEOUT_MAX),
        request_timeout: timeout,
        sasl,
        ..ClientConfig::default()
    };
    Ok(Client::connect_with(TcpConnector, bootstrap, config).await?)
}

/// The SASL login a `--command-config` file asks for (None: PLAINTEXT).
/// Properties the tools do not use are named on stderr and ignored.
fn command_config(path: &std::path::Path) -> Result<Option<SaslConfig>, Failure> {
    let usage = |why: String| Failure::Usage(format!("{}: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| usage(e.to_string()))?;
    let mut protocol = "PLAINTEXT".to_string();
    let mut mechanism = None;
    let mut jaas = None;
    for (line, key, value) in crate::config::parse_properties(&text).map_err(usage)? {
        match key.as_str() {
            "security.protocol" => protocol = value.to_ascii_uppercase(),
            "sasl.mechanism" => mechanism = Some(value),
            "sasl.jaas.config" => jaas = Some(value),
            other => eprintln!(
                "doze-kafka: warning: {}:{line}: {other} is not used by these tools",
                path.display()
            ),
        }
    }
    match protocol.as_str() {
        "PLAINTEXT" => return Ok(None),
        "SASL_PLAINTEXT" => {}
        other => {
            return Err(usage(format!(
                "security.protocol {other} is not supported (PLAINTEXT or SASL_PLAINTEXT)"
            )))
        }
    }
    let mechanism = mechanism.unwrap_or_else(|| "GSSAPI".into());
    let Some(mechanism) = SaslMechanism::from_name(&mechanism) else {
        return Err(usage(format!(
            "sasl.mechanism {mechanism} is not supported (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
        )));
    };
    let Some(jaas) = jaas else {
        return Err(usage("SASL_PLAINTEXT needs sasl.jaas.config".into()));
    };
    let options = jaas_options(&jaas).map_err(|e| usage(format!("sasl.jaas.config: {e}")))?;
    let option = |name: &str| {
        options
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| usage(format!("sasl.jaas.config has no {name}")))
    };
    Ok(Some(SaslConfig {
        mechanism,
        username: option("username")?,
        password: option("password")?,
    }))
}

/// The options of a JAAS login module line, `Module flag k="v" k2=v2;`:
/// quoted values may hold spaces and `\"`.
fn jaas_options(text: &str) -> Result<Vec<(String, String)>, String> {
    let text = text.trim();
    let text = text.strip_suffix(';').unwrap_or(text);
    let mut words = text.splitn(3, char::is_whitespace);
    let (Some(_module), Some(_flag)) = (words.next(), words.next()) else {
        return Err("expected `LoginModule required key=\"value\" ...;`".into());
    };
    let mut rest = words.next().unwrap_or("").trim_start();
    let mut out = Vec::new();
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else {
            return Err(format!("expected key=value at {rest:?}"));
        };
        let key = rest[..eq].trim().to_string();
        rest = &rest[eq + 1..];
        let mut value = String::new();
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, next)) = chars.next() {
                            value.push(next);
                        }
                    }
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    c => value.push(c),
                }
            }
            let Some(end) = end else {
                return Err(format!("unterminated quote in {key}"));
            };
            rest = &quoted[end + 1..];
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            value.push_str(&rest[..end]);
            rest = &rest[end..];
        }
        out.push((key, value));
        rest = rest.trim_start();
    }
    Ok(out)
}

/// One JSON document on one line.
pub fn json<T: Serialize>(value: &T) -> Output {
    let mut s = serde_json::to_string(value).expect("tool output serializes");
    s.push('\n');
    s
}

/// Kafka's `prettyPrintTable` (TransactionsCommand.java): every column
/// padded to its widest cell, each cell followed by a tab.
pub fn tab_table(headers: &[&str], rows: &[Vec<String>]) -> Output {
    let widths = widths(headers, rows);
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        for (cell, width) in cells.zip(&widths) {
            let _ = write!(out, "{cell:<width$}\t");
        }
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// Columns padded to their widest cell and one space apart, as
/// kafka-consumer-groups prints them (the last column unpadded).
pub fn space_table(headers: &[&str], rows: &[Vec<String>]) -> Output {
    let widths = widths(headers, rows);
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (cell, width) in cells.zip(&widths) {
            let _ = write!(text, "{cell:<width$} ");
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

fn widths(headers: &[&str], rows: &[Vec<String>]) -> Vec<usize> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        assert_eq!(row.len(), headers.len(), "a row has a cell per column");
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    widths
}

/// An optional number as Kafka's tools print it: the value, or `dash`.
pub fn or<T: ToString>(value: Option<T>, dash: &str) -> String {
    value.map_or_else(|| dash.to_string(), |v| v.to_string())
}

/// Milliseconds since the epoch, from the wall clock (the tools compare
/// producers' timestamps with it, as Kafka's do).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables() {
        let rows = vec![
            vec!["a".to_string(), "1".to_string()],
            vec!["bbb".to_string(), "22".to_string()],
        ];
        assert_eq!(
            tab_table(&["Name", "N"], &rows),
            "Name\tN \t\na   \t1 \t\nbbb \t22\t\n"
        );
        assert_eq!(
            space_table(&["NAME", "N"], &rows),
            "NAME N\na    1\nbbb  22\n"
        );
        assert_eq!(tab_table(&["A"], &[]), "A\t\n");
    }

    #[test]
    fn jaas_lines() {
        let options = jaas_options(
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="a \"b\" c";"#,
        )
        .unwrap();
        assert_eq!(
            options,
            vec![
                ("username".to_string(), "alice".to_string()),
                ("password".to_string(), r#"a "b" c"#.to_string()),
            ]
        );
        let bare = jaas_options("M required username=bob password=pw").unwrap();
        assert_eq!(bare[1], ("password".to_string(), "pw".to_string()));
        assert!(jaas_options("M").is_err());
        assert!(jaas_options(r#"M required username="open"#).is_err());
    }

    #[test]
    fn command_config_files() {
        let dir = std::env::temp_dir().join(format!("doze-tools-cc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("client.properties");
        let write = |text: &str| std::fs::write(&file, text).unwrap();
        write("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n  username=\"u\" password=\"p\";\n");
        let sasl = command_config(&file).unwrap().unwrap();
        assert_eq!(sasl.mechanism, SaslMechanism::ScramSha512);
        assert_eq!((sasl.username.as_str(), sasl.password.as_str()), ("u", "p"));
        write("# nothing\nclient.id=x\n");
        assert!(command_config(&file).unwrap().is_none());
        for bad in [
            "security.protocol=SSL\n",
            "security.protocol=SASL_PLAINTEXT\nsasl.jaas.config=M required username=u password=p\n",
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n",
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=M required username=u\n",
        ] {
            write(bad);
            assert!(matches!(command_config(&file), Err(Failure::Usage(_))), "{bad}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(command_config(&file), Err(Failure::Usage(_))));
    }

    #[test]
    fn exit_codes() {
        assert_eq!(Failure::Usage("x".into()).exit_code(), 2);
        assert_eq!(
            Failure::Client(client::Error::Usage("bad bootstrap".into())).exit_code(),
            2
        );
        let kafka = client::KafkaError::check(3, None, "topic t").unwrap_err();
        assert_eq!(Failure::Client(kafka).exit_code(), 1);
        assert_eq!(Failure::Failed("x".into()).exit_code(), 1);
    }
}
