//! In-memory stores on the runtime, on the in-process cluster under tokio's
//! paused clock:
//! - an instance restarted on the same state directory has nothing of an
//!   in-memory store left, claims no offsets for it, and restores its whole
//!   changelog (a persistent store restores only the tail it lacks);
//! - under exactly-once, a write staged before a processing error is aborted
//!   with its transaction and never reaches the in-memory store.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use support::*;

const CHANGELOG: &str = "wc-counts-changelog";

/// What the task directories under `dir` claim on disk: their committed
/// changelog offsets and their registered stores.
fn on_disk(dir: &std::path::Path) -> Vec<String> {
    let mut claims = Vec::new();
    for task in ["0_0", "0_1"] {
        let store = weir_store::TaskStore::open(
            dir.join("wc").join(task),
            weir_store::StoreOptions::default(),
        )
        .unwrap();
        for (p, o) in store.committed_offsets() {
            claims.push(format!("{task}: offset {o} of {p}"));
        }
        for (name, _) in store.stores() {
            claims.push(format!("{task}: store {name}"));
        }
    }
    claims
}

#[tokio::test(start_paused = true)]
async fn a_restart_restores_the_whole_changelog_of_an_in_memory_store() {
    let kit = testkit(1, 2).await;
    let (first, mut expected) = lines(100, 3);
    produce_words(&kit, &first).await;
    let words_first: u64 = expected.values().sum();
    let dir = tempfile::tempdir().unwrap();
    let a = start(
        count_or_fail(Poison::Never, true),
        streams_config(&kit, "wc", "a", dir.path(), &[]),
    )
    .await;
    eventually(
        "the first batch counted",
        Duration::from_secs(120),
        || async { read_committed(&kit, OUTPUT).await.len() as u64 >= words_first },
    )
    .await;
    assert_eq!(a.metrics().restored_records, 0);
    a.close(Duration::from_secs(30)).await.unwrap();

    // Nothing on disk claims the store or its changelog offsets, so the
    // state directory scan reports no offset sum for the tasks.
    assert_eq!(on_disk(dir.path()), Vec::<String>::new());
    let changelog_records = read_committed_raw(&kit, CHANGELOG).await.len() as u64;
    assert_eq!(
        changelog_records, words_first,
        "one changelog record per word"
    );

    let (second, more) = lines(50, 5);
    produce_words(&kit, &second).await;
    for (w, n) in &more {
        *expected.entry(w.clone()).or_default() += n;
    }
    let words = words_first + more.values().sum::<u64>();
    let a = start(
        count_or_fail(Poison::Never, true),
        streams_config(&kit, "wc", "a", dir.path(), &[]),
    )
    .await;
    eventually(
        "the second batch counted",
        Duration::from_secs(120),
        || async { last_counts(&read_committed(&kit, OUTPUT).await) == expected },
    )
    .await;
    assert_eq!(
        a.metrics().restored_records,
        changelog_records,
        "the whole changelog is restored, not only a tail"
    );
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(last_counts(&out), expected);
    assert!(out.len() as u64 >= words);
    a.close(Duration::from_secs(30)).await.unwrap();
    assert_eq!(on_disk(dir.path()), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn an_aborted_put_never_reaches_an_in_memory_store_under_exactly_once() {
    let kit = testkit(1, 2).await;
    let (first, mut expected) = lines(30, 5);
    let (mut second, more) = lines(30, 6);
    for (w, n) in &more {
        *expected.entry(w.clone()).or_default() += n;
    }
    // `poison` fails after its put the first time, and counts the second.
    second.insert(10, "poison".to_owned());
    second.insert(20, "poison".to_owned());
    expected.insert("poison".to_owned(), 1);
    produce_words(&kit, &first).await;
    let dir = tempfile::tempdir().unwrap();
    let failed = Arc::new(AtomicBool::new(false));
    let config = streams_config(
        &kit,
        "wc",
        "a",
        dir.path(),
        &[
            ("processing.guarantee", "exactly_once_v2"),
            ("processing.exception.handler", "skip"),
        ],
    );
    let a = start(count_or_fail(Poison::Once(failed.clone()), true), config).await;
    // The first part is committed (store, changelog and output) before the
    // failure, so the tasks' restart must restore it.
    let first_words = lines(30, 5).1.values().sum::<u64>();
    eventually(
        "the first part committed",
        Duration::from_secs(120),
        || async { read_committed(&kit, OUTPUT).await.len() as u64 >= first_words },
    )
    .await;
    produce_words(&kit, &second).await;
    let total: u64 = expected.values().sum();
    eventually("every word counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= total
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        failed.load(Ordering::SeqCst),
        "the poison record failed once"
    );
    // The failure closed the tasks and dropped their in-memory stores; their
    // restart restored them from the committed changelog records (at least
    // the first part's), and none of the aborted transaction's.
    assert!(a.metrics().restored_records >= first_words);
    let out = read_committed(&kit, OUTPUT).await;
    // Had the failed transaction's puts stayed in memory, the redone records
    // (and the second poison) would count twice.
    assert_eq!(last_counts(&out), expected);
    assert_eq!(out.len() as u64, total, "each record once");
    a.close(Duration::from_secs(30)).await.unwrap();
}

/// A standby of an in-memory store keeps its copy in memory and follows the
/// changelog; when the active instance crashes, the task moves to the
/// standby's instance, whose new active task restores the store in full
/// (the standby's copy goes with the standby), and the counts stay exact.
#[tokio::test(start_paused = true)]
async fn a_standby_of_an_in_memory_store_follows_and_its_instance_takes_over() {
    let kit = testkit(1, 2).await;
    let (first, mut expected) = lines(150, 17);
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [
        ("processing.guarantee", "exactly_once_v2"),
        ("num.standby.replicas", "1"),
    ];
    let a = start(
        count_or_fail(Poison::Never, true),
        streams_config(&kit, "wc", "a", dirs[0].path(), &props),
    )
    .await;
    let b = start(
        count_or_fail(Poison::Never, true),
        streams_config(&kit, "wc", "b", dirs[1].path(), &props),
    )
    .await;
    let words: u64 = expected.values().sum();
    eventually(
        "one task and one standby each",
        Duration::from_secs(120),
        || async {
            let (ma, mb) = (a.metrics(), b.metrics());
            ma.tasks.len() == 1
                && mb.tasks.len() == 1
                && ma.standby_tasks.len() == 1
                && mb.standby_tasks.len() == 1
        },
    )
    .await;
    produce_words(&kit, &first).await;
    eventually(
        "the standbys applied every change",
        Duration::from_secs(120),
        || async { a.metrics().standby_records + b.metrics().standby_records >= words },
    )
    .await;
    assert_eq!(
        a.metrics().standby_records + b.metrics().standby_records,
        words,
        "each standby applied its task's changelog once, incrementally"
    );

    let (second, more) = lines(50, 19);
    produce_words(&kit, &second).await;
    for (w, n) in &more {
        *expected.entry(w.clone()).or_default() += n;
    }
    let restored_before = b.metrics().restored_records;
    crash(&kit, 1, "a", a).await;
    let total: u64 = expected.values().sum();
    eventually(
        "b runs both tasks and counted everything",
        Duration::from_secs(300),
        || async {
            b.metrics().tasks.len() == 2 && read_committed(&kit, OUTPUT).await.len() as u64 >= total
        },
    )
    .await;
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(out.len() as u64, total, "exactly once");
    assert_eq!(last_counts(&out), expected);
    assert!(b.metrics().restored_records > restored_before);
    b.close(Duration::from_secs(30)).await.unwrap();
    assert_eq!(on_disk(dirs[1].path()), Vec::<String>::new());
}
