//! The cluster as the client last saw it: brokers, topics, partition leaders.

use std::collections::HashMap;

use tokio::time::Instant;
use weir_protocol::kafka_protocol::messages::MetadataResponse;

use super::BrokerId;
use crate::kerror::KafkaCode;

/// Where a broker listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddress {
    /// The broker's node id.
    pub id: BrokerId,
    /// Host name or IP.
    pub host: String,
    /// Port.
    pub port: i32,
    /// Rack, if the broker has one.
    pub rack: Option<String>,
}

impl BrokerAddress {
    /// `host:port`, ready to dial.
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// One partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// The partition index.
    pub partition: i32,
    /// The leader's node id; -1 while there is none.
    pub leader: BrokerId,
    /// The leader epoch.
    pub leader_epoch: i32,
    /// All replicas.
    pub replicas: Vec<BrokerId>,
    /// In-sync replicas.
    pub isr: Vec<BrokerId>,
    /// The partition's error, if any (e.g. `LEADER_NOT_AVAILABLE`).
    pub error: Option<KafkaCode>,
}

/// One topic.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicMetadata {
    /// The topic name.
    pub name: String,
    /// Whether this is an internal topic (`__consumer_offsets`, …).
    pub is_internal: bool,
    /// The topic id (Metadata v10+); 0 when the broker does not send one.
    pub topic_id: u128,
    /// The topic's error, if any (e.g. `UNKNOWN_TOPIC_OR_PARTITION`).
    pub error: Option<KafkaCode>,
    /// Partitions, sorted by index.
    pub partitions: Vec<PartitionMetadata>,
    /// When this entry was fetched.
    pub fetched_at: Instant,
}

impl TopicMetadata {
    /// The partition with index `partition`.
    pub fn partition(&self, partition: i32) -> Option<&PartitionMetadata> {
        self.partitions
            .binary_search_by_key(&partition, |p| p.partition)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }
}

/// A snapshot of the cluster's metadata. Cheap to share: the cache hands out
/// `Arc`s and replaces the whole snapshot on refresh.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterMetadata {
    /// The cluster id, if the broker reports one.
    pub cluster_id: Option<String>,
    /// The controller's node id (-1 if unknown).
    pub controller_id: BrokerId,
    /// Brokers by node id.
    pub brokers: HashMap<BrokerId, BrokerAddress>,
    /// Topics by name.
    pub topics: HashMap<String, TopicMetadata>,
    /// When the broker list was last fetched (`None`: never).
    pub fetched_at: Option<Instant>,
}

impl Default for ClusterMetadata {
    fn default() -> Self {
        Self {
            cluster_id: None,
            controller_id: -1,
            brokers: HashMap::new(),
            topics: HashMap::new(),
            fetched_at: None,
        }
    }
}

fn error_of(code: i16) -> Option<KafkaCode> {
    (code != 0).then(|| KafkaCode::from_code(code))
}

impl ClusterMetadata {
    /// The topic `name`, if known.
    pub fn topic(&self, name: &str) -> Option<&TopicMetadata> {
        self.topics.get(name)
    }

    /// Merges a Metadata response into a new snapshot. Brokers, controller and
    /// cluster id are replaced; topics in the response replace their entries;
    /// with `all_topics`, topics not in the response are dropped.
    pub fn merged(
        &self,
        response: &MetadataResponse,
        all_topics: bool,
        now: Instant,
    ) -> ClusterMetadata {
        let brokers = response
            .brokers
            .iter()
            .map(|b| {
                (
                    b.node_id.0,
                    BrokerAddress {
                        id: b.node_id.0,
                        host: b.host.to_string(),
                        port: b.port,
                        rack: b.rack.as_ref().map(|r| r.to_string()),
                    },
                )
            })
            .collect();
        let mut topics = if all_topics {
            HashMap::new()
        } else {
            self.topics.clone()
        };
        for t in &response.topics {
            let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
                continue;
            };
            let mut partitions: Vec<PartitionMetadata> = t
                .partitions
                .iter()
                .map(|p| PartitionMetadata {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|r| r.0).collect(),
                    isr: p.isr_nodes.iter().map(|r| r.0).collect(),
                    error: error_of(p.error_code),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            // KIP-320: a broker with stale metadata may answer with an older
            // leader epoch; never let it move a partition back to an old leader.
            // A topic deleted and created again starts its epochs afresh:
            // compare only within the same topic id.
            let topic_id = t.topic_id.as_u128();
            if let Some(old) = self
                .topics
                .get(&name)
                .filter(|old| old.topic_id == topic_id)
            {
                for p in &mut partitions {
                    if let Some(known) = old.partition(p.partition)
                        && p.leader_epoch >= 0
                        && known.leader_epoch > p.leader_epoch
                    {
                        *p = known.clone();
                    }
                }
            }
            topics.insert(
                name.clone(),
                TopicMetadata {
                    name,
                    is_internal: t.is_internal,
                    topic_id,
                    error: error_of(t.error_code),
                    partitions,
                    fetched_at: now,
                },
            );
        }
        ClusterMetadata {
            cluster_id: response.cluster_id.as_ref().map(|c| c.to_string()),
            controller_id: response.controller_id.0,
            brokers,
            topics,
            fetched_at: Some(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_protocol::kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use weir_protocol::kafka_protocol::messages::{BrokerId as WireId, TopicName};
    use weir_protocol::kafka_protocol::protocol::StrBytes;

    fn topic(name: &str, leaders: &[i32], error: i16) -> MetadataResponseTopic {
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(name.to_owned()))))
            .with_error_code(error)
            .with_partitions(
                leaders
                    .iter()
                    .enumerate()
                    .rev()
                    .map(|(i, l)| {
                        MetadataResponsePartition::default()
                            .with_partition_index(i as i32)
                            .with_leader_id(WireId(*l))
                    })
                    .collect(),
            )
    }

    #[tokio::test]
    async fn merge_replaces_named_topics_and_keeps_others_unless_full() {
        let now = Instant::now();
        let first = MetadataResponse::default()
            .with_brokers(vec![
                MetadataResponseBroker::default()
                    .with_node_id(WireId(1))
                    .with_host(StrBytes::from_static_str("h1"))
                    .with_port(9092),
            ])
            .with_topics(vec![topic("a", &[1, 1], 0), topic("b", &[1], 0)]);
        let m = ClusterMetadata::default().merged(&first, true, now);
        assert_eq!(m.brokers[&1].addr(), "h1:9092");
        assert_eq!(m.topic("a").unwrap().partition(1).unwrap().leader, 1);
        assert!(m.topic("a").unwrap().partition(2).is_none());

        let second = MetadataResponse::default().with_topics(vec![topic("a", &[-1, 2, 2], 5)]);
        let m2 = m.merged(&second, false, now);
        let a = m2.topic("a").unwrap();
        assert_eq!(a.partitions.len(), 3);
        assert_eq!(a.error.unwrap().name, "LEADER_NOT_AVAILABLE");
        assert!(
            m2.topic("b").is_some(),
            "partial refresh keeps other topics"
        );
        let m3 = m.merged(&second, true, now);
        assert!(m3.topic("b").is_none(), "full refresh drops missing topics");

        // An answer with an older leader epoch does not move the leader back.
        let newer = MetadataResponse::default().with_topics(vec![topic("c", &[2], 0)]);
        let mut with_epoch = newer.clone();
        with_epoch.topics[0].partitions[0].leader_epoch = 7;
        let m4 = m.merged(&with_epoch, false, now);
        let mut stale = newer;
        stale.topics[0].partitions[0].leader_id = WireId(9);
        stale.topics[0].partitions[0].leader_epoch = 6;
        let m5 = m4.merged(&stale, false, now);
        assert_eq!(m5.topic("c").unwrap().partition(0).unwrap().leader, 2);
        stale.topics[0].partitions[0].leader_epoch = 8;
        let m6 = m4.merged(&stale, false, now);
        assert_eq!(
            m6.topic("c").unwrap().partition(0).unwrap().leader,
            9,
            "a newer epoch wins"
        );
    }
}
