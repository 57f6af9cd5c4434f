//! Failures and interleavings inside store operations, reached through the
//! fault hooks of the `failpoints` feature: a bulk restore whose `finish`
//! fails halfway and is retried, a window segment that cannot be dropped after
//! a commit, and directory cleanup racing a new owner.
//!
//! Hooks are process-wide, so the tests of this file run one at a time (each
//! holds `serial()`) and clear every hook when they end, passed or not.

// Test helpers outside #[test] functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use weir_store::failpoints::{self, points};
use weir_store::{
    ChangelogPartition, ChangelogRecord, CommittedOffset, RestorePath, StateDirectory, StoreError,
    StoreOptions, TaskDirLock, TaskStore,
};

/// Holds the file's test lock and clears every hook when dropped.
struct Serial(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Drop for Serial {
    fn drop(&mut self) {
        failpoints::clear();
    }
}

fn serial() -> Serial {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    failpoints::clear();
    Serial(guard)
}

type Record = (i64, Vec<u8>, Option<Vec<u8>>);

/// A changelog in offset order with repeated keys and tombstones, about 1.7
/// MB: more than the 1 MiB below which `finish` ingests one key range only.
fn changelog(n: i64, keys: u64) -> Vec<Record> {
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    (0..n)
        .map(|offset| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = format!("key-{:06}", x % keys).into_bytes();
            let value = (!x.is_multiple_of(7)).then(|| format!("value-{offset:060}").into_bytes());
            (offset, key, value)
        })
        .collect()
}

fn model(records: &[Record]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for (_, k, v) in records {
        match v {
            Some(v) => m.insert(k.clone(), v.clone()),
            None => m.remove(k),
        };
    }
    m
}

fn apply(restorer: &mut weir_store::ChangelogRestorer, records: &[Record]) {
    for chunk in records.chunks(1_000) {
        let batch: Vec<ChangelogRecord<'_>> = chunk
            .iter()
            .map(|(offset, k, v)| ChangelogRecord {
                offset: *offset,
                key: k,
                value: v.as_deref(),
            })
            .collect();
        restorer.apply(&batch).unwrap();
    }
}

fn contents(task: &TaskStore, store: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
    task.key_value_store(store)
        .unwrap()
        .iter()
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn options() -> StoreOptions {
    // Small generations so that some are spilled, and two threads so that
    // `finish` ingests eight key ranges.
    StoreOptions::default()
        .with_restore_memory_bytes(1 << 20)
        .with_restore_threads(2)
        .with_restore_batch_bytes(16 << 10)
}

/// C2: `finish` fails after part of the data was ingested (or after all of
/// it, before the final commit); the retry in the same process must start the
/// bulk path over on a cleared store, and the store must survive a reopen
/// with the changelog's state and offset.
#[test]
fn a_bulk_restore_that_fails_inside_finish_is_retried_cleanly_and_survives_reopen() {
    let _serial = serial();
    let tp = ChangelogPartition::new("app-kv-changelog", 3);
    let records = changelog(25_000, 12_000);
    let end = records.len() as i64;
    for point in [points::INGESTED_RANGE, points::RESTORE_FINAL_COMMIT] {
        let dir = common::tempdir();
        let hits = Arc::new(AtomicUsize::new(0));
        let retry_path = {
            let task = TaskStore::open(dir.path(), options()).unwrap();
            task.key_value_store("kv").unwrap();
            let mut restorer = task.restorer("kv", tp.clone(), end).unwrap();
            assert_eq!(restorer.path(), RestorePath::SortedRuns);
            apply(&mut restorer, &records);
            // Fails the first time the point is reached: for ingestion, after
            // one key range was written into the store.
            let counted = Arc::clone(&hits);
            failpoints::set(point, move || counted.fetch_add(1, Ordering::SeqCst) == 0);
            assert!(restorer.finish().is_err(), "{point}: finish should fail");
            failpoints::clear();
            assert!(hits.load(Ordering::SeqCst) >= 1, "{point} never reached");
            if point == points::INGESTED_RANGE {
                assert!(
                    !contents(&task, "kv").is_empty(),
                    "the failure should come after a range was ingested"
                );
            }
            assert_eq!(task.committed_offset(&tp), CommittedOffset::Unknown);

            // The retry, from the beginning as `Unknown` says.
            let mut retry = task.restorer("kv", tp.clone(), end).unwrap();
            let path = retry.path();
            apply(&mut retry, &records);
            retry.finish().unwrap();
            assert_eq!(task.committed_offset(&tp), CommittedOffset::Known(end));
            let got = contents(&task, "kv");
            assert!(
                got == model(&records),
                "{point}: {} keys after the retry",
                got.len()
            );
            path
        };
        let task = TaskStore::open(dir.path(), options()).unwrap();
        assert_eq!(
            task.committed_offset(&tp),
            CommittedOffset::Known(end),
            "{point}: offset after reopen"
        );
        let got = contents(&task, "kv");
        assert!(
            got == model(&records),
            "{point}: {} keys after reopen, the changelog has {}",
            got.len(),
            model(&records).len()
        );
        assert_eq!(
            retry_path,
            RestorePath::SortedRuns,
            "{point}: a retry over a failed bulk restore takes the bulk path again"
        );
    }
}

/// m10: once the commit's batch is durable, a failure to drop an expired
/// window segment must not be reported as a failed commit; the drop is
/// retried by a later commit.
#[test]
fn a_segment_drop_failing_after_a_commit_does_not_fail_the_commit_and_is_retried() {
    let _serial = serial();
    let dir = common::tempdir();
    let tp = ChangelogPartition::new("app-win-changelog", 0);
    let (retention, segment) = (Duration::from_millis(100), Duration::from_millis(50));
    let attempts = Arc::new(AtomicUsize::new(0));
    let failing = Arc::new(AtomicBool::new(true));
    {
        let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
        let win = task.window_store("win", retention, segment).unwrap();
        win.put(b"old", b"1", 0).unwrap();
        task.commit(&[(tp.clone(), 1)]).unwrap();

        let (counted, fail) = (Arc::clone(&attempts), Arc::clone(&failing));
        failpoints::set(points::DROP_SEGMENT, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            fail.load(Ordering::SeqCst)
        });
        // Stream time 1,000 expires segment 0.
        win.put(b"new", b"2", 1_000).unwrap();
        let committed = task.commit(&[(tp.clone(), 2)]);
        assert!(
            committed.is_ok(),
            "the batch was committed, yet commit said {committed:?}"
        );
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
        assert_eq!(task.committed_offset(&tp), CommittedOffset::Known(2));
        assert!(!task.has_staged_writes());
        let live: Vec<_> = win
            .fetch_all(i64::MIN, i64::MAX)
            .unwrap()
            .map(|e| e.unwrap().key)
            .collect();
        assert_eq!(live, vec![b"new".to_vec()]);

        // The next commit drops the segment that could not be dropped.
        failing.store(false, Ordering::SeqCst);
        task.commit(&[(tp.clone(), 3)]).unwrap();
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            2,
            "the drop was not retried"
        );
    }
    // Nothing is left to drop at the next open.
    let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(attempts.load(Ordering::SeqCst), 2, "the segment survived");
    assert_eq!(task.committed_offset(&tp), CommittedOffset::Known(3));
}

/// m9: an acquire that opened the lock file just before a cleanup removed the
/// directory must not end up holding a lock on the deleted file, which would
/// let a second owner lock the recreated directory at the same time.
#[test]
fn an_acquire_racing_a_cleanup_locks_the_live_directory() {
    let _serial = serial();
    let root = common::tempdir();
    let state = StateDirectory::new(root.path(), "app").unwrap();
    let task_dir = state.task_path("0_1").unwrap();
    drop(TaskStore::open(&task_dir, StoreOptions::default()).unwrap());

    let fired = Arc::new(AtomicBool::new(false));
    let removed = Arc::new(Mutex::new(Vec::new()));
    let (once, cleaner, out) = (Arc::clone(&fired), state.clone(), Arc::clone(&removed));
    // Between the acquire's open and its lock, a cleanup removes the directory.
    failpoints::set(points::LOCK_OPENED, move || {
        if !once.swap(true, Ordering::SeqCst) {
            let ids = cleaner
                .clean_unowned(&BTreeSet::new(), Duration::ZERO, SystemTime::now())
                .unwrap();
            out.lock().unwrap().extend(ids);
        }
        false
    });
    let lock = TaskDirLock::acquire(&task_dir).unwrap();
    failpoints::clear();
    assert_eq!(*removed.lock().unwrap(), vec!["0_1".to_owned()]);
    assert!(lock.path().exists(), "the lock is held on a deleted file");
    match TaskDirLock::acquire(&task_dir) {
        Err(StoreError::Locked { .. }) => {}
        other => panic!("a second owner got the directory too: {other:?}"),
    }
}

/// m9: once a cleanup decided to remove a directory, the name is free at once:
/// a new owner gets a fresh store while the old files are still being
/// deleted, and the deletion never touches what the new owner wrote.
#[test]
fn a_directory_being_removed_can_be_opened_afresh_and_the_cleanup_spares_it() {
    let _serial = serial();
    let root = common::tempdir();
    let state = StateDirectory::new(root.path(), "app").unwrap();
    let task_dir = state.task_path("0_1").unwrap();
    let tp = ChangelogPartition::new("app-kv-changelog", 1);
    {
        let task = TaskStore::open(&task_dir, StoreOptions::default()).unwrap();
        task.key_value_store("kv")
            .unwrap()
            .put(b"old", b"1")
            .unwrap();
        task.commit(&[(tp.clone(), 7)]).unwrap();
    }
    let opened = Arc::new(Mutex::new(None));
    let (out, dir) = (Arc::clone(&opened), task_dir.clone());
    let tp_new = tp.clone();
    failpoints::set(points::CLEANUP_BEFORE_DELETE, move || {
        let result = TaskStore::open(&dir, StoreOptions::default()).map(|task| {
            let fresh = task.committed_offset(&tp_new);
            task.key_value_store("kv")
                .unwrap()
                .put(b"new", b"2")
                .unwrap();
            task.commit(&[(tp_new.clone(), 1)]).unwrap();
            fresh
        });
        *out.lock().unwrap() = Some(result.map_err(|e| e.to_string()));
        false
    });
    let removed = state
        .clean_unowned(&BTreeSet::new(), Duration::ZERO, SystemTime::now())
        .unwrap();
    failpoints::clear();
    assert_eq!(removed, vec!["0_1".to_owned()]);
    let opened = opened.lock().unwrap().take().expect("the hook never ran");
    assert_eq!(opened, Ok(CommittedOffset::Unknown), "no fresh store");
    let task = TaskStore::open(&task_dir, StoreOptions::default()).unwrap();
    assert_eq!(task.committed_offset(&tp), CommittedOffset::Known(1));
    assert_eq!(
        contents(&task, "kv"),
        BTreeMap::from([(b"new".to_vec(), b"2".to_vec())])
    );
    drop(task);
    // Only the live task directory is left: no tombstone.
    let names: Vec<_> = std::fs::read_dir(state.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["0_1".to_owned()]);
}
