//! A worker (Kafka Streams' stream thread): its tasks, its consumer, its
//! producers, and the loop that polls, processes and commits.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;
use weir_client::config::consumer::IsolationLevel;
use weir_client::consumer::{Consumer, ConsumerRecord, SeekTo, TopicPartition};
use weir_client::producer::{DeliveryGroup, Producer, ProducerRecord};
use weir_client::transaction::{TransactionConfig, TransactionalProducer};
use weir_group::assignor::TopicPartition as GroupPartition;
use weir_group::member::NoPermit;

use super::Runtime;
use super::commit::{self, Active, Producers};
use super::restore::{self, Prepared};
use crate::config::{DeserializationHandling, ProcessingErrorHandling, ProcessingGuarantee};
use crate::error::{Result, StreamsError};
use crate::record::{OutputRecord, RawRecord};
use crate::task::{StreamTask, TaskId};

/// What the instance tells a worker.
pub(crate) enum WorkerCommand {
    /// Start these tasks (restore, then process).
    Add(Vec<(TaskId, Vec<GroupPartition>)>),
    /// Commit, then close these tasks cleanly; answer when done.
    Revoke(Vec<TaskId>, oneshot::Sender<()>),
    /// Close these tasks without committing (ownership is gone).
    Lose(Vec<TaskId>, oneshot::Sender<()>),
    /// Commit everything and close every task cleanly.
    Shutdown(oneshot::Sender<()>),
}

/// What a worker tells the instance.
pub(crate) enum WorkerReport {
    /// Processing failed; the worker has already aborted its uncommitted work.
    Failed { worker: usize, error: StreamsError },
}

type Restoring = JoinHandle<(TaskId, Result<Prepared>)>;

/// What a task wrote: its outputs (and repartition records) and its
/// changelog records.
type Written = (TaskId, Vec<OutputRecord>, Vec<OutputRecord>);

pub(crate) struct Worker {
    rt: Arc<Runtime>,
    index: usize,
    reports: mpsc::UnboundedSender<WorkerReport>,
    consumer: Consumer,
    producers: Option<Producers>,
    tasks: BTreeMap<TaskId, Active>,
    /// Input partitions of every task this worker owns, running or not.
    owned: BTreeMap<TaskId, Vec<TopicPartition>>,
    restoring: BTreeMap<TaskId, Restoring>,
    /// Tasks whose uncommitted work was dropped while the worker still owns
    /// them: started again from their last commit once writing is allowed.
    revive: BTreeSet<TaskId>,
    /// Tasks whose last start failed: not started again before the instant.
    /// The wait doubles with each failure, from `retry.backoff.ms` up to
    /// `retry.backoff.max.ms`; a start that keeps failing (a broker that
    /// refuses the fence) never spins.
    retry_at: BTreeMap<TaskId, (Instant, std::time::Duration)>,
    /// Outputs and repartition records sent since the last commit.
    outputs: DeliveryGroup,
    /// The outputs and repartition records of the last processed batch, not
    /// yet handed to the producer: they are encoded into batches while the
    /// next batch is processed, so the two overlap on two cores. Every
    /// other write, a commit and an idle poll send them first; dropping a
    /// task's uncommitted work drops its entries.
    unsent: Vec<(TaskId, Vec<OutputRecord>)>,
    last_commit: Instant,
    /// Records whose processing failed under `processing.exception.handler
    /// = skip`: passed over when the restarted tasks fetch them again.
    skip: BTreeSet<(String, i32, i64)>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        for h in self.restoring.values() {
            h.abort();
        }
    }
}

fn to_client(tp: &GroupPartition) -> TopicPartition {
    TopicPartition::new(tp.topic.clone(), tp.partition)
}

fn to_raw(r: ConsumerRecord) -> RawRecord {
    RawRecord {
        topic: r.topic,
        partition: r.partition,
        offset: r.offset,
        timestamp: r.timestamp,
        key: r.key,
        value: r.value,
        headers: r.headers,
    }
}

/// A task's polled records in the order Kafka Streams processes them: of
/// its input partitions, always the one whose next record has the smallest
/// timestamp (ties to the partition seen first), each partition in offset
/// order. So a table update and a stream record polled together meet in
/// time order, whichever partition the fetch returned first. Like Kafka
/// Streams with `max.task.idle.ms=0`, this orders what was polled; it does
/// not wait for a partition that has nothing yet.
fn by_timestamp(records: Vec<RawRecord>) -> Vec<RawRecord> {
    // Each queue holds one partition's records; none is empty while they
    // are sorted in, so its first record names the partition (no copy of
    // the topic per record).
    let mut queues: Vec<std::collections::VecDeque<RawRecord>> = Vec::new();
    for r in records {
        let same = |q: &&mut std::collections::VecDeque<RawRecord>| {
            q.front()
                .is_some_and(|f| f.partition == r.partition && f.topic == r.topic)
        };
        match queues.iter_mut().find(same) {
            Some(q) => q.push_back(r),
            None => queues.push(std::collections::VecDeque::from([r])),
        }
    }
    if queues.len() < 2 {
        return queues.into_iter().flatten().collect();
    }
    let mut out = Vec::with_capacity(queues.iter().map(|q| q.len()).sum());
    loop {
        let next = queues
            .iter()
            .enumerate()
            .filter_map(|(i, q)| q.front().map(|r| (r.timestamp, i)))
            .min();
        let Some((_, i)) = next else {
            return out;
        };
        if let Some(r) = queues.get_mut(i).and_then(|q| q.pop_front()) {
            out.push(r);
        }
    }
}

fn producer_record(r: OutputRecord) -> ProducerRecord {
    let mut p = ProducerRecord::new(r.topic).with_timestamp(r.timestamp);
    p.partition = r.partition;
    p.key = r.key.map(Into::into);
    p.value = r.value.map(Into::into);
    p.headers = r.headers;
    p
}

impl Worker {
    pub(crate) fn new(
        rt: Arc<Runtime>,
        index: usize,
        reports: mpsc::UnboundedSender<WorkerReport>,
    ) -> Result<Worker> {
        let mut options = rt.config.consumer.clone();
        options.isolation_level = match rt.config.guarantee {
            ProcessingGuarantee::ExactlyOnceV2 => IsolationLevel::ReadCommitted,
            ProcessingGuarantee::AtLeastOnce => IsolationLevel::ReadUncommitted,
        };
        let consumer = Consumer::with_cluster(rt.cluster.clone(), options);
        Ok(Worker {
            rt,
            index,
            reports,
            consumer,
            producers: None,
            tasks: BTreeMap::new(),
            owned: BTreeMap::new(),
            restoring: BTreeMap::new(),
            revive: BTreeSet::new(),
            retry_at: BTreeMap::new(),
            outputs: DeliveryGroup::new(),
            unsent: Vec::new(),
            last_commit: Instant::now(),
            skip: BTreeSet::new(),
        })
    }

    /// The worker's producers, created on first use. Under exactly-once the
    /// transactional id is `<application.id>-<process id>-<worker>`, stable
    /// across restarts, so `init_transactions` aborts what a crashed
    /// predecessor left open.
    async fn producers(&mut self) -> Result<&Producers> {
        if self.producers.is_none() {
            let rt = &self.rt;
            let producers = match rt.config.guarantee {
                ProcessingGuarantee::AtLeastOnce => Producers::AtLeastOnce(
                    Producer::with_cluster(rt.cluster.clone(), rt.config.producer.clone())
                        .map_err(|e| StreamsError::client("output producer", e))?,
                ),
                ProcessingGuarantee::ExactlyOnceV2 => {
                    let id = format!("{}-{}-{}", rt.app(), rt.process_id, self.index);
                    let txn = TransactionalProducer::with_cluster(
                        rt.cluster.clone(),
                        rt.config.producer.clone(),
                        TransactionConfig::new(id.clone())
                            .with_timeout(rt.config.transaction_timeout()),
                    )
                    .map_err(|e| StreamsError::client("transactional producer", e))?;
                    txn.init_transactions()
                        .await
                        .map_err(|e| restore::init_error(rt, format!("init {id}"), e))?;
                    txn.begin().map_err(|e| StreamsError::client("begin", e))?;
                    Producers::ExactlyOnce(Box::new(txn))
                }
            };
            self.producers = Some(producers);
        }
        self.producers
            .as_ref()
            .ok_or_else(|| StreamsError::NotRunning("no producer".into()))
    }

    /// The zombie guard: a worker writes (sends, commits) only while the
    /// lease of the assignment the instance handled last is valid, i.e.
    /// while the coordinator cannot yet have given its partitions to
    /// another member. It is a deadline read synchronously, so it holds
    /// even before the membership task has delivered `Lost`; and a lease the
    /// member got by rejoining after a loss is not that lease, so it holds
    /// while the `Lost` waits in the queue too (review F2; see
    /// [`Confirmed`](super::Confirmed)).
    fn writable(&self) -> bool {
        self.rt.write_gate().is_some_and(|g| g.is_open())
    }

    /// Whether the lease's generation is one whose assignment the instance
    /// has handled: a member that left and rejoined while the instance was
    /// not polling may hold a new lease before the instance has closed the
    /// tasks it lost, and those must not start again.
    fn confirmed(&self) -> bool {
        self.rt.lease.valid_generation() == Some(self.rt.confirmed_generation())
    }

    pub(crate) async fn run(self, commands: mpsc::UnboundedReceiver<WorkerCommand>) {
        let span = tracing::info_span!("stream_thread", application_id = %self.rt.app(), worker = self.index);
        self.run_loop(commands).instrument(span).await;
    }

    async fn run_loop(mut self, mut commands: mpsc::UnboundedReceiver<WorkerCommand>) {
        // Under exactly-once, fence this worker's predecessor (a crashed
        // process on the same state directory has the same transactional
        // id) before any task restores: its open transaction is aborted now,
        // not at its timeout, which a read_committed restore of a changelog
        // it wrote to (and every reader of the outputs) would wait for.
        if self.rt.config.guarantee == ProcessingGuarantee::ExactlyOnceV2
            && let Err(e) = self.producers().await
        {
            tracing::warn!(error = %e, "initialising transactions at start failed; retrying on first use");
        }
        loop {
            self.rt.worker_progressed(self.index);
            let polling = !self.tasks.is_empty();
            tokio::select! {
                biased;
                command = commands.recv() => match command {
                    Some(WorkerCommand::Add(tasks)) => self.add(tasks).await,
                    Some(WorkerCommand::Revoke(tasks, done)) => {
                        self.revoke(&tasks).await;
                        let _ = done.send(());
                    }
                    Some(WorkerCommand::Lose(tasks, done)) => {
                        self.lose(&tasks).await;
                        let _ = done.send(());
                    }
                    Some(WorkerCommand::Shutdown(done)) => {
                        let all: Vec<TaskId> = self.owned.keys().copied().collect();
                        tracing::debug!(tasks = all.len(), "shutting down: committing and closing tasks");
                        self.revoke(&all).await;
                        tracing::debug!("shutting down: closing producers");
                        self.close_producers().await;
                        tracing::debug!("shut down");
                        let _ = done.send(());
                        return;
                    }
                    None => return,
                },
                finished = next_restored(&mut self.restoring) => {
                    if let Some((task, result)) = finished {
                        self.restored(task, result).await;
                    }
                }
                // Outputs waiting to overlap the next batch's processing
                // wait for no fetch: with nothing buffered they go at once.
                polled = self.consumer.poll_for(if self.unsent.is_empty() {
                    self.rt.config.poll
                } else {
                    std::time::Duration::ZERO
                }), if polling => match polled {
                    Ok(records) => {
                        let any = !records.is_empty();
                        let done = if any {
                            self.process(records).await
                        } else {
                            self.send(Vec::new()).await
                        };
                        if let Err(e) = done {
                            self.fail(e).await;
                        }
                        if any {
                            self.publish_positions().await;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "poll failed");
                        // The held outputs go now: a poll that keeps failing
                        // at once must not keep them waiting (or spin on a
                        // zero wait).
                        if let Err(e) = self.send(Vec::new()).await {
                            self.fail(e).await;
                        }
                    }
                },
                _ = tokio::time::sleep(self.rt.config.poll), if !polling => {}
            }
            if let Err(e) = self.tick().await {
                self.fail(e).await;
            }
        }
    }

    /// Timers: wall-clock punctuation, the commit interval, revival.
    async fn tick(&mut self) -> Result<()> {
        if !self.revive.is_empty() && self.writable() && self.confirmed() {
            let now = Instant::now();
            let due: Vec<TaskId> = self
                .revive
                .iter()
                .filter(|id| self.retry_at.get(id).is_none_or(|(at, _)| *at <= now))
                .copied()
                .collect();
            for id in due {
                self.revive.remove(&id);
                if self.tasks.contains_key(&id) || self.restoring.contains_key(&id) {
                    continue; // started meanwhile
                }
                if let Some(parts) = self.owned.get(&id).cloned() {
                    tracing::info!(task = %id, "restarting task from its last commit");
                    self.start_restore(id, parts).await;
                }
            }
        }
        if self.tasks.is_empty() {
            return Ok(());
        }
        let now = self.rt.wall_clock_ms();
        let mut outputs = Vec::new();
        for (id, active) in &mut self.tasks {
            let done = active.task.punctuate_wall_clock(now)?;
            active.punctuated(done);
            outputs.push((
                *id,
                active.task.take_outputs(),
                active.task.take_changelog_due(),
            ));
        }
        // Nothing punctuated: the last batch's outputs stay to overlap the
        // next one's processing.
        if outputs
            .iter()
            .any(|(_, o, c)| !o.is_empty() || !c.is_empty())
        {
            self.send(outputs).await?;
        }
        if self.last_commit.elapsed() >= self.rt.config.commit_interval {
            self.commit(false).await?;
        }
        Ok(())
    }

    /// Tells the task board where each running task's inputs stand (the
    /// next offset to process, past transaction markers).
    async fn publish_positions(&mut self) {
        let inputs: Vec<(TaskId, Vec<TopicPartition>)> = self
            .tasks
            .iter()
            .map(|(id, a)| (*id, a.inputs.clone()))
            .collect();
        for (id, inputs) in inputs {
            let mut positions = BTreeMap::new();
            for tp in &inputs {
                if let Ok(o) = self.consumer.position(tp).await {
                    positions.insert((tp.topic.clone(), tp.partition), o);
                }
            }
            self.rt.board.positions(id, positions);
        }
    }

    async fn add(&mut self, tasks: Vec<(TaskId, Vec<GroupPartition>)>) {
        for (id, parts) in tasks {
            let parts: Vec<TopicPartition> = parts.iter().map(to_client).collect();
            let entry = self.owned.entry(id).or_default();
            for p in parts {
                if !entry.contains(&p) {
                    entry.push(p);
                }
            }
            if !self.tasks.contains_key(&id) && !self.restoring.contains_key(&id) {
                let parts = entry.clone();
                // This start replaces a pending retry: two restores of one
                // task would each take its fence and store.
                self.revive.remove(&id);
                self.retry_at.remove(&id);
                self.start_restore(id, parts).await;
            }
        }
    }

    async fn start_restore(&mut self, id: TaskId, _parts: Vec<TopicPartition>) {
        // Under exactly-once the worker's producer is initialised before
        // the restore reads: a producer dropped after a failed commit (an
        // abort refused after an EndTxn of unknown outcome) may have left
        // its transaction open, holding the LSO of the changelogs it wrote,
        // and `init_transactions` aborts it now. Initialised after the
        // restore (review F5), the task's read_committed restore waited
        // for that transaction's timeout.
        if self.rt.config.guarantee == ProcessingGuarantee::ExactlyOnceV2
            && let Err(e) = self.producers().await
        {
            if matches!(e, StreamsError::InvalidConfig { .. }) {
                self.fail(e).await;
                return;
            }
            let backoff = self.retry_later(id);
            tracing::warn!(task = %id, error = %e, backoff = ?backoff, "initialising transactions before the restore failed; retrying");
            return;
        }
        let rt = Arc::clone(&self.rt);
        let handle = tokio::spawn(tracing::Instrument::instrument(
            async move { (id, restore::prepare(rt, id).await) },
            tracing::Span::current(),
        ));
        self.restoring.insert(id, handle);
    }

    /// Starts `id` again after the next backoff (see `retry_at`), which it
    /// returns.
    fn retry_later(&mut self, id: TaskId) -> std::time::Duration {
        let client = &self.rt.config.client;
        let backoff = self
            .retry_at
            .get(&id)
            .map_or(client.retry_backoff, |(_, last)| {
                (*last * 2).min(client.retry_backoff_max)
            });
        self.retry_at
            .insert(id, (Instant::now() + backoff, backoff));
        self.revive.insert(id);
        backoff
    }

    /// A task's stores are restored: create it and start fetching its inputs
    /// from the committed offsets.
    async fn restored(&mut self, id: TaskId, result: Result<Prepared>) {
        let Some(inputs) = self.owned.get(&id).cloned() else {
            return; // revoked or lost meanwhile; dropping `result` releases its store
        };
        let prepared = match result {
            Ok(p) => p,
            Err(e @ StreamsError::InvalidConfig { .. }) => {
                self.fail(e).await;
                return;
            }
            Err(e) => {
                let backoff = self.retry_later(id);
                tracing::warn!(task = %id, error = %e, backoff = ?backoff, "preparing the task failed; retrying");
                return;
            }
        };
        let started = async {
            if self.rt.config.guarantee == ProcessingGuarantee::ExactlyOnceV2 {
                self.producers().await?;
            }
            let task = StreamTask::new(
                &self.rt.topology,
                id,
                self.rt.app(),
                prepared.store.as_ref(),
            )?;
            // Stable offsets: while another owner's transaction holding
            // offsets for these partitions is open, this waits for it to end.
            let committed = commit::fetch_stable_offsets(&self.rt, &inputs)
                .await
                .map_err(|e| StreamsError::client(format!("task {id}: committed offsets"), e))?;
            Ok::<_, StreamsError>((task, committed))
        }
        .await;
        let (task, committed) = match started {
            Ok(v) => v,
            Err(e @ StreamsError::InvalidConfig { .. }) => {
                self.fail(e).await;
                return;
            }
            Err(e) => {
                let backoff = self.retry_later(id);
                tracing::warn!(task = %id, error = %e, backoff = ?backoff, "starting the task failed; retrying");
                return;
            }
        };
        self.retry_at.remove(&id);
        let mut assignment = self.consumer.assignment();
        assignment.extend(inputs.iter().cloned());
        self.consumer.assign(assignment);
        for tp in &inputs {
            let seek = committed
                .get(tp)
                .map_or(SeekTo::Earliest, |o| SeekTo::Offset(*o));
            if let Err(e) = self.consumer.seek(tp, seek) {
                tracing::warn!(task = %id, error = %e, "seek failed");
            }
        }
        let mut positions = BTreeMap::new();
        for tp in &inputs {
            if let Ok(o) = self.consumer.position(tp).await {
                positions.insert((tp.topic.clone(), tp.partition), o);
            }
        }
        self.rt.board.running(id, positions);
        tracing::info!(task = %id, inputs = ?inputs, "task running");
        self.rt.publish_store(id, prepared.store.as_ref());
        self.tasks.insert(
            id,
            Active {
                task,
                store: prepared.store,
                inputs,
                fence: prepared.fence,
                changelog: DeliveryGroup::new(),
                dirty: false,
            },
        );
    }

    /// Runs a polled batch through its tasks on a blocking thread, then sends
    /// what they wrote.
    async fn process(&mut self, records: Vec<ConsumerRecord>) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        if !self.writable() {
            // The records are not processed: they are fetched again after the
            // revival below, from the last commit.
            self.suspend_all("the membership lease ended").await;
            return Ok(());
        }
        let mut by_task: BTreeMap<TaskId, Vec<RawRecord>> = BTreeMap::new();
        for r in records {
            let Some(sub) = self.rt.topology.subtopology_of(&r.topic, self.rt.app()) else {
                continue;
            };
            let id = TaskId::new(sub, u32::try_from(r.partition).unwrap_or(0));
            if self.tasks.contains_key(&id) {
                by_task.entry(id).or_default().push(to_raw(r));
            }
        }
        let mut batch: Vec<(TaskId, Active, Vec<RawRecord>)> = Vec::new();
        for (id, records) in by_task {
            if let Some(task) = self.tasks.remove(&id) {
                batch.push((id, task, by_timestamp(records)));
            }
        }
        let handling = self.rt.config.deserialization;
        let mut skip = std::mem::take(&mut self.skip);
        // The last batch's outputs are written while this one is processed.
        let overlap: Vec<Written> = std::mem::take(&mut self.unsent)
            .into_iter()
            .map(|(id, outputs)| (id, outputs, Vec::new()))
            .collect();
        let job = tokio::task::spawn_blocking(move || {
            let mut batch = batch;
            let mut result = Ok(0u64);
            let mut failed = None;
            'tasks: for (_, active, records) in &mut batch {
                for r in records.iter() {
                    // No key is built while nothing is to be skipped (the
                    // usual case): a copy of the topic per record showed in
                    // the profile.
                    if !skip.is_empty() && skip.remove(&(r.topic.clone(), r.partition, r.offset)) {
                        tracing::warn!(task = %active.task.id(), topic = %r.topic, partition = r.partition, offset = r.offset, "skipping a record whose processing failed");
                        active.task.skip(&r.topic, r.offset);
                        active.dirty = true;
                        continue;
                    }
                    match active.task.process(r) {
                        Ok(()) => {}
                        Err(StreamsError::Serde(e))
                            if handling == DeserializationHandling::LogAndContinue =>
                        {
                            tracing::warn!(task = %active.task.id(), topic = %r.topic, partition = r.partition, offset = r.offset, error = %e, "skipping a record that does not deserialize");
                            active.task.skip(&r.topic, r.offset);
                        }
                        Err(e) => {
                            failed = Some((r.topic.clone(), r.partition, r.offset));
                            result = Err(e);
                            break 'tasks;
                        }
                    }
                    active.dirty = true;
                    if let Ok(n) = &mut result {
                        *n += 1;
                    }
                }
            }
            (batch, result, skip, failed)
        });
        // `write` never suspends the tasks (some are in the job): a lease
        // that ended is answered below, with every task back.
        let (joined, overlapped) = tokio::join!(job, self.write(overlap));
        let (batch, result, skip, failed) =
            joined.map_err(|e| StreamsError::NotRunning(format!("processing job: {e}")))?;
        let mut changelogs = Vec::new();
        for (id, mut active, _) in batch {
            // A caching store's changelog records wait for the commit (each
            // key's latest write), unless they outgrow
            // `cache.max.bytes.buffering`.
            let outputs = active.task.take_outputs();
            if !outputs.is_empty() {
                self.unsent.push((id, outputs));
            }
            changelogs.push((id, Vec::new(), active.task.take_changelog_due()));
            self.tasks.insert(id, active);
        }
        self.skip = skip;
        if !overlapped? {
            self.suspend_all("the membership lease ended").await;
            return Ok(());
        }
        if let (Err(StreamsError::Process { .. }), Some(at)) = (&result, failed)
            && self.rt.config.processing_errors == ProcessingErrorHandling::SkipRecord
        {
            self.skip.insert(at);
        }
        let processed = result?;
        self.rt
            .counters
            .processed
            .fetch_add(processed, Ordering::Relaxed);
        // The changelog records go now: a record's changelog write is sent
        // no later than it was before outputs overlapped processing.
        self.hand_over(changelogs).await
    }

    /// Sends what tasks wrote, after the outputs still [`unsent`](Self::unsent):
    /// outputs through the worker's producer, changelogs through each task's
    /// fence (at-least-once) or all through the worker's transaction
    /// (exactly-once).
    async fn send(&mut self, written: Vec<Written>) -> Result<()> {
        let mut all: Vec<Written> = std::mem::take(&mut self.unsent)
            .into_iter()
            .map(|(id, outputs)| (id, outputs, Vec::new()))
            .collect();
        all.extend(written);
        self.hand_over(all).await
    }

    /// [`write`](Self::write)s, or drops every task's uncommitted work if
    /// the lease has ended.
    async fn hand_over(&mut self, written: Vec<Written>) -> Result<()> {
        // Nothing to write is never refused: `write` checks the lease only
        // for records.
        if !self.write(written).await? {
            // Staged writes whose records are not sent must never be
            // committed: drop the tasks' uncommitted work.
            self.suspend_all("the membership lease ended").await;
        }
        Ok(())
    }

    /// Hands records to the producers if the lease is valid; `false` (and
    /// nothing written) if it has ended, which the caller must answer by
    /// dropping the uncommitted work of every task. It never touches
    /// `self.tasks` but to find a changelog's fence and delivery group, so it
    /// may run while some tasks are out processing, given only outputs.
    async fn write(&mut self, written: Vec<Written>) -> Result<bool> {
        if written.iter().all(|(_, o, c)| o.is_empty() && c.is_empty()) {
            return Ok(true);
        }
        if !self.writable() {
            return Ok(false);
        }
        if let Some(pause) = self.rt.config.pause_before_write.due() {
            tracing::warn!(pause = ?pause, "test hook: the worker is descheduled between its lease check and its writes");
            tokio::time::sleep(pause).await;
        }
        self.producers().await?;
        // The gate at-least-once writes carry (review M4): `writable` is
        // checked when a record is handed to the producer, the gate right
        // before each send of its batch, so linger and retries cannot carry
        // a record past the lease. It is the confirmed assignment's gate,
        // never a fresh one of the member's current lease (review F2).
        let Some(gate) = self.rt.write_gate() else {
            return Ok(false);
        };
        let Some(producers) = self.producers.as_ref() else {
            return Ok(true);
        };
        for (id, outputs, changelog) in written {
            // Each list joins its batches in one step (one lock, one memory
            // reservation), not one per record.
            if !outputs.is_empty() {
                let records: Vec<ProducerRecord> =
                    outputs.into_iter().map(producer_record).collect();
                match producers {
                    Producers::AtLeastOnce(p) => {
                        let gated = records
                            .into_iter()
                            .map(|r| r.with_gate(gate.clone()))
                            .collect();
                        p.enqueue_all_into(gated, &self.outputs).await
                    }
                    Producers::ExactlyOnce(txn) => {
                        txn.enqueue_all_into(records, &self.outputs).await
                    }
                }
                .map_err(|e| StreamsError::client(format!("task {id}: output"), e))?;
            }
            let Some(active) = self.tasks.get_mut(&id) else {
                continue;
            };
            if changelog.is_empty() {
                continue;
            }
            let records: Vec<ProducerRecord> = changelog.into_iter().map(producer_record).collect();
            let group = &active.changelog;
            match (producers, &active.fence) {
                (Producers::ExactlyOnce(txn), _) => txn.enqueue_all_into(records, group).await,
                (Producers::AtLeastOnce(_), Some(fence)) => {
                    fence.enqueue_all_into(records, group).await
                }
                // The test-only unfenced mode: nothing stops a zombie here.
                (Producers::AtLeastOnce(p), None) => {
                    let gated = records
                        .into_iter()
                        .map(|r| r.with_gate(gate.clone()))
                        .collect();
                    p.enqueue_all_into(gated, group).await
                }
            }
            .map_err(|e| StreamsError::client(format!("task {id}: changelog"), e))?;
        }
        Ok(true)
    }

    /// Commits the tasks' work. `instructed`: the instance asked for it
    /// while handling an assignment event (a revocation, a shutdown), so
    /// every loss of an older generation has reached this worker already.
    async fn commit(&mut self, instructed: bool) -> Result<()> {
        if self.tasks.values().all(|t| !t.dirty) {
            self.last_commit = Instant::now();
            return Ok(());
        }
        if !self.writable() {
            self.last_commit = Instant::now();
            self.suspend_all("the membership lease ended before the commit")
                .await;
            return Ok(());
        }
        // The commit's generation, held for the commit (issue 15): while
        // the permit is held the member sends no JoinGroup, so a task this
        // member keeps through a rebalance is never refused with
        // ILLEGAL_GENERATION for a commit that read the old generation and
        // arrived after the new one began; that refusal made its
        // transaction abortable and the task, which never moved, dropped
        // its work and reprocessed it. While the member is rejoining no
        // permit is given: an interval commit is postponed to the next
        // round of the loop (not a whole interval) and the uncommitted work
        // is kept, then committed under the new generation once the
        // instance has handled its assignment (`confirmed`, below). The
        // work of a task that was lost or revoked in between never gets
        // there: `Lose` drops it and `Revoke` commits it before the new
        // generation is confirmed. An instructed commit (revoke, shutdown)
        // does not wait: without a permit it commits as before, and a
        // refusal drops its work.
        let permit = match self.rt.lease.commit_permit() {
            Ok(p) => Some(p),
            Err(NoPermit::Rebalancing) if !instructed => {
                tracing::debug!("commit postponed: the member is rejoining the group");
                return Ok(());
            }
            Err(NoPermit::Rebalancing) => None,
            Err(NoPermit::LeaseEnded) => {
                self.last_commit = Instant::now();
                self.suspend_all("the membership lease ended before the commit")
                    .await;
                return Ok(());
            }
        };
        let confirmed = self.rt.confirmed_generation();
        if !instructed && permit.as_ref().map(|p| p.metadata().generation) != Some(confirmed) {
            // The lease is of a generation whose assignment the instance has
            // not handled yet: the member may have lost its partitions and
            // rejoined since this work's input was read, and the losses of
            // the older generation reach this worker (as `Lose`) before the
            // newer one is confirmed. Committing now, with the new
            // generation's metadata, could commit input another member has
            // processed meanwhile; the commit waits for the next round.
            tracing::debug!(
                "commit deferred: the current generation's assignment is not handled yet"
            );
            return Ok(());
        }
        self.last_commit = Instant::now();
        // The generation the whole commit keeps: the permit's, or for an
        // instructed commit without one the lease's now. The gate is checked
        // again after it was read: open now, it was open then, so the
        // generation is of the confirmed assignment's lease (a loss closes
        // the gate for good). A generation that changes before the offsets
        // are sent (a loss and a rejoin meanwhile) is refused in
        // `group_metadata` (review F2).
        let generation = match &permit {
            Some(p) => Some(p.metadata().clone()),
            None => self.rt.lease.metadata(),
        };
        if generation.is_none() || !self.writable() {
            drop(permit);
            self.suspend_all("the membership lease ended before the commit")
                .await;
            return Ok(());
        }
        let started = tokio::time::Instant::now();
        // Held-back records (the DSL's record caches) go out with this
        // commit.
        let mut flushed = Vec::new();
        for (id, active) in &mut self.tasks {
            if active.dirty {
                active.task.flush()?;
                flushed.push((
                    *id,
                    active.task.take_outputs(),
                    active.task.take_changelog(),
                ));
            }
        }
        if let Err(e) = self.send(flushed).await {
            // `send` stops at the first record the producer refuses; the
            // records after it, other tasks' among them, were never handed
            // over. No task may commit over them: every caller must see
            // the work dropped, `revoke` too, whose other tasks run on.
            tracing::warn!(error = %e, "sending before the commit failed: dropping uncommitted work");
            self.suspend_all("sending before the commit failed").await;
            return Err(e);
        }
        // A worker whose tasks have written nothing yet (a source table's
        // updates, a filter that dropped everything) has no producer; it
        // still commits their offsets and stores. Without one the commit
        // did nothing, and the tasks' staged writes and offsets stayed
        // uncommitted for as long as they wrote nothing.
        if let Err(e) = self.producers().await {
            self.suspend_all("creating the producers for the commit failed")
                .await;
            return Err(e);
        }
        let rt = Arc::clone(&self.rt);
        let result = match self.producers.as_ref() {
            Some(Producers::AtLeastOnce(p)) => {
                commit::commit_alos(&rt, generation.as_ref(), p, &mut self.tasks, &self.outputs)
                    .await
            }
            Some(Producers::ExactlyOnce(txn)) => {
                // The transaction's commit waits for every output itself.
                self.outputs = DeliveryGroup::new();
                commit::commit_eos(&rt, generation.as_ref(), txn, &mut self.tasks).await
            }
            None => Ok(()),
        };
        drop(permit);
        match result {
            Ok(()) => {
                rt.counters.commits.fetch_add(1, Ordering::Relaxed);
                metrics::histogram!("weir_streams_commit_seconds", &rt.metric_labels())
                    .record(started.elapsed().as_secs_f64());
                tracing::debug!(tasks = self.tasks.len(), "committed");
                Ok(())
            }
            // The lease ended during the commit (outputs dropped unsent by
            // their gate, say): like the check above, not a failure of the
            // application; the tasks restart from their last commit once
            // the member owns them again.
            Err(e @ StreamsError::TaskMigrated { .. }) => {
                tracing::warn!(error = %e, "commit cut short: dropping uncommitted work");
                self.suspend_all("the membership lease ended during the commit")
                    .await;
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "commit failed: dropping uncommitted work");
                self.suspend_all("the commit failed").await;
                Err(e)
            }
        }
    }

    /// Aborts the uncommitted work of every task and restarts them from their
    /// last commit once writing is allowed again.
    async fn suspend_all(&mut self, why: &str) {
        if self.tasks.is_empty() {
            return;
        }
        tracing::warn!(
            reason = why,
            tasks = self.tasks.len(),
            "dropping uncommitted work of every task"
        );
        if let Some(Producers::ExactlyOnce(txn)) = &self.producers {
            // The next transaction begins at once, so the restarted tasks'
            // first sends are inside one; fenced or broken, a new producer
            // (and epoch) next time.
            let restarted = match txn.abort().await {
                Ok(()) => txn.begin().is_ok(),
                Err(_) => false,
            };
            if !restarted {
                self.producers = None;
            }
        }
        // Records still in flight settle into the dropped tally, never the
        // next commit's.
        self.outputs = DeliveryGroup::new();
        self.unsent.clear();
        let ids: Vec<TaskId> = self.tasks.keys().copied().collect();
        for id in ids {
            if let Some(mut active) = self.tasks.remove(&id) {
                self.rt.publish_store(id, None);
                commit::abort_task(id, &mut active).await;
                active.task.close();
                self.revive.insert(id);
            }
        }
        self.consumer.assign(Vec::new());
    }

    async fn fail(&mut self, error: StreamsError) {
        tracing::error!(error = %error, "processing failed: aborting uncommitted work");
        self.suspend_all("processing failed").await;
        let _ = self.reports.send(WorkerReport::Failed {
            worker: self.index,
            error,
        });
    }

    /// Commits, then closes `tasks` cleanly (stores closed, so the next owner
    /// on this disk opens them without replaying a journal).
    async fn revoke(&mut self, tasks: &[TaskId]) {
        if tasks.iter().any(|t| self.tasks.contains_key(t))
            && let Err(e) = self.commit(true).await
        {
            tracing::warn!(error = %e, "commit before revocation failed");
        }
        // The commit sent them; if it could not, they are not to be sent.
        self.unsent.retain(|(id, _)| !tasks.contains(id));
        for id in tasks {
            self.owned.remove(id);
            self.revive.remove(id);
            self.retry_at.remove(id);
            if let Some(h) = self.restoring.remove(id) {
                h.abort();
                let _ = h.await;
            }
            if let Some(mut active) = self.tasks.remove(id) {
                self.rt.publish_store(*id, None);
                active.task.close();
                if active.dirty {
                    commit::abort_task(*id, &mut active).await;
                }
                if let Some(fence) = active.fence.take() {
                    let _ = fence.abort().await;
                    fence.close().await;
                }
                if let Some(store) = active.store.take() {
                    let closed = tokio::task::spawn_blocking(move || store.close()).await;
                    if !matches!(closed, Ok(Ok(()))) {
                        tracing::warn!(task = %id, "closing the store failed; the next open replays its journal");
                    }
                }
                tracing::info!(task = %id, "task closed");
            }
        }
        self.reassign_consumer();
    }

    /// Closes `tasks` without committing: another member may own them now.
    async fn lose(&mut self, tasks: &[TaskId]) {
        self.unsent.retain(|(id, _)| !tasks.contains(id));
        for id in tasks {
            self.owned.remove(id);
            self.revive.remove(id);
            self.retry_at.remove(id);
            if let Some(h) = self.restoring.remove(id) {
                h.abort();
                let _ = h.await;
            }
            if let Some(mut active) = self.tasks.remove(id) {
                self.rt.publish_store(*id, None);
                active.task.discard_uncommitted();
                active.task.close();
                if let Some(store) = &active.store {
                    store.abort();
                }
                tracing::info!(task = %id, "task closed without committing (lost)");
            }
        }
        if let Some(Producers::ExactlyOnce(txn)) = &self.producers
            && self.tasks.is_empty()
            && txn.abort().await.is_err()
        {
            self.producers = None;
        }
        // Records still in flight settle into the dropped tally, never the
        // next commit's.
        self.outputs = DeliveryGroup::new();
        self.reassign_consumer();
    }

    fn reassign_consumer(&mut self) {
        let inputs: Vec<TopicPartition> = self
            .tasks
            .values()
            .flat_map(|t| t.inputs.iter().cloned())
            .collect();
        self.consumer.assign(inputs);
    }

    async fn close_producers(&mut self) {
        match self.producers.take() {
            Some(Producers::AtLeastOnce(p)) => p.close().await,
            Some(Producers::ExactlyOnce(txn)) => {
                let _ = txn.abort().await;
                txn.close().await;
            }
            None => {}
        }
    }
}

/// The next restore that finished, or pending forever when none runs.
async fn next_restored(
    restoring: &mut BTreeMap<TaskId, Restoring>,
) -> Option<(TaskId, Result<Prepared>)> {
    if restoring.is_empty() {
        return std::future::pending().await;
    }
    let done = std::future::poll_fn(|cx| {
        for (id, handle) in restoring.iter_mut() {
            if let std::task::Poll::Ready(r) = std::pin::Pin::new(handle).poll(cx) {
                return std::task::Poll::Ready((*id, r));
            }
        }
        std::task::Poll::Pending
    })
    .await;
    let (id, joined) = done;
    restoring.remove(&id);
    match joined {
        Ok(result) => Some(result),
        Err(e) => Some((
            id,
            Err(StreamsError::NotRunning(format!(
                "restore of {id} stopped: {e}"
            ))),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(topic: &str, offset: i64, timestamp: i64) -> RawRecord {
        RawRecord {
            topic: topic.to_owned(),
            partition: 0,
            offset,
            timestamp,
            key: None,
            value: None,
            headers: Vec::new(),
        }
    }

    #[test]
    fn a_tasks_records_are_merged_by_timestamp_keeping_each_partitions_order() {
        let polled = vec![
            raw("orders", 0, 50),
            raw("orders", 1, 10),
            raw("orders", 2, 60),
            raw("customers", 0, 5),
            raw("customers", 1, 55),
        ];
        let order: Vec<(String, i64)> = by_timestamp(polled)
            .into_iter()
            .map(|r| (r.topic, r.offset))
            .collect();
        // customers@5 first; orders 0 (ts 50) before orders 1 (ts 10): a
        // partition's own order is never changed.
        let want = [
            ("customers", 0),
            ("orders", 0),
            ("orders", 1),
            ("customers", 1),
            ("orders", 2),
        ];
        assert_eq!(
            order,
            want.iter()
                .map(|(t, o)| ((*t).to_owned(), *o))
                .collect::<Vec<_>>()
        );
    }
}
