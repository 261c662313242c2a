//! An operator trimming the workload's topic with DeleteRecords, as
//! AdminClient.deleteRecords does: now and then it asks one partition's
//! high watermark (ListOffsets, latest) and deletes the records below an
//! offset between the log start it last saw and that high watermark, or
//! below the high watermark itself (offset -1). Each answered low watermark
//! goes to the history: the broker stores the log start it answers before
//! answering, so from then on no fetch may see the log start below it, and
//! the final log may not start below it (`oracle::check_deleted_records`).

use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    BrokerId, DeleteRecordsRequest, DeleteRecordsResponse, ListOffsetsRequest, ListOffsetsResponse,
    ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rand::RngExt;

use super::{backoff_ms, is_retriable, Client, Cx};
use crate::history::RecordsDeleted;

/// ListOffsets' timestamp for the latest offset (the high watermark).
const LATEST_TIMESTAMP: i64 = -1;
/// DeleteRecords' offset for "up to the high watermark".
const TO_HIGH_WATERMARK: i64 = -1;
/// Between two trims (ms).
const PAUSE_MS: std::ops::RangeInclusive<i64> = 200..=800;

enum Step {
    Idle,
    /// ListOffsets in flight for this partition.
    AskedEnd {
        corr: i32,
        partition: i32,
    },
    /// DeleteRecords in flight: partition, the offset asked, and the high
    /// watermark ListOffsets answered before it.
    AskedDelete {
        corr: i32,
        partition: i32,
        offset: i64,
        high_watermark: i64,
    },
}

pub struct Truncator {
    client: u32,
    topic: String,
    /// Per partition, the highest low watermark answered so far.
    known_start: Vec<i64>,
    step: Step,
    attempts: u32,
    stopped: bool,
}

impl Truncator {
    pub fn new(client: u32, topic: String, partitions: i32) -> Self {
        Self {
            client,
            topic,
            known_start: vec![0; partitions as usize],
            step: Step::Idle,
            attempts: 0,
            stopped: false,
        }
    }

    fn topic_name(&self) -> TopicName {
        TopicName(StrBytes::from_string(self.topic.clone()))
    }

    fn ask_end(&mut self, cx: &mut Cx) {
        let partition = cx.rng.random_range(0..self.known_start.len()) as i32;
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(self.topic_name())
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_timestamp(LATEST_TIMESTAMP)])]);
        // v1 and later answer one offset; v2 and later read_uncommitted by
        // default (isolation 0): the high watermark.
        let version = cx.rng.random_range(1..=7);
        if let Some(corr) = cx.wire.send(version, &req) {
            self.step = Step::AskedEnd { corr, partition };
        }
    }

    fn ask_delete(&mut self, cx: &mut Cx, partition: i32, high_watermark: i64) {
        let start = self.known_start[partition as usize];
        if high_watermark <= start {
            let pause_ms = cx.rng.random_range(PAUSE_MS);
            return cx.wake_in(pause_ms);
        }
        let offset = if cx.rng.random_range(0..4) == 0 {
            TO_HIGH_WATERMARK
        } else {
            cx.rng.random_range(start + 1..=high_watermark)
        };
        let req = DeleteRecordsRequest::default()
            .with_topics(vec![DeleteRecordsTopic::default()
                .with_name(self.topic_name())
                .with_partitions(vec![DeleteRecordsPartition::default()
                    .with_partition_index(partition)
                    .with_offset(offset)])])
            .with_timeout_ms(30_000);
        let version = cx.rng.random_range(0..=2);
        if let Some(corr) = cx.wire.send(version, &req) {
            self.step = Step::AskedDelete {
                corr,
                partition,
                offset,
                high_watermark,
            };
        }
    }

    fn retry(&mut self, cx: &mut Cx, code: i16, what: &str) {
        if !is_retriable(code) {
            return cx.violation(format!("c{}: {what} failed with error {code}", self.client));
        }
        self.attempts += 1;
        let delay_ms = backoff_ms(cx.rng, self.attempts);
        cx.wake_in(delay_ms);
    }
    /// ListOffsets answered the high watermark of `partition`.
    fn on_end(&mut self, cx: &mut Cx, partition: i32, r: &ListOffsetsResponse) {
        let Some(part) = r.topics.iter().flat_map(|t| t.partitions.iter()).next() else {
            return cx.violation(format!(
                "c{}: ListOffsets answered no partition",
                self.client
            ));
        };
        if part.error_code != 0 {
            return self.retry(cx, part.error_code, "ListOffsets latest");
        }
        self.attempts = 0;
        if !self.stopped {
            self.ask_delete(cx, partition, part.offset);
        }
    }

    /// DeleteRecords answered for (partition, offset asked, high watermark
    /// seen before).
    fn on_deleted(&mut self, cx: &mut Cx, asked: (i32, i64, i64), r: &DeleteRecordsResponse) {
        let (partition, offset, high_watermark) = asked;
        let Some(part) = r.topics.iter().flat_map(|t| t.partitions.iter()).next() else {
            return cx.violation(format!(
                "c{}: DeleteRecords answered no partition",
                self.client
            ));
        };
        if part.error_code != 0 {
            let what = format!("DeleteRecords p{partition} below {offset}");
            return self.retry(cx, part.error_code, &what);
        }
        self.attempts = 0;
        let low_watermark = part.low_watermark;
        if offset != TO_HIGH_WATERMARK && low_watermark < offset {
            cx.violation(format!(
                "c{}: DeleteRecords p{partition} below {offset} answered the low watermark {low_watermark}",
                self.client
            ));
        }
        if offset == TO_HIGH_WATERMARK && low_watermark < high_watermark {
            cx.violation(format!(
                "c{}: DeleteRecords p{partition} up to the high watermark answered the low watermark {low_watermark}, below the high watermark {high_watermark} seen before",
                self.client
            ));
        }
        cx.note(format!(
            "p{partition}: records deleted below {offset}: low watermark {low_watermark}"
        ));
        let slot = &mut self.known_start[partition as usize];
        *slot = (*slot).max(low_watermark);
        cx.history.records_deleted.push(RecordsDeleted {
            answered_ms: cx.elapsed_ms,
            partition,
            low_watermark,
        });
        let pause_ms = cx.rng.random_range(PAUSE_MS);
        cx.wake_in(pause_ms);
    }
}

impl Client for Truncator {
    fn name(&self) -> String {
        format!("c{} (DeleteRecords)", self.client)
    }

    fn on_wake(&mut self, cx: &mut Cx) {
        if self.stopped || !matches!(self.step, Step::Idle) {
            return;
        }
        if cx.wire.conn().is_none() {
            return cx.connect();
        }
        self.ask_end(cx);
    }

    fn on_response(&mut self, cx: &mut Cx, corr: i32, response: ResponseKind) {
        let step = std::mem::replace(&mut self.step, Step::Idle);
        match (step, response) {
            (Step::AskedEnd { corr: c, partition }, ResponseKind::ListOffsets(r)) => {
                assert_eq!(c, corr, "one request in flight");
                self.on_end(cx, partition, &r);
            }
            (
                Step::AskedDelete {
                    corr: c,
                    partition,
                    offset,
                    high_watermark,
                },
                ResponseKind::DeleteRecords(r),
            ) => {
                assert_eq!(c, corr, "one request in flight");
                self.on_deleted(cx, (partition, offset, high_watermark), &r);
            }
            (_, other) => panic!("c{}: unexpected answer {other:?}", self.client),
        }
    }

    fn on_disconnect(&mut self, cx: &mut Cx) {
        // Whatever was in flight is lost (a DeleteRecords may have landed).
        self.step = Step::Idle;
        let delay_ms = backoff_ms(cx.rng, self.attempts);
        cx.wake_in(delay_ms);
    }

    fn finish(&mut self) {
        self.stopped = true;
    }

    fn is_done(&self) -> bool {
        self.stopped && matches!(self.step, Step::Idle)
    }

    fn status(&self) -> String {
        format!(
            "c{} (DeleteRecords): stopped={} known starts {:?}",
            self.client, self.stopped, self.known_start
        )
    }
}
