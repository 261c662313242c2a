//! Reading a partition: one Fetch to its leader, the record batches handed
//! back as the broker sent them (undecoded; kafka-protocol's
//! `RecordBatchDecoder` reads them), with the offsets that frame them.

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest};
use serde::Serialize;

use super::topics::topic_name;
use super::{Client, Connector, Error, KafkaError, Target, TopicPartition};

/// What a read may see of transactions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Everything up to the high watermark.
    #[default]
    ReadUncommitted,
    /// Up to the last stable offset, with the aborted transactions listed.
    ReadCommitted,
}

impl Isolation {
    pub(crate) fn code(self) -> i8 {
        match self {
            Isolation::ReadUncommitted => 0,
            Isolation::ReadCommitted => 1,
        }
    }
}

/// One partition's answer to a Fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawFetch {
    pub high_watermark: i64,
    /// None before Fetch v4 or when the broker gives none.
    pub last_stable_offset: Option<i64>,
    pub log_start_offset: Option<i64>,
    /// (producer id, first offset) of aborted transactions the records
    /// touch (read_committed only).
    pub aborted: Vec<(i64, i64)>,
    /// Whole record batches, and maybe a partial one at the end (cut by
    /// `max_bytes`); empty at the end of the log.
    pub records: Bytes,
}

impl<C: Connector> Client<C> {
    /// Up to `max_bytes` of `tp` from `offset`, from its leader, without
    /// waiting for new data.
    pub async fn fetch_raw(
        &mut self,
        tp: &TopicPartition,
        offset: i64,
        max_bytes: i32,
        isolation: Isolation,
    ) -> Result<RawFetch, Error> {
        let leader = self.leader(tp).await?;
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(max_bytes)
            .with_isolation_level(isolation.code())
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(&tp.topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(tp.partition)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(offset)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(max_bytes)])]);
        let r = self.send(Target::Node(leader), &req).await?;
        let about = format!("fetch of partition {tp}");
        KafkaError::check(r.error_code, None, about.clone())?;
        let Some(p) = r
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == tp.partition)
        else {
            return Err(Error::Protocol {
                addr: format!("broker {leader}"),
                reason: format!("Fetch did not answer partition {tp}"),
            });
        };
        KafkaError::check(p.error_code, None, about)?;
        Ok(RawFetch {
            high_watermark: p.high_watermark,
            last_stable_offset: Some(p.last_stable_offset).filter(|&o| o >= 0),
            log_start_offset: Some(p.log_start_offset).filter(|&o| o >= 0),
            aborted: p
                .aborted_transactions
                .iter()
                .flatten()
                .map(|a| (a.producer_id.0, a.first_offset))
                .collect(),
            records: p.records.clone().unwrap_or_default(),
        })
    }
}
