//! CreateTopics and DeleteTopics.

use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig,
};
use weir_protocol::kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use weir_protocol::kafka_protocol::messages::{
    CreateTopicsRequest, DeleteTopicsRequest, TopicName,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::Admin;
use crate::cluster::Lane;
use crate::kerror::codes;
use crate::{ClientError, Result};

/// A topic to create.
///
/// ```
/// use weir_client::admin::NewTopic;
/// let t = NewTopic::new("orders", 6).config("cleanup.policy", "compact");
/// assert_eq!(t.partitions, 6);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    /// The name.
    pub name: String,
    /// Partitions (-1: the broker's default).
    pub partitions: i32,
    /// Replication factor (-1: the broker's default).
    pub replication_factor: i16,
    /// Topic configs, e.g. `cleanup.policy=compact`.
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    /// A topic with `partitions` partitions and the broker's default replication.
    pub fn new(name: impl Into<String>, partitions: i32) -> Self {
        Self {
            name: name.into(),
            partitions,
            replication_factor: -1,
            configs: Vec::new(),
        }
    }

    /// Sets the replication factor.
    pub fn replication_factor(mut self, rf: i16) -> Self {
        self.replication_factor = rf;
        self
    }

    /// Adds a topic config.
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.configs.push((key.into(), value.into()));
        self
    }
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

impl Admin {
    /// Creates one topic.
    ///
    /// # Errors
    /// [`ClientError::Server`] naming the topic (e.g. `TOPIC_ALREADY_EXISTS`,
    /// `INVALID_CONFIG`), or connection errors.
    pub async fn create_topic(&self, topic: NewTopic) -> Result<()> {
        first_outcome(self.create_topics(&[topic]).await?)
    }

    /// Creates topics; returns each topic's outcome. Retries while the
    /// controller moves.
    ///
    /// # Errors
    /// Connection errors, or a retriable error that outlasted the timeout.
    pub async fn create_topics(&self, topics: &[NewTopic]) -> Result<Vec<(String, Result<()>)>> {
        let timeout_ms = broker_side_timeout_ms(&self.cluster);
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(timeout_ms)
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        CreatableTopic::default()
                            .with_name(name(&t.name))
                            .with_num_partitions(t.partitions)
                            .with_replication_factor(t.replication_factor)
                            .with_configs(
                                t.configs
                                    .iter()
                                    .map(|(k, v)| {
                                        CreatableTopicConfig::default()
                                            .with_name(StrBytes::from_string(k.clone()))
                                            .with_value(Some(StrBytes::from_string(v.clone())))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        let response = self
            .cluster
            .retry("CreateTopics", || async {
                let r = self.cluster.request_controller(&request).await?;
                retry_if_controller_moved(
                    r.topics.iter().map(|t| t.error_code),
                    ApiKey::CreateTopics,
                    &self.cluster,
                )?;
                Ok(r)
            })
            .await?;
        let outcomes = topics
            .iter()
            .map(|t| {
                let found = response.topics.iter().find(|r| r.name.0.as_str() == t.name);
                let outcome = match found {
                    Some(r) => {
                        ClientError::check(r.error_code, ApiKey::CreateTopics, Some(&t.name), None)
                            .map_err(|e| e.with_message(r.error_message.as_deref()))
                    }
                    None => Err(ClientError::MissingInResponse {
                        api: ApiKey::CreateTopics,
                        what: t.name.clone(),
                    }),
                };
                (t.name.clone(), outcome)
            })
            .collect();
        for t in topics {
            self.cluster.invalidate_topic(&t.name);
        }
        Ok(outcomes)
    }

    /// Deletes one topic.
    ///
    /// # Errors
    /// [`ClientError::Server`] naming the topic (e.g. `UNKNOWN_TOPIC_OR_PARTITION`).
    pub async fn delete_topic(&self, topic: &str) -> Result<()> {
        first_outcome(self.delete_topics(&[topic]).await?)
    }

    /// Deletes topics; returns each topic's outcome.
    ///
    /// # Errors
    /// Connection errors, or a retriable error that outlasted the timeout.
    pub async fn delete_topics(&self, topics: &[&str]) -> Result<Vec<(String, Result<()>)>> {
        let timeout_ms = broker_side_timeout_ms(&self.cluster);
        let response = self
            .cluster
            .retry("DeleteTopics", || async {
                let controller = self.cluster.controller().await?;
                let version = self
                    .cluster
                    .connection(controller, Lane::Metadata)
                    .await?
                    .version_for::<DeleteTopicsRequest>()?;
                // v6 names topics in `topics` (so they can be named by id);
                // older versions in `topic_names`.
                let mut request = DeleteTopicsRequest::default().with_timeout_ms(timeout_ms);
                request = if version >= 6 {
                    request.with_topics(
                        topics
                            .iter()
                            .map(|t| DeleteTopicState::default().with_name(Some(name(t))))
                            .collect(),
                    )
                } else {
                    request.with_topic_names(topics.iter().map(|t| name(t)).collect())
                };
                let r = self
                    .cluster
                    .request(controller, Lane::Metadata, &request)
                    .await?;
                retry_if_controller_moved(
                    r.responses.iter().map(|t| t.error_code),
                    ApiKey::DeleteTopics,
                    &self.cluster,
                )?;
                Ok(r)
            })
            .await?;
        let outcomes = topics
            .iter()
            .map(|t| {
                let found = response
                    .responses
                    .iter()
                    .find(|r| r.name.as_ref().is_some_and(|n| n.0.as_str() == *t));
                let outcome = match found {
                    Some(r) => {
                        ClientError::check(r.error_code, ApiKey::DeleteTopics, Some(t), None)
                            .map_err(|e| e.with_message(r.error_message.as_deref()))
                    }
                    None => Err(ClientError::MissingInResponse {
                        api: ApiKey::DeleteTopics,
                        what: (*t).to_owned(),
                    }),
                };
                ((*t).to_owned(), outcome)
            })
            .collect();
        for t in topics {
            self.cluster.invalidate_topic(t);
        }
        Ok(outcomes)
    }
}

/// NOT_CONTROLLER on any item means the whole request went to the wrong
/// broker: refresh and send it again.
fn retry_if_controller_moved(
    mut codes_iter: impl Iterator<Item = i16>,
    api: ApiKey,
    cluster: &crate::Cluster,
) -> Result<()> {
    if codes_iter.any(|c| c == codes::NOT_CONTROLLER) {
        cluster.invalidate();
        return Err(ClientError::server(codes::NOT_CONTROLLER, api));
    }
    Ok(())
}

fn first_outcome(outcomes: Vec<(String, Result<()>)>) -> Result<()> {
    outcomes
        .into_iter()
        .next()
        .map_or(Err(ClientError::Closed), |(_, r)| r)
}

/// How long the broker may take: less than our request timeout, so that its
/// answer (even a REQUEST_TIMED_OUT) arrives before we give up on it.
fn broker_side_timeout_ms(cluster: &crate::Cluster) -> i32 {
    let ms = cluster.config().request_timeout.as_millis() * 4 / 5;
    i32::try_from(ms).unwrap_or(i32::MAX)
}
