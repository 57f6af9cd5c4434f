//! Interactive queries on the runtime, on the in-process cluster under
//! tokio's paused clock: each instance answers for the keys of the tasks it
//! runs, from committed data only, and knows which instance runs the rest.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;

#[tokio::test(start_paused = true)]
async fn each_instance_answers_for_its_tasks_and_names_the_host_of_the_others() {
    let kit = testkit(1, 4).await;
    let (input, expected) = lines(200, 53);
    produce_words(&kit, &input).await;
    let words: u64 = expected.values().sum();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = |server: &'static str| {
        [
            ("processing.guarantee", "exactly_once_v2"),
            ("application.server", server),
        ]
    };
    let a = start(
        count_keys(),
        streams_config(&kit, "wc", "a", dirs[0].path(), &props("a.example:8080")),
    )
    .await;
    let b = start(
        count_keys(),
        streams_config(&kit, "wc", "b", dirs[1].path(), &props("b.example:8080")),
    )
    .await;
    eventually(
        "two tasks each, everything counted",
        Duration::from_secs(120),
        || async {
            a.metrics().tasks.len() == 2
                && b.metrics().tasks.len() == 2
                && read_committed(&kit, OUTPUT).await.len() as u64 >= words
        },
    )
    .await;
    let (qa, qb) = (
        a.kv_store::<String, u64>("counts").unwrap(),
        b.kv_store::<String, u64>("counts").unwrap(),
    );
    // Together the two instances hold every count, each key once.
    let mut all: BTreeMap<String, u64> = BTreeMap::new();
    for (k, v) in qa.all().unwrap().into_iter().chain(qb.all().unwrap()) {
        assert!(all.insert(k.clone(), v).is_none(), "{k} held twice");
    }
    assert_eq!(all, expected);
    for (word, count) in &expected {
        let (from_a, from_b) = (qa.get(word).unwrap(), qb.get(word).unwrap());
        let host = a.host_for_key("counts", word).unwrap();
        assert_eq!(host, b.host_for_key("counts", word).unwrap());
        match host.as_deref() {
            Some("a.example:8080") => assert_eq!((from_a, from_b), (Some(*count), None), "{word}"),
            Some("b.example:8080") => assert_eq!((from_a, from_b), (None, Some(*count)), "{word}"),
            other => panic!("{word}: host {other:?}"),
        }
    }
    assert!(a.kv_store::<String, u64>("nope").is_err());
    a.close(Duration::from_secs(30)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
}

/// With stale stores enabled a standby answers for its task: every count is
/// readable on each instance, from the task running there or the standby
/// kept there; without, only the running tasks answer.
#[tokio::test(start_paused = true)]
async fn a_standby_answers_queries_when_stale_stores_are_enabled() {
    let kit = testkit(1, 2).await;
    let (input, expected) = lines(150, 59);
    produce_words(&kit, &input).await;
    let words: u64 = expected.values().sum();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [
        ("processing.guarantee", "exactly_once_v2"),
        ("num.standby.replicas", "1"),
    ];
    let a = start(
        count_keys(),
        streams_config(&kit, "wc", "a", dirs[0].path(), &props),
    )
    .await;
    let b = start(
        count_keys(),
        streams_config(&kit, "wc", "b", dirs[1].path(), &props),
    )
    .await;
    eventually(
        "a task and a standby each, everything counted",
        Duration::from_secs(120),
        || async {
            a.metrics().tasks.len() == 1
                && b.metrics().tasks.len() == 1
                && a.metrics().standby_tasks.len() == 1
                && b.metrics().standby_tasks.len() == 1
                && read_committed(&kit, OUTPUT).await.len() as u64 >= words
        },
    )
    .await;
    for instance in [&a, &b] {
        let running = instance.kv_store::<String, u64>("counts").unwrap();
        let stale = instance
            .kv_store::<String, u64>("counts")
            .unwrap()
            .enable_stale_stores();
        assert_eq!(running.local_tasks().len(), 1);
        assert!(running.all().unwrap().len() < expected.len());
        // The standby catches up within its follow interval.
        eventually(
            "the standby has every count",
            Duration::from_secs(60),
            || async { stale.all().unwrap().into_iter().collect::<BTreeMap<_, _>>() == expected },
        )
        .await;
        assert_eq!(stale.local_tasks().len(), 2);
        for (word, count) in &expected {
            assert_eq!(stale.get(word).unwrap(), Some(*count), "{word}");
        }
    }
    a.close(Duration::from_secs(30)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
}
