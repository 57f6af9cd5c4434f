//! fjall-backed state stores whose contents always equal their last commit.
//!
//! - One fjall database per task, under `<state.dir>/<application.id>/<task id>/`,
//!   locked exclusively ([`StateDirectory`], [`TaskDirLock`]).
//! - Key-value stores ([`KeyValueStore`]) and segmented window stores
//!   ([`WindowStore`]), each with a typed layer over a small [`Serde`] trait.
//! - Writes are staged per task and made durable by [`TaskStore::commit`],
//!   together with the changelog offsets, in one atomic batch. There is no
//!   checkpoint file: after any crash, [`TaskStore::open`] yields exactly the
//!   last commit and its offsets, and a store whose offsets are unknown says so
//!   ([`CommittedOffset::Unknown`]).
//! - In-memory stores ([`TaskStore::in_memory_key_value_store`],
//!   [`TaskStore::in_memory_window_store`]) beside them in the same task, with
//!   the same staging, commit and abort, whose contents and changelog offset
//!   never reach disk: a reopened task store has to restore them in full.
//! - Restore ([`ChangelogRestorer`]) ingests sorted runs into an empty store and
//!   applies atomic batches otherwise.
//!
//! fjall is synchronous; call this crate from a blocking thread.

mod codec;
mod directory;
mod error;
/// Fault hooks for weir-store's own tests (the `failpoints` feature); not
/// part of the supported API.
#[cfg(feature = "failpoints")]
#[doc(hidden)]
pub mod failpoints;
#[cfg(not(feature = "failpoints"))]
mod failpoints;
/// Fuzzing entry points for `fuzz/` at the repository root; not part of the supported API.
#[doc(hidden)]
pub mod fuzzing;
mod kv;
mod merge;
mod meta;
mod options;
mod partition;
mod restore;
mod run_merge;
mod sorted_run;
mod spill;
mod task_store;
mod typed;
mod window;

#[cfg(feature = "serde")]
pub use codec::Json;
pub use codec::Serde;
pub use directory::{LOCK_FILE, StateDirectory, TaskDirLock};
pub use error::{Result, StoreError};
pub use kv::KeyValueStore;
pub use merge::MergedEntries;
pub use meta::{ChangelogPartition, FORMAT, Registration, StoreKind};
pub use options::{Durability, StoreOptions};
pub use restore::{
    ChangelogRecord, ChangelogRestorer, RestorePath, RestoreProgress, WriteProgress,
};
pub use task_store::{CommittedOffset, DB_DIR, TaskStore};
pub use typed::{TypedKeyValueStore, TypedWindowStore};
pub use window::{
    TimeOrderedEntries, WindowEntry, WindowStore, split_window_changelog_key, window_changelog_key,
};

/// The fjall version this crate is built on, re-exported only so the store
/// benches can run their raw-fjall baseline in the same process (the benches
/// crate has no fjall dependency of its own). Not part of the supported API.
#[doc(hidden)]
pub use fjall;
