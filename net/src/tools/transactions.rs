//! `doze-kafka transactions`: Kafka's `kafka-transactions.sh` (KIP-664;
//! apache/kafka tools/src/main/java/org/apache/kafka/tools/
//! TransactionsCommand.java), with its subcommands, columns and semantics.
//!
//! - `list`: every coordinator's transactional ids (ListTransactions).
//! - `describe --transactional-id ID`: one id's state at its coordinator
//!   (FindCoordinator, DescribeTransactions).
//! - `describe-producers --topic T --partition P`: the producers the
//!   partition's leader knows and where their open transaction starts
//!   (DescribeProducers).
//! - `find-hanging [--topic T [--partition P]] [--max-transaction-timeout
//!   MIN]`: a transaction open on a partition for longer than the largest
//!   transaction timeout (by its producer's last timestamp there), whose
//!   producer id no coordinator lists, or whose transactional id's
//!   transaction does not include that partition: nothing will ever write
//!   its marker, and it holds the partition's last stable offset back.
//! - `abort --topic T --partition P --start-offset O`: the producer whose
//!   open transaction there starts at O (DescribeProducers), aborted with a
//!   marker carrying its producer id, epoch and coordinator epoch
//!   (WriteTxnMarkers). `--producer-id`, `--producer-epoch` and
//!   `--coordinator-epoch` name it directly instead (Kafka's form for
//!   brokers before 3.0).

use std::collections::{BTreeMap, BTreeSet};

use clap::Subcommand;
use serde::Serialize;

use super::{connect, json, now_ms, or, tab_table, ConnectArgs, Failure, Format, Output};
use crate::client::{
    AbortSpec, Client, Connector, ProducerState, TopicPartition, TransactionFilter,
};

/// kafka-transactions' default `--max-transaction-timeout`: Kafka's default
/// `transaction.max.timeout.ms`, in minutes.
const MAX_TRANSACTION_TIMEOUT_MIN_DEFAULT: i64 = 15;
/// TRANSACTIONAL_ID_NOT_FOUND.
const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub conn: ConnectArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Lists transactional ids and their state, per coordinator.
    List,
    /// Describes one transactional id's state at its coordinator.
    Describe {
        #[arg(long, value_name = "ID")]
        transactional_id: String,
    },
    /// Describes the producers a partition knows and their open
    /// transactions there.
    DescribeProducers {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
    },
    /// Finds hanging transactions: open on a partition, older than the
    /// largest transaction timeout, and unknown to their coordinator.
    FindHanging {
        /// Search this topic only (default: every topic).
        #[arg(long)]
        topic: Option<String>,
        /// Search this partition of --topic only.
        #[arg(long, requires = "topic")]
        partition: Option<i32>,
        /// The brokers' transaction.max.timeout.ms, in minutes: younger
        /// transactions may still be ended by their producer.
        #[arg(long, value_name = "MINUTES", default_value_t = MAX_TRANSACTION_TIMEOUT_MIN_DEFAULT)]
        max_transaction_timeout: i64,
    },
    /// Aborts a hanging transaction with an abort marker (needs ALTER or
    /// CLUSTER_ACTION on the cluster).
    Abort {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        /// Where the transaction to abort starts (describe-producers'
        /// CurrentTransactionStartOffset).
        #[arg(long, value_name = "OFFSET", conflicts_with = "producer_id")]
        start_offset: Option<i64>,
        /// With --producer-epoch and --coordinator-epoch: the producer to
        /// abort, named directly.
        #[arg(long, requires_all = ["producer_epoch", "coordinator_epoch"])]
        producer_id: Option<i64>,
        #[arg(long, requires = "producer_id")]
        producer_epoch: Option<i16>,
        #[arg(long, requires = "producer_id")]
        coordinator_epoch: Option<i32>,
    },
}

/// Runs one `transactions` subcommand.
pub async fn run(args: Args) -> Result<Output, Failure> {
    let format = args.conn.output;
    if let Command::Abort {
        start_offset: None,
        producer_id: None,
        ..
    } = &args.command
    {
        return Err(Failure::Usage(
            "name the transaction to abort with --start-offset, or with --producer-id, \
             --producer-epoch and --coordinator-epoch"
                .into(),
        ));
    }
    if let Command::FindHanging {
        max_transaction_timeout,
        ..
    } = &args.command
    {
        if *max_transaction_timeout < 0 {
            return Err(Failure::Usage(
                "--max-transaction-timeout must not be negative".into(),
            ));
        }
    }
    let mut client = connect(&args.conn).await?;
    match args.command {
        Command::List => list(&mut client, format).await,
        Command::Describe { transactional_id } => {
            describe(&mut client, &transactional_id, format).await
        }
        Command::DescribeProducers { topic, partition } => {
            let tp = TopicPartition::new(topic, partition);
            describe_producers(&mut client, &tp, format).await
        }
        Command::FindHanging {
            topic,
            partition,
            max_transaction_timeout,
        } => {
            let max_ms = max_transaction_timeout.saturating_mul(60_000);
            find_hanging(&mut client, topic, partition, max_ms, format).await
        }
        Command::Abort {
            topic,
            partition,
            start_offset,
            producer_id,
            producer_epoch,
            coordinator_epoch,
        } => {
            let tp = TopicPartition::new(topic, partition);
            let spec = match (start_offset, producer_id, producer_epoch, coordinator_epoch) {
                (Some(offset), _, _, _) => abort_spec_at(&mut client, &tp, offset).await?,
                (None, Some(id), Some(epoch), Some(coordinator_epoch)) => AbortSpec {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    producer_id: id,
                    producer_epoch: epoch,
                    // A producer that never had a marker shows -1; 0 is at
                    // or below any coordinator epoch (as Kafka's tool).
                    coordinator_epoch: coordinator_epoch.max(0),
                },
                _ => unreachable!("checked above and by clap"),
            };
            abort(&mut client, spec, start_offset, format).await
        }
    }
}

async fn list<C: Connector>(client: &mut Client<C>, format: Format) -> Result<Output, Failure> {
    let listings = client
        .list_transactions(&TransactionFilter::default())
        .await?;
    if format == Format::Json {
        return Ok(json(&serde_json::json!({ "transactions": listings })));
    }
    let rows: Vec<Vec<String>> = listings
        .iter()
        .map(|t| {
            vec![
                t.transactional_id.clone(),
                t.coordinator_id.to_string(),
                t.producer_id.to_string(),
                t.state.clone(),
            ]
        })
        .collect();
    Ok(tab_table(
        &[
            "TransactionalId",
            "Coordinator",
            "ProducerId",
            "TransactionState",
        ],
        &rows,
    ))
}

async fn describe<C: Connector>(
    client: &mut Client<C>,
    transactional_id: &str,
    format: Format,
) -> Result<Output, Failure> {
    let t = client.describe_transaction(transactional_id).await?;
    let duration_ms = t.start_time_ms.map(|start| now_ms() - start);
    if format == Format::Json {
        #[derive(Serialize)]
        struct Described<'a> {
            #[serde(flatten)]
            transaction: &'a crate::client::TransactionDescription,
            duration_ms: Option<i64>,
        }
        return Ok(json(&Described {
            transaction: &t,
            duration_ms,
        }));
    }
    let partitions: Vec<String> = t.partitions.iter().map(ToString::to_string).collect();
    let row = vec![
        t.coordinator_id.to_string(),
        t.transactional_id.clone(),
        t.producer_id.to_string(),
        t.producer_epoch.to_string(),
        t.state.clone(),
        t.timeout_ms.to_string(),
        or(t.start_time_ms, "None"),
        or(duration_ms, "None"),
        partitions.join(","),
    ];
    Ok(tab_table(
        &[
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ],
        &[row],
    ))
}

async fn describe_producers<C: Connector>(
    client: &mut Client<C>,
    tp: &TopicPartition,
    format: Format,
) -> Result<Output, Failure> {
    let producers = client.describe_producers(tp).await?;
    if format == Format::Json {
        return Ok(json(&serde_json::json!({
            "topic": tp.topic,
            "partition": tp.partition,
            "producers": producers,
        })));
    }
    let rows: Vec<Vec<String>> = producers
        .iter()
        .map(|p| {
            vec![
                p.producer_id.to_string(),
                p.producer_epoch.to_string(),
                or(p.coordinator_epoch, "-1"),
                p.last_sequence.to_string(),
                p.last_timestamp.to_string(),
                or(p.current_txn_start_offset, "None"),
            ]
        })
        .collect();
    Ok(tab_table(
        &[
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ],
        &rows,
    ))
}

/// An open transaction on a partition that find-hanging reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Hanging {
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i32,
    pub coordinator_epoch: Option<i32>,
    pub start_offset: i64,
    pub last_timestamp: i64,
    pub duration_min: i64,
}

async fn find_hanging<C: Connector>(
    client: &mut Client<C>,
    topic: Option<String>,
    partition: Option<i32>,
    max_transaction_timeout_ms: i64,
    format: Format,
) -> Result<Output, Failure> {
    // 1. The partitions to search.
    let partitions: Vec<TopicPartition> = match (topic, partition) {
        (Some(topic), Some(p)) => vec![TopicPartition::new(topic, p)],
        (Some(topic), None) => {
            let described = client.describe_topics(std::slice::from_ref(&topic)).await?;
            described[0]
                .partitions
                .iter()
                .map(|p| TopicPartition::new(topic.clone(), p.partition))
                .collect()
        }
        (None, _) => client
            .list_topics()
            .await?
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| TopicPartition::new(t.name.clone(), p.partition))
            })
            .collect(),
    };
    // 2. The producers there.
    let mut producers = Vec::new();
    for (tp, states) in client.describe_producers_of(&partitions).await? {
        let states = states.map_err(crate::client::Error::Kafka)?;
        producers.extend(states.into_iter().map(|p| (tp.clone(), p)));
    }
    let hanging = hanging_among(client, producers, max_transaction_timeout_ms, now_ms()).await?;
    if format == Format::Json {
        return Ok(json(&serde_json::json!({ "hanging": hanging })));
    }
    let rows: Vec<Vec<String>> = hanging
        .iter()
        .map(|h| {
            vec![
                h.topic.clone(),
                h.partition.to_string(),
                h.producer_id.to_string(),
                h.producer_epoch.to_string(),
                or(h.coordinator_epoch, "-1"),
                h.start_offset.to_string(),
                h.last_timestamp.to_string(),
                h.duration_min.to_string(),
            ]
        })
        .collect();
    Ok(tab_table(
        &[
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset",
            "LastTimestamp",
            "Duration(min)",
        ],
        &rows,
    ))
}

/// The transactional id of each of `producer_ids` the coordinators list
/// (ListTransactions filtered by producer id); a producer without one is
/// left out.
pub async fn transactional_ids_of<C: Connector>(
    client: &mut Client<C>,
    producer_ids: &BTreeSet<i64>,
) -> Result<BTreeMap<i64, String>, crate::client::Error> {
    let filter = TransactionFilter {
        producer_ids: producer_ids.iter().copied().collect(),
        ..TransactionFilter::default()
    };
    Ok(client
        .list_transactions(&filter)
        .await?
        .into_iter()
        .filter(|t| producer_ids.contains(&t.producer_id))
        .map(|t| (t.producer_id, t.transactional_id))
        .collect())
}

/// find-hanging's rule over `producers` (each with its partition): an
/// open transaction there, older than `max_transaction_timeout_ms` by its
/// producer's last timestamp at `now_ms`, that its coordinator does not
/// expect to end on that partition (no transactional id lists the producer,
/// the id is gone, or its transaction does not include the partition).
/// The console's cluster page marks the same ones.
pub async fn hanging_among<C: Connector>(
    client: &mut Client<C>,
    producers: Vec<(TopicPartition, ProducerState)>,
    max_transaction_timeout_ms: i64,
    now_ms: i64,
) -> Result<Vec<Hanging>, crate::client::Error> {
    let now = now_ms;
    // Transactions open there for longer than any timeout allows.
    let candidates: Vec<(TopicPartition, ProducerState)> = producers
        .into_iter()
        .filter(|(_, p)| {
            let old = now - p.last_timestamp > max_transaction_timeout_ms;
            p.current_txn_start_offset.is_some() && old
        })
        .collect();
    let mut hanging = Vec::new();
    if candidates.is_empty() {
        return Ok(hanging);
    }
    // Their transactional ids, and what the coordinators say of them.
    let producer_ids: BTreeSet<i64> = candidates.iter().map(|(_, p)| p.producer_id).collect();
    let ids = transactional_ids_of(client, &producer_ids).await?;
    // The partitions each producer's coordinator still expects to write a
    // marker to (None: it knows no such transaction).
    let mut expected: BTreeMap<i64, Option<Vec<TopicPartition>>> = BTreeMap::new();
    for (producer_id, transactional_id) in &ids {
        let partitions = match client.describe_transaction(transactional_id).await {
            Ok(t) => Some(t.partitions),
            Err(crate::client::Error::Kafka(k)) if k.code == TRANSACTIONAL_ID_NOT_FOUND => None,
            Err(e) => return Err(e),
        };
        expected.insert(*producer_id, partitions);
    }
    for (tp, p) in candidates {
        let known = expected
            .get(&p.producer_id)
            .and_then(Option::as_ref)
            .is_some_and(|parts| parts.contains(&tp));
        if !known {
            hanging.push(Hanging {
                topic: tp.topic.clone(),
                partition: tp.partition,
                producer_id: p.producer_id,
                producer_epoch: p.producer_epoch,
                coordinator_epoch: p.coordinator_epoch,
                start_offset: p.current_txn_start_offset.unwrap_or(-1),
                last_timestamp: p.last_timestamp,
                duration_min: (now - p.last_timestamp) / 60_000,
            });
        }
    }
    Ok(hanging)
}

/// The command that aborts the transaction open on `topic`-`partition`
/// from `start_offset`, as an operator types it.
pub fn abort_command(bootstrap: &str, topic: &str, partition: i32, start_offset: i64) -> String {
    format!(
        "doze-kafka transactions --bootstrap-server {bootstrap} abort --topic {topic} \
         --partition {partition} --start-offset {start_offset}"
    )
}

/// The abort of the producer whose open transaction on `tp` starts at
/// `start_offset`.
async fn abort_spec_at<C: Connector>(
    client: &mut Client<C>,
    tp: &TopicPartition,
    start_offset: i64,
) -> Result<AbortSpec, Failure> {
    let producers = client.describe_producers(tp).await?;
    let Some(p) = producers
        .iter()
        .find(|p| p.current_txn_start_offset == Some(start_offset))
    else {
        return Err(Failure::Failed(format!(
            "could not find any open transaction starting at offset {start_offset} on partition {tp}"
        )));
    };
    let producer_epoch = i16::try_from(p.producer_epoch).map_err(|_| {
        Failure::Failed(format!(
            "producer {} has epoch {}, which no marker can carry",
            p.producer_id, p.producer_epoch
        ))
    })?;
    Ok(AbortSpec {
        topic: tp.topic.clone(),
        partition: tp.partition,
        producer_id: p.producer_id,
        producer_epoch,
        coordinator_epoch: p.coordinator_epoch.unwrap_or(0),
    })
}

async fn abort<C: Connector>(
    client: &mut Client<C>,
    spec: AbortSpec,
    start_offset: Option<i64>,
    format: Format,
) -> Result<Output, Failure> {
    client.abort_transaction(&spec).await?;
    if format == Format::Json {
        #[derive(Serialize)]
        struct Aborted<'a> {
            #[serde(flatten)]
            spec: &'a AbortSpec,
            start_offset: Option<i64>,
        }
        return Ok(json(&serde_json::json!({
            "aborted": Aborted { spec: &spec, start_offset }
        })));
    }
    let from = start_offset.map_or(String::new(), |o| format!(" started at offset {o}"));
    Ok(format!(
        "Aborted the transaction of producer {} (epoch {}){from} on {}-{} (coordinator epoch {}).\n",
        spec.producer_id, spec.producer_epoch, spec.topic, spec.partition, spec.coordinator_epoch
    ))
}
