//! A child process (this test binary, re-executed) writes, aborts and commits in
//! a loop and is killed with SIGKILL at random points. After every kill the
//! store is reopened and must equal the last commit exactly: contents of both
//! store kinds, and the changelog offset naming that commit. Keys written only
//! by aborted or uncommitted work must never appear.
//!
//! A second child runs a bulk restore (sometimes after a first attempt whose
//! `finish` failed) and is killed inside `finish`, between the key ranges it
//! ingests or before its final commit: the reopened store must be either the
//! whole restored state with its offset, or empty with its offset unknown.
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

use weir_store::failpoints::{self, points};
use weir_store::{
    ChangelogPartition, ChangelogRecord, CommittedOffset, Durability, RestorePath, StoreOptions,
    TaskStore,
};

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

const RESTORE_CHILD_ENV: &str = "WEIR_STORE_RESTORE_CRASH_CHILD_DIR";
const RESTORE_RETRY_ENV: &str = "WEIR_STORE_RESTORE_CRASH_RETRY";

type Record = (i64, Vec<u8>, Option<Vec<u8>>);

/// The restored changelog, the same in parent and child: 25,000 records,
/// about 1.7 MB (above the 1 MiB from which `finish` ingests several key
/// ranges), with repeated keys and tombstones.
fn restore_records() -> Vec<Record> {
    let mut rng = Rng::new(42, 0);
    (0..25_000)
        .map(|offset| {
            let key = format!("key-{:06}", rng.below(12_000)).into_bytes();
            let value = (rng.below(7) != 0).then(|| format!("value-{offset:060}").into_bytes());
            (offset, key, value)
        })
        .collect()
}

fn restore_model() -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for (_, k, v) in restore_records() {
        match v {
            Some(v) => m.insert(k, v),
            None => m.remove(&k),
        };
    }
    m
}

fn restore_options() -> StoreOptions {
    StoreOptions::default()
        .with_restore_memory_bytes(1 << 20)
        .with_restore_threads(2)
}

fn restore_changelog() -> ChangelogPartition {
    ChangelogPartition::new("crash-restore-changelog", 0)
}

fn restore_all(task: &TaskStore, records: &[Record]) -> weir_store::ChangelogRestorer {
    let mut restorer = task
        .restorer("kv", restore_changelog(), records.len() as i64)
        .unwrap();
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
    restorer
}

/// The restore child: optionally a first attempt whose `finish` fails after
/// one key range, then a restore whose `finish` says "STEP" after each key
/// range and before its final commit, and pauses there so that the parent's
/// kill lands inside `finish`. Never returns.
fn restore_child(dir: &Path, retry: bool) -> ! {
    let task = TaskStore::open(dir, restore_options()).unwrap();
    task.key_value_store("kv").unwrap();
    let records = restore_records();
    if retry {
        let restorer = restore_all(&task, &records);
        let first = std::sync::atomic::AtomicBool::new(true);
        failpoints::set(points::INGESTED_RANGE, move || {
            first.swap(false, std::sync::atomic::Ordering::SeqCst)
        });
        assert!(restorer.finish().is_err());
        failpoints::clear();
    }
    let step = || {
        let mut out = std::io::stdout().lock();
        writeln!(out, "STEP").unwrap();
        out.flush().unwrap();
        drop(out);
        // Not synchronisation: it keeps the child inside `finish` while the
        // parent's kill arrives.
        std::thread::sleep(Duration::from_millis(20));
        false
    };
    failpoints::set(points::INGESTED_RANGE, step);
    failpoints::set(points::RESTORE_FINAL_COMMIT, step);
    let restorer = restore_all(&task, &records);
    let mut out = std::io::stdout();
    writeln!(out, "FINISHING {:?}", restorer.path()).unwrap();
    out.flush().unwrap();
    restorer.finish().unwrap();
    writeln!(out, "FINISHED").unwrap();
    out.flush().unwrap();
    let _ = std::io::stdin().lines().next();
    std::process::exit(0);
}

#[test]
fn restore_crash_child_entry_point() {
    // Only does something when re-executed by the parent test below.
    if let Ok(dir) = std::env::var(RESTORE_CHILD_ENV) {
        let retry = std::env::var(RESTORE_RETRY_ENV).is_ok_and(|v| v == "1");
        restore_child(Path::new(&dir), retry);
    }
}

#[test]
fn a_bulk_restore_killed_inside_finish_leaves_all_or_nothing() {
    let trials: u64 = std::env::var("WEIR_RESTORE_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("restore crash test seed {seed}, {trials} trials");
    let mut rng = Rng::new(seed, 7);
    let model = restore_model();
    let end = restore_records().len() as i64;
    let (mut inside, mut after) = (0u64, 0u64);
    for trial in 0..trials {
        let dir = common::tempdir();
        let retry = trial % 2 == 1;
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "restore_crash_child_entry_point",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(RESTORE_CHILD_ENV, dir.path())
            .env(RESTORE_RETRY_ENV, if retry { "1" } else { "0" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Kill after this many steps inside `finish` (0: as soon as it
        // starts); a number past the last step kills after `finish` returned.
        let steps_wanted = rng.below(12);
        let (mut steps, mut finishing, mut finished) = (0, None, false);
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some((_, path)) = line.split_once("FINISHING ") {
                finishing = Some(path.to_owned());
            } else if line.ends_with("STEP") {
                steps += 1;
            } else if line.ends_with("FINISHED") {
                finished = true;
            } else {
                continue;
            }
            if finished || (finishing.is_some() && steps >= steps_wanted) {
                break;
            }
        }
        std::thread::sleep(Duration::from_micros(rng.below(3_000)));
        child.kill().unwrap();
        child.wait().unwrap();
        drop(stdin);
        for line in lines {
            finished |= line.unwrap().ends_with("FINISHED");
        }
        let path = finishing.unwrap_or_else(|| panic!("trial {trial}: child never finished"));

        let task = TaskStore::open(dir.path(), restore_options()).unwrap();
        let got: BTreeMap<_, _> = task
            .key_value_store("kv")
            .unwrap()
            .iter()
            .unwrap()
            .map(Result::unwrap)
            .collect();
        match task.committed_offset(&restore_changelog()) {
            CommittedOffset::Known(n) => {
                assert_eq!(n, end, "trial {trial} (retry {retry}): offset");
                assert!(
                    got == model,
                    "trial {trial} (retry {retry}): store claims {n} but holds {} of {} keys",
                    got.len(),
                    model.len()
                );
                after += 1;
            }
            CommittedOffset::Unknown => {
                assert!(
                    !finished,
                    "trial {trial} (retry {retry}): a finished restore lost its offset"
                );
                assert!(
                    got.is_empty(),
                    "trial {trial} (retry {retry}): {} keys visible without an offset",
                    got.len()
                );
                inside += 1;
            }
        }
        assert_eq!(
            path,
            format!("{:?}", RestorePath::SortedRuns),
            "trial {trial} (retry {retry}): the restore did not take the bulk path"
        );
    }
    eprintln!("{trials} kills: {inside} inside finish, {after} after its commit");
    assert!(inside > 0, "no kill landed inside finish");
}
