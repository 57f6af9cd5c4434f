//! Group membership, classic protocol: JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup.
//!
//! [`GroupMember::start`] spawns two tasks per member:
//!
//! - the membership task joins and syncs, reacts to the coordinator's
//!   errors exactly as Kafka's consumer does, and turns assignment changes
//!   into [`AssignmentEvent`]s, in order;
//! - a heartbeat task per generation, on a connection of its own
//!   ([`Lane::Heartbeat`](weir_client::cluster::Lane::Heartbeat)), so neither
//!   a slow processing loop nor a slow commit starves it. It also
//!   enforces `max.poll.interval.ms` and self-fencing (see [`Lease`]).
//!
//! | Coordinator says | The member |
//! |---|---|
//! | `MEMBER_ID_REQUIRED` | keeps the id it was given and rejoins at once |
//! | `UNKNOWN_MEMBER_ID` | forgets member id and generation, loses its partitions, rejoins |
//! | `ILLEGAL_GENERATION` | forgets the generation, loses its partitions, rejoins |
//! | `REBALANCE_IN_PROGRESS` | rejoins (eager: revokes everything first) |
//! | `FENCED_INSTANCE_ID` | loses its partitions and stops: fatal |
//! | `NOT_COORDINATOR`, `COORDINATOR_NOT_AVAILABLE` | finds the coordinator again |
//!
//! An answer is acted on only if the generation is still the one its
//! request was sent with.

mod actor;
mod config;
mod heartbeat;
mod leader;
mod requests;
mod state;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{mpsc, oneshot};
use weir_client::Cluster;
use weir_client::producer::SendGate;
use weir_client::transaction::TransactionalProducer;

pub use self::config::MemberConfig;
pub(crate) use self::requests::{client_error, s};
use self::state::Shared;
pub use self::state::{CommitPermit, GroupMetadata, Lease, NoPermit};
use crate::assignor::TopicPartition;
use crate::{GroupError, Result};

/// A change of the member's partitions, delivered in order.
#[derive(Debug)]
pub enum AssignmentEvent {
    /// These partitions are being taken away cleanly: commit their offsets,
    /// then call [`Revocation::ack`]. The member waits for the ack (or for
    /// the [`Revocation`] to be dropped) before it goes on.
    Revoked(Revocation),
    /// These partitions are now the member's (possibly none: the
    /// rebalance completed without adding any).
    Assigned {
        /// The partitions added.
        partitions: Vec<TopicPartition>,
        /// The generation they were assigned in (the member's generation
        /// may have moved on by the time the event is read).
        generation: i32,
        /// The lease of this assignment as a [`SendGate`]: open while it
        /// holds, closed for good once the member loses its generation
        /// (expelled, self-fenced, left), even after it rejoins. A writer
        /// that checks this gate (not a fresh [`Lease::gate`]) until the next
        /// `Assigned` replaces it never writes for partitions it lost while
        /// the `Lost` was still queued behind it.
        gate: SendGate,
    },
    /// The membership ended without a clean revoke (the generation was lost,
    /// the member fenced itself or was fenced): stop writing for these
    /// partitions at once and do not commit their offsets.
    Lost(Vec<TopicPartition>),
}

/// Partitions being revoked, with the acknowledgement the member waits for.
#[derive(Debug)]
pub struct Revocation {
    /// The partitions.
    pub partitions: Vec<TopicPartition>,
    ack: oneshot::Sender<()>,
}

impl Revocation {
    /// Tells the member the owner has committed and stopped using the
    /// partitions.
    pub fn ack(self) {
        let _ = self.ack.send(());
    }
}

/// How [`GroupMember::close`] leaves the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownMode {
    /// A dynamic member sends LeaveGroup; a static one does not (KIP-345):
    /// if it comes back within the session timeout it keeps its partitions
    /// without a rebalance.
    Default,
    /// Leave at once, static or not, so the partitions move without waiting
    /// for the session to time out. Commit before calling this.
    Planned,
}

pub(crate) enum Command {
    Close {
        mode: ShutdownMode,
        done: oneshot::Sender<()>,
    },
    /// A commit got a group error for `generation`.
    GroupError { generation: i32, code: i16 },
    /// The application asks for a rebalance (Java's `enforceRebalance`).
    Rejoin,
}

/// A member of a consumer group.
///
/// ```no_run
/// # async fn demo() -> weir_group::Result<()> {
/// use weir_client::{Cluster, config::ClientConfig};
/// use weir_group::member::{AssignmentEvent, GroupMember, MemberConfig, ShutdownMode};
///
/// let config = ClientConfig::from_properties(&[("bootstrap.servers", "127.0.0.1:9092")]).unwrap();
/// let cluster = Cluster::connect(config).await.unwrap();
/// let mut member = GroupMember::start(cluster, MemberConfig::new("g", ["orders"]))?;
/// match member.next_event().await? {
///     AssignmentEvent::Assigned { partitions, .. } => println!("now own {partitions:?}"),
///     AssignmentEvent::Revoked(revocation) => revocation.ack(),
///     AssignmentEvent::Lost(partitions) => println!("lost {partitions:?}"),
/// }
/// member.close(ShutdownMode::Default).await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct GroupMember {
    cluster: Cluster,
    shared: Arc<Shared>,
    events: mpsc::Receiver<Result<AssignmentEvent>>,
    commands: mpsc::UnboundedSender<Command>,
}

impl GroupMember {
    /// Validates `config` and starts joining the group.
    ///
    /// # Errors
    /// [`GroupError::InvalidConfig`].
    pub fn start(cluster: Cluster, config: MemberConfig) -> Result<GroupMember> {
        config.validate()?;
        let shared = Shared::new(config.group_id.clone(), config.instance_id.clone());
        let (event_tx, events) = mpsc::channel(16);
        let (commands, command_rx) = mpsc::unbounded_channel();
        let membership =
            actor::Membership::new(cluster.clone(), config, Arc::clone(&shared), event_tx);
        tokio::spawn(membership.run(command_rx));
        Ok(GroupMember {
            cluster,
            shared,
            events,
            commands,
        })
    }

    /// The next assignment event. Waiting here counts as polling for
    /// `max.poll.interval.ms`.
    ///
    /// # Errors
    /// A fatal error ([`GroupError::FencedInstance`], an authorization
    /// failure), then [`GroupError::MemberStopped`].
    pub async fn next_event(&mut self) -> Result<AssignmentEvent> {
        self.record_poll();
        let event = {
            let _polling = PollGuard::enter(&self.shared);
            self.events.recv().await
        };
        self.record_poll();
        event.unwrap_or_else(|| {
            Err(GroupError::MemberStopped {
                group: self.shared.group_id.clone(),
            })
        })
    }

    /// The next assignment event if one is queued, without waiting (`None`
    /// when none is). For an application stopping: what it lost while it
    /// was not reading events must be handled before its last commit.
    pub fn try_next_event(&mut self) -> Option<Result<AssignmentEvent>> {
        self.record_poll();
        match self.events.try_recv() {
            Ok(event) => Some(event),
            Err(mpsc::error::TryRecvError::Empty) => None,
            Err(mpsc::error::TryRecvError::Disconnected) => Some(Err(GroupError::MemberStopped {
                group: self.shared.group_id.clone(),
            })),
        }
    }

    /// Asks for a rebalance now, keeping what the member owns (Java's
    /// `enforceRebalance`): the member rejoins with fresh subscription user
    /// data, which is how an assignor's follow-up (a warmup that caught up)
    /// gets its new lags to the leader. A no-op while a rebalance runs.
    ///
    /// ```no_run
    /// # fn demo(member: &weir_group::member::GroupMember) {
    /// member.request_rejoin();
    /// # }
    /// ```
    pub fn request_rejoin(&self) {
        let _ = self.commands.send(Command::Rejoin);
    }

    /// Records that the application polled (for `max.poll.interval.ms`);
    /// [`next_event`](Self::next_event) does it itself.
    pub fn record_poll(&self) {
        self.shared.record_poll();
    }

    /// Generation, member id and instance id, as commits must carry them.
    ///
    /// Read it at commit time: a member that lost its generation has no
    /// metadata to hand out, so a zombie's commit is refused here instead
    /// of getting past the coordinator's check.
    ///
    /// # Errors
    /// [`GroupError::NoGeneration`] while the member has no generation
    /// (before its first join, after UNKNOWN_MEMBER_ID or
    /// ILLEGAL_GENERATION, after it fenced itself or left on
    /// `max.poll.interval.ms`, until it joins again).
    pub fn metadata(&self) -> Result<GroupMetadata> {
        self.shared.metadata()
    }

    /// The group's id.
    pub fn group_id(&self) -> &str {
        &self.shared.group_id
    }

    /// The generation, -1 while there is none.
    pub fn generation(&self) -> i32 {
        self.shared.lock().generation
    }

    /// The partitions the member owns now.
    pub fn assignment(&self) -> BTreeSet<TopicPartition> {
        self.shared.lock().owned.clone()
    }

    /// The lease writers check before each write.
    pub fn lease(&self) -> Lease {
        Lease {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The cluster handle the member talks through.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Commits `offsets` with this member's group metadata. A group error
    /// (e.g. `REBALANCE_IN_PROGRESS`) fails the commit and makes the member
    /// react to it, if the generation has not changed meanwhile.
    ///
    /// # Errors
    /// [`GroupError::NoGeneration`] (nothing sent),
    /// [`GroupError::Coordinator`] with the code, or [`GroupError::Client`].
    pub async fn commit(&self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        let metadata = self.metadata()?;
        let result = crate::offsets::commit(&self.cluster, &metadata, offsets).await;
        if let Err(GroupError::Coordinator { code, .. }) = &result {
            // The answer says whether this member is still in the group:
            // if not, the lease ends before the caller sees the error, not
            // when the membership task gets round to it (it may be waiting
            // for a revocation's ack, which this commit may be part of).
            if self.shared.end_generation_on(metadata.generation, *code) {
                tracing::warn!(group = %self.shared.group_id, generation = metadata.generation, code, "commit refused: out of the group, lease ended");
            }
            let _ = self.commands.send(Command::GroupError {
                generation: metadata.generation,
                code: *code,
            });
        }
        result
    }

    /// Puts `offsets` into `producer`'s open transaction with this
    /// member's group metadata, read now (exactly-once v2, KIP-447), and
    /// reports a refusal that says the membership is stale
    /// (`UNKNOWN_MEMBER_ID`, `ILLEGAL_GENERATION`, `FENCED_INSTANCE_ID`)
    /// back to the member, which ends its lease and loses its partitions at
    /// once, as [`commit`](Self::commit) does for a plain commit. Prefer
    /// this to calling the producer with [`metadata`](Self::metadata).
    ///
    /// A member with no generation sends nothing: the producer refuses its
    /// metadata and the transaction becomes abortable.
    ///
    /// The metadata is the generation's *at this call*. A member that lost
    /// its partitions and rejoined while the transaction ran holds a new
    /// generation the coordinator accepts, though another member may have
    /// processed the same input meanwhile. Take a [`Lease::gate`] when the
    /// transaction begins and abort instead of calling this once it closed
    /// (a gate never reopens under a later lease); weir-streams waits until
    /// its instance has handled the new generation's assignment instead.
    /// A commit racing the member's own rejoin (refused though the member
    /// keeps its partitions) is avoided with [`Lease::commit_permit`].
    /// `integration/tests/eos_group_checker.rs` has the failing case
    /// (ignored).
    ///
    /// # Errors
    /// As [`TransactionalProducer::send_offsets_to_transaction`]: abortable
    /// for a stale membership or no generation (source
    /// [`ClientError::NoGroupGeneration`](weir_client::ClientError::NoGroupGeneration)),
    /// fatal when the producer is fenced.
    pub async fn send_offsets_to_transaction(
        &self,
        producer: &TransactionalProducer,
        offsets: &BTreeMap<weir_client::producer::TopicPartition, i64>,
    ) -> weir_client::Result<()> {
        let metadata = match self.shared.metadata() {
            Ok(m) => weir_client::transaction::GroupMetadata::from(m),
            // No generation: the producer refuses this (never `unchecked`)
            // metadata, and the transaction becomes abortable.
            Err(_) => weir_client::transaction::GroupMetadata::new(
                self.shared.group_id.clone(),
                crate::consumer_protocol::NO_GENERATION,
                self.shared.lock().member_id.clone(),
                self.shared.instance_id.clone(),
            ),
        };
        let result = producer
            .send_offsets_to_transaction(offsets, &metadata)
            .await;
        if let Err(weir_client::ClientError::Transaction { source, .. }) = &result
            && let Some(code) = source.kafka_code().map(|c| c.code)
            && crate::offsets::is_membership_code(code)
        {
            tracing::warn!(group = %self.shared.group_id, generation = metadata.generation_id, code, "TxnOffsetCommit refused: the membership is stale");
            self.shared.end_generation_on(metadata.generation_id, code);
            let _ = self.commands.send(Command::GroupError {
                generation: metadata.generation_id,
                code,
            });
        }
        result
    }

    /// Stops the member: heartbeats end, and it leaves the group as `mode`
    /// says. Commit first; nothing is revoked or committed here.
    pub async fn close(self, mode: ShutdownMode) {
        let GroupMember {
            events, commands, ..
        } = self;
        // Dropped first: a membership task blocked delivering an event (or
        // waiting for a revocation's ack) sees the receiver gone and moves on.
        drop(events);
        let (done, wait) = oneshot::channel();
        if commands.send(Command::Close { mode, done }).is_ok() {
            let _ = wait.await;
        }
    }
}

/// Marks the application as polling while it waits in `next_event`, and
/// unmarks it even when that future is dropped (inside a `select!`).
struct PollGuard<'a>(&'a Shared);

impl<'a> PollGuard<'a> {
    fn enter(shared: &'a Shared) -> Self {
        shared.in_poll.store(true, Ordering::Release);
        Self(shared)
    }
}

impl Drop for PollGuard<'_> {
    fn drop(&mut self) {
        self.0.in_poll.store(false, Ordering::Release);
        self.0.record_poll();
    }
}
