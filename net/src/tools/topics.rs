//! `doze-kafka topics`: Kafka's `kafka-topics.sh` (apache/kafka
//! tools/src/main/java/org/apache/kafka/tools/TopicCommand.java), with
//! subcommands for its `--list`, `--describe`, `--create` and `--delete`.
//!
//! - `list`: every topic's name, one a line (Metadata).
//! - `describe [--topic T]`: a topic (or all) with its id, partition count,
//!   replication factor and the configs that are not defaults, then a line
//!   per partition with its leader, replicas and in-sync replicas
//!   (Metadata, DescribeConfigs), in TopicCommand's layout.
//! - `create --topic T [--partitions N] [--replication-factor R]
//!   [--config K=V]...`: CreateTopics; unset counts are the broker's
//!   defaults.
//! - `delete --topic T`: DeleteTopics.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use clap::Subcommand;
use serde::Serialize;

use super::{connect, json, ConnectArgs, Failure, Format, Output};
use crate::client::{Client, Connector, NewTopic, PartitionInfo, TopicInfo};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub conn: ConnectArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Lists the topics' names.
    List,
    /// Describes a topic (default: every topic): partitions, leaders,
    /// replicas and the configs set on it.
    Describe {
        #[arg(long)]
        topic: Option<String>,
    },
    /// Creates a topic.
    Create {
        #[arg(long)]
        topic: String,
        /// Default: the broker's num.partitions.
        #[arg(long)]
        partitions: Option<i32>,
        /// Default: the broker's default.replication.factor.
        #[arg(long)]
        replication_factor: Option<i16>,
        /// A topic config, e.g. cleanup.policy=compact; may be repeated.
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// Deletes a topic and its data.
    Delete {
        #[arg(long)]
        topic: String,
    },
}

/// Runs one `topics` subcommand.
pub async fn run(args: Args) -> Result<Output, Failure> {
    let format = args.conn.output;
    // Bad values are usage errors, found before anything is asked.
    let new_topic = match &args.command {
        Command::Create {
            topic,
            partitions,
            replication_factor,
            configs,
        } => Some(new_topic(topic, *partitions, *replication_factor, configs)?),
        _ => None,
    };
    let mut client = connect(&args.conn).await?;
    match args.command {
        Command::List => list(&mut client, format).await,
        Command::Describe { topic } => describe(&mut client, topic, format).await,
        Command::Create { .. } => {
            let topic = new_topic.expect("built above");
            create(&mut client, &topic, format).await
        }
        Command::Delete { topic } => delete(&mut client, &topic, format).await,
    }
}

fn new_topic(
    name: &str,
    partitions: Option<i32>,
    replication_factor: Option<i16>,
    configs: &[String],
) -> Result<NewTopic, Failure> {
    if partitions.is_some_and(|n| n < 1) {
        return Err(Failure::Usage("--partitions must be at least 1".into()));
    }
    if replication_factor.is_some_and(|n| n < 1) {
        return Err(Failure::Usage(
            "--replication-factor must be at least 1".into(),
        ));
    }
    let mut pairs = Vec::new();
    for c in configs {
        match c.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                pairs.push((k.trim().to_string(), v.trim().to_string()))
            }
            _ => {
                return Err(Failure::Usage(format!(
                    "bad --config {c:?}: expected KEY=VALUE"
                )))
            }
        }
    }
    Ok(NewTopic {
        name: name.to_string(),
        partitions,
        replication_factor,
        configs: pairs,
    })
}

async fn list<C: Connector>(client: &mut Client<C>, format: Format) -> Result<Output, Failure> {
    let topics = client.list_topics().await?;
    let names: Vec<&str> = topics.iter().map(|t| t.name.as_str()).collect();
    if format == Format::Json {
        return Ok(json(&serde_json::json!({ "topics": names })));
    }
    Ok(names.iter().map(|n| format!("{n}\n")).collect())
}

/// A topic as `describe --output json` prints it.
#[derive(Serialize)]
struct Described<'a> {
    name: &'a str,
    topic_id: Option<&'a str>,
    internal: bool,
    partition_count: usize,
    replication_factor: usize,
    /// The configs whose value is not the default.
    configs: BTreeMap<String, Option<String>>,
    partitions: &'a [PartitionInfo],
}

async fn describe<C: Connector>(
    client: &mut Client<C>,
    topic: Option<String>,
    format: Format,
) -> Result<Output, Failure> {
    let topics: Vec<TopicInfo> = match topic {
        Some(name) => client.describe_topics(&[name]).await?,
        None => client.list_topics().await?,
    };
    let mut described = Vec::new();
    for t in &topics {
        let configs: BTreeMap<String, Option<String>> = client
            .topic_configs(&t.name)
            .await?
            .into_iter()
            .filter(|c| !c.is_default())
            .map(|c| (c.name, c.value))
            .collect();
        described.push(Described {
            name: &t.name,
            topic_id: t.topic_id.as_deref(),
            internal: t.internal,
            partition_count: t.partitions.len(),
            replication_factor: t.replication_factor(),
            configs,
            partitions: &t.partitions,
        });
    }
    if format == Format::Json {
        return Ok(json(&serde_json::json!({ "topics": described })));
    }
    let mut out = String::new();
    for d in &described {
        let configs: Vec<String> = d
            .configs
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("")))
            .collect();
        let _ = write!(out, "Topic: {}", d.name);
        if let Some(id) = d.topic_id {
            let _ = write!(out, "\tTopicId: {id}");
        }
        let _ = writeln!(
            out,
            "\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}",
            d.partition_count,
            d.replication_factor,
            configs.join(",")
        );
        for p in d.partitions {
            let _ = writeln!(
                out,
                "\tTopic: {}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}",
                d.name,
                p.partition,
                p.leader.map_or("none".to_string(), |l| l.to_string()),
                join(&p.replicas),
                join(&p.isr)
            );
        }
    }
    Ok(out)
}

fn join(ids: &[i32]) -> String {
    ids.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

async fn create<C: Connector>(
    client: &mut Client<C>,
    topic: &NewTopic,
    format: Format,
) -> Result<Output, Failure> {
    let created = client.create_topic(topic).await?;
    if format == Format::Json {
        return Ok(json(&serde_json::json!({ "created": created })));
    }
    Ok(format!("Created topic {}.\n", created.name))
}

async fn delete<C: Connector>(
    client: &mut Client<C>,
    topic: &str,
    format: Format,
) -> Result<Output, Failure> {
    client.delete_topic(topic).await?;
    if format == Format::Json {
        return Ok(json(&serde_json::json!({ "deleted": topic })));
    }
    Ok(format!("Deleted topic {topic}.\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_topic_flags() {
        let t = new_topic("t", Some(3), None, &["a=1".into(), "b = x=y".into()]).unwrap();
        assert_eq!(t.partitions, Some(3));
        assert_eq!(
            t.configs,
            vec![("a".into(), "1".into()), ("b".into(), "x=y".into())]
        );
        for (partitions, rf, config) in [
            (Some(0), None, "a=1"),
            (None, Some(0), "a=1"),
            (None, None, "novalue"),
            (None, None, "=1"),
        ] {
            let r = new_topic("t", partitions, rf, &[config.to_string()]);
            assert!(
                matches!(r, Err(Failure::Usage(_))),
                "{partitions:?} {rf:?} {config}"
            );
        }
    }
}
