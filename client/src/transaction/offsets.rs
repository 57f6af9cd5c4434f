//! The consumer-group side of a transaction: the group metadata that makes
//! a zombie's offsets bounce (KIP-447), and reading committed offsets with
//! `require_stable` so that a new owner never starts from an offset whose
//! transaction is still open.

use std::collections::BTreeMap;

use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use weir_protocol::kafka_protocol::messages::{GroupId, OffsetFetchRequest, TopicName};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::errors::coordinator_moved;
use crate::cluster::{CoordinatorKind, Lane};
use crate::producer::TopicPartition;
use crate::{ClientError, Cluster, Result};

/// A consumer's group membership as of its last successful SyncGroup.
///
/// weir-group's member produces it; it is defined here because the client
/// cannot depend on weir-group. The transaction coordinator checks every
/// field: a member whose generation or member id is stale (it was
/// partitioned past the session timeout, and its partitions now belong to
/// someone else) gets `ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID` or
/// `FENCED_INSTANCE_ID`, and its transaction must be aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// The group.
    pub group_id: String,
    /// The generation the member joined.
    pub generation_id: i32,
    /// The member id the coordinator assigned.
    pub member_id: String,
    /// The static membership id (`group.instance.id`), if any.
    pub group_instance_id: Option<String>,
}

impl GroupMetadata {
    /// Metadata for a consumer outside any generation: the coordinator then
    /// checks only the producer epoch (Kafka's pre-KIP-447 behaviour).
    pub fn unchecked(group_id: impl Into<String>) -> Self {
        GroupMetadata {
            group_id: group_id.into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}

/// Reads `group`'s committed offsets for `partitions`, asking the
/// coordinator for stable offsets only (`require_stable`, OffsetFetch v7+).
/// While a transaction holding offsets for one of them is open, the
/// coordinator answers `UNSTABLE_OFFSET_COMMIT`; this retries until the
/// transaction ends (committed or aborted), so the caller starts exactly
/// where the last committed transaction left off.
///
/// Partitions without a committed offset are absent from the result.
///
/// # Errors
/// [`ClientError::RetriesExhausted`] when the offsets stay unstable (or
/// the coordinator unreachable) for `default.api.timeout.ms`; any other
/// error of the group coordinator.
pub async fn fetch_stable_offsets(
    cluster: &Cluster,
    group: &str,
    partitions: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, i64>> {
    cluster
        .retry("OffsetFetch(require_stable)", || async {
            let result = fetch_once(cluster, group, partitions).await;
            if result.as_ref().is_err_and(coordinator_moved) {
                cluster.invalidate_coordinator(CoordinatorKind::Group, group);
            }
            result
        })
        .await
}

async fn fetch_once(
    cluster: &Cluster,
    group: &str,
    partitions: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, i64>> {
    let coordinator = cluster
        .find_coordinator(CoordinatorKind::Group, group)
        .await?;
    let version = cluster
        .connection(coordinator, Lane::Coordinator)
        .await?
        .version_for::<OffsetFetchRequest>()?;
    if version < 7 {
        return Err(ClientError::MissingInResponse {
            api: ApiKey::OffsetFetch,
            what: format!("require_stable (the broker speaks only v{version}; v7 is needed)"),
        });
    }
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    let id = GroupId(StrBytes::from_string(group.to_owned()));
    let name = |t: &str| TopicName(StrBytes::from_string(t.to_owned()));
    let request = if version >= 8 {
        let topics = by_topic
            .iter()
            .map(|(t, p)| {
                OffsetFetchRequestTopics::default()
                    .with_name(name(t))
                    .with_partition_indexes(p.clone())
            })
            .collect();
        OffsetFetchRequest::default()
            .with_groups(vec![
                OffsetFetchRequestGroup::default()
                    .with_group_id(id)
                    .with_topics(Some(topics)),
            ])
            .with_require_stable(true)
    } else {
        let topics = by_topic
            .iter()
            .map(|(t, p)| {
                OffsetFetchRequestTopic::default()
                    .with_name(name(t))
                    .with_partition_indexes(p.clone())
            })
            .collect();
        OffsetFetchRequest::default()
            .with_group_id(id)
            .with_topics(Some(topics))
            .with_require_stable(true)
    };
    let response = cluster
        .request(coordinator, Lane::Coordinator, &request)
        .await?;
    let mut out = BTreeMap::new();
    let mut add = |topic: &str, partition: i32, offset: i64, code: i16| {
        ClientError::check(code, ApiKey::OffsetFetch, Some(topic), Some(partition))?;
        if offset >= 0 {
            out.insert(TopicPartition::new(topic.to_owned(), partition), offset);
        }
        Ok::<_, ClientError>(())
    };
    if version >= 8 {
        let g = response
            .groups
            .iter()
            .find(|g| g.group_id.0.as_str() == group)
            .ok_or_else(|| ClientError::MissingInResponse {
                api: ApiKey::OffsetFetch,
                what: group.to_owned(),
            })?;
        ClientError::check(g.error_code, ApiKey::OffsetFetch, Some(group), None)?;
        for t in &g.topics {
            for p in &t.partitions {
                add(
                    &t.name.0,
                    p.partition_index,
                    p.committed_offset,
                    p.error_code,
                )?;
            }
        }
    } else {
        ClientError::check(response.error_code, ApiKey::OffsetFetch, Some(group), None)?;
        for t in &response.topics {
            for p in &t.partitions {
                add(
                    &t.name.0,
                    p.partition_index,
                    p.committed_offset,
                    p.error_code,
                )?;
            }
        }
    }
    Ok(out)
}
