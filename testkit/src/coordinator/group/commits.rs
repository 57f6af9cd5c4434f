//! OffsetCommit, TxnOffsetCommit and OffsetFetch against the group
//! (Kafka's `handleCommitOffsets`, `handleTxnCommitOffsets`,
//! `handleFetchOffsets`).

use tokio::time::Instant;
use tracing::debug;
use weir_protocol::kafka_protocol::ResponseError;

use super::GroupCoordinator;
use super::state::{Group, GroupState};

/// Who commits: the group metadata a consumer sends with its offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitMember {
    /// The generation (-1: not a group member, e.g. the admin client).
    pub generation: i32,
    /// The member id ("" if none).
    pub member_id: String,
    /// The static instance id.
    pub instance_id: Option<String>,
}

/// One offset to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetToCommit {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
    /// The leader epoch (-1: unknown).
    pub leader_epoch: i32,
    /// The client's metadata.
    pub metadata: Option<String>,
}

impl OffsetToCommit {
    /// One partition of an OffsetCommit or TxnOffsetCommit request.
    pub fn from_request(
        topic: &str,
        partition: i32,
        offset: i64,
        leader_epoch: i32,
        metadata: Option<&str>,
    ) -> Self {
        Self {
            topic: topic.to_owned(),
            partition,
            offset,
            leader_epoch,
            metadata: metadata.map(str::to_owned),
        }
    }
}

/// One partition of an OffsetFetch answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedOffset {
    /// Partition.
    pub partition: i32,
    /// The committed offset, or -1.
    pub offset: i64,
    /// The leader epoch, or -1.
    pub leader_epoch: i32,
    /// The metadata ("" when nothing is committed).
    pub metadata: String,
    /// `UNSTABLE_OFFSET_COMMIT` for a pending transactional offset when the
    /// fetch requires stable offsets, else 0.
    pub error_code: i16,
}

/// Kafka's `validateOffsetCommit`: who may commit to the group.
fn validate(group: &Group, who: &CommitMember, transactional: bool) -> Option<ResponseError> {
    if group.state == GroupState::Dead {
        return Some(ResponseError::CoordinatorNotAvailable);
    }
    if who.generation >= 0 || !who.member_id.is_empty() || who.instance_id.is_some() {
        return group
            .validate_member(who.instance_id.as_deref(), &who.member_id)
            .or((who.generation != group.generation).then_some(ResponseError::IllegalGeneration));
    }
    // Without group metadata only an empty group accepts commits; older
    // TxnOffsetCommit versions carry no metadata, so they are let through.
    if !transactional && group.state != GroupState::Empty {
        return Some(ResponseError::UnknownMemberId);
    }
    None
}

impl GroupCoordinator {
    /// Handles an OffsetCommit. Returns one error code per offset, in order.
    /// `exists` says whether a topic partition exists.
    pub fn commit_offsets(
        &mut self,
        group_id: &str,
        who: &CommitMember,
        offsets: &[OffsetToCommit],
        exists: &dyn Fn(&str, i32) -> bool,
        now: Instant,
    ) -> Vec<i16> {
        let all = |e: ResponseError| vec![e.code(); offsets.len()];
        if group_id.is_empty() {
            return all(ResponseError::InvalidGroupId);
        }
        if !self.groups.contains_key(group_id) {
            if who.generation >= 0 {
                // A member of a generation of a group that is gone.
                return all(ResponseError::IllegalGeneration);
            }
            // A group that does not use the coordinator for membership.
            self.groups
                .insert(group_id.to_owned(), Group::new(group_id));
        }
        let max_metadata = self.config.offset_metadata_max_bytes;
        self.with_group(group_id, |c, group| {
            if let Some(e) = validate(group, who, false) {
                return all(e);
            }
            if group.state == GroupState::CompletingRebalance {
                // The member has the new generation from its JoinGroup but
                // not its assignment yet: it must sync before committing.
                return all(ResponseError::RebalanceInProgress);
            }
            if let Some(m) = group.members.get_mut(&who.member_id) {
                m.last_heartbeat = now;
                let at = now + m.session_timeout;
                c.wake(at, &group.id);
            }
            offsets
                .iter()
                .map(|o| {
                    if !exists(&o.topic, o.partition) {
                        ResponseError::UnknownTopicOrPartition.code()
                    } else if o.metadata.as_ref().is_some_and(|m| m.len() > max_metadata) {
                        ResponseError::OffsetMetadataTooLarge.code()
                    } else {
                        group.offsets.commit(
                            (o.topic.clone(), o.partition),
                            o.offset,
                            o.leader_epoch,
                            o.metadata.clone(),
                        );
                        0
                    }
                })
                .collect()
        })
        .unwrap_or_else(|| all(ResponseError::CoordinatorNotAvailable))
    }

    /// Handles a TxnOffsetCommit (KIP-447): the offsets are staged in the
    /// producer's transaction, invisible until [`complete_txn`](Self::complete_txn)
    /// commits them. The group metadata is checked like a member's commit, so
    /// a zombie of an older generation gets `ILLEGAL_GENERATION`,
    /// `UNKNOWN_MEMBER_ID` or `FENCED_INSTANCE_ID`.
    pub fn txn_commit_offsets(
        &mut self,
        group_id: &str,
        producer_id: i64,
        who: &CommitMember,
        offsets: &[OffsetToCommit],
        exists: &dyn Fn(&str, i32) -> bool,
    ) -> Vec<i16> {
        let all = |e: ResponseError| vec![e.code(); offsets.len()];
        if group_id.is_empty() {
            return all(ResponseError::InvalidGroupId);
        }
        if !self.groups.contains_key(group_id) {
            self.groups
                .insert(group_id.to_owned(), Group::new(group_id));
        }
        let max_metadata = self.config.offset_metadata_max_bytes;
        self.with_group(group_id, |_, group| {
            if let Some(e) = validate(group, who, true) {
                debug!(group = %group.id, producer_id, error = ?e, "transactional offset commit rejected");
                return all(e);
            }
            offsets
                .iter()
                .map(|o| {
                    if !exists(&o.topic, o.partition) {
                        ResponseError::UnknownTopicOrPartition.code()
                    } else if o.metadata.as_ref().is_some_and(|m| m.len() > max_metadata) {
                        ResponseError::OffsetMetadataTooLarge.code()
                    } else {
                        group.offsets.stage(producer_id, (o.topic.clone(), o.partition), o.offset, o.leader_epoch, o.metadata.clone());
                        0
                    }
                })
                .collect()
        })
        .unwrap_or_else(|| all(ResponseError::CoordinatorNotAvailable))
    }

    /// The transaction marker for a group: commits or drops the offsets
    /// `producer_id` staged in it.
    pub fn complete_txn(&mut self, group_id: &str, producer_id: i64, commit: bool) {
        if let Some(group) = self.groups.get_mut(group_id) {
            let applied = group.offsets.complete(producer_id, commit);
            debug!(
                group = group_id,
                producer_id, commit, applied, "transactional offsets completed"
            );
        }
    }

    /// Handles OffsetFetch for one group: `topics` None means every committed
    /// partition. With `require_stable`, a partition with a pending
    /// transactional offset gets `UNSTABLE_OFFSET_COMMIT` (KIP-447), so the
    /// consumer retries instead of starting from a stale offset.
    ///
    /// # Errors
    /// A group-level error code.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<Vec<(String, Vec<i32>)>>,
        require_stable: bool,
    ) -> Result<Vec<(String, Vec<FetchedOffset>)>, i16> {
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId.code());
        }
        let group = self.groups.get(group_id);
        if group.is_some_and(|g| g.state == GroupState::Dead) {
            return Err(ResponseError::CoordinatorNotAvailable.code());
        }
        let topics = match topics {
            Some(t) => t,
            None => {
                let mut by_topic: Vec<(String, Vec<i32>)> = Vec::new();
                for ((t, p), _) in group.into_iter().flat_map(|g| g.offsets.all()) {
                    match by_topic.last_mut() {
                        Some((last, parts)) if last == t => parts.push(*p),
                        _ => by_topic.push((t.clone(), vec![*p])),
                    }
                }
                by_topic
            }
        };
        Ok(topics
            .into_iter()
            .map(|(topic, partitions)| {
                let fetched = partitions
                    .into_iter()
                    .map(|partition| {
                        let tp = (topic.clone(), partition);
                        let unstable =
                            require_stable && group.is_some_and(|g| g.offsets.has_pending(&tp));
                        match group.and_then(|g| g.offsets.get(&tp)) {
                            Some(c) if !unstable => FetchedOffset {
                                partition,
                                offset: c.offset,
                                leader_epoch: c.leader_epoch,
                                metadata: c.metadata.clone().unwrap_or_default(),
                                error_code: 0,
                            },
                            _ => FetchedOffset {
                                partition,
                                offset: -1,
                                leader_epoch: -1,
                                metadata: String::new(),
                                error_code: if unstable {
                                    ResponseError::UnstableOffsetCommit.code()
                                } else {
                                    0
                                },
                            },
                        }
                    })
                    .collect();
                (topic, fetched)
            })
            .collect())
    }
}
