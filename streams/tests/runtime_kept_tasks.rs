//! Issue 15 (high availability): an instance a rebalance does not involve
//! keeps its tasks under cooperative rebalancing, and must keep their
//! uncommitted work too. Its interval commit used to race the rebalance: a
//! commit sent with the old generation while the group moved on got
//! `ILLEGAL_GENERATION`, was handled as a task migration, and the tasks,
//! which never moved, dropped their work and restarted from their last
//! commit (reprocessing what they had processed).
//!
//! Here a and b run a one-stage count (every task stateful) under a steady
//! input while c and then d join: every rebalance takes tasks from a and b
//! and leaves them the rest. Nothing is lost or revoked without a commit,
//! so every input record must be processed exactly once over the whole
//! run (the instances' `processed` counters add up to the input), and the
//! counts must be exact.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use support::*;
use weir_client::producer::{Producer, ProducerRecord};
use weir_streams::State;

/// Produces `rounds` batches of words, one every 10 ms (virtual time),
/// and returns the count of every word produced.
async fn feed(kit: Arc<weir_testkit::Cluster>, rounds: u64) -> BTreeMap<String, u64> {
    let producer =
        Producer::with_cluster(client(&kit, "feeder").await, Default::default()).unwrap();
    let mut counts = BTreeMap::new();
    for round in 0..rounds {
        let (batch, _) = lines(2, 1 + round);
        let mut acks = Vec::new();
        for w in batch.iter().flat_map(|l| l.split_whitespace()) {
            *counts.entry(w.to_owned()).or_insert(0) += 1;
            let record = ProducerRecord::new(INPUT)
                .with_key(w.to_owned())
                .with_timestamp(1_000 + round as i64);
            acks.push(producer.enqueue(record).await.unwrap());
        }
        producer.flush().await;
        for a in acks {
            a.await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    counts
}

async fn kept_tasks_keep_their_work(guarantee: &str) {
    let kit = testkit(1, 6).await;
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [
        ("processing.guarantee", guarantee),
        ("commit.interval.ms", "50"),
        ("num.stream.threads", "2"),
        ("heartbeat.interval.ms", "250"),
    ];
    let config = |id: &str, i: usize| streams_config(&kit, "kept", id, dirs[i].path(), &props);
    let a = start(count_keys(), config("a", 0)).await;
    let b = start(count_keys(), config("b", 1)).await;
    eventually(
        "a and b run 3 tasks each",
        Duration::from_secs(60),
        || async {
            a.state() == State::Running
                && b.state() == State::Running
                && a.metrics().tasks.len() == 3
                && b.metrics().tasks.len() == 3
        },
    )
    .await;
    let feeder = tokio::spawn(feed(Arc::clone(&kit), 600));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let c = start(count_keys(), config("c", 2)).await;
    eventually("c runs its tasks", Duration::from_secs(60), || async {
        c.metrics().tasks.len() == 2 && c.state() == State::Running
    })
    .await;
    let d = start(count_keys(), config("d", 3)).await;
    let expected = feeder.await.unwrap();
    let total: u64 = expected.values().sum();
    eventually("every word counted", Duration::from_secs(120), || async {
        last_counts(&read_committed(&kit, OUTPUT).await) == expected
            && [&a, &b, &c, &d].iter().all(|s| s.state() == State::Running)
    })
    .await;
    let apps = [&a, &b, &c, &d];
    let processed: Vec<u64> = apps.iter().map(|s| s.metrics().processed).collect();
    let restarted: Vec<usize> = apps
        .iter()
        .map(|s| {
            s.tasks()
                .iter()
                .map(|t| {
                    t.history
                        .iter()
                        .filter(|o| o.role == weir_streams::runtime::Role::Active)
                        .count()
                })
                .sum()
        })
        .collect();
    eprintln!(
        "processed per instance {processed:?} (input {total}); active holdings {restarted:?}"
    );
    assert_eq!(
        processed.iter().sum::<u64>(),
        total,
        "every record processed once: a kept task dropped its uncommitted work and \
         reprocessed it (per instance {processed:?})"
    );
    assert_eq!(last_counts(&read_committed(&kit, OUTPUT).await), expected);
    for s in [a, b, c, d] {
        s.close(Duration::from_secs(30)).await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn exactly_once_kept_tasks_keep_their_work_across_rebalances() {
    kept_tasks_keep_their_work("exactly_once_v2").await;
}

#[tokio::test(start_paused = true)]
async fn at_least_once_kept_tasks_keep_their_work_across_rebalances() {
    kept_tasks_keep_their_work("at_least_once").await;
}
