//! Open transactions as the pages show them: each open on a partition
//! (DescribeProducers: the producer and where its transaction starts),
//! named by its transactional id when a coordinator lists the producer
//! (ListTransactions), with that id's state, timeout and start
//! (DescribeTransactions), and judged:
//!
//! - hanging: what `doze-kafka transactions find-hanging` reports (the
//!   same code, `tools::transactions::hanging_among`): open longer than
//!   the broker's `transaction.max.timeout.ms` and not expected to end by
//!   any coordinator. Nothing will end it but an abort marker;
//! - overdue: its coordinator's transaction has been open longer than its
//!   own timeout (the coordinator should abort it soon; if it does not,
//!   it holds readers back like a hanging one);
//! - open: neither.
//!
//! A hanging or overdue one is shown with the command that aborts it.

use std::collections::{BTreeMap, BTreeSet};

use doze_core::limits::CONSOLE_TRANSACTIONS_SHOWN_MAX;

use crate::client::{
    self, Client, Connector, ProducerState, TopicPartition, TransactionDescription,
};
use crate::tools::transactions::{hanging_among, transactional_ids_of};

/// TRANSACTIONAL_ID_NOT_FOUND: the id expired, or was never known.
const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

/// How an open transaction is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Open,
    Overdue,
    Hanging,
}

impl Status {
    /// The CSS class and `data-status` value.
    pub fn name(self) -> &'static str {
        match self {
            Status::Open => "open",
            Status::Overdue => "overdue",
            Status::Hanging => "hanging",
        }
    }

    /// Whether the page offers the abort command for it.
    pub fn needs_abort(self) -> bool {
        self != Status::Open
    }
}

/// A transaction open on one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenTxn {
    pub tp: TopicPartition,
    pub producer: ProducerState,
    /// Where it starts on the partition.
    pub start_offset: i64,
    pub transactional_id: Option<String>,
    pub description: Option<TransactionDescription>,
    pub status: Status,
}

/// Whether a coordinator's transaction has been open longer than its
/// timeout at `now_ms`.
pub fn overdue(t: &TransactionDescription, now_ms: i64) -> bool {
    let open = matches!(
        t.state.as_str(),
        "Ongoing" | "PrepareCommit" | "PrepareAbort"
    );
    open && t
        .start_time_ms
        .is_some_and(|start| now_ms - start > i64::from(t.timeout_ms))
}

/// The open transactions among `producers` (each with its partition),
/// judged; ordered by partition, then start offset.
pub async fn open_transactions<C: Connector>(
    client: &mut Client<C>,
    producers: Vec<(TopicPartition, ProducerState)>,
    max_transaction_timeout_ms: i64,
    now_ms: i64,
) -> Result<Vec<OpenTxn>, client::Error> {
    let open: Vec<(TopicPartition, ProducerState)> = producers
        .into_iter()
        .filter(|(_, p)| p.current_txn_start_offset.is_some())
        .collect();
    if open.is_empty() {
        return Ok(Vec::new());
    }
    let hanging: BTreeSet<(TopicPartition, i64)> =
        hanging_among(client, open.clone(), max_transaction_timeout_ms, now_ms)
            .await?
            .into_iter()
            .map(|h| (TopicPartition::new(h.topic, h.partition), h.producer_id))
            .collect();
    let producer_ids: BTreeSet<i64> = open.iter().map(|(_, p)| p.producer_id).collect();
    let ids = transactional_ids_of(client, &producer_ids).await?;
    let descriptions = describe_each(client, ids.values().cloned()).await?;
    let mut out: Vec<OpenTxn> = open
        .into_iter()
        .map(|(tp, producer)| {
            let transactional_id = ids.get(&producer.producer_id).cloned();
            let description = transactional_id
                .as_ref()
                .and_then(|id| descriptions.get(id))
                .cloned();
            let status = if hanging.contains(&(tp.clone(), producer.producer_id)) {
                Status::Hanging
            } else if description.as_ref().is_some_and(|d| overdue(d, now_ms)) {
                Status::Overdue
            } else {
                Status::Open
            };
            OpenTxn {
                start_offset: producer.current_txn_start_offset.unwrap_or(-1),
                tp,
                producer,
                transactional_id,
                description,
                status,
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.tp, a.start_offset).cmp(&(&b.tp, b.start_offset)));
    Ok(out)
}

/// DescribeTransactions of each id (at most `CONSOLE_TRANSACTIONS_SHOWN_MAX`);
/// an id no longer known is left out.
pub async fn describe_each<C: Connector>(
    client: &mut Client<C>,
    ids: impl IntoIterator<Item = String>,
) -> Result<BTreeMap<String, TransactionDescription>, client::Error> {
    let mut out = BTreeMap::new();
    for id in ids.into_iter().take(CONSOLE_TRANSACTIONS_SHOWN_MAX) {
        match client.describe_transaction(&id).await {
            Ok(t) => {
                out.insert(id, t);
            }
            Err(client::Error::Kafka(k)) if k.code == TRANSACTIONAL_ID_NOT_FOUND => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(state: &str, start: Option<i64>, timeout_ms: i32) -> TransactionDescription {
        TransactionDescription {
            coordinator_id: 1,
            transactional_id: "t".into(),
            producer_id: 7,
            producer_epoch: 0,
            state: state.into(),
            timeout_ms,
            start_time_ms: start,
            partitions: Vec::new(),
        }
    }

    #[test]
    fn overdue_is_open_longer_than_its_timeout() {
        assert!(!overdue(&described("Ongoing", Some(1_000), 60_000), 61_000));
        assert!(overdue(&described("Ongoing", Some(1_000), 60_000), 61_001));
        assert!(!overdue(
            &described("CompleteCommit", Some(1_000), 60_000),
            99_000
        ));
        assert!(!overdue(&described("Empty", None, 60_000), 99_000));
        assert!(overdue(&described("PrepareAbort", Some(0), 10), 11));
    }
}
