//! Restore from changelog records: both write paths against a model, progress,
//! bounded batches that each carry their offset, and interrupted bulk restores.

// Test helpers outside #[test] functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use weir_store::{
    ChangelogPartition, ChangelogRecord, CommittedOffset, RestorePath, StoreError, StoreOptions,
    TaskStore, WriteProgress, window_changelog_key,
};

type Record = (i64, Vec<u8>, Option<Vec<u8>>);

/// A changelog in offset order with repeated keys and tombstones.
fn changelog(n: i64, keys: u64, seed: u64) -> Vec<Record> {
    let mut x = seed | 1;
    (0..n)
        .map(|offset| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = format!("key-{:05}", x % keys).into_bytes();
            let value = (!x.is_multiple_of(7)).then(|| format!("v{offset}").into_bytes());
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

fn apply_in_chunks(restorer: &mut weir_store::ChangelogRestorer, records: &[Record]) {
    for chunk in records.chunks(500) {
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

fn small_options() -> StoreOptions {
    // Tiny generations (16 KiB) and batches so a few thousand records
    // exercise many of each.
    StoreOptions::default()
        .with_restore_memory_bytes(32 << 10)
        .with_restore_batch_bytes(4 << 10)
}

#[test]
fn empty_store_restores_through_sorted_runs_and_matches_the_changelog() {
    let dir = common::tempdir();
    let tp = ChangelogPartition::new("app-kv-changelog", 2);
    let records = changelog(6_000, 1_500, 7);
    {
        let task = TaskStore::open(dir.path(), small_options()).unwrap();
        task.key_value_store("kv").unwrap();
        assert_eq!(task.committed_offset(&tp), CommittedOffset::Unknown);
        let mut restorer = task.restorer("kv", tp.clone(), 6_000).unwrap();
        assert_eq!(restorer.path(), RestorePath::SortedRuns);
        apply_in_chunks(&mut restorer, &records[..3_000]);
        let mid = restorer.progress();
        assert_eq!(
            (mid.records, mid.next_offset, mid.remaining()),
            (3_000, Some(3_000), Some(3_000))
        );
        apply_in_chunks(&mut restorer, &records[3_000..]);
        let done = restorer.finish().unwrap();
        let bytes: usize = records
            .iter()
            .map(|(_, k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
            .sum();
        assert_eq!(
            (done.records, done.bytes, done.remaining()),
            (6_000, bytes as u64, Some(0))
        );
        assert_eq!(task.committed_offset(&tp), CommittedOffset::Known(6_000));
        assert_eq!(contents(&task, "kv"), model(&records));
    }
    let task = TaskStore::open(dir.path(), small_options()).unwrap();
    assert_eq!(task.committed_offset(&tp), CommittedOffset::Known(6_000));
    assert_eq!(contents(&task, "kv"), model(&records));
}

#[test]
fn catch_up_into_a_non_empty_store_uses_atomic_batches_with_offsets() {
    let dir = common::tempdir();
    let tp = ChangelogPartition::new("app-kv-changelog", 0);
    let records = changelog(5_000, 800, 11);
    let task = TaskStore::open(dir.path(), small_options()).unwrap();
    let kv = task.key_value_store("kv").unwrap();
    // The first 1,000 records as normal processing, committed with their offset.
    for (_, k, v) in &records[..1_000] {
        match v {
            Some(v) => kv.put(k, v).unwrap(),
            None => kv.delete(k).unwrap(),
        }
    }
    task.commit(&[(tp.clone(), 1_000)]).unwrap();
    let mut restorer = task.restorer("kv", tp.clone(), 5_000).unwrap();
    assert_eq!(restorer.path(), RestorePath::Batches);
    apply_in_chunks(&mut restorer, &records[1_000..3_000]);
    // Dropped without finish, like a crash: every batch carried its own offset,
    // so what is there is exactly a prefix of the changelog.
    drop(restorer);
    drop(kv);
    drop(task);
    let task = TaskStore::open(dir.path(), small_options()).unwrap();
    let CommittedOffset::Known(reached) = task.committed_offset(&tp) else {
        panic!("offset lost")
    };
    assert!((1_000..=3_000).contains(&reached), "reached {reached}");
    assert_eq!(contents(&task, "kv"), model(&records[..reached as usize]));
    // Resume from there to the end.
    let mut restorer = task.restorer("kv", tp.clone(), 5_000).unwrap();
    apply_in_chunks(&mut restorer, &records[reached as usize..]);
    // Batches were written as they were applied: finish has nothing to report.
    let mut reports = Vec::new();
    restorer.finish_with_progress(|p| reports.push(p)).unwrap();
    assert_eq!(reports, Vec::new());
    assert_eq!(task.committed_offset(&tp), CommittedOffset::Known(5_000));
    assert_eq!(contents(&task, "kv"), model(&records));
}

#[test]
fn an_interrupted_bulk_restore_is_discarded_at_open_and_reports_unknown() {
    let dir = common::tempdir();
    let tp = ChangelogPartition::new("app-kv-changelog", 0);
    let records = changelog(4_000, 4_000, 3);
    {
        let task = TaskStore::open(dir.path(), small_options()).unwrap();
        task.key_value_store("kv").unwrap();
        let mut restorer = task.restorer("kv", tp.clone(), 4_000).unwrap();
        apply_in_chunks(&mut restorer, &records);
        // No finish: the sorted runs were spilled, nothing was committed.
    }
    let task = TaskStore::open(dir.path(), small_options()).unwrap();
    assert_eq!(task.committed_offset(&tp), CommittedOffset::Unknown);
    assert!(contents(&task, "kv").is_empty(), "partial restore visible");
    // And the store restores cleanly afterwards.
    let mut restorer = task.restorer("kv", tp.clone(), 4_000).unwrap();
    assert_eq!(restorer.path(), RestorePath::SortedRuns);
    apply_in_chunks(&mut restorer, &records);
    restorer.finish().unwrap();
    assert_eq!(contents(&task, "kv"), model(&records));
    // And the restored store survives the next open: discarding the
    // interrupted restore must not undo the ingestion that followed it.
    drop(task);
    let task = TaskStore::open(dir.path(), small_options()).unwrap();
    assert_eq!(task.committed_offset(&tp), CommittedOffset::Known(4_000));
    assert_eq!(contents(&task, "kv").len(), model(&records).len());
    assert_eq!(contents(&task, "kv"), model(&records));
}

/// C2 without a fault: a bulk restore dropped unfinished leaves its marker, so
/// a commit that claims the restored partition's offset must be refused (the
/// next open empties the store), and no reopen may show that offset.
#[test]
fn a_commit_claiming_a_partition_under_bulk_restore_is_refused() {
    let dir = common::tempdir();
    let tp = ChangelogPartition::new("app-kv-changelog", 0);
    let other = ChangelogPartition::new("app-other-changelog", 0);
    let records = changelog(2_000, 2_000, 9);
    {
        let task = TaskStore::open(dir.path(), small_options()).unwrap();
        let kv = task.key_value_store("kv").unwrap();
        let mut restorer = task.restorer("kv", tp.clone(), 2_000).unwrap();
        assert_eq!(restorer.path(), RestorePath::SortedRuns);
        apply_in_chunks(&mut restorer, &records[..1_000]);
        drop(restorer);
        kv.put(b"k", b"v").unwrap();
        match task.commit(&[(tp.clone(), 1)]) {
            Err(StoreError::RestoreInProgress {
                store, partition, ..
            }) => assert_eq!((store.as_str(), &partition), ("kv", &tp)),
            other => panic!("commit over an unfinished restore: {other:?}"),
        }
        // Writes into the store are refused as well, with no offset claimed.
        assert!(matches!(
            task.commit(&[]),
            Err(StoreError::RestoreInProgress { .. })
        ));
        assert_eq!(task.committed_offset(&tp), CommittedOffset::Unknown);
        // Other partitions still commit once the store's writes are dropped.
        task.abort();
        task.commit(&[(other.clone(), 5)]).unwrap();
    }
    let task = TaskStore::open(dir.path(), small_options()).unwrap();
    assert_eq!(task.committed_offset(&tp), CommittedOffset::Unknown);
    assert_eq!(task.committed_offset(&other), CommittedOffset::Known(5));
    assert!(contents(&task, "kv").is_empty());
    // The restore runs again, over the bulk path, and commits.
    let mut restorer = task.restorer("kv", tp.clone(), 2_000).unwrap();
    assert_eq!(restorer.path(), RestorePath::SortedRuns);
    apply_in_chunks(&mut restorer, &records);
    restorer.finish().unwrap();
    task.commit(&[(tp.clone(), 2_000)]).unwrap();
    assert_eq!(contents(&task, "kv"), model(&records));
}

#[test]
fn a_large_restore_merges_many_spilled_generations_over_parallel_key_ranges() {
    // 150k records over 40k keys: every key is written several times, across
    // generations, and about one write in seven is a tombstone. 16 KiB
    // generations make about 250 spill files, 128 of which are merged into
    // one along the way; three threads write key ranges of all of them and
    // the last generation into the store.
    restore_matches_the_model(
        &changelog(150_000, 40_000, 5),
        StoreOptions::default()
            .with_restore_memory_bytes(32 << 10)
            .with_restore_threads(3),
    );
}

#[test]
fn spilled_runs_with_values_larger_than_a_read_chunk_merge_intact() {
    // Generations are as small as they go, so nearly every record is
    // spilled, and some values are larger than the 64 KiB a file cursor
    // reads at a time, so records straddle and exceed reads.
    let records: Vec<Record> = (0..300i64)
        .map(|i| {
            let key = format!("key-{:03}", (i * 37) % 120).into_bytes();
            let len = if i % 10 == 0 {
                200_000
            } else {
                500 + i as usize
            };
            let value = (i % 13 != 0).then(|| vec![(i % 251) as u8; len]);
            (i, key, value)
        })
        .collect();
    restore_matches_the_model(
        &records,
        StoreOptions::default()
            .with_restore_memory_bytes(0)
            .with_restore_threads(2),
    );
}

/// Restores `records` into an empty store with `options` and checks the
/// result against the model and the committed offset, before and after a
/// reopen, and that no spill file is left behind.
fn restore_matches_the_model(records: &[Record], options: StoreOptions) {
    let dir = common::tempdir();
    let tp = ChangelogPartition::new("c", 0);
    let end = records.last().map_or(0, |r| r.0 + 1);
    let expected = if records.is_empty() {
        CommittedOffset::Unknown
    } else {
        CommittedOffset::Known(end)
    };
    {
        let task = TaskStore::open(dir.path(), options.clone()).unwrap();
        task.key_value_store("kv").unwrap();
        let mut restorer = task.restorer("kv", tp.clone(), end).unwrap();
        assert_eq!(restorer.path(), RestorePath::SortedRuns);
        apply_in_chunks(&mut restorer, records);
        let mut reports = Vec::new();
        let done = restorer.finish_with_progress(|p| reports.push(p)).unwrap();
        assert_eq!(done.records, records.len() as u64);
        assert_eq!(contents(&task, "kv"), model(records));
        check_write_progress(&reports, records);
        assert_eq!(task.committed_offset(&tp), expected);
        assert!(
            !dir.path().join("restore-spill").join("kv").exists(),
            "spill files left behind"
        );
    }
    let task = TaskStore::open(dir.path(), options).unwrap();
    assert_eq!(task.committed_offset(&tp), expected);
    assert_eq!(contents(&task, "kv"), model(records));
}

/// The write progress `finish` reported: in order, growing to its total,
/// which covers at least every key and value byte of the restored state.
fn check_write_progress(reports: &[WriteProgress], records: &[Record]) {
    let Some(last) = reports.last() else {
        assert!(records.is_empty(), "no write progress reported");
        return;
    };
    let bytes: u64 = model(records)
        .iter()
        .map(|(k, v)| (k.len() + v.len()) as u64)
        .sum();
    assert!(last.bytes_total >= bytes, "{last:?} for {bytes} bytes");
    assert_eq!(last.bytes_done, last.bytes_total);
    assert!(reports.iter().all(|p| p.bytes_total == last.bytes_total));
    assert!(
        reports
            .windows(2)
            .all(|w| w[0].bytes_done <= w[1].bytes_done),
        "write progress went backwards"
    );
    if !records.is_empty() {
        // One report per bucket, and a restore has many buckets.
        assert!(reports.len() > 1, "{reports:?}");
    }
}

/// Memory budgets that take each way through an empty-store restore: many
/// spilled generations with buckets merged from the files; a few with
/// buckets read back into memory; one generation that is never spilled.
fn all_memory_budgets() -> [StoreOptions; 3] {
    [
        small_options(),
        StoreOptions::default().with_restore_memory_bytes(256 << 10),
        StoreOptions::default(),
    ]
}

#[test]
fn every_way_through_a_bulk_restore_gives_the_changelog_state() {
    let records = changelog(20_000, 3_000, 13);
    for options in all_memory_budgets() {
        restore_matches_the_model(&records, options);
    }
}

#[test]
fn skewed_keys_restore_intact_whatever_the_buckets() {
    // Buckets are cut from the first keys. Keys that all share a prefix
    // longer than the 16 bytes compared cheaply, keys that grow past every
    // bound (a counter), and keys that first come from a narrow range and
    // then from everywhere must all end up exactly as written.
    let shared: Vec<Record> = (0..5_000i64)
        .map(|i| {
            let key = format!("customer-000000000000-{:05}", (i * 31) % 1_700).into_bytes();
            (i, key, (i % 9 != 0).then(|| format!("s{i}").into_bytes()))
        })
        .collect();
    let counter: Vec<Record> = (0..5_000i64)
        .map(|i| {
            (
                i,
                (i as u64 / 2).to_be_bytes().to_vec(),
                Some(vec![(i % 251) as u8; 40]),
            )
        })
        .collect();
    let narrow_then_wide: Vec<Record> = (0..6_000i64)
        .map(|i| {
            let k = if i < 2_000 {
                i % 50
            } else {
                (i * 7_919) % 100_000
            };
            (
                i,
                format!("{k:06}").into_bytes(),
                (i % 5 != 0).then(|| vec![1; 20]),
            )
        })
        .collect();
    for records in [shared, counter, narrow_then_wide] {
        for options in all_memory_budgets() {
            restore_matches_the_model(&records, options);
        }
    }
}

#[test]
fn a_bad_record_deep_into_a_bulk_restore_is_refused_with_its_offset() {
    let dir = common::tempdir();
    let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
    task.key_value_store("kv").unwrap();
    let records = changelog(30_000, 5_000, 9);
    let mut restorer = task
        .restorer("kv", ChangelogPartition::new("c", 0), 30_001)
        .unwrap();
    // Far more records than decide the buckets, so the bulk loop takes them.
    apply_in_chunks(&mut restorer, &records[..20_000]);
    let batch = [
        ChangelogRecord {
            offset: 20_000,
            key: b"fine",
            value: Some(b"v"),
        },
        ChangelogRecord {
            offset: 20_001,
            key: b"",
            value: Some(b"v"),
        },
    ];
    let err = restorer.apply(&batch).unwrap_err();
    assert!(
        matches!(err, StoreError::BadChangelogRecord { offset: 20_001, .. }),
        "{err}"
    );
    let progress = restorer.progress();
    assert_eq!(
        (progress.records, progress.next_offset),
        (20_001, Some(20_001))
    );
}

#[test]
fn tiny_and_empty_restores_finish_cleanly() {
    // Fewer records than decide the buckets, and none at all.
    restore_matches_the_model(&changelog(7, 5, 3), StoreOptions::default());
    restore_matches_the_model(&[], StoreOptions::default());
}

#[test]
fn spill_files_left_by_a_dead_process_are_removed_at_open() {
    let dir = common::tempdir();
    let tp = ChangelogPartition::new("c", 0);
    {
        let task = TaskStore::open(dir.path(), small_options()).unwrap();
        task.key_value_store("kv").unwrap();
        let mut restorer = task.restorer("kv", tp.clone(), 10).unwrap();
        apply_in_chunks(&mut restorer, &changelog(10, 10, 1));
        // Dropped unfinished: the marker stays, the spill files go.
    }
    let spill = dir.path().join("restore-spill").join("kv");
    assert!(!spill.exists());
    // What a SIGKILL would leave: spill files and the marker.
    std::fs::create_dir_all(&spill).unwrap();
    std::fs::write(spill.join("run-000001"), b"partial").unwrap();
    let task = TaskStore::open(dir.path(), small_options()).unwrap();
    assert!(!dir.path().join("restore-spill").exists());
    assert_eq!(task.committed_offset(&tp), CommittedOffset::Unknown);
    assert!(contents(&task, "kv").is_empty());
}

#[test]
fn window_stores_restore_from_windowed_changelog_keys_with_retention() {
    let dir = common::tempdir();
    let tp = ChangelogPartition::new("app-win-changelog", 0);
    let task = TaskStore::open(dir.path(), small_options()).unwrap();
    let win = task
        .window_store("win", Duration::from_millis(100), Duration::from_millis(25))
        .unwrap();
    let records: Vec<Record> = (0..400)
        .map(|i| {
            (
                i,
                window_changelog_key(format!("k{}", i % 3).as_bytes(), i),
                Some(vec![i as u8]),
            )
        })
        .collect();
    let mut restorer = task.restorer("win", tp.clone(), 400).unwrap();
    assert_eq!(restorer.path(), RestorePath::Batches);
    apply_in_chunks(&mut restorer, &records);
    restorer.finish().unwrap();
    assert_eq!(win.stream_time().unwrap(), Some(399));
    let got: Vec<i64> = win
        .fetch_all(i64::MIN, i64::MAX)
        .unwrap()
        .map(|e| e.unwrap().window_start)
        .collect();
    assert_eq!(got, (300..400).collect::<Vec<_>>());
    drop(win);
    drop(task);
    let task = TaskStore::open(dir.path(), small_options()).unwrap();
    let win = task
        .window_store("win", Duration::from_millis(100), Duration::from_millis(25))
        .unwrap();
    assert_eq!(win.fetch(b"k1", 300, 310).unwrap().len(), 4);
    assert_eq!(task.committed_offset(&tp), CommittedOffset::Known(400));
}

#[test]
fn restore_refuses_staged_writes_and_bad_records() {
    let dir = common::tempdir();
    let tp = ChangelogPartition::new("c", 0);
    let task = TaskStore::open(dir.path(), small_options()).unwrap();
    let kv = task.key_value_store("kv").unwrap();
    kv.put(b"staged", b"x").unwrap();
    let err = task.restorer("kv", tp.clone(), 10).unwrap_err();
    assert!(matches!(err, StoreError::StagedWritesPending(_)), "{err}");
    task.abort();
    let mut restorer = task.restorer("kv", tp, 10).unwrap();
    let err = restorer
        .apply(&[ChangelogRecord {
            offset: 4,
            key: b"",
            value: Some(b"v"),
        }])
        .unwrap_err();
    assert!(
        matches!(err, StoreError::BadChangelogRecord { offset: 4, .. }),
        "{err}"
    );
    let win = task
        .window_store("w", Duration::from_secs(1), Duration::from_secs(1))
        .unwrap();
    drop(win);
    let mut restorer = task
        .restorer("w", ChangelogPartition::new("w", 0), 1)
        .unwrap();
    let err = restorer
        .apply(&[ChangelogRecord {
            offset: 0,
            key: b"short",
            value: None,
        }])
        .unwrap_err();
    assert!(
        matches!(err, StoreError::BadChangelogRecord { .. }),
        "{err}"
    );
}

#[test]
fn a_second_restorer_of_a_store_is_refused_while_the_first_is_open() {
    let dir = common::tempdir();
    let tp = ChangelogPartition::new("c", 0);
    let records = changelog(1_000, 300, 5);
    let task = TaskStore::open(dir.path(), small_options()).unwrap();
    task.key_value_store("kv").unwrap();
    task.key_value_store("other").unwrap();
    let mut first = task.restorer("kv", tp.clone(), 1_000).unwrap();
    apply_in_chunks(&mut first, &records[..500]);
    // Starting over under an open restorer would empty the store it writes.
    match task.restorer("kv", tp.clone(), 1_000) {
        Err(StoreError::RestoreInProgress { store, .. }) => assert_eq!(store, "kv"),
        other => panic!("second restorer: {other:?}"),
    }
    // Other stores restore meanwhile.
    drop(
        task.restorer("other", ChangelogPartition::new("o", 0), 0)
            .unwrap(),
    );
    drop(first);
    // The first one never finished: the next starts over from the beginning.
    assert_eq!(task.committed_offset(&tp), CommittedOffset::Unknown);
    let mut again = task.restorer("kv", tp.clone(), 1_000).unwrap();
    assert_eq!(again.path(), RestorePath::SortedRuns);
    apply_in_chunks(&mut again, &records);
    again.finish().unwrap();
    assert_eq!(task.committed_offset(&tp), CommittedOffset::Known(1_000));
    assert_eq!(contents(&task, "kv"), model(&records));
}

/// `reset_store` (a restore met OFFSET_OUT_OF_RANGE): the store is empty and
/// claims no offset, for a key-value and a window store alike, and stays so
/// across a reopen; the other stores of the task keep theirs.
#[test]
fn a_reset_store_is_empty_and_claims_no_offset_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (kv_log, win_log, other_log) = (
        ChangelogPartition::new("kv-changelog", 0),
        ChangelogPartition::new("win-changelog", 0),
        ChangelogPartition::new("other-changelog", 0),
    );
    {
        let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
        let kv = task.key_value_store("kv").unwrap();
        let win = task
            .window_store("win", Duration::from_secs(3600), Duration::from_secs(60))
            .unwrap();
        let other = task.key_value_store("other").unwrap();
        kv.put(b"a", b"1").unwrap();
        win.put(b"a", b"1", 1_000).unwrap();
        other.put(b"b", b"2").unwrap();
        task.commit(&[
            (kv_log.clone(), 10),
            (win_log.clone(), 20),
            (other_log.clone(), 30),
        ])
        .unwrap();
        task.reset_store("kv", &kv_log).unwrap();
        task.reset_store("win", &win_log).unwrap();
        assert_eq!(task.committed_offset(&kv_log), CommittedOffset::Unknown);
        assert_eq!(task.committed_offset(&win_log), CommittedOffset::Unknown);
        assert!(contents(&task, "kv").is_empty());
        assert!(win.fetch(b"a", 0, i64::MAX).unwrap().is_empty());
        task.close().unwrap();
    }
    let task = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
    let win = task
        .window_store("win", Duration::from_secs(3600), Duration::from_secs(60))
        .unwrap();
    assert_eq!(task.committed_offset(&kv_log), CommittedOffset::Unknown);
    assert_eq!(task.committed_offset(&win_log), CommittedOffset::Unknown);
    assert_eq!(
        task.committed_offset(&other_log),
        CommittedOffset::Known(30)
    );
    assert!(contents(&task, "kv").is_empty());
    assert!(win.fetch(b"a", 0, i64::MAX).unwrap().is_empty());
    assert_eq!(contents(&task, "other").len(), 1);
}
