//! The runtime: [`KafkaStreams`] runs a topology's tasks in the
//! application's consumer group.
//!
//! One instance is **one group member** (not one per thread, as Kafka
//! Streams): the member receives partitions, the instance turns them into
//! tasks and places each task on one of its `num.stream.threads` workers.
//! A worker owns its tasks' stores, its own consumer and producers, and
//! commits; restores run beside the workers, and a task processes only once
//! its stores equal their changelog.
//!
//! Where each guarantee lives:
//! - a member that cannot prove its membership stops writing: the lease
//!   check in `worker.rs` (`Worker::writable`);
//! - a new owner fences the old one at the broker, under at-least-once too:
//!   the per-task fence in `commit.rs`;
//! - a store never holds uncommitted data: `commit.rs` applies staged writes
//!   only after the Kafka transaction committed, and aborts them otherwise.

pub(crate) mod assignor;
mod board;
pub use board::{
    HISTORY_LIMIT, Ownership, RestoreProgress, Role, TaskInfo, TaskMonitor, TaskState,
};
mod commit;
mod global;
mod instance;
mod query;
pub use query::{QueryableKvStore, QueryableWindowStore};
mod restore;
mod standby;
pub(crate) mod topics;
mod worker;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use weir_client::Cluster;
use weir_client::admin::Admin;
use weir_group::member::{GroupMember, MemberConfig};

use crate::config::StreamsConfig;
use crate::error::{Result, StreamsError};
use crate::task::TaskId;
use crate::topology::Topology;

/// The lifecycle of an instance, as Kafka Streams' `KafkaStreams.State`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Built, not started.
    Created,
    /// Joining the group, or restoring tasks it was given.
    Rebalancing,
    /// Every task it owns is processing.
    Running,
    /// `close` was called: committing and leaving.
    PendingShutdown,
    /// Stopped cleanly.
    NotRunning,
    /// Stopped after an error (see [`KafkaStreams::close`]'s result).
    Error,
}

/// Counters an instance keeps, for logs, tests and benches.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) processed: AtomicU64,
    pub(crate) commits: AtomicU64,
    pub(crate) restored: AtomicU64,
    pub(crate) restoring: AtomicU64,
    pub(crate) standby_records: AtomicU64,
}

/// A snapshot of an instance's counters and tasks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Metrics {
    /// Input records processed.
    pub processed: u64,
    /// Commits completed (per worker, per interval).
    pub commits: u64,
    /// Changelog records restored into stores.
    pub restored_records: u64,
    /// Tasks restoring now.
    pub restoring_tasks: u64,
    /// Tasks owned now, with the worker each runs on.
    pub tasks: BTreeMap<TaskId, usize>,
    /// Standby replicas this instance keeps now.
    pub standby_tasks: std::collections::BTreeSet<TaskId>,
    /// Changelog records standby replicas applied.
    pub standby_records: u64,
}

type Published = Mutex<BTreeMap<TaskId, weir_store::TaskStore>>;

/// Puts `task`'s store in `map` (`Some`) or takes it out (`None`).
fn publish(map: &Published, task: TaskId, store: Option<&weir_store::TaskStore>) {
    let mut q = map.lock().unwrap_or_else(PoisonError::into_inner);
    match store {
        Some(s) => {
            q.insert(task, s.clone());
        }
        None => {
            q.remove(&task);
        }
    }
}

/// The assignment the instance has handled last: its generation and the
/// gate of the lease it was made under. Where guarantee 1 meets the event
/// queue (review F2): the member may lose its partitions and rejoin while
/// its `Lost` waits in the queue behind this assignment (the instance busy
/// stopping a standby, or not reading events while a worker is stuck). Its
/// new lease is valid, but it is not this gate's: a worker writes and
/// commits only while this gate is open, so it writes nothing more for the
/// tasks it lost until the instance has closed them and handled the next
/// assignment. A worker also revives suspended tasks, and commits on its
/// interval, only under this generation.
pub(crate) struct Confirmed {
    pub(crate) generation: i32,
    pub(crate) gate: Option<weir_client::producer::SendGate>,
}

/// What every worker of an instance shares.
pub(crate) struct Runtime {
    pub(crate) config: StreamsConfig,
    pub(crate) topology: Topology,
    pub(crate) cluster: Cluster,
    /// Connections of their own for restores, so a restore's fetch never
    /// queues behind a worker's long poll on the same connection.
    pub(crate) restore_cluster: Cluster,
    /// Connections of their own for standbys and warmups: their fetches
    /// wait at the broker for new changelog records (a long poll), and an
    /// active restore on the same connection queued behind them, on the
    /// critical path of a task's move (issue 15: 100-320 ms per store).
    pub(crate) standby_cluster: Cluster,
    pub(crate) lease: weir_group::member::Lease,
    /// Partition count per subtopology.
    pub(crate) partitions: BTreeMap<u32, i32>,
    /// A random id of this instance, kept in the state directory, so a
    /// restarted instance reuses its transactional ids and so aborts its own
    /// leftover transactions at `init_transactions`.
    pub(crate) process_id: String,
    pub(crate) counters: Counters,
    pub(crate) tasks: Mutex<BTreeMap<TaskId, usize>>,
    /// The subtopologies' topics, partition counts and changelogs.
    pub(crate) layout: Vec<assignor::SubLayout>,
    /// This member's assignor: the instance reads its standby tasks there.
    pub(crate) assignor: Arc<assignor::StreamsAssignor>,
    /// Standby replicas kept now.
    pub(crate) standbys: Mutex<std::collections::BTreeSet<TaskId>>,
    /// When each worker last went round its loop (ms since the start): the
    /// instance stops polling the group while one is stuck (G6).
    pub(crate) progress: Vec<AtomicU64>,
    /// The assignment the instance has handled last; see [`Confirmed`].
    pub(crate) confirmed: Mutex<Confirmed>,
    /// Offset sums of the tasks whose state is in the state directory, for
    /// the streams assignor's lags (updated at every store commit).
    pub(crate) offset_sums: Arc<Mutex<BTreeMap<TaskId, i64>>>,
    /// The stores of the tasks running here, for interactive queries
    /// (committed data only).
    pub(crate) queryable: Published,
    /// The stores of the standbys (and warmups) kept here, for queries
    /// that accept stale data (`QueryableKvStore::enable_stale_stores`).
    pub(crate) standby_queryable: Published,
    /// Each task's state, lag, restore progress and ownership history.
    pub(crate) board: Arc<board::TaskBoard>,
    started: tokio::time::Instant,
    started_wall_ms: i64,
}

impl Runtime {
    /// Wall-clock milliseconds, advancing with tokio's clock (so paused-time
    /// tests drive wall-clock punctuation).
    pub(crate) fn wall_clock_ms(&self) -> i64 {
        let elapsed = i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.started_wall_ms.saturating_add(elapsed)
    }

    /// Milliseconds since the instance started, on tokio's clock.
    pub(crate) fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Makes a running task's stores queryable (`Some`), or withdraws them
    /// (`None`) before the task closes, so no query holds a store a closing
    /// task must close.
    pub(crate) fn publish_store(&self, task: TaskId, store: Option<&weir_store::TaskStore>) {
        publish(&self.queryable, task, store);
    }

    /// The same for a standby's stores.
    pub(crate) fn publish_standby_store(
        &self,
        task: TaskId,
        store: Option<&weir_store::TaskStore>,
    ) {
        publish(&self.standby_queryable, task, store);
    }

    /// Records that the instance has handled the assignment of
    /// `generation`, made under the lease `gate` is of.
    pub(crate) fn confirm(&self, generation: i32, gate: weir_client::producer::SendGate) {
        *self
            .confirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Confirmed {
            generation,
            gate: Some(gate),
        };
    }

    /// The generation of the assignment the instance handled last.
    pub(crate) fn confirmed_generation(&self) -> i32 {
        self.confirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .generation
    }

    /// The gate every write and commit of a worker goes through: that of
    /// the assignment the instance handled last (`None` before the first).
    pub(crate) fn write_gate(&self) -> Option<weir_client::producer::SendGate> {
        self.confirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .gate
            .clone()
    }

    /// Records that worker `index` went round its loop.
    pub(crate) fn worker_progressed(&self, index: usize) {
        if let Some(p) = self.progress.get(index) {
            p.store(self.elapsed_ms(), Ordering::Relaxed);
        }
    }

    /// The labels of every metric of this instance: the application id and
    /// the instance (its `group.instance.id`, else its process id).
    pub(crate) fn metric_labels(&self) -> [(&'static str, String); 2] {
        [
            ("application_id", self.config.application_id.clone()),
            (
                "instance",
                self.config
                    .instance_id
                    .clone()
                    .unwrap_or_else(|| self.process_id.clone()),
            ),
        ]
    }

    /// Publishes the instance's counters and task counts through the
    /// `metrics` facade (whatever recorder the application installed, a
    /// Prometheus exporter say), labelled with the application id and the
    /// instance (its `group.instance.id`, else its process id).
    pub(crate) fn export_metrics(&self) {
        let labels = self.metric_labels();
        let c = &self.counters;
        for (name, value) in [
            ("weir_streams_processed_records_total", &c.processed),
            ("weir_streams_commits_total", &c.commits),
            ("weir_streams_restored_records_total", &c.restored),
            ("weir_streams_standby_records_total", &c.standby_records),
        ] {
            metrics::counter!(name, &labels).absolute(value.load(Ordering::Relaxed));
        }
        let count = |m: &Mutex<BTreeMap<TaskId, usize>>| {
            m.lock().unwrap_or_else(PoisonError::into_inner).len() as f64
        };
        let standbys = self
            .standbys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len() as f64;
        metrics::gauge!("weir_streams_active_tasks", &labels).set(count(&self.tasks));
        metrics::gauge!("weir_streams_standby_tasks", &labels).set(standbys);
        metrics::gauge!("weir_streams_restoring_tasks", &labels)
            .set(c.restoring.load(Ordering::Relaxed) as f64);
        // Per task: a released task's gauges go to 0 (the facade cannot
        // remove a series).
        for info in self.board.snapshot() {
            let task_labels = [
                labels[0].clone(),
                labels[1].clone(),
                ("task", info.id.to_string()),
            ];
            metrics::gauge!("weir_streams_task_lag", &task_labels)
                .set(info.lag.unwrap_or(0) as f64);
            metrics::gauge!("weir_streams_restore_remaining_records", &task_labels)
                .set(info.restore.map_or(0, |r| r.remaining) as f64);
        }
    }

    pub(crate) fn app(&self) -> &str {
        &self.config.application_id
    }

    /// Records `task`'s offset sum after a store commit.
    pub(crate) fn note_offset_sum(&self, task: TaskId, store: &weir_store::TaskStore) {
        let Some(sub) = self.layout.iter().find(|s| s.id == task.subtopology) else {
            return;
        };
        let partition = i32::try_from(task.partition).unwrap_or(i32::MAX);
        if let Some(sum) = assignor::offset_sum(store, &sub.changelogs, partition) {
            self.offset_sums
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(task, sum);
        }
    }

    pub(crate) fn task_dir(&self, task: TaskId) -> std::path::PathBuf {
        self.config
            .state_dir
            .join(&self.config.application_id)
            .join(task.to_string())
    }
}

/// A running streams application instance.
///
/// ```no_run
/// # async fn run(topology: weir_streams::Topology) -> weir_streams::Result<()> {
/// use std::time::Duration;
/// use weir_streams::config::StreamsConfig;
/// use weir_streams::runtime::KafkaStreams;
///
/// let config = StreamsConfig::from_properties(&[
///     ("application.id", "wordcount"),
///     ("bootstrap.servers", "127.0.0.1:9092"),
///     ("state.dir", "/var/lib/wordcount"),
/// ])?;
/// let streams = KafkaStreams::start(topology, config).await?;
/// tokio::signal::ctrl_c().await.ok();
/// streams.close(Duration::from_secs(30)).await?;
/// # Ok(()) }
/// ```
pub struct KafkaStreams {
    runtime: Arc<Runtime>,
    state: watch::Receiver<State>,
    /// Asks the instance to close, with how long it may spend handing its
    /// tasks over first.
    shutdown: Option<oneshot::Sender<Duration>>,
    instance: JoinHandle<Result<()>>,
    /// The follower of the global stores, if the topology has any.
    globals: Option<global::GlobalStores>,
}

impl std::fmt::Debug for KafkaStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaStreams")
            .field("application_id", &self.runtime.config.application_id)
            .field("state", &*self.state.borrow())
            .finish_non_exhaustive()
    }
}

/// The offset sums of the task directories already in the state directory
/// (a restarted instance's stores), so the assignor gives their tasks back.
async fn scan_offset_sums(
    config: &StreamsConfig,
    layout: Vec<assignor::SubLayout>,
) -> Result<BTreeMap<TaskId, i64>> {
    let dir = config.state_dir.join(&config.application_id);
    let options = config.store.clone();
    tokio::task::spawn_blocking(move || {
        let mut sums = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return sums;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((s, p)) = name.split_once('_') else {
                continue;
            };
            let (Ok(s), Ok(p)) = (s.parse::<u32>(), p.parse::<u32>()) else {
                continue;
            };
            let Some(sub) = layout.iter().find(|l| l.id == s && !l.changelogs.is_empty())
            else {
                continue;
            };
            match weir_store::TaskStore::open(entry.path(), options.clone()) {
                Ok(store) => {
                    let partition = i32::try_from(p).unwrap_or(i32::MAX);
                    if let Some(sum) = assignor::offset_sum(&store, &sub.changelogs, partition) {
                        sums.insert(TaskId::new(s, p), sum);
                    }
                    if let Err(e) = store.close() {
                        tracing::warn!(task = %name, error = %e, "closing a task store after reading its offsets");
                    }
                }
                // Locked by another instance on this state directory, or
                // unreadable: its tasks are assigned as if it were absent.
                Err(e) => tracing::warn!(task = %name, error = %e, "a task directory's offsets cannot be read"),
            }
        }
        sums
    })
    .await
    .map_err(|e| StreamsError::NotRunning(format!("scanning the state directory: {e}")))
}

fn process_id(config: &StreamsConfig) -> Result<String> {
    let dir = config.state_dir.join(&config.application_id);
    let io = |e: std::io::Error| StreamsError::InvalidConfig {
        property: "state.dir".into(),
        reason: format!("{}: {e}", dir.display()),
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let path = dir.join("process-id");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => Ok(id.trim().to_owned()),
        _ => {
            let id = format!("{:016x}{:016x}", rand_u64(), rand_u64());
            std::fs::write(&path, &id).map_err(io)?;
            Ok(id)
        }
    }
}

/// A random value from the OS's hasher seed: enough for a process id, and
/// no extra dependency.
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

impl KafkaStreams {
    /// Checks the topics (creating the internal ones), joins the group and
    /// starts the workers. It returns once the instance is running in the
    /// background; [`state`](Self::state) tells when its tasks are restored.
    ///
    /// # Errors
    ///
    /// An invalid config, a missing input topic, an internal topic with the
    /// wrong partition count or cleanup policy, or an unreachable cluster.
    pub async fn start(mut topology: Topology, config: StreamsConfig) -> Result<KafkaStreams> {
        config.validate()?;
        let mut client = config.client.clone();
        if client.client_id == "weir" {
            client.client_id = config.application_id.clone();
        }
        let cluster = Cluster::connect(client)
            .await
            .map_err(|e| StreamsError::client("connecting to the cluster", e))?
            .with_auto_create(false);
        let restore_cluster = Cluster::connect(cluster.config().clone())
            .await
            .map_err(|e| StreamsError::client("connecting the restore consumer", e))?
            .with_auto_create(false);
        let standby_cluster = Cluster::connect(cluster.config().clone())
            .await
            .map_err(|e| StreamsError::client("connecting the standby consumer", e))?
            .with_auto_create(false);
        let admin = Admin::new(cluster.clone());
        topology
            .cache_max_bytes
            .store(config.cache_max_bytes, Ordering::Relaxed);
        if topology.has_pattern_sources() {
            let existing: Vec<String> = admin
                .list_topics()
                .await
                .map_err(|e| StreamsError::client("listing topics for pattern sources", e))?
                .into_iter()
                .map(|t| t.name)
                .collect();
            topology.resolve_patterns(&existing, &config.application_id)?;
        }
        let partitions = topics::prepare(&admin, &topology, &config.application_id).await?;
        // Global stores are restored before the instance joins its group,
        // so no task processes before they hold their topics (as Kafka
        // Streams' global thread bootstraps before the stream threads).
        let counters = Counters::default();
        let global_boot = global::bootstrap(
            &restore::RestoreEnv {
                cluster: &restore_cluster,
                consumer: &config.consumer,
                counters: &counters,
                track: None,
            },
            &admin,
            &topology,
            &config,
        )
        .await?;
        let process_id = process_id(&config)?;
        let layout = assignor::layout(&topology, &config.application_id, &partitions);
        let offset_sums = Arc::new(Mutex::new(scan_offset_sums(&config, layout.clone()).await?));
        let streams_assignor = Arc::new(assignor::StreamsAssignor {
            app: config.application_id.clone(),
            process_id: process_id.clone(),
            threads: u32::try_from(config.threads).unwrap_or(u32::MAX),
            application_server: config.application_server.clone(),
            layout: layout.clone(),
            standby_replicas: config.standby_replicas,
            acceptable_recovery_lag: config.acceptable_recovery_lag,
            max_warmup_replicas: config.max_warmup_replicas,
            probing_rebalance_interval: config.probing_rebalance_interval,
            offset_sums: Arc::clone(&offset_sums),
            assigned: Mutex::new(None),
            draining: std::sync::atomic::AtomicBool::new(false),
        });
        let mut member_config = MemberConfig::new(
            config.application_id.clone(),
            topology.all_source_topics(&config.application_id),
        )
        .with_custom_assignor(
            Arc::clone(&streams_assignor) as Arc<dyn weir_group::assignor::custom::GroupAssignor>
        )
        .with_session_timeout(config.session_timeout)
        .with_heartbeat_interval(config.heartbeat_interval)
        .with_max_poll_interval(config.max_poll_interval);
        if let Some(id) = &config.instance_id {
            member_config = member_config.with_instance_id(id.clone());
        }
        if let Some(rack) = &config.rack {
            member_config = member_config.with_rack(rack.clone());
        }
        let member = GroupMember::start(cluster.clone(), member_config)
            .map_err(|e| StreamsError::group("joining the group", e))?;
        let started_wall_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        let config_threads = config.threads;
        let client_id_for_board = config.client.client_id.clone();
        let process_id_for_board = process_id.clone();
        let runtime = Arc::new(Runtime {
            lease: member.lease(),
            config,
            topology,
            cluster,
            restore_cluster,
            standby_cluster,
            partitions,
            process_id,
            counters,
            tasks: Mutex::new(BTreeMap::new()),
            layout,
            offset_sums,
            assignor: streams_assignor,
            standbys: Mutex::new(std::collections::BTreeSet::new()),
            progress: (0..config_threads).map(|_| AtomicU64::new(0)).collect(),
            confirmed: Mutex::new(Confirmed {
                generation: -1,
                gate: None,
            }),
            queryable: Mutex::new(BTreeMap::new()),
            standby_queryable: Mutex::new(BTreeMap::new()),
            board: Arc::new(board::TaskBoard::new(
                client_id_for_board,
                process_id_for_board,
                started_wall_ms,
            )),
            started: tokio::time::Instant::now(),
            started_wall_ms,
        });
        tracing::info!(
            application_id = %runtime.config.application_id,
            process_id = %runtime.process_id,
            threads = runtime.config.threads,
            guarantee = ?runtime.config.guarantee,
            "starting streams instance"
        );
        let globals = global_boot.map(|b| global::GlobalStores::follow(Arc::clone(&runtime), b));
        let (state_tx, state) = watch::channel(State::Rebalancing);
        let (shutdown, shutdown_rx) = oneshot::channel();
        // Every log line of the instance (its workers' too) names it: with
        // several instances in one process they are otherwise one stream.
        let span =
            tracing::info_span!("streams_instance", client_id = %runtime.config.client.client_id);
        let instance = tokio::spawn(tracing::Instrument::instrument(
            instance::run(Arc::clone(&runtime), member, state_tx, shutdown_rx),
            span,
        ));
        Ok(KafkaStreams {
            runtime,
            state,
            shutdown: Some(shutdown),
            instance,
            globals,
        })
    }

    /// The instance's state now.
    pub fn state(&self) -> State {
        *self.state.borrow()
    }

    /// A receiver that sees every state change (Kafka's state listener).
    pub fn state_listener(&self) -> watch::Receiver<State> {
        self.state.clone()
    }

    /// Waits until the state is `wanted` (or the instance stopped).
    ///
    /// # Errors
    ///
    /// [`StreamsError::NotRunning`] if the instance stopped first.
    pub async fn wait_for_state(&self, wanted: State) -> Result<()> {
        let mut rx = self.state.clone();
        loop {
            let now = *rx.borrow_and_update();
            if now == wanted {
                return Ok(());
            }
            if matches!(now, State::NotRunning | State::Error) {
                return Err(StreamsError::NotRunning(format!("state is {now:?}")));
            }
            if rx.changed().await.is_err() {
                return Err(StreamsError::NotRunning("the instance stopped".into()));
            }
        }
    }

    /// Counters and owned tasks.
    pub fn metrics(&self) -> Metrics {
        let c = &self.runtime.counters;
        Metrics {
            processed: c.processed.load(Ordering::Relaxed),
            commits: c.commits.load(Ordering::Relaxed),
            restored_records: c.restored.load(Ordering::Relaxed),
            restoring_tasks: c.restoring.load(Ordering::Relaxed),
            tasks: self
                .runtime
                .tasks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            standby_tasks: self
                .runtime
                .standbys
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            standby_records: c.standby_records.load(Ordering::Relaxed),
        }
    }

    /// Every task this instance holds or has held: its state (restoring,
    /// running, standby, warmup, released), its lag, its restore's
    /// progress, and who held it here when (the last [`HISTORY_LIMIT`]
    /// holdings: instance, worker, generation, acquired and released at).
    ///
    /// ```no_run
    /// # fn show(streams: &weir_streams::runtime::KafkaStreams) {
    /// use weir_streams::runtime::TaskState;
    ///
    /// for task in streams.tasks() {
    ///     match task.state {
    ///         TaskState::Restoring => {
    ///             if let Some(r) = &task.restore {
    ///                 println!("{} restoring: {} done, {} left, {:?}/s", task.id, r.restored, r.remaining, r.records_per_sec);
    ///             }
    ///         }
    ///         state => println!("{} {state:?}, lag {:?}", task.id, task.lag),
    ///     }
    ///     for o in &task.history {
    ///         println!("  {:?} on worker {:?} in generation {}..{:?}", o.role, o.worker, o.generation, o.released_generation);
    ///     }
    /// }
    /// # }
    /// ```
    pub fn tasks(&self) -> Vec<TaskInfo> {
        self.runtime.board.snapshot()
    }

    /// A view of [`tasks`](Self::tasks) that stays readable after the
    /// instance is closed (its last releases included).
    pub fn task_monitor(&self) -> TaskMonitor {
        TaskMonitor(Arc::clone(&self.runtime.board))
    }

    /// Closes gracefully, handing the tasks over first: the instance rejoins
    /// as *draining*, the leader moves each of its tasks to the member best
    /// caught up on it (a standby), and keeps a task nobody is caught up on
    /// here, with a warmup elsewhere, until the warmup has caught up. The
    /// moved tasks commit and close here while the others go on
    /// processing; once none is left (or half of `timeout` has passed)
    /// every worker commits and closes what remains, stores closed cleanly,
    /// and the member leaves the group (LeaveGroup, static members too).
    /// After `timeout` the instance is dropped as it is (uncommitted work
    /// is then redone by the next owner).
    ///
    /// # Errors
    ///
    /// The error that stopped the instance, if one did.
    pub async fn close(mut self, timeout: Duration) -> Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(timeout / 2);
        }
        let outcome = tokio::time::timeout(timeout, &mut self.instance).await;
        if let Some(globals) = self.globals.take() {
            globals.stop().await;
        }
        match outcome {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(StreamsError::NotRunning(format!(
                "the instance task failed: {join}"
            ))),
            Err(_) => {
                self.instance.abort();
                Err(StreamsError::NotRunning(format!(
                    "close did not finish within {timeout:?}"
                )))
            }
        }
    }

    /// Stops at once without committing or leaving the group, as a crash
    /// would (for tests of failover): the group sees the member's session
    /// expire, and the next owner restores from the changelogs.
    pub fn kill(mut self) {
        self.shutdown.take();
        self.instance.abort();
    }
}

impl Drop for KafkaStreams {
    fn drop(&mut self) {
        self.instance.abort();
    }
}
