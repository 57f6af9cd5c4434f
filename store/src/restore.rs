//! Restoring a store from its changelog, for active tasks, standbys and warmups alike.
//!
//! Two paths, both pipelined over two threads (the caller's thread prepares the
//! next batch or run while a worker thread writes the previous one):
//!
//! - **Sorted runs** (an external merge sort), for a key-value store that is
//!   empty when the restore starts. Records arrive in offset order, not key
//!   order, and may not fit in memory, so they are cut into runs of
//!   [`StoreOptions::restore_run_bytes`], each sorted and de-duplicated (last
//!   write per key wins) by whichever thread is free. Runs are kept in memory up
//!   to [`StoreOptions::restore_memory_bytes`] and spilled to files after that
//!   (`spill`). `finish` merges all runs once, newest write per key winning, on
//!   [`StoreOptions::restore_threads`] threads that each write a disjoint key
//!   range through fjall's bulk ingestion (`run_merge`); disjoint runs need no
//!   compaction. Ingestion is not part of a write batch, so a marker in the
//!   metadata says "contents are not a commit" until the final offsets are
//!   committed; if the process dies first, `open` empties the store and reports
//!   its offset as unknown (see `TaskStore::open`).
//! - **Atomic batches**, for everything else (catch-up of a non-empty store,
//!   standbys, window stores): puts and tombstones go into fjall write batches of
//!   [`StoreOptions::restore_batch_bytes`], each carrying the offset it reaches,
//!   so every crash leaves a consistent prefix of the changelog.
//!
//! [`StoreOptions::restore_run_bytes`]: crate::StoreOptions::restore_run_bytes
//! [`StoreOptions::restore_memory_bytes`]: crate::StoreOptions::restore_memory_bytes
//! [`StoreOptions::restore_threads`]: crate::StoreOptions::restore_threads
//! [`StoreOptions::restore_batch_bytes`]: crate::StoreOptions::restore_batch_bytes

use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::Instant;

use fjall::{Keyspace, OwnedWriteBatch, PersistMode};

use crate::error::{Result, StoreError};
use crate::kv::check_entry;
use crate::meta::{self, ChangelogPartition, StoreKind};
use crate::run_merge::ingest_runs;
use crate::sorted_run::{RunBuilder, SortedRun};
use crate::spill::{SPILL_DIR, SpilledRuns, memory_source};
use crate::task_store::{TaskStore, segment_keyspace_name};
use crate::window::{encode_segment_key, is_live, segment_of, split_window_changelog_key};

/// One changelog record: a put, or a tombstone when `value` is `None`.
#[derive(Debug, Clone, Copy)]
pub struct ChangelogRecord<'a> {
    /// The record's offset in the changelog partition.
    pub offset: i64,
    /// The record key (for window stores, a [`window_changelog_key`](crate::window_changelog_key)).
    pub key: &'a [u8],
    /// The value, or `None` for a tombstone.
    pub value: Option<&'a [u8]>,
}

/// How far a restore got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreProgress {
    /// Records applied so far by this restorer.
    pub records: u64,
    /// Key and value bytes applied so far.
    pub bytes: u64,
    /// The offset after the last record applied (where the restore resumes).
    pub next_offset: Option<i64>,
    /// The changelog end offset the restore is heading for.
    pub end_offset: i64,
}

impl RestoreProgress {
    /// Records still to restore, if the position is known.
    pub fn remaining(&self) -> Option<i64> {
        self.next_offset.map(|next| (self.end_offset - next).max(0))
    }
}

/// Which write path a restorer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestorePath {
    /// Bulk ingestion of sorted runs (empty key-value store).
    SortedRuns,
    /// Atomic write batches with offsets.
    Batches,
}

enum Job {
    /// A key-value batch, sorted and de-duplicated on the caller's thread; the
    /// worker turns it into one write batch with the offset it reaches.
    SortedBatch {
        run: SortedRun,
        next_offset: i64,
        durability: Option<PersistMode>,
    },
    Batch {
        batch: OwnedWriteBatch,
        next_offset: i64,
        stream_time: Option<i64>,
    },
    /// A run of an empty-store restore, still in arrival order: the worker
    /// sorts it and keeps it or spills it to a file.
    Run(RunBuilder),
    /// A run the caller sorted itself because the worker was busy.
    SortedRun(SortedRun),
}

/// Applies changelog records to one store. Create with [`TaskStore::restorer`],
/// feed with [`ChangelogRestorer::apply`], end with [`ChangelogRestorer::finish`].
pub struct ChangelogRestorer {
    task: TaskStore,
    store: String,
    partition: ChangelogPartition,
    kind: StoreKind,
    path: RestorePath,
    progress: RestoreProgress,
    batch: Option<OwnedWriteBatch>,
    batch_bytes: usize,
    stream_time: Option<i64>,
    run: RunBuilder,
    /// Arenas of runs the worker has sorted, for reuse (saves page faults).
    recycled: Receiver<RunBuilder>,
    keyspace: Option<Keyspace>,
    jobs: Option<SyncSender<Job>>,
    worker: Option<JoinHandle<Result<Option<SpilledRuns>>>>,
}

impl std::fmt::Debug for ChangelogRestorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangelogRestorer")
            .field("store", &self.store)
            .field("partition", &self.partition)
            .field("path", &self.path)
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl TaskStore {
    /// Starts restoring `store` from `partition`, heading for `end_offset`.
    ///
    /// # Errors
    ///
    /// [`StoreError::UnknownStore`], [`StoreError::StagedWritesPending`] if the
    /// store has uncommitted writes, or fjall errors.
    pub fn restorer(
        &self,
        store: &str,
        partition: ChangelogPartition,
        end_offset: i64,
    ) -> Result<ChangelogRestorer> {
        let (kind, keyspace, stream_time, next_offset) = {
            let state = self.inner.state();
            let entry = state.store(store)?;
            if !entry.staged.kv.is_empty() || !entry.staged.window.is_empty() {
                return Err(StoreError::StagedWritesPending(store.to_owned()));
            }
            (
                entry.registration.kind,
                entry.keyspace.clone(),
                entry.stream_time,
                state.offsets.get(&partition).copied(),
            )
        };
        let empty = match &keyspace {
            Some(ks) => ks.first_key_value().is_none(),
            None => false,
        };
        let path = if empty {
            RestorePath::SortedRuns
        } else {
            RestorePath::Batches
        };
        let spill = if path == RestorePath::SortedRuns {
            // From here until `finish` commits, the store claims nothing.
            self.inner.write_meta_now(
                &[(meta::restoring_key(store), Vec::new())],
                &[meta::offset_key(&partition)],
            )?;
            self.inner.state().offsets.remove(&partition);
            Some(SpilledRuns::create(
                self.path().join(SPILL_DIR).join(store),
                self.inner.options.restore_memory_bytes,
            )?)
        } else {
            None
        };
        let (jobs, rx) = sync_channel::<Job>(1);
        let (recycle, recycled) = sync_channel::<RunBuilder>(2);
        let worker_task = self.clone();
        let worker_store = store.to_owned();
        let worker_partition = partition.clone();
        let worker_keyspace = keyspace.clone();
        let worker = std::thread::Builder::new()
            .name(format!("weir-restore-{store}"))
            .spawn(move || {
                run_worker(
                    &worker_task,
                    &worker_store,
                    &worker_partition,
                    worker_keyspace,
                    spill,
                    &rx,
                    &recycle,
                )
            })
            .map_err(|e| StoreError::io(self.path(), e))?;
        tracing::info!(store, partition = %partition, end_offset, path = ?path, "restore started");
        Ok(ChangelogRestorer {
            task: self.clone(),
            store: store.to_owned(),
            partition,
            kind,
            path,
            progress: RestoreProgress {
                records: 0,
                bytes: 0,
                next_offset,
                end_offset,
            },
            batch: None,
            batch_bytes: 0,
            stream_time,
            run: match path {
                RestorePath::SortedRuns => {
                    RunBuilder::with_capacity(self.inner.options.restore_run_bytes)
                }
                RestorePath::Batches => RunBuilder::default(),
            },
            recycled,
            keyspace,
            jobs: Some(jobs),
            worker: Some(worker),
        })
    }
}

impl ChangelogRestorer {
    /// The write path chosen when the restore started.
    pub fn path(&self) -> RestorePath {
        self.path
    }

    /// Progress so far.
    pub fn progress(&self) -> RestoreProgress {
        self.progress
    }

    /// Applies records (in offset order). Memory stays bounded: full batches or
    /// runs are handed to the worker, which holds at most one more in its queue.
    ///
    /// # Errors
    ///
    /// [`StoreError::BadChangelogRecord`] for keys or values the store cannot
    /// hold, or the worker's write error.
    pub fn apply(&mut self, records: &[ChangelogRecord<'_>]) -> Result<()> {
        for record in records {
            let bad = |reason: String| StoreError::BadChangelogRecord {
                store: self.store.clone(),
                offset: record.offset,
                reason,
            };
            let size = record.key.len() + record.value.map_or(0, <[u8]>::len);
            match (self.path, self.kind) {
                (RestorePath::SortedRuns, _) => {
                    check_entry(&self.store, record.key, record.value)
                        .map_err(|e| bad(e.to_string()))?;
                    self.run.push(record.key, record.value);
                    if self.run.data_bytes() >= self.task.inner.options.restore_run_bytes {
                        let run = std::mem::take(&mut self.run);
                        self.send_run(run)?;
                    }
                }
                (RestorePath::Batches, StoreKind::KeyValue) => {
                    check_entry(&self.store, record.key, record.value)
                        .map_err(|e| bad(e.to_string()))?;
                    // Sorted before it is written: memtable inserts in key order
                    // are cheaper, and repeated keys collapse to their last write.
                    self.run.push(record.key, record.value);
                }
                (
                    RestorePath::Batches,
                    StoreKind::Window {
                        retention_ms,
                        segment_ms,
                    },
                ) => {
                    let (key, window_start) = split_window_changelog_key(record.key)
                        .ok_or_else(|| bad("window changelog key shorter than 8 bytes".into()))?;
                    let encoded =
                        encode_segment_key(key, window_start).map_err(|e| bad(e.to_string()))?;
                    check_entry(&self.store, &encoded, record.value)
                        .map_err(|e| bad(e.to_string()))?;
                    if record.value.is_some() {
                        self.stream_time = Some(
                            self.stream_time
                                .map_or(window_start, |t| t.max(window_start)),
                        );
                    }
                    if is_live(window_start, retention_ms, self.stream_time) {
                        let ks = self.segment(segment_of(window_start, segment_ms))?;
                        let batch = self.batch.get_or_insert_with(|| self.task.inner.db.batch());
                        match record.value {
                            Some(v) => batch.insert(&ks, encoded, v),
                            None => batch.remove(&ks, encoded),
                        }
                    }
                }
            }
            self.progress.records += 1;
            self.progress.bytes += size as u64;
            self.progress.next_offset = Some(record.offset + 1);
            self.batch_bytes += size;
            if self.path == RestorePath::Batches
                && self.batch_bytes >= self.task.inner.options.restore_batch_bytes
            {
                self.send_batch(None)?;
            }
        }
        Ok(())
    }

    /// Writes what is buffered and commits the offset (with the configured
    /// durability), then returns the final progress.
    ///
    /// # Errors
    ///
    /// The worker's write error, or fjall errors committing the offset.
    pub fn finish(mut self) -> Result<RestoreProgress> {
        match self.path {
            RestorePath::Batches => {
                let durability = self.task.inner.options.durability.persist_mode();
                self.send_batch(Some(durability))?;
                self.join()?;
            }
            RestorePath::SortedRuns => {
                // The last run is sorted here while the worker spills the
                // previous one; it joins the merge from memory.
                let started = Instant::now();
                let last = std::mem::take(&mut self.run);
                let last = (!last.is_empty()).then(|| last.seal().0);
                let sealed = started.elapsed();
                let spilled = self.join()?;
                let joined = started.elapsed();
                let mut runs = spilled
                    .as_ref()
                    .map(SpilledRuns::sources)
                    .unwrap_or_default();
                runs.extend(last.map(memory_source));
                let Some(keyspace) = &self.keyspace else {
                    return Err(StoreError::UnknownStore(self.store.clone()));
                };
                let written = ingest_runs(
                    &runs,
                    keyspace,
                    self.task.inner.options.restore_threads,
                    self.task.path(),
                )?;
                let merged = started.elapsed();
                drop(spilled);
                // Where the time of the final step went, for profiling.
                tracing::debug!(
                    store = %self.store,
                    runs = runs.len(),
                    written,
                    last_sort_ms = sealed.as_millis(),
                    worker_wait_ms = (joined - sealed).as_millis(),
                    merge_ms = (merged - joined).as_millis(),
                    "merged sorted runs into the store"
                );
                let inner = &self.task.inner;
                let mut batch = inner.db.batch().durability(Some(PersistMode::SyncAll));
                if let Some(next) = self.progress.next_offset {
                    batch.insert(
                        &inner.meta,
                        meta::offset_key(&self.partition),
                        next.to_be_bytes().to_vec(),
                    );
                }
                batch.remove(&inner.meta, meta::restoring_key(&self.store));
                batch
                    .commit()
                    .map_err(inner.engine_err("committing restored offsets"))?;
                if let Some(next) = self.progress.next_offset {
                    inner.state().offsets.insert(self.partition.clone(), next);
                }
            }
        }
        tracing::info!(
            store = %self.store,
            partition = %self.partition,
            records = self.progress.records,
            bytes = self.progress.bytes,
            next_offset = ?self.progress.next_offset,
            end_offset = self.progress.end_offset,
            "restore finished"
        );
        Ok(self.progress)
    }

    fn segment(&self, segment: i64) -> Result<Keyspace> {
        let mut state = self.task.inner.state();
        let entry = state.store_mut(&self.store)?;
        if let Some(ks) = entry.segments.get(&segment) {
            return Ok(ks.clone());
        }
        let ks = self
            .task
            .inner
            .keyspace(&segment_keyspace_name(&self.store, segment))?;
        entry.segments.insert(segment, ks.clone());
        Ok(ks)
    }

    /// Adds the reached offset (and stream time) to the current batch and hands it over.
    fn send_batch(&mut self, durability: Option<Option<PersistMode>>) -> Result<()> {
        let Some(next_offset) = self.progress.next_offset else {
            return Ok(());
        };
        self.batch_bytes = 0;
        if self.kind == StoreKind::KeyValue {
            let (run, _) = std::mem::take(&mut self.run).seal();
            return self.send(Job::SortedBatch {
                run,
                next_offset,
                durability: durability.flatten(),
            });
        }
        let inner = &self.task.inner;
        let mut batch = self.batch.take().unwrap_or_else(|| inner.db.batch());
        batch.insert(
            &inner.meta,
            meta::offset_key(&self.partition),
            next_offset.to_be_bytes().to_vec(),
        );
        if let Some(t) = self.stream_time {
            batch.insert(
                &inner.meta,
                meta::stream_time_key(&self.store),
                t.to_be_bytes().to_vec(),
            );
        }
        let batch = batch.durability(durability.flatten());
        self.batch_bytes = 0;
        self.send(Job::Batch {
            batch,
            next_offset,
            stream_time: self.stream_time,
        })
    }

    /// Hands a full run to the worker, or, if the worker is still busy with
    /// an earlier one, sorts it on this thread first: sorting costs about as
    /// much as receiving the records, so this keeps both cores busy.
    fn send_run(&mut self, run: RunBuilder) -> Result<()> {
        let Some(jobs) = &self.jobs else {
            return self.send(Job::Run(run));
        };
        match jobs.try_send(Job::Run(run)) {
            Ok(()) => {
                // Reusing an arena the worker is done with saves page faults.
                self.run = match self.recycled.try_recv() {
                    Ok(arena) => arena,
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => {
                        RunBuilder::with_capacity(self.task.inner.options.restore_run_bytes)
                    }
                };
                Ok(())
            }
            Err(TrySendError::Full(Job::Run(run))) => {
                let (sorted, arena) = run.seal();
                self.run = arena;
                self.send(Job::SortedRun(sorted))
            }
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => self.send(job),
        }
    }

    fn send(&mut self, job: Job) -> Result<()> {
        let sent = self.jobs.as_ref().map(|jobs| jobs.send(job).is_ok());
        if sent == Some(true) {
            Ok(())
        } else {
            // The worker stopped: its result says why.
            self.join()?;
            Err(self.worker_error("worker stopped"))
        }
    }

    fn join(&mut self) -> Result<Option<SpilledRuns>> {
        self.jobs = None;
        match self.worker.take() {
            None => Ok(None),
            Some(handle) => match handle.join() {
                Ok(result) => result,
                Err(_) => Err(self.worker_error("worker panicked")),
            },
        }
    }

    fn worker_error(&self, reason: &str) -> StoreError {
        StoreError::RestoreWorker {
            store: self.store.clone(),
            reason: reason.to_owned(),
        }
    }
}

impl Drop for ChangelogRestorer {
    fn drop(&mut self) {
        // Lets the worker finish what it was given; an unfinished sorted-run
        // restore keeps its marker and is discarded at the next open.
        let _ = self.join();
    }
}

fn run_worker(
    task: &TaskStore,
    store: &str,
    partition: &ChangelogPartition,
    keyspace: Option<Keyspace>,
    mut spill: Option<SpilledRuns>,
    jobs: &Receiver<Job>,
    recycle: &SyncSender<RunBuilder>,
) -> Result<Option<SpilledRuns>> {
    let inner = &task.inner;
    while let Ok(job) = jobs.recv() {
        match job {
            Job::SortedBatch {
                run,
                next_offset,
                durability,
            } => {
                let Some(ks) = &keyspace else {
                    return Err(StoreError::UnknownStore(store.to_owned()));
                };
                let mut batch = inner.db.batch().durability(durability);
                for (key, value) in run.iter() {
                    match value {
                        Some(v) => batch.insert(ks, key, v),
                        None => batch.remove(ks, key),
                    }
                }
                batch.insert(
                    &inner.meta,
                    meta::offset_key(partition),
                    next_offset.to_be_bytes().to_vec(),
                );
                batch
                    .commit()
                    .map_err(inner.engine_err("committing a restore batch"))?;
                inner.state().offsets.insert(partition.clone(), next_offset);
            }
            Job::Batch {
                batch,
                next_offset,
                stream_time,
            } => {
                batch
                    .commit()
                    .map_err(inner.engine_err("committing a restore batch"))?;
                let mut state = inner.state();
                state.offsets.insert(partition.clone(), next_offset);
                if let (Some(t), Ok(entry)) = (stream_time, state.store_mut(store)) {
                    entry.stream_time = Some(entry.stream_time.map_or(t, |c| c.max(t)));
                }
            }
            Job::SortedRun(run) => {
                let Some(spill) = spill.as_mut() else {
                    return Err(StoreError::UnknownStore(store.to_owned()));
                };
                spill.push(run)?;
            }
            Job::Run(builder) => {
                let Some(spill) = spill.as_mut() else {
                    return Err(StoreError::UnknownStore(store.to_owned()));
                };
                let started = Instant::now();
                let (run, arena) = builder.seal();
                let sorted = started.elapsed();
                // The caller may already have started its next run; then the
                // arena is simply freed.
                let _ = recycle.try_send(arena);
                let records = run.records;
                spill.push(run)?;
                tracing::debug!(
                    store,
                    records,
                    sort_ms = sorted.as_millis(),
                    keep_or_spill_ms = (started.elapsed() - sorted).as_millis(),
                    "sorted a run"
                );
            }
        }
    }
    Ok(spill)
}
