//! Interactive queries on the runtime, on the in-process cluster under
//! tokio's paused clock: each instance answers for the keys of the tasks it
//! runs, from committed data only, and knows which instance runs the rest.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;
use weir_streams::processor::{Processor, ProcessorContext};
use weir_streams::state::WindowStoreRef;
use weir_streams::{ProcessError, Record, TopologyBuilder};

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

/// Counts each word per 1 s window of its timestamp in a window store.
struct WindowedCount(WindowStoreRef<String, u64>);

impl Processor<String, ()> for WindowedCount {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, ()>,
    ) -> Result<(), ProcessError> {
        let start = r.timestamp - r.timestamp.rem_euclid(1_000);
        let store = ctx.window_store(&self.0)?;
        let n = store
            .fetch(&r.key, start, start)?
            .first()
            .map_or(0, |(_, n)| *n)
            + 1;
        store.put(&r.key, &n, start)?;
        ctx.forward(Record::new(r.key, n.to_string(), r.timestamp));
        Ok(())
    }
}

/// A window store answers queries with its committed windows, on the
/// instance that runs the key's task.
#[tokio::test(start_paused = true)]
async fn a_window_store_answers_with_its_committed_windows() {
    let kit = testkit(1, 2).await;
    let (input, expected) = lines(120, 61);
    produce_words(&kit, &input).await;
    let words: u64 = expected.values().sum();
    let mut b = TopologyBuilder::new();
    let windows = b.window_store::<String, u64>("per-second", Duration::from_secs(86_400));
    let src = b.source::<String, ()>("words", &[INPUT]);
    let w = windows.clone();
    let counted = b.processor(
        "count",
        &[&src],
        move || WindowedCount(w.clone()),
        &[&windows],
    );
    b.sink("out", &[&counted], OUTPUT);
    let dir = tempfile::tempdir().unwrap();
    let a = start(
        b.build().unwrap(),
        streams_config(
            &kit,
            "wc",
            "a",
            dir.path(),
            &[("processing.guarantee", "exactly_once_v2")],
        ),
    )
    .await;
    eventually("everything counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= words
    })
    .await;
    // The words' timestamps are 1,000 + line index: lines 0..120 span the
    // windows starting at 1,000 and 2,000 (ms), whose counts add up to each
    // word's total.
    let q = a.window_store::<String, u64>("per-second").unwrap();
    assert_eq!(q.local_tasks().len(), 2);
    // The store commits right after the transaction that made the outputs
    // visible.
    eventually("the windows committed", Duration::from_secs(10), || async {
        expected.iter().all(|(word, count)| {
            q.fetch(word, 0, 10_000)
                .unwrap()
                .iter()
                .map(|(_, n)| n)
                .sum::<u64>()
                == *count
        })
    })
    .await;
    for (word, count) in &expected {
        let found = q.fetch(word, 0, 10_000).unwrap();
        assert!(
            found.iter().all(|(start, _)| start % 1_000 == 0),
            "{found:?}"
        );
        assert_eq!(
            found.iter().map(|(_, n)| n).sum::<u64>(),
            *count,
            "{word}: {found:?}"
        );
    }
    assert!(a.window_store::<String, u64>("nope").is_err());
    assert!(a.kv_store::<String, u64>("per-second").is_err());
    a.close(Duration::from_secs(30)).await.unwrap();
}
