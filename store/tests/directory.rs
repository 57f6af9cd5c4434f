//! Task directory layout, exclusive locks (including takeover from a killed
//! process), and cleanup of directories of tasks no longer owned.

// Test helpers outside #[test] functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

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

#[test]
fn cleanup_removes_only_idle_unowned_unlocked_task_directories() {
    let root = common::tempdir();
    let state = StateDirectory::new(root.path(), "app").unwrap();
    for task in ["0_0", "0_1", "0_2"] {
        drop(TaskStore::open(state.task_path(task).unwrap(), StoreOptions::default()).unwrap());
    }
    let busy = TaskStore::open(state.task_path("0_2").unwrap(), StoreOptions::default()).unwrap();
    let owned: BTreeSet<String> = ["0_0".to_owned()].into();
    let later = SystemTime::now() + Duration::from_secs(3600);

    // Not idle long enough: nothing goes.
    let removed = state
        .clean_unowned(&owned, Duration::from_secs(7200), later)
        .unwrap();
    assert!(removed.is_empty());
    // Idle long enough: the unowned, unlocked one goes; owned and locked ones stay.
    let removed = state
        .clean_unowned(&owned, Duration::from_secs(600), later)
        .unwrap();
    assert_eq!(removed, vec!["0_1".to_owned()]);
    assert_eq!(
        state.task_ids().unwrap(),
        vec!["0_0".to_owned(), "0_2".to_owned()]
    );
    drop(busy);
}
