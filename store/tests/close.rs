//! `TaskStore::close`, the planned shutdown: the next open finds exactly the
//! last commit, with the memtables already written to tables, so fjall has
//! nothing to replay.

// Test helpers outside #[test] functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use weir_store::{ChangelogPartition, CommittedOffset, StoreOptions, TaskStore};

/// Files under the database's `tables` folders. fjall keeps each
/// keyspace's tables in a `tables` folder; commits that were never flushed
/// exist only in its journal.
fn table_files(dir: &Path) -> usize {
    fn walk(dir: &Path, in_tables: bool) -> usize {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| {
                        let path = e.path();
                        if path.is_dir() {
                            walk(&path, in_tables || e.file_name() == "tables")
                        } else {
                            usize::from(in_tables)
                        }
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    walk(dir, false)
}

fn write_commits(task: &TaskStore, changelog: &ChangelogPartition, commits: i64) {
    let kv = task.key_value_store("kv").unwrap();
    for i in 0..commits {
        kv.put(format!("key-{i:05}").as_bytes(), &i.to_be_bytes())
            .unwrap();
        task.commit(&[(changelog.clone(), i + 1)]).unwrap();
    }
}

#[test]
fn a_closed_store_reopens_with_its_last_commit_already_in_tables() {
    let changelog = ChangelogPartition::new("app-kv-changelog", 0);
    let dropped = common::tempdir();
    let closed = common::tempdir();
    for (dir, close) in [(&dropped, false), (&closed, true)] {
        let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
        write_commits(&task, &changelog, 500);
        let kv = task.key_value_store("kv").unwrap();
        kv.put(b"staged", b"never committed").unwrap();
        if close {
            task.close().unwrap();
        } else {
            drop(task);
        }
    }
    // Only the close wrote the commits to tables; the drop left them in the
    // journal, for the next open to replay.
    assert!(
        table_files(closed.path()) > table_files(dropped.path()),
        "closed {}, dropped {}",
        table_files(closed.path()),
        table_files(dropped.path())
    );

    for dir in [&dropped, &closed] {
        let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
        assert_eq!(
            task.committed_offset(&changelog),
            CommittedOffset::Known(500)
        );
        let kv = task.key_value_store("kv").unwrap();
        assert_eq!(kv.get(b"staged").unwrap(), None);
        assert_eq!(
            kv.get(b"key-00499").unwrap(),
            Some(499i64.to_be_bytes().to_vec())
        );
        assert!(kv.approximate_count() >= 500);
    }
}

#[test]
fn a_store_closed_while_another_handle_lives_stays_usable_through_it() {
    let changelog = ChangelogPartition::new("app-kv-changelog", 0);
    let dir = common::tempdir();
    let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
    let other = task.clone();
    write_commits(&task, &changelog, 10);
    task.close().unwrap();
    write_commits(&other, &changelog, 20);
    assert_eq!(
        other.committed_offset(&changelog),
        CommittedOffset::Known(20)
    );
    drop(other);
    let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(
        task.committed_offset(&changelog),
        CommittedOffset::Known(20)
    );
}
