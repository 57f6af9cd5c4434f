//! The instance: its group member's events become tasks on workers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use weir_group::assignor::TopicPartition as GroupPartition;
use weir_group::member::{AssignmentEvent, GroupMember, ShutdownMode};

use super::board::Role;
use super::standby::Standby;
use super::worker::{Worker, WorkerCommand, WorkerReport};
use super::{Runtime, State};
use crate::config::ProcessingErrorHandling;
use crate::error::{Result, StreamsError};
use crate::task::TaskId;

/// How long a worker may go without a round of its loop before the
/// instance stops polling the group for it. Not polled, the member leaves
/// after `max.poll.interval.ms` as a Kafka Streams thread's consumer would,
/// its lease ends (every worker stops writing) and its tasks move to the
/// other instances; once the worker moves again the instance polls, sees
/// the loss and rejoins (G6: with one member per instance, waiting for the
/// member's events must not count as every worker's progress).
const STALL: Duration = Duration::from_secs(5);

/// The least time between two follow-up rebalances asked for by warmups.
const FOLLOWUP_SPACING: Duration = Duration::from_secs(5);

/// How long a task assigned here may stay withheld (its partitions still
/// owned by its previous member, which revokes them and rejoins) before
/// this instance asks for the follow-up rebalance itself, in heartbeat
/// intervals (at least [`WITHHELD_WAIT_MIN`]): the previous owner's
/// follow-up reaches this member at its next heartbeat after the revoke's
/// commit, so this is only a fallback.
const WITHHELD_WAIT_HEARTBEATS: u32 = 4;
const WITHHELD_WAIT_MIN: Duration = Duration::from_secs(1);

/// Aborts the tasks it holds when dropped: an instance that is dropped or
/// killed takes its workers with it.
struct Workers {
    senders: Vec<mpsc::UnboundedSender<WorkerCommand>>,
    handles: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Workers {
    fn drop(&mut self) {
        for h in &self.handles {
            h.abort();
        }
    }
}

/// The tasks of `partitions`: partition p of a topic read by subtopology s is task s_p.
fn tasks_of(rt: &Runtime, partitions: &[GroupPartition]) -> BTreeMap<TaskId, Vec<GroupPartition>> {
    let mut tasks: BTreeMap<TaskId, Vec<GroupPartition>> = BTreeMap::new();
    for tp in partitions {
        let Some(sub) = rt.topology.subtopology_of(&tp.topic, rt.app()) else {
            tracing::warn!(topic = %tp.topic, "assigned a partition of a topic no subtopology reads");
            continue;
        };
        let in_range = rt.partitions.get(&sub).is_some_and(|n| tp.partition < *n);
        let Ok(partition) = u32::try_from(tp.partition) else {
            continue;
        };
        if !in_range {
            // The topic grew after the start: its task would have no
            // changelog partition. Kafka Streams stops here too.
            tracing::error!(topic = %tp.topic, partition = tp.partition, "assigned a partition beyond the partition count the internal topics were created with");
            continue;
        }
        tasks
            .entry(TaskId::new(sub, partition))
            .or_default()
            .push(tp.clone());
    }
    tasks
}

/// Stops the lag refresher when the instance ends (or is dropped).
struct LagRefresher(tokio::task::JoinHandle<()>);

impl LagRefresher {
    fn abort(&self) {
        self.0.abort();
    }
}

impl Drop for LagRefresher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn refresh_lags(rt: Arc<Runtime>) {
    let admin = weir_client::admin::Admin::new(rt.restore_cluster.clone());
    let read_committed = rt.config.guarantee == crate::config::ProcessingGuarantee::ExactlyOnceV2;
    let mut tick = tokio::time::interval(super::board::END_REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        rt.board.refresh_ends(&admin, read_committed).await;
    }
}

struct Instance {
    rt: Arc<Runtime>,
    workers: Workers,
    /// Which worker runs each owned task.
    placement: BTreeMap<TaskId, usize>,
    state: watch::Sender<State>,
    assigned_once: bool,
    /// Standby replicas (and warmups) kept here.
    standbys: BTreeMap<TaskId, Standby>,
    /// Where standbys report that they reached their changelogs' end, with
    /// the lag left.
    caught_up: mpsc::UnboundedSender<(TaskId, u64)>,
    /// When a warmup last triggered a follow-up rebalance.
    last_followup: Option<tokio::time::Instant>,
    /// The warmups of the current assignment not yet caught up.
    warming: BTreeSet<TaskId>,
    /// When the follow-up rebalance is due in any case (warmups placed).
    probing_at: Option<tokio::time::Instant>,
    /// A follow-up rebalance to ask for once the instance polls.
    rejoin_pending: bool,
    /// Until when tasks assigned here may stay withheld by their previous
    /// owner, and which.
    withheld: Option<(tokio::time::Instant, BTreeSet<TaskId>)>,
    /// A graceful close handing the tasks over: until when, and the
    /// generation it started in.
    draining: Option<(tokio::time::Instant, i32)>,
    /// When the instance last went into `Rebalancing`, for the rebalance
    /// duration metric.
    rebalancing_since: std::cell::Cell<Option<tokio::time::Instant>>,
}

impl Instance {
    /// Keeps the standby replicas of the last assignment, minus the tasks
    /// that run here: a standby promoted to active is stopped (its store
    /// closed) before its task opens the store.
    async fn reconcile_standbys(&mut self, active: &BTreeSet<TaskId>, generation: i32) {
        let assignment = self.rt.assignor.assignment().unwrap_or_default();
        self.warming = assignment.warmup.difference(active).copied().collect();
        self.probing_at = match (self.warming.is_empty(), assignment.probing_ms) {
            (false, Some(ms)) => Some(tokio::time::Instant::now() + Duration::from_millis(ms)),
            _ => None,
        };
        // A warmup is kept the way a standby is.
        let wanted: BTreeSet<TaskId> = assignment
            .standby
            .union(&assignment.warmup)
            .filter(|t| !active.contains(t))
            .copied()
            .collect();
        let gone: Vec<TaskId> = self
            .standbys
            .keys()
            .filter(|t| !wanted.contains(t))
            .copied()
            .collect();
        for task in gone {
            if let Some(standby) = self.standbys.remove(&task) {
                tracing::info!(task = %task, "standby replica released");
                standby.stop().await;
                self.rt.board.released(task, false, generation);
            }
        }
        for task in wanted {
            let role = if assignment.warmup.contains(&task) {
                Role::Warmup
            } else {
                Role::Standby
            };
            self.rt.board.acquired(task, role, None, generation);
            if !self.standbys.contains_key(&task) {
                tracing::info!(task = %task, "standby replica assigned");
                let standby = Standby::start(Arc::clone(&self.rt), task, self.caught_up.clone());
                self.standbys.insert(task, standby);
            }
        }
        *self
            .rt
            .standbys
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = self.standbys.keys().copied().collect();
    }

    async fn stop_standbys(&mut self, generation: i32) {
        for (task, standby) in std::mem::take(&mut self.standbys) {
            standby.stop().await;
            self.rt.board.released(task, false, generation);
        }
        self.rt
            .standbys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Workers that own tasks and have not gone round their loop for
    /// [`STALL`], with how long: one stuck in a processor, or in a commit
    /// that cannot finish.
    fn stalled_workers(&self) -> Vec<(usize, Duration)> {
        let now = self.rt.elapsed_ms();
        let busy: BTreeSet<usize> = self.placement.values().copied().collect();
        busy.into_iter()
            .filter_map(|w| {
                let last = self
                    .rt
                    .progress
                    .get(w)?
                    .load(std::sync::atomic::Ordering::Relaxed);
                let idle = Duration::from_millis(now.saturating_sub(last));
                (idle >= STALL).then_some((w, idle))
            })
            .collect()
    }

    fn publish_tasks(&self) {
        *self.rt.tasks.lock().unwrap_or_else(PoisonError::into_inner) = self.placement.clone();
    }

    fn set_state(&self, state: State) {
        self.state.send_if_modified(|s| {
            let changed = *s != state;
            if changed {
                tracing::info!(application_id = %self.rt.app(), from = ?*s, to = ?state, "state");
                let labels = self.rt.metric_labels();
                match (*s, state) {
                    (_, State::Rebalancing) => {
                        self.rebalancing_since
                            .set(Some(tokio::time::Instant::now()));
                        metrics::counter!("weir_streams_rebalances_total", &labels).increment(1);
                    }
                    (State::Rebalancing, _) => {
                        if let Some(since) = self.rebalancing_since.take() {
                            metrics::histogram!("weir_streams_rebalance_seconds", &labels)
                                .record(since.elapsed().as_secs_f64());
                        }
                    }
                    _ => {}
                }
                *s = state;
            }
            changed
        });
    }

    fn refresh_state(&self) {
        if self.draining.is_some() {
            return;
        }
        let restoring = self
            .rt
            .counters
            .restoring
            .load(std::sync::atomic::Ordering::Relaxed);
        if self.assigned_once && restoring == 0 {
            self.set_state(State::Running);
        } else {
            self.set_state(State::Rebalancing);
        }
    }

    /// New tasks go to the worker with the fewest; a task keeps its worker.
    /// Notes the active tasks of the current assignment whose partitions
    /// were withheld (another member still owned them): if they are still
    /// not here after a few heartbeats, the instance asks for the
    /// follow-up rebalance itself.
    fn note_withheld(&mut self) {
        let assignment = self.rt.assignor.assignment().unwrap_or_default();
        let tasks: BTreeSet<TaskId> = assignment
            .active
            .iter()
            .filter(|t| !self.placement.contains_key(t))
            .copied()
            .collect();
        self.withheld = (!tasks.is_empty()).then(|| {
            let wait = (self.rt.config.heartbeat_interval * WITHHELD_WAIT_HEARTBEATS)
                .max(WITHHELD_WAIT_MIN);
            (tokio::time::Instant::now() + wait, tasks)
        });
    }

    fn assign(&mut self, partitions: &[GroupPartition], generation: i32) {
        let mut per_worker: Vec<Vec<(TaskId, Vec<GroupPartition>)>> =
            vec![Vec::new(); self.workers.senders.len()];
        let mut load = vec![0usize; self.workers.senders.len()];
        for w in self.placement.values() {
            if let Some(l) = load.get_mut(*w) {
                *l += 1;
            }
        }
        for (task, parts) in tasks_of(&self.rt, partitions) {
            let worker = match self.placement.get(&task) {
                Some(w) => *w,
                None => {
                    let w = (0..load.len()).min_by_key(|w| (load[*w], *w)).unwrap_or(0);
                    load[w] += 1;
                    self.placement.insert(task, w);
                    w
                }
            };
            tracing::info!(task = %task, worker, "task assigned");
            self.rt
                .board
                .acquired(task, Role::Active, Some(worker), generation);
            per_worker[worker].push((task, parts));
        }
        for (w, tasks) in per_worker.into_iter().enumerate() {
            if !tasks.is_empty() {
                let _ = self.workers.senders[w].send(WorkerCommand::Add(tasks));
            }
        }
        self.publish_tasks();
    }

    /// Sends `make(tasks, done)` to each worker running some of `tasks` and
    /// waits for all of them.
    async fn each_worker(
        &mut self,
        tasks: BTreeSet<TaskId>,
        make: impl Fn(Vec<TaskId>, oneshot::Sender<()>) -> WorkerCommand,
        generation: i32,
    ) {
        let mut by_worker: BTreeMap<usize, Vec<TaskId>> = BTreeMap::new();
        for t in tasks {
            if let Some(w) = self.placement.remove(&t) {
                by_worker.entry(w).or_default().push(t);
            }
        }
        let by_worker_tasks: Vec<TaskId> = by_worker.values().flatten().copied().collect();
        let mut waits = Vec::new();
        for (w, tasks) in by_worker {
            let (done, wait) = oneshot::channel();
            if self.workers.senders[w].send(make(tasks, done)).is_ok() {
                waits.push(wait);
            }
        }
        for w in waits {
            let _ = w.await;
        }
        for task in by_worker_tasks {
            self.rt.board.released(task, true, generation);
        }
        self.publish_tasks();
    }

    async fn shutdown_workers(&mut self, generation: i32) {
        let mut waits = Vec::new();
        for s in &self.workers.senders {
            let (done, wait) = oneshot::channel();
            if s.send(WorkerCommand::Shutdown(done)).is_ok() {
                waits.push(wait);
            }
        }
        for w in waits {
            let _ = w.await;
        }
        for task in std::mem::take(&mut self.placement).into_keys() {
            self.rt.board.released(task, true, generation);
        }
        self.publish_tasks();
    }
}

/// Runs the instance until it is closed or fails.
pub(crate) async fn run(
    rt: Arc<Runtime>,
    mut member: GroupMember,
    state: watch::Sender<State>,
    mut shutdown: oneshot::Receiver<Duration>,
) -> Result<()> {
    let (report_tx, mut reports) = mpsc::unbounded_channel();
    let mut senders = Vec::new();
    let mut handles = Vec::new();
    for index in 0..rt.config.threads {
        let (tx, rx) = mpsc::unbounded_channel();
        let worker = Worker::new(Arc::clone(&rt), index, report_tx.clone())?;
        senders.push(tx);
        handles.push(tokio::spawn(tracing::Instrument::instrument(
            worker.run(rx),
            tracing::Span::current(),
        )));
    }
    // The end offsets of the running tasks' inputs, for their lags, on the
    // restore connections (never behind a worker's long poll).
    let lags = LagRefresher(tokio::spawn(tracing::Instrument::instrument(
        refresh_lags(Arc::clone(&rt)),
        tracing::Span::current(),
    )));
    let (caught_up, mut caught_up_rx) = mpsc::unbounded_channel();
    let mut instance = Instance {
        rt: Arc::clone(&rt),
        workers: Workers { senders, handles },
        placement: BTreeMap::new(),
        state,
        assigned_once: false,
        standbys: BTreeMap::new(),
        caught_up,
        warming: BTreeSet::new(),
        probing_at: None,
        rejoin_pending: false,
        withheld: None,
        last_followup: None,
        draining: None,
        // An instance starts in Rebalancing: its first join counts.
        rebalancing_since: std::cell::Cell::new(Some(tokio::time::Instant::now())),
    };
    metrics::counter!("weir_streams_rebalances_total", &rt.metric_labels()).increment(1);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stalled_before = false;
    let outcome: Result<()> = loop {
        rt.export_metrics();
        let stalled = instance.stalled_workers();
        if stalled.is_empty() == stalled_before {
            stalled_before = !stalled.is_empty();
            if stalled_before {
                tracing::warn!(application_id = %rt.app(), workers = ?stalled, max_poll_interval = ?rt.config.max_poll_interval, "a stream thread makes no progress: not polling the group, so its member leaves after max.poll.interval.ms and the tasks move");
            } else {
                tracing::info!(application_id = %rt.app(), "every stream thread makes progress again: polling the group");
            }
        }
        let live = !stalled_before;
        // Never while not polling: the member must not rejoin before the
        // instance has read what it lost.
        if live && std::mem::take(&mut instance.rejoin_pending) {
            member.request_rejoin();
        }
        tokio::select! {
            event = member.next_event(), if live => match event {
                Ok(AssignmentEvent::Assigned { partitions, generation, gate }) => {
                    instance.assigned_once = true;
                    let mut active: BTreeSet<TaskId> = instance.placement.keys().copied().collect();
                    active.extend(tasks_of(&rt, &partitions).into_keys());
                    instance.reconcile_standbys(&active, generation).await;
                    // The event's own generation and lease, not the member's
                    // now: it may have lost and rejoined while this event
                    // waited, and the `Lost` behind it is not handled yet
                    // (review F2). Confirmed before the new tasks are given
                    // to the workers, which write only through this gate.
                    rt.confirm(generation, gate);
                    instance.assign(&partitions, generation);
                    instance.note_withheld();
                    instance.refresh_state();
                    if let Some((_, since)) = instance.draining
                        && generation > since
                    {
                        // The first assignment of the draining rejoin: what
                        // moved was revoked (committed, closed) before it.
                        // Done when nothing is left, or when nothing left
                        // waits for a warmup (no follow-up planned).
                        let waiting = rt.assignor.assignment().and_then(|a| a.probing_ms).is_some();
                        if instance.placement.is_empty() || !waiting {
                            tracing::info!(application_id = %rt.app(), left = instance.placement.len(), "handover done: leaving");
                            break Ok(());
                        }
                        tracing::info!(application_id = %rt.app(), left = instance.placement.len(), "handover: tasks wait here for their warmups to catch up");
                    }
                }
                Ok(AssignmentEvent::Revoked(revocation)) => {
                    instance.set_state(State::Rebalancing);
                    let tasks = tasks_of(&rt, &revocation.partitions).into_keys().collect();
                    // Workers commit and close the tasks before the ack lets
                    // the partitions go.
                    instance
                        .each_worker(tasks, WorkerCommand::Revoke, member.generation())
                        .await;
                    revocation.ack();
                }
                Ok(AssignmentEvent::Lost(partitions)) => {
                    instance.set_state(State::Rebalancing);
                    tracing::warn!(application_id = %rt.app(), partitions = partitions.len(), "partitions lost: closing their tasks without committing");
                    let tasks = tasks_of(&rt, &partitions).into_keys().collect();
                    instance
                        .each_worker(tasks, WorkerCommand::Lose, member.generation())
                        .await;
                }
                Err(e) => {
                    tracing::error!(application_id = %rt.app(), error = %e, "group membership failed");
                    break Err(StreamsError::group("group membership", e));
                }
            },
            report = reports.recv() => match report {
                Some(WorkerReport::Failed { worker, error }) => {
                    tracing::error!(worker, error = %error, "stream thread failed");
                    // A configuration the cluster refuses fails on every
                    // thread and every retry: stop, whatever the handler.
                    if matches!(error, StreamsError::InvalidConfig { .. }) {
                        break Err(error);
                    }
                    match rt.config.processing_errors {
                        ProcessingErrorHandling::ShutdownClient => break Err(error),
                        // A replaced thread restarts its tasks from their
                        // last commit itself; nothing to do here.
                        ProcessingErrorHandling::ReplaceThread => {}
                        // The worker marked the record to pass over and
                        // restarts its tasks like a replaced thread.
                        ProcessingErrorHandling::SkipRecord => {}
                    }
                }
                None => {}
            },
            Some((task, lag)) = caught_up_rx.recv() => {
                // The moment a warmup catches up (its lag counted as the
                // leader counts it), the follow-up rebalance: the rejoin
                // carries its new offset sums to the leader. At most one per
                // FOLLOWUP_SPACING, so a leader that still sees a lag (the
                // changelog moved on meanwhile) cannot make a storm of them.
                let spaced = instance
                    .last_followup
                    .is_none_or(|at| at.elapsed() >= FOLLOWUP_SPACING);
                if lag <= rt.config.acceptable_recovery_lag
                    && spaced
                    && instance.warming.remove(&task)
                {
                    instance.last_followup = Some(tokio::time::Instant::now());
                    tracing::info!(application_id = %rt.app(), task = %task, "warmup caught up: asking for the follow-up rebalance");
                    instance.warming.clear();
                    instance.probing_at = None;
                    instance.rejoin_pending = true;
                }
            }
            _ = tick.tick() => {
                if let Some((deadline, _)) = instance.draining
                    && tokio::time::Instant::now() >= deadline
                {
                    tracing::warn!(application_id = %rt.app(), left = instance.placement.len(), "handover timed out: closing the tasks left and leaving");
                    break Ok(());
                }
                instance.refresh_state();
                if let Some((at, tasks)) = instance.withheld.take_if(|(at, _)| tokio::time::Instant::now() >= *at) {
                    // Prevents: a task nobody runs. Its previous owner was to
                    // revoke it and rejoin, and did not: restarted as a
                    // static member, it got its cached assignment (without
                    // the task) and had nothing to revoke, so the follow-up
                    // rebalance that hands the task here never came.
                    tracing::info!(application_id = %rt.app(), tasks = ?tasks, waited = ?at.elapsed(), "tasks assigned here are still withheld by their previous owner: asking for the follow-up rebalance");
                    instance.rejoin_pending = true;
                }
                if instance.probing_at.is_some_and(|at| tokio::time::Instant::now() >= at) {
                    tracing::info!(application_id = %rt.app(), "probing rebalance: warmups did not catch up within probing.rebalance.interval.ms");
                    instance.probing_at = None;
                    instance.rejoin_pending = true;
                }
            }
            closing = &mut shutdown, if instance.draining.is_none() => {
                let budget = closing.unwrap_or_default();
                if budget.is_zero() || instance.placement.is_empty() {
                    break Ok(());
                }
                // Graceful handover: rejoin as draining, so the leader moves
                // the tasks to members caught up on them while this instance
                // goes on processing the rest (rolling deploys, issue 15).
                tracing::info!(application_id = %rt.app(), tasks = instance.placement.len(), budget = ?budget, "closing: handing the tasks over");
                instance.set_state(State::PendingShutdown);
                rt.assignor.draining.store(true, std::sync::atomic::Ordering::Release);
                instance.draining = Some((tokio::time::Instant::now() + budget, member.generation()));
                instance.rejoin_pending = true;
            }
        }
    };
    instance.set_state(State::PendingShutdown);
    // What the member lost while the instance was not reading its events
    // (a stuck worker, a handover that timed out) is closed before the
    // shutdown commits everything left: those tasks' work is another
    // member's now (review F2). The workers' gate refuses that commit
    // anyway; this closes the tasks as lost rather than failing it.
    while let Some(event) = member.try_next_event() {
        match event {
            Ok(AssignmentEvent::Lost(partitions)) => {
                tracing::warn!(application_id = %rt.app(), partitions = partitions.len(), "partitions lost before the shutdown: closing their tasks without committing");
                let tasks = tasks_of(&rt, &partitions).into_keys().collect();
                instance
                    .each_worker(tasks, WorkerCommand::Lose, member.generation())
                    .await;
            }
            Ok(AssignmentEvent::Revoked(revocation)) => {
                let tasks = tasks_of(&rt, &revocation.partitions).into_keys().collect();
                instance
                    .each_worker(tasks, WorkerCommand::Revoke, member.generation())
                    .await;
                revocation.ack();
            }
            // Nothing new starts on an instance that stops.
            Ok(AssignmentEvent::Assigned { .. }) => {}
            Err(_) => break,
        }
    }
    instance.stop_standbys(member.generation()).await;
    instance.shutdown_workers(member.generation()).await;
    lags.abort();
    tracing::debug!(application_id = %rt.app(), "workers stopped; leaving the group");
    // A planned close leaves even as a static member, so the tasks move at
    // once instead of after the session timeout.
    member.close(ShutdownMode::Planned).await;
    instance.set_state(if outcome.is_ok() {
        State::NotRunning
    } else {
        State::Error
    });
    tracing::info!(application_id = %rt.app(), ok = outcome.is_ok(), "streams instance stopped");
    outcome
}
