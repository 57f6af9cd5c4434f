//! The state directory layout `<state.dir>/<application.id>/<task id>/`, the
//! exclusive per-task lock, and cleanup of directories of tasks no longer owned.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::error::{Result, StoreError};

/// Name of the lock file inside a task directory.
pub const LOCK_FILE: &str = ".lock";

/// What a directory being deleted is renamed to has this in its name, after
/// a leading dot and the task id: `.<task id>.deleting-<pid>-<n>`.
const TOMBSTONE_TAG: &str = ".deleting-";

/// How often an acquire retries when the lock file it locked was replaced
/// (its directory removed) in the meantime.
const LOCK_ATTEMPTS: usize = 16;

fn is_tombstone(name: &str) -> bool {
    name.starts_with('.') && name.contains(TOMBSTONE_TAG)
}

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
        if is_tombstone(task_id) {
            return Err(StoreError::InvalidArgument(format!(
                "task id {task_id:?} is the name of a directory being deleted"
            )));
        }
        Ok(self.root.join(task_id))
    }

    /// The task ids that have a directory here (directories being deleted
    /// by a cleanup are not tasks).
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
            if let (true, Some(name)) = (is_dir, entry.file_name().to_str())
                && !is_tombstone(name)
            {
                ids.push(name.to_owned());
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Deletes the directories of tasks not in `owned` that nobody has locked for
    /// at least `cleanup_delay`, measured from the lock file's modification
    /// time, which an owner refreshes when it takes and when it releases the
    /// lock (a scan only reads it). Returns the ids removed.
    ///
    /// A directory locked by a live owner is skipped, never deleted under it.
    /// One to be removed is first renamed, under its lock, to a hidden
    /// tombstone (`.<task id>.deleting-<pid>-<n>`), then deleted: from the
    /// rename on, the task id is free, and a new owner gets a fresh directory
    /// that the deletion never touches. Tombstones left by a cleanup that
    /// died are deleted by the next scan.
    ///
    /// # Errors
    ///
    /// [`StoreError::Io`] if listing, inspecting or renaming fails. A
    /// tombstone that cannot be deleted is logged and left for the next scan.
    pub fn clean_unowned(
        &self,
        owned: &BTreeSet<String>,
        cleanup_delay: Duration,
        now: SystemTime,
    ) -> Result<Vec<String>> {
        self.delete_tombstones()?;
        let mut removed = Vec::new();
        for task_id in self.task_ids()? {
            if owned.contains(&task_id) {
                continue;
            }
            let path = self.root.join(&task_id);
            let lock = match TaskDirLock::inspect(&path) {
                Ok(Some(lock)) => lock,
                // Removed meanwhile, or in use.
                Ok(None) | Err(StoreError::Locked { .. }) => continue,
                Err(e) => return Err(e),
            };
            let last_used = lock.previous_release;
            let idle = now.duration_since(last_used).unwrap_or(Duration::ZERO);
            if idle < cleanup_delay {
                continue;
            }
            tracing::info!(task = %task_id, idle_ms = idle.as_millis() as u64, "removing state of unowned task");
            // Renamed while holding the lock, so no owner has it open; the
            // lock goes with it, and the name is free from here on.
            let tombstone = self.rename_to_tombstone(&task_id, &path)?;
            lock.forget_released_file();
            crate::failpoints::check(crate::failpoints::points::CLEANUP_BEFORE_DELETE, &tombstone)?;
            delete_tombstone(&tombstone);
            removed.push(task_id);
        }
        Ok(removed)
    }

    /// Renames a task directory to a tombstone name no other directory has.
    fn rename_to_tombstone(&self, task_id: &str, path: &Path) -> Result<PathBuf> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let pid = std::process::id();
        let mut last_error = None;
        for _ in 0..LOCK_ATTEMPTS {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let tombstone = self
                .root
                .join(format!(".{task_id}{TOMBSTONE_TAG}{pid}-{n}"));
            if tombstone.exists() {
                continue;
            }
            match std::fs::rename(path, &tombstone) {
                Ok(()) => return Ok(tombstone),
                Err(e) => last_error = Some(e),
            }
        }
        Err(StoreError::io(
            path,
            last_error.unwrap_or_else(|| std::io::Error::other("no free tombstone name")),
        ))
    }

    /// Deletes the tombstones a cleanup left behind (it died, or deleting failed).
    fn delete_tombstones(&self) -> Result<()> {
        let entries = std::fs::read_dir(&self.root).map_err(|e| StoreError::io(&self.root, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io(&self.root, e))?;
            if entry.file_name().to_str().is_some_and(is_tombstone) {
                tracing::info!(dir = %entry.path().display(), "deleting a leftover tombstone of a removed task");
                delete_tombstone(&entry.path());
            }
        }
        Ok(())
    }
}

/// Deletes a tombstone; a failure is logged, and the next scan tries again.
fn delete_tombstone(path: &Path) {
    match std::fs::remove_dir_all(path) {
        Ok(()) => {}
        // Another scan deleted it first.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(dir = %path.display(), error = %e, "could not delete a removed task's files; the next scan retries");
        }
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
    /// An owner's lock marks the release time; a cleanup's inspection does not.
    owner: bool,
}

impl TaskDirLock {
    /// Creates `task_dir` if needed and locks it.
    ///
    /// # Errors
    ///
    /// [`StoreError::Locked`] if another owner holds it; [`StoreError::Io`] otherwise.
    pub fn acquire(task_dir: &Path) -> Result<Self> {
        let Some((mut file, path)) = lock_file(task_dir, true)? else {
            return Err(StoreError::io(
                task_dir,
                std::io::Error::other("the directory kept being removed while locking it"),
            ));
        };
        let previous_release = modified(&file, &path)?;
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
            owner: true,
        })
    }

    /// Locks an existing task directory to read when it was last used,
    /// without becoming its owner: the lock file is neither written nor
    /// marked at release, so inspecting leaves the directory's idle time as
    /// it was. `None` if the directory no longer exists.
    fn inspect(task_dir: &Path) -> Result<Option<Self>> {
        let Some((file, path)) = lock_file(task_dir, false)? else {
            return Ok(None);
        };
        let previous_release = modified(&file, &path)?;
        Ok(Some(Self {
            file: Some(file),
            path,
            previous_release,
            owner: false,
        }))
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
            if self.owner {
                // Marks when the task was last used, for `clean_unowned`; best
                // effort, as a failure only delays cleanup.
                let _ = file.set_modified(SystemTime::now());
            }
            let _ = file.unlock();
        }
    }
}

/// Opens and locks `task_dir`'s lock file, creating the directory first if
/// `create` (else `None` when it is gone). The file locked must still be the
/// one at the path: a cleanup may remove the directory between the open and
/// the lock, and a lock on the removed file would exclude no one, so the
/// acquire starts over (`None` after [`LOCK_ATTEMPTS`], or at once when not
/// `create`).
fn lock_file(task_dir: &Path, create: bool) -> Result<Option<(File, PathBuf)>> {
    let path = task_dir.join(LOCK_FILE);
    for _ in 0..LOCK_ATTEMPTS {
        if create {
            std::fs::create_dir_all(task_dir).map_err(|e| StoreError::io(task_dir, e))?;
        }
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path);
        let mut file = match opened {
            Ok(file) => file,
            Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(&path, e)),
        };
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
        if still_at_path(&file, &path)? {
            return Ok(Some((file, path)));
        }
        tracing::debug!(dir = %task_dir.display(), "lock file replaced while locking it; retrying");
        if !create {
            return Ok(None);
        }
    }
    Ok(None)
}

/// Whether the open `file` is the file at `path` (not one removed meanwhile).
#[cfg(unix)]
fn still_at_path(file: &File, path: &Path) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata().map_err(|e| StoreError::io(path, e))?;
    match std::fs::metadata(path) {
        Ok(current) => Ok(held.dev() == current.dev() && held.ino() == current.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::io(path, e)),
    }
}

/// Without inode numbers, a removed file is told by its path being gone.
#[cfg(not(unix))]
fn still_at_path(_file: &File, path: &Path) -> Result<bool> {
    Ok(path.exists())
}

fn modified(file: &File, path: &Path) -> Result<SystemTime> {
    file.metadata()
        .and_then(|m| m.modified())
        .map_err(|e| StoreError::io(path, e))
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
