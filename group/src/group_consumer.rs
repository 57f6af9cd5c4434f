//! A consumer in a group: a [`GroupMember`] driving weir-client's
//! [`Consumer`].
//!
//! - `Assigned`: fetch the committed offsets (OffsetFetch with
//!   `require_stable`), assign, seek;
//! - `Revoked`: commit the positions of the revoked partitions, then ack;
//! - `Lost`: stop delivering those partitions at once, commit nothing.

use std::collections::{BTreeMap, BTreeSet};

use weir_client::config::consumer::ConsumerConfig;
use weir_client::consumer::{Consumer, ConsumerRecord, SeekTo};
use weir_client::{Cluster, producer};

use crate::assignor::TopicPartition;
use crate::member::client_error;
use crate::member::{AssignmentEvent, GroupMember, MemberConfig, ShutdownMode};
use crate::{GroupError, Result};

fn to_client(tp: &TopicPartition) -> producer::TopicPartition {
    producer::TopicPartition::new(tp.topic.clone(), tp.partition)
}

/// What happened to a set of partitions, for a [`RebalanceListener`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignmentChange {
    /// Assigned; called before any record of them is delivered.
    Assigned,
    /// Revoked; called after their offsets were committed, before the ack.
    Revoked,
    /// Lost; called after delivery of them stopped.
    Lost,
}

/// Called on every assignment change (Java's `ConsumerRebalanceListener`).
pub type RebalanceListener = Box<dyn FnMut(AssignmentChange, &[TopicPartition]) + Send>;

/// A group consumer.
///
/// ```no_run
/// # async fn demo() -> weir_group::Result<()> {
/// use weir_client::config::consumer::ConsumerConfig;
/// use weir_group::group_consumer::GroupConsumer;
/// use weir_group::member::{MemberConfig, ShutdownMode};
///
/// let config = ConsumerConfig::from_properties(&[("bootstrap.servers", "127.0.0.1:9092")]).unwrap();
/// let mut consumer = GroupConsumer::connect(config, MemberConfig::new("g", ["orders"])).await?;
/// for record in consumer.poll().await? {
///     println!("{}-{}@{}", record.topic, record.partition, record.offset);
/// }
/// consumer.commit().await?;
/// consumer.close(ShutdownMode::Planned).await?;
/// # Ok(())
/// # }
/// ```
pub struct GroupConsumer {
    member: GroupMember,
    consumer: Consumer,
    /// The next offset to commit, per owned partition, once something was
    /// consumed from it.
    positions: BTreeMap<TopicPartition, i64>,
    /// Assigned partitions whose committed offsets could not be fetched
    /// yet: owned, but not consumed until a later poll fetches them.
    starting: BTreeSet<TopicPartition>,
    listener: Option<RebalanceListener>,
}

impl std::fmt::Debug for GroupConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupConsumer")
            .field("member", &self.member)
            .field("positions", &self.positions)
            .finish_non_exhaustive()
    }
}

impl GroupConsumer {
    /// Connects and starts joining the group.
    ///
    /// # Errors
    /// [`GroupError::Client`] if the cluster cannot be reached, or an
    /// invalid member configuration.
    pub async fn connect(config: ConsumerConfig, member: MemberConfig) -> Result<Self> {
        let cluster = Cluster::connect(config.client)
            .await
            .map_err(|e| client_error("connecting", &e))?;
        let consumer = Consumer::with_cluster(cluster.clone(), config.consumer);
        let member = GroupMember::start(cluster, member)?;
        Ok(Self {
            member,
            consumer,
            positions: BTreeMap::new(),
            starting: BTreeSet::new(),
            listener: None,
        })
    }

    /// Sets the listener told about every assignment change.
    pub fn set_listener(&mut self, listener: RebalanceListener) {
        self.listener = Some(listener);
    }

    fn notify(&mut self, change: AssignmentChange, partitions: &[TopicPartition]) {
        if let Some(listener) = &mut self.listener {
            listener(change, partitions);
        }
    }

    /// The group member.
    pub fn member(&self) -> &GroupMember {
        &self.member
    }

    /// Waits for records of owned partitions, handling assignment events
    /// on the way.
    ///
    /// Not cancel-safe: a revocation being handled when the future is
    /// dropped is acknowledged without its commit. Poll from one task, not
    /// inside a `select!` that may drop it.
    ///
    /// # Errors
    /// A fatal membership error, a failed commit on revocation, or the
    /// consumer's errors.
    pub async fn poll(&mut self) -> Result<Vec<ConsumerRecord>> {
        loop {
            self.member.record_poll();
            // Partitions whose offsets a previous poll failed to fetch
            // (UNSTABLE_OFFSET_COMMIT past default.api.timeout) are tried
            // again on every poll until they start.
            self.start_assigned().await?;
            let lease = self.member.lease();
            // Without a valid lease, nothing is delivered: the member may be
            // about to lose its partitions (or is between generations).
            let may_fetch = lease.is_valid() && !self.consumer.assignment().is_empty();
            tokio::select! {
                biased;
                event = self.member.next_event() => self.handle(event?).await?,
                records = self.consumer.poll(), if may_fetch => {
                    let records = records.map_err(|e| match e {
                        weir_client::ClientError::NoOffsetForPartition { topic, partition } => {
                            GroupError::NoOffsetForPartition {
                                group: self.member.group_id().to_owned(),
                                topic,
                                partition,
                            }
                        }
                        e => client_error("fetching", &e),
                    })?;
                    if !lease.is_valid() {
                        // Lost while fetching: put the positions back so a
                        // later owner of the same generation sees them again.
                        self.rewind(&records);
                        continue;
                    }
                    for r in &records {
                        self.positions.insert(TopicPartition::new(r.topic.clone(), r.partition), r.offset + 1);
                    }
                    return Ok(records);
                }
            }
        }
    }

    fn rewind(&mut self, records: &[ConsumerRecord]) {
        let mut first: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        for r in records {
            first
                .entry(TopicPartition::new(r.topic.clone(), r.partition))
                .or_insert(r.offset);
        }
        for (tp, offset) in first {
            let _ = self.consumer.seek(&to_client(&tp), SeekTo::Offset(offset));
        }
    }

    async fn handle(&mut self, event: AssignmentEvent) -> Result<()> {
        match event {
            AssignmentEvent::Assigned {
                partitions: added, ..
            } => {
                // Recorded before the fetch: if it fails, the event is
                // consumed but the partitions are not forgotten.
                self.starting.extend(added);
                self.start_assigned().await?;
            }
            AssignmentEvent::Revoked(revocation) => {
                let offsets: Vec<(TopicPartition, i64)> = revocation
                    .partitions
                    .iter()
                    .filter_map(|tp| self.positions.get(tp).map(|o| (tp.clone(), *o)))
                    .collect();
                let committed = self.member.commit(&offsets).await;
                self.drop_partitions(&revocation.partitions);
                self.notify(AssignmentChange::Revoked, &revocation.partitions);
                revocation.ack();
                committed?;
            }
            AssignmentEvent::Lost(lost) => {
                self.drop_partitions(&lost);
                self.notify(AssignmentChange::Lost, &lost);
                tracing::warn!(
                    partitions = lost.len(),
                    "lost partitions; nothing committed"
                );
            }
        }
        Ok(())
    }

    /// Fetches the committed offsets of the partitions assigned but not
    /// started, then consumes them from there.
    async fn start_assigned(&mut self) -> Result<()> {
        if self.starting.is_empty() {
            return Ok(());
        }
        let added: Vec<TopicPartition> = self.starting.iter().cloned().collect();
        let committed = crate::offsets::fetch_committed(
            self.consumer.cluster(),
            self.member.group_id(),
            &added,
            true,
        )
        .await
        .inspect_err(|e| {
            tracing::warn!(group = %self.member.group_id(), partitions = added.len(), error = %e, "committed offsets not fetched; trying again on the next poll");
        })?;
        self.starting.clear();
        let mut all = self.consumer.assignment();
        all.extend(added.iter().map(to_client));
        self.consumer.assign(all);
        for tp in &added {
            if let Some(offset) = committed.get(tp) {
                self.consumer
                    .seek(&to_client(tp), SeekTo::Offset(*offset))
                    .map_err(|e| client_error("seeking", &e))?;
            }
        }
        self.notify(AssignmentChange::Assigned, &added);
        tracing::info!(partitions = added.len(), "assigned");
        Ok(())
    }

    fn drop_partitions(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.positions.remove(tp);
            self.starting.remove(tp);
        }
        let gone: Vec<producer::TopicPartition> = partitions.iter().map(to_client).collect();
        let keep: Vec<producer::TopicPartition> = self
            .consumer
            .assignment()
            .into_iter()
            .filter(|tp| !gone.contains(tp))
            .collect();
        self.consumer.assign(keep);
    }

    /// Moves the position of an assigned partition, as
    /// [`Consumer::seek`]: for example after
    /// [`GroupError::NoOffsetForPartition`] under `auto.offset.reset=none`.
    ///
    /// # Errors
    /// [`GroupError::Client`] if the partition is not assigned.
    pub fn seek(&mut self, tp: &TopicPartition, to: SeekTo) -> Result<()> {
        self.consumer
            .seek(&to_client(tp), to)
            .map_err(|e| client_error("seeking", &e))?;
        match to {
            SeekTo::Offset(offset) => {
                self.positions.insert(tp.clone(), offset);
            }
            _ => {
                self.positions.remove(tp);
            }
        }
        Ok(())
    }

    /// Commits the position of every owned partition something was
    /// consumed from.
    ///
    /// # Errors
    /// As [`GroupMember::commit`].
    pub async fn commit(&mut self) -> Result<()> {
        if !self.member.lease().is_valid() {
            return Err(GroupError::MemberStopped {
                group: self.member.group_id().to_owned(),
            });
        }
        let offsets: Vec<(TopicPartition, i64)> = self
            .positions
            .iter()
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        self.member.commit(&offsets).await
    }

    /// Commits (if the member still holds its partitions) and closes the
    /// member; see [`ShutdownMode`].
    ///
    /// # Errors
    /// A failed commit; the member is closed anyway.
    pub async fn close(mut self, mode: ShutdownMode) -> Result<()> {
        let committed = if self.member.lease().is_valid() {
            self.commit().await
        } else {
            Ok(())
        };
        self.consumer.assign(Vec::new());
        self.member.close(mode).await;
        committed
    }
}
