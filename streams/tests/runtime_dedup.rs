//! The second user report, reproduced and beaten, on the in-process cluster
//! under tokio's paused clock.
//!
//! A dedup app with exactly-once, a standby replica and a persistent window
//! store. A processor puts a command id into the store, the next processor
//! throws, the transaction aborts; the task moves to another instance (the
//! standby's first), which throws too, and so on, and finally comes back to
//! the first instance's state directory. In the report the store still held
//! the id and the valid command was rejected as a duplicate. Here every
//! store stays without it, the command is accepted once, and a real
//! duplicate afterwards is flagged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

mod support;

#[path = "../examples/apps/dedup.rs"]
mod dedup;

use std::time::Duration;

use support::*;
use weir_client::producer::{Producer, ProducerRecord};
use weir_streams::{KafkaStreams, State};

const MARKER: &str = "FAIL";
const WINDOW: Duration = Duration::from_secs(3600);

async fn send(kit: &std::sync::Arc<weir_testkit::Cluster>, id: &str, payload: &str, ts: i64) {
    let producer =
        Producer::with_cluster(client(kit, "commands").await, Default::default()).unwrap();
    let ack = producer
        .enqueue(
            ProducerRecord::new(INPUT)
                .with_key(id.to_owned())
                .with_value(payload.to_owned())
                .with_timestamp(ts),
        )
        .await
        .unwrap();
    producer.flush().await;
    ack.await.unwrap();
}

/// The ids in task 0_0's `seen` store under `dir` (the instance stopped).
fn seen_ids(dir: &std::path::Path) -> Vec<String> {
    let task = dir.join("dedup").join("0_0");
    if !task.exists() {
        return Vec::new();
    }
    let store = weir_store::TaskStore::open(&task, weir_store::StoreOptions::default()).unwrap();
    let segment = (WINDOW / 10).max(Duration::from_secs(1));
    let window = store.window_store(dedup::STORE, WINDOW, segment).unwrap();
    let mut ids: Vec<String> = window
        .fetch_all(0, i64::MAX / 2)
        .unwrap()
        .map(|e| String::from_utf8(e.unwrap().key).unwrap())
        .collect();
    ids.sort();
    store.close().unwrap();
    ids
}

fn verdicts(out: &[(i32, String, String)], id: &str) -> Vec<String> {
    out.iter()
        .filter(|(_, k, _)| k == id)
        .map(|(_, _, v)| v.clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_aborted_put_never_stays_in_a_store_however_the_task_moves() {
    let kit = testkit(1, 1).await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let failed: Vec<dedup::FailedOnce> = (0..3).map(|_| Default::default()).collect();
    let props = [
        ("processing.guarantee", "exactly_once_v2"),
        ("num.standby.replicas", "1"),
        // A failing instance stops and its task moves on, as in the report
        // (its threads died, the task went to the others).
        ("processing.exception.handler", "shutdown_client"),
    ];
    let start_instance = |i: usize, name: &str| {
        let topology = dedup::topology(
            INPUT,
            OUTPUT,
            WINDOW,
            Some(MARKER.to_owned()),
            failed[i].clone(),
        )
        .unwrap();
        let config = streams_config(&kit, "dedup", name, dirs[i].path(), &props);
        async move { KafkaStreams::start(topology, config).await.unwrap() }
    };
    let a = start_instance(0, "a").await;
    eventually("a runs the task", Duration::from_secs(60), || async {
        a.metrics().tasks.len() == 1
    })
    .await;
    let b = start_instance(1, "b").await;
    let c = start_instance(2, "c").await;
    eventually("a standby is kept", Duration::from_secs(60), || async {
        b.metrics().standby_tasks.len() + c.metrics().standby_tasks.len() == 1
    })
    .await;
    send(&kit, "c0", "plain", 1_000).await;
    eventually("c0 accepted", Duration::from_secs(60), || async {
        verdicts(&read_committed(&kit, OUTPUT).await, "c0") == ["accepted"]
    })
    .await;

    // c1's payload makes every process fail once, after the put.
    send(&kit, "c1", &format!("payload {MARKER}"), 2_000).await;
    let mut running = vec![("a", a), ("b", b), ("c", c)];
    for _ in 0..3 {
        // Whoever runs the task fails on c1, aborts and stops; the task
        // moves to the next instance (the standby's, if it has one).
        eventually(
            "an instance fails on c1",
            Duration::from_secs(120),
            || async { running.iter().any(|(_, s)| s.state() == State::Error) },
        )
        .await;
        let at = running
            .iter()
            .position(|(_, s)| s.state() == State::Error)
            .unwrap();
        let (name, stopped) = running.remove(at);
        let _ = stopped.close(Duration::from_secs(30)).await;
        eprintln!("{name} failed on c1 and stopped");
    }
    assert!(running.is_empty());
    for (i, set) in failed.iter().enumerate() {
        assert!(
            set.lock().unwrap().contains("c1"),
            "instance {i} failed on c1"
        );
    }
    // Every attempt was aborted: no output for c1, and no store holds it.
    assert!(verdicts(&read_committed(&kit, OUTPUT).await, "c1").is_empty());
    for d in &dirs {
        let ids = seen_ids(d.path());
        assert!(
            !ids.contains(&"c1".to_owned()),
            "{ids:?} in {}",
            d.path().display()
        );
    }
    assert!(
        dirs.iter().any(|d| seen_ids(d.path()) == ["c0"]),
        "the stores hold c0"
    );

    // Back to a's state directory: a has failed on c1 already, so this time
    // the command goes through, and it is accepted, not a duplicate.
    let a = start_instance(0, "a").await;
    eventually("c1 accepted", Duration::from_secs(120), || async {
        !verdicts(&read_committed(&kit, OUTPUT).await, "c1").is_empty()
    })
    .await;
    assert_eq!(
        verdicts(&read_committed(&kit, OUTPUT).await, "c1"),
        ["accepted"]
    );
    // A real duplicate is flagged.
    send(&kit, "c1", "again", 3_000).await;
    eventually(
        "the duplicate flagged",
        Duration::from_secs(120),
        || async { verdicts(&read_committed(&kit, OUTPUT).await, "c1").len() == 2 },
    )
    .await;
    assert_eq!(
        verdicts(&read_committed(&kit, OUTPUT).await, "c1"),
        ["accepted", "duplicate"]
    );
    a.close(Duration::from_secs(30)).await.unwrap();
    // `weir store scan` would see the same: the store holds each id once.
    assert_eq!(seen_ids(dirs[0].path()), ["c0", "c1"]);
}
