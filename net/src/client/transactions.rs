//! Transactions, from the coordinators' side (ListTransactions,
//! DescribeTransactions) and the partitions' side (DescribeProducers), and
//! the admin's abort of a hanging transaction (WriteTxnMarkers), as Kafka's
//! Admin client does them (KIP-664).

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeTransactionsRequest, ListTransactionsRequest, ProducerId,
    TransactionalId, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use super::groups::CoordinatorKind;
use super::topics::topic_name;
use super::{Client, Connector, Error, KafkaError, Target, TopicPartition};

/// Which transactions ListTransactions lists (empty: all).
#[derive(Clone, Debug, Default)]
pub struct TransactionFilter {
    /// `Ongoing`, `PrepareCommit`, ...
    pub states: Vec<String>,
    pub producer_ids: Vec<i64>,
    /// Only transactions running longer than this (ListTransactions v1).
    pub duration_ms: Option<i64>,
}

/// A transactional id as its coordinator lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TransactionListing {
    pub transactional_id: String,
    pub coordinator_id: i32,
    pub producer_id: i64,
    pub state: String,
}

/// A transactional id's state at its coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TransactionDescription {
    pub coordinator_id: i32,
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub state: String,
    pub timeout_ms: i32,
    /// None when no transaction is under way.
    pub start_time_ms: Option<i64>,
    /// The partitions of the transaction under way (or whose markers are
    /// not yet written).
    pub partitions: Vec<TopicPartition>,
}

/// A producer as a partition knows it (DescribeProducers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProducerState {
    pub producer_id: i64,
    pub producer_epoch: i32,
    pub last_sequence: i32,
    /// The largest timestamp of its last batch.
    pub last_timestamp: i64,
    /// Of its last marker here; None before any.
    pub coordinator_epoch: Option<i32>,
    /// Where its open transaction here starts; None without one.
    pub current_txn_start_offset: Option<i64>,
}

/// An abort marker to write (`kafka-transactions abort`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AbortSpec {
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
}

impl<C: Connector> Client<C> {
    /// The transactional ids every broker coordinates, by id.
    pub async fn list_transactions(
        &mut self,
        filter: &TransactionFilter,
    ) -> Result<Vec<TransactionListing>, Error> {
        let mut out = Vec::new();
        for node in self.node_ids() {
            let target = Target::Node(node);
            let version = self.version::<ListTransactionsRequest>(target).await?;
            let mut req = ListTransactionsRequest::default()
                .with_state_filters(
                    filter
                        .states
                        .iter()
                        .map(|s| StrBytes::from_string(s.clone()))
                        .collect(),
                )
                .with_producer_id_filters(
                    filter.producer_ids.iter().map(|&p| ProducerId(p)).collect(),
                );
            if let Some(ms) = filter.duration_ms {
                if version < 1 {
                    return Err(Error::Unsupported {
                        addr: format!("broker {node}"),
                        api: "ListTransactions v1 (a duration filter)".into(),
                    });
                }
                req.duration_filter = ms;
            }
            let r = self.send_at(target, version, &req).await?;
            KafkaError::check(r.error_code, None, format!("transactions of broker {node}"))?;
            out.extend(r.transaction_states.iter().map(|t| TransactionListing {
                transactional_id: t.transactional_id.to_string(),
                coordinator_id: node,
                producer_id: t.producer_id.0,
                state: t.transaction_state.to_string(),
            }));
        }
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(out)
    }

    /// A transactional id's state, from its coordinator
    /// (TRANSACTIONAL_ID_NOT_FOUND if it has none).
    pub async fn describe_transaction(
        &mut self,
        transactional_id: &str,
    ) -> Result<TransactionDescription, Error> {
        let deadline = self.retry_deadline();
        loop {
            match self.describe_transaction_once(transactional_id).await {
                Err(e) => Self::backoff(e, deadline).await?,
                done => return done,
            }
        }
    }

    async fn describe_transaction_once(
        &mut self,
        transactional_id: &str,
    ) -> Result<TransactionDescription, Error> {
        let coordinator = self
            .find_coordinator(CoordinatorKind::Transaction, transactional_id)
            .await?;
        let req =
            DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(
                StrBytes::from_string(transactional_id.to_string()),
            )]);
        let r = self.send(Target::Node(coordinator.node_id), &req).await?;
        let Some(t) = r.transaction_states.first() else {
            return Err(Error::Protocol {
                addr: format!("broker {}", coordinator.node_id),
                reason: "DescribeTransactions answered no transactional id".into(),
            });
        };
        KafkaError::check(
            t.error_code,
            None,
            format!("transactional id {transactional_id}"),
        )?;
        let mut partitions: Vec<TopicPartition> = t
            .topics
            .iter()
            .flat_map(|topic| {
                topic
                    .partitions
                    .iter()
                    .map(|&p| TopicPartition::new(topic.topic.to_string(), p))
            })
            .collect();
        partitions.sort();
        Ok(TransactionDescription {
            coordinator_id: coordinator.node_id,
            transactional_id: transactional_id.to_string(),
            producer_id: t.producer_id.0,
            producer_epoch: t.producer_epoch,
            state: t.transaction_state.to_string(),
            timeout_ms: t.transaction_timeout_ms,
            start_time_ms: Some(t.transaction_start_time_ms).filter(|&ms| ms >= 0),
            partitions,
        })
    }

    /// The producers a partition's leader knows, with their open
    /// transaction there if any.
    pub async fn describe_producers(
        &mut self,
        tp: &TopicPartition,
    ) -> Result<Vec<ProducerState>, Error> {
        let mut all = self.describe_producers_of(std::slice::from_ref(tp)).await?;
        match all.remove(tp) {
            Some(Ok(producers)) => Ok(producers),
            Some(Err(e)) => Err(Error::Kafka(e)),
            None => unreachable!("describe_producers_of answers every partition asked"),
        }
    }

    /// `describe_producers` of many partitions, one request per leader; a
    /// partition that cannot be answered has its error instead.
    pub async fn describe_producers_of(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Result<Vec<ProducerState>, KafkaError>>, Error> {
        let mut out = BTreeMap::new();
        let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
        for (tp, leader) in self.leaders(partitions).await? {
            match leader {
                Ok(id) => by_leader
                    .entry(id)
                    .or_default()
                    .entry(tp.topic)
                    .or_default()
                    .push(tp.partition),
                Err(e) => {
                    out.insert(tp, Err(e));
                }
            }
        }
        for (leader, topics) in by_leader {
            let req = DescribeProducersRequest::default().with_topics(
                topics
                    .iter()
                    .map(|(topic, parts)| {
                        TopicRequest::default()
                            .with_name(topic_name(topic))
                            .with_partition_indexes(parts.clone())
                    })
                    .collect(),
            );
            let r = self.send(Target::Node(leader), &req).await?;
            for t in &r.topics {
                for p in &t.partitions {
                    let tp = TopicPartition::new(t.name.to_string(), p.partition_index);
                    let about = format!("producers of partition {tp}");
                    let result =
                        match KafkaError::check(p.error_code, p.error_message.as_deref(), about) {
                            Err(Error::Kafka(e)) => Err(e),
                            _ => Ok(p.active_producers.iter().map(producer_state).collect()),
                        };
                    out.insert(tp, result);
                }
            }
        }
        for tp in partitions {
            out.entry(tp.clone()).or_insert_with(|| {
                Err(KafkaError {
                    code: 3,
                    message: Some("not in the answer".into()),
                    about: format!("producers of partition {tp}"),
                })
            });
        }
        Ok(out)
    }

    /// Writes an abort marker for `spec`'s producer on its partition, at the
    /// partition's leader (Admin.abortTransaction).
    pub async fn abort_transaction(&mut self, spec: &AbortSpec) -> Result<(), Error> {
        let tp = TopicPartition::new(spec.topic.clone(), spec.partition);
        let leader = self.leader(&tp).await?;
        let req =
            WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                .with_producer_id(ProducerId(spec.producer_id))
                .with_producer_epoch(spec.producer_epoch)
                .with_transaction_result(false)
                .with_coordinator_epoch(spec.coordinator_epoch)
                .with_topics(vec![WritableTxnMarkerTopic::default()
                    .with_name(topic_name(&spec.topic))
                    .with_partition_indexes(vec![spec.partition])])]);
        let r = self.send(Target::Node(leader), &req).await?;
        let Some(p) = r
            .markers
            .iter()
            .filter(|m| m.producer_id.0 == spec.producer_id)
            .flat_map(|m| m.topics.iter())
            .filter(|t| t.name.as_str() == spec.topic)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == spec.partition)
        else {
            return Err(Error::Protocol {
                addr: format!("broker {leader}"),
                reason: format!("WriteTxnMarkers did not answer partition {tp}"),
            });
        };
        KafkaError::check(
            p.error_code,
            None,
            format!("abort marker on partition {tp}"),
        )
    }
}

fn producer_state(
    s: &kafka_protocol::messages::describe_producers_response::ProducerState,
) -> ProducerState {
    ProducerState {
        producer_id: s.producer_id.0,
        producer_epoch: s.producer_epoch,
        last_sequence: s.last_sequence,
        last_timestamp: s.last_timestamp,
        coordinator_epoch: Some(s.coordinator_epoch).filter(|&e| e >= 0),
        current_txn_start_offset: Some(s.current_txn_start_offset).filter(|&o| o >= 0),
    }
}
