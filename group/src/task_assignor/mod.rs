//! Kafka Streams' high-availability task assignor (KIP-441), as a pure
//! function, with one improvement: the follow-up rebalance that promotes a
//! warmup happens as soon as that warmup has caught up, not only at the next
//! `probing.rebalance.interval.ms`.
//!
//! The steps follow Kafka's `HighAvailabilityTaskAssignor` and `TaskMovement`:
//! 1. place stateful actives in a balanced target (module `placement`);
//! 2. wherever the target client is not caught up on a task but another
//!    client is more caught up, keep the active on a caught-up client this
//!    round and start a warmup on the target, up to `max.warmup.replicas`
//!    (module `movement`);
//! 3. place `num.standby.replicas` standbys per stateful task;
//! 4. spread stateless tasks over the least loaded clients;
//! 5. if any active could not go to its target, ask for a follow-up
//!    rebalance ([`FollowupRebalance`]).
//!
//! Weir's target is sticky where Kafka's is a fresh round-robin: a client
//! keeps its previous actives up to its capacity-proportional quota, and only
//! the excess moves. Adding an instance then moves only the tasks it needs,
//! instead of re-dealing every task (the bouncing behind the 7–85 s of lag per
//! deploy in issue #4). Kafka's target is the same in every round, so a
//! warmup always prepares the task its client will get; Weir's excess is
//! chosen so that the target stays put over a follow-up too (the task a
//! client only runs while another's warmup restores it goes first).
//! Everything iterates over ordered maps, so equal inputs give equal outputs.

mod followup;
mod movement;
mod placement;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use crate::error::{GroupError, Result};

pub use followup::FollowupRebalance;

/// A task: one partition of one subtopology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    /// Subtopology (Kafka's topic group id).
    pub subtopology: u32,
    /// Partition.
    pub partition: u32,
}

impl TaskId {
    /// The task `subtopology_partition`.
    pub fn new(subtopology: u32, partition: u32) -> Self {
        Self {
            subtopology,
            partition,
        }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.subtopology, self.partition)
    }
}

/// What one client (one instance, Kafka's process id) reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientState {
    /// Stream threads; tasks are balanced in proportion to it. At least 1.
    pub capacity: u32,
    /// Tasks the client ran as active in the previous generation. A client is
    /// always caught up on these (Kafka's `LATEST_OFFSET`).
    pub previous_active: BTreeSet<TaskId>,
    /// Tasks the client kept as standby (or warmup) in the previous generation.
    pub previous_standby: BTreeSet<TaskId>,
    /// Changelog lag of the local state of each task (end offsets minus the
    /// client's offsets, summed over the task's changelogs). A task with no
    /// entry has an unknown lag and is never caught up; [`task_lags`] fills
    /// this from the offset sums in a client's subscription as Kafka does.
    pub lags: BTreeMap<TaskId, u64>,
    /// The client's rack (`client.rack`): standbys of a task go to racks
    /// that hold no copy of it yet, where there is one, so that losing a
    /// rack (a zone) does not lose every copy of a task's state.
    pub rack: Option<String>,
    /// The warmups the client restores now (placed by the previous
    /// assignment to move those tasks to it): over quota, a task moves
    /// first to a client warming it up, so the warmup is not retargeted.
    pub warmups: BTreeSet<TaskId>,
}

impl ClientState {
    /// A client with `capacity` threads and no state.
    pub fn new(capacity: u32) -> Self {
        Self {
            capacity,
            previous_active: BTreeSet::new(),
            previous_standby: BTreeSet::new(),
            lags: BTreeMap::new(),
            rack: None,
            warmups: BTreeSet::new(),
        }
    }
}

/// The assignor's input.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskAssignmentInput {
    /// Clients by process id.
    pub clients: BTreeMap<String, ClientState>,
    /// Tasks with state stores (changelogged).
    pub stateful_tasks: BTreeSet<TaskId>,
    /// Tasks without state.
    pub stateless_tasks: BTreeSet<TaskId>,
}

/// The configuration that shapes the assignment (Kafka Streams names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskAssignorConfig {
    /// `acceptable.recovery.lag`: a client this close to the changelog end
    /// is caught up. Default 10,000.
    pub acceptable_recovery_lag: u64,
    /// `num.standby.replicas`. Default 0.
    pub num_standby_replicas: u32,
    /// `max.warmup.replicas`: warmups in the whole group. Default 2, at least 1.
    pub max_warmup_replicas: u32,
    /// `probing.rebalance.interval.ms`: the fallback follow-up delay.
    /// Default 10 minutes.
    pub probing_rebalance_interval: Duration,
}

impl Default for TaskAssignorConfig {
    fn default() -> Self {
        Self {
            acceptable_recovery_lag: 10_000,
            num_standby_replicas: 0,
            max_warmup_replicas: 2,
            probing_rebalance_interval: Duration::from_secs(600),
        }
    }
}

/// One client's tasks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientAssignment {
    /// Tasks to process.
    pub active: BTreeSet<TaskId>,
    /// Hot standbys to keep restoring.
    pub standby: BTreeSet<TaskId>,
    /// Warmups: standbys placed to take over an active once caught up.
    pub warmup: BTreeSet<TaskId>,
}

impl ClientAssignment {
    /// Whether the client holds `task` in any role.
    pub fn holds(&self, task: &TaskId) -> bool {
        self.active.contains(task) || self.standby.contains(task) || self.warmup.contains(task)
    }
}

/// The assignor's output.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskAssignment {
    /// Tasks of every client (clients with nothing are present and empty).
    pub clients: BTreeMap<String, ClientAssignment>,
    /// Set when some active is not yet where the balanced target wants it.
    pub followup: Option<FollowupRebalance>,
}

/// How far a client is from a task's changelog end, best first. Every
/// caught-up rank is below every lagging rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LagRank {
    /// Runs the task as active now.
    Running,
    /// Has local state this many offsets behind.
    Behind(u64),
    /// Has no local state.
    NoState,
}

pub(crate) fn lag_rank(client: &ClientState, task: &TaskId) -> LagRank {
    if client.previous_active.contains(task) {
        LagRank::Running
    } else {
        client
            .lags
            .get(task)
            .map_or(LagRank::NoState, |&l| LagRank::Behind(l))
    }
}

pub(crate) fn caught_up(rank: LagRank, acceptable_recovery_lag: u64) -> bool {
    match rank {
        LagRank::Running => true,
        LagRank::Behind(l) => l <= acceptable_recovery_lag,
        LagRank::NoState => false,
    }
}

/// The offset sum a client reports for a task it runs as active (Kafka's
/// `Task.LATEST_OFFSET`).
pub const OFFSET_SUM_RUNNING: i64 = -2;

/// Per-task lags of one client from the changelog end-offset sums and the
/// offset sums the client reported, as Kafka's `ClientState.computeTaskLags`:
/// - a task the client reported nothing for lags by the whole end sum (it
///   would restore from scratch, which is cheap for a small changelog);
/// - a sum above the end (corrupt or from a deleted topic) also lags by the
///   whole end sum;
/// - running actives ([`OFFSET_SUM_RUNNING`]) and other negative (unknown)
///   sums get no entry: running is expressed by
///   [`ClientState::previous_active`], unknown is never caught up.
pub fn task_lags(
    end_offset_sums: &BTreeMap<TaskId, u64>,
    offset_sums: &BTreeMap<TaskId, i64>,
) -> BTreeMap<TaskId, u64> {
    end_offset_sums
        .iter()
        .filter_map(|(task, &end)| match offset_sums.get(task).copied() {
            None => Some((*task, end)),
            Some(sum) if sum < 0 => None,
            Some(sum) => {
                let sum = sum as u64;
                Some((*task, if sum > end { end } else { end - sum }))
            }
        })
        .collect()
}

/// Assigns tasks to clients.
///
/// # Errors
/// [`GroupError::InvalidConfig`] for a client of capacity 0, a
/// `max_warmup_replicas` of 0 (no warmup could ever move a task), or a task
/// listed as both stateful and stateless.
pub fn assign(input: &TaskAssignmentInput, config: &TaskAssignorConfig) -> Result<TaskAssignment> {
    validate(input, config)?;
    let mut clients: BTreeMap<String, ClientAssignment> = input
        .clients
        .keys()
        .map(|c| (c.clone(), ClientAssignment::default()))
        .collect();
    if clients.is_empty() {
        return Ok(TaskAssignment::default());
    }
    let target = placement::stateful_target(input);
    let moves = movement::apply(input, config, &target);
    for (task, client) in &moves.active {
        if let Some(c) = clients.get_mut(client) {
            c.active.insert(*task);
        }
    }
    for (client, tasks) in &moves.warmups {
        if let Some(c) = clients.get_mut(client) {
            c.warmup.extend(tasks.iter().copied());
        }
    }
    placement::standbys(input, config, &mut clients);
    placement::stateless(input, &mut clients);

    let followup = (moves.pending > 0).then(|| FollowupRebalance {
        warmups: moves.warmups.clone(),
        acceptable_recovery_lag: config.acceptable_recovery_lag,
        probing_interval: config.probing_rebalance_interval,
    });
    tracing::info!(
        clients = clients.len(),
        stateful = input.stateful_tasks.len(),
        stateless = input.stateless_tasks.len(),
        pending_moves = moves.pending,
        warmups = moves.warmups.values().map(BTreeSet::len).sum::<usize>(),
        "task assignment computed"
    );
    Ok(TaskAssignment { clients, followup })
}

fn validate(input: &TaskAssignmentInput, config: &TaskAssignorConfig) -> Result<()> {
    if config.max_warmup_replicas == 0 {
        return Err(GroupError::InvalidConfig(
            "max.warmup.replicas must be at least 1".into(),
        ));
    }
    if let Some((id, _)) = input.clients.iter().find(|(_, c)| c.capacity == 0) {
        return Err(GroupError::InvalidConfig(format!(
            "client {id} has capacity 0"
        )));
    }
    if let Some(task) = input
        .stateful_tasks
        .intersection(&input.stateless_tasks)
        .next()
    {
        return Err(GroupError::InvalidConfig(format!(
            "task {task} is listed as both stateful and stateless"
        )));
    }
    Ok(())
}
