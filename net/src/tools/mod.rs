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

use crate::client::{self, Client, ClientConfig, TcpConnector};

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
    let timeout = Duration::from_millis(args.timeout_ms);
    let config = ClientConfig {
        client_id: "doze-kafka-tools".into(),
        connect_timeout: timeout.min(CONNECT_TIMEOUT_MAX),
        request_timeout: timeout,
        ..ClientConfig::default()
    };
    Ok(Client::connect_with(TcpConnector, bootstrap, config).await?)
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
