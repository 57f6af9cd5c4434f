//! Reopening a task store whose metadata keyspace was corrupted: a real
//! store (a key-value store, a window store, committed offsets and stream
//! time) is written, then the fuzz input is written into its metadata
//! keyspace through fjall directly (as a torn or damaged disk would leave
//! it), and the store is reopened and used: every registered store is
//! read, and restored from a few changelog records. Every outcome must be
//! a typed error or a working store, never a panic.
//!
//! Input: a sequence of `klen: u8, vlen: u8, key, value` entries written
//! into the metadata keyspace (an empty value with `vlen` 0xff removes the
//! key).
#![no_main]

use std::ops::Bound;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use weir_store::fuzzing::META_KEYSPACE_NAME;
use weir_store::{
    ChangelogPartition, ChangelogRecord, DB_DIR, StoreKind, StoreOptions, TaskStore,
    window_changelog_key,
};

fn seed(dir: &std::path::Path) -> Option<()> {
    let store = TaskStore::open(dir, StoreOptions::default()).ok()?;
    let kv = store.key_value_store("kv").ok()?;
    kv.put(b"k", b"v").ok()?;
    let win = store
        .window_store("win", Duration::from_secs(60), Duration::from_secs(10))
        .ok()?;
    win.put(b"w", b"x", 5_000).ok()?;
    store
        .commit(&[(ChangelogPartition::new("changelog", 0), 7)])
        .ok()?;
    store.close().ok()
}

fn corrupt(dir: &std::path::Path, mut data: &[u8]) -> Option<()> {
    let db = fjall::Database::builder(dir.join(DB_DIR)).open().ok()?;
    let meta = db
        .keyspace(META_KEYSPACE_NAME, fjall::KeyspaceCreateOptions::default)
        .ok()?;
    while let [klen, vlen, rest @ ..] = data {
        let (klen, vlen) = (usize::from(*klen), usize::from(*vlen));
        let key = rest.get(..klen)?;
        if key.is_empty() {
            return Some(());
        }
        if vlen == 0xff {
            meta.remove(key).ok()?;
            data = &rest[klen..];
            continue;
        }
        let value = rest.get(klen..klen + vlen)?;
        meta.insert(key, value).ok()?;
        data = &rest[klen + vlen..];
    }
    db.persist(fjall::PersistMode::SyncAll).ok()
}

fuzz_target!(|data: &[u8]| {
    // On tmpfs where there is one: fjall's fsyncs dominate every run on disk.
    let dir = match std::fs::metadata("/dev/shm") {
        Ok(m) if m.is_dir() => tempfile::tempdir_in("/dev/shm"),
        _ => tempfile::tempdir(),
    };
    let Ok(dir) = dir else { return };
    if seed(dir.path()).is_none() || corrupt(dir.path(), data).is_none() {
        return;
    }
    let Ok(store) = TaskStore::open(dir.path(), StoreOptions::default()) else {
        return;
    };
    let _ = store.committed_offsets();
    for (name, registration) in store.stores() {
        let partition = ChangelogPartition::new(format!("{name}-changelog"), 0);
        match registration.kind {
            StoreKind::KeyValue => {
                if let Ok(kv) = store.key_value_store(&name) {
                    let _ = kv.get(b"k");
                    let _ = kv
                        .range(Bound::Unbounded, Bound::Unbounded)
                        .map(|r| r.count());
                }
            }
            _ => {}
        }
        let key = match registration.kind {
            StoreKind::KeyValue => b"k".to_vec(),
            _ => window_changelog_key(b"w", 20_000),
        };
        if let Ok(mut restorer) = store.restorer(&name, partition, 2) {
            let records = [ChangelogRecord {
                offset: 0,
                key: &key,
                value: Some(b"restored"),
            }];
            let _ = restorer.apply(&records);
            let _ = restorer.finish();
        }
    }
    let _ = store.close();
});
