//! `doze-kafka groups`: Kafka's `kafka-consumer-groups.sh` (apache/kafka
//! tools/src/main/java/org/apache/kafka/tools/consumer/group/
//! ConsumerGroupCommand.java), its `--list` and `--describe` views.
//!
//! - `list`: every group's id, one a line (ListGroups on every broker).
//! - `describe --group G`: per partition the group has committed an offset
//!   for or has assigned, the committed offset, the log end offset (the
//!   high watermark, ListOffsets LATEST read_uncommitted, as Kafka's tool
//!   asks it), the lag between them, and the member that has it (client
//!   id, host). From the group's coordinator: DescribeGroups, OffsetFetch.
//!   `--members` shows the members and their assignments instead, `--state`
//!   the group's state, assignor and coordinator. `--output json` prints
//!   all of it, whatever the view.

use std::collections::{BTreeMap, BTreeSet};

use clap::Subcommand;
use serde::Serialize;

use super::{connect, json, or, space_table, ConnectArgs, Failure, Format, Output};
use crate::client::{
    Client, Connector, Error, GroupDescription, GroupMember, Isolation, KafkaError, OffsetSpec,
    TopicPartition,
};

/// GROUP_ID_NOT_FOUND.
const GROUP_ID_NOT_FOUND: i16 = 69;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub conn: ConnectArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Lists the groups' ids.
    List,
    /// Describes a group: offsets and lag per partition (default), its
    /// members, or its state.
    Describe {
        #[arg(long)]
        group: String,
        /// The members and their partitions instead of the offsets.
        #[arg(long, conflicts_with = "state")]
        members: bool,
        /// The group's state, assignor and coordinator instead of the
        /// offsets.
        #[arg(long)]
        state: bool,
    },
}

/// Runs one `groups` subcommand.
pub async fn run(args: Args) -> Result<Output, Failure> {
    let format = args.conn.output;
    let mut client = connect(&args.conn).await?;
    match args.command {
        Command::List => list(&mut client, format).await,
        Command::Describe {
            group,
            members,
            state,
        } => {
            let view = match (members, state) {
                (true, _) => View::Members,
                (_, true) => View::State,
                _ => View::Offsets,
            };
            describe(&mut client, &group, view, format).await
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum View {
    Offsets,
    Members,
    State,
}

async fn list<C: Connector>(client: &mut Client<C>, format: Format) -> Result<Output, Failure> {
    let groups = client.list_groups().await?;
    if format == Format::Json {
        return Ok(json(&serde_json::json!({ "groups": groups })));
    }
    Ok(groups.iter().map(|g| format!("{}\n", g.group_id)).collect())
}

/// One partition of the offsets view.
#[derive(Serialize)]
struct PartitionLag {
    topic: String,
    partition: i32,
    /// The committed offset; None if the group has none for it.
    current_offset: Option<i64>,
    /// The high watermark; None if it could not be read.
    log_end_offset: Option<i64>,
    lag: Option<i64>,
    /// The member it is assigned to, if any.
    member_id: Option<String>,
    host: Option<String>,
    client_id: Option<String>,
}

/// The whole of `describe --output json`.
#[derive(Serialize)]
struct Described<'a> {
    #[serde(flatten)]
    group: &'a GroupDescription,
    offsets: &'a [PartitionLag],
}

async fn describe<C: Connector>(
    client: &mut Client<C>,
    group: &str,
    view: View,
    format: Format,
) -> Result<Output, Failure> {
    let description = client.describe_group(group).await?;
    // DescribeGroups before v6 says so with the state alone.
    if description.state == "Dead" {
        return Err(Failure::Client(Error::Kafka(KafkaError {
            code: GROUP_ID_NOT_FOUND,
            message: Some(format!("consumer group '{group}' does not exist")),
            about: format!("group {group}"),
        })));
    }
    let offsets = if view == View::Offsets || format == Format::Json {
        lags(client, &description).await?
    } else {
        Vec::new()
    };
    if format == Format::Json {
        return Ok(json(&Described {
            group: &description,
            offsets: &offsets,
        }));
    }
    let mut out = String::new();
    let has_members = !description.members.is_empty();
    if !has_members {
        out.push_str(&format!(
            "Consumer group '{group}' has no active members.\n\n"
        ));
    }
    match view {
        View::Offsets => {
            let rows: Vec<Vec<String>> = offsets
                .iter()
                .map(|o| {
                    vec![
                        group.to_string(),
                        o.topic.clone(),
                        o.partition.to_string(),
                        or(o.current_offset, "-"),
                        or(o.log_end_offset, "-"),
                        or(o.lag, "-"),
                        or(o.member_id.as_deref(), "-"),
                        or(o.host.as_deref(), "-"),
                        or(o.client_id.as_deref(), "-"),
                    ]
                })
                .collect();
            out.push_str(&space_table(
                &[
                    "GROUP",
                    "TOPIC",
                    "PARTITION",
                    "CURRENT-OFFSET",
                    "LOG-END-OFFSET",
                    "LAG",
                    "CONSUMER-ID",
                    "HOST",
                    "CLIENT-ID",
                ],
                &rows,
            ));
        }
        View::Members => {
            let rows: Vec<Vec<String>> = description
                .members
                .iter()
                .map(|m| {
                    vec![
                        group.to_string(),
                        m.member_id.clone(),
                        m.client_host.clone(),
                        m.client_id.clone(),
                        m.assignment.len().to_string(),
                        assignment_text(m),
                    ]
                })
                .collect();
            out.push_str(&space_table(
                &[
                    "GROUP",
                    "CONSUMER-ID",
                    "HOST",
                    "CLIENT-ID",
                    "#PARTITIONS",
                    "ASSIGNMENT",
                ],
                &rows,
            ));
        }
        View::State => {
            let c = &description.coordinator;
            let row = vec![
                group.to_string(),
                format!("{}:{} ({})", c.host, c.port, c.node_id),
                or(
                    Some(description.protocol.as_str()).filter(|p| !p.is_empty()),
                    "-",
                ),
                description.state.clone(),
                description.members.len().to_string(),
            ];
            out.push_str(&space_table(
                &[
                    "GROUP",
                    "COORDINATOR (ID)",
                    "ASSIGNMENT-STRATEGY",
                    "STATE",
                    "#MEMBERS",
                ],
                &[row],
            ));
        }
    }
    Ok(out)
}

/// `topic(0,1),other(2)`, as ConsumerGroupCommand's verbose members view.
fn assignment_text(m: &GroupMember) -> String {
    let mut by_topic: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for tp in &m.assignment {
        by_topic
            .entry(&tp.topic)
            .or_default()
            .push(tp.partition.to_string());
    }
    if by_topic.is_empty() {
        return "-".into();
    }
    by_topic
        .iter()
        .map(|(t, ps)| format!("{t}({})", ps.join(",")))
        .collect::<Vec<_>>()
        .join(",")
}

/// Committed offset, log end offset and lag of every partition the group
/// has an offset for or has assigned.
async fn lags<C: Connector>(
    client: &mut Client<C>,
    description: &GroupDescription,
) -> Result<Vec<PartitionLag>, Failure> {
    let committed: BTreeMap<TopicPartition, i64> = client
        .committed_offsets(&description.group_id)
        .await?
        .into_iter()
        .map(|c| (TopicPartition::new(c.topic, c.partition), c.offset))
        .collect();
    let mut owner: BTreeMap<TopicPartition, &GroupMember> = BTreeMap::new();
    for m in &description.members {
        for tp in &m.assignment {
            owner.insert(tp.clone(), m);
        }
    }
    let partitions: BTreeSet<TopicPartition> =
        committed.keys().chain(owner.keys()).cloned().collect();
    let partitions: Vec<TopicPartition> = partitions.into_iter().collect();
    let ends = if partitions.is_empty() {
        BTreeMap::new()
    } else {
        client
            .list_offsets(&partitions, OffsetSpec::Latest, Isolation::ReadUncommitted)
            .await?
    };
    Ok(partitions
        .into_iter()
        .map(|tp| {
            let current = committed.get(&tp).copied();
            let end = ends.get(&tp).and_then(|r| r.as_ref().ok()).copied();
            let member = owner.get(&tp);
            PartitionLag {
                lag: current.zip(end).map(|(c, e)| e - c),
                current_offset: current,
                log_end_offset: end,
                member_id: member.map(|m| m.member_id.clone()),
                host: member.map(|m| m.client_host.clone()),
                client_id: member.map(|m| m.client_id.clone()),
                topic: tp.topic,
                partition: tp.partition,
            }
        })
        .collect())
}
