//! Fault hooks for weir-store's own tests: named points inside operations
//! whose failure or interleaving tests cannot otherwise reach (a failed
//! ingestion halfway through a restore's `finish`, a segment drop that fails
//! after a commit, a concurrent acquire while a directory is being removed).
//!
//! Compiled only with the `failpoints` cargo feature, which weir-store's
//! dev-dependencies enable for its tests and nothing else does: without it,
//! [`check`] is an empty inline function and costs nothing. Not part of the
//! supported API.

use std::path::Path;

use crate::error::Result;

#[cfg(feature = "failpoints")]
mod hooks {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex, PoisonError};

    /// A hook: runs when its point is reached; `true` makes the operation fail there.
    pub type Hook = Arc<dyn Fn() -> bool + Send + Sync>;

    static HOOKS: Mutex<BTreeMap<&'static str, Hook>> = Mutex::new(BTreeMap::new());

    /// Runs `hook` each time the point `name` is reached (in any thread of
    /// the process), replacing an earlier hook of that point. The hook may
    /// itself call into the store: no lock is held while it runs.
    pub fn set(name: &'static str, hook: impl Fn() -> bool + Send + Sync + 'static) {
        HOOKS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, Arc::new(hook));
    }

    /// Removes every hook.
    pub fn clear() {
        HOOKS.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    pub(crate) fn fire(name: &'static str) -> bool {
        let hook = HOOKS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned();
        hook.is_some_and(|hook| hook())
    }
}

#[cfg(feature = "failpoints")]
pub use hooks::{Hook, clear, set};

/// The point `name` is reached while working on `path`: an [`StoreError::Io`]
/// if a test's hook says this operation fails here.
#[cfg(feature = "failpoints")]
pub(crate) fn check(name: &'static str, path: &Path) -> Result<()> {
    if hooks::fire(name) {
        tracing::warn!(failpoint = name, path = %path.display(), "failpoint triggered");
        return Err(crate::error::StoreError::io(
            path,
            std::io::Error::other(format!("failpoint {name}")),
        ));
    }
    Ok(())
}

/// Without the `failpoints` feature: nothing, at no cost.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn check(_name: &'static str, _path: &Path) -> Result<()> {
    Ok(())
}

/// Point names, shared by the code and the tests.
pub mod points {
    /// After each key range of a bulk restore's `finish` was ingested.
    pub const INGESTED_RANGE: &str = "restore.ingested_range";
    /// Before the final batch of a bulk restore's `finish` (offset, marker).
    pub const RESTORE_FINAL_COMMIT: &str = "restore.final_commit";
    /// Before an expired window segment is dropped.
    pub const DROP_SEGMENT: &str = "window.drop_segment";
    /// In `TaskDirLock::acquire`, after the lock file was opened and before it is locked.
    pub const LOCK_OPENED: &str = "directory.lock_opened";
    /// In `StateDirectory::clean_unowned`, once a directory is to be removed,
    /// right before its files are deleted.
    pub const CLEANUP_BEFORE_DELETE: &str = "directory.cleanup_before_delete";
}
