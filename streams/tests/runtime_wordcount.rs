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
