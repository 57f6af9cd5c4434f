//! A consumer in a group: a [`GroupMember`] driving weir-client's
//! [`Consumer`].
//!
//! - `Assigned`: fetch the committed offsets (OffsetFetch with
//!   `require_stable`), assign, seek;
//! - `Revoked`: commit the positions of the revoked partitions, then ack;
//! - `Lost`: stop delivering those partitions at once, commit nothing.
//!
//! Every commit (explicit, stored, automatic, on revocation or close) goes
//! through [`GroupMember::commit`] with the generation read at that moment,
//! and only while the member's lease holds: a member that lost its
//! membership commits nothing, whichever way the commit was asked for.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use futures_core::Stream;
use tokio::time::Instant;

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

fn is_of(record: &ConsumerRecord, tp: &TopicPartition) -> bool {
    record.partition == tp.partition && record.topic == tp.topic
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
/// What it offers a rust-rdkafka user:
///
/// | rust-rdkafka | here |
/// |---|---|
/// | `poll` / `recv` | [`poll`](Self::poll) (a batch), [`recv`](Self::recv) (one record) |
/// | `StreamConsumer::stream` | [`stream`](Self::stream) |
/// | `commit_consumer_state` | [`commit`](Self::commit) (what was returned) |
/// | `commit(&TopicPartitionList)` | [`commit_offsets`](Self::commit_offsets) |
/// | `store_offset_from_message` + commit | [`store_offset`](Self::store_offset) + [`commit_stored`](Self::commit_stored) |
/// | `enable.auto.commit` | the same property (off by default here) |
/// | `pause` / `resume` | [`pause`](Self::pause) / [`resume`](Self::resume) |
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
    /// returned from it (by `poll` or `recv`).
    positions: BTreeMap<TopicPartition, i64>,
    /// What the application marked as processed ([`store_offset`](Self::store_offset)).
    stored: BTreeMap<TopicPartition, i64>,
    /// Fetched, not yet returned: what a `recv` left of a batch.
    pending: VecDeque<ConsumerRecord>,
    /// `auto.commit.interval.ms` when `enable.auto.commit` is on.
    auto_commit: Option<Duration>,
    /// When the last automatic commit was due, and whether a record was
    /// returned since.
    last_auto_commit: Instant,
    returned_since_commit: bool,
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
        let auto_commit = config
            .consumer
            .enable_auto_commit
            .then_some(config.consumer.auto_commit_interval);
        let consumer = Consumer::with_cluster(cluster.clone(), config.consumer);
        let member = GroupMember::start(cluster, member)?;
        Ok(Self {
            member,
            consumer,
            positions: BTreeMap::new(),
            stored: BTreeMap::new(),
            pending: VecDeque::new(),
            auto_commit,
            last_auto_commit: Instant::now(),
            returned_since_commit: false,
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
    /// on the way, and returns them (at most `max.poll.records`).
    ///
    /// Not cancel-safe: a revocation being handled when the future is
    /// dropped is acknowledged without its commit. Poll from one task, not
    /// inside a `select!` that may drop it.
    ///
    /// # Errors
    /// A fatal membership error, a failed commit on revocation, or the
    /// consumer's errors.
    pub async fn poll(&mut self) -> Result<Vec<ConsumerRecord>> {
        self.auto_commit_if_due().await;
        self.fill().await?;
        let records: Vec<ConsumerRecord> = self.pending.drain(..).collect();
        self.returned(&records);
        Ok(records)
    }

    /// Waits for one record of an owned partition (rust-rdkafka's `recv`).
    /// Records come in the same order as from [`poll`](Self::poll), which
    /// it can be mixed with; what it fetched beyond the one record is kept
    /// for the next call.
    ///
    /// ```no_run
    /// # async fn demo(consumer: &mut weir_group::group_consumer::GroupConsumer) -> weir_group::Result<()> {
    /// let record = consumer.recv().await?;
    /// println!("{}-{}@{}", record.topic, record.partition, record.offset);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`poll`](Self::poll), and not cancel-safe for the same reason.
    pub async fn recv(&mut self) -> Result<ConsumerRecord> {
        loop {
            self.auto_commit_if_due().await;
            self.fill().await?;
            if let Some(record) = self.pending.pop_front() {
                self.returned(std::slice::from_ref(&record));
                return Ok(record);
            }
        }
    }

    /// The records as a [`Stream`] (rust-rdkafka's
    /// `StreamConsumer::stream`): each item is what [`recv`](Self::recv)
    /// returns. It ends after [`GroupError::MemberStopped`] or
    /// [`GroupError::FencedInstance`]; other errors are yielded and it
    /// goes on.
    ///
    /// ```no_run
    /// # async fn demo(consumer: &mut weir_group::group_consumer::GroupConsumer) -> weir_group::Result<()> {
    /// use futures_util::StreamExt;
    ///
    /// let mut records = std::pin::pin!(consumer.stream());
    /// while let Some(record) = records.next().await {
    ///     let record = record?;
    ///     println!("{}", record.offset);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn stream(&mut self) -> impl Stream<Item = Result<ConsumerRecord>> + '_ {
        futures_util::stream::unfold(Some(self), |consumer| async move {
            let consumer = consumer?;
            let item = consumer.recv().await;
            let ended = matches!(
                item,
                Err(GroupError::MemberStopped { .. } | GroupError::FencedInstance { .. })
            );
            Some((item, (!ended).then_some(consumer)))
        })
    }

    /// Records returned to the application: their positions are what
    /// [`commit`](Self::commit) and auto-commit send.
    fn returned(&mut self, records: &[ConsumerRecord]) {
        for r in records {
            self.positions.insert(
                TopicPartition::new(r.topic.clone(), r.partition),
                r.offset + 1,
            );
        }
        self.returned_since_commit |= !records.is_empty();
    }

    /// Waits until records are pending and the lease holds.
    async fn fill(&mut self) -> Result<()> {
        while self.pending.is_empty() || !self.member.lease().is_valid() {
            let batch = self.next_batch().await?;
            self.pending.extend(batch);
        }
        Ok(())
    }

    /// With `enable.auto.commit`, commits what was returned so far once
    /// `auto.commit.interval.ms` has passed since the last time. Called
    /// at the start of `poll` and `recv`: by then the application is done
    /// with what the previous calls returned. A failure is logged; the
    /// next interval tries again.
    async fn auto_commit_if_due(&mut self) {
        let Some(interval) = self.auto_commit else {
            return;
        };
        if !self.returned_since_commit || self.last_auto_commit.elapsed() < interval {
            return;
        }
        self.last_auto_commit = Instant::now();
        match self.commit().await {
            Ok(()) => self.returned_since_commit = false,
            Err(e) => {
                tracing::warn!(group = %self.member.group_id(), error = %e, "auto-commit failed; trying again at the next interval")
            }
        }
    }

    /// One batch from the consumer, handling assignment events on the
    /// way; empty when records are already pending and the lease holds.
    async fn next_batch(&mut self) -> Result<Vec<ConsumerRecord>> {
        loop {
            self.member.record_poll();
            // Partitions whose offsets a previous poll failed to fetch
            // (UNSTABLE_OFFSET_COMMIT past default.api.timeout) are tried
            // again on every poll until they start.
            self.start_assigned().await?;
            let lease = self.member.lease();
            if lease.is_valid() && !self.pending.is_empty() {
                return Ok(Vec::new());
            }
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
            self.stored.remove(tp);
            self.starting.remove(tp);
        }
        self.pending
            .retain(|r| !partitions.iter().any(|tp| is_of(r, tp)));
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
        self.pending.retain(|r| !is_of(r, tp));
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
    /// returned from: everything [`poll`](Self::poll) and
    /// [`recv`](Self::recv) returned counts as processed.
    ///
    /// # Errors
    /// [`GroupError::MemberStopped`] when the member's lease has ended
    /// (nothing is sent), else as [`GroupMember::commit`].
    pub async fn commit(&mut self) -> Result<()> {
        let owned = self.member.assignment();
        let offsets: Vec<(TopicPartition, i64)> = self
            .positions
            .iter()
            .filter(|(tp, _)| owned.contains(*tp))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        self.commit_checked(&offsets).await
    }

    /// Commits the given offsets: for each partition, the offset of the
    /// next record to read (the last processed record's offset + 1), as
    /// rust-rdkafka's `commit` of a `TopicPartitionList` and Java's
    /// `commitSync(Map)`.
    ///
    /// ```no_run
    /// # async fn demo(consumer: &mut weir_group::group_consumer::GroupConsumer) -> weir_group::Result<()> {
    /// use weir_group::assignor::TopicPartition;
    ///
    /// let record = consumer.recv().await?;
    /// // ... process it, then commit exactly up to it:
    /// let tp = TopicPartition::new(record.topic.clone(), record.partition);
    /// consumer.commit_offsets(&[(tp, record.offset + 1)]).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`GroupError::NotOwned`] for a partition the member does not own
    /// (nothing is sent), [`GroupError::MemberStopped`] when its lease has
    /// ended, else as [`GroupMember::commit`].
    pub async fn commit_offsets(&mut self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        self.commit_checked(offsets).await
    }

    /// Marks `record` as processed (rust-rdkafka's `store_offset`): the next
    /// [`commit_stored`](Self::commit_stored) commits up to and including
    /// it for its partition. Use it to commit only what was fully handled,
    /// when more was returned than processed.
    ///
    /// ```no_run
    /// # async fn demo(consumer: &mut weir_group::group_consumer::GroupConsumer) -> weir_group::Result<()> {
    /// for record in consumer.poll().await? {
    ///     // ... process the record; on success:
    ///     consumer.store_offset(&record)?;
    /// }
    /// consumer.commit_stored().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`GroupError::NotOwned`] if the member no longer owns its partition.
    pub fn store_offset(&mut self, record: &ConsumerRecord) -> Result<()> {
        let tp = TopicPartition::new(record.topic.clone(), record.partition);
        self.check_owned(&tp)?;
        self.stored.insert(tp, record.offset + 1);
        Ok(())
    }

    /// Commits what [`store_offset`](Self::store_offset) marked, for the
    /// partitions the member still owns.
    ///
    /// # Errors
    /// As [`commit`](Self::commit).
    pub async fn commit_stored(&mut self) -> Result<()> {
        let owned = self.member.assignment();
        let offsets: Vec<(TopicPartition, i64)> = self
            .stored
            .iter()
            .filter(|(tp, _)| owned.contains(*tp))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        self.commit_checked(&offsets).await
    }

    /// Stops returning records of `partitions` until they are
    /// [`resume`](Self::resume)d; the member keeps them. Records of them
    /// fetched but not yet returned are fetched again after the resume.
    ///
    /// ```no_run
    /// # async fn demo(consumer: &mut weir_group::group_consumer::GroupConsumer) -> weir_group::Result<()> {
    /// use weir_group::assignor::TopicPartition;
    ///
    /// let slow = [TopicPartition::new("orders", 0)];
    /// consumer.pause(&slow)?;
    /// // ... poll the others while the downstream of partition 0 catches up ...
    /// consumer.resume(&slow)?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`GroupError::NotOwned`] for a partition the member does not own;
    /// nothing is paused then.
    pub fn pause(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        for tp in partitions {
            self.check_owned(tp)?;
        }
        for tp in partitions {
            if let Some(first) = self.pending.iter().find(|r| is_of(r, tp)).map(|r| r.offset) {
                self.consumer
                    .seek(&to_client(tp), SeekTo::Offset(first))
                    .map_err(|e| client_error("pausing", &e))?;
                self.pending.retain(|r| !is_of(r, tp));
            }
        }
        let client: Vec<producer::TopicPartition> = partitions.iter().map(to_client).collect();
        self.consumer
            .pause(&client)
            .map_err(|e| client_error("pausing", &e))
    }

    /// Returns records of `partitions` again after a [`pause`](Self::pause).
    ///
    /// # Errors
    /// [`GroupError::NotOwned`] for a partition the member does not own.
    pub fn resume(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        for tp in partitions {
            self.check_owned(tp)?;
        }
        let client: Vec<producer::TopicPartition> = partitions.iter().map(to_client).collect();
        self.consumer.resume(&client);
        Ok(())
    }

    /// The paused partitions.
    pub fn paused(&self) -> Vec<TopicPartition> {
        self.consumer
            .paused()
            .into_iter()
            .map(|tp| TopicPartition::new(tp.topic, tp.partition))
            .collect()
    }

    fn check_owned(&self, tp: &TopicPartition) -> Result<()> {
        if self.member.assignment().contains(tp) {
            Ok(())
        } else {
            Err(GroupError::NotOwned {
                group: self.member.group_id().to_owned(),
                topic: tp.topic.clone(),
                partition: tp.partition,
            })
        }
    }

    /// The one way offsets are committed here: only while the lease
    /// holds, only for owned partitions, with the generation read now
    /// (inside [`GroupMember::commit`]). A member that lost its membership
    /// (expelled, fenced, or past the self-fence margin) sends nothing, so
    /// it cannot overwrite what the partitions' new owner commits.
    async fn commit_checked(&mut self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        if !self.member.lease().is_valid() {
            return Err(GroupError::MemberStopped {
                group: self.member.group_id().to_owned(),
            });
        }
        for (tp, _) in offsets {
            self.check_owned(tp)?;
        }
        self.member.commit(offsets).await
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
