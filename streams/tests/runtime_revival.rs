//! A task revived after a failed exactly-once commit does not wait out its
//! own worker's dangling transaction: the worker's producer is initialised
//! again (which aborts that transaction at the coordinator) before the
//! task's read_committed restore reads its changelog.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use support::*;
use weir_protocol::ApiKey;
use weir_streams::runtime::TaskState;
use weir_testkit::{Intercept, InterceptAction, RequestMatcher};

fn state(streams: &weir_streams::KafkaStreams) -> Option<TaskState> {
    streams
        .tasks()
        .into_iter()
        .find(|t| t.id.to_string() == "0_0")
        .map(|t| t.state)
}

#[tokio::test(start_paused = true)]
async fn a_revived_task_does_not_wait_for_its_workers_dangling_transaction() {
    let kit = testkit(1, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = streams_config(
        &kit,
        "revive",
        "a",
        dir.path(),
        &[
            ("processing.guarantee", "exactly_once_v2"),
            // The coordinator would abort the dangling transaction only
            // after a minute.
            ("transaction.timeout.ms", "60000"),
        ],
    );
    // An EndTxn that is never answered fails the commit after 3 s.
    config.client.request_timeout = Duration::from_secs(1);
    config.client.default_api_timeout = Duration::from_secs(3);
    let streams = start(count_keys(), config).await;
    let (first, _) = lines(20, 3);
    produce_words(&kit, &first).await;
    eventually("the task processed", Duration::from_secs(30), || async {
        streams.metrics().commits >= 1 && streams.metrics().processed > 0
    })
    .await;

    // The next commit's EndTxn is never answered (its three attempts, until
    // `default.api.timeout.ms`): its outcome is unknown, so the abort is
    // refused and the worker drops its producer with the transaction
    // (changelog records included) still open. The task is suspended and
    // revived; its restore reads the changelog read_committed.
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::EndTxn).client("a"),
            InterceptAction::Drop,
        )
        .times(3),
    )
    .await
    .unwrap();
    let (second, _) = lines(20, 5);
    produce_words(&kit, &second).await;
    let sent = tokio::time::Instant::now();
    let all: Vec<String> = first.iter().chain(&second).cloned().collect();
    let mut expected = std::collections::BTreeMap::new();
    for w in all.iter().flat_map(|l| l.split_whitespace()) {
        *expected.entry(w.to_owned()).or_insert(0u64) += 1;
    }
    let mut done = None;
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if last_counts(&read_committed(&kit, OUTPUT).await) == expected {
            done = Some(sent.elapsed());
            break;
        }
    }
    let took = done.expect("the second batch is counted within 75 s");
    let dropped = kit
        .requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.api_key == ApiKey::EndTxn)
        .count();
    eprintln!("second batch committed after {took:?} ({dropped} EndTxn requests)");
    assert!(state(&streams) == Some(TaskState::Running));
    // The commit fails after 3 s; the revived task then restores at once.
    // Waiting for the dangling transaction's timeout took a minute.
    assert!(
        took < Duration::from_secs(15),
        "the second batch took {took:?}: the revived task waited for its worker's dangling transaction"
    );
    streams.close(Duration::from_secs(10)).await.unwrap();
}
