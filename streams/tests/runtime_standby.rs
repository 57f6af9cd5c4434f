//! Standby replicas on the runtime, on the in-process cluster under tokio's
//! paused clock: a standby follows its task's changelog, and when the
//! active instance crashes the task moves to the standby's instance and
//! restores only what the standby had not applied yet.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;

#[tokio::test(start_paused = true)]
async fn a_crashed_tasks_standby_takes_over_with_its_state() {
    let kit = testkit(1, 2).await;
    let (first, mut expected) = lines(150, 17);
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
    let words: u64 = expected.values().sum();
    eventually(
        "one task and one standby each",
        Duration::from_secs(120),
        || async {
            let (ma, mb) = (a.metrics(), b.metrics());
            ma.tasks.len() == 1
                && mb.tasks.len() == 1
                && ma.standby_tasks.len() == 1
                && mb.standby_tasks.len() == 1
        },
    )
    .await;
    produce_words(&kit, &first).await;
    eventually(
        "the first batch counted",
        Duration::from_secs(120),
        || async { read_committed(&kit, OUTPUT).await.len() as u64 >= words },
    )
    .await;
    let (ma, mb) = (a.metrics(), b.metrics());
    assert_eq!(ma.standby_tasks.iter().next(), mb.tasks.keys().next());
    assert_eq!(mb.standby_tasks.iter().next(), ma.tasks.keys().next());
    // The standbys catch up with everything committed.
    eventually(
        "the standbys applied every change",
        Duration::from_secs(60),
        || async { a.metrics().standby_records + b.metrics().standby_records >= words },
    )
    .await;
    assert_eq!(
        a.metrics().standby_records + b.metrics().standby_records,
        words
    );

    // a crashes with more input in flight; its task moves to b, which had
    // its standby: b restores only the changelog records its standby had
    // not applied.
    let (second, more) = lines(50, 19);
    produce_words(&kit, &second).await;
    for (w, n) in &more {
        *expected.entry(w.clone()).or_default() += n;
    }
    let restored_before = b.metrics().restored_records;
    crash(&kit, 1, "a", a).await;
    let total: u64 = expected.values().sum();
    eventually(
        "b runs both tasks and counted everything",
        Duration::from_secs(300),
        || async {
            b.metrics().tasks.len() == 2 && read_committed(&kit, OUTPUT).await.len() as u64 >= total
        },
    )
    .await;
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(out.len() as u64, total, "exactly once");
    assert_eq!(last_counts(&out), expected);
    let restored = b.metrics().restored_records - restored_before;
    assert!(
        restored < words / 2,
        "the standby's state was used: {restored} records restored of about {words}"
    );
    // b's standby of a's task was promoted: b keeps no standby now.
    assert!(b.metrics().standby_tasks.is_empty(), "{:?}", b.metrics());
    b.close(Duration::from_secs(30)).await.unwrap();
    let mut stores: BTreeMap<String, u64> = BTreeMap::new();
    for t in ["0_0", "0_1"] {
        stores.extend(store_counts(dirs[1].path(), "wc", t));
    }
    assert_eq!(stores, expected);
}

/// A new instance with no state does not take a stateful task at once: it
/// gets a warmup, which follows the changelog; the moment it has caught up
/// its instance asks for the follow-up rebalance, and only then does the
/// task move, restoring next to nothing.
#[tokio::test(start_paused = true)]
async fn a_warmup_takes_its_task_as_soon_as_it_has_caught_up() {
    let kit = testkit(1, 2).await;
    let (input, mut expected) = lines(300, 23);
    produce_words(&kit, &input).await;
    let words: u64 = expected.values().sum();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [("acceptable.recovery.lag", "10")];
    let a = start(
        count_keys(),
        streams_config(&kit, "wc", "a", dirs[0].path(), &props),
    )
    .await;
    eventually("a counted everything", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= words
    })
    .await;
    // a commits (30 s interval) so its changelog has all the state.
    tokio::time::sleep(Duration::from_secs(35)).await;
    let b = start(
        count_keys(),
        streams_config(&kit, "wc", "b", dirs[1].path(), &props),
    )
    .await;
    eventually("b runs a task", Duration::from_secs(120), || async {
        b.metrics().tasks.len() == 1 && b.metrics().restoring_tasks == 0
    })
    .await;
    let mb = b.metrics();
    assert_eq!(a.metrics().tasks.len(), 1, "{:?}", a.metrics());
    assert!(
        mb.standby_records > words / 4,
        "the warmup copied the task's state: {mb:?}"
    );
    assert!(
        mb.restored_records <= 10,
        "the moved task restored only the tail: {mb:?}"
    );
    let (more, counts) = lines(50, 29);
    produce_words(&kit, &more).await;
    for (w, n) in counts {
        *expected.entry(w).or_default() += n;
    }
    eventually("every word counted", Duration::from_secs(120), || async {
        last_counts(&read_committed(&kit, OUTPUT).await) == expected
    })
    .await;
    a.close(Duration::from_secs(30)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
}

/// Under exactly-once a changelog ends with a transaction marker after its
/// last record. A standby that has read to the end commits the end, markers
/// included, so its next catch-up (every 500 ms) stops at the up-to-date
/// check instead of re-reading the markers with a new consumer, forever.
#[tokio::test(start_paused = true)]
async fn a_caught_up_standby_commits_the_changelog_end_past_the_markers() {
    let kit = testkit(1, 2).await;
    let (input, expected) = lines(80, 23);
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
        "one task and one standby each",
        Duration::from_secs(120),
        || async {
            let (ma, mb) = (a.metrics(), b.metrics());
            ma.tasks.len() == 1 && mb.tasks.len() == 1 && ma.standby_tasks.len() == 1
        },
    )
    .await;
    produce_words(&kit, &input).await;
    let words: u64 = expected.values().sum();
    eventually(
        "every change on the standbys",
        Duration::from_secs(120),
        || async { a.metrics().standby_records + b.metrics().standby_records >= words },
    )
    .await;
    let standby_of_a = *a.metrics().standby_tasks.iter().next().unwrap();
    let standby_of_b = *b.metrics().standby_tasks.iter().next().unwrap();
    // Virtual time for a few follow rounds after the last change (the paused
    // clock makes this exact; the store cannot be read while it is open).
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.close(Duration::from_secs(30)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
    for (dir, task) in [(&dirs[0], standby_of_a), (&dirs[1], standby_of_b)] {
        let topic = "wc-counts-changelog";
        let partition = i32::try_from(task.partition).unwrap();
        let (_, _, end) = kit.offsets(topic, partition).await.unwrap();
        let store = weir_store::TaskStore::open(
            dir.path().join("wc").join(task.to_string()),
            weir_store::StoreOptions::default(),
        )
        .unwrap();
        let committed =
            store.committed_offset(&weir_store::ChangelogPartition::new(topic, partition));
        assert_eq!(
            committed,
            weir_store::CommittedOffset::Known(end),
            "standby {task}: the changelog's end, markers included"
        );
    }
}

/// Kafka Streams moves a task to a caught-up warmup only at the next
/// probing rebalance (10 minutes by default). Here the warmup's instance
/// asks for the follow-up rebalance as soon as it has caught up: its
/// JoinGroup comes within one heartbeat interval of the warmup's lag
/// reaching `acceptable.recovery.lag` (as `tasks()` shows it).
#[tokio::test(start_paused = true)]
async fn a_caught_up_warmup_rejoins_within_one_heartbeat_interval() {
    use weir_protocol::ApiKey;
    use weir_streams::runtime::TaskState;
    const HEARTBEAT: Duration = Duration::from_millis(1000); // support's config
    let kit = testkit(1, 2).await;
    let (input, expected) = lines(300, 31);
    produce_words(&kit, &input).await;
    let words: u64 = expected.values().sum();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [("acceptable.recovery.lag", "10")];
    let a = start(
        count_keys(),
        streams_config(&kit, "wc", "a", dirs[0].path(), &props),
    )
    .await;
    eventually("a counted everything", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= words
    })
    .await;
    tokio::time::sleep(Duration::from_secs(35)).await; // a's 30 s commit
    let b = start(
        count_keys(),
        streams_config(&kit, "wc", "b", dirs[1].path(), &props),
    )
    .await;
    // Watch b's warmup on the paused clock, 10 ms at a time.
    let warmup = |b: &weir_streams::KafkaStreams| {
        b.tasks().into_iter().find(|t| t.state == TaskState::Warmup)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let assigned_at = loop {
        if warmup(&b).is_some() {
            break tokio::time::Instant::now();
        }
        assert!(tokio::time::Instant::now() < deadline, "b got no warmup");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let caught_up_at = loop {
        match warmup(&b) {
            Some(t) if t.lag.is_some_and(|l| l <= 10) => break tokio::time::Instant::now(),
            // Gone: it caught up and moved between two looks.
            None => break tokio::time::Instant::now(),
            Some(_) => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the warmup never caught up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    eventually("b runs the task", Duration::from_secs(120), || async {
        b.metrics().tasks.len() == 1
    })
    .await;
    // The SyncGroup that brought b its warmup is b's last before the
    // warmup showed; the follow-up is b's next JoinGroup.
    let requests: Vec<_> = kit
        .requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.client_id.as_deref() == Some("b"))
        .collect();
    // (In log order: on the paused clock both may carry the same instant.)
    let synced = requests
        .iter()
        .rposition(|r| r.api_key == ApiKey::SyncGroup && r.at <= assigned_at)
        .expect("b's SyncGroup");
    let rejoin = requests[synced..]
        .iter()
        .find(|r| r.api_key == ApiKey::JoinGroup)
        .expect("b's follow-up JoinGroup");
    let after = rejoin.at.saturating_duration_since(caught_up_at);
    assert!(
        rejoin.at <= caught_up_at + HEARTBEAT,
        "the follow-up JoinGroup came {after:?} after the warmup caught up"
    );
    eprintln!(
        "warmup assigned, caught up {:?} later; follow-up JoinGroup {:?} after that",
        caught_up_at - assigned_at,
        after
    );
    a.close(Duration::from_secs(30)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
}
