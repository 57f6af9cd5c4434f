//! Caching stores (`TopologyBuilder::with_caching`) on the runtime, on the
//! in-process cluster under tokio's paused clock: the changelog holds each
//! key's last write once per commit instead of every write, and a new
//! owner restoring from that shorter changelog has exactly the state the
//! old owner committed, under both guarantees.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;

const CHANGELOG: &str = "wc-counts-changelog";

async fn run(guarantee: &str) {
    let kit = testkit(1, 2).await;
    let (first, mut expected) = lines(200, 11);
    produce_words(&kit, &first).await;
    let words_first: u64 = expected.values().sum();
    let props = [
        ("processing.guarantee", guarantee),
        ("commit.interval.ms", "1000"),
    ];
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let a = start(
        count_keys_cached(),
        streams_config(&kit, "wc", "a", dirs[0].path(), &props),
    )
    .await;
    eventually("a counted everything", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= words_first
    })
    .await;
    a.close(Duration::from_secs(30)).await.unwrap();

    // Every increment reached the output; the changelog has far fewer
    // records, at least one per word.
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(out.len() as u64, words_first, "one output per input word");
    assert_eq!(last_counts(&out), expected);
    let changelog = read_committed_raw(&kit, CHANGELOG).await;
    let logged = changelog.len() as u64;
    assert!(
        logged >= expected.len() as u64 && logged * 4 < words_first,
        "{logged} changelog records for {words_first} writes of {} words",
        expected.len()
    );
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for (_, word, value) in &changelog {
        last.insert(
            word.clone(),
            u64::from_be_bytes(value[..].try_into().unwrap()),
        );
    }
    assert_eq!(last, expected, "the changelog's last value of every word");

    // A new instance on an empty directory restores the shorter changelog
    // and counts on from exactly the committed state.
    let (second, more) = lines(60, 13);
    produce_words(&kit, &second).await;
    for (w, n) in more {
        *expected.entry(w).or_default() += n;
    }
    let total: u64 = expected.values().sum();
    let b = start(
        count_keys_cached(),
        streams_config(&kit, "wc", "b", dirs[1].path(), &props),
    )
    .await;
    eventually("b counted everything", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= total
    })
    .await;
    assert_eq!(
        b.metrics().restored_records,
        logged,
        "b restored the changelog"
    );
    let tasks = b
        .metrics()
        .tasks
        .keys()
        .map(ToString::to_string)
        .collect::<Vec<_>>();
    b.close(Duration::from_secs(30)).await.unwrap();
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(last_counts(&out), expected);
    assert_eq!(
        out.len() as u64,
        total,
        "nothing counted twice on a clean run"
    );
    let mut stores = BTreeMap::new();
    for t in &tasks {
        stores.extend(store_counts(dirs[1].path(), "wc", t));
    }
    assert_eq!(stores, expected, "b's stores equal the recount");
}

#[tokio::test(start_paused = true)]
async fn a_caching_store_restores_from_its_shorter_changelog_under_exactly_once() {
    run("exactly_once_v2").await;
}

#[tokio::test(start_paused = true)]
async fn a_caching_store_restores_from_its_shorter_changelog_under_at_least_once() {
    run("at_least_once").await;
}
