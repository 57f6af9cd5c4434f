//! Reading a group's committed offsets (OffsetFetch), once, for every
//! caller: the admin listing, the exactly-once start (`require_stable`),
//! and weir-group's members. Each caller wraps it in its own retry and
//! error policy.

use std::collections::BTreeMap;

use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use weir_protocol::kafka_protocol::messages::{GroupId, OffsetFetchRequest, TopicName};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use crate::cluster::{CoordinatorKind, Lane};
use crate::kerror::codes;
use crate::producer::TopicPartition;
use crate::{ClientError, Cluster, Result};

/// An offset a group committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The next offset the group will consume.
    pub offset: i64,
    /// The metadata committed with it.
    pub metadata: Option<String>,
}

/// Whether the coordinator may answer for partitions that have a
/// transactional commit pending (KIP-447, OffsetFetch v7+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stability {
    /// Answer with whatever is committed.
    Any,
    /// Ask for stable offsets when the broker can; an older broker answers
    /// as with [`Stability::Any`].
    IfSupported,
    /// Ask for stable offsets; a broker older than v7 is an error, since
    /// an exactly-once consumer must not start from an unstable offset.
    Required,
}

/// One OffsetFetch for `group`: the offsets of `partitions` (`None`: every
/// partition the group committed), sorted by topic and partition, without
/// those that have no committed offset. A moved or unreachable coordinator
/// is forgotten, so the caller's next attempt looks it up again.
///
/// # Errors
/// [`ClientError::Server`] naming the group or partition (for example
/// `UNSTABLE_OFFSET_COMMIT`, which is retriable, while a transaction holds
/// offsets), [`ClientError::MissingInResponse`] when the broker cannot honour
/// [`Stability::Required`] or leaves the group out of its answer, and
/// connection errors.
pub async fn fetch_committed_once(
    cluster: &Cluster,
    group: &str,
    partitions: Option<&[TopicPartition]>,
    stability: Stability,
    lane: Lane,
) -> Result<Vec<CommittedOffset>> {
    let coordinator = cluster
        .find_coordinator(CoordinatorKind::Group, group)
        .await?;
    let version = cluster
        .connection(coordinator, lane)
        .await?
        .version_for::<OffsetFetchRequest>()?;
    if stability == Stability::Required && version < 7 {
        return Err(ClientError::MissingInResponse {
            api: ApiKey::OffsetFetch,
            what: format!("require_stable (the broker speaks only v{version}; v7 is needed)"),
        });
    }
    let request = request(group, partitions, stability != Stability::Any, version);
    let response = cluster.request(coordinator, lane, &request).await;
    if response.as_ref().is_err_and(ClientError::is_network) {
        cluster.invalidate_coordinator(CoordinatorKind::Group, group);
    }
    let response = response?;
    let check = |code: i16, topic: &str, partition: Option<i32>| {
        if code == codes::NOT_COORDINATOR || code == codes::COORDINATOR_NOT_AVAILABLE {
            cluster.invalidate_coordinator(CoordinatorKind::Group, group);
        }
        ClientError::check(code, ApiKey::OffsetFetch, Some(topic), partition)
            .map_err(|e| e.with_broker(coordinator))
    };
    // The v8 and older answers have the same fields in different types.
    macro_rules! rows {
        ($topics:expr) => {
            $topics
                .iter()
                .flat_map(|t| {
                    t.partitions.iter().map(|p| {
                        (
                            &t.name.0,
                            p.partition_index,
                            p.committed_offset,
                            p.metadata.as_ref(),
                            p.error_code,
                        )
                    })
                })
                .collect()
        };
    }
    // v8 answers per group; before that, at the top level.
    let (group_code, topics): (i16, Vec<_>) = if version >= 8 {
        let g = response
            .groups
            .iter()
            .find(|g| g.group_id.0.as_str() == group)
            .ok_or_else(|| ClientError::MissingInResponse {
                api: ApiKey::OffsetFetch,
                what: group.to_owned(),
            })?;
        (g.error_code, rows!(g.topics))
    } else {
        (response.error_code, rows!(response.topics))
    };
    check(group_code, group, None)?;
    let mut out = Vec::with_capacity(topics.len());
    for (topic, partition, offset, metadata, code) in topics {
        check(code, topic, Some(partition))?;
        // -1: nothing committed for that partition.
        if offset >= 0 {
            out.push(CommittedOffset {
                topic: topic.to_string(),
                partition,
                offset,
                metadata: metadata.map(|m| m.to_string()),
            });
        }
    }
    out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    Ok(out)
}

/// The request at `version`: v8 batches groups; before that one group.
/// `topics: None` (v2+) asks for every partition.
fn request(
    group: &str,
    partitions: Option<&[TopicPartition]>,
    require_stable: bool,
    version: i16,
) -> OffsetFetchRequest {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions.unwrap_or_default() {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    let name = |t: &str| TopicName(StrBytes::from_string(t.to_owned()));
    let id = GroupId(StrBytes::from_string(group.to_owned()));
    let require_stable = require_stable && version >= 7;
    if version >= 8 {
        let topics = partitions.map(|_| {
            by_topic
                .iter()
                .map(|(t, p)| {
                    OffsetFetchRequestTopics::default()
                        .with_name(name(t))
                        .with_partition_indexes(p.clone())
                })
                .collect()
        });
        OffsetFetchRequest::default()
            .with_groups(vec![
                OffsetFetchRequestGroup::default()
                    .with_group_id(id)
                    .with_member_epoch(-1)
                    .with_topics(topics),
            ])
            .with_require_stable(require_stable)
    } else {
        let topics = partitions.map(|_| {
            by_topic
                .iter()
                .map(|(t, p)| {
                    OffsetFetchRequestTopic::default()
                        .with_name(name(t))
                        .with_partition_indexes(p.clone())
                })
                .collect()
        });
        OffsetFetchRequest::default()
            .with_group_id(id)
            .with_topics(topics)
            .with_require_stable(require_stable)
    }
}

/// `offsets` by partition.
pub fn by_partition(offsets: Vec<CommittedOffset>) -> BTreeMap<TopicPartition, i64> {
    offsets
        .into_iter()
        .map(|c| (TopicPartition::new(c.topic, c.partition), c.offset))
        .collect()
}
