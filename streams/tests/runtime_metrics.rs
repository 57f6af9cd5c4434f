//! The instance's counters through the `metrics` facade (the recorder an
//! application installs: a Prometheus exporter in production, the
//! debugging recorder here).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::*;

/// Every metric of application `wc-metrics`, by name, from one snapshot.
fn values(snapshotter: &Snapshotter) -> BTreeMap<String, f64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(k, ..)| {
            k.key()
                .labels()
                .any(|l| l.key() == "application_id" && l.value() == "wc-metrics")
        })
        .map(|(k, _, _, v)| {
            let v = match v {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                // A histogram: how many samples it holds.
                DebugValue::Histogram(samples) => samples.len() as f64,
            };
            (k.key().name().to_owned(), v)
        })
        .collect()
}

/// The per-task gauge `name` of application `wc-metrics`, by task.
fn per_task(snapshotter: &Snapshotter, name: &str) -> BTreeMap<String, f64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(k, ..)| {
            k.key().name() == name
                && k.key()
                    .labels()
                    .any(|l| l.key() == "application_id" && l.value() == "wc-metrics")
        })
        .filter_map(|(k, _, _, v)| {
            let task = k
                .key()
                .labels()
                .find(|l| l.key() == "task")?
                .value()
                .to_owned();
            match v {
                DebugValue::Gauge(g) => Some((task, g.into_inner())),
                _ => None,
            }
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_instance_publishes_its_counters_and_tasks_through_the_metrics_facade() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let kit = testkit(1, 2).await;
    let (input, expected) = lines(60, 3);
    produce_lines(&kit, &input).await;
    let dir = tempfile::tempdir().unwrap();
    let a = start(
        word_count(),
        streams_config(
            &kit,
            "wc-metrics",
            "a",
            dir.path(),
            &[("processing.guarantee", "exactly_once_v2")],
        ),
    )
    .await;
    let words: u64 = expected.values().sum();
    eventually("every word counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= words
    })
    .await;
    // The next turn of the instance's loop publishes what it did.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let m = values(&snapshotter);
    let processed = m["weir_streams_processed_records_total"];
    // Lines in, then each word once more from the repartition topic.
    assert_eq!(processed as u64, input.len() as u64 + words, "{m:?}");
    assert!(m["weir_streams_commits_total"] >= 1.0, "{m:?}");
    assert!(
        m["weir_streams_commit_seconds"] >= 1.0,
        "commit latency samples: {m:?}"
    );
    // Started in Rebalancing, then Running: one rebalance, timed.
    assert!(m["weir_streams_rebalances_total"] >= 1.0, "{m:?}");
    assert!(
        m["weir_streams_rebalance_seconds"] >= 1.0,
        "rebalance durations: {m:?}"
    );
    assert_eq!(m["weir_streams_active_tasks"], 4.0, "{m:?}");
    assert_eq!(m["weir_streams_restoring_tasks"], 0.0, "{m:?}");
    assert_eq!(a.metrics().processed as f64, processed);
    // Per task: the lag (read every second) and the restore left, both 0
    // once every record is processed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lags = per_task(&snapshotter, "weir_streams_task_lag");
    let tasks: Vec<String> = a.tasks().iter().map(|t| t.id.to_string()).collect();
    assert_eq!(lags.keys().cloned().collect::<Vec<_>>(), tasks, "{lags:?}");
    assert_eq!(tasks.len(), 4);
    assert!(lags.values().all(|l| *l == 0.0), "{lags:?}");
    let remaining = per_task(&snapshotter, "weir_streams_restore_remaining_records");
    assert_eq!(remaining.len(), 4, "{remaining:?}");
    assert!(remaining.values().all(|l| *l == 0.0), "{remaining:?}");
    a.close(Duration::from_secs(30)).await.unwrap();
}
