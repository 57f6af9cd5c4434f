//! `processing.exception.handler=skip`: a record whose processing fails is
//! passed over, and none of its effects survive (its store write and its
//! outputs are aborted with the rest of the uncommitted work, which is then
//! redone), on the in-process cluster under tokio's paused clock.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use support::*;

async fn run(guarantee: &str) {
    let kit = testkit(1, 2).await;
    let (mut input, expected) = lines(60, 5);
    // The poison record sits among the others.
    input.insert(30, "poison".to_owned());
    produce_words(&kit, &input).await;
    let dir = tempfile::tempdir().unwrap();
    let config = streams_config(
        &kit,
        "wc",
        "a",
        dir.path(),
        &[
            ("processing.guarantee", guarantee),
            ("processing.exception.handler", "skip"),
        ],
    );
    let a = start(count_or_fail(Poison::Always, false), config).await;
    eventually(
        "every other word counted",
        Duration::from_secs(120),
        || async { last_counts(&read_committed(&kit, OUTPUT).await) == expected },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(last_counts(&out), expected);
    assert!(out.iter().all(|(_, k, _)| k != "poison"));
    if guarantee == "exactly_once_v2" {
        assert_eq!(out.len() as u64, expected.values().sum::<u64>());
    }
    let tasks = a.metrics().tasks;
    a.close(Duration::from_secs(30)).await.unwrap();
    let mut stores = BTreeMap::new();
    for t in tasks.keys() {
        stores.extend(store_counts(dir.path(), "wc", &t.to_string()));
    }
    assert_eq!(stores, expected, "the poison record's put did not stay");
}

#[tokio::test(start_paused = true)]
async fn skip_passes_over_a_failing_record_under_exactly_once() {
    run("exactly_once_v2").await;
}

#[tokio::test(start_paused = true)]
async fn skip_passes_over_a_failing_record_under_at_least_once() {
    run("at_least_once").await;
}

/// The default handler, replace-thread, under exactly-once: the failed
/// transaction is aborted, the tasks restart from their last commit in a new
/// transaction, and every record, the one that failed too, counts once.
#[tokio::test(start_paused = true)]
async fn a_replaced_thread_redoes_the_aborted_work_exactly_once() {
    let kit = testkit(1, 2).await;
    let (mut input, mut expected) = lines(60, 7);
    input.insert(20, "poison".to_owned());
    expected.insert("poison".to_owned(), 1);
    produce_words(&kit, &input).await;
    let dir = tempfile::tempdir().unwrap();
    let failed = Arc::new(AtomicBool::new(false));
    let config = streams_config(
        &kit,
        "wc",
        "a",
        dir.path(),
        &[("processing.guarantee", "exactly_once_v2")],
    );
    let a = start(count_or_fail(Poison::Once(failed.clone()), false), config).await;
    let total: u64 = expected.values().sum();
    eventually("every word counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= total
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let out = read_committed(&kit, OUTPUT).await;
    assert!(failed.load(Ordering::SeqCst));
    assert_eq!(out.len() as u64, total, "each record once");
    assert_eq!(last_counts(&out), expected);
    a.close(Duration::from_secs(30)).await.unwrap();
}
