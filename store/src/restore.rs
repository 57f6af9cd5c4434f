//! Restoring a store from its changelog, for active tasks, standbys and warmups alike.
//!
//! Two paths, both pipelined over two threads (the caller's thread prepares the
//! next batch or generation while a worker thread writes the previous one):
//!
//! - **Buckets and sorted runs**, for a key-value store that is empty when the
//!   restore starts. Records arrive in offset order, not key order, and may
//!   not fit in memory. The first records decide key-range buckets, and every
//!   record is copied into its bucket as it arrives (`partition`). Half of
//!   [`StoreOptions::restore_memory_bytes`] makes a generation; a full one is
//!   sorted bucket by bucket and spilled to a file by the worker while the
//!   caller fills the next (`spill`). `finish` writes the buckets in order, each
//!   sorted in memory and merged with the same bucket of every spilled file,
//!   newest write per key winning, on [`StoreOptions::restore_threads`]
//!   threads that each write a disjoint range of buckets through fjall's bulk
//!   ingestion (`run_merge`); disjoint ranges need no compaction. Ingestion is
//!   not part of a write batch, so a marker in the metadata says "contents are
//!   not a commit" until the final offsets are committed; if the process dies
//!   first, `open` empties the store and reports its offset as unknown (see
//!   `TaskStore::open`).
//! - **Atomic batches**, for everything else (catch-up of a non-empty store,
//!   standbys, window stores): puts and tombstones go into fjall write batches of
//!   [`StoreOptions::restore_batch_bytes`], each carrying the offset it reaches,
//!   so every crash leaves a consistent prefix of the changelog.
//!
//! [`StoreOptions::restore_memory_bytes`]: crate::StoreOptions::restore_memory_bytes
//! [`StoreOptions::restore_threads`]: crate::StoreOptions::restore_threads
//! [`StoreOptions::restore_batch_bytes`]: crate::StoreOptions::restore_batch_bytes

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::Instant;

use fjall::{Keyspace, OwnedWriteBatch, PersistMode};

use crate::error::{Result, StoreError};
use crate::kv::check_entry;
use crate::meta::{self, ChangelogPartition, StoreKind};
use crate::partition::{
    Generation, IndexEntry, Layout, SAMPLE_PER_BUCKET, Slab, SlabPool, Splitters, entry_at,
    position, sort_blocks,
};
use crate::run_merge::ingest_generations;
use crate::sorted_run::{encode_record, records};
use crate::spill::{SPILL_DIR, Spill};
use crate::task_store::{TaskStore, segment_keyspace_name};
use crate::window::{encode_segment_key, is_live, segment_of, split_window_changelog_key};

/// A key-value batch of a catch-up restore is sent once its encoded records
/// take this much, whatever `restore_batch_bytes` says.
const MAX_BATCH_BUFFER_BYTES: usize = 1 << 30;

/// Progress of a restore is logged every this many bytes of records.
const PROGRESS_LOG_BYTES: u64 = 256 << 20;

/// Whether progress at `bytes` is due for a log line (one every
/// [`PROGRESS_LOG_BYTES`]); if so, `next` moves on to the next one.
fn progress_log_due(next: &mut u64, bytes: u64) -> bool {
    let due = bytes >= *next;
    if due {
        *next = bytes + PROGRESS_LOG_BYTES;
    }
    due
}

/// Drops `value` on a thread of its own: freeing a generation's memory takes
/// a while, and need not delay the restore. (If no thread can be started,
/// the closure and what it holds are dropped right here.)
fn free_in_background<T: Send + 'static>(value: T) {
    let _ = std::thread::Builder::new()
        .name("weir-restore-free".into())
        .spawn(move || drop(value));
}

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
    /// Nothing applied yet, resuming at `next_offset`.
    fn start(next_offset: Option<i64>, end_offset: i64) -> RestoreProgress {
        RestoreProgress {
            records: 0,
            bytes: 0,
            next_offset,
            end_offset,
        }
    }

    /// Records still to restore, if the position is known.
    pub fn remaining(&self) -> Option<i64> {
        self.next_offset.map(|next| (self.end_offset - next).max(0))
    }
}

/// How far [`ChangelogRestorer::finish_with_progress`] got writing the
/// records of a bulk restore (an empty key-value store) into the store.
///
/// Bytes are those of the records as the restore holds them, in memory and in
/// its spill files (a spill file keeps one write per key), overwritten writes
/// included: they measure the work, not the size of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteProgress {
    /// Bytes sorted and written into the store so far.
    pub bytes_done: u64,
    /// Bytes to sort and write in all.
    pub bytes_total: u64,
}

/// Which write path a restorer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestorePath {
    /// Key-range buckets, sorted runs and bulk ingestion (empty key-value store).
    SortedRuns,
    /// Atomic write batches with offsets.
    Batches,
}

enum Job {
    /// A key-value batch, encoded records and their key order (one entry per
    /// key, its last write), sorted on the caller's thread; the worker turns
    /// it into one write batch with the offset it reaches.
    SortedBatch {
        records: Vec<u8>,
        order: Vec<IndexEntry>,
        next_offset: i64,
        durability: Option<PersistMode>,
    },
    Batch {
        batch: OwnedWriteBatch,
        next_offset: i64,
        stream_time: Option<i64>,
    },
    /// A full generation of an empty-store restore: the worker sorts its
    /// buckets into a spill file and returns its slabs.
    Spill(Generation),
}

/// The buckets of an empty-store restore, once the first records have
/// decided their bounds.
struct Buckets {
    splitters: Splitters,
    /// The leading key bytes each bucket's keys share.
    shared: Arc<[usize]>,
    generation: Generation,
}

impl Buckets {
    /// Copies a record into its bucket; true when the generation is full.
    fn push(&mut self, key: &[u8], value: Option<&[u8]>, slabs: &SlabPool) -> bool {
        let bucket = self.splitters.bucket(key);
        self.generation.push(bucket, key, value, slabs);
        self.generation.is_full()
    }
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
    /// The key-value batch being built (atomic batches path), encoded.
    run: Vec<u8>,
    /// Progress is logged each time this many more bytes were applied.
    next_progress_log: u64,
    layout: Layout,
    /// The first records of an empty-store restore, encoded, until they
    /// decide the bucket bounds.
    sample: Vec<u8>,
    sample_records: usize,
    buckets: Option<Buckets>,
    slabs: Option<SlabPool>,
    keyspace: Option<Keyspace>,
    jobs: Option<SyncSender<Job>>,
    worker: Option<JoinHandle<Result<Option<Spill>>>>,
    /// Restoring an in-memory store: no worker, no batches.
    memory: bool,
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
    /// If an earlier bulk restore of the store in this process did not finish
    /// (its `finish` failed, or the restorer was dropped), what it wrote is not
    /// a commit: the store is emptied and the bulk path starts over, and
    /// [`committed_offset`](TaskStore::committed_offset) says `Unknown`, so
    /// the records must be applied from the beginning of the changelog.
    ///
    /// # Errors
    ///
    /// [`StoreError::UnknownStore`], [`StoreError::StagedWritesPending`] if the
    /// store has uncommitted writes, [`StoreError::RestoreInProgress`] if
    /// another restorer of the store is still open, or fjall errors.
    pub fn restorer(
        &self,
        store: &str,
        partition: ChangelogPartition,
        end_offset: i64,
    ) -> Result<ChangelogRestorer> {
        let (kind, mut keyspace, stream_time, mut next_offset, unfinished) = {
            let mut state = self.inner.state();
            let entry = state.store(store)?;
            if !entry.staged.kv.is_empty() || !entry.staged.window.is_empty() {
                return Err(StoreError::StagedWritesPending(store.to_owned()));
            }
            if let Some(open) = state.restorers.get(store) {
                return Err(StoreError::RestoreInProgress {
                    store: store.to_owned(),
                    partition: open.clone(),
                    reason: "another restorer of the store is open",
                });
            }
            let found = (
                entry.registration.kind,
                entry.keyspace.clone(),
                entry.stream_time,
                state.offsets.get(&partition).copied(),
                state.restoring.get(store).cloned(),
            );
            // Registered under the same lock as the check; the restorer's
            // drop (or the guard, if starting fails) unregisters it.
            state.restorers.insert(store.to_owned(), partition.clone());
            found
        };
        let mut registered = Registered {
            task: self,
            store,
            armed: true,
        };
        if self.inner.state().store(store)?.memory.is_some() {
            // An in-memory store: records are applied to its contents as
            // they come, and the offset is kept in memory (see `apply`).
            self.inner.state().volatile.insert(partition.clone());
            tracing::info!(store, partition = %partition, end_offset, "in-memory restore started");
            registered.armed = false;
            return Ok(ChangelogRestorer::started(
                self,
                store,
                partition,
                kind,
                stream_time,
                RestoreProgress::start(next_offset, end_offset),
                None,
            ));
        }
        if let (Some(earlier), Some(_)) = (&unfinished, &keyspace) {
            // Part of the records (or all of them, without the final commit)
            // may be in the store: start over on an empty one.
            keyspace = Some(self.inner.replace_with_empty_keyspace(store)?);
            next_offset = None;
            tracing::warn!(
                store,
                partition = %partition,
                earlier_partition = %earlier,
                "an earlier bulk restore did not finish; emptied the store to start over"
            );
        }
        let empty = match &keyspace {
            Some(ks) => ks.first_key_value().is_none(),
            None => false,
        };
        let path = if empty {
            RestorePath::SortedRuns
        } else {
            RestorePath::Batches
        };
        let layout = Layout::for_memory(self.inner.options.restore_memory_bytes);
        let (spill, slabs) = if path == RestorePath::SortedRuns {
            // From here until `finish` commits, the store claims nothing, and
            // the marker names the partition so that every way out (a
            // restart here, a reopen, a commit) knows whose offset is void.
            let mut void = vec![meta::offset_key(&partition)];
            if let Some(earlier) = unfinished.as_ref().filter(|p| **p != partition) {
                void.push(meta::offset_key(earlier));
            }
            self.inner.write_meta_now(
                &[(
                    meta::restoring_key(store),
                    meta::encode_restoring(&partition),
                )],
                &void,
            )?;
            let mut state = self.inner.state();
            state.offsets.remove(&partition);
            if let Some(earlier) = &unfinished {
                state.offsets.remove(earlier);
            }
            state.restoring.insert(store.to_owned(), partition.clone());
            drop(state);
            let spill = Spill::create(self.path().join(SPILL_DIR).join(store))?;
            // Two slabs (2 MiB) prepared ahead keep the caller from faulting
            // pages in; in A/B runs they were as fast as sixteen, or a little
            // faster, and hold less memory.
            let slabs = SlabPool::start(layout.slab_bytes, 2, layout.max_slabs(2))
                .map_err(|e| StoreError::io(self.path(), e))?;
            (Some(spill), Some(slabs))
        } else {
            (None, None)
        };
        // A rendezvous: the worker holds at most the job it is writing, so at
        // most two generations are in memory.
        let (jobs, rx) = sync_channel::<Job>(0);
        let returns = slabs.as_ref().and_then(SlabPool::returns);
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
                    returns.as_ref(),
                )
            })
            .map_err(|e| StoreError::io(self.path(), e))?;
        tracing::info!(store, partition = %partition, end_offset, path = ?path, "restore started");
        registered.armed = false;
        Ok(ChangelogRestorer::started(
            self,
            store,
            partition,
            kind,
            stream_time,
            RestoreProgress::start(next_offset, end_offset),
            Some(Writer {
                path,
                slabs,
                keyspace,
                jobs,
                worker,
            }),
        ))
    }
}

/// What a key-value store's restorer writes with: its path, the worker and
/// the channel to it, and (sorted runs) the slabs. An in-memory store's
/// restorer has none.
struct Writer {
    path: RestorePath,
    slabs: Option<SlabPool>,
    keyspace: Option<Keyspace>,
    jobs: SyncSender<Job>,
    worker: JoinHandle<Result<Option<Spill>>>,
}

/// Unregisters a restorer whose start failed.
struct Registered<'a> {
    task: &'a TaskStore,
    store: &'a str,
    armed: bool,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.task.inner.state().restorers.remove(self.store);
        }
    }
}

impl ChangelogRestorer {
    /// A restorer of `store` at its start, registered by the caller: of a
    /// key-value store, writing with `writer`, or of an in-memory store
    /// (batches path, no worker) without one.
    fn started(
        task: &TaskStore,
        store: &str,
        partition: ChangelogPartition,
        kind: StoreKind,
        stream_time: Option<i64>,
        progress: RestoreProgress,
        writer: Option<Writer>,
    ) -> ChangelogRestorer {
        let memory = writer.is_none();
        let (path, slabs, keyspace, jobs, worker) = match writer {
            Some(w) => (w.path, w.slabs, w.keyspace, Some(w.jobs), Some(w.worker)),
            None => (RestorePath::Batches, None, None, None, None),
        };
        ChangelogRestorer {
            task: task.clone(),
            store: store.to_owned(),
            partition,
            kind,
            path,
            progress,
            batch: None,
            batch_bytes: 0,
            stream_time,
            run: Vec::new(),
            next_progress_log: PROGRESS_LOG_BYTES,
            layout: Layout::for_memory(task.inner.options.restore_memory_bytes),
            sample: Vec::new(),
            sample_records: 0,
            buckets: None,
            slabs,
            keyspace,
            jobs,
            worker,
            memory,
        }
    }

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
        if self.memory {
            return self.apply_to_memory(records);
        }
        if self.path == RestorePath::SortedRuns && self.buckets.is_some() {
            return self.apply_to_buckets(records);
        }
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
                    self.push_to_bucket(record.key, record.value)?;
                }
                (RestorePath::Batches, StoreKind::KeyValue) => {
                    check_entry(&self.store, record.key, record.value)
                        .map_err(|e| bad(e.to_string()))?;
                    // Sorted before it is written: memtable inserts in key order
                    // are cheaper, and repeated keys collapse to their last write.
                    encode_record(&mut self.run, record.key, record.value);
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
            self.log_progress_every_so_often();
            self.batch_bytes += size;
            // (Record positions in a batch are 32-bit: 1 GiB ends it too.)
            if self.path == RestorePath::Batches
                && (self.batch_bytes >= self.task.inner.options.restore_batch_bytes
                    || self.run.len() >= MAX_BATCH_BUFFER_BYTES)
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
    pub fn finish(self) -> Result<RestoreProgress> {
        self.finish_with_progress(|_| {})
    }

    /// [`finish`](Self::finish), telling `report` how far the writing got.
    ///
    /// A bulk restore ([`RestorePath::SortedRuns`]) writes most of its records
    /// here, after the last [`apply`](Self::apply): for a store of gigabytes
    /// this takes about as long as applying them. `report` is called after
    /// each key range bucket is written (a few hundred times, or more for a
    /// large store), from the writing threads but one call at a time, in
    /// order, with `bytes_done` growing to `bytes_total`. Progress is also logged every
    /// 256 MiB. A restore through write batches ([`RestorePath::Batches`])
    /// wrote its records as they were applied, and never calls it.
    ///
    /// # Errors
    ///
    /// As [`finish`](Self::finish).
    pub fn finish_with_progress(
        mut self,
        mut report: impl FnMut(WriteProgress) + Send,
    ) -> Result<RestoreProgress> {
        match self.path {
            RestorePath::Batches if self.memory => {
                // Everything was applied by `apply`; the offset is memory's too.
                let mut state = self.task.inner.state();
                if let Some(next) = self.progress.next_offset {
                    state.offsets.insert(self.partition.clone(), next);
                }
            }
            RestorePath::Batches => {
                let durability = self.task.inner.options.durability.persist_mode();
                self.send_batch(Some(durability))?;
                self.join()?;
            }
            RestorePath::SortedRuns => {
                let started = Instant::now();
                if self.buckets.is_none() {
                    self.start_buckets()?;
                }
                let buckets = self.buckets.take();
                let spill = self.join()?;
                let joined = started.elapsed();
                // No slab is taken from here on. The pool holds the slabs of
                // the last spilled generation, up to half the budget: they
                // are freed now, not after the merge, on a thread of their own.
                let slabs = self.slabs.take();
                let (slabs_ready, slabs_new) = slabs.as_ref().map_or((0, 0), SlabPool::taken);
                free_in_background(slabs);
                let (Some(keyspace), Some(buckets)) = (&self.keyspace, buckets) else {
                    return Err(StoreError::UnknownStore(self.store.clone()));
                };
                let spilled = spill.as_ref().map(Spill::generations).unwrap_or_default();
                let options = &self.task.inner.options;
                // Each writer may hold one bucket of every generation.
                let read_bucket_bytes = (options.restore_memory_bytes / 8) as u64;
                let mut next_log = 0;
                let (store, partition) = (&self.store, &self.partition);
                let mut logged_report = |progress: WriteProgress| {
                    report(progress);
                    if progress_log_due(&mut next_log, progress.bytes_done) {
                        tracing::info!(
                            %store,
                            %partition,
                            bytes_done = progress.bytes_done,
                            bytes_total = progress.bytes_total,
                            spilled_files = spilled.len(),
                            "restore writing into the store"
                        );
                    }
                };
                let written = ingest_generations(
                    &spilled,
                    &buckets.generation,
                    keyspace,
                    options.restore_threads,
                    read_bucket_bytes,
                    self.task.path(),
                    &mut logged_report,
                )?;
                let merged = started.elapsed();
                let spilled_files = spilled.len();
                drop(spill);
                // Where the time of the final step went, for profiling.
                tracing::debug!(
                    store = %self.store,
                    buckets = buckets.generation.buckets(),
                    spilled_files,
                    slabs_ready,
                    slabs_new,
                    written,
                    worker_wait_ms = joined.as_millis(),
                    merge_ms = (merged - joined).as_millis(),
                    "wrote the buckets into the store"
                );
                free_in_background(buckets.generation);
                crate::failpoints::check(
                    crate::failpoints::points::RESTORE_FINAL_COMMIT,
                    self.task.path(),
                )?;
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
                let mut state = inner.state();
                state.restoring.remove(&self.store);
                if let Some(next) = self.progress.next_offset {
                    state.offsets.insert(self.partition.clone(), next);
                }
            }
        }
        self.log_progress("restore finished");
        Ok(self.progress)
    }

    /// Applies records to an in-memory store's committed contents, with the
    /// reached offset (kept in memory), under the state lock.
    fn apply_to_memory(&mut self, records: &[ChangelogRecord<'_>]) -> Result<()> {
        let task = self.task.clone();
        let mut state = task.inner.state();
        let entry = state.store_mut(&self.store)?;
        for record in records {
            let bad = |reason: String| StoreError::BadChangelogRecord {
                store: self.store.clone(),
                offset: record.offset,
                reason,
            };
            let size = record.key.len() + record.value.map_or(0, <[u8]>::len);
            let Some(memory) = entry.memory.as_mut() else {
                return Err(StoreError::UnknownStore(self.store.clone()));
            };
            match self.kind {
                StoreKind::KeyValue => {
                    check_entry(&self.store, record.key, record.value)
                        .map_err(|e| bad(e.to_string()))?;
                    memory.apply_kv(record.key, record.value);
                }
                StoreKind::Window {
                    retention_ms,
                    segment_ms,
                } => {
                    let (key, window_start) = split_window_changelog_key(record.key)
                        .ok_or_else(|| bad("window changelog key shorter than 8 bytes".into()))?;
                    let encoded =
                        encode_segment_key(key, window_start).map_err(|e| bad(e.to_string()))?;
                    if record.value.is_some() {
                        self.stream_time = Some(
                            self.stream_time
                                .map_or(window_start, |t| t.max(window_start)),
                        );
                    }
                    if is_live(window_start, retention_ms, self.stream_time) {
                        memory.apply_window(
                            segment_of(window_start, segment_ms),
                            &encoded,
                            record.value,
                        );
                    }
                    entry.stream_time = self.stream_time;
                }
            }
            self.progress.records += 1;
            self.progress.bytes += size as u64;
            self.progress.next_offset = Some(record.offset + 1);
        }
        if let Some(next) = self.progress.next_offset {
            state.offsets.insert(self.partition.clone(), next);
        }
        Ok(())
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
            let records = std::mem::take(&mut self.run);
            let mut order = Vec::new();
            sort_blocks(&[records.as_slice()], 0, false, &mut order);
            return self.send(Job::SortedBatch {
                records,
                order,
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

    /// `apply` once the buckets are decided: the loop every record of a large
    /// restore goes through, kept tight.
    fn apply_to_buckets(&mut self, records: &[ChangelogRecord<'_>]) -> Result<()> {
        let mut applied = 0u64;
        let mut bytes = 0u64;
        let mut result = Ok(());
        for record in records {
            if let Err(e) = check_entry(&self.store, record.key, record.value) {
                result = Err(StoreError::BadChangelogRecord {
                    store: self.store.clone(),
                    offset: record.offset,
                    reason: e.to_string(),
                });
                break;
            }
            let (Some(buckets), Some(slabs)) = (self.buckets.as_mut(), self.slabs.as_ref()) else {
                result = Err(self.worker_error("no buckets"));
                break;
            };
            let full = buckets.push(record.key, record.value, slabs);
            applied += 1;
            bytes += (record.key.len() + record.value.map_or(0, <[u8]>::len)) as u64;
            self.progress.next_offset = Some(record.offset + 1);
            if full && let Err(e) = self.hand_over_generation() {
                result = Err(e);
                break;
            }
        }
        self.progress.records += applied;
        self.progress.bytes += bytes;
        self.log_progress_every_so_often();
        result
    }

    /// Logs progress each time another [`PROGRESS_LOG_BYTES`] were applied.
    fn log_progress_every_so_often(&mut self) {
        if progress_log_due(&mut self.next_progress_log, self.progress.bytes) {
            self.log_progress("restore progress");
        }
    }

    fn log_progress(&self, what: &str) {
        tracing::info!(
            store = %self.store,
            partition = %self.partition,
            records = self.progress.records,
            bytes = self.progress.bytes,
            next_offset = ?self.progress.next_offset,
            end_offset = self.progress.end_offset,
            "{what}"
        );
    }

    /// Hands the full generation to the worker and starts the next.
    fn hand_over_generation(&mut self) -> Result<()> {
        let Some(buckets) = self.buckets.as_mut() else {
            return Ok(());
        };
        let next = Generation::new(self.layout, Arc::clone(&buckets.shared));
        let full = std::mem::replace(&mut buckets.generation, next);
        self.send(Job::Spill(full))
    }

    /// Copies a record into its bucket, or into the sample while the bucket
    /// bounds are not decided yet; hands full generations to the worker.
    fn push_to_bucket(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let Some(buckets) = self.buckets.as_mut() else {
            encode_record(&mut self.sample, key, value);
            self.sample_records += 1;
            // Large values end the sample early: it takes at most a
            // generation's memory, as the first generation does after it.
            if self.sample_records >= self.layout.buckets * SAMPLE_PER_BUCKET
                || self.sample.len() >= self.layout.generation_bytes
            {
                self.start_buckets()?;
            }
            return Ok(());
        };
        let Some(slabs) = self.slabs.as_ref() else {
            return Err(self.worker_error("no slab pool"));
        };
        if buckets.push(key, value, slabs) {
            self.hand_over_generation()?;
        }
        Ok(())
    }

    /// Decides the bucket bounds from the sample and moves its records into
    /// the first generation.
    fn start_buckets(&mut self) -> Result<()> {
        let sample = std::mem::take(&mut self.sample);
        let records: Vec<_> = records(&sample).map(|(_, k, v)| (k, v)).collect();
        let splitters = Splitters::from_sample(
            records.iter().map(|(k, _)| *k).collect(),
            self.layout.buckets,
        );
        tracing::debug!(
            store = %self.store,
            sampled = records.len(),
            buckets = splitters.buckets(),
            "decided restore buckets"
        );
        let shared: Arc<[usize]> = splitters.shared_prefixes().into();
        self.buckets = Some(Buckets {
            generation: Generation::new(self.layout, Arc::clone(&shared)),
            shared,
            splitters,
        });
        for (key, value) in records {
            self.push_to_bucket(key, value)?;
        }
        self.sample_records = 0;
        Ok(())
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

    fn join(&mut self) -> Result<Option<Spill>> {
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
        // restore keeps its marker: the next restorer of the store starts it
        // over, and the next open discards it.
        let _ = self.join();
        self.task.inner.state().restorers.remove(&self.store);
    }
}

fn run_worker(
    task: &TaskStore,
    store: &str,
    partition: &ChangelogPartition,
    keyspace: Option<Keyspace>,
    mut spill: Option<Spill>,
    jobs: &Receiver<Job>,
    returns: Option<&Sender<Slab>>,
) -> Result<Option<Spill>> {
    let inner = &task.inner;
    while let Ok(job) = jobs.recv() {
        match job {
            Job::SortedBatch {
                records,
                order,
                next_offset,
                durability,
            } => {
                let Some(ks) = &keyspace else {
                    return Err(StoreError::UnknownStore(store.to_owned()));
                };
                let mut batch = inner.db.batch().durability(durability);
                let blocks = [records.as_slice()];
                for &entry in &order {
                    let at = position(entry);
                    let (key, value) = entry_at(&blocks, at);
                    if key.is_empty() {
                        continue; // cannot happen: keys are checked when applied
                    }
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
            Job::Spill(generation) => {
                let Some(spill) = spill.as_mut() else {
                    return Err(StoreError::UnknownStore(store.to_owned()));
                };
                let started = Instant::now();
                let records = spill.push(&generation)?;
                tracing::debug!(
                    store,
                    records,
                    bytes = generation.record_bytes(),
                    spill_ms = started.elapsed().as_millis(),
                    "spilled a generation"
                );
                if let Some(returns) = returns {
                    generation.recycle(returns);
                }
            }
        }
    }
    Ok(spill)
}
