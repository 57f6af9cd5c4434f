//! Task directory layout, exclusive locks (including takeover from a killed
//! process), and cleanup of directories of tasks no longer owned.

// Test helpers outside #[test] functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use weir_store::{StateDirectory, StoreError, StoreOptions, TaskDirLock, TaskStore};

const CHILD_ENV: &str = "WEIR_STORE_LOCK_CHILD_DIR";

#[test]
fn lock_child_entry_point() {
    // Only does something when re-executed by `a_lock_held_by_a_killed_process_is_taken_over`.
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let _lock = TaskDirLock::acquire(std::path::Path::new(&dir)).unwrap();
        println!("LOCKED");
        // Hold the lock until killed: block on stdin, which the parent never closes first.
        let _ = std::io::stdin().lines().next();
        std::process::exit(0);
    }
}

#[test]
fn layout_is_state_dir_application_task() {
    let root = common::tempdir();
    let state = StateDirectory::new(root.path(), "my-app").unwrap();
    let path = state.task_path("0_3").unwrap();
    assert_eq!(path, root.path().join("my-app").join("0_3"));
    assert!(state.task_path("../x").is_err());
    assert!(StateDirectory::new(root.path(), "a/b").is_err());
    let task = TaskStore::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(state.task_ids().unwrap(), vec!["0_3".to_owned()]);
    drop(task);
}

#[test]
fn a_second_open_in_the_same_process_is_refused_until_the_first_closes() {
    let dir = common::tempdir();
    let first = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
    match TaskStore::open(dir.path(), StoreOptions::default()) {
        Err(StoreError::Locked { holder, .. }) => {
            assert_eq!(holder, std::process::id().to_string())
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(first);
    TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
}

#[test]
fn a_lock_held_by_a_killed_process_is_taken_over() {
    let dir = common::tempdir();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "lock_child_entry_point",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let locked = BufReader::new(stdout)
        .lines()
        .any(|l| l.unwrap().contains("LOCKED"));
    assert!(locked);
    match TaskDirLock::acquire(dir.path()) {
        Err(StoreError::Locked { holder, .. }) => assert_eq!(holder, child.id().to_string()),
        other => panic!("expected Locked, got {other:?}"),
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The OS released the dead holder's lock; its pid is still in the file.
    let lock = TaskDirLock::acquire(dir.path()).unwrap();
    let recorded = std::fs::read_to_string(lock.path()).unwrap();
    assert_eq!(recorded.trim(), std::process::id().to_string());
}

/// Idleness is measured in real time from the last release by an owner: a
/// scan that finds a directory not idle enough must not restart its idle
/// clock (m8), so a scan at half the delay and one past it remove it.
#[test]
fn cleanup_removes_only_idle_unowned_unlocked_task_directories() {
    let delay = Duration::from_millis(400);
    let root = common::tempdir();
    let state = StateDirectory::new(root.path(), "app").unwrap();
    for task in ["0_0", "0_1", "0_2"] {
        drop(TaskStore::open(state.task_path(task).unwrap(), StoreOptions::default()).unwrap());
    }
    // Every owner released before this instant.
    let released = Instant::now();
    let busy = TaskStore::open(state.task_path("0_2").unwrap(), StoreOptions::default()).unwrap();
    let owned: BTreeSet<String> = ["0_0".to_owned()].into();

    // Half the delay later: not idle long enough, nothing goes.
    std::thread::sleep(delay / 2);
    let early = state
        .clean_unowned(&owned, delay, SystemTime::now())
        .unwrap();
    let scanned_early = released.elapsed();
    if scanned_early < delay {
        assert!(
            early.is_empty(),
            "removed after {scanned_early:?}: {early:?}"
        );
    }
    // Past the delay (the sleep lets wall-clock time pass; it orders nothing):
    // the unowned, unlocked one goes, the owned and the locked ones stay.
    std::thread::sleep((delay * 11 / 10).saturating_sub(released.elapsed()));
    let late = state
        .clean_unowned(&owned, delay, SystemTime::now())
        .unwrap();
    let removed: Vec<_> = early.into_iter().chain(late).collect();
    assert_eq!(removed, vec!["0_1".to_owned()]);
    assert_eq!(
        state.task_ids().unwrap(),
        vec!["0_0".to_owned(), "0_2".to_owned()]
    );
    drop(busy);
}

/// m9: a cleanup renames a directory to a tombstone before deleting it; one
/// left behind by a process that died meanwhile is no task, and the next scan
/// deletes it.
#[test]
fn tombstones_left_by_an_interrupted_cleanup_are_not_tasks_and_are_deleted() {
    let root = common::tempdir();
    let state = StateDirectory::new(root.path(), "app").unwrap();
    drop(TaskStore::open(state.task_path("0_0").unwrap(), StoreOptions::default()).unwrap());
    let tombstone = state.root().join(".0_1.deleting-4242-0");
    std::fs::create_dir_all(tombstone.join("db")).unwrap();
    std::fs::write(tombstone.join("db").join("version"), b"x").unwrap();
    std::fs::write(tombstone.join(".lock"), b"4242").unwrap();
    assert_eq!(state.task_ids().unwrap(), vec!["0_0".to_owned()]);
    assert!(state.task_path(".0_1.deleting-4242-0").is_err());
    let owned: BTreeSet<String> = ["0_0".to_owned()].into();
    let removed = state
        .clean_unowned(&owned, Duration::from_secs(3600), SystemTime::now())
        .unwrap();
    assert!(removed.is_empty(), "{removed:?}");
    assert!(!tombstone.exists(), "tombstone left behind");
    assert_eq!(state.task_ids().unwrap(), vec!["0_0".to_owned()]);
}
