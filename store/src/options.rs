//! Options of a task's store database.

use fjall::PersistMode;

/// How far a commit is pushed towards the disk before `commit` returns.
///
/// Atomicity does not depend on this: whatever survives a crash is always a
/// whole commit, data and offsets together. Durability only decides how recent
/// that commit is. Under exactly-once, a lost local commit is recovered from the
/// changelog, because its offsets were lost with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Left in fjall's journal buffer: a process crash may lose recent commits.
    Buffered,
    /// Flushed to the OS: survives a process crash, not a power loss.
    #[default]
    ProcessCrash,
    /// `fsync`ed: survives a power loss.
    PowerLoss,
}

impl Durability {
    pub(crate) fn persist_mode(self) -> Option<PersistMode> {
        match self {
            Self::Buffered => None,
            Self::ProcessCrash => Some(PersistMode::Buffer),
            Self::PowerLoss => Some(PersistMode::SyncAll),
        }
    }
}

/// Options for [`TaskStore::open`](crate::TaskStore::open).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    /// Durability of [`TaskStore::commit`](crate::TaskStore::commit) and of the
    /// last batch of a restore.
    pub durability: Durability,
    /// Bytes of changelog records per atomic restore batch into a non-empty store.
    pub restore_batch_bytes: usize,
    /// Bytes of changelog records per sorted run when restoring into an empty store;
    /// with the pipeline, at most about three runs are in memory at once.
    pub restore_run_bytes: usize,
    /// fjall block cache size in bytes.
    pub cache_bytes: u64,
    /// Memtable size of newly created keyspaces (fjall's default, 64 MiB, if
    /// `None`). Smaller memtables flush sooner, which bounds the journal that
    /// must be replayed when a task's store is reopened.
    pub memtable_bytes: Option<u64>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            durability: Durability::default(),
            restore_batch_bytes: 4 << 20,
            restore_run_bytes: 64 << 20,
            cache_bytes: 32 << 20,
            memtable_bytes: None,
        }
    }
}

impl StoreOptions {
    /// Sets [`StoreOptions::durability`].
    #[must_use]
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets [`StoreOptions::restore_batch_bytes`].
    #[must_use]
    pub fn with_restore_batch_bytes(mut self, bytes: usize) -> Self {
        self.restore_batch_bytes = bytes.max(1);
        self
    }

    /// Sets [`StoreOptions::memtable_bytes`].
    #[must_use]
    pub fn with_memtable_bytes(mut self, bytes: u64) -> Self {
        self.memtable_bytes = Some(bytes.max(64 << 10));
        self
    }

    /// Sets [`StoreOptions::restore_run_bytes`].
    #[must_use]
    pub fn with_restore_run_bytes(mut self, bytes: usize) -> Self {
        self.restore_run_bytes = bytes.max(1);
        self
    }
}
