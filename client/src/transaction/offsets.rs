//! The consumer-group side of a transaction: the group metadata that makes
//! a zombie's offsets bounce (KIP-447), and reading committed offsets with
//! `require_stable` so that a new owner never starts from an offset whose
//! transaction is still open.

use std::collections::BTreeMap;

use crate::cluster::Lane;
use crate::group_offsets::{Stability, by_partition, fetch_committed_once};
use crate::producer::TopicPartition;
use crate::{Cluster, Result};

/// A consumer's group membership as of its last successful SyncGroup.
///
/// weir-group's member produces it (`weir_group::member::GroupMetadata`
/// converts into this with `From`); it is defined here because the client
/// cannot depend on weir-group. The group coordinator checks every field:
/// a member whose generation or member id is stale (it was partitioned
/// past the session timeout, and its partitions now belong to someone
/// else) gets `ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID` or
/// `FENCED_INSTANCE_ID`, and its transaction must be aborted.
///
/// Generation -1 with an empty member id is the one combination the
/// coordinator never checks (KIP-447's compatibility path). A member that
/// lost its generation must never send it, so
/// [`send_offsets_to_transaction`](super::TransactionalProducer::send_offsets_to_transaction)
/// refuses a negative generation unless the metadata was built with
/// [`unchecked`](Self::unchecked), which says "no group membership" on
/// purpose.
///
/// ```
/// use weir_client::transaction::GroupMetadata;
///
/// let member = GroupMetadata::new("orders-app", 7, "member-1", None);
/// assert!(!member.is_unchecked());
/// assert!(GroupMetadata::unchecked("orders-app").is_unchecked());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupMetadata {
    /// The group.
    pub group_id: String,
    /// The generation the member joined.
    pub generation_id: i32,
    /// The member id the coordinator assigned.
    pub member_id: String,
    /// The static membership id (`group.instance.id`), if any.
    pub group_instance_id: Option<String>,
    /// Built by [`unchecked`](Self::unchecked): no membership to check.
    unchecked: bool,
}

impl GroupMetadata {
    /// A group member's metadata: its generation, member id and instance
    /// id, as its last JoinGroup/SyncGroup gave them.
    pub fn new(
        group_id: impl Into<String>,
        generation_id: i32,
        member_id: impl Into<String>,
        group_instance_id: Option<String>,
    ) -> Self {
        GroupMetadata {
            group_id: group_id.into(),
            generation_id,
            member_id: member_id.into(),
            group_instance_id,
            unchecked: false,
        }
    }

    /// Metadata for a consumer outside any generation: the coordinator then
    /// checks only the producer epoch (Kafka's pre-KIP-447 behaviour). Only
    /// for consumers that assign partitions themselves; a group member
    /// must pass its own metadata.
    pub fn unchecked(group_id: impl Into<String>) -> Self {
        GroupMetadata {
            group_id: group_id.into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
            unchecked: true,
        }
    }

    /// Whether this was built by [`unchecked`](Self::unchecked).
    pub fn is_unchecked(&self) -> bool {
        self.unchecked
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
            fetch_committed_once(
                cluster,
                group,
                Some(partitions),
                Stability::Required,
                Lane::Coordinator,
            )
            .await
        })
        .await
        .map(by_partition)
}
