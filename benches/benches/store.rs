//! Criterion benches of weir-store: restore into an empty store (sorted runs)
//! and into a non-empty one (atomic batches), and put + commit at realistic
//! commit sizes. Record shape as in the restore bench binary: 16-byte random
//! keys, 100-byte values. The 1M/10M figures and the same-run baselines come
//! from `cargo run --release -p weir-benches --bin store_restore`.

// A bench has nobody to report an error to: failing loudly is the right thing.
#![allow(clippy::expect_used)]

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use weir_store::{ChangelogPartition, ChangelogRecord, Durability, StoreOptions, TaskStore};

const KEY_LEN: usize = 16;
const VALUE_LEN: usize = 100;
const RECORD_LEN: usize = KEY_LEN + VALUE_LEN;
const RESTORE_RECORDS: usize = 100_000;

fn records(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = vec![0u8; n * RECORD_LEN];
    for word in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        word.copy_from_slice(&x.to_le_bytes()[..word.len()]);
    }
    out
}

fn restore(task: &TaskStore, data: &[u8], first_offset: i64) {
    let tp = ChangelogPartition::new("bench-changelog", 0);
    let n = (data.len() / RECORD_LEN) as i64;
    let mut restorer = task.restorer("kv", tp, first_offset + n).expect("restorer");
    for (c, chunk) in data.chunks(10_000 * RECORD_LEN).enumerate() {
        let batch: Vec<ChangelogRecord<'_>> = chunk
            .chunks(RECORD_LEN)
            .enumerate()
            .map(|(i, r)| ChangelogRecord {
                offset: first_offset + (c * 10_000 + i) as i64,
                key: &r[..KEY_LEN],
                value: Some(&r[KEY_LEN..]),
            })
            .collect();
        restorer.apply(&batch).expect("apply");
    }
    restorer.finish().expect("finish");
}

fn fresh_task(dir: &tempfile::TempDir) -> TaskStore {
    let task = TaskStore::open(dir.path().join("task"), StoreOptions::default()).expect("open");
    task.key_value_store("kv").expect("store");
    task
}

fn bench_restore(c: &mut Criterion) {
    let data = records(1, RESTORE_RECORDS);
    let more = records(2, RESTORE_RECORDS);
    let mut group = c.benchmark_group("store_restore");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.bench_function("empty_store_100k", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("tempdir"),
            |dir| {
                let task = fresh_task(&dir);
                restore(&task, &data, 0);
                (task, dir)
            },
            BatchSize::PerIteration,
        );
    });
    group.bench_function("non_empty_store_100k", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().expect("tempdir");
                let task = fresh_task(&dir);
                restore(&task, &data, 0);
                (task, dir)
            },
            |(task, dir)| {
                restore(&task, &more, RESTORE_RECORDS as i64);
                (task, dir)
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

fn bench_commit(c: &mut Criterion) {
    let data = records(3, 10_000);
    let mut group = c.benchmark_group("store_put_commit");
    group.sample_size(10);
    group.throughput(Throughput::Elements(10_000));
    for per_commit in [10usize, 100, 1_000] {
        group.bench_function(format!("10k_records_{per_commit}_per_commit"), |b| {
            let dir = tempfile::tempdir().expect("tempdir");
            let options = StoreOptions::default().with_durability(Durability::ProcessCrash);
            let task = TaskStore::open(dir.path(), options).expect("open");
            let kv = task.key_value_store("kv").expect("store");
            let tp = ChangelogPartition::new("bench-changelog", 0);
            let mut offset = 0i64;
            b.iter(|| {
                for commit in data.chunks(per_commit * RECORD_LEN) {
                    for r in commit.chunks(RECORD_LEN) {
                        kv.put(&r[..KEY_LEN], &r[KEY_LEN..]).expect("put");
                        offset += 1;
                    }
                    task.commit(&[(tp.clone(), offset)]).expect("commit");
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench_restore, bench_commit);
criterion_main!(benches);
