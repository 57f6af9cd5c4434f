//! In-memory stores: the same staging, commit and abort semantics as stores
//! on disk, nothing on disk, and a full restore after a reopen.

use std::ops::Bound;
use std::time::Duration;

use weir_store::{ChangelogPartition, ChangelogRecord, CommittedOffset, StoreOptions, TaskStore};

fn entries(it: weir_store::MergedEntries) -> Vec<(Vec<u8>, Vec<u8>)> {
    it.map(Result::unwrap).collect()
}

#[test]
fn kv_put_get_range_delete_staged_commit_and_abort() {
    let dir = tempfile::tempdir().unwrap();
    let cl = ChangelogPartition::new("app-mem-changelog", 0);
    let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
    let kv = task.in_memory_key_value_store("mem", Some(&cl)).unwrap();
    kv.put(b"a", b"1").unwrap();
    kv.put(b"b", b"2").unwrap();
    kv.put(b"c", b"3").unwrap();
    // Staged writes are visible to the task before the commit.
    assert_eq!(kv.get(b"a").unwrap(), Some(b"1".to_vec()));
    task.commit(&[(cl.clone(), 3)]).unwrap();
    assert!(!task.has_staged_writes());
    assert_eq!(task.committed_offset(&cl), CommittedOffset::Known(3));

    // A staged delete and put overlay the committed contents in reads...
    kv.delete(b"b").unwrap();
    kv.put(b"d", b"4").unwrap();
    assert_eq!(kv.get(b"b").unwrap(), None);
    assert_eq!(
        entries(
            kv.range(Bound::Included(b"a"), Bound::Excluded(b"d"))
                .unwrap()
        ),
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"c".to_vec(), b"3".to_vec())
        ]
    );
    // ...and an abort discards them.
    task.abort();
    assert_eq!(kv.get(b"b").unwrap(), Some(b"2".to_vec()));
    assert_eq!(kv.get(b"d").unwrap(), None);
    assert_eq!(entries(kv.iter().unwrap()).len(), 3);

    kv.delete(b"a").unwrap();
    task.commit(&[(cl.clone(), 4)]).unwrap();
    assert_eq!(
        entries(kv.iter().unwrap()),
        vec![
            (b"b".to_vec(), b"2".to_vec()),
            (b"c".to_vec(), b"3".to_vec())
        ]
    );
    assert_eq!(kv.approximate_count(), 2);
    assert!(task.is_volatile(&cl));
    drop(kv);
    drop(task);

    // Reopened: nothing of it survived, and its offset is unknown.
    let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(task.committed_offset(&cl), CommittedOffset::Unknown);
    assert!(task.stores().is_empty());
    let kv = task.in_memory_key_value_store("mem", Some(&cl)).unwrap();
    assert_eq!(entries(kv.iter().unwrap()), Vec::new());
}

#[test]
fn window_put_fetch_delete_staged_commit_and_abort() {
    let dir = tempfile::tempdir().unwrap();
    let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
    let win = task
        .in_memory_window_store(
            "wmem",
            Duration::from_millis(100),
            Duration::from_millis(10),
            None,
        )
        .unwrap();
    assert!(win.put(b"k", b"a", 0).unwrap());
    assert!(win.put(b"k", b"b", 15).unwrap());
    assert!(win.put(b"j", b"c", 15).unwrap());
    let fetched: Vec<_> = win
        .fetch(b"k", 0, 20)
        .unwrap()
        .into_iter()
        .map(|e| (e.window_start, e.value))
        .collect();
    assert_eq!(fetched, vec![(0, b"a".to_vec()), (15, b"b".to_vec())]);
    task.commit(&[]).unwrap();

    win.delete(b"k", 0).unwrap();
    assert!(win.put(b"k", b"x", 30).unwrap());
    assert_eq!(win.fetch(b"k", 0, 40).unwrap().len(), 2);
    task.abort();
    assert_eq!(win.stream_time().unwrap(), Some(15));
    let all: Vec<_> = win
        .fetch_all(0, 40)
        .unwrap()
        .map(|e| e.map(|e| (e.window_start, e.key)).unwrap())
        .collect();
    assert_eq!(
        all,
        vec![(0, b"k".to_vec()), (15, b"j".to_vec()), (15, b"k".to_vec())]
    );

    // Past retention: window 0 expires once stream time reaches 100.
    assert!(win.put(b"k", b"late", 100).unwrap());
    task.commit(&[]).unwrap();
    assert_eq!(win.fetch(b"k", 0, 0).unwrap(), Vec::new());
    assert!(!win.put(b"k", b"too late", 0).unwrap());
}

#[test]
fn restore_applies_records_to_memory_and_keeps_the_offset_there() {
    let dir = tempfile::tempdir().unwrap();
    let cl = ChangelogPartition::new("app-mem-changelog", 2);
    let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
    let kv = task.in_memory_key_value_store("mem", Some(&cl)).unwrap();
    assert_eq!(task.committed_offset(&cl), CommittedOffset::Unknown);
    let mut restorer = task.restorer("mem", cl.clone(), 3).unwrap();
    restorer
        .apply(&[
            ChangelogRecord {
                offset: 0,
                key: b"a",
                value: Some(b"1"),
            },
            ChangelogRecord {
                offset: 1,
                key: b"b",
                value: Some(b"2"),
            },
            ChangelogRecord {
                offset: 2,
                key: b"a",
                value: None,
            },
        ])
        .unwrap();
    let progress = restorer.finish().unwrap();
    assert_eq!(progress.records, 3);
    assert_eq!(task.committed_offset(&cl), CommittedOffset::Known(3));
    assert_eq!(
        entries(kv.iter().unwrap()),
        vec![(b"b".to_vec(), b"2".to_vec())]
    );
    // Nothing was written to disk for it: a reopen knows no offset.
    drop((kv, task));
    let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(task.committed_offset(&cl), CommittedOffset::Unknown);
}

#[test]
fn a_store_on_disk_cannot_become_in_memory_silently() {
    let dir = tempfile::tempdir().unwrap();
    let cl = ChangelogPartition::new("app-s-changelog", 0);
    {
        let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
        task.key_value_store("s").unwrap().put(b"a", b"1").unwrap();
        task.commit(&[(cl.clone(), 1)]).unwrap();
    }
    let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
    let err = task.in_memory_key_value_store("s", Some(&cl)).unwrap_err();
    assert!(
        matches!(err, weir_store::StoreError::InvalidArgument(_)),
        "{err}"
    );
}
