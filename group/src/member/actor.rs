//! The membership task: join, sync, react to the coordinator, hand out
//! assignment events.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use weir_client::cluster::{BrokerId, CoordinatorKind};
use weir_client::kerror::{KafkaCode, codes};
use weir_client::{ClientError, Cluster};

use super::config::MemberConfig;
use super::heartbeat::{Heartbeat, Outcome, OutcomeKind};
use super::leader::AssignError;
use super::requests::{self, JoinParams, SyncParams, client_error};
use super::state::Shared;
use super::{AssignmentEvent, Command, Revocation, ShutdownMode};
use crate::assignor::{RebalanceProtocol, TopicPartition, cooperative_sticky_user_data};
use crate::consumer_protocol::{
    Assignment, CONSUMER_PROTOCOL_MAX_VERSION, NO_GENERATION, Subscription, TopicPartitions,
};
use crate::{GroupError, Result};

/// What to do next.
enum Flow {
    /// The member is in a generation; heartbeats run.
    Stable,
    /// Join again, after `Duration` (zero: at once).
    Rejoin(Duration),
    /// Stop for good with this error.
    Fatal(GroupError),
    /// The application asked to close.
    Close(ShutdownMode, oneshot::Sender<()>),
}

pub(crate) struct Membership {
    cluster: Cluster,
    config: MemberConfig,
    shared: Arc<Shared>,
    events: mpsc::Sender<Result<AssignmentEvent>>,
    outcomes_tx: mpsc::UnboundedSender<Outcome>,
    outcomes: mpsc::UnboundedReceiver<Outcome>,
    heartbeat: Option<JoinHandle<()>>,
    /// The generation the running heartbeat task belongs to. Kept here
    /// because the heartbeat task resets the shared one on a fatal answer,
    /// and its outcome must still be recognised as current.
    generation: i32,
    backoff: Duration,
}

impl Membership {
    pub(crate) fn new(
        cluster: Cluster,
        config: MemberConfig,
        shared: Arc<Shared>,
        events: mpsc::Sender<Result<AssignmentEvent>>,
    ) -> Self {
        let (outcomes_tx, outcomes) = mpsc::unbounded_channel();
        let backoff = cluster
            .config()
            .retry_backoff
            .max(Duration::from_millis(10));
        Self {
            cluster,
            config,
            shared,
            events,
            outcomes_tx,
            outcomes,
            heartbeat: None,
            generation: NO_GENERATION,
            backoff,
        }
    }

    pub(crate) async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut flow = Flow::Rejoin(Duration::ZERO);
        loop {
            flow = match flow {
                Flow::Rejoin(delay) => {
                    let deadline = Instant::now() + delay;
                    let (flow, deferred) = {
                        let join = async {
                            tokio::time::sleep_until(deadline).await;
                            self.join_and_sync().await
                        };
                        tokio::pin!(join);
                        // A commit's error that arrives while the new
                        // generation's revocation waits for its ack (the
                        // application commits before it acks) belongs to the
                        // new generation: it is handled once the join is done.
                        let mut deferred = None;
                        let flow = loop {
                            tokio::select! {
                                f = &mut join => break f,
                                c = commands.recv() => match c {
                                    Some(Command::Close { mode, done }) => break Flow::Close(mode, done),
                                    // A commit's error from the generation being
                                    // replaced: stale, the join goes on; a
                                    // rejoin asked for is this one.
                                    Some(Command::GroupError { generation, code }) => {
                                        deferred = deferred.or(Some((generation, code)));
                                    }
                                    Some(Command::Rejoin) => {}
                                    None => break Flow::Close(ShutdownMode::Default, oneshot::channel().0),
                                },
                            }
                        };
                        (flow, deferred)
                    };
                    match (flow, deferred) {
                        (Flow::Stable, Some((generation, code)))
                            if generation == self.generation =>
                        {
                            self.on_code(code).await
                        }
                        (flow, _) => flow,
                    }
                }
                Flow::Stable => self.stable(&mut commands).await,
                Flow::Fatal(error) => {
                    tracing::error!(group = %self.config.group_id, %error, "membership failed");
                    self.stop_heartbeat();
                    // The generation goes too: a heartbeat answer still in
                    // flight must not extend the lease again.
                    self.lose_all("fatal error").await;
                    let _ = self.events.send(Err(error)).await;
                    return;
                }
                Flow::Close(mode, done) => {
                    self.close(mode).await;
                    let _ = done.send(());
                    return;
                }
            }
        }
    }

    fn stop_heartbeat(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
    }

    async fn emit(&self, event: AssignmentEvent) {
        // Fails only once the application dropped the member.
        let _ = self.events.send(Ok(event)).await;
    }

    /// Gives up every partition without a revoke. The lease ends before
    /// the event is even queued, so writers stop at once.
    async fn lose_all(&self, why: &str) {
        let owned = self.shared.drop_ownership();
        self.report_lost(owned, why).await;
    }

    async fn report_lost(&self, owned: BTreeSet<TopicPartition>, why: &str) {
        if !owned.is_empty() {
            tracing::warn!(group = %self.config.group_id, partitions = owned.len(), why, "partitions lost");
            self.emit(AssignmentEvent::Lost(owned.into_iter().collect()))
                .await;
        }
    }

    /// Revokes `partitions` and waits for the owner's ack.
    async fn revoke(&self, partitions: BTreeSet<TopicPartition>) {
        if partitions.is_empty() {
            return;
        }
        tracing::info!(group = %self.config.group_id, partitions = partitions.len(), "revoking");
        let (ack, acked) = oneshot::channel();
        self.emit(AssignmentEvent::Revoked(Revocation {
            partitions: partitions.iter().cloned().collect(),
            ack,
        }))
        .await;
        // A dropped revocation counts as acknowledged.
        let _ = acked.await;
        let mut id = self.shared.lock();
        id.owned.retain(|tp| !partitions.contains(tp));
    }

    /// The reaction to a group error code (NOTES.md §3).
    async fn on_code(&mut self, code: i16) -> Flow {
        let group = self.config.group_id.clone();
        match code {
            codes::UNKNOWN_MEMBER_ID => {
                {
                    let mut id = self.shared.lock();
                    id.member_id.clear();
                    id.generation = NO_GENERATION;
                }
                self.lose_all("UNKNOWN_MEMBER_ID").await;
                Flow::Rejoin(Duration::ZERO)
            }
            codes::ILLEGAL_GENERATION => {
                self.shared.lock().generation = NO_GENERATION;
                self.lose_all("ILLEGAL_GENERATION").await;
                Flow::Rejoin(Duration::ZERO)
            }
            codes::REBALANCE_IN_PROGRESS => Flow::Rejoin(Duration::ZERO),
            codes::FENCED_INSTANCE_ID => Flow::Fatal(GroupError::FencedInstance {
                group,
                instance_id: self.config.instance_id.clone().unwrap_or_default(),
            }),
            codes::NOT_COORDINATOR | codes::COORDINATOR_NOT_AVAILABLE => {
                self.cluster
                    .invalidate_coordinator(CoordinatorKind::Group, &group);
                Flow::Rejoin(self.backoff)
            }
            codes::COORDINATOR_LOAD_IN_PROGRESS => Flow::Rejoin(self.backoff),
            other => Flow::Fatal(GroupError::Coordinator {
                api: "group membership",
                group,
                code: other,
                name: KafkaCode::from_code(other).name,
            }),
        }
    }

    /// A lost connection or timeout: find the coordinator again and retry.
    fn on_client_error(&self, what: &str, e: &ClientError) -> Flow {
        tracing::info!(group = %self.config.group_id, what, error = %e, "group request failed");
        // A retried request (FindCoordinator) that ran out of time on
        // network errors is a network error too: the membership has its
        // own loop and tries again, as Java's consumer does, instead of
        // dying of a transient outage longer than default.api.timeout.ms.
        let cause = match e {
            ClientError::RetriesExhausted { last, .. } => last.as_ref(),
            e => e,
        };
        if cause.is_network() || cause.is_retriable() {
            self.cluster
                .invalidate_coordinator(CoordinatorKind::Group, &self.config.group_id);
            Flow::Rejoin(self.backoff)
        } else {
            Flow::Fatal(client_error(
                format!("{what} for group {}", self.config.group_id),
                e,
            ))
        }
    }

    async fn coordinator(&self) -> std::result::Result<BrokerId, Flow> {
        self.cluster
            .find_coordinator(CoordinatorKind::Group, &self.config.group_id)
            .await
            .map_err(|e| self.on_client_error("FindCoordinator", &e))
    }

    fn subscriptions(&self) -> Result<Vec<(String, bytes::Bytes)>> {
        let (owned, generation) = {
            let id = self.shared.lock();
            (id.owned.clone(), id.generation)
        };
        let mut owned_wire: Vec<TopicPartitions> = Vec::new();
        for tp in &owned {
            match owned_wire.last_mut() {
                Some(last) if last.topic == tp.topic => last.partitions.push(tp.partition),
                _ => owned_wire.push(TopicPartitions {
                    topic: tp.topic.clone(),
                    partitions: vec![tp.partition],
                }),
            }
        }
        let mut out = Vec::new();
        if let Some(custom) = &self.config.custom_assignor {
            let subscription = Subscription {
                topics: self.config.topics.clone(),
                user_data: custom.0.subscription_user_data(&owned, generation),
                owned_partitions: owned_wire,
                generation_id: generation,
                rack_id: self.config.rack.clone(),
            };
            out.push((
                custom.0.name().to_owned(),
                subscription.encode(CONSUMER_PROTOCOL_MAX_VERSION)?,
            ));
            return Ok(out);
        }
        for assignor in &self.config.assignors {
            let cooperative = assignor.protocol() == RebalanceProtocol::Cooperative;
            let subscription = Subscription {
                topics: self.config.topics.clone(),
                user_data: cooperative.then(|| cooperative_sticky_user_data(generation)),
                owned_partitions: owned_wire.clone(),
                generation_id: generation,
                rack_id: self.config.rack.clone(),
            };
            out.push((
                assignor.name().to_owned(),
                subscription.encode(CONSUMER_PROTOCOL_MAX_VERSION)?,
            ));
        }
        Ok(out)
    }

    /// One rebalance: revoke (eager), JoinGroup, the leader's assignment,
    /// SyncGroup, then the assignment events.
    async fn join_and_sync(&mut self) -> Flow {
        let eager = self.config.protocol() == RebalanceProtocol::Eager;
        let has_generation = self.shared.lock().generation != NO_GENERATION;
        if eager && has_generation {
            // Eager: everything goes back before the join. The old
            // generation's heartbeats keep running while the owner commits
            // (the heartbeat task goes on after REBALANCE_IN_PROGRESS), so
            // the session does not expire under a slow revocation handler;
            // the rebalance timeout (`max.poll.interval.ms`) bounds it, and
            // the lease with it. They stop just before the JoinGroup.
            let owned = self.shared.lock().owned.clone();
            self.revoke(owned).await;
        }
        if eager || !has_generation {
            // Nothing is owned (eager: revoked above), or there is no
            // generation left to heartbeat for: the heartbeats stop
            // before the JoinGroup.
            self.stop_heartbeat();
        }
        // Cooperative (m6): the old generation's heartbeats go on during
        // the JoinGroup, which the coordinator may hold for up to the
        // rebalance timeout while others rejoin, so the lease of the
        // partitions kept keeps being renewed and they are processed
        // throughout, as KIP-429 intends. They stop when the JoinGroup is
        // answered.
        // The commits holding a permit finish first (bounded): one that
        // read this generation and reached the coordinator after the
        // JoinGroup's answer would be refused though nothing moved
        // (`Lease::commit_permit`). The old generation's heartbeats go on
        // meanwhile (cooperative), so the lease stays renewed. Without a
        // generation there is nothing to wait for: every commit is refused.
        let wait = if has_generation {
            self.config.lease_span() / 2
        } else {
            Duration::ZERO
        };
        let rebalancing = RebalanceMark(Arc::clone(&self.shared));
        if !self.shared.begin_rebalance(wait).await && has_generation {
            tracing::warn!(group = %self.config.group_id, waited = ?wait, "commits still in flight: joining without waiting for them");
        }
        let coordinator = match self.coordinator().await {
            Ok(c) => c,
            Err(flow) => return flow,
        };
        let protocols = match self.subscriptions() {
            Ok(p) => p,
            Err(e) => return Flow::Fatal(e),
        };
        let member_id = self.shared.lock().member_id.clone();
        let join_sent = Instant::now();
        let join_suspended = self.shared.suspended();
        self.shared.joining.store(true, Ordering::Release);
        let joined = requests::join(
            &self.cluster,
            coordinator,
            &JoinParams {
                group: &self.config.group_id,
                member_id: &member_id,
                instance_id: self.config.instance_id.as_deref(),
                session_timeout: self.config.session_timeout,
                rebalance_timeout: self.config.max_poll_interval,
                protocols,
            },
        )
        .await;
        self.stop_heartbeat();
        self.shared.joining.store(false, Ordering::Release);
        drop(rebalancing);
        let joined = match joined {
            Ok(j) => j,
            Err(e) => return self.on_client_error("JoinGroup", &e),
        };
        if joined.error_code == codes::MEMBER_ID_REQUIRED {
            // KIP-394: keep the id the coordinator gave, rejoin at once.
            self.shared.lock().member_id = joined.member_id.to_string();
            return Flow::Rejoin(Duration::ZERO);
        }
        if joined.error_code != codes::NONE {
            return self.on_code(joined.error_code).await;
        }
        let generation = joined.generation_id;
        let member_id = joined.member_id.to_string();
        {
            let mut id = self.shared.lock();
            id.generation = generation;
            id.member_id = member_id.clone();
        }
        // The coordinator waits for the SyncGroup no longer than the
        // rebalance timeout, and a new rebalance may start right after it:
        // min(session, rebalance) - margin (`lease_span`).
        let span = self.config.lease_span();
        self.shared
            .extend_lease(generation, join_sent + span, join_suspended);
        let protocol_name = joined
            .protocol_name
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_default();
        let is_leader = joined.leader == joined.member_id && !joined.skip_assignment;
        let assignments = if is_leader {
            let custom = self.config.custom_assignor.as_ref().map(|c| &*c.0);
            match super::leader::assign(&self.cluster, &joined, custom).await {
                Ok(a) => a,
                Err(AssignError::Group(
                    e @ GroupError::Client {
                        retriable: true, ..
                    },
                )) => {
                    tracing::warn!(group = %self.config.group_id, generation, error = %e, "the assignor failed: joining again");
                    return Flow::Rejoin(self.backoff);
                }
                Err(AssignError::Metadata(e)) if e.is_network() || e.is_retriable() => {
                    // Java's leader works from cached metadata and retries
                    // a failed join; a Metadata request lost in a broker
                    // restart must not stop the member for good. The join
                    // is retried; the coordinator answers a known member's
                    // JoinGroup in CompletingRebalance with the same
                    // generation, so the leader assigns again.
                    tracing::warn!(group = %self.config.group_id, generation, error = %e, "the leader's Metadata request failed: joining again");
                    return Flow::Rejoin(self.backoff);
                }
                Err(AssignError::Metadata(e)) => {
                    return Flow::Fatal(client_error("Metadata for the leader's assignment", &e));
                }
                Err(AssignError::Group(e)) => return Flow::Fatal(e),
            }
        } else {
            Vec::new()
        };
        tracing::info!(group = %self.config.group_id, generation, member = %member_id, leader = is_leader, "joined");
        let sync_sent = Instant::now();
        let sync_suspended = self.shared.suspended();
        let synced = requests::sync(
            &self.cluster,
            coordinator,
            SyncParams {
                group: &self.config.group_id,
                member_id: &member_id,
                instance_id: self.config.instance_id.as_deref(),
                generation,
                protocol_name: &protocol_name,
                assignments,
                rebalance_timeout: self.config.max_poll_interval,
            },
        )
        .await;
        let synced = match synced {
            Ok(s) => s,
            Err(e) => return self.on_client_error("SyncGroup", &e),
        };
        if synced.error_code != codes::NONE {
            return self.on_code(synced.error_code).await;
        }
        let (assigned, user_data) = match decode_assignment(&synced.assignment) {
            Ok(a) => a,
            Err(e) => return Flow::Fatal(e),
        };
        if let Some(custom) = &self.config.custom_assignor {
            let assignment = crate::assignor::custom::MemberAssignment {
                partitions: assigned.clone(),
                user_data,
            };
            custom.0.on_assignment(&assignment, generation);
        }
        self.shared
            .extend_lease(generation, sync_sent + span, sync_suspended);
        self.generation = generation;
        self.heartbeat = Some(tokio::spawn(
            Heartbeat {
                cluster: self.cluster.clone(),
                shared: Arc::clone(&self.shared),
                config: self.config.clone(),
                generation,
                member_id,
                synced_at: sync_sent,
                outcomes: self.outcomes_tx.clone(),
            }
            .run(),
        ));
        self.apply(assigned, eager, generation).await
    }

    async fn apply(
        &mut self,
        assigned: BTreeSet<TopicPartition>,
        eager: bool,
        generation: i32,
    ) -> Flow {
        let owned = self.shared.lock().owned.clone();
        let revoked: BTreeSet<TopicPartition> = owned.difference(&assigned).cloned().collect();
        let added: BTreeSet<TopicPartition> = assigned.difference(&owned).cloned().collect();
        if !eager {
            // KIP-429: give up what moves, then rejoin so its new owner
            // can get it in the next round.
            self.revoke(revoked.clone()).await;
        }
        let term = {
            let mut id = self.shared.lock();
            if id.generation != generation {
                // The heartbeat task was told this member is out while the
                // revocation waited: nothing is added, and the outcome
                // waiting in `stable` loses what is left.
                return Flow::Stable;
            }
            id.owned.extend(added.iter().cloned());
            id.lease_term
        };
        // The event's gate is of the lease this assignment was made under,
        // read with the generation check: a loss after this point closes
        // it, whatever the member joins next (review F2).
        self.emit(AssignmentEvent::Assigned {
            partitions: added.into_iter().collect(),
            generation,
            gate: Shared::gate_of_term(&self.shared, term),
        })
        .await;
        if !eager && !revoked.is_empty() {
            return Flow::Rejoin(Duration::ZERO);
        }
        Flow::Stable
    }

    async fn stable(&mut self, commands: &mut mpsc::UnboundedReceiver<Command>) -> Flow {
        let generation = self.generation;
        loop {
            tokio::select! {
                // Commands first: a refused commit's code, queued while a
                // revocation waited for its ack, is the cause, and the
                // self-fence its ended lease then triggers in the
                // heartbeat task only the consequence (a fenced instance
                // must stop, not rejoin).
                biased;
                command = commands.recv() => match command {
                    Some(Command::Close { mode, done }) => return Flow::Close(mode, done),
                    Some(Command::GroupError { generation: sent_with, code }) => {
                        if sent_with == generation {
                            return self.on_code(code).await;
                        }
                    }
                    Some(Command::Rejoin) => {
                        tracing::info!(group = %self.config.group_id, generation, "rebalance requested by the application");
                        return Flow::Rejoin(Duration::ZERO);
                    }
                    None => return Flow::Close(ShutdownMode::Default, oneshot::channel().0),
                },
                outcome = self.outcomes.recv() => {
                    let Some(outcome) = outcome else { continue };
                    if outcome.generation != generation {
                        continue;
                    }
                    return match outcome.kind {
                        OutcomeKind::Code(code) => self.on_code(code).await,
                        OutcomeKind::SelfFenced => {
                            tracing::warn!(group = %self.config.group_id, generation, "no heartbeat got through within the session timeout: fencing self");
                            self.shared.lock().generation = NO_GENERATION;
                            self.lose_all("self-fenced").await;
                            Flow::Rejoin(Duration::ZERO)
                        }
                        OutcomeKind::PollTimeout => self.leave_after_poll_timeout(commands).await,
                    };
                }
            }
        }
    }

    /// `max.poll.interval.ms` passed without a poll: a dynamic member
    /// leaves (as Java's does) and rejoins on the next poll. A static
    /// member sends no LeaveGroup (KIP-345) but, like Java's
    /// (`resetGenerationOnLeaveGroup`), gives up its generation and member
    /// id and stops heartbeating, so the coordinator expires it after the
    /// session timeout; it rejoins on the next poll too.
    async fn leave_after_poll_timeout(
        &mut self,
        commands: &mut mpsc::UnboundedReceiver<Command>,
    ) -> Flow {
        let is_static = self.config.instance_id.is_some();
        tracing::warn!(group = %self.config.group_id, is_static, "not polled within max.poll.interval.ms: leaving the group");
        // The coordinator may rebalance the moment it reads the LeaveGroup
        // (or, for a static member, once the session the stopped heartbeats
        // no longer renew expires): the lease (and the generation) end
        // before it is sent. The Lost
        // event follows the leave, so a full event queue (the application
        // is not polling) cannot hold the LeaveGroup back.
        self.stop_heartbeat();
        let owned = self.shared.drop_ownership();
        if !is_static {
            self.leave().await;
        }
        self.shared.lock().member_id.clear();
        self.report_lost(owned, "max.poll.interval.ms").await;
        let left_at = Instant::now();
        let next_poll = async {
            // A permit stored by an earlier poll does not count.
            while self.shared.lock().last_poll <= left_at {
                self.shared.polled.notified().await;
            }
        };
        tokio::pin!(next_poll);
        // Only a poll (the application read the Lost event, or will) or a
        // close ends the wait: a rejoin asked for or a commit's error must
        // not bring back a member whose application has not seen it lost
        // its partitions.
        loop {
            tokio::select! {
                _ = &mut next_poll => return Flow::Rejoin(Duration::ZERO),
                c = commands.recv() => match c {
                    Some(Command::Close { mode, done }) => return Flow::Close(mode, done),
                    Some(Command::Rejoin | Command::GroupError { .. }) => {}
                    None => return Flow::Close(ShutdownMode::Default, oneshot::channel().0),
                },
            }
        }
    }

    async fn leave(&mut self) {
        self.stop_heartbeat();
        let member_id = self.shared.lock().member_id.clone();
        if member_id.is_empty() {
            return;
        }
        let group = &self.config.group_id;
        let Ok(coordinator) = self
            .cluster
            .find_coordinator(CoordinatorKind::Group, group)
            .await
        else {
            return;
        };
        match requests::leave(
            &self.cluster,
            coordinator,
            group,
            &member_id,
            self.config.instance_id.as_deref(),
        )
        .await
        {
            Ok(0) => tracing::info!(group, member = %member_id, "left the group"),
            Ok(code) => tracing::info!(group, code, "LeaveGroup refused"),
            Err(e) => tracing::info!(group, error = %e, "LeaveGroup failed"),
        }
    }

    async fn close(&mut self, mode: ShutdownMode) {
        // The lease and the generation end before the LeaveGroup, which
        // lets the coordinator hand the partitions on at once, and no
        // heartbeat answer still in flight can revive them.
        self.stop_heartbeat();
        self.shared.drop_ownership();
        // KIP-345: a static member does not leave on a normal shutdown, so
        // a restart within the session timeout keeps its partitions.
        if mode == ShutdownMode::Planned || self.config.instance_id.is_none() {
            self.leave().await;
        }
    }
}

fn decode_assignment(bytes: &[u8]) -> Result<(BTreeSet<TopicPartition>, Option<bytes::Bytes>)> {
    // A member the leader gave nothing may get no bytes at all.
    if bytes.is_empty() {
        return Ok((BTreeSet::new(), None));
    }
    let (_, assignment) = Assignment::decode(bytes)?;
    let partitions = assignment
        .assigned_partitions
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| TopicPartition::new(t.topic.clone(), *p))
        })
        .collect();
    Ok((partitions, assignment.user_data))
}

/// Hands out commit permits again when dropped: once the JoinGroup is
/// answered, and on every early return (or a join dropped by a close).
struct RebalanceMark(Arc<Shared>);

impl Drop for RebalanceMark {
    fn drop(&mut self) {
        self.0.end_rebalance();
    }
}
