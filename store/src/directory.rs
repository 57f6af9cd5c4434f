//! The state directory layout `<state.dir>/<application.id>/<task id>/`, the
//! exclusive per-task lock, and cleanup of directories of tasks no longer owned.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::{Result, StoreError};

/// Name of the lock file inside a task directory.
pub const LOCK_FILE: &str = ".lock";

/// `<state.dir>/<application.id>/`: the parent of every task directory of one
/// application on this machine.
#[derive(Debug, Clone)]
pub struct StateDirectory {
    root: PathBuf,
}

impl StateDirectory {
    /// Creates (if needed) `<state_dir>/<application_id>/`.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidArgument`] if the application id is not a single path
    /// component; [`StoreError::Io`] if the directory cannot be created.
    pub fn new(state_dir: impl AsRef<Path>, application_id: &str) -> Result<Self> {
        validate_component(application_id, "application id")?;
        let root = state_dir.as_ref().join(application_id);
        std::fs::create_dir_all(&root).map_err(|e| StoreError::io(&root, e))?;
        Ok(Self { root })
    }

    /// `<state.dir>/<application.id>/`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of one task, e.g. `0_3`. Not created until a store opens it.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidArgument`] if `task_id` is not a single path component.
    pub fn task_path(&self, task_id: &str) -> Result<PathBuf> {
        validate_component(task_id, "task id")?;
        Ok(self.root.join(task_id))
    }

    /// The task ids that have a directory here.
    ///
    /// # Errors
    ///
    /// [`StoreError::Io`] if the directory cannot be listed.
    pub fn task_ids(&self) -> Result<Vec<String>> {
        let mut ids = Vec::new();
        let entries = std::fs::read_dir(&self.root).map_err(|e| StoreError::io(&self.root, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io(&self.root, e))?;
            let is_dir = entry
                .file_type()
                .map_err(|e| StoreError::io(entry.path(), e))?
                .is_dir();
            if let (true, Some(name)) = (is_dir, entry.file_name().to_str()) {
                ids.push(name.to_owned());
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Deletes the directories of tasks not in `owned` that nobody has locked for
    /// at least `cleanup_delay` (measured from the lock file's modification time,
    /// which is refreshed whenever a lock is released). Returns the ids removed.
    ///
    /// A directory locked by a live owner is skipped, never deleted under it.
    ///
    /// # Errors
    ///
    /// [`StoreError::Io`] if listing or deleting fails.
    pub fn clean_unowned(
        &self,
        owned: &BTreeSet<String>,
        cleanup_delay: Duration,
        now: SystemTime,
    ) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        for task_id in self.task_ids()? {
            if owned.contains(&task_id) {
                continue;
            }
            let path = self.root.join(&task_id);
            let lock = match TaskDirLock::acquire(&path) {
                Ok(lock) => lock,
                Err(StoreError::Locked { .. }) => continue,
                Err(e) => return Err(e),
            };
            let last_used = lock.previous_release;
            let idle = now.duration_since(last_used).unwrap_or(Duration::ZERO);
            if idle < cleanup_delay {
                continue;
            }
            tracing::info!(task = %task_id, idle_ms = idle.as_millis() as u64, "removing state of unowned task");
            crate::failpoints::check(crate::failpoints::points::CLEANUP_BEFORE_DELETE, &path)?;
            // Deleted while holding the lock, so no one can open it half-deleted.
            std::fs::remove_dir_all(&path).map_err(|e| StoreError::io(&path, e))?;
            lock.forget_released_file();
            removed.push(task_id);
        }
        Ok(removed)
    }
}

fn validate_component(value: &str, what: &str) -> Result<()> {
    let ok =
        !value.is_empty() && value != "." && value != ".." && !value.contains(['/', '\\', '\0']);
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidArgument(format!(
            "{what} {value:?} must be a single, non-empty path component"
        )))
    }
}

/// An exclusive lock on one task directory, held for as long as this value lives.
///
/// It uses an OS file lock (`flock` on Linux), which belongs to the open file:
/// a second open from another thread of this process or another process fails,
/// and the OS releases the lock when its holder dies, so a lock left behind by
/// a killed process is simply taken over. The holder's pid is written into the
/// file only to make the "locked" error and the takeover log line useful.
#[derive(Debug)]
pub struct TaskDirLock {
    file: Option<File>,
    path: PathBuf,
    previous_release: SystemTime,
}

impl TaskDirLock {
    /// Creates `task_dir` if needed and locks it.
    ///
    /// # Errors
    ///
    /// [`StoreError::Locked`] if another owner holds it; [`StoreError::Io`] otherwise.
    pub fn acquire(task_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(task_dir).map_err(|e| StoreError::io(task_dir, e))?;
        let path = task_dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        crate::failpoints::check(crate::failpoints::points::LOCK_OPENED, task_dir)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    path: task_dir.to_path_buf(),
                    holder: read_holder(&mut file),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(StoreError::io(&path, e)),
        }
        let previous_release = file
            .metadata()
            .and_then(|m| m.modified())
            .map_err(|e| StoreError::io(&path, e))?;
        let previous = read_holder(&mut file);
        let pid = std::process::id();
        if previous != "unknown" && previous != pid.to_string() {
            // The OS only lets us in if the previous holder released or died.
            tracing::debug!(dir = %task_dir.display(), previous_pid = %previous, "took over task directory lock");
        }
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "{pid}"))
            .map_err(|e| StoreError::io(&path, e))?;
        Ok(Self {
            file: Some(file),
            path,
            previous_release,
        })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The lock file was deleted with its directory: release without touching it.
    fn forget_released_file(mut self) {
        self.file = None;
    }
}

impl Drop for TaskDirLock {
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            // Marks when the task was last used, for `clean_unowned`; best effort,
            // as a failure only delays cleanup.
            let _ = file.set_modified(SystemTime::now());
            let _ = file.unlock();
        }
    }
}

fn read_holder(file: &mut File) -> String {
    let mut text = String::new();
    let read = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.take(64).read_to_string(&mut text));
    match read {
        Ok(_) if !text.trim().is_empty() => text.trim().to_owned(),
        _ => "unknown".to_owned(),
    }
}
