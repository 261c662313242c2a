//! An admin client that creates the workload's topic (CreateTopics v7), as
//! AdminClient.createTopics does: retried on retriable errors, and
//! TOPIC_ALREADY_EXISTS after a retry means the first attempt landed.

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::{backoff_ms, is_retriable, Client, Cx};

const TOPIC_ALREADY_EXISTS: i16 = 36;

pub struct Admin {
    topic: String,
    partitions: i32,
    asked: Option<i32>,
    attempts: u32,
    done: bool,
}

impl Admin {
    pub fn new(topic: String, partitions: i32) -> Self {
        Self {
            topic,
            partitions,
            asked: None,
            attempts: 0,
            done: false,
        }
    }
}

impl Client for Admin {
    fn name(&self) -> String {
        "admin".into()
    }

    fn on_wake(&mut self, cx: &mut Cx) {
        if self.done || self.asked.is_some() {
            return;
        }
        if cx.wire.conn().is_none() {
            return cx.connect();
        }
        let topic = CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(self.topic.clone())))
            .with_num_partitions(self.partitions)
            .with_replication_factor(1);
        let req = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(30_000);
        self.asked = cx.wire.send(7, &req);
    }

    fn on_response(&mut self, cx: &mut Cx, correlation_id: i32, response: ResponseKind) {
        assert_eq!(
            self.asked,
            Some(correlation_id),
            "admin has one request in flight"
        );
        self.asked = None;
        let ResponseKind::CreateTopics(r) = response else {
            panic!("CreateTopics answered with {response:?}")
        };
        let code = r.topics.first().map_or(-1, |t| t.error_code);
        match code {
            0 | TOPIC_ALREADY_EXISTS => {
                self.done = true;
                cx.note(format!("topic {} ready ({code})", self.topic));
            }
            c if is_retriable(c) => {
                self.attempts += 1;
                let delay_ms = backoff_ms(cx.rng, self.attempts);
                cx.wake_in(delay_ms);
            }
            c => cx.violation(format!("CreateTopics {} failed with error {c}", self.topic)),
        }
    }

    fn on_disconnect(&mut self, cx: &mut Cx) {
        self.asked = None;
        let delay_ms = backoff_ms(cx.rng, self.attempts);
        cx.wake_in(delay_ms);
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn status(&self) -> String {
        format!("admin: done={} attempts={}", self.done, self.attempts)
    }
}
