//! What an instance knows about each task it holds or has held, for
//! operators: its state, its lag, its restore's progress and who owned it
//! when ([`KafkaStreams::tasks`](super::KafkaStreams::tasks)).
//!
//! The workers, restores, standbys and the instance write here as things
//! happen; a reader takes a snapshot. Nothing here takes part in processing.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use weir_client::admin::{Admin, OffsetSpec};

use crate::task::TaskId;

/// How many ownership entries are kept per task (the oldest go first).
pub const HISTORY_LIMIT: usize = 64;

/// How often the end offsets of the running tasks' inputs are read.
pub(crate) const END_REFRESH: Duration = Duration::from_secs(1);

/// What a task is on this instance now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaskState {
    /// Active here, its stores being brought up to their changelogs.
    Restoring,
    /// Active here and processing.
    Running,
    /// A standby replica kept here.
    Standby,
    /// A warmup kept here: a standby the assignor placed so that the task
    /// can move here once it has caught up.
    Warmup,
    /// Not held here any more; listed for its ownership history.
    Released,
}

/// How a task was held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Processing (restoring first).
    Active,
    /// A standby replica.
    Standby,
    /// A warmup replica.
    Warmup,
}

/// The progress of an active task's restore.
#[derive(Debug, Clone, PartialEq)]
pub struct RestoreProgress {
    /// Changelog records applied since the restore began.
    pub restored: u64,
    /// Changelog offsets left to the ends read when each store's restore
    /// began (transaction markers count).
    pub remaining: u64,
    /// `restored` per second since the restore began, on tokio's clock;
    /// `None` while no time has passed.
    pub records_per_sec: Option<f64>,
    /// How long the restore has run.
    pub elapsed: Duration,
}

/// One holding of a task by this instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    /// The instance's `client.id`.
    pub client_id: String,
    /// The instance's process id (kept in its state directory).
    pub process_id: String,
    /// The worker (stream thread) an active task ran on; `None` for a
    /// standby or warmup.
    pub worker: Option<usize>,
    /// As what it was held.
    pub role: Role,
    /// The group generation it was assigned in.
    pub generation: i32,
    /// The generation it was released in; `None` while held.
    pub released_generation: Option<i32>,
    /// When it was assigned, on tokio's clock (comparable between the
    /// instances of one process, exact under a paused clock).
    pub acquired_at: Instant,
    /// When it was released (closed, its commit done); `None` while held.
    pub released_at: Option<Instant>,
    /// `acquired_at` as wall-clock milliseconds since the epoch: the
    /// instance's start on the system clock plus tokio's time since, for
    /// display (under a paused clock only `acquired_at` compares between
    /// instances).
    pub acquired_at_ms: i64,
    /// `released_at` as wall-clock milliseconds since the epoch.
    pub released_at_ms: Option<i64>,
}

/// One task as this instance sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskInfo {
    /// The task.
    pub id: TaskId,
    /// What it is here now.
    pub state: TaskState,
    /// Records not yet taken in: for a running task, its input partitions'
    /// end offsets (the last stable offset under exactly-once) minus its
    /// positions, refreshed every second; for a restoring, standby or
    /// warmup task, its changelogs' end minus its stores' offsets. `None`
    /// while not known yet, and for a released task.
    pub lag: Option<u64>,
    /// The restore's progress while the task is restoring.
    pub restore: Option<RestoreProgress>,
    /// The holdings of the task here, oldest first (at most
    /// [`HISTORY_LIMIT`]).
    pub history: Vec<Ownership>,
}

struct Restore {
    began: Instant,
    restored: u64,
}

struct Entry {
    state: TaskState,
    /// Running: the next offset to process per input partition.
    positions: BTreeMap<(String, i32), i64>,
    /// Running: the input partitions' end offsets, as last read.
    ends: BTreeMap<(String, i32), i64>,
    /// Restoring or following: changelog offsets left per store.
    changelog_left: BTreeMap<String, u64>,
    restore: Option<Restore>,
    history: VecDeque<Ownership>,
}

impl Entry {
    fn new() -> Entry {
        Entry {
            state: TaskState::Released,
            positions: BTreeMap::new(),
            ends: BTreeMap::new(),
            changelog_left: BTreeMap::new(),
            restore: None,
            history: VecDeque::new(),
        }
    }

    fn clear_progress(&mut self) {
        self.positions.clear();
        self.ends.clear();
        self.changelog_left.clear();
        self.restore = None;
    }

    fn lag(&self) -> Option<u64> {
        match self.state {
            TaskState::Released => None,
            TaskState::Running => {
                let mut lag = 0u64;
                for (tp, position) in &self.positions {
                    let end = self.ends.get(tp)?;
                    lag = lag.saturating_add(u64::try_from(end - position).unwrap_or(0));
                }
                (!self.positions.is_empty()).then_some(lag)
            }
            TaskState::Restoring | TaskState::Standby | TaskState::Warmup => {
                (!self.changelog_left.is_empty()).then(|| self.changelog_left.values().sum())
            }
        }
    }

    fn progress(&self) -> Option<RestoreProgress> {
        if self.state != TaskState::Restoring {
            return None;
        }
        let r = self.restore.as_ref()?;
        let elapsed = r.began.elapsed();
        let secs = elapsed.as_secs_f64();
        Some(RestoreProgress {
            restored: r.restored,
            remaining: self.changelog_left.values().sum(),
            records_per_sec: (secs > 0.0).then(|| r.restored as f64 / secs),
            elapsed,
        })
    }
}

/// The instance's task board.
pub(crate) struct TaskBoard {
    client_id: String,
    process_id: String,
    started: Instant,
    started_wall_ms: i64,
    entries: Mutex<BTreeMap<TaskId, Entry>>,
}

impl TaskBoard {
    pub(crate) fn new(client_id: String, process_id: String, started_wall_ms: i64) -> TaskBoard {
        TaskBoard {
            client_id,
            process_id,
            started: Instant::now(),
            started_wall_ms,
            entries: Mutex::new(BTreeMap::new()),
        }
    }

    fn with<R>(&self, task: TaskId, f: impl FnOnce(&mut Entry) -> R) -> R {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        f(entries.entry(task).or_insert_with(Entry::new))
    }

    fn wall_ms(&self, at: Instant) -> i64 {
        let since = i64::try_from(at.saturating_duration_since(self.started).as_millis())
            .unwrap_or(i64::MAX);
        self.started_wall_ms.saturating_add(since)
    }

    /// `task` is held here from now on, as `role` (an active task on
    /// `worker`), assigned in `generation`. A role already held stays one
    /// entry; a standby turning warmup (or back) changes its state only.
    pub(crate) fn acquired(
        &self,
        task: TaskId,
        role: Role,
        worker: Option<usize>,
        generation: i32,
    ) {
        let now = Instant::now();
        let now_ms = self.wall_ms(now);
        self.with(task, |e| {
            let held = e.history.iter().rev().find(|o| o.released_at.is_none());
            let same_kind = |a: Role, b: Role| (a == Role::Active) == (b == Role::Active);
            match held {
                Some(o) if same_kind(o.role, role) => {}
                _ => {
                    if e.history.len() >= HISTORY_LIMIT {
                        e.history.pop_front();
                    }
                    e.history.push_back(Ownership {
                        client_id: self.client_id.clone(),
                        process_id: self.process_id.clone(),
                        worker,
                        role,
                        generation,
                        released_generation: None,
                        acquired_at: now,
                        released_at: None,
                        acquired_at_ms: now_ms,
                        released_at_ms: None,
                    });
                    e.clear_progress();
                }
            }
            e.state = match role {
                Role::Active if e.state == TaskState::Running => TaskState::Running,
                Role::Active => TaskState::Restoring,
                Role::Standby => TaskState::Standby,
                Role::Warmup => TaskState::Warmup,
            };
        });
    }

    /// `task`'s holding as an active task (`active`) or a replica ended in
    /// `generation`.
    pub(crate) fn released(&self, task: TaskId, active: bool, generation: i32) {
        let now = Instant::now();
        let now_ms = self.wall_ms(now);
        self.with(task, |e| {
            let mut closed = false;
            for o in e.history.iter_mut().filter(|o| o.released_at.is_none()) {
                if (o.role == Role::Active) == active {
                    o.released_at = Some(now);
                    o.released_at_ms = Some(now_ms);
                    o.released_generation = Some(generation);
                    closed = true;
                }
            }
            if closed {
                // A replica still held (a task revoked after its standby
                // was assigned) keeps the task listed as that replica.
                e.state = match e.history.iter().rev().find(|o| o.released_at.is_none()) {
                    Some(o) if o.role == Role::Standby => TaskState::Standby,
                    Some(o) if o.role == Role::Warmup => TaskState::Warmup,
                    Some(_) => e.state,
                    None => TaskState::Released,
                };
                e.clear_progress();
            }
        });
    }

    /// An active task's restore begins (again, after a restart).
    pub(crate) fn restore_began(&self, task: TaskId) {
        self.with(task, |e| {
            if e.state == TaskState::Released {
                return;
            }
            e.state = TaskState::Restoring;
            e.clear_progress();
            e.restore = Some(Restore {
                began: Instant::now(),
                restored: 0,
            });
        });
    }

    /// A restore or a standby's catch-up of store `store` applied `applied`
    /// more records and has `left` changelog offsets to go.
    pub(crate) fn changelog_step(&self, task: TaskId, store: &str, applied: u64, left: u64) {
        self.with(task, |e| {
            if e.state == TaskState::Released {
                return;
            }
            e.changelog_left.insert(store.to_owned(), left);
            if let Some(r) = &mut e.restore {
                r.restored = r.restored.saturating_add(applied);
            }
        });
    }

    /// An active task processes from `positions` on.
    pub(crate) fn running(&self, task: TaskId, positions: BTreeMap<(String, i32), i64>) {
        self.with(task, |e| {
            if e.state == TaskState::Released {
                return;
            }
            e.state = TaskState::Running;
            e.clear_progress();
            e.positions = positions;
        });
    }

    /// A running task's next offsets to process.
    pub(crate) fn positions(&self, task: TaskId, positions: BTreeMap<(String, i32), i64>) {
        self.with(task, |e| {
            if e.state == TaskState::Running {
                e.positions.extend(positions);
            }
        });
    }

    /// The input partitions of the running tasks.
    fn running_inputs(&self) -> Vec<(TaskId, Vec<(String, i32)>)> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .iter()
            .filter(|(_, e)| e.state == TaskState::Running)
            .map(|(t, e)| (*t, e.positions.keys().cloned().collect()))
            .collect()
    }

    fn set_ends(
        &self,
        ends: &BTreeMap<(String, i32), i64>,
        tasks: &[(TaskId, Vec<(String, i32)>)],
    ) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        for (task, inputs) in tasks {
            if let Some(e) = entries.get_mut(task)
                && e.state == TaskState::Running
            {
                for tp in inputs {
                    if let Some(end) = ends.get(tp) {
                        e.ends.insert(tp.clone(), *end);
                    }
                }
            }
        }
    }

    /// Reads the end offsets of the running tasks' inputs once.
    pub(crate) async fn refresh_ends(&self, admin: &Admin, read_committed: bool) {
        let tasks = self.running_inputs();
        let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (_, inputs) in &tasks {
            for (topic, partition) in inputs {
                let ps = by_topic.entry(topic.clone()).or_default();
                if !ps.contains(partition) {
                    ps.push(*partition);
                }
            }
        }
        let mut ends = BTreeMap::new();
        for (topic, partitions) in by_topic {
            match admin
                .list_offsets(&topic, &partitions, OffsetSpec::Latest, read_committed)
                .await
            {
                Ok(listed) => {
                    for (partition, o) in partitions.iter().zip(listed) {
                        ends.insert((topic.clone(), *partition), o.offset);
                    }
                }
                Err(e) => {
                    tracing::debug!(topic = %topic, error = %e, "reading input end offsets for the task lags")
                }
            }
        }
        self.set_ends(&ends, &tasks);
    }

    /// Every task held now or before, by id.
    pub(crate) fn snapshot(&self) -> Vec<TaskInfo> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .iter()
            .map(|(id, e)| TaskInfo {
                id: *id,
                state: e.state,
                lag: e.lag(),
                restore: e.progress(),
                history: e.history.iter().cloned().collect(),
            })
            .collect()
    }
}

/// A view of an instance's tasks that outlives the instance (after
/// [`close`](super::KafkaStreams::close), its ownership history stays
/// readable here).
#[derive(Clone)]
pub struct TaskMonitor(pub(crate) Arc<TaskBoard>);

impl std::fmt::Debug for TaskMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskMonitor")
            .field("client_id", &self.0.client_id)
            .finish_non_exhaustive()
    }
}

impl TaskMonitor {
    /// As [`KafkaStreams::tasks`](super::KafkaStreams::tasks).
    pub fn tasks(&self) -> Vec<TaskInfo> {
        self.0.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board() -> TaskBoard {
        TaskBoard::new("c".into(), "p".into(), 0)
    }

    #[tokio::test(start_paused = true)]
    async fn a_restores_progress_and_rate_are_counted_on_tokios_clock() {
        let b = board();
        let t = TaskId::new(0, 1);
        b.acquired(t, Role::Active, Some(0), 3);
        b.restore_began(t);
        b.changelog_step(t, "counts", 0, 1_000);
        let first = b.snapshot()[0].clone();
        assert_eq!(first.state, TaskState::Restoring);
        let r = first.restore.unwrap();
        assert_eq!(
            (r.restored, r.remaining, r.records_per_sec),
            (0, 1_000, None)
        );
        assert_eq!(first.lag, Some(1_000));
        tokio::time::sleep(Duration::from_secs(2)).await;
        b.changelog_step(t, "counts", 300, 700);
        let r = b.snapshot()[0].restore.clone().unwrap();
        assert_eq!((r.restored, r.remaining), (300, 700));
        assert_eq!(r.records_per_sec, Some(150.0));
        assert_eq!(r.elapsed, Duration::from_secs(2));
        b.running(t, BTreeMap::from([(("in".to_owned(), 1), 40)]));
        let running = b.snapshot()[0].clone();
        assert_eq!(running.state, TaskState::Running);
        assert_eq!(running.restore, None);
        // No end offset read yet: the lag is unknown, not 0.
        assert_eq!(running.lag, None);
        b.set_ends(
            &BTreeMap::from([(("in".to_owned(), 1), 100)]),
            &[(t, vec![("in".to_owned(), 1)])],
        );
        assert_eq!(b.snapshot()[0].lag, Some(60));
        b.positions(t, BTreeMap::from([(("in".to_owned(), 1), 100)]));
        assert_eq!(b.snapshot()[0].lag, Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn the_history_keeps_the_last_entries_and_one_per_holding() {
        let b = board();
        let t = TaskId::new(1, 0);
        for generation in 0..100 {
            b.acquired(t, Role::Standby, None, generation);
            // A standby turning warmup is the same holding.
            b.acquired(t, Role::Warmup, None, generation);
            b.released(t, false, generation);
            b.acquired(t, Role::Active, Some(1), generation);
            b.acquired(t, Role::Active, Some(1), generation);
            b.released(t, true, generation + 1);
        }
        let info = b.snapshot()[0].clone();
        assert_eq!(info.state, TaskState::Released);
        // An active holding that ends while a standby of the task is held
        // leaves the task listed as the standby.
        let u = TaskId::new(2, 0);
        b.acquired(u, Role::Active, Some(0), 1);
        b.acquired(u, Role::Standby, None, 2);
        b.released(u, true, 2);
        let listed = b.snapshot().into_iter().find(|i| i.id == u).unwrap();
        assert_eq!(listed.state, TaskState::Standby, "{listed:?}");
        assert_eq!(listed.history.len(), 2);
        assert_eq!(info.history.len(), HISTORY_LIMIT);
        let last = info.history.last().unwrap();
        assert_eq!(last.role, Role::Active);
        assert_eq!((last.generation, last.released_generation), (99, Some(100)));
        assert!(info.history.iter().all(|o| o.released_at.is_some()));
    }
}
