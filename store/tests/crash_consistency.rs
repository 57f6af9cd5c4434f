//! A child process (this test binary, re-executed) writes, aborts and commits in
//! a loop and is killed with SIGKILL at random points. After every kill the
//! store is reopened and must equal the last commit exactly: contents of both
//! store kinds, and the changelog offset naming that commit. Keys written only
//! by aborted or uncommitted work must never appear.
//!
//! `WEIR_CRASH_TRIALS` raises the number of kills (default 200). Every
//! `TRIALS_PER_STORE` kills the test starts over with a new store: each reopen
//! replays fjall's journal, which grows with every commit until memtables
//! flush, so one store for all trials made each trial slower than the last
//! (37 to 154 s for 200 trials on this VM); the kills and checks are the same.

// Test helpers outside #[test] functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

use weir_store::{ChangelogPartition, CommittedOffset, Durability, StoreOptions, TaskStore};

const CHILD_ENV: &str = "WEIR_STORE_CRASH_CHILD_DIR";
const SEED_ENV: &str = "WEIR_STORE_CRASH_SEED";
// Time advances by one per commit; segments of 50 keep keyspace creation (a
// handful of fsyncs each) rare enough for a quick test, while still dropping
// expired segments many times per run.
const RETENTION_MS: i64 = 150;
const TRIALS_PER_STORE: u64 = 25;
const SEGMENT_MS: i64 = 50;

fn changelog() -> ChangelogPartition {
    ChangelogPartition::new("crash-app-changelog", 0)
}

/// splitmix64: small, deterministic, and identical in parent and child.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Self {
        Self(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Window(Vec<u8>, Vec<u8>, i64),
}

/// The writes of commit number `i`; a function of (seed, i) only, so the
/// parent can recompute any commit the child made.
fn ops(seed: u64, i: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed, i);
    // Mostly small commits, sometimes large ones so kills land inside a big batch.
    let n = if rng.below(10) == 0 {
        100
    } else {
        1 + rng.below(8)
    };
    (0..n)
        .map(|j| {
            let key = format!("k{:03}", rng.below(200)).into_bytes();
            match rng.below(5) {
                0 => Op::Delete(key),
                1 | 2 => Op::Put(key, format!("v{i}-{j}").into_bytes()),
                _ => {
                    let ws = i as i64 - rng.below(200) as i64;
                    Op::Window(
                        format!("w{}", rng.below(6)).into_bytes(),
                        format!("{i}-{j}").into_bytes(),
                        ws,
                    )
                }
            }
        })
        .collect()
}

fn open(dir: &Path) -> TaskStore {
    // Small memtables flush often, so kills also land during flushes and the
    // journal replayed at each reopen stays short.
    let options = StoreOptions::default()
        .with_durability(Durability::ProcessCrash)
        .with_memtable_bytes(128 << 10);
    TaskStore::open(dir, options).unwrap()
}

fn retention() -> (Duration, Duration) {
    (
        Duration::from_millis(RETENTION_MS as u64),
        Duration::from_millis(SEGMENT_MS as u64),
    )
}

/// The child's loop; never returns (the parent kills it).
fn child(dir: &Path, seed: u64) -> ! {
    let task = open(dir);
    let kv = task.key_value_store("kv").unwrap();
    let (r, s) = retention();
    let win = task.window_store("win", r, s).unwrap();
    let start = match task.committed_offset(&changelog()) {
        CommittedOffset::Known(n) => n as u64,
        CommittedOffset::Unknown => 0,
    };
    let mut out = std::io::stdout();
    let mut go = std::io::stdin().lines();
    writeln!(out, "READY {start}").unwrap();
    out.flush().unwrap();
    for i in start + 1.. {
        // One commit per "go" from the parent keeps the child from racing far
        // ahead of a parent slowed down by a loaded machine.
        if go.next().is_none() {
            std::process::exit(0);
        }
        // Work of an aborted transaction: staged, read back, then discarded.
        kv.put(format!("poison-{i}").as_bytes(), b"aborted")
            .unwrap();
        win.put(b"poison", b"aborted", i as i64).unwrap();
        assert!(kv.get(format!("poison-{i}").as_bytes()).unwrap().is_some());
        task.abort();
        for op in ops(seed, i) {
            match op {
                Op::Put(k, v) => kv.put(&k, &v).unwrap(),
                Op::Delete(k) => kv.delete(&k).unwrap(),
                Op::Window(k, v, ws) => {
                    win.put(&k, &v, ws).unwrap();
                }
            }
        }
        task.commit(&[(changelog(), i as i64)]).unwrap();
        writeln!(out, "ACK {i}").unwrap();
        out.flush().unwrap();
    }
    unreachable!()
}

/// The in-memory model of both stores.
#[derive(Default)]
struct Model {
    commits: u64,
    kv: BTreeMap<Vec<u8>, Vec<u8>>,
    window: BTreeMap<(Vec<u8>, i64), Vec<u8>>,
    stream_time: Option<i64>,
}

impl Model {
    fn advance_to(&mut self, seed: u64, n: u64) {
        while self.commits < n {
            self.commits += 1;
            for op in ops(seed, self.commits) {
                match op {
                    Op::Put(k, v) => {
                        self.kv.insert(k, v);
                    }
                    Op::Delete(k) => {
                        self.kv.remove(&k);
                    }
                    Op::Window(k, v, ws) => {
                        if self.stream_time.is_some_and(|t| ws + RETENTION_MS <= t) {
                            continue; // expired on arrival
                        }
                        self.stream_time = Some(self.stream_time.map_or(ws, |t| t.max(ws)));
                        self.window.insert((k, ws), v);
                    }
                }
            }
        }
    }

    fn visible_windows(&self) -> Vec<(i64, Vec<u8>, Vec<u8>)> {
        let mut out: Vec<_> = self
            .window
            .iter()
            .filter(|((_, ws), _)| self.stream_time.is_none_or(|t| ws + RETENTION_MS > t))
            .map(|((k, ws), v)| (*ws, k.clone(), v.clone()))
            .collect();
        out.sort();
        out
    }
}

fn verify(task: &TaskStore, model: &Model) {
    let expected = match model.commits {
        0 => CommittedOffset::Unknown,
        n => CommittedOffset::Known(n as i64),
    };
    assert_eq!(task.committed_offset(&changelog()), expected);
    let kv = task.key_value_store("kv").unwrap();
    let got: BTreeMap<_, _> = kv.iter().unwrap().map(Result::unwrap).collect();
    assert!(
        !got.keys().any(|k| k.starts_with(b"poison")),
        "aborted write visible"
    );
    assert_eq!(
        got, model.kv,
        "key-value contents differ from commit {}",
        model.commits
    );
    let (r, s) = retention();
    let win = task.window_store("win", r, s).unwrap();
    let got: Vec<_> = win
        .fetch_all(i64::MIN, i64::MAX)
        .unwrap()
        .map(|e| e.map(|e| (e.window_start, e.key, e.value)).unwrap())
        .collect();
    assert_eq!(
        got,
        model.visible_windows(),
        "window contents differ from commit {}",
        model.commits
    );
}

#[test]
fn crash_child_entry_point() {
    // Only does something when re-executed by the parent test below.
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let seed = std::env::var(SEED_ENV).unwrap().parse().unwrap();
        child(Path::new(&dir), seed);
    }
}

#[test]
fn store_equals_last_commit_after_every_sigkill() {
    let trials: u64 = std::env::var("WEIR_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("crash test seed {seed}, {trials} trials");
    let mut rng = Rng::new(seed, u64::MAX);
    let mut mid_commit_kills = 0u64;
    let mut commits = 0u64;
    // SIGKILL tests process crashes, for which the page cache survives; tmpfs
    // keeps that and makes the many fsyncs of reopening free on this VM.
    let mut dir = common::tempdir();
    let mut model = Model::default();
    for trial in 0..trials {
        if trial > 0 && trial % TRIALS_PER_STORE == 0 {
            commits += model.commits;
            dir = common::tempdir();
            model = Model::default();
        }
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "crash_child_entry_point",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .env(SEED_ENV, seed.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut go = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let wanted_acks = rng.below(4);
        let mut acked = None;
        let mut acks = 0;
        for line in lines.by_ref() {
            let line = line.unwrap();
            // libtest prints "test name ... " without a newline before the child's output.
            if let Some((_, n)) = line.split_once("READY ") {
                assert_eq!(
                    n.parse::<u64>().unwrap(),
                    model.commits,
                    "child started from another commit"
                );
                acked = Some(model.commits);
            } else if let Some(n) = line.strip_prefix("ACK ") {
                acked = Some(n.parse().unwrap());
                acks += 1;
            } else {
                continue;
            }
            writeln!(go, "go").unwrap();
            if acks >= wanted_acks {
                break;
            }
        }
        // The child is now staging, aborting or committing one more time. The
        // random delay is not synchronisation: it moves the kill point across
        // that work (and sometimes past it).
        std::thread::sleep(Duration::from_micros(rng.below(1_500)));
        child.kill().unwrap();
        child.wait().unwrap();
        drop(go);
        // Everything the child printed before dying: its last acknowledged commit.
        for line in lines {
            if let Some(n) = line.unwrap().strip_prefix("ACK ") {
                acked = Some(n.parse().unwrap());
            }
        }
        let acked = acked.unwrap_or_else(|| panic!("trial {trial}: child never became ready"));

        // Find which commit survived: the acknowledged one, or the one in flight.
        let task = open(dir.path());
        let survived = match task.committed_offset(&changelog()) {
            CommittedOffset::Known(n) => n as u64,
            CommittedOffset::Unknown => 0,
        };
        assert!(
            survived == acked || survived == acked + 1,
            "trial {trial}: acknowledged commit {acked}, store holds {survived}"
        );
        if survived == acked + 1 {
            mid_commit_kills += 1;
        }
        model.advance_to(seed, survived);
        verify(&task, &model);
    }
    commits += model.commits;
    eprintln!(
        "{trials} kills, {commits} commits, {mid_commit_kills} kills after an unacknowledged commit landed"
    );
    assert!(commits > 0);
}
