//! A commit whose offsets the group coordinator refuses because the
//! member's generation is stale (`ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`,
//! `FENCED_INSTANCE_ID` on TxnOffsetCommit: the group rebalanced while the
//! commit was on its way) is a task migration, as Kafka Streams treats it
//! (`TaskMigratedException`), not a failure of the application: the worker
//! aborts the transaction, drops the uncommitted work and restarts its tasks
//! from their last commit. Before, it was reported as "stream thread
//! failed", which under `processing.exception.handler=shutdown_client`
//! stopped the whole instance on a routine rebalance race.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use support::*;
use weir_protocol::ApiKey;
use weir_streams::State;
use weir_testkit::{Intercept, InterceptAction, RequestMatcher};

/// Kafka's error codes for a stale membership.
const ILLEGAL_GENERATION: i16 = 22;
const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_INSTANCE_ID: i16 = 82;

async fn refused_offsets_are_a_migration(guarantee: &str, code: i16) {
    let kit = testkit(1, 2).await;
    let (first, mut expected) = lines(40, 7);
    let (second, more) = lines(40, 8);
    for (w, n) in more {
        *expected.entry(w).or_default() += n;
    }
    let dir = tempfile::tempdir().unwrap();
    let props = [
        ("processing.guarantee", guarantee),
        ("commit.interval.ms", "200"),
        ("processing.exception.handler", "shutdown_client"),
    ];
    produce_lines(&kit, &first).await;
    let app = start(
        word_count(),
        streams_config(&kit, "stale", "a", dir.path(), &props),
    )
    .await;
    eventually("the app runs", Duration::from_secs(60), || async {
        app.state() == State::Running && app.metrics().processed > 0
    })
    .await;
    // The next two TxnOffsetCommits are refused as from a stale member.
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::TxnOffsetCommit).client("a"),
            InterceptAction::Error(code),
        )
        .times(2),
    )
    .await
    .unwrap();
    produce_lines(&kit, &second).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while last_counts(&read_committed(&kit, OUTPUT).await) != expected
        && tokio::time::Instant::now() < deadline
        && app.state() != State::Error
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_ne!(
        app.state(),
        State::Error,
        "a refused commit stopped the instance"
    );
    assert_eq!(
        last_counts(&read_committed(&kit, OUTPUT).await),
        expected,
        "the counts after the refused commits"
    );
    app.close(Duration::from_secs(30)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn exactly_once_illegal_generation_on_txn_offset_commit_restarts_the_tasks() {
    refused_offsets_are_a_migration("exactly_once_v2", ILLEGAL_GENERATION).await;
}

#[tokio::test(start_paused = true)]
async fn exactly_once_unknown_member_on_txn_offset_commit_restarts_the_tasks() {
    refused_offsets_are_a_migration("exactly_once_v2", UNKNOWN_MEMBER_ID).await;
}

#[tokio::test(start_paused = true)]
async fn at_least_once_fenced_instance_on_the_task_fence_restarts_the_tasks() {
    refused_offsets_are_a_migration("at_least_once", FENCED_INSTANCE_ID).await;
}
