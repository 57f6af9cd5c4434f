//! Property test: a key-value store driven by random puts, deletes, commits,
//! aborts and reopens behaves like a BTreeMap model of "committed" plus
//! "staged" state, for point reads, ranges, prefixes and full scans.

// Test helpers outside #[test] functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::ops::Bound;

mod common;

use proptest::prelude::*;
use weir_store::{ChangelogPartition, CommittedOffset, StoreOptions, TaskStore};

#[derive(Debug, Clone)]
enum Action {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Get(Vec<u8>),
    Range(Vec<u8>, Vec<u8>),
    Prefix(Vec<u8>),
    Commit,
    Abort,
    Reopen,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    // A small alphabet makes collisions, shared prefixes and 0xff edges common.
    prop::collection::vec(
        prop::sample::select(vec![0u8, 1, b'a', b'b', 0xfe, 0xff]),
        1..4,
    )
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (key(), prop::collection::vec(any::<u8>(), 0..8)).prop_map(|(k, v)| Action::Put(k, v)),
        2 => key().prop_map(Action::Delete),
        2 => key().prop_map(Action::Get),
        1 => (key(), key()).prop_map(|(a, b)| Action::Range(a, b)),
        1 => prop::collection::vec(prop::sample::select(vec![0u8, b'a', 0xff]), 0..2).prop_map(Action::Prefix),
        2 => Just(Action::Commit),
        1 => Just(Action::Abort),
        1 => Just(Action::Reopen),
    ]
}

fn collect(iter: weir_store::MergedEntries) -> Vec<(Vec<u8>, Vec<u8>)> {
    iter.map(Result::unwrap).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn key_value_store_matches_model(actions in prop::collection::vec(action(), 1..80)) {
        let dir = common::tempdir();
        let tp = ChangelogPartition::new("kv-changelog", 3);
        let mut task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
        let mut store = task.key_value_store("kv").unwrap();
        let mut committed: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut current = committed.clone();
        let mut commits = 0i64;
        for action in actions {
            match action {
                Action::Put(k, v) => {
                    store.put(&k, &v).unwrap();
                    current.insert(k, v);
                }
                Action::Delete(k) => {
                    store.delete(&k).unwrap();
                    current.remove(&k);
                }
                Action::Get(k) => prop_assert_eq!(store.get(&k).unwrap(), current.get(&k).cloned()),
                Action::Range(a, b) => {
                    let got = collect(store.range(Bound::Included(&a), Bound::Excluded(&b)).unwrap());
                    let want: Vec<_> = if a < b {
                        current.range(a..b).map(|(k, v)| (k.clone(), v.clone())).collect()
                    } else {
                        Vec::new()
                    };
                    prop_assert_eq!(got, want);
                }
                Action::Prefix(p) => {
                    let got = collect(store.prefix(&p).unwrap());
                    let want: Vec<_> = current
                        .iter()
                        .filter(|(k, _)| k.starts_with(&p))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    prop_assert_eq!(got, want);
                }
                Action::Commit => {
                    commits += 1;
                    task.commit(&[(tp.clone(), commits)]).unwrap();
                    committed = current.clone();
                }
                Action::Abort => {
                    task.abort();
                    current = committed.clone();
                }
                Action::Reopen => {
                    // Dropping without commit loses staged writes, as a crash would.
                    drop(store);
                    drop(task);
                    task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
                    store = task.key_value_store("kv").unwrap();
                    current = committed.clone();
                    let want = if commits == 0 { CommittedOffset::Unknown } else { CommittedOffset::Known(commits) };
                    prop_assert_eq!(task.committed_offset(&tp), want);
                }
            }
            let all = collect(store.iter().unwrap());
            let want: Vec<_> = current.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            prop_assert_eq!(all, want);
        }
        prop_assert!(store.approximate_count() >= current.len() as u64 / 2);
    }
}
