//! `KafkaStreams::tasks`: each task's state, lag and ownership history, on
//! the in-process cluster under tokio's paused clock.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use support::*;
use weir_streams::runtime::{KafkaStreams, Ownership, Role, TaskInfo, TaskState};
use weir_streams::task::TaskId;

fn task(streams: &KafkaStreams, id: TaskId) -> Option<TaskInfo> {
    streams.tasks().into_iter().find(|t| t.id == id)
}

fn active_entries(info: &TaskInfo) -> Vec<Ownership> {
    info.history
        .iter()
        .filter(|o| o.role == Role::Active)
        .cloned()
        .collect()
}

/// The audit trail of a task that moves: a's holding ends (released, with
/// the generation it ended in) before b's begins, in a later generation.
#[tokio::test(start_paused = true)]
async fn a_moved_tasks_history_shows_the_old_owner_released_before_the_new_one_acquired() {
    let kit = testkit(1, 1).await;
    let (input, expected) = lines(40, 7);
    produce_words(&kit, &input).await;
    let words: u64 = expected.values().sum();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let id = TaskId::new(0, 0);
    let a = start(
        count_keys(),
        streams_config(&kit, "wc", "a", dirs[0].path(), &[]),
    )
    .await;
    eventually("a counted everything", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= words
    })
    .await;
    let info = task(&a, id).expect("a holds 0_0");
    assert_eq!(info.state, TaskState::Running, "{info:?}");
    let held = active_entries(&info);
    assert_eq!(held.len(), 1, "{info:?}");
    assert_eq!(held[0].client_id, "a");
    assert_eq!(held[0].worker, Some(0));
    assert!(held[0].released_at.is_none(), "{info:?}");

    let b = start(
        count_keys(),
        streams_config(&kit, "wc", "b", dirs[1].path(), &[]),
    )
    .await;
    let monitor = a.task_monitor();
    a.close(Duration::from_secs(30)).await.unwrap();
    eventually("b runs 0_0", Duration::from_secs(120), || async {
        task(&b, id).is_some_and(|t| t.state == TaskState::Running)
    })
    .await;

    let a_info = monitor.tasks().into_iter().find(|t| t.id == id).unwrap();
    assert_eq!(a_info.state, TaskState::Released, "{a_info:?}");
    let a_held = active_entries(&a_info);
    assert_eq!(a_held.len(), 1, "{a_info:?}");
    let released_at = a_held[0].released_at.expect("a released 0_0");
    let released_generation = a_held[0].released_generation.expect("a released 0_0");
    assert!(a_held[0].released_at_ms.is_some());

    let b_info = task(&b, id).unwrap();
    let b_held = active_entries(&b_info);
    assert_eq!(b_held.len(), 1, "{b_info:?}");
    assert_eq!(b_held[0].client_id, "b");
    assert_ne!(b_held[0].process_id, a_held[0].process_id);
    assert!(b_held[0].released_at.is_none(), "{b_info:?}");
    assert!(
        b_held[0].generation > released_generation,
        "b acquired in generation {} after a released in {released_generation}",
        b_held[0].generation
    );
    assert!(
        released_at <= b_held[0].acquired_at,
        "a held 0_0 until {released_at:?}, b from {:?}",
        b_held[0].acquired_at
    );
    b.close(Duration::from_secs(30)).await.unwrap();
}

/// A standby replica is listed as one, and its lag (changelog records not
/// yet applied) goes to 0 once it has caught up.
#[tokio::test(start_paused = true)]
async fn a_standby_is_listed_with_its_lag_going_to_zero() {
    let kit = testkit(1, 2).await;
    let (input, expected) = lines(100, 11);
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [("num.standby.replicas", "1")];
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
    let states = |s: &KafkaStreams| {
        let mut v: Vec<TaskState> = s.tasks().iter().map(|t| t.state).collect();
        v.sort();
        v
    };
    eventually(
        "one task and one standby each",
        Duration::from_secs(120),
        || async {
            states(&a) == [TaskState::Running, TaskState::Standby]
                && states(&b) == [TaskState::Running, TaskState::Standby]
        },
    )
    .await;
    produce_words(&kit, &input).await;
    let words: u64 = expected.values().sum();
    eventually("every word counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= words
    })
    .await;
    // The actives commit (30 s interval), then the standbys follow.
    eventually(
        "the standbys caught up",
        Duration::from_secs(120),
        || async {
            [&a, &b].iter().all(|s| {
                s.tasks()
                    .iter()
                    .any(|t| t.state == TaskState::Standby && t.lag == Some(0))
            }) && a.metrics().standby_records + b.metrics().standby_records >= words
        },
    )
    .await;
    for s in [&a, &b] {
        let standby = s
            .tasks()
            .into_iter()
            .find(|t| t.state == TaskState::Standby)
            .unwrap();
        assert!(s.metrics().standby_tasks.contains(&standby.id));
        let entry = standby.history.last().unwrap();
        assert_eq!(entry.role, Role::Standby, "{standby:?}");
        assert_eq!(entry.worker, None);
        assert!(entry.released_at.is_none());
        assert!(standby.restore.is_none(), "{standby:?}");
    }
    a.close(Duration::from_secs(30)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
}

/// An active task's lag counts the input records it has not processed: >
/// 0 while its worker is held up with input waiting, 0 once it caught up.
#[tokio::test(start_paused = true)]
async fn an_active_tasks_lag_counts_its_unprocessed_input() {
    let kit = testkit(1, 1).await;
    let (input, expected) = lines(200, 13);
    produce_words(&kit, &input).await;
    let words: u64 = expected.values().sum();
    let dir = tempfile::tempdir().unwrap();
    let mut config = streams_config(&kit, "wc", "a", dir.path(), &[("max.poll.records", "50")]);
    // The worker's first write waits 20 s: its first batch is processed,
    // the rest of the input waits.
    let armed = Arc::new(AtomicBool::new(true));
    let arm = Arc::clone(&armed);
    config.pause_before_write = weir_streams::config::PauseHook(Some(Arc::new(move || {
        arm.swap(false, Ordering::SeqCst)
            .then_some(Duration::from_secs(20))
    })));
    let a = start(count_keys(), config).await;
    let id = TaskId::new(0, 0);
    eventually(
        "a lag behind the input",
        Duration::from_secs(15),
        || async {
            task(&a, id)
                .is_some_and(|t| t.state == TaskState::Running && t.lag.is_some_and(|l| l > 0))
        },
    )
    .await;
    assert!(!armed.load(Ordering::SeqCst), "the worker is in its pause");
    let lag = task(&a, id).unwrap().lag.unwrap();
    assert!(lag <= words, "{lag} of {words} records");
    eventually("caught up", Duration::from_secs(120), || async {
        task(&a, id).is_some_and(|t| t.lag == Some(0))
    })
    .await;
    eventually("every word counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= words
    })
    .await;
    assert_eq!(task(&a, id).unwrap().lag, Some(0));
    a.close(Duration::from_secs(30)).await.unwrap();
}
