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

/// fjall refuses (panics on) a journal limit below 64 MiB.
const MIN_JOURNAL_BYTES: u64 = 64 << 20;

/// Options for [`TaskStore::open`](crate::TaskStore::open).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    /// Durability of [`TaskStore::commit`](crate::TaskStore::commit) and of the
    /// last batch of a restore.
    pub durability: Durability,
    /// Bytes of changelog records per atomic restore batch into a non-empty store.
    pub restore_batch_bytes: usize,
    /// Memory for the records of an empty-store restore (default 256 MiB).
    /// Half of it makes a generation: records are kept in memory until a
    /// generation is full, then sorted and spilled to a file in the task
    /// directory while the next one fills. A changelog whose records fit in
    /// one generation is never spilled. While records arrive, memory is about
    /// this, plus 2 MiB prepared ahead and a MiB per generation of overshoot;
    /// while `finish` writes, each writer also reads back one bucket of every
    /// spilled generation (up to an eighth of this) and fjall's table writers
    /// hold their own buffers (100M records with 256 MiB: 270 MB while
    /// receiving, peak 370 MB).
    pub restore_memory_bytes: usize,
    /// Cores that write an empty-store restore into the store at the end,
    /// each a range of keys at a time (the calling thread is one of them, and
    /// one more thread writes while another waits for its fsync). Defaults to
    /// the available parallelism, at most 4.
    pub restore_threads: usize,
    /// fjall block cache size in bytes.
    pub cache_bytes: u64,
    /// Memtable size of newly created keyspaces (fjall's default, 64 MiB, if
    /// `None`). Smaller memtables flush sooner, which bounds the journal that
    /// must be replayed when a task's store is reopened.
    pub memtable_bytes: Option<u64>,
    /// The most journal fjall keeps before it flushes the memtables that hold
    /// the oldest journal back. A store reopened after a crash replays up to
    /// this much (plus the active journal, up to 64 MB), so it bounds
    /// restart time. Default and minimum (fjall's): 64 MiB; fjall's own
    /// default, 512 MiB, made a reopen after 100,000 commits take 2.4 to
    /// 3.6 s instead of 1.3 to 1.4 s (`store_reopen` bench).
    pub max_journal_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            durability: Durability::default(),
            restore_batch_bytes: 4 << 20,
            restore_memory_bytes: 256 << 20,
            restore_threads: std::thread::available_parallelism()
                .map_or(1, std::num::NonZeroUsize::get)
                .min(4),
            cache_bytes: 32 << 20,
            memtable_bytes: None,
            max_journal_bytes: MIN_JOURNAL_BYTES,
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

    /// Sets [`StoreOptions::max_journal_bytes`] (at least 64 MiB, fjall's
    /// minimum).
    #[must_use]
    pub fn with_max_journal_bytes(mut self, bytes: u64) -> Self {
        self.max_journal_bytes = bytes.max(MIN_JOURNAL_BYTES);
        self
    }

    /// Sets [`StoreOptions::restore_memory_bytes`]. Below 32 KiB it counts as
    /// 32 KiB; a small budget spills often, which tests use.
    #[must_use]
    pub fn with_restore_memory_bytes(mut self, bytes: usize) -> Self {
        self.restore_memory_bytes = bytes;
        self
    }

    /// Sets [`StoreOptions::restore_threads`] (at least 1).
    #[must_use]
    pub fn with_restore_threads(mut self, threads: usize) -> Self {
        self.restore_threads = threads.max(1);
        self
    }
}
