//! How long a task's store takes to open after a run of commits, when the
//! previous owner dropped it (as after a crash) and when it closed it with
//! [`TaskStore::close`] (a planned shutdown, as in a rolling deploy).
//!
//! `cargo run --release -p weir-benches --bin store_reopen -- [COMMITS] [DIR]`
//! (defaults: 20,000 commits of 10 records, 16-byte keys and 100-byte values,
//! in a temporary directory). Both cases write the same commits to a fresh
//! task directory; the figure is the open time, so a restart's cost can be
//! compared with a clean close's in the same run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weir_store::{ChangelogPartition, StoreOptions, TaskStore};

const PER_COMMIT: usize = 10;

/// Writes `commits` commits to a fresh store in `dir`; closes it cleanly if
/// `close`, else just drops it. Returns the time the next open takes.
fn reopen_after(
    dir: &Path,
    commits: usize,
    close: bool,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let tp = ChangelogPartition::new("bench-changelog", 0);
    {
        let task = TaskStore::open(dir, StoreOptions::default())?;
        let kv = task.key_value_store("kv")?;
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut offset = 0i64;
        for _ in 0..commits {
            for _ in 0..PER_COMMIT {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = (u128::from(x) << 64 | u128::from(x.rotate_left(17))).to_be_bytes();
                kv.put(&key, &[x as u8; 100])?;
                offset += 1;
            }
            task.commit(&[(tp.clone(), offset)])?;
        }
        if close {
            task.close()?;
        }
    }
    let started = Instant::now();
    let task = TaskStore::open(dir, StoreOptions::default())?;
    let took = started.elapsed();
    // The reopened store must hold the last commit either way.
    if task.committed_offset(&tp)
        != weir_store::CommittedOffset::Known((commits * PER_COMMIT) as i64)
    {
        return Err("the reopened store lost commits".into());
    }
    Ok(took)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let commits: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20_000);
    let base = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base)?;
    println!("weir-store reopen bench: {commits} commits of {PER_COMMIT} records (16+100 bytes)");
    for (name, close) in [
        ("dropped (as after a crash)", false),
        ("closed with TaskStore::close", true),
    ] {
        let dir = tempfile::tempdir_in(&base)?;
        let took = reopen_after(dir.path(), commits, close)?;
        println!("open after the previous owner {name:<30} {took:>10.2?}");
    }
    Ok(())
}
