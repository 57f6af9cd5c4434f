//! Committing and fetching a group's offsets with the group metadata
//! (generation, member id, instance id), so the coordinator can reject a
//! zombie's commit. The exactly-once path builds its TxnOffsetCommit from
//! the same [`GroupMetadata`].

use std::collections::BTreeMap;

use weir_client::cluster::{CoordinatorKind, Lane};
use weir_client::group_offsets::{Stability, fetch_committed_once};
use weir_client::kerror::{KafkaCode, codes};
use weir_client::producer::TopicPartition as ClientPartition;
use weir_client::{ClientError, Cluster};
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use weir_protocol::kafka_protocol::messages::{GroupId, OffsetCommitRequest, TopicName};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use crate::assignor::TopicPartition;
use crate::member::GroupMetadata;
use crate::member::{client_error, s};
use crate::{GroupError, Result};

/// Codes that say the member's view of the group is out of date: final for
/// this commit, and the member must react (rejoin, or stop).
pub(crate) fn is_membership_code(code: i16) -> bool {
    matches!(
        code,
        codes::UNKNOWN_MEMBER_ID
            | codes::ILLEGAL_GENERATION
            | codes::REBALANCE_IN_PROGRESS
            | codes::FENCED_INSTANCE_ID
    )
}

fn group_error(api: &'static str, group: &str, code: i16) -> GroupError {
    GroupError::Coordinator {
        api,
        group: group.to_owned(),
        code,
        name: KafkaCode::from_code(code).name,
    }
}

fn by_topic(
    partitions: impl Iterator<Item = (TopicPartition, i64)>,
) -> BTreeMap<String, Vec<(i32, i64)>> {
    let mut out: BTreeMap<String, Vec<(i32, i64)>> = BTreeMap::new();
    for (tp, offset) in partitions {
        out.entry(tp.topic)
            .or_default()
            .push((tp.partition, offset));
    }
    out
}

/// Commits `offsets` (the next offset to consume, per partition) for the
/// group in `metadata`, as that member and generation. Retries a moved or
/// loading coordinator within `default.api.timeout.ms`.
///
/// # Errors
/// [`GroupError::Coordinator`] for `UNKNOWN_MEMBER_ID`,
/// `ILLEGAL_GENERATION`, `REBALANCE_IN_PROGRESS`, `FENCED_INSTANCE_ID` and
/// other non-retriable codes; [`GroupError::Client`] otherwise.
pub async fn commit(
    cluster: &Cluster,
    metadata: &GroupMetadata,
    offsets: &[(TopicPartition, i64)],
) -> Result<()> {
    commit_on(cluster, metadata, offsets, Lane::Coordinator).await
}

/// [`commit`] on the connection `lane`: a caller that commits while this
/// process's member may have a JoinGroup parked at the coordinator (on
/// [`Lane::Coordinator`], for a whole join phase) passes another lane, so
/// the commit is not queued behind it.
///
/// # Errors
/// As [`commit`].
pub async fn commit_on(
    cluster: &Cluster,
    metadata: &GroupMetadata,
    offsets: &[(TopicPartition, i64)],
    lane: Lane,
) -> Result<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let group = metadata.group_id.as_str();
    let attempt = || async {
        let coordinator = cluster
            .find_coordinator(CoordinatorKind::Group, group)
            .await?;
        let version = cluster
            .connection(coordinator, lane)
            .await?
            .version_for::<OffsetCommitRequest>()?;
        let topics = by_topic(offsets.iter().cloned())
            .into_iter()
            .map(|(topic, partitions)| {
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic)))
                    .with_partitions(
                        partitions
                            .into_iter()
                            .map(|(p, o)| {
                                OffsetCommitRequestPartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(o)
                                    .with_committed_leader_epoch(-1)
                            })
                            .collect(),
                    )
            })
            .collect();
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(metadata.generation)
            .with_member_id(s(&metadata.member_id))
            .with_group_instance_id(if version >= 7 {
                metadata.instance_id.as_deref().map(s)
            } else {
                None
            })
            .with_retention_time_ms(-1)
            .with_topics(topics);
        let response = cluster.request(coordinator, lane, &request).await;
        if response.as_ref().is_err_and(ClientError::is_network) {
            cluster.invalidate_coordinator(CoordinatorKind::Group, group);
        }
        let response = response?;
        for t in &response.topics {
            for p in &t.partitions {
                let code = p.error_code;
                if code == codes::NONE {
                    continue;
                }
                if code == codes::NOT_COORDINATOR || code == codes::COORDINATOR_NOT_AVAILABLE {
                    cluster.invalidate_coordinator(CoordinatorKind::Group, group);
                }
                if is_membership_code(code) {
                    return Ok(Err(group_error("OffsetCommit", group, code)));
                }
                ClientError::check(
                    code,
                    ApiKey::OffsetCommit,
                    Some(&t.name.0),
                    Some(p.partition_index),
                )
                .map_err(|e| e.with_broker(coordinator))?;
            }
        }
        Ok(Ok(()))
    };
    let outcome = cluster
        .retry(&format!("OffsetCommit for group {group}"), attempt)
        .await
        .map_err(|e| client_error(format!("OffsetCommit for group {group}"), &e))?;
    if outcome.is_ok() {
        tracing::debug!(
            group,
            generation = metadata.generation,
            partitions = offsets.len(),
            "offsets committed"
        );
    }
    outcome
}

/// The committed offsets of `partitions` in `group`; partitions with none
/// are absent. With `require_stable` (KIP-447, OffsetFetch v7+) the
/// coordinator refuses to answer for partitions with a pending
/// transactional commit, and this waits (retrying) until it is resolved.
///
/// # Errors
/// [`GroupError::Coordinator`] for a non-retriable group code,
/// [`GroupError::Client`] otherwise.
pub async fn fetch_committed(
    cluster: &Cluster,
    group: &str,
    partitions: &[TopicPartition],
    require_stable: bool,
) -> Result<BTreeMap<TopicPartition, i64>> {
    if partitions.is_empty() {
        return Ok(BTreeMap::new());
    }
    let client_partitions: Vec<ClientPartition> = partitions
        .iter()
        .map(|tp| ClientPartition::new(tp.topic.clone(), tp.partition))
        .collect();
    let stability = if require_stable {
        Stability::IfSupported
    } else {
        Stability::Any
    };
    let attempt = || {
        fetch_committed_once(
            cluster,
            group,
            Some(&client_partitions),
            stability,
            Lane::Coordinator,
        )
    };
    cluster
        .retry(&format!("OffsetFetch for group {group}"), attempt)
        .await
        .map(|offsets| {
            offsets
                .into_iter()
                .map(|c| (TopicPartition::new(c.topic, c.partition), c.offset))
                .collect()
        })
        .map_err(|e| match e.kafka_code() {
            Some(code) if !code.retriable => group_error("OffsetFetch", group, code.code),
            _ => client_error(format!("OffsetFetch for group {group}"), &e),
        })
}
