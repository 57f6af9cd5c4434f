//! The one error type of `weir-store`.

use std::path::PathBuf;

use crate::meta::ChangelogPartition;

/// Result alias used throughout `weir-store`.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything that can go wrong opening, reading, writing or restoring a store.
///
/// Every variant names the path or store it is about, so a log line is enough
/// to find the directory at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A filesystem operation failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },

    /// fjall reported an error (corrupt files, a poisoned database after a failed
    /// write, an I/O error inside the engine).
    #[error("storage engine error in {path} while {action}: {source}")]
    Engine {
        /// The task directory.
        path: PathBuf,
        /// What weir-store was doing.
        action: &'static str,
        /// fjall's error.
        source: fjall::Error,
    },

    /// The task directory is locked by another thread or a live process.
    #[error("task directory {path} is locked by another owner (pid recorded in lock: {holder})")]
    Locked {
        /// The task directory.
        path: PathBuf,
        /// The pid written by the holder, or `unknown`.
        holder: String,
    },

    /// The directory holds files that are not a weir-store database.
    /// Nothing is deleted: a wrong `state.dir` must not destroy someone's data.
    #[error("{path} is not a weir-store task directory: {reason}")]
    ForeignDirectory {
        /// The task directory.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },

    /// The weir-store metadata inside the database cannot be decoded.
    #[error("corrupt weir-store metadata in {path}: {reason}")]
    CorruptMetadata {
        /// The task directory.
        path: PathBuf,
        /// What failed to decode.
        reason: String,
    },

    /// The database was written by an incompatible weir-store format.
    #[error("{path} has store format {found:?}, this build reads {expected:?}")]
    UnsupportedFormat {
        /// The task directory.
        path: PathBuf,
        /// The format marker found.
        found: String,
        /// The format this build understands.
        expected: &'static str,
    },

    /// A store was opened with key or value serdes other than the ones it was created with.
    #[error("store {store:?} was created with serdes {stored}, opened with {requested}")]
    SerdeMismatch {
        /// The store.
        store: String,
        /// Key and value serde recorded in the store, as `(key, value)`.
        stored: String,
        /// Key and value serde requested, as `(key, value)`.
        requested: String,
    },

    /// A store was opened as a different kind (key-value or window) or with
    /// different window settings than it was created with.
    #[error("store {store:?} exists as {stored}, requested as {requested}")]
    KindMismatch {
        /// The store.
        store: String,
        /// What the store is.
        stored: String,
        /// What was asked for.
        requested: String,
    },

    /// A store name is empty, too long, or uses characters other than `[A-Za-z0-9_-]`.
    #[error("invalid store name {name:?}: {reason}")]
    InvalidStoreName {
        /// The rejected name.
        name: String,
        /// Why.
        reason: &'static str,
    },

    /// A key or value fjall cannot hold: keys must be 1 to 65,535 bytes (window
    /// keys 12 bytes less), values under 4 GiB. Rejected before anything is staged.
    #[error("store {store:?}: {reason}")]
    InvalidEntry {
        /// The store.
        store: String,
        /// What is wrong.
        reason: String,
    },

    /// Options or arguments that cannot work (zero segment size, inverted ranges, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// No store of that name is registered in the task.
    #[error("no store named {0:?} in this task")]
    UnknownStore(String),

    /// Bytes read from a store could not be decoded by the typed layer.
    #[error("store {store:?}: cannot decode {what} with serde {serde}: {reason}")]
    Decode {
        /// The store.
        store: String,
        /// `key` or `value`.
        what: &'static str,
        /// The serde used.
        serde: &'static str,
        /// The decoder's message.
        reason: String,
    },

    /// A changelog record could not be applied during restore.
    #[error("store {store:?}: bad changelog record at offset {offset}: {reason}")]
    BadChangelogRecord {
        /// The store.
        store: String,
        /// The record's offset.
        offset: i64,
        /// What is wrong with it.
        reason: String,
    },

    /// A restore was started on a store that has staged, uncommitted writes;
    /// mixing the two would commit the staged writes under changelog offsets
    /// that do not contain them.
    #[error("store {0:?} has staged writes; commit or abort before restoring")]
    StagedWritesPending(String),

    /// A restore of the store from this changelog partition has not finished:
    /// a bulk restore ([`RestorePath::SortedRuns`](crate::RestorePath::SortedRuns))
    /// whose `finish` failed or never ran, so the store's contents are not a
    /// commit and no commit may claim the partition's offset or write into
    /// the store, or a restorer of the store that is still open. Restoring
    /// again (a new [`TaskStore::restorer`](crate::TaskStore::restorer)
    /// starts the bulk path over on an emptied store) and finishing ends it,
    /// as does reopening the task store, which empties the store.
    #[error("store {store:?}: restore from {partition} not finished: {reason}")]
    RestoreInProgress {
        /// The store.
        store: String,
        /// The changelog partition it is restoring from.
        partition: ChangelogPartition,
        /// What was refused.
        reason: &'static str,
    },

    /// The store is still referenced by handles (so it cannot be wiped).
    #[error("task store {0} is still in use by store handles or a restorer")]
    InUse(PathBuf),

    /// A background restore thread failed or panicked.
    #[error("restore worker for store {store:?} failed: {reason}")]
    RestoreWorker {
        /// The store.
        store: String,
        /// What happened.
        reason: String,
    },
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn engine(
        path: impl Into<PathBuf>,
        action: &'static str,
        source: fjall::Error,
    ) -> Self {
        Self::Engine {
            path: path.into(),
            action,
            source,
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Self::CorruptMetadata {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
