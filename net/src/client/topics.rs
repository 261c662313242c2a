//! Topics and the cluster: Metadata, DescribeConfigs, CreateTopics,
//! DeleteTopics. Metadata answers also keep the client's map of brokers
//! (node id to address) up to date, for requests that go to a leader.

use std::collections::BTreeMap;

use base64::Engine;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    CreateTopicsRequest, DeleteTopicsRequest, DescribeConfigsRequest, MetadataRequest,
    MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use super::{Client, Connector, Error, KafkaError, Target, TopicPartition};

/// DescribeConfigs' resource type of a topic.
const RESOURCE_TOPIC: i8 = 2;

/// A broker of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Broker {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// The cluster as Metadata describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClusterInfo {
    pub cluster_id: Option<String>,
    pub controller_id: Option<i32>,
    pub brokers: Vec<Broker>,
}

/// A topic and its partitions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TopicInfo {
    pub name: String,
    /// As Kafka prints it (URL-safe base64); None before Metadata v10.
    pub topic_id: Option<String>,
    pub internal: bool,
    pub partitions: Vec<PartitionInfo>,
}

impl TopicInfo {
    /// The replication factor: the first partition's replica count.
    pub fn replication_factor(&self) -> usize {
        self.partitions.first().map_or(0, |p| p.replicas.len())
    }
}

/// One partition of a topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionInfo {
    pub partition: i32,
    /// None when the partition has no leader.
    pub leader: Option<i32>,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// One config of a topic (DescribeConfigs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigEntry {
    pub name: String,
    /// None for a sensitive value.
    pub value: Option<String>,
    /// Kafka's ConfigSource name (`DYNAMIC_TOPIC_CONFIG`, `DEFAULT_CONFIG`, ...).
    pub source: String,
    pub read_only: bool,
    pub sensitive: bool,
}

impl ConfigEntry {
    /// Whether the value is the default one (kafka-topics leaves these out).
    pub fn is_default(&self) -> bool {
        self.source == "DEFAULT_CONFIG"
    }
}

/// A topic to create. Unset counts take the broker's defaults.
#[derive(Clone, Debug, Default)]
pub struct NewTopic {
    pub name: String,
    pub partitions: Option<i32>,
    pub replication_factor: Option<i16>,
    pub configs: Vec<(String, String)>,
}

/// What CreateTopics answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CreatedTopic {
    pub name: String,
    pub topic_id: Option<String>,
    /// None before CreateTopics v5.
    pub partitions: Option<i32>,
    pub replication_factor: Option<i16>,
}

impl<C: Connector> Client<C> {
    /// The cluster's id, controller and brokers.
    pub async fn cluster(&mut self) -> Result<ClusterInfo, Error> {
        let r = self.metadata(Some(&[])).await?;
        Ok(ClusterInfo {
            cluster_id: r.cluster_id.map(|s| s.to_string()),
            controller_id: Some(r.controller_id.0).filter(|&id| id >= 0),
            brokers: r
                .brokers
                .iter()
                .map(|b| Broker {
                    node_id: b.node_id.0,
                    host: b.host.to_string(),
                    port: b.port,
                    rack: b.rack.as_ref().map(|r| r.to_string()),
                })
                .collect(),
        })
    }

    /// Every topic, by name.
    pub async fn list_topics(&mut self) -> Result<Vec<TopicInfo>, Error> {
        let r = self.metadata(None).await?;
        let mut topics = Vec::new();
        for t in &r.topics {
            let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
            KafkaError::check(t.error_code, None, format!("topic {name}"))?;
            topics.push(topic_info(t));
        }
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(topics)
    }

    /// The named topics, in that order; a missing one is an error
    /// (UNKNOWN_TOPIC_OR_PARTITION).
    pub async fn describe_topics(&mut self, names: &[String]) -> Result<Vec<TopicInfo>, Error> {
        let r = self.metadata(Some(names)).await?;
        let mut topics = Vec::new();
        for name in names {
            let found = r
                .topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == name.as_str()));
            let Some(t) = found else {
                return Err(Error::Kafka(KafkaError {
                    code: 3,
                    message: None,
                    about: format!("topic {name}"),
                }));
            };
            KafkaError::check(t.error_code, None, format!("topic {name}"))?;
            topics.push(topic_info(t));
        }
        Ok(topics)
    }

    /// A topic's configs, each with where its value comes from.
    pub async fn topic_configs(&mut self, name: &str) -> Result<Vec<ConfigEntry>, Error> {
        let req = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(StrBytes::from_string(name.to_string()))
                .with_configuration_keys(None),
        ]);
        let r = self.send(Target::Any, &req).await?;
        let Some(result) = r.results.first() else {
            return Err(Error::Protocol {
                addr: self.any.clone(),
                reason: "DescribeConfigs answered no resource".into(),
            });
        };
        KafkaError::check(
            result.error_code,
            result.error_message.as_deref(),
            format!("topic {name}"),
        )?;
        Ok(result
            .configs
            .iter()
            .map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: c.value.as_ref().map(|v| v.to_string()),
                source: config_source_name(c.config_source).to_string(),
                read_only: c.read_only,
                sensitive: c.is_sensitive,
            })
            .collect())
    }

    /// Creates a topic (any broker takes CreateTopics; Kafka's forward it to
    /// the controller).
    pub async fn create_topic(&mut self, topic: &NewTopic) -> Result<CreatedTopic, Error> {
        let configs = topic
            .configs
            .iter()
            .map(|(k, v)| {
                CreatableTopicConfig::default()
                    .with_name(StrBytes::from_string(k.clone()))
                    .with_value(Some(StrBytes::from_string(v.clone())))
            })
            .collect();
        let req = CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default()
                .with_name(topic_name(&topic.name))
                .with_num_partitions(topic.partitions.unwrap_or(-1))
                .with_replication_factor(topic.replication_factor.unwrap_or(-1))
                .with_configs(configs)])
            .with_timeout_ms(self.timeout_ms());
        let r = self.send(Target::Any, &req).await?;
        let Some(t) = r.topics.first() else {
            return Err(Error::Protocol {
                addr: self.any.clone(),
                reason: "CreateTopics answered no topic".into(),
            });
        };
        KafkaError::check(
            t.error_code,
            t.error_message.as_deref(),
            format!("topic {}", topic.name),
        )?;
        Ok(CreatedTopic {
            name: topic.name.clone(),
            topic_id: kafka_uuid(t.topic_id.as_bytes()),
            partitions: Some(t.num_partitions).filter(|&n| n >= 0),
            replication_factor: Some(t.replication_factor).filter(|&n| n >= 0),
        })
    }

    /// Deletes a topic.
    pub async fn delete_topic(&mut self, name: &str) -> Result<(), Error> {
        let version = self.version::<DeleteTopicsRequest>(Target::Any).await?;
        let mut req = DeleteTopicsRequest::default().with_timeout_ms(self.timeout_ms());
        if version >= 6 {
            req.topics = vec![DeleteTopicState::default().with_name(Some(topic_name(name)))];
        } else {
            req.topic_names = vec![topic_name(name)];
        }
        let r = self.send_at(Target::Any, version, &req).await?;
        let Some(t) = r.responses.first() else {
            return Err(Error::Protocol {
                addr: self.any.clone(),
                reason: "DeleteTopics answered no topic".into(),
            });
        };
        KafkaError::check(
            t.error_code,
            t.error_message.as_deref(),
            format!("topic {name}"),
        )
    }

    /// The leader of each partition (an error for a partition that has none
    /// or a topic that does not exist).
    pub(crate) async fn leaders(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Result<i32, KafkaError>>, Error> {
        let mut topics: Vec<String> = partitions.iter().map(|tp| tp.topic.clone()).collect();
        topics.sort();
        topics.dedup();
        let r = self.metadata(Some(&topics)).await?;
        let mut out = BTreeMap::new();
        for tp in partitions {
            let about = format!("partition {tp}");
            let unknown = KafkaError {
                code: 3,
                message: None,
                about: about.clone(),
            };
            let topic = r
                .topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == tp.topic));
            let leader = match topic {
                None => Err(unknown),
                Some(t) if t.error_code != 0 => Err(KafkaError {
                    code: t.error_code,
                    message: None,
                    about,
                }),
                Some(t) => match t
                    .partitions
                    .iter()
                    .find(|p| p.partition_index == tp.partition)
                {
                    None => Err(unknown),
                    Some(p) if p.error_code != 0 || p.leader_id.0 < 0 => Err(KafkaError {
                        // LEADER_NOT_AVAILABLE when it names none.
                        code: if p.error_code != 0 { p.error_code } else { 5 },
                        message: None,
                        about,
                    }),
                    Some(p) => Ok(p.leader_id.0),
                },
            };
            out.insert(tp.clone(), leader);
        }
        Ok(out)
    }

    /// The leader of one partition, or its error.
    pub(crate) async fn leader(&mut self, tp: &TopicPartition) -> Result<i32, Error> {
        let mut leaders = self.leaders(std::slice::from_ref(tp)).await?;
        match leaders.remove(tp) {
            Some(Ok(id)) => Ok(id),
            Some(Err(e)) => Err(Error::Kafka(e)),
            None => unreachable!("leaders answers every partition asked"),
        }
    }

    /// Refreshes the brokers known from a Metadata of no topic.
    pub(crate) async fn refresh_brokers(&mut self) -> Result<(), Error> {
        self.metadata(Some(&[])).await.map(|_| ())
    }

    /// Metadata of `topics` (None: all), never creating one; remembers the
    /// brokers it lists.
    async fn metadata(&mut self, topics: Option<&[String]>) -> Result<MetadataResponse, Error> {
        let topics = topics.map(|names| {
            names
                .iter()
                .map(|n| MetadataRequestTopic::default().with_name(Some(topic_name(n))))
                .collect()
        });
        let req = MetadataRequest::default()
            .with_topics(topics)
            .with_allow_auto_topic_creation(false);
        // Not `send`: finding a broker's address comes here (`conn_node`).
        let result = self.conn_any().await?.send(&req).await;
        self.forget_if_broken(Target::Any);
        let r = result?;
        for b in &r.brokers {
            self.brokers
                .insert(b.node_id.0, format!("{}:{}", b.host.as_str(), b.port));
        }
        Ok(r)
    }

    pub(crate) fn timeout_ms(&self) -> i32 {
        i32::try_from(self.config.request_timeout.as_millis()).unwrap_or(i32::MAX)
    }
}

fn topic_info(t: &kafka_protocol::messages::metadata_response::MetadataResponseTopic) -> TopicInfo {
    let mut partitions: Vec<PartitionInfo> = t
        .partitions
        .iter()
        .map(|p| PartitionInfo {
            partition: p.partition_index,
            leader: Some(p.leader_id.0).filter(|&id| id >= 0),
            replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
            isr: p.isr_nodes.iter().map(|b| b.0).collect(),
        })
        .collect();
    partitions.sort_by_key(|p| p.partition);
    TopicInfo {
        name: t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
        topic_id: kafka_uuid(t.topic_id.as_bytes()),
        internal: t.is_internal,
        partitions,
    }
}

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// A topic id as Kafka prints it (Uuid.toString: URL-safe base64 without
/// padding); None for the zero id (no id).
fn kafka_uuid(bytes: &[u8; 16]) -> Option<String> {
    if bytes.iter().all(|&b| b == 0) {
        return None;
    }
    Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// Kafka's ConfigEntry.ConfigSource names, by DescribeConfigs' code.
fn config_source_name(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        7 => "CLIENT_METRICS_CONFIG",
        8 => "GROUP_CONFIG",
        _ => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_print_as_kafkas() {
        assert_eq!(kafka_uuid(&[0; 16]), None);
        // Uuid.toString of the id with every byte 0xff.
        assert_eq!(
            kafka_uuid(&[0xff; 16]).as_deref(),
            Some("_____________________w")
        );
    }
}
