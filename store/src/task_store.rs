//! One fjall database per task: opening it safely, the per-task staging layer,
//! and the atomic commit of staged writes together with changelog offsets.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use crate::directory::{LOCK_FILE, TaskDirLock};
use crate::error::{Result, StoreError};
use crate::meta::{
    self, ChangelogPartition, FORMAT, FORMAT_KEY, META_KEYSPACE, MetaEntry, Registration, StoreKind,
};
use crate::options::StoreOptions;
use crate::spill::SPILL_DIR;

/// Sub-directory of a task directory that holds the fjall database.
pub const DB_DIR: &str = "db";

/// The committed changelog offset of one partition, as far as the store knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommittedOffset {
    /// The store equals the changelog up to (excluding) this offset: restore from here.
    Known(i64),
    /// The store has no committed offset for this partition (new, wiped, or an
    /// interrupted bulk restore was discarded): restore from the beginning.
    Unknown,
}

/// Writes staged by a task since its last commit or abort.
#[derive(Debug, Default)]
pub(crate) struct Staged {
    /// Key-value stores: key to new value, `None` a delete.
    pub(crate) kv: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Window stores: (segment, encoded key) to new value.
    pub(crate) window: BTreeMap<(i64, Vec<u8>), Option<Vec<u8>>>,
    /// Window stores: the largest window start staged.
    pub(crate) stream_time: Option<i64>,
}

impl Staged {
    fn is_empty(&self) -> bool {
        self.kv.is_empty() && self.window.is_empty() && self.stream_time.is_none()
    }
}

/// One store's state inside a task.
pub(crate) struct StoreEntry {
    pub(crate) registration: Registration,
    /// The keyspace of a key-value store.
    pub(crate) keyspace: Option<Keyspace>,
    /// The segment keyspaces of a window store, by segment id.
    pub(crate) segments: BTreeMap<i64, Keyspace>,
    /// Committed stream time of a window store.
    pub(crate) stream_time: Option<i64>,
    pub(crate) staged: Staged,
    /// The committed contents of an in-memory store (`None` for a store in
    /// fjall): nothing of it is ever written to disk.
    pub(crate) memory: Option<MemoryData>,
}

/// The committed contents of an in-memory store.
#[derive(Debug, Default)]
pub(crate) struct MemoryData {
    /// Key-value stores: the entries.
    pub(crate) kv: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Window stores: segment id to encoded segment key and value.
    pub(crate) segments: BTreeMap<i64, BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl MemoryData {
    /// Applies one committed write of a key-value store.
    pub(crate) fn apply_kv(&mut self, key: &[u8], value: Option<&[u8]>) {
        match value {
            Some(v) => {
                self.kv.insert(key.to_vec(), v.to_vec());
            }
            None => {
                self.kv.remove(key);
            }
        }
    }

    /// Applies one committed write of a window store.
    pub(crate) fn apply_window(&mut self, segment: i64, key: &[u8], value: Option<&[u8]>) {
        match value {
            Some(v) => {
                self.segments
                    .entry(segment)
                    .or_default()
                    .insert(key.to_vec(), v.to_vec());
            }
            None => {
                if let Some(seg) = self.segments.get_mut(&segment) {
                    seg.remove(key);
                    if seg.is_empty() {
                        self.segments.remove(&segment);
                    }
                }
            }
        }
    }
}

impl StoreEntry {
    /// Stream time including staged writes.
    pub(crate) fn current_stream_time(&self) -> Option<i64> {
        match (self.stream_time, self.staged.stream_time) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

#[derive(Default)]
pub(crate) struct TaskState {
    pub(crate) stores: BTreeMap<String, StoreEntry>,
    pub(crate) offsets: BTreeMap<ChangelogPartition, i64>,
    /// Stores whose bulk restore wrote its marker and has not finished, with
    /// the partition each restores from: their contents are not a commit.
    pub(crate) restoring: BTreeMap<String, ChangelogPartition>,
    /// Stores with an open restorer, and the partition it restores from.
    pub(crate) restorers: BTreeMap<String, ChangelogPartition>,
    /// Changelog partitions of in-memory stores: their offsets are kept in
    /// `offsets` while the task store is open, and never written to disk.
    pub(crate) volatile: BTreeSet<ChangelogPartition>,
}

impl TaskState {
    pub(crate) fn store(&self, name: &str) -> Result<&StoreEntry> {
        self.stores
            .get(name)
            .ok_or_else(|| StoreError::UnknownStore(name.to_owned()))
    }

    pub(crate) fn store_mut(&mut self, name: &str) -> Result<&mut StoreEntry> {
        self.stores
            .get_mut(name)
            .ok_or_else(|| StoreError::UnknownStore(name.to_owned()))
    }

    /// Refuses a commit that claims the offset of a partition under an
    /// unfinished bulk restore, or writes into a store under one: the next
    /// open (or the restore's restart) empties that store, so such a commit
    /// would claim what the store will not hold.
    fn check_commit(&self, changelog_offsets: &[(ChangelogPartition, i64)]) -> Result<()> {
        for (store, partition) in &self.restoring {
            let reason = if changelog_offsets.iter().any(|(p, _)| p == partition) {
                "a commit may not claim its offset"
            } else if self
                .stores
                .get(store)
                .is_some_and(|entry| !entry.staged.is_empty())
            {
                "a commit may not write into the store"
            } else {
                continue;
            };
            return Err(StoreError::RestoreInProgress {
                store: store.clone(),
                partition: partition.clone(),
                reason,
            });
        }
        Ok(())
    }
}

/// What store handles share: the database and the task's staging state.
pub(crate) struct TaskInner {
    pub(crate) path: PathBuf,
    pub(crate) db: Database,
    pub(crate) meta: Keyspace,
    pub(crate) options: StoreOptions,
    state: Mutex<TaskState>,
    // Declared last so it is released after the database is closed.
    _lock: TaskDirLock,
}

impl std::fmt::Debug for TaskInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskInner")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl TaskInner {
    /// The state lock. A panic while it was held cannot leave half-applied
    /// staged writes visible on disk (only `commit` writes, in one batch), so a
    /// poisoned lock is safe to take over.
    pub(crate) fn state(&self) -> MutexGuard<'_, TaskState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn engine_err(
        &self,
        action: &'static str,
    ) -> impl FnOnce(fjall::Error) -> StoreError + '_ {
        move |e| StoreError::engine(&self.path, action, e)
    }

    pub(crate) fn keyspace(&self, name: &str) -> Result<Keyspace> {
        self.db
            .keyspace(name, || keyspace_options(&self.options))
            .map_err(self.engine_err("opening a keyspace"))
    }

    /// Empties a key-value store by dropping its keyspace and creating a new
    /// one of the same name, and returns the new one.
    ///
    /// Not `Keyspace::clear`: fjall journals a clear and replays it at every
    /// open until that journal is evicted, and the replay drops every table
    /// of the keyspace, including tables a later bulk ingestion added (an
    /// ingestion is not journaled). A bulk restore after a clear would thus
    /// be wiped at the next open, under the offset it committed. A new
    /// keyspace has a new internal id, which the old journal entries do not
    /// name.
    pub(crate) fn replace_with_empty_keyspace(&self, store: &str) -> Result<Keyspace> {
        // Under the state lock, so no reader takes the old keyspace meanwhile.
        let mut state = self.state();
        let entry = state.store_mut(store)?;
        if let Some(old) = entry.keyspace.take() {
            self.db
                .delete_keyspace(old)
                .map_err(self.engine_err("dropping a store's keyspace to empty it"))?;
        }
        let fresh = self.keyspace(&kv_keyspace_name(store))?;
        entry.keyspace = Some(fresh.clone());
        Ok(fresh)
    }

    /// Writes metadata outside a commit. Only used for facts that do not change
    /// what a store contains (registrations) or that make it claim less
    /// (restore markers), so it can never make a store claim more than it has.
    pub(crate) fn write_meta_now(
        &self,
        puts: &[(Vec<u8>, Vec<u8>)],
        removes: &[Vec<u8>],
    ) -> Result<()> {
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        for (k, v) in puts {
            batch.insert(&self.meta, k.as_slice(), v.as_slice());
        }
        for k in removes {
            batch.remove(&self.meta, k.as_slice());
        }
        batch.commit().map_err(self.engine_err("writing metadata"))
    }
}

fn keyspace_options(options: &StoreOptions) -> KeyspaceCreateOptions {
    let create = KeyspaceCreateOptions::default();
    match options.memtable_bytes {
        Some(bytes) => create.max_memtable_size(bytes),
        None => create,
    }
}

pub(crate) fn kv_keyspace_name(store: &str) -> String {
    format!("kv.{store}")
}

pub(crate) fn segment_keyspace_name(store: &str, segment: i64) -> String {
    format!("win.{store}.{segment}")
}

/// All state stores of one task, in one fjall database under the task directory.
///
/// Writes through any of its stores are staged in memory and visible to reads
/// through the same task; [`TaskStore::commit`] makes them durable together with
/// the changelog offsets, [`TaskStore::abort`] drops them. After any crash,
/// [`TaskStore::open`] yields exactly the last commit.
///
/// # Examples
///
/// ```
/// use weir_store::{ChangelogPartition, CommittedOffset, StoreOptions, TaskStore};
/// # fn main() -> Result<(), weir_store::StoreError> {
/// let dir = tempfile::tempdir().map_err(|e| weir_store::StoreError::InvalidArgument(e.to_string()))?;
/// let changelog = ChangelogPartition::new("app-counts-changelog", 0);
/// {
///     let task = TaskStore::open(dir.path(), StoreOptions::default())?;
///     let counts = task.key_value_store("counts")?;
///     counts.put(b"a", b"1")?;
///     assert_eq!(counts.get(b"a")?, Some(b"1".to_vec())); // staged writes are visible
///     task.commit(&[(changelog.clone(), 1)])?;
///     counts.put(b"b", b"2")?; // staged, never committed
/// }
/// let task = TaskStore::open(dir.path(), StoreOptions::default())?;
/// let counts = task.key_value_store("counts")?;
/// assert_eq!(counts.get(b"b")?, None);
/// assert_eq!(task.committed_offset(&changelog), CommittedOffset::Known(1));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TaskStore {
    pub(crate) inner: Arc<TaskInner>,
}

impl TaskStore {
    /// Locks `task_dir` and opens (or creates) its database.
    ///
    /// Stores whose bulk restore was interrupted are emptied and their offsets
    /// are [`CommittedOffset::Unknown`], and window segments past retention are
    /// dropped.
    ///
    /// # Errors
    ///
    /// [`StoreError::Locked`] if another owner holds the directory,
    /// [`StoreError::ForeignDirectory`] if it holds something other than a
    /// weir-store database, [`StoreError::UnsupportedFormat`],
    /// [`StoreError::CorruptMetadata`] or [`StoreError::Engine`] if the database
    /// cannot be read.
    pub fn open(task_dir: impl AsRef<Path>, options: StoreOptions) -> Result<Self> {
        let task_dir = task_dir.as_ref();
        let lock = TaskDirLock::acquire(task_dir)?;
        let db_path = task_dir.join(DB_DIR);
        check_not_foreign(task_dir, &db_path)?;
        // Spill files of a restore that did not finish; the restore marker
        // (handled below) discards what it had ingested.
        remove_dir_if_present(&task_dir.join(SPILL_DIR))?;

        let db = Database::builder(&db_path)
            .cache_size(options.cache_bytes)
            // Clamped again: the field is public, and fjall panics below 64 MiB.
            .max_journaling_size(options.max_journal_bytes.max(64 << 20))
            .open()
            .map_err(|e| StoreError::engine(task_dir, "opening the database", e))?;

        let fresh = !db.keyspace_exists(META_KEYSPACE);
        if fresh {
            let others = db.list_keyspace_names();
            if !others.is_empty() {
                return Err(StoreError::ForeignDirectory {
                    path: task_dir.to_path_buf(),
                    reason: format!(
                        "a fjall database without weir-store metadata ({} keyspaces)",
                        others.len()
                    ),
                });
            }
        }
        let meta = db
            .keyspace(META_KEYSPACE, || keyspace_options(&options))
            .map_err(|e| StoreError::engine(task_dir, "opening metadata", e))?;

        let inner = TaskInner {
            path: task_dir.to_path_buf(),
            db,
            meta,
            options,
            state: Mutex::new(TaskState::default()),
            _lock: lock,
        };
        if fresh {
            inner.write_meta_now(&[(FORMAT_KEY.to_vec(), FORMAT.as_bytes().to_vec())], &[])?;
        }
        let restoring = load_state(&inner)?;
        let store = Self {
            inner: Arc::new(inner),
        };
        store.discard_interrupted_restores(&restoring)?;
        store.drop_expired_segments()?;
        tracing::debug!(dir = %task_dir.display(), fresh, "opened task store");
        Ok(store)
    }

    /// Closes the task's stores at a planned shutdown, so that the next
    /// owner opens them at once: every keyspace's memtable is flushed to
    /// tables and the database synced, which leaves fjall's journal with
    /// nothing to replay. A store only dropped (as after a crash) is just as
    /// consistent, but its next open replays every commit since the last
    /// flush, which grows with the number of commits. Staged writes that were
    /// never committed are discarded, as with a drop.
    ///
    /// Other clones of this handle keep the database open; the flush still
    /// happens, and the directory lock is released when the last one drops.
    ///
    /// # Errors
    ///
    /// [`StoreError::Engine`] if a flush or the sync fails; the store is then
    /// as consistent as after a drop.
    pub fn close(self) -> Result<()> {
        let inner = &self.inner;
        let started = std::time::Instant::now();
        let names = inner.db.list_keyspace_names();
        for name in &names {
            // fjall 3 exposes no other way to flush a memtable on demand;
            // `rotate_memtable_and_wait` is public but hidden from its docs
            // (its tests use it), so the pinned fjall version matters here.
            inner
                .keyspace(name)?
                .rotate_memtable_and_wait()
                .map_err(inner.engine_err("flushing a memtable at close"))?;
        }
        inner
            .db
            .persist(PersistMode::SyncAll)
            .map_err(inner.engine_err("syncing at close"))?;
        tracing::debug!(
            dir = %inner.path.display(),
            keyspaces = names.len(),
            ms = started.elapsed().as_millis(),
            "closed task store"
        );
        Ok(())
    }

    /// The task directory.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The committed offset of one changelog partition.
    pub fn committed_offset(&self, partition: &ChangelogPartition) -> CommittedOffset {
        match self.inner.state().offsets.get(partition) {
            Some(offset) => CommittedOffset::Known(*offset),
            None => CommittedOffset::Unknown,
        }
    }

    /// All committed changelog offsets.
    pub fn committed_offsets(&self) -> BTreeMap<ChangelogPartition, i64> {
        self.inner.state().offsets.clone()
    }

    /// The stores registered in this task, with their kinds and serdes.
    pub fn stores(&self) -> Vec<(String, Registration)> {
        self.inner
            .state()
            .stores
            .iter()
            .map(|(name, entry)| (name.clone(), entry.registration.clone()))
            .collect()
    }

    /// Whether any store has staged, uncommitted writes.
    pub fn has_staged_writes(&self) -> bool {
        self.inner
            .state()
            .stores
            .values()
            .any(|s| !s.staged.is_empty())
    }

    /// Applies every staged write of every store in this task, and the given
    /// changelog offsets, in one atomic fjall batch with the configured
    /// durability. Under exactly-once the runtime calls this only after the
    /// Kafka transaction committed.
    ///
    /// # Errors
    ///
    /// [`StoreError::RestoreInProgress`] if an offset names the partition of
    /// a bulk restore that has not finished, or a store under such a restore
    /// has staged writes (nothing is committed); [`StoreError::Engine`] if
    /// fjall fails. On any error nothing was committed, the staged writes
    /// are kept, and after an engine error the database may refuse further
    /// writes (reopen to recover the last commit).
    pub fn commit(&self, changelog_offsets: &[(ChangelogPartition, i64)]) -> Result<()> {
        let inner = &self.inner;
        let mut state = inner.state();
        state.check_commit(changelog_offsets)?;
        let mut batch = inner
            .db
            .batch()
            .durability(inner.options.durability.persist_mode());
        let mut writes = 0usize;
        let mut new_segments = Vec::new();
        for (name, entry) in &state.stores {
            if let Some(ks) = &entry.keyspace {
                for (key, value) in &entry.staged.kv {
                    match value {
                        Some(v) => batch.insert(ks, key.as_slice(), v.as_slice()),
                        None => batch.remove(ks, key.as_slice()),
                    }
                }
            }
            if entry.memory.is_some() {
                // Applied to memory once the batch committed, below.
                writes += entry.staged.kv.len() + entry.staged.window.len();
                continue;
            }
            for ((segment, key), value) in &entry.staged.window {
                let ks = match entry.segments.get(segment) {
                    Some(ks) => ks.clone(),
                    None => {
                        // An empty keyspace created here and orphaned by a crash
                        // before the batch is harmless: it holds nothing.
                        let ks = inner.keyspace(&segment_keyspace_name(name, *segment))?;
                        new_segments.push((name.clone(), *segment, ks.clone()));
                        ks
                    }
                };
                match value {
                    Some(v) => batch.insert(&ks, key.as_slice(), v.as_slice()),
                    None => batch.remove(&ks, key.as_slice()),
                }
            }
            if let Some(t) = entry.staged.stream_time
                && entry.stream_time.is_none_or(|c| t > c)
            {
                batch.insert(
                    &inner.meta,
                    meta::stream_time_key(name),
                    t.to_be_bytes().to_vec(),
                );
            }
            writes += entry.staged.kv.len() + entry.staged.window.len();
        }
        for (partition, offset) in changelog_offsets {
            if state.volatile.contains(partition) {
                continue;
            }
            batch.insert(
                &inner.meta,
                meta::offset_key(partition),
                offset.to_be_bytes().to_vec(),
            );
        }
        // THE guarantee of this crate: data and changelog offsets are written in
        // ONE atomic batch, and nothing else ever records offsets. A crash can
        // therefore only leave the previous commit or this one, never dirty
        // data under offsets that claim it is clean. This is what prevents the
        // Kafka Streams failure where a checkpoint file written over dirty local
        // files made an aborted transaction's writes look committed
        // (KAFKA-9891, KAFKA-14172): there is no checkpoint file to get wrong.
        batch
            .commit()
            .map_err(inner.engine_err("committing staged writes and offsets"))?;

        for (name, segment, ks) in new_segments {
            if let Some(entry) = state.stores.get_mut(&name) {
                entry.segments.insert(segment, ks);
            }
        }
        for entry in state.stores.values_mut() {
            if let Some(t) = entry.staged.stream_time {
                entry.stream_time = Some(entry.stream_time.map_or(t, |c| c.max(t)));
            }
            let staged = std::mem::take(&mut entry.staged);
            if let Some(memory) = entry.memory.as_mut() {
                for (key, value) in &staged.kv {
                    memory.apply_kv(key, value.as_deref());
                }
                for ((segment, key), value) in &staged.window {
                    memory.apply_window(*segment, key, value.as_deref());
                }
            }
        }
        for (partition, offset) in changelog_offsets {
            state.offsets.insert(partition.clone(), *offset);
        }
        drop(state);
        tracing::debug!(dir = %inner.path.display(), writes, offsets = changelog_offsets.len(), "committed");
        // The commit happened: a segment that cannot be dropped now is not a
        // failed commit (its windows are invisible anyway) and is dropped by
        // a later commit, or at the next open.
        if let Err(error) = self.drop_expired_segments() {
            tracing::warn!(
                dir = %inner.path.display(),
                %error,
                "committed, but could not drop an expired window segment; retrying at the next commit"
            );
        }
        Ok(())
    }

    /// Discards every staged write of every store in this task.
    pub fn abort(&self) {
        let mut state = self.inner.state();
        let mut discarded = 0usize;
        for entry in state.stores.values_mut() {
            discarded += entry.staged.kv.len() + entry.staged.window.len();
            entry.staged = Staged::default();
        }
        tracing::debug!(dir = %self.inner.path.display(), discarded, "aborted staged writes");
    }

    /// Empties store `store` and forgets the committed offset of
    /// `partition`, its changelog, so that it is restored from the
    /// changelog's start. For a store whose offset the changelog no longer
    /// holds (the records from there were deleted): applying what is left
    /// on top of the old contents would keep every key whose tombstone was
    /// among the deleted records.
    ///
    /// Crash-safe: the restore marker is written (and the offset dropped)
    /// first, so a crash in the middle leaves a store the next open empties.
    ///
    /// # Errors
    ///
    /// [`StoreError::UnknownStore`], [`StoreError::StagedWritesPending`] if
    /// the store has uncommitted writes, [`StoreError::RestoreInProgress`] if
    /// a restorer of it is open, or fjall errors.
    pub fn reset_store(&self, store: &str, partition: &ChangelogPartition) -> Result<()> {
        let in_memory = {
            let state = self.inner.state();
            let entry = state.store(store)?;
            if !entry.staged.is_empty() {
                return Err(StoreError::StagedWritesPending(store.to_owned()));
            }
            if let Some(open) = state.restorers.get(store) {
                return Err(StoreError::RestoreInProgress {
                    store: store.to_owned(),
                    partition: open.clone(),
                    reason: "a store cannot be reset while a restorer of it is open",
                });
            }
            entry.memory.is_some()
        };
        if !in_memory {
            self.inner.write_meta_now(
                &[(
                    meta::restoring_key(store),
                    meta::encode_restoring(partition),
                )],
                &[meta::offset_key(partition)],
            )?;
        }
        {
            let mut state = self.inner.state();
            state.offsets.remove(partition);
            state.restoring.insert(store.to_owned(), partition.clone());
        }
        self.empty_store(store)?;
        if !in_memory {
            self.inner
                .write_meta_now(&[], &[meta::restoring_key(store)])?;
        }
        self.inner.state().restoring.remove(store);
        tracing::warn!(
            dir = %self.inner.path.display(),
            store,
            partition = %partition,
            "store emptied and its offset dropped: it restores from the changelog's start"
        );
        Ok(())
    }

    /// Empties store `store`: its key-value keyspace, its window segments,
    /// its in-memory contents and its stream time.
    fn empty_store(&self, store: &str) -> Result<()> {
        let (has_keyspace, segments, in_memory) = {
            let mut state = self.inner.state();
            let entry = state.store_mut(store)?;
            entry.stream_time = None;
            if let Some(memory) = entry.memory.as_mut() {
                *memory = MemoryData::default();
            }
            (
                entry.keyspace.is_some(),
                std::mem::take(&mut entry.segments),
                entry.memory.is_some(),
            )
        };
        if has_keyspace {
            self.inner.replace_with_empty_keyspace(store)?;
        }
        for ks in segments.into_values() {
            self.inner.db.delete_keyspace(ks).map_err(
                self.inner
                    .engine_err("dropping a window segment to empty a store"),
            )?;
        }
        if !in_memory {
            self.inner
                .write_meta_now(&[], &[meta::stream_time_key(store)])?;
        }
        Ok(())
    }

    /// Closes the database and deletes it, keeping the (released) task directory.
    ///
    /// # Errors
    ///
    /// [`StoreError::InUse`] if store handles or restorers still reference the
    /// task; [`StoreError::Io`] if deletion fails.
    pub fn wipe(self) -> Result<()> {
        let inner =
            Arc::try_unwrap(self.inner).map_err(|inner| StoreError::InUse(inner.path.clone()))?;
        let TaskInner {
            path,
            db,
            meta,
            _lock: lock,
            ..
        } = inner;
        drop(meta);
        drop(db);
        remove_dir_if_present(&path.join(DB_DIR))?;
        remove_dir_if_present(&path.join(SPILL_DIR))?;
        tracing::info!(dir = %path.display(), "wiped task store");
        drop(lock);
        Ok(())
    }

    /// Registers a store or checks an existing registration.
    pub(crate) fn register(
        &self,
        name: &str,
        kind: StoreKind,
        serdes: Option<(&str, &str)>,
    ) -> Result<()> {
        validate_store_name(name)?;
        let inner = &self.inner;
        let mut state = inner.state();
        if let Some(entry) = state.stores.get_mut(name) {
            if entry.registration.kind != kind {
                return Err(StoreError::KindMismatch {
                    store: name.to_owned(),
                    stored: entry.registration.kind.to_string(),
                    requested: kind.to_string(),
                });
            }
            let Some((rk, rv)) = serdes else {
                return Ok(());
            };
            match &entry.registration.serdes {
                Some((sk, sv)) if sk == rk && sv == rv => return Ok(()),
                Some((sk, sv)) => {
                    return Err(StoreError::SerdeMismatch {
                        store: name.to_owned(),
                        stored: format!("({sk}, {sv})"),
                        requested: format!("({rk}, {rv})"),
                    });
                }
                None => {
                    // First typed use of a store created through the byte API.
                    let reg = Registration {
                        kind,
                        serdes: Some((rk.to_owned(), rv.to_owned())),
                    };
                    inner.write_meta_now(
                        &[(meta::store_key(name), meta::encode_registration(&reg))],
                        &[],
                    )?;
                    entry.registration = reg;
                    return Ok(());
                }
            }
        }
        let registration = Registration {
            kind,
            serdes: serdes.map(|(k, v)| (k.to_owned(), v.to_owned())),
        };
        let keyspace = match kind {
            StoreKind::KeyValue => Some(inner.keyspace(&kv_keyspace_name(name))?),
            StoreKind::Window { .. } => None,
        };
        inner.write_meta_now(
            &[(
                meta::store_key(name),
                meta::encode_registration(&registration),
            )],
            &[],
        )?;
        state.stores.insert(
            name.to_owned(),
            StoreEntry {
                registration,
                keyspace,
                segments: BTreeMap::new(),
                stream_time: None,
                staged: Staged::default(),
                memory: None,
            },
        );
        Ok(())
    }

    /// Registers an in-memory store, or checks an existing one. Nothing is
    /// written to disk: the registration, the contents and the offset of
    /// `changelog` live as long as this task store is open.
    pub(crate) fn register_in_memory(
        &self,
        name: &str,
        kind: StoreKind,
        changelog: Option<&ChangelogPartition>,
    ) -> Result<()> {
        validate_store_name(name)?;
        let mut state = self.inner.state();
        if let Some(entry) = state.stores.get(name) {
            if entry.memory.is_none() {
                return Err(StoreError::InvalidArgument(format!(
                    "store {name:?} exists on disk in {} as a persistent store; \
                     wipe the task's state to make it in-memory",
                    self.inner.path.display()
                )));
            }
            if entry.registration.kind != kind {
                return Err(StoreError::KindMismatch {
                    store: name.to_owned(),
                    stored: entry.registration.kind.to_string(),
                    requested: kind.to_string(),
                });
            }
        } else {
            state.stores.insert(
                name.to_owned(),
                StoreEntry {
                    registration: Registration { kind, serdes: None },
                    keyspace: None,
                    segments: BTreeMap::new(),
                    stream_time: None,
                    staged: Staged::default(),
                    memory: Some(MemoryData::default()),
                },
            );
        }
        if let Some(partition) = changelog
            && state.volatile.insert(partition.clone())
        {
            // An offset of this partition on disk (a persistent store of an
            // earlier run) claims contents this store does not have.
            if state.offsets.remove(partition).is_some() {
                drop(state);
                self.inner
                    .write_meta_now(&[], &[meta::offset_key(partition)])?;
            }
        }
        Ok(())
    }

    /// Whether `partition` is the changelog of an in-memory store: its
    /// committed offset is lost when this task store closes.
    pub fn is_volatile(&self, partition: &ChangelogPartition) -> bool {
        self.inner.state().volatile.contains(partition)
    }

    fn discard_interrupted_restores(
        &self,
        stores: &[(String, Option<ChangelogPartition>)],
    ) -> Result<()> {
        for (name, partition) in stores {
            // A bulk restore writes sorted runs that are not atomic with the
            // offsets; its marker says the contents are not a commit. Emptying
            // the store and dropping its partition's offset make it equal to
            // "nothing committed", which is what Unknown tells the runtime.
            // The offset was removed when the restore started, but a retry
            // in the same process (before this fix) or anything else may have
            // written it since: an offset never survives its marker.
            // Window segments too: a reset (`reset_store`) marks any kind
            // of store.
            self.empty_store(name)?;
            let dropped: Vec<ChangelogPartition> = match partition {
                Some(p) => vec![p.clone()],
                // A marker of an older build does not say which partition it
                // restored: no offset of the task can be trusted.
                None => self.inner.state().offsets.keys().cloned().collect(),
            };
            let mut removes = vec![meta::restoring_key(name)];
            removes.extend(dropped.iter().map(meta::offset_key));
            self.inner.write_meta_now(&[], &removes)?;
            let mut state = self.inner.state();
            for p in &dropped {
                state.offsets.remove(p);
            }
            drop(state);
            let dropped: Vec<String> = dropped.iter().map(ToString::to_string).collect();
            tracing::warn!(
                dir = %self.inner.path.display(),
                store = %name,
                partition = ?partition.as_ref().map(ToString::to_string),
                dropped_offsets = ?dropped,
                "discarded interrupted bulk restore; store must be restored"
            );
        }
        Ok(())
    }

    /// Drops window segments whose every window is past retention relative to
    /// the committed stream time. Invisible to readers, who filter by the same
    /// rule, so it may happen outside a commit. A segment that cannot be
    /// dropped stays registered, so the next call tries again; the first
    /// failure is returned once every segment was tried.
    pub(crate) fn drop_expired_segments(&self) -> Result<()> {
        let mut doomed = Vec::new();
        {
            let mut state = self.inner.state();
            for (name, entry) in state.stores.iter_mut() {
                let (
                    StoreKind::Window {
                        retention_ms,
                        segment_ms,
                    },
                    Some(stream_time),
                ) = (entry.registration.kind, entry.stream_time)
                else {
                    continue;
                };
                if let Some(memory) = entry.memory.as_mut() {
                    memory.segments.retain(|s, _| {
                        !crate::window::segment_expired(*s, segment_ms, retention_ms, stream_time)
                    });
                }
                let expired: Vec<i64> = entry
                    .segments
                    .keys()
                    .copied()
                    .filter(|s| {
                        crate::window::segment_expired(*s, segment_ms, retention_ms, stream_time)
                    })
                    .collect();
                for segment in expired {
                    if let Some(ks) = entry.segments.remove(&segment) {
                        doomed.push((name.clone(), segment, ks));
                    }
                }
            }
        }
        let mut first_error = None;
        for (name, segment, ks) in doomed {
            tracing::debug!(store = %name, segment, "dropping expired window segment");
            let dropped =
                crate::failpoints::check(crate::failpoints::points::DROP_SEGMENT, &self.inner.path)
                    .and_then(|()| {
                        self.inner
                            .db
                            .delete_keyspace(ks.clone())
                            .map_err(self.inner.engine_err("dropping an expired segment"))
                    });
            if let Err(error) = dropped {
                tracing::warn!(store = %name, segment, %error, "could not drop an expired window segment");
                if let Ok(entry) = self.inner.state().store_mut(&name) {
                    entry.segments.insert(segment, ks);
                }
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Reads all metadata into the task state; returns stores with a restore
/// marker, and the partition each marker names.
fn load_state(inner: &TaskInner) -> Result<Vec<(String, Option<ChangelogPartition>)>> {
    let path = &inner.path;
    let mut format = None;
    let mut registrations = Vec::new();
    let mut stream_times = BTreeMap::new();
    let mut restoring = Vec::new();
    let mut state = inner.state();
    for item in inner.meta.iter() {
        let (key, value) = item
            .into_inner()
            .map_err(|e| StoreError::engine(path, "reading metadata", e))?;
        match meta::decode_entry(path, &key, &value)? {
            MetaEntry::Format(f) => format = Some(f),
            MetaEntry::Store(name, reg) => registrations.push((name, reg)),
            MetaEntry::Offset(tp, offset) => {
                state.offsets.insert(tp, offset);
            }
            MetaEntry::StreamTime(name, t) => {
                stream_times.insert(name, t);
            }
            MetaEntry::Restoring(name, partition) => restoring.push((name, partition)),
        }
    }
    match format {
        Some(f) if f == FORMAT.as_bytes() => {}
        Some(f) => {
            return Err(StoreError::UnsupportedFormat {
                path: path.clone(),
                found: String::from_utf8_lossy(&f).into_owned(),
                expected: FORMAT,
            });
        }
        None => {
            return Err(StoreError::ForeignDirectory {
                path: path.clone(),
                reason: "metadata keyspace without a format marker".into(),
            });
        }
    }
    let names = inner.db.list_keyspace_names();
    for (name, registration) in registrations {
        let mut entry = StoreEntry {
            registration: registration.clone(),
            keyspace: None,
            segments: BTreeMap::new(),
            stream_time: stream_times.get(&name).copied(),
            staged: Staged::default(),
            memory: None,
        };
        match registration.kind {
            StoreKind::KeyValue => entry.keyspace = Some(inner.keyspace(&kv_keyspace_name(&name))?),
            StoreKind::Window { .. } => {
                let prefix = format!("win.{name}.");
                for ks_name in &names {
                    let Some(segment) = ks_name
                        .strip_prefix(prefix.as_str())
                        .and_then(|s| s.parse::<i64>().ok())
                    else {
                        continue;
                    };
                    entry.segments.insert(segment, inner.keyspace(ks_name)?);
                }
            }
        }
        state.stores.insert(name, entry);
    }
    for (name, _) in &restoring {
        if !state.stores.contains_key(name) {
            return Err(StoreError::corrupt(
                path,
                format!("restore marker for unknown store {name:?}"),
            ));
        }
    }
    Ok(restoring)
}

fn remove_dir_if_present(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io(dir, e)),
    }
}

/// Refuses directories that hold anything but our lock file and database, so a
/// mistaken `state.dir` never turns someone else's files into a store.
fn check_not_foreign(task_dir: &Path, db_path: &Path) -> Result<()> {
    let entries = std::fs::read_dir(task_dir).map_err(|e| StoreError::io(task_dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(task_dir, e))?;
        let name = entry.file_name();
        if name != LOCK_FILE && name != DB_DIR && name != SPILL_DIR {
            return Err(StoreError::ForeignDirectory {
                path: task_dir.to_path_buf(),
                reason: format!("unexpected entry {:?}", name),
            });
        }
    }
    if db_path.exists() {
        let non_empty = std::fs::read_dir(db_path)
            .map_err(|e| StoreError::io(db_path, e))?
            .next()
            .is_some();
        if non_empty && !db_path.join("version").exists() {
            return Err(StoreError::ForeignDirectory {
                path: task_dir.to_path_buf(),
                reason: format!(
                    "{} is not a fjall database (no version marker)",
                    db_path.display()
                ),
            });
        }
    }
    Ok(())
}

/// Store names become keyspace names, so they are restricted to a safe alphabet.
pub(crate) fn validate_store_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        Some("empty")
    } else if name.len() > 200 {
        Some("longer than 200 bytes")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Some("only [A-Za-z0-9_-] are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StoreError::InvalidStoreName {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}
