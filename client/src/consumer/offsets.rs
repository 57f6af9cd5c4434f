//! Looking up offsets by time (ListOffsets): earliest, latest, or the first
//! offset at or after a timestamp.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use weir_protocol::kafka_protocol::messages::{ListOffsetsRequest, TopicName};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use crate::cluster::{BrokerId, Cluster, Lane};
use crate::config::consumer::IsolationLevel;
use crate::producer::TopicPartition;
use crate::{ClientError, Result};

/// ListOffsets' special timestamp for the log start offset.
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// ListOffsets' special timestamp for the end of the log.
pub const LATEST_TIMESTAMP: i64 = -1;

/// Where to move a consumer's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTo {
    /// This exact offset.
    Offset(i64),
    /// The log start offset.
    Earliest,
    /// The end of the log (the last stable offset under read_committed).
    Latest,
    /// The first offset whose timestamp is at or after this many
    /// milliseconds since the epoch; the end of the log if there is none.
    Timestamp(i64),
}

impl SeekTo {
    /// The ListOffsets timestamp for this target, or `None` for an exact offset.
    pub fn lookup_timestamp(self) -> Option<i64> {
        match self {
            SeekTo::Offset(_) => None,
            SeekTo::Earliest => Some(EARLIEST_TIMESTAMP),
            SeekTo::Latest => Some(LATEST_TIMESTAMP),
            SeekTo::Timestamp(t) => Some(t),
        }
    }
}

/// Looks up one offset per partition. A partition with no offset at or
/// after its timestamp maps to -1. Each partition's leader is asked once;
/// retriable errors are retried within `default.api.timeout.ms`.
///
/// # Errors
/// A non-retriable [`ClientError::Server`] naming the partition, or
/// [`ClientError::RetriesExhausted`].
pub async fn list_offsets(
    cluster: &Cluster,
    isolation: IsolationLevel,
    lookups: &[(TopicPartition, i64)],
) -> Result<HashMap<TopicPartition, i64>> {
    // Answers kept across retries, so only what failed is asked again.
    let found: Mutex<HashMap<TopicPartition, i64>> = Mutex::new(HashMap::new());
    let lock = || found.lock().unwrap_or_else(|e| e.into_inner());
    cluster
        .retry("ListOffsets", || async {
            let mut by_leader: BTreeMap<BrokerId, Vec<&(TopicPartition, i64)>> = BTreeMap::new();
            for lookup in lookups {
                if lock().contains_key(&lookup.0) {
                    continue;
                }
                let leader = cluster
                    .partition_leader(&lookup.0.topic, lookup.0.partition)
                    .await?;
                by_leader.entry(leader).or_default().push(lookup);
            }
            for (broker, group) in by_leader {
                let answers = list_from(cluster, broker, isolation, &group).await?;
                lock().extend(answers);
            }
            Ok(())
        })
        .await?;
    Ok(found.into_inner().unwrap_or_else(|e| e.into_inner()))
}

async fn list_from(
    cluster: &Cluster,
    broker: BrokerId,
    isolation: IsolationLevel,
    group: &[&(TopicPartition, i64)],
) -> Result<Vec<(TopicPartition, i64)>> {
    let mut topics: Vec<ListOffsetsTopic> = Vec::new();
    for (tp, timestamp) in group {
        let partition = ListOffsetsPartition::default()
            .with_partition_index(tp.partition)
            .with_timestamp(*timestamp)
            .with_current_leader_epoch(-1);
        match topics.iter_mut().find(|t| t.name.0.as_str() == tp.topic) {
            Some(t) => t.partitions.push(partition),
            None => topics.push(
                ListOffsetsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(tp.topic.clone())))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(isolation.wire_value())
        .with_topics(topics);
    let response = cluster.request(broker, Lane::Fetch, &request).await?;
    let mut out = Vec::new();
    for (tp, _) in group {
        let p = response
            .topics
            .iter()
            .filter(|t| t.name.0.as_str() == tp.topic)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == tp.partition)
            .ok_or_else(|| ClientError::MissingInResponse {
                api: ApiKey::ListOffsets,
                what: tp.to_string(),
            })?;
        ClientError::check(
            p.error_code,
            ApiKey::ListOffsets,
            Some(&tp.topic),
            Some(tp.partition),
        )
        .map_err(|e| e.with_broker(broker))?;
        out.push((tp.clone(), p.offset));
    }
    Ok(out)
}
