//! The commit: the one place each processing guarantee lives.
//!
//! **At-least-once** (`commit_alos`). Outputs and repartition records go
//! through the worker's idempotent producer and are acknowledged first, so
//! no input offset is committed before what it produced is durable. Each
//! stateful task then commits through its own *fence*, a transactional
//! producer with the id `<application.id>-task-<task>`: its changelog
//! records and its input offsets are one Kafka transaction. A new owner's
//! `InitProducerId` on that id bumps the epoch, aborts the old owner's open
//! transaction and makes the broker refuse its every later changelog write,
//! so a zombie can never corrupt state (Kafka Streams' KAFKA-12693) and
//! state is exact even under at-least-once; only outputs may repeat.
//!
//! **Exactly-once v2** (`commit_eos`). One transaction per worker holds
//! outputs, repartition records, changelogs and the input offsets, sent with
//! the group metadata so the coordinator refuses a zombie's offsets
//! (KIP-447).
//!
//! **Both.** A store's staged writes reach disk only in `TaskStore::commit`,
//! which runs after the Kafka transaction committed and writes the data with
//! the changelog offsets it matches in one atomic batch. An aborted
//! transaction's writes are dropped with `TaskStore::abort` and never reach
//! the store (Kafka Streams' KAFKA-9891). A crash between the Kafka commit and
//! the store commit leaves the store behind its changelog, never ahead: the
//! next start restores the tail.

use std::collections::BTreeMap;

use weir_client::Lane;
use weir_client::consumer::TopicPartition;
use weir_client::group_offsets::{Stability, by_partition, fetch_committed_once};
use weir_client::producer::{DeliveryGroup, Producer};
use weir_client::transaction::{GroupMetadata, TransactionalProducer};
use weir_store::{ChangelogPartition, TaskStore};

use super::Runtime;
use crate::error::{Result, StreamsError};
use crate::task::{StreamTask, TaskId};

/// A task a worker runs.
pub(crate) struct Active {
    pub(crate) task: StreamTask,
    pub(crate) store: Option<TaskStore>,
    pub(crate) inputs: Vec<TopicPartition>,
    /// At-least-once, stateful tasks: the task's changelog fence.
    pub(crate) fence: Option<TransactionalProducer>,
    /// The changelog records sent since the last commit.
    pub(crate) changelog: DeliveryGroup,
    /// Something was processed since the last commit.
    pub(crate) dirty: bool,
}

impl Active {
    /// The one rule for punctuation: a wall-clock punctuation that forwarded
    /// records or wrote to a store makes its task need a commit, under both
    /// guarantees (Kafka Streams' `commitNeeded`). Call it right after the
    /// punctuation, before its changelog records are taken.
    ///
    /// It prevents (review F1): under exactly-once, a punctuator's outputs
    /// on an idle input left in the worker's open transaction, which pins
    /// the LSO of every partition it wrote until the coordinator aborts it
    /// at `transaction.timeout.ms`, losing them; under at-least-once, a
    /// punctuator's staged writes to an unlogged store dropped when the
    /// task closes, since a clean task's close commits nothing.
    pub(crate) fn punctuated(&mut self, done: crate::task::Punctuated) {
        if !done.ran {
            return;
        }
        if done.forwarded
            || self.task.has_changelog()
            || self
                .store
                .as_ref()
                .is_some_and(TaskStore::has_staged_writes)
        {
            self.dirty = true;
        }
    }
}

/// How a worker writes.
pub(crate) enum Producers {
    AtLeastOnce(Producer),
    ExactlyOnce(Box<TransactionalProducer>),
}

fn migrated(task: impl std::fmt::Display, reason: impl Into<String>) -> StreamsError {
    StreamsError::TaskMigrated {
        task: task.to_string(),
        reason: reason.into(),
    }
}

/// The error of a commit whose offsets the group coordinator refused.
///
/// A refusal for a stale membership (the group rebalanced while the commit
/// was on its way) is a task migration, not a failure of the application:
/// the worker drops the uncommitted work and restarts the tasks from their
/// last commit once the member owns them again, whatever
/// `processing.exception.handler` says. Reported as a failure, it stopped
/// the instance under `shutdown_client` on a routine rebalance race.
fn offsets_refused(
    task: impl std::fmt::Display,
    context: String,
    e: weir_client::ClientError,
) -> StreamsError {
    if e.is_stale_membership() {
        migrated(task, format!("the group refused the offsets: {e}"))
    } else {
        StreamsError::client(context, e)
    }
}

/// The metadata commits carry: the lease's generation and member id, or
/// `None` once the lease ended (then nothing may be committed).
///
/// `held`: the metadata of the commit's permit (`Lease::commit_permit`),
/// whose generation the whole commit must keep. The lease is read again
/// at every offset commit (the self-fencing check), and a generation that
/// changed since the permit was given (the member was expelled and
/// rejoined while the commit ran) is refused: committing the older work
/// under the newer generation could commit input another member processed
/// meanwhile.
pub(crate) fn group_metadata(
    rt: &Runtime,
    held: Option<&weir_group::member::GroupMetadata>,
) -> Option<GroupMetadata> {
    let now = rt.lease.metadata()?;
    match held {
        Some(h) if *h != now => None,
        _ => Some(GroupMetadata::from(now)),
    }
}

/// Waits for the changelog records sent since the last commit and returns,
/// per changelog partition, the offset after the last record written.
async fn changelog_offsets(
    task: TaskId,
    changelog: &DeliveryGroup,
) -> Result<BTreeMap<ChangelogPartition, i64>> {
    let ends = changelog
        .wait()
        .await
        .map_err(|e| StreamsError::client(format!("task {task}: writing the changelog"), e))?;
    Ok(ends
        .into_iter()
        .map(|(tp, next)| (ChangelogPartition::new(tp.topic, tp.partition), next))
        .collect())
}

fn input_offsets(task: &Active) -> BTreeMap<TopicPartition, i64> {
    let partition = i32::try_from(task.task.id().partition).unwrap_or(i32::MAX);
    task.task
        .consumed_offsets()
        .iter()
        .map(|(topic, offset)| (TopicPartition::new(topic.clone(), partition), *offset))
        .collect()
}

/// Applies a task's staged writes with the changelog offsets they match (and
/// the input offsets, for `weir store offsets`) in one atomic batch.
async fn commit_store(
    rt: &Runtime,
    id: TaskId,
    store: &TaskStore,
    changelog: BTreeMap<ChangelogPartition, i64>,
    inputs: &BTreeMap<TopicPartition, i64>,
) -> Result<()> {
    let mut offsets: Vec<(ChangelogPartition, i64)> = changelog.into_iter().collect();
    // A task whose stores are all in memory has nothing on disk the input
    // offsets could describe: recording them would claim state that is gone
    // after a restart.
    let on_disk = rt
        .topology
        .subtopology_stores(id.subtopology)
        .iter()
        .any(|spec| !spec.in_memory);
    if on_disk {
        offsets.extend(
            inputs
                .iter()
                .map(|(tp, o)| (ChangelogPartition::new(tp.topic.clone(), tp.partition), *o)),
        );
    }
    let committed = store.clone();
    tokio::task::spawn_blocking(move || committed.commit(&offsets))
        .await
        .map_err(|e| StreamsError::NotRunning(format!("task {id}: store commit: {e}")))?
        .map_err(|source| StreamsError::store(id.to_string(), source))?;
    rt.note_offset_sum(id, store);
    Ok(())
}

/// The connection lane of what a task asks the group coordinator outside a
/// transaction: the stable offsets it starts from, and the at-least-once
/// offset commit of stateless tasks.
///
/// Not [`Lane::Coordinator`]: the member's JoinGroup waits there, parked by
/// the coordinator until every member has rejoined, and a broker answers one
/// request per connection at a time. A task assigned just before a rebalance
/// waited for that whole join phase to fetch its offsets (review F3), up to
/// a crashed member's session timeout. `Lane::Transaction` carries the
/// transactional offset commits already, for the same reason.
pub(crate) const TASK_OFFSETS_LANE: Lane = Lane::Transaction;

/// The committed offsets a task starts from, stable ones only: while a
/// transaction holding offsets for these partitions is open, this waits
/// (retrying `UNSTABLE_OFFSET_COMMIT`) for it to end. Partitions without a
/// committed offset are absent.
pub(crate) async fn fetch_stable_offsets(
    rt: &Runtime,
    partitions: &[TopicPartition],
) -> weir_client::Result<BTreeMap<TopicPartition, i64>> {
    let cluster = &rt.cluster;
    cluster
        .retry("OffsetFetch(require_stable)", || async {
            fetch_committed_once(
                cluster,
                rt.app(),
                Some(partitions),
                Stability::Required,
                TASK_OFFSETS_LANE,
            )
            .await
        })
        .await
        .map(by_partition)
}

/// At-least-once: outputs acknowledged, then each stateful task's fenced
/// transaction (changelog + input offsets), then its store.
pub(crate) async fn commit_alos(
    rt: &Runtime,
    held: Option<&weir_group::member::GroupMetadata>,
    producer: &Producer,
    tasks: &mut BTreeMap<TaskId, Active>,
    outputs: &DeliveryGroup,
) -> Result<()> {
    producer.flush().await;
    outputs.wait().await.map_err(|e| match e {
        e @ weir_client::ClientError::SendGateClosed { .. } => {
            migrated("outputs", format!("the membership lease ended: {e}"))
        }
        e => StreamsError::client("writing outputs", e),
    })?;
    let mut unfenced: Vec<(weir_group::assignor::TopicPartition, i64)> = Vec::new();
    let mut unfenced_stores = Vec::new();
    for (id, task) in tasks.iter_mut().filter(|(_, t)| t.dirty) {
        let inputs = input_offsets(task);
        let changelog = changelog_offsets(*id, &task.changelog).await?;
        let Some(meta) = group_metadata(rt, held) else {
            return Err(migrated(
                id,
                "the membership lease ended (or its generation changed) before the commit",
            ));
        };
        match (&task.fence, &task.store) {
            (Some(fence), Some(store)) => {
                let txn = |e| StreamsError::client(format!("task {id}: committing"), e);
                fence
                    .send_offsets_to_transaction(&inputs, &meta)
                    .await
                    .map_err(|e| offsets_refused(id, format!("task {id}: committing"), e))?;
                fence.commit().await.map_err(txn)?;
                // Only now, with the changelog committed, may the store hold the writes.
                commit_store(rt, *id, store, changelog, &inputs).await?;
                fence.begin().map_err(txn)?;
            }
            // Stateless tasks (and the test-only unfenced mode): a plain
            // offset commit, checked by generation at the coordinator.
            (_, store) => {
                unfenced.extend(inputs.iter().map(|(tp, o)| {
                    (
                        weir_group::assignor::TopicPartition::new(tp.topic.clone(), tp.partition),
                        *o,
                    )
                }));
                if let Some(store) = store {
                    unfenced_stores.push((*id, store.clone(), changelog, inputs));
                }
            }
        }
        task.dirty = false;
    }
    if !unfenced.is_empty() {
        let Some(meta) = group_metadata(rt, held) else {
            return Err(migrated(
                "unfenced tasks",
                "the membership lease ended (or its generation changed)",
            ));
        };
        let meta = weir_group::member::GroupMetadata::from(meta);
        weir_group::offsets::commit_on(&rt.cluster, &meta, &unfenced, TASK_OFFSETS_LANE)
            .await
            .map_err(|e| StreamsError::group("committing offsets", e))?;
    }
    for (id, store, changelog, inputs) in unfenced_stores {
        commit_store(rt, id, &store, changelog, &inputs).await?;
    }
    Ok(())
}

/// Exactly-once v2: one transaction for everything the worker wrote, then
/// the stores.
pub(crate) async fn commit_eos(
    rt: &Runtime,
    held: Option<&weir_group::member::GroupMetadata>,
    txn: &TransactionalProducer,
    tasks: &mut BTreeMap<TaskId, Active>,
) -> Result<()> {
    if !tasks.values().any(|t| t.dirty) {
        return Ok(());
    }
    let mut per_task = Vec::new();
    let mut all_inputs = BTreeMap::new();
    for (id, task) in tasks.iter_mut().filter(|(_, t)| t.dirty) {
        let changelog = changelog_offsets(*id, &task.changelog).await?;
        let inputs = input_offsets(task);
        all_inputs.extend(inputs.clone());
        per_task.push((*id, changelog, inputs));
    }
    let err = |e| StreamsError::client("committing the transaction", e);
    let Some(meta) = group_metadata(rt, held) else {
        return Err(migrated(
            "all",
            "the membership lease ended (or its generation changed) before the commit",
        ));
    };
    txn.send_offsets_to_transaction(&all_inputs, &meta)
        .await
        .map_err(|e| offsets_refused("all", "committing the transaction".into(), e))?;
    txn.commit().await.map_err(err)?;
    for (id, changelog, inputs) in per_task {
        let Some(task) = tasks.get_mut(&id) else {
            continue;
        };
        if let Some(store) = &task.store {
            commit_store(rt, id, store, changelog, &inputs).await?;
        }
        task.dirty = false;
    }
    txn.begin().map_err(err)?;
    Ok(())
}

/// Drops everything uncommitted of a task: staged store writes, buffered
/// records, and (best effort) its fence's open transaction. What was sent
/// belongs to a transaction that is aborted here or by the next owner.
pub(crate) async fn abort_task(id: TaskId, task: &mut Active) {
    task.task.discard_uncommitted();
    // Records still in flight settle into the dropped tally.
    task.changelog = DeliveryGroup::new();
    task.dirty = false;
    if let Some(store) = &task.store {
        store.abort();
    }
    if let Some(fence) = &task.fence
        && let Err(e) = fence.abort().await
    {
        tracing::debug!(task = %id, error = %e, "aborting the task's changelog transaction");
    }
}
