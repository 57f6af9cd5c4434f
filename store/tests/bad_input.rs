//! Corrupt, foreign or mismatched input gives a typed error, and nothing is deleted.

// Test helpers outside #[test] functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use weir_store::{ChangelogPartition, CommittedOffset, StoreError, StoreOptions, TaskStore};

fn open(dir: &std::path::Path) -> Result<TaskStore, StoreError> {
    TaskStore::open(dir, StoreOptions::default())
}

#[test]
fn a_directory_with_other_files_is_foreign_and_left_alone() {
    let dir = common::tempdir();
    std::fs::write(dir.path().join("000042.sst"), b"rocksdb data").unwrap();
    let err = open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::ForeignDirectory { .. }), "{err}");
    assert_eq!(
        std::fs::read(dir.path().join("000042.sst")).unwrap(),
        b"rocksdb data"
    );
}

#[test]
fn a_db_directory_that_is_not_fjall_is_foreign() {
    let dir = common::tempdir();
    std::fs::create_dir(dir.path().join("db")).unwrap();
    std::fs::write(dir.path().join("db").join("CURRENT"), b"MANIFEST-000001").unwrap();
    let err = open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::ForeignDirectory { .. }), "{err}");
}

#[test]
fn a_fjall_database_of_someone_else_is_foreign() {
    let dir = common::tempdir();
    {
        let db = fjall::Database::builder(dir.path().join("db"))
            .open()
            .unwrap();
        let ks = db
            .keyspace("users", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        ks.insert("alice", "1").unwrap();
    }
    let err = open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::ForeignDirectory { .. }), "{err}");
}

/// Writes a raw entry into weir-store's metadata keyspace behind its back.
fn tamper_meta(dir: &std::path::Path, key: &[u8], value: &[u8]) {
    drop(open(dir).unwrap());
    let db = fjall::Database::builder(dir.join("db")).open().unwrap();
    let meta = db
        .keyspace("_weir_meta", fjall::KeyspaceCreateOptions::default)
        .unwrap();
    meta.insert(key, value).unwrap();
    db.persist(fjall::PersistMode::SyncAll).unwrap();
}

#[test]
fn unknown_format_and_corrupt_metadata_are_typed_errors() {
    let dir = common::tempdir();
    tamper_meta(dir.path(), b"format", b"weir-store/99");
    let err = open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::UnsupportedFormat { .. }), "{err}");

    let dir = common::tempdir();
    tamper_meta(dir.path(), b"offset/\x00\x00\x00\x01topic", b"\x01\x02");
    let err = open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::CorruptMetadata { .. }), "{err}");

    let dir = common::tempdir();
    tamper_meta(dir.path(), b"store/counts", b"\x01\x07");
    let err = open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::CorruptMetadata { .. }), "{err}");
}

/// A window registration value: version 1, kind 1, retention and segment (ms).
fn window_registration(retention_ms: i64, segment_ms: i64) -> Vec<u8> {
    let mut v = vec![1u8, 1];
    v.extend_from_slice(&retention_ms.to_be_bytes());
    v.extend_from_slice(&segment_ms.to_be_bytes());
    v
}

/// Found while writing `fuzz/` (store_reopen): a window registration whose segment
/// interval is 0 (or negative) decoded as valid, and the first restored
/// window record then divided by it and panicked. No store writes such a
/// registration (`window_store` refuses durations under 1 ms), so reading
/// one back is corruption.
#[test]
fn a_window_registration_with_impossible_durations_is_corrupt() {
    for (retention, segment) in [(60_000, 0), (60_000, -1), (0, 10_000), (-5, 10_000)] {
        let dir = common::tempdir();
        tamper_meta(
            dir.path(),
            b"store/win",
            &window_registration(retention, segment),
        );
        let task = open(dir.path());
        if let Ok(task) = &task {
            // Before the fix: the registration was accepted, and this panicked.
            let key = weir_store::window_changelog_key(b"w", i64::MIN);
            let mut restorer = task
                .restorer("win", ChangelogPartition::new("win-changelog", 0), 1)
                .unwrap();
            let _ = restorer.apply(&[weir_store::ChangelogRecord {
                offset: 0,
                key: &key,
                value: Some(b"v"),
            }]);
        }
        let err = task
            .err()
            .unwrap_or_else(|| panic!("({retention}, {segment}) was accepted"));
        assert!(matches!(err, StoreError::CorruptMetadata { .. }), "{err}");
    }
}

#[test]
fn a_damaged_database_is_an_engine_error_not_a_panic() {
    let dir = common::tempdir();
    {
        let task = open(dir.path()).unwrap();
        task.key_value_store("kv").unwrap().put(b"k", b"v").unwrap();
        task.commit(&[]).unwrap();
    }
    std::fs::write(dir.path().join("db").join("version"), b"\xff\xff garbage").unwrap();
    let err = open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::Engine { .. }), "{err}");
}

#[test]
fn a_store_opened_with_other_serdes_or_kind_is_refused() {
    let dir = common::tempdir();
    {
        let task = open(dir.path()).unwrap();
        let s = task.typed_key_value_store::<String, u64>("counts").unwrap();
        s.put(&"a".to_owned(), &7).unwrap();
        task.commit(&[]).unwrap();
        task.window_store("win", Duration::from_secs(60), Duration::from_secs(10))
            .unwrap();
    }
    let task = open(dir.path()).unwrap();
    let err = task
        .typed_key_value_store::<String, String>("counts")
        .unwrap_err();
    assert!(matches!(err, StoreError::SerdeMismatch { .. }), "{err}");
    let err = task
        .window_store("counts", Duration::from_secs(60), Duration::from_secs(10))
        .unwrap_err();
    assert!(matches!(err, StoreError::KindMismatch { .. }), "{err}");
    let err = task
        .window_store("win", Duration::from_secs(61), Duration::from_secs(10))
        .unwrap_err();
    assert!(matches!(err, StoreError::KindMismatch { .. }), "{err}");
    // The right serdes still read the data; the byte API always may.
    let s = task.typed_key_value_store::<String, u64>("counts").unwrap();
    assert_eq!(s.get(&"a".to_owned()).unwrap(), Some(7));
    assert_eq!(
        task.key_value_store("counts").unwrap().get(b"a").unwrap(),
        Some(7u64.to_be_bytes().to_vec())
    );
}

#[test]
fn undecodable_bytes_and_unstorable_entries_are_typed_errors() {
    let dir = common::tempdir();
    let task = open(dir.path()).unwrap();
    task.key_value_store("raw")
        .unwrap()
        .put(b"k", b"abc")
        .unwrap();
    let typed = task.typed_key_value_store::<Vec<u8>, u64>("raw").unwrap();
    let err = typed.get(&b"k".to_vec()).unwrap_err();
    assert!(
        matches!(err, StoreError::Decode { what: "value", .. }),
        "{err}"
    );

    let kv = task.key_value_store("kv").unwrap();
    assert!(matches!(
        kv.put(b"", b"v").unwrap_err(),
        StoreError::InvalidEntry { .. }
    ));
    assert!(matches!(
        kv.put(&vec![1; 70_000], b"v").unwrap_err(),
        StoreError::InvalidEntry { .. }
    ));
    for bad in ["", "a/b", "kv.x", "é"] {
        let err = task.key_value_store(bad).unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidStoreName { .. }),
            "{bad:?}: {err}"
        );
    }
    assert!(matches!(
        task.window_store("w", Duration::ZERO, Duration::from_secs(1))
            .unwrap_err(),
        StoreError::InvalidArgument(_)
    ));
}

#[test]
fn wipe_needs_exclusive_use_and_leaves_an_empty_store() {
    let dir = common::tempdir();
    let tp = ChangelogPartition::new("c", 0);
    let task = open(dir.path()).unwrap();
    let kv = task.key_value_store("kv").unwrap();
    kv.put(b"k", b"v").unwrap();
    task.commit(&[(tp.clone(), 5)]).unwrap();
    let err = task.clone().wipe().unwrap_err();
    assert!(matches!(err, StoreError::InUse(_)), "{err}");
    drop(kv);
    task.wipe().unwrap();
    let task = open(dir.path()).unwrap();
    assert_eq!(task.committed_offset(&tp), CommittedOffset::Unknown);
    assert!(task.stores().is_empty());
}
