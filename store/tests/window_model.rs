//! Property test: window stores (puts, deletes, fetch, fetch_all, retention,
//! commit, abort, reopen) behave like a BTreeMap model with a stream time.

// Test helpers outside #[test] functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use weir_store::{ChangelogPartition, StoreOptions, TaskStore, WindowStore};

const RETENTION: i64 = 30;
const SEGMENT: i64 = 10;

#[derive(Debug, Clone)]
enum Action {
    Put(u8, i64, u8),
    Delete(u8, i64),
    Fetch(u8, i64, i64),
    FetchAll(i64, i64),
    Commit,
    Abort,
    Reopen,
}

fn action() -> impl Strategy<Value = Action> {
    // Times wander forward with some disorder, so windows expire and arrive late.
    prop_oneof![
        5 => (0u8..4, -20i64..120, any::<u8>()).prop_map(|(k, t, v)| Action::Put(k, t, v)),
        1 => (0u8..4, -20i64..120).prop_map(|(k, t)| Action::Delete(k, t)),
        2 => (0u8..4, -30i64..130, -30i64..130).prop_map(|(k, a, b)| Action::Fetch(k, a, b)),
        2 => (-30i64..130, -30i64..130).prop_map(|(a, b)| Action::FetchAll(a, b)),
        2 => Just(Action::Commit),
        1 => Just(Action::Abort),
        1 => Just(Action::Reopen),
    ]
}

#[derive(Clone, Default, Debug)]
struct Model {
    windows: BTreeMap<(Vec<u8>, i64), Vec<u8>>,
    stream_time: Option<i64>,
}

impl Model {
    fn live(&self, ws: i64) -> bool {
        self.stream_time.is_none_or(|t| ws + RETENTION > t)
    }

    fn put(&mut self, k: Vec<u8>, ws: i64, v: Vec<u8>) -> bool {
        if self.stream_time.is_some_and(|t| ws + RETENTION <= t) {
            return false;
        }
        self.stream_time = Some(self.stream_time.map_or(ws, |t| t.max(ws)));
        self.windows.insert((k, ws), v);
        true
    }

    fn fetch_all(&self, from: i64, to: i64) -> Vec<(i64, Vec<u8>, Vec<u8>)> {
        let mut out: Vec<_> = self
            .windows
            .iter()
            .filter(|((_, ws), _)| (from..=to).contains(ws) && self.live(*ws))
            .map(|((k, ws), v)| (*ws, k.clone(), v.clone()))
            .collect();
        out.sort();
        out
    }
}

fn open(dir: &std::path::Path) -> (TaskStore, WindowStore) {
    let task = TaskStore::open(dir, StoreOptions::default()).unwrap();
    let store = task
        .window_store(
            "win",
            Duration::from_millis(RETENTION as u64),
            Duration::from_millis(SEGMENT as u64),
        )
        .unwrap();
    (task, store)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn window_store_matches_model(actions in prop::collection::vec(action(), 1..80)) {
        let dir = common::tempdir();
        let tp = ChangelogPartition::new("win-changelog", 0);
        let (mut task, mut store) = open(dir.path());
        let mut committed = Model::default();
        let mut current = Model::default();
        for action in actions {
            match action {
                Action::Put(k, ws, v) => {
                    let accepted = store.put(&[k], &[v], ws).unwrap();
                    prop_assert_eq!(accepted, current.put(vec![k], ws, vec![v]));
                }
                Action::Delete(k, ws) => {
                    store.delete(&[k], ws).unwrap();
                    current.windows.remove(&(vec![k], ws));
                }
                Action::Fetch(k, from, to) => {
                    let got: Vec<_> = store
                        .fetch(&[k], from, to)
                        .unwrap()
                        .into_iter()
                        .map(|e| (e.window_start, e.key, e.value))
                        .collect();
                    let want: Vec<_> = current
                        .fetch_all(from, to)
                        .into_iter()
                        .filter(|(_, key, _)| key == &[k])
                        .collect();
                    prop_assert_eq!(got, want);
                }
                Action::FetchAll(from, to) => {
                    let got: Vec<_> = store
                        .fetch_all(from, to)
                        .unwrap()
                        .map(|e| e.map(|e| (e.window_start, e.key, e.value)).unwrap())
                        .collect();
                    prop_assert_eq!(got, current.fetch_all(from, to));
                }
                Action::Commit => {
                    task.commit(&[(tp.clone(), 1)]).unwrap();
                    committed = current.clone();
                }
                Action::Abort => {
                    task.abort();
                    current = committed.clone();
                }
                Action::Reopen => {
                    drop(store);
                    drop(task);
                    (task, store) = open(dir.path());
                    current = committed.clone();
                }
            }
            prop_assert_eq!(store.stream_time().unwrap(), current.stream_time);
        }
    }
}

#[test]
fn retention_drops_whole_segments_and_keeps_live_ones() {
    let dir = common::tempdir();
    let (task, store) = open(dir.path());
    for ws in 0..100 {
        store.put(b"k", b"v", ws).unwrap();
        task.commit(&[]).unwrap();
    }
    drop(store);
    drop(task);
    // Stream time 99, retention 30: windows 70..=99 live, so segments 7, 8, 9
    // remain and 0..=6 were dropped (their keyspaces are gone from fjall).
    let (task, store) = open(dir.path());
    let live: Vec<i64> = store
        .fetch(b"k", i64::MIN, i64::MAX)
        .unwrap()
        .iter()
        .map(|e| e.window_start)
        .collect();
    assert_eq!(live, (70..100).collect::<Vec<_>>());
    drop(store);
    drop(task);
    let keyspaces = std::fs::read_dir(dir.path().join("db").join("keyspaces"))
        .unwrap()
        .count();
    // meta keyspace of fjall, our metadata keyspace, and 3 live segments.
    assert!(
        keyspaces <= 5,
        "expired segments still on disk: {keyspaces} keyspace dirs"
    );
}
