//! A task's start does not wait for its member's rebalance: the stable
//! offset fetch a starting task makes goes on a connection the member's
//! JoinGroup (which the coordinator parks until every member has rejoined)
//! never uses.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use support::*;
use weir_protocol::ApiKey;
use weir_streams::KafkaStreams;
use weir_streams::runtime::{Role, TaskState};
use weir_testkit::{Intercept, InterceptAction, RequestMatcher};

/// The task `streams` holds as active, with when it was assigned.
fn active(streams: &KafkaStreams) -> Option<(String, TaskState, tokio::time::Instant)> {
    streams.tasks().into_iter().find_map(|t| {
        let held = t
            .history
            .iter()
            .rev()
            .find(|o| o.released_at.is_none() && o.role == Role::Active)?;
        matches!(t.state, TaskState::Restoring | TaskState::Running)
            .then(|| (t.id.to_string(), t.state, held.acquired_at))
    })
}

#[tokio::test(start_paused = true)]
async fn a_new_task_starts_while_its_members_join_group_is_parked() {
    let kit = testkit(1, 2).await;
    let (input, _) = lines(50, 7);
    produce_words(&kit, &input).await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [("commit.interval.ms", "1000")];
    let config = |id: &str, dir: usize| streams_config(&kit, "ts", id, dirs[dir].path(), &props);
    let c = start(count_keys(), config("c", 0)).await;
    eventually("c runs both tasks", Duration::from_secs(60), || async {
        c.metrics().tasks.len() == 2 && c.metrics().restoring_tasks == 0
    })
    .await;

    // b joins and is given one of c's tasks. Its start takes the task's
    // fence first, which takes 2 s: long enough for the rebalance below to
    // have parked b's JoinGroup before the task fetches its offsets.
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::InitProducerId).client("b"),
            InterceptAction::Delay(Duration::from_secs(2)),
        )
        .times(1),
    )
    .await
    .unwrap();
    let b = start(count_keys(), config("b", 1)).await;
    let mut assigned = None;
    for _ in 0..3_000 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if let Some(a) = active(&b) {
            assigned = Some(a);
            break;
        }
    }
    let (task, _, assigned_at) = assigned.expect("b is given a task within a minute");

    // Right after, d joins: a rebalance whose join phase lasts until c,
    // whose JoinGroup takes 5 s, has rejoined. b's JoinGroup waits at the
    // coordinator all that time.
    kit.intercept(Intercept::new(
        RequestMatcher::api(ApiKey::JoinGroup).client("c"),
        InterceptAction::Delay(Duration::from_secs(5)),
    ))
    .await
    .unwrap();
    let d = start(count_keys(), config("d", 2)).await;

    let mut running = None;
    for _ in 0..1_500 {
        if let Some((t, TaskState::Running, _)) = active(&b)
            && t == task
        {
            running = Some(tokio::time::Instant::now());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let running = running.expect("b's task runs within 30 s");
    let took = running - assigned_at;
    eprintln!("task {task} on b: assigned to running in {took:?}");
    // The fence takes 2 s; waiting for the join phase (c's 5 s) took 6.
    assert!(
        took < Duration::from_secs(3),
        "b's task took {took:?} from assignment to running: its offset fetch waited for the rebalance"
    );
    kit.clear_faults().await.unwrap();
    for s in [b, c, d] {
        s.close(Duration::from_secs(10)).await.unwrap();
    }
}
