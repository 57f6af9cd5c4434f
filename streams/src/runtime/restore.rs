//! Bringing a task's stores up to their changelog before it processes.
//!
//! Runs beside the worker (its own tokio task, its own read_committed
//! consumer on the instance's restore connections), so one task's restore
//! never holds up the others' processing. A store restores from the offset it
//! committed (only the tail when its directory survived), or in bulk into an
//! empty store.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use weir_client::Lane;
use weir_client::admin::{Admin, OffsetSpec};
use weir_client::config::consumer::{AutoOffsetReset, IsolationLevel};
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::group_offsets::{Stability, by_partition, fetch_committed_once};
use weir_client::transaction::{TransactionConfig, TransactionalProducer};
use weir_store::{ChangelogPartition, ChangelogRecord, CommittedOffset, StoreError, TaskStore};

use super::Runtime;
use crate::config::ProcessingGuarantee;
use crate::error::{Result, StreamsError};
use crate::task::TaskId;

/// How often a long restore logs its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// A task's stores and fence, ready to process.
pub(crate) struct Prepared {
    pub(crate) store: Option<TaskStore>,
    pub(crate) fence: Option<TransactionalProducer>,
}

fn store_err<L: std::fmt::Display>(task: L) -> impl Fn(StoreError) -> StreamsError {
    move |source| StreamsError::store(task.to_string(), source)
}

/// What a restore needs of its instance: the restore connections, the
/// consumer options and the counters.
pub(crate) struct RestoreEnv<'a> {
    pub(crate) cluster: &'a weir_client::Cluster,
    pub(crate) consumer: &'a weir_client::config::consumer::ConsumerOptions,
    pub(crate) counters: &'a super::Counters,
    /// The task board a task's restore reports its progress to (none for
    /// global stores).
    pub(crate) track: Option<(&'a super::board::TaskBoard, TaskId)>,
}

impl Runtime {
    pub(crate) fn restore_env(&self) -> RestoreEnv<'_> {
        RestoreEnv {
            cluster: &self.restore_cluster,
            consumer: &self.config.consumer,
            counters: &self.counters,
            track: None,
        }
    }
}

async fn blocking<T: Send + 'static, L: std::fmt::Display + Copy + Send + 'static>(
    task: L,
    f: impl FnOnce() -> std::result::Result<T, StoreError> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StreamsError::NotRunning(format!("task {task}: store job: {e}")))?
        .map_err(store_err(task))
}

/// Opens the task directory, retrying while a previous owner in this process
/// (another worker, a restore being cancelled) still holds its lock.
async fn open_store(rt: &Runtime, task: TaskId) -> Result<TaskStore> {
    let dir = rt.task_dir(task);
    let mut waited = Duration::ZERO;
    loop {
        let (d, options) = (dir.clone(), rt.config.store.clone());
        match blocking(task, move || TaskStore::open(d, options)).await {
            Err(StreamsError::Store { source, .. })
                if matches!(*source, StoreError::Locked { .. })
                    && waited < Duration::from_secs(30) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
                waited += Duration::from_millis(100);
            }
            other => return other,
        }
    }
}

/// The task's fence (at-least-once, stateful tasks): taking it over bumps the
/// epoch of `<application.id>-task-<task>`, which fences the previous owner
/// at the broker and aborts its open changelog transaction, so this restore
/// reads up to the end without waiting for the transaction timeout.
async fn take_fence(rt: &Runtime, task: TaskId) -> Result<TransactionalProducer> {
    let id = format!("{}-task-{task}", rt.app());
    let fence = TransactionalProducer::with_cluster(
        rt.cluster.clone(),
        rt.config.producer.clone(),
        TransactionConfig::new(id.clone()).with_timeout(rt.config.transaction_timeout()),
    )
    .map_err(|e| StreamsError::client(format!("task {task}: fence producer"), e))?;
    fence
        .init_transactions()
        .await
        .map_err(|e| init_error(rt, format!("task {task}: fencing {id}"), e))?;
    fence
        .begin()
        .map_err(|e| StreamsError::client(format!("task {task}: begin"), e))?;
    tracing::debug!(task = %task, transactional_id = %id, "task fence taken over");
    Ok(fence)
}

/// The error of a refused `InitProducerId`. A transaction timeout over the
/// broker's `transaction.max.timeout.ms` can never be accepted: that is the
/// application's configuration, reported as such (the instance stops), not
/// a failure to retry. Under at-least-once the timeout defaults to
/// `commit.interval.ms` + 30 s, so a long commit interval meets it.
pub(crate) fn init_error(
    rt: &Runtime,
    context: String,
    e: weir_client::ClientError,
) -> StreamsError {
    let refused = match &e {
        weir_client::ClientError::Transaction { source, .. } => source.kafka_code(),
        other => other.kafka_code(),
    }
    .is_some_and(|c| c.code == weir_client::kerror::codes::INVALID_TRANSACTION_TIMEOUT);
    if refused {
        return StreamsError::InvalidConfig {
            property: "transaction.timeout.ms".into(),
            reason: format!(
                "{context}: the broker refused a transaction timeout of {} ms, over its \
                 transaction.max.timeout.ms (15 min by default); under at-least-once it is \
                 commit.interval.ms + 30 s unless set: lower commit.interval.ms or \
                 transaction.timeout.ms, or raise the broker's limit",
                rt.config.transaction_timeout().as_millis()
            ),
        };
    }
    StreamsError::client(context, e)
}

/// Who a catch-up is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// A task about to process: counted as restoring (the instance is
    /// REBALANCING meanwhile) and in `restored_records`.
    Active,
    /// A standby replica following the changelog: counted in
    /// `standby_records` only.
    Standby,
}

/// Opens task `task`'s directory and registers every store of its
/// subtopology (a new directory creates them); `None` for a stateless task.
pub(crate) async fn open_task_store(rt: &Runtime, task: TaskId) -> Result<Option<TaskStore>> {
    let specs: Vec<_> = rt
        .topology
        .subtopology_stores(task.subtopology)
        .into_iter()
        .cloned()
        .collect();
    if specs.is_empty() {
        return Ok(None);
    }
    let store = open_store(rt, task).await?;
    let partition = i32::try_from(task.partition).unwrap_or(i32::MAX);
    for spec in &specs {
        let s = store.clone();
        let spec2 = spec.clone();
        let app = rt.app().to_owned();
        blocking(task, move || register_store(&s, &spec2, &app, partition)).await?;
    }
    Ok(Some(store))
}

/// Registers the store of `spec` in `store`: on disk, or in memory with its
/// changelog partition (whose offset then stays in memory too).
pub(crate) fn register_store(
    store: &TaskStore,
    spec: &crate::state::StoreSpec,
    application_id: &str,
    partition: i32,
) -> std::result::Result<(), StoreError> {
    let changelog = spec
        .logged
        .then(|| ChangelogPartition::new(spec.changelog_topic(application_id), partition));
    match (&spec.kind, spec.in_memory) {
        (crate::state::StoreType::KeyValue, false) => store.key_value_store(&spec.name).map(|_| ()),
        (crate::state::StoreType::KeyValue, true) => store
            .in_memory_key_value_store(&spec.name, changelog.as_ref())
            .map(|_| ()),
        (crate::state::StoreType::Window { retention, segment }, false) => store
            .window_store(&spec.name, *retention, *segment)
            .map(|_| ()),
        (crate::state::StoreType::Window { retention, segment }, true) => store
            .in_memory_window_store(&spec.name, *retention, *segment, changelog.as_ref())
            .map(|_| ()),
    }
}

/// Brings every logged store of `task` in `store` up to its changelog's
/// current end. Returns the lag left, as the streams assignor counts it:
/// the changelogs' end offsets minus the store's committed offsets (the
/// transaction markers after the last record count).
pub(crate) async fn catch_up(
    rt: &Runtime,
    task: TaskId,
    store: &TaskStore,
    purpose: Purpose,
) -> Result<u64> {
    let partition = i32::try_from(task.partition).unwrap_or(i32::MAX);
    let mut lag = 0u64;
    for spec in rt
        .topology
        .subtopology_stores(task.subtopology)
        .into_iter()
        .filter(|s| s.logged)
    {
        let topic = spec.changelog_topic(rt.app());
        let env = RestoreEnv {
            track: Some((&rt.board, task)),
            // A standby's long polls never hold up an active restore.
            cluster: match purpose {
                Purpose::Active => &rt.restore_cluster,
                Purpose::Standby => &rt.standby_cluster,
            },
            ..rt.restore_env()
        };
        let limit = match spec.source_topic {
            Some(_) => Some(source_limit(&env, rt.app(), &topic, partition, purpose).await?),
            None => None,
        };
        let end = restore_store(
            &env, task, store, &spec.name, &topic, partition, purpose, limit,
        )
        .await?;
        let committed = match store.committed_offset(&ChangelogPartition::new(&topic, partition)) {
            CommittedOffset::Known(o) => o,
            CommittedOffset::Unknown => 0,
        };
        lag = lag.saturating_add(u64::try_from(end.saturating_sub(committed)).unwrap_or(0));
    }
    Ok(lag)
}

/// How far a source table (a store whose changelog is its task's input
/// topic) may be restored: to the task's committed offset of that topic,
/// or 0 when it has none (processing then starts at the topic's beginning
/// and builds the table itself), never beyond. So the task processes its
/// inputs against the table as it stood at their position, as Kafka
/// Streams restores (and keeps standbys) at `min(end, committed)`.
///
/// Prevents (review F4): a table restored to the topic's end after a
/// failover, so that a stream-table join over the records after the last
/// commit used table values from the future, a result no failure-free run
/// can give. An active restore reads the stable offset, the one processing
/// starts from; a standby the last committed one.
async fn source_limit(
    env: &RestoreEnv<'_>,
    app: &str,
    topic: &str,
    partition: i32,
    purpose: Purpose,
) -> Result<i64> {
    let tp = TopicPartition::new(topic, partition);
    let stability = match purpose {
        Purpose::Active => Stability::Required,
        Purpose::Standby => Stability::Any,
    };
    let cluster = env.cluster;
    let offsets = cluster
        .retry("OffsetFetch for a source table", || async {
            fetch_committed_once(
                cluster,
                app,
                Some(std::slice::from_ref(&tp)),
                stability,
                Lane::Coordinator,
            )
            .await
        })
        .await
        .map_err(|e| StreamsError::client(format!("committed offset of {topic}-{partition}"), e))?;
    Ok(by_partition(offsets).get(&tp).copied().unwrap_or(0))
}

/// Opens task `task`'s stores, takes its fence, and restores each logged
/// store to its changelog's end.
pub(crate) async fn prepare(rt: Arc<Runtime>, task: TaskId) -> Result<Prepared> {
    rt.board.restore_began(task);
    let Some(store) = open_task_store(&rt, task).await? else {
        return Ok(Prepared {
            store: None,
            fence: None,
        });
    };
    let fence = match rt.config.guarantee {
        ProcessingGuarantee::AtLeastOnce if !rt.config.unfenced_changelog => {
            Some(take_fence(&rt, task).await?)
        }
        ProcessingGuarantee::AtLeastOnce => None,
        ProcessingGuarantee::ExactlyOnceV2 => None,
    };
    let _lag = catch_up(&rt, task, &store, Purpose::Active).await?;
    Ok(Prepared {
        store: Some(store),
        fence,
    })
}

/// Restores store `name` of `store` from partition `partition` of `topic`
/// up to its current end (or `limit`, if lower), from the offset the store
/// committed; `task` labels the logs and errors.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn restore_store<L: std::fmt::Display + Copy + Send + Sync + 'static>(
    rt: &RestoreEnv<'_>,
    task: L,
    store: &TaskStore,
    name: &str,
    topic: &str,
    partition: i32,
    purpose: Purpose,
    limit: Option<i64>,
) -> Result<i64> {
    let admin = Admin::new(rt.cluster.clone());
    // The end is the high watermark (read_uncommitted, as Kafka's
    // KAFKA-10167): markers sit below it, so "done" is position >= end.
    let end = admin
        .list_offsets(topic, &[partition], OffsetSpec::Latest, false)
        .await
        .map_err(|e| StreamsError::client(format!("task {task}: end offset of {topic}"), e))?
        .first()
        .map(|o| o.offset)
        .unwrap_or(0);
    let end = limit.map_or(end, |l| end.min(l));
    let cp = ChangelogPartition::new(topic, partition);
    let mut wiped = false;
    loop {
        let start = store.committed_offset(&cp);
        let left = |position: i64| u64::try_from(end.saturating_sub(position)).unwrap_or(0);
        let step = |applied: u64, position: i64| {
            if let Some((board, id)) = rt.track {
                board.changelog_step(id, name, applied, left(position));
            }
        };
        if let CommittedOffset::Known(o) = start
            && limit.is_some_and(|l| o > l)
            && !wiped
        {
            // A source table ahead of its task's committed offset (restored
            // to the topic's end by an older version): its contents are
            // from beyond the task's position (review F4), so it restores
            // again from the start, up to the limit.
            tracing::warn!(task = %task, store = name, offset = o, limit, "the source table is ahead of its task's committed offset: wiping it and restoring it from the start");
            let (s, n, cp) = (store.clone(), name.to_owned(), cp.clone());
            blocking(task, move || s.reset_store(&n, &cp)).await?;
            wiped = true;
            continue;
        }
        if let CommittedOffset::Known(o) = start
            && o >= end
        {
            step(0, o);
            tracing::debug!(task = %task, store = name, offset = o, end, "store is up to date");
            return Ok(end);
        }
        let mut options = rt.consumer.clone();
        options.isolation_level = IsolationLevel::ReadCommitted;
        // A committed offset the changelog no longer holds is an error here,
        // not a silent reset to its start (see below).
        options.auto_offset_reset = match start {
            CommittedOffset::Known(_) => AutoOffsetReset::None,
            CommittedOffset::Unknown => AutoOffsetReset::Earliest,
        };
        if purpose == Purpose::Active {
            // Every restore and standby of the instance fetches over the same
            // restore connection, which a broker serves one request at a time:
            // a long poll there (a standby's, or the prefetch a finished
            // store's consumer leaves behind) holds the next restore's fetch
            // for up to fetch.max.wait.ms. The task is unavailable until its
            // restore ends, so its own fetches stay short (issue 15).
            options.fetch_max_wait = options.fetch_max_wait.min(ACTIVE_RESTORE_FETCH_WAIT);
        }
        let mut consumer = Consumer::with_cluster(rt.cluster.clone(), options);
        let tp = TopicPartition::new(topic, partition);
        consumer.assign([tp.clone()]);
        let seek = match start {
            CommittedOffset::Known(o) => SeekTo::Offset(o),
            CommittedOffset::Unknown => SeekTo::Earliest,
        };
        consumer
            .seek(&tp, seek)
            .map_err(|e| StreamsError::client(format!("task {task}: seek {topic}"), e))?;
        let s = store.clone();
        let (n, cp2) = (name.to_owned(), cp.clone());
        let mut restorer = blocking(task, move || s.restorer(&n, cp2, end)).await?;
        let active = purpose == Purpose::Active;
        // Counted while it runs, also when the restore is cancelled (its task
        // revoked or lost mid-restore): a count left behind kept the instance
        // REBALANCING for good.
        let _restoring = active.then(|| RestoringCount::start(&rt.counters.restoring));
        if active {
            tracing::info!(task = %task, store = name, from = ?start, end, path = ?restorer.path(), "restoring");
        } else {
            tracing::debug!(task = %task, store = name, from = ?start, end, "standby catching up");
        }
        let began = tokio::time::Instant::now();
        let mut last_report = began;
        let mut restored = 0u64;
        let outcome: Result<Restored> = async {
            loop {
                let position = consumer
                    .position(&tp)
                    .await
                    .map_err(|e| StreamsError::client(format!("task {task}: restore position"), e))?;
                step(0, position);
                if position >= end {
                    break;
                }
                // Back as soon as the position moved: a tail of aborted
                // records and markers (an owner's transaction aborted at a
                // rebalance) delivers nothing, and a plain 500 ms poll waited
                // it out once per store (issue 15: 1.5 s of a 2 s handover for
                // three stores).
                let records = match consumer.poll_for_progress(Duration::from_millis(500)).await {
                    Ok(records) => records,
                    Err(weir_client::ClientError::OffsetOutOfRange { offset, .. }) => {
                        return Ok(Restored::OutOfRange(offset));
                    }
                    Err(e) => {
                        return Err(StreamsError::client(
                            format!("task {task}: restoring {topic}"),
                            e,
                        ));
                    }
                };
                if records.is_empty() {
                    continue;
                }
                let count = records.len() as u64;
                let r = restorer;
                restorer = tokio::task::spawn_blocking(move || {
                    let mut r = r;
                    let batch: Vec<ChangelogRecord<'_>> = records
                        .iter()
                        .filter(|rec| rec.offset < end)
                        .map(|rec| ChangelogRecord {
                            offset: rec.offset,
                            key: rec.key.as_deref().unwrap_or_default(),
                            value: rec.value.as_deref(),
                        })
                        .collect();
                    r.apply(&batch).map(|()| r)
                })
                .await
                .map_err(|e| StreamsError::NotRunning(format!("task {task}: restore job: {e}")))?
                .map_err(store_err(task))?;
                let counter = if active {
                    &rt.counters.restored
                } else {
                    &rt.counters.standby_records
                };
                counter.fetch_add(count, Ordering::Relaxed);
                restored += count;
                let p = restorer.progress();
                let reached = p.next_offset.unwrap_or(position);
                step(count, reached);
                if last_report.elapsed() >= PROGRESS_EVERY {
                    let secs = began.elapsed().as_secs_f64();
                    let rate = if secs > 0.0 { restored as f64 / secs } else { 0.0 };
                    let remaining = left(reached);
                    if active {
                        tracing::info!(task = %task, store = name, records = restored, remaining, records_per_sec = rate, bytes = p.bytes, offset = ?p.next_offset, end, "restore progress");
                    } else {
                        tracing::debug!(task = %task, store = name, records = restored, remaining, records_per_sec = rate, end, "standby catch-up progress");
                    }
                    last_report = tokio::time::Instant::now();
                }
            }
            let progress = blocking(task, move || restorer.finish()).await?;
            // The store equals the changelog up to `end` (the high watermark):
            // what lies between its last record and `end` is transaction markers
            // and aborted records, which read_committed skips. Committing `end`
            // lets the next catch-up (a standby's, every 500 ms) stop at the
            // up-to-date check instead of a new consumer re-reading the markers.
            if !matches!(store.committed_offset(&cp), CommittedOffset::Known(o) if o >= end) {
                let (s, cp) = (store.clone(), cp.clone());
                blocking(task, move || s.commit(&[(cp, end)])).await?;
            }
            step(0, end);
            if active {
                tracing::info!(task = %task, store = name, records = progress.records, bytes = progress.bytes, end, "restored");
            } else {
                tracing::debug!(task = %task, store = name, records = progress.records, end, "standby caught up");
            }
            Ok(Restored::To(end))
        }
        .await;
        match outcome? {
            Restored::To(end) => return Ok(end),
            // Prevents (review F7): the records from the store's offset on were
            // deleted (DeleteRecords, `delete` retention), tombstones among
            // them. Restored from the changelog's start on top of its old
            // contents, the store would keep every key they deleted. It is
            // emptied and restored from the start instead: the one wipe of a
            // store. From the start no offset can be out of range, so this
            // happens at most once per restore.
            Restored::OutOfRange(offset) if !wiped => {
                tracing::warn!(task = %task, store = name, topic, partition, offset, "the changelog no longer holds the store's offset: wiping the store and restoring it from the start");
                let (s, n, cp) = (store.clone(), name.to_owned(), cp.clone());
                blocking(task, move || s.reset_store(&n, &cp)).await?;
                wiped = true;
            }
            Restored::OutOfRange(offset) => {
                return Err(StreamsError::NotRunning(format!(
                    "task {task}: offset {offset} of {topic}-{partition} out of range after restoring from the start"
                )));
            }
        }
    }
}

/// How one pass of a restore ended.
enum Restored {
    /// The store is restored to this end.
    To(i64),
    /// The changelog no longer holds this offset, the store's.
    OutOfRange(i64),
}

/// The longest an active restore's Fetch waits at the broker for data.
const ACTIVE_RESTORE_FETCH_WAIT: Duration = Duration::from_millis(10);

/// One restore in `Counters::restoring`, for as long as it lives.
struct RestoringCount<'a>(&'a std::sync::atomic::AtomicU64);

impl<'a> RestoringCount<'a> {
    fn start(count: &'a std::sync::atomic::AtomicU64) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        RestoringCount(count)
    }
}

impl Drop for RestoringCount<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
