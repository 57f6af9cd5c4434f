//! The word count on the runtime, end to end on the in-process cluster under
//! tokio's paused clock.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use support::*;

#[tokio::test(start_paused = true)]
async fn one_instance_counts_every_word_exactly_once() {
    let kit = testkit(1, 4).await;
    let (input, expected) = lines(200, 7);
    produce_lines(&kit, &input).await;
    let dir = tempfile::tempdir().unwrap();
    let config = streams_config(
        &kit,
        "wc",
        "a",
        dir.path(),
        &[
            ("processing.guarantee", "exactly_once_v2"),
            ("num.stream.threads", "2"),
        ],
    );
    let a = start(word_count(), config).await;
    let total: u64 = expected.values().sum();
    eventually("every word counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= total
    })
    .await;
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(out.len() as u64, total, "each input word exactly once");
    assert_eq!(last_counts(&out), expected);
    let m = a.metrics();
    assert_eq!(m.tasks.len(), 8, "{m:?}");
    a.close(Duration::from_secs(30)).await.unwrap();
}

/// Two instances; one crashes mid-run (cut off from every broker, then
/// dropped, with records in flight) and a new one with an empty state
/// directory replaces it. Under exactly-once every input word is counted
/// once in the output and the counts are exact.
#[tokio::test(start_paused = true)]
async fn a_crashed_instance_is_replaced_and_the_output_stays_exact() {
    let kit = testkit(3, 6).await;
    let (first, _) = lines(150, 11);
    let (second, _) = lines(150, 13);
    let all: Vec<String> = first.iter().chain(second.iter()).cloned().collect();
    let (_, expected) = {
        let mut counts = std::collections::BTreeMap::new();
        for l in &all {
            for w in l.split_whitespace() {
                *counts.entry(w.to_owned()).or_insert(0u64) += 1;
            }
        }
        ((), counts)
    };
    let total: u64 = expected.values().sum();
    produce_lines(&kit, &first).await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let eos = [
        ("processing.guarantee", "exactly_once_v2"),
        ("num.stream.threads", "2"),
    ];
    let a = start(
        word_count(),
        streams_config(&kit, "wc", "a", dirs[0].path(), &eos),
    )
    .await;
    let b = start(
        word_count(),
        streams_config(&kit, "wc", "b", dirs[1].path(), &eos),
    )
    .await;
    eventually(
        "both instances process",
        Duration::from_secs(120),
        || async {
            !a.metrics().tasks.is_empty()
                && !b.metrics().tasks.is_empty()
                && read_committed(&kit, OUTPUT).await.len() > 50
        },
    )
    .await;
    produce_lines(&kit, &second).await;
    crash(&kit, 3, "a", a).await;
    let c = start(
        word_count(),
        streams_config(&kit, "wc", "c", dirs[2].path(), &eos),
    )
    .await;
    eventually("every word counted", Duration::from_secs(300), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= total
    })
    .await;
    // A little longer, so a duplicate would have time to show.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(
        out.len() as u64,
        total,
        "each input word exactly once in the output"
    );
    assert_eq!(last_counts(&out), expected);
    // a's stateful tasks were restored from their changelogs by whoever took them.
    let restored = b.metrics().restored_records + c.metrics().restored_records;
    assert!(restored > 0, "{:?} {:?}", b.metrics(), c.metrics());
    let (b_tasks, c_tasks) = (b.metrics().tasks, c.metrics().tasks);
    assert_eq!(b_tasks.len() + c_tasks.len(), 12, "{b_tasks:?} {c_tasks:?}");
    b.close(Duration::from_secs(30)).await.unwrap();
    c.close(Duration::from_secs(30)).await.unwrap();
    // Every store equals the recount of the words its partition holds.
    let mut stores = std::collections::BTreeMap::new();
    for (tasks, dir) in [(&b_tasks, &dirs[1]), (&c_tasks, &dirs[2])] {
        for t in tasks.keys().filter(|t| t.subtopology == 1) {
            stores.extend(store_counts(dir.path(), "wc", &t.to_string()));
        }
    }
    assert_eq!(stores, expected);
}

/// A worker hands a batch's outputs to the producer while it processes the
/// next batch. The last batch has no next one: its outputs (and the
/// repartition records the counting tasks wait for) must still go out at
/// once, not wait for a commit. With ten minutes between commits, every
/// word reaches the output before the first commit.
#[tokio::test(start_paused = true)]
async fn the_last_batchs_outputs_go_out_without_waiting_for_a_commit() {
    let kit = testkit(1, 4).await;
    let (input, expected) = lines(200, 17);
    produce_lines(&kit, &input).await;
    let dir = tempfile::tempdir().unwrap();
    let config = streams_config(
        &kit,
        "wc-idle",
        "a",
        dir.path(),
        &[("commit.interval.ms", "600000")],
    );
    let a = start(word_count(), config).await;
    let total: u64 = expected.values().sum();
    eventually("every word counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= total
    })
    .await;
    assert_eq!(a.metrics().commits, 0, "{:?}", a.metrics());
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(out.len() as u64, total);
    assert_eq!(last_counts(&out), expected);
    a.close(Duration::from_secs(30)).await.unwrap();
}

/// Under at-least-once each stateful task's fence is a transaction that
/// stays open for a commit interval, so its timeout defaults to
/// `commit.interval.ms` + 30 s. An hour is over the broker's
/// `transaction.max.timeout.ms` (15 min): the broker refuses every
/// `InitProducerId`. The instance stops with a configuration error that
/// names the property. It used to retry at once, forever: a spin that
/// hammered the broker (and froze this test's paused clock).
#[tokio::test(start_paused = true)]
async fn a_transaction_timeout_the_broker_refuses_stops_the_instance_with_a_config_error() {
    let kit = testkit(1, 2).await;
    let (input, _) = lines(20, 19);
    produce_lines(&kit, &input).await;
    let dir = tempfile::tempdir().unwrap();
    let config = streams_config(
        &kit,
        "wc-long",
        "a",
        dir.path(),
        &[("commit.interval.ms", "3600000")],
    );
    let a = start(word_count(), config).await;
    eventually("the instance stops", Duration::from_secs(60), || async {
        a.state() == weir_streams::State::Error
    })
    .await;
    let err = a.close(Duration::from_secs(10)).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, weir_streams::StreamsError::InvalidConfig { .. }),
        "{text}"
    );
    assert!(text.contains("transaction.timeout.ms"), "{text}");
    assert!(text.contains("3630000 ms"), "{text}");
    assert!(read_committed(&kit, OUTPUT).await.is_empty());
}
