//! An admin client that creates the workload's topic (CreateTopics v7), as
//! AdminClient.createTopics does: retried on retriable errors, and
//! TOPIC_ALREADY_EXISTS after a retry means the first attempt landed.

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{CreateTopicsRequest, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::{backoff_ms, is_retriable, Client, Cx};

const TOPIC_ALREADY_EXISTS: i16 = 36;

/// A topic to create: its name, partitions and topic configs.
pub type NewTopic = (String, i32, Vec<(String, String)>);

pub struct Admin {
    topics: Vec<NewTopic>,
    asked: Option<i32>,
    attempts: u32,
    done: bool,
}

impl Admin {
    pub fn new(topics: Vec<NewTopic>) -> Self {
        Self {
            topics,
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
        let topics = self
            .topics
            .iter()
            .map(|(name, partitions, configs)| {
                let configs = configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k.clone()))
                            .with_value(Some(StrBytes::from_string(v.clone())))
                    })
                    .collect();
                CreatableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(name.clone())))
                    .with_num_partitions(*partitions)
                    .with_replication_factor(1)
                    .with_configs(configs)
            })
            .collect();
        let req = CreateTopicsRequest::default()
            .with_topics(topics)
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
        let code = r
            .topics
            .iter()
            .map(|t| t.error_code)
            .find(|&c| c != 0 && c != TOPIC_ALREADY_EXISTS)
            .unwrap_or(if r.topics.is_empty() { -1 } else { 0 });
        match code {
            0 => {
                self.done = true;
                cx.note(format!("topics ready: {:?}", self.topics));
            }
            c if is_retriable(c) => {
                self.attempts += 1;
                let delay_ms = backoff_ms(cx.rng, self.attempts);
                cx.wake_in(delay_ms);
            }
            c => cx.violation(format!(
                "CreateTopics {:?} failed with error {c}",
                self.topics
            )),
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
