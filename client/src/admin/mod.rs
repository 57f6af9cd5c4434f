//! Admin operations: topics, configs, offsets, the cluster, groups and
//! their committed offsets.
//!
//! Every operation retries transient errors (a moving controller or leader,
//! a coordinator still loading, lost connections) within
//! `default.api.timeout.ms`, and reports per-item errors with the item named.

mod configs;
mod groups;
mod offsets;
mod topics;

pub use configs::{ConfigChange, ConfigEntry, ConfigResource, ConfigSource};
pub use groups::{CommittedOffset, GroupDescription, GroupListing, MemberDescription};
pub use offsets::{ListedOffset, OffsetSpec};
pub use topics::NewTopic;

use crate::cluster::{BrokerAddress, Cluster, TopicMetadata};
use crate::config::ClientConfig;
use crate::{BrokerId, Result};

/// An admin client over a [`Cluster`].
#[derive(Debug, Clone)]
pub struct Admin {
    cluster: Cluster,
}

/// What [`Admin::describe_cluster`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    /// The cluster id, if the broker reports one.
    pub cluster_id: Option<String>,
    /// The controller's node id (-1 if unknown).
    pub controller_id: BrokerId,
    /// The brokers, sorted by node id.
    pub brokers: Vec<BrokerAddress>,
}

impl Admin {
    /// Connects to the cluster.
    ///
    /// # Errors
    /// As [`Cluster::connect`].
    pub async fn connect(config: ClientConfig) -> Result<Admin> {
        Ok(Admin::new(Cluster::connect(config).await?))
    }

    /// An admin client sharing `cluster`'s connections. Its metadata
    /// lookups never create topics.
    pub fn new(cluster: Cluster) -> Admin {
        Admin {
            cluster: cluster.with_auto_create(false),
        }
    }

    /// The cluster handle.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The cluster id, controller and brokers, freshly fetched.
    ///
    /// # Errors
    /// Connection errors when no broker answers.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription> {
        let md = self.cluster.refresh_metadata(&[]).await?;
        let mut brokers: Vec<BrokerAddress> = md.brokers.values().cloned().collect();
        brokers.sort_by_key(|b| b.id);
        Ok(ClusterDescription {
            cluster_id: md.cluster_id.clone(),
            controller_id: md.controller_id,
            brokers,
        })
    }

    /// Every topic in the cluster (internal ones included), sorted by name.
    ///
    /// # Errors
    /// Connection errors when no broker answers.
    pub async fn list_topics(&self) -> Result<Vec<TopicMetadata>> {
        let md = self.cluster.refresh_all_metadata().await?;
        let mut topics: Vec<TopicMetadata> = md.topics.values().cloned().collect();
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(topics)
    }

    /// Partitions, leaders and replicas of `topics`, freshly fetched. A topic
    /// that does not exist is an error naming it.
    ///
    /// # Errors
    /// [`crate::ClientError::Server`] (`UNKNOWN_TOPIC_OR_PARTITION`) or
    /// connection errors.
    pub async fn describe_topics(&self, topics: &[&str]) -> Result<Vec<TopicMetadata>> {
        let md = self.cluster.refresh_metadata(topics).await?;
        topics
            .iter()
            .map(|t| {
                let found = md.topic(t).filter(|m| m.error.is_none());
                match found {
                    Some(m) => Ok(m.clone()),
                    None => {
                        let code = md.topic(t).and_then(|m| m.error).map_or(3, |c| c.code);
                        Err(crate::ClientError::check(
                            code,
                            weir_protocol::ApiKey::Metadata,
                            Some(t),
                            None,
                        )
                        .err()
                        .unwrap_or(crate::ClientError::Closed))
                    }
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
