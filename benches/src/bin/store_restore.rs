//! Restore and commit throughput of weir-store, measured against baselines run
//! in the same process on the same disk: fjall batched inserts (1,000 a batch)
//! and a raw sequential file write with fsync. The raw write and the
//! empty-store restore run three times each, in turns; the medians count.
//!
//! ```text
//! cargo run --release -p weir-benches --bin store_restore -- [RECORDS] [DIR]
//! ```
//!
//! RECORDS defaults to 1,000,000 (16-byte random keys, 100-byte values, in
//! offset order, i.e. unsorted). DIR defaults to the system temp directory.
//! `WEIR_BENCH_EMPTY_ONLY=1` runs only the empty-store restore and prints the
//! process CPU time it took (for profiling it, e.g. under `perf record`).
//! With it, `WEIR_BENCH_MEMORY_MB=N` sets the restore's memory budget.
//! `WEIR_BENCH_ONE_TURN=1` runs one raw write and one empty-store restore,
//! prints their ratio and the process's peak memory, and nothing else: for
//! stores much larger than the page cache, where the other figures would
//! take too long (fjall's batched inserts of 100M records take minutes).
//! `WEIR_BENCH_PHASES=1` prints the time spent in `apply`, before `finish`
//! and in `finish`; `RUST_LOG=weir_store=debug` logs where the restore's
//! time went.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weir_store::fjall;
use weir_store::{
    ChangelogPartition, ChangelogRecord, Durability, RestorePath, StoreOptions, TaskStore,
};

const KEY_LEN: usize = 16;
const VALUE_LEN: usize = 100;
const RECORD_LEN: usize = KEY_LEN + VALUE_LEN;
const CHUNK: usize = 10_000;

/// Deterministic record generator: chunk `c` of stream `stream` is always the same.
fn chunk(stream: u64, c: usize, n: usize) -> Vec<u8> {
    let mut x =
        (stream << 40) ^ (c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x2545_F491_4F6C_DD1D;
    let mut out = vec![0u8; n * RECORD_LEN];
    for word in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        word.copy_from_slice(&bytes[..word.len()]);
    }
    out
}

fn chunks(stream: u64, records: usize) -> impl Iterator<Item = (usize, Vec<u8>)> {
    (0..records.div_ceil(CHUNK)).map(move |c| {
        let n = CHUNK.min(records - c * CHUNK);
        (c * CHUNK, chunk(stream, c, n))
    })
}

struct Figure {
    records: usize,
    elapsed: Duration,
}

impl Figure {
    fn per_sec(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64()
    }
    fn mb_per_sec(&self) -> f64 {
        (self.records * RECORD_LEN) as f64 / self.elapsed.as_secs_f64() / 1e6
    }
    fn print(&self, name: &str) {
        println!(
            "{name:<44} {:>10.0} records/s {:>8.1} MB/s  ({} records in {:.2?})",
            self.per_sec(),
            self.mb_per_sec(),
            self.records,
            self.elapsed
        );
    }
}

/// The same record bytes as the restore gets, generated the same way and
/// written in the same chunks (10,000 records, 1.16 MB), one `write` each,
/// then one fsync: a sequential write of exactly what the store restores.
fn raw_file_write(dir: &Path, records: usize) -> Result<Figure, Box<dyn std::error::Error>> {
    let path = dir.join("raw.bin");
    let start = Instant::now();
    let mut file = std::fs::File::create(&path)?;
    for (_, bytes) in chunks(1, records) {
        file.write_all(&bytes)?;
    }
    file.sync_all()?;
    let elapsed = start.elapsed();
    std::fs::remove_file(&path)?;
    Ok(Figure { records, elapsed })
}

fn fjall_batched(dir: &Path, records: usize) -> Result<Figure, Box<dyn std::error::Error>> {
    let db = fjall::Database::builder(dir.join("fjall-batched")).open()?;
    let ks = db.keyspace("kv", fjall::KeyspaceCreateOptions::default)?;
    let start = Instant::now();
    for (_, bytes) in chunks(1, records) {
        for batch_records in bytes.chunks(1_000 * RECORD_LEN) {
            let mut batch = db.batch();
            for r in batch_records.chunks(RECORD_LEN) {
                batch.insert(&ks, &r[..KEY_LEN], &r[KEY_LEN..]);
            }
            batch.commit()?;
        }
    }
    db.persist(fjall::PersistMode::SyncAll)?;
    let elapsed = start.elapsed();
    close_and_delete(ks, db, &dir.join("fjall-batched"))?;
    Ok(Figure { records, elapsed })
}

/// Closes a baseline's database and deletes it. Closing waits for fjall's
/// background work; deleting the files drops dirty pages that would
/// otherwise be written back while the next figures are measured.
fn close_and_delete(ks: fjall::Keyspace, db: fjall::Database, path: &Path) -> std::io::Result<()> {
    drop(ks);
    drop(db);
    std::fs::remove_dir_all(path)
}

/// fjall's own sorted ingestion of the same records, as a floor for the
/// empty-store restore: the records are sorted in memory first (not timed),
/// then written on two threads, each one `start_ingestion` over half of the
/// key range, with values as slices of one shared buffer (no copy each), and
/// the time until both ingestions are finished (and fsynced) counts.
fn fjall_sorted_ingestion(
    dir: &Path,
    records: usize,
) -> Result<Figure, Box<dyn std::error::Error>> {
    let mut all = Vec::with_capacity(records * RECORD_LEN);
    for (_, bytes) in chunks(1, records) {
        all.extend_from_slice(&bytes);
    }
    let mut order: Vec<usize> = (0..records).collect();
    order.sort_by(|a, b| {
        all[a * RECORD_LEN..a * RECORD_LEN + KEY_LEN]
            .cmp(&all[b * RECORD_LEN..b * RECORD_LEN + KEY_LEN])
    });
    // Later writes of a key win, as in a changelog.
    order.dedup_by(|later, earlier| {
        let same = all[*later * RECORD_LEN..*later * RECORD_LEN + KEY_LEN]
            == all[*earlier * RECORD_LEN..*earlier * RECORD_LEN + KEY_LEN];
        if same {
            *earlier = (*earlier).max(*later);
        }
        same
    });
    let mut keys = Vec::with_capacity(order.len() * KEY_LEN);
    let mut values = Vec::with_capacity(order.len() * VALUE_LEN);
    for i in &order {
        let r = &all[i * RECORD_LEN..(i + 1) * RECORD_LEN];
        keys.extend_from_slice(&r[..KEY_LEN]);
        values.extend_from_slice(&r[KEY_LEN..]);
    }
    drop(all);
    let values = byteview::ByteView::from(values);
    let db = fjall::Database::builder(dir.join("fjall-ingestion")).open()?;
    let ks = db.keyspace("kv", fjall::KeyspaceCreateOptions::default)?;
    let n = order.len();
    let start = Instant::now();
    let ingest = |range: std::ops::Range<usize>| -> Result<(), fjall::Error> {
        let mut ingestion = ks.start_ingestion()?;
        for i in range {
            ingestion.write(
                &keys[i * KEY_LEN..(i + 1) * KEY_LEN],
                fjall::Slice::from(values.slice(i * VALUE_LEN..(i + 1) * VALUE_LEN)),
            )?;
        }
        ingestion.finish()
    };
    std::thread::scope(|scope| -> Result<(), fjall::Error> {
        let second = scope.spawn(|| ingest(n / 2..n));
        let first = ingest(0..n / 2);
        let second = second.join().unwrap_or_else(|_| {
            Err(fjall::Error::Io(std::io::Error::other(
                "ingestion thread panicked",
            )))
        });
        first.and(second)
    })?;
    let elapsed = start.elapsed();
    close_and_delete(ks, db, &dir.join("fjall-ingestion"))?;
    Ok(Figure { records, elapsed })
}

fn restore(
    task: &TaskStore,
    stream: u64,
    first_offset: i64,
    records: usize,
    expect: RestorePath,
) -> Result<Figure, Box<dyn std::error::Error>> {
    let tp = ChangelogPartition::new("bench-changelog", 0);
    let start = Instant::now();
    let mut restorer = task.restorer("kv", tp, first_offset + records as i64)?;
    if restorer.path() != expect {
        return Err(format!("expected {expect:?}, restorer chose {:?}", restorer.path()).into());
    }
    let mut in_apply = Duration::ZERO;
    for (base, bytes) in chunks(stream, records) {
        let batch: Vec<ChangelogRecord<'_>> = bytes
            .chunks(RECORD_LEN)
            .enumerate()
            .map(|(i, r)| ChangelogRecord {
                offset: first_offset + (base + i) as i64,
                key: &r[..KEY_LEN],
                value: Some(&r[KEY_LEN..]),
            })
            .collect();
        let t = Instant::now();
        restorer.apply(&batch)?;
        in_apply += t.elapsed();
    }
    let before_finish = Instant::now();
    restorer.finish()?;
    if std::env::var_os("WEIR_BENCH_PHASES").is_some() {
        println!(
            "  phases: {}ms in apply, {}ms before finish, {}ms in finish",
            in_apply.as_millis(),
            (before_finish - start).as_millis(),
            before_finish.elapsed().as_millis()
        );
    }
    Ok(Figure {
        records,
        elapsed: start.elapsed(),
    })
}

fn put_and_commit(
    dir: &Path,
    records: usize,
    per_commit: usize,
) -> Result<Figure, Box<dyn std::error::Error>> {
    let task = TaskStore::open(
        dir,
        StoreOptions::default().with_durability(Durability::ProcessCrash),
    )?;
    let kv = task.key_value_store("kv")?;
    let tp = ChangelogPartition::new("bench-changelog", 0);
    let start = Instant::now();
    let mut offset = 0i64;
    for (_, bytes) in chunks(3, records) {
        for commit in bytes.chunks(per_commit * RECORD_LEN) {
            for r in commit.chunks(RECORD_LEN) {
                kv.put(&r[..KEY_LEN], &r[KEY_LEN..])?;
                offset += 1;
            }
            task.commit(&[(tp.clone(), offset)])?;
        }
    }
    Ok(Figure {
        records,
        elapsed: start.elapsed(),
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let mut args = std::env::args().skip(1);
    let records: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let base: PathBuf = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(&base)?;
    println!(
        "weir-store restore bench: {records} records of {KEY_LEN}+{VALUE_LEN} bytes ({:.0} MB) in {}",
        (records * RECORD_LEN) as f64 / 1e6,
        dir.path().display()
    );

    if std::env::var_os("WEIR_BENCH_EMPTY_ONLY").is_some() {
        // For profiling (e.g. under `perf record`): only the empty-store restore.
        let mut options = StoreOptions::default();
        if let Some(mb) = std::env::var("WEIR_BENCH_MEMORY_MB")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
        {
            options = options.with_restore_memory_bytes(mb << 20);
        }
        let task = TaskStore::open(dir.path().join("restore"), options)?;
        task.key_value_store("kv")?;
        let cpu = cpu_seconds();
        let empty = restore(&task, 1, 0, records, RestorePath::SortedRuns)?;
        empty.print("restore into empty store (sorted runs)");
        if let (Some(before), Some(after)) = (cpu, cpu_seconds()) {
            println!(
                "process CPU time during the restore: {:.2}s",
                after - before
            );
        }
        print_peak_memory();
        return Ok(());
    }
    if std::env::var_os("WEIR_BENCH_ONE_TURN").is_some() {
        raw_then_restore(dir.path(), records, "", None)?;
        print_peak_memory();
        return Ok(());
    }
    // The raw write and the empty-store restore are both noisy (page cache,
    // and other tenants of the machine, which slow the memory-bound restore
    // far more than the raw write). They run three times each, in turns (a
    // raw write, then a restore into a new store), so that both see the same
    // stretch of time; the medians count, and each turn's ratio is printed.
    let mut raws = Vec::new();
    let mut empties = Vec::new();
    let mut task = None;
    for i in 1..=3 {
        let (raw, empty, store) =
            raw_then_restore(dir.path(), records, &format!(", run {i}"), task.take())?;
        raws.push(raw);
        empties.push(empty);
        task = Some(store);
    }
    raws.sort_by_key(|f| f.elapsed);
    let raw = raws.swap_remove(1);
    raw.print("baseline: raw file write + fsync (median)");
    empties.sort_by_key(|f| f.elapsed);
    let empty = empties.swap_remove(1);
    empty.print("restore into empty store (median)");
    settle();
    let batched = fjall_batched(dir.path(), records)?;
    batched.print("baseline: fjall batched inserts (1,000/batch)");
    settle();
    let ingestion = fjall_sorted_ingestion(dir.path(), records)?;
    ingestion.print("floor: fjall sorted ingestion, presorted");
    let task = task.ok_or("no store")?;
    // Catch-up: the same number of new records into the now non-empty store.
    settle();
    let catch_up = restore(&task, 2, records as i64, records, RestorePath::Batches)?;
    catch_up.print("catch-up restore into non-empty store");
    drop(task);

    settle();
    let commits_100 = put_and_commit(&dir.path().join("commit-100"), records.min(200_000), 100)?;
    commits_100.print("put + commit, 100 records/commit");
    settle();
    let commits_1000 =
        put_and_commit(&dir.path().join("commit-1000"), records.min(500_000), 1_000)?;
    commits_1000.print("put + commit, 1,000 records/commit");

    println!();
    let met = |ratio: f64, target: f64| if ratio >= target { "met" } else { "NOT met" };
    let ratios = [
        (
            "empty restore / fjall batched inserts",
            empty.per_sec() / batched.per_sec(),
            3.0,
        ),
        (
            "catch-up restore / fjall batched inserts",
            catch_up.per_sec() / batched.per_sec(),
            1.2,
        ),
        (
            // How close the restore comes to fjall's own ingestion of
            // records already sorted in memory, which no restore through it
            // can beat (issue 18 item 3).
            "empty restore / fjall presorted ingestion",
            empty.per_sec() / ingestion.per_sec(),
            0.5,
        ),
    ];
    // Printed, not a target (issue 18 item 3): against a raw fsync'd file
    // write the ratio swings with the host (0.22x to 0.54x in 43 runs).
    println!(
        "empty restore MB/s / raw file MB/s: {:.3}x; fjall presorted ingestion / raw file MB/s: {:.3}x (printed, not targets)",
        empty.mb_per_sec() / raw.mb_per_sec(),
        ingestion.mb_per_sec() / raw.mb_per_sec()
    );
    for (name, ratio, target) in ratios {
        // Three decimals, so that a ratio just under a target never prints
        // as if it reached it.
        println!(
            "ratio {name:<40} {ratio:.3}x (target >= {target}: {})",
            met(ratio, target)
        );
    }
    Ok(())
}

/// One turn: a raw write, then a restore into a new, empty store (`previous`
/// is closed and deleted first); prints both, labelled with `turn`, and
/// their ratio. Returns them and the restored store.
fn raw_then_restore(
    dir: &Path,
    records: usize,
    turn: &str,
    previous: Option<TaskStore>,
) -> Result<(Figure, Figure, TaskStore), Box<dyn std::error::Error>> {
    settle();
    let raw = raw_file_write(dir, records)?;
    raw.print(&format!("baseline: raw file write + fsync{turn}"));
    drop(previous);
    let _ = std::fs::remove_dir_all(dir.join("restore"));
    let store = TaskStore::open(dir.join("restore"), StoreOptions::default())?;
    store.key_value_store("kv")?;
    settle();
    let empty = restore(&store, 1, 0, records, RestorePath::SortedRuns)?;
    empty.print(&format!("restore into empty store{turn}"));
    println!(
        "  empty restore MB/s / raw file MB/s{turn}: {:.3}x",
        empty.mb_per_sec() / raw.mb_per_sec()
    );
    Ok((raw, empty, store))
}

/// Writes back all dirty pages (`sync`) before a figure is measured, so no
/// figure pays for the writeback of files an earlier one left behind. Not
/// timed; skipped where there is no `sync` command.
fn settle() {
    let _ = std::process::Command::new("sync").status();
}

/// Prints the process's peak resident memory so far (Linux only): the
/// restore's, since nothing else in the process holds much.
fn print_peak_memory() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(line) = status.lines().find(|l| l.starts_with("VmHWM:")) {
        let kb = line
            .trim_start_matches("VmHWM:")
            .trim()
            .trim_end_matches("kB")
            .trim();
        println!("peak resident memory of the process: {kb} kB");
    }
}

/// User + system CPU seconds of this process so far (Linux only).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start at field 3.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    // utime and stime are fields 14 and 15, in clock ticks of 1/100 s on Linux.
    Some((ticks(11)? + ticks(12)?) / 100.0)
}
