//! A source table (a table whose store restores from its own input topic)
//! is restored only up to the task's committed input offset, as Kafka
//! Streams does (`min(end, committed)`), never to the topic's end: the task
//! then processes from that offset against the table as it stood there. A
//! table restored to the end let a stream-table join after a failover use
//! values from the future.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::*;
use weir_client::producer::{Producer, ProducerRecord};
use weir_protocol::ApiKey;
use weir_streams::Topology;
use weir_streams::dsl::{Materialized, StreamsBuilder};
use weir_testkit::{Intercept, InterceptAction, RequestMatcher};

const ORDERS: &str = "orders";
const CUSTOMERS: &str = "customers";
const APP: &str = "src-limit";

fn join() -> Topology {
    let builder = StreamsBuilder::new();
    let names = builder.table::<String, String>(CUSTOMERS, Materialized::as_("names"));
    builder
        .stream::<String, String>(ORDERS)
        .left_join(&names, |o, n| {
            format!("{o}:{}", n.map_or("?", String::as_str))
        })
        .to(OUTPUT);
    builder.build().unwrap()
}

async fn send(kit: &Arc<weir_testkit::Cluster>, topic: &str, key: &str, value: &str, ts: i64) {
    let producer = Producer::with_cluster(client(kit, "feeder").await, Default::default()).unwrap();
    let r = ProducerRecord::new(topic)
        .with_key(key.to_owned())
        .with_value(value.to_owned())
        .with_timestamp(ts);
    producer.enqueue(r).await.unwrap().await.unwrap();
    producer.close().await;
}

async fn committed(kit: &Arc<weir_testkit::Cluster>, topic: &str) -> Option<i64> {
    let client = client(kit, "checker").await;
    let tp = weir_group::assignor::TopicPartition::new(topic, 0);
    weir_group::offsets::fetch_committed(&client, APP, std::slice::from_ref(&tp), true)
        .await
        .unwrap()
        .get(&tp)
        .copied()
}

#[tokio::test(start_paused = true)]
async fn a_failed_over_join_uses_the_table_as_of_its_committed_offset() {
    let kit = testkit(2, 1).await;
    for t in [ORDERS, CUSTOMERS] {
        kit.create_topic(t, 1, std::iter::empty::<(String, String)>())
            .await
            .unwrap();
    }
    // The table and the stream are on different brokers, so a fetch of one
    // can be held back while the other is answered.
    kit.move_leader(CUSTOMERS, 0, 0).await.unwrap();
    kit.move_leader(ORDERS, 0, 1).await.unwrap();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [("processing.guarantee", "exactly_once_v2")];

    // a processes k = v1 and commits it, then crashes.
    send(&kit, CUSTOMERS, "k", "v1", 100).await;
    let a = start(
        join(),
        streams_config(&kit, APP, "a", dirs[0].path(), &props),
    )
    .await;
    eventually("a committed v1", Duration::from_secs(60), || async {
        committed(&kit, CUSTOMERS).await == Some(1)
    })
    .await;
    crash(&kit, 2, "a", a).await;

    // The order (ts 150) and k = v2 (ts 200) come after a's last commit.
    send(&kit, ORDERS, "k", "o1", 150).await;
    send(&kit, CUSTOMERS, "k", "v2", 200).await;

    // b takes the task over: its fetches of the table's topic are answered
    // 200 ms late, so the order is processed before v2 is read.
    kit.intercept(Intercept::new(
        RequestMatcher::api(ApiKey::Fetch).client("b").broker(0),
        InterceptAction::Delay(Duration::from_millis(200)),
    ))
    .await
    .unwrap();
    let b = start(
        join(),
        streams_config(&kit, APP, "b", dirs[1].path(), &props),
    )
    .await;
    eventually("b joined the order", Duration::from_secs(60), || async {
        !read_committed(&kit, OUTPUT).await.is_empty()
    })
    .await;
    let out = read_committed(&kit, OUTPUT).await;
    eprintln!("output: {out:?}");
    assert_eq!(
        out.iter().map(|(_, _, v)| v.as_str()).collect::<Vec<_>>(),
        ["o1:v1"],
        "the order (ts 150) was joined with a table restored past the committed offset"
    );
    kit.clear_faults().await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
}

/// A standby of a source table is capped the same way: it follows the
/// table's topic only up to the active task's committed offset.
#[tokio::test(start_paused = true)]
async fn a_source_tables_standby_stays_at_the_committed_offset() {
    let kit = testkit(1, 1).await;
    for t in [ORDERS, CUSTOMERS] {
        kit.create_topic(t, 1, std::iter::empty::<(String, String)>())
            .await
            .unwrap();
    }
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [
        ("commit.interval.ms", "5000"),
        ("num.standby.replicas", "1"),
    ];
    send(&kit, CUSTOMERS, "k", "v1", 100).await;
    let a = start(
        join(),
        streams_config(&kit, APP, "a", dirs[0].path(), &props),
    )
    .await;
    eventually("a committed v1", Duration::from_secs(60), || async {
        committed(&kit, CUSTOMERS).await == Some(1)
    })
    .await;
    let b = start(
        join(),
        streams_config(&kit, APP, "b", dirs[1].path(), &props),
    )
    .await;
    let stale = b
        .kv_store::<String, String>("names")
        .unwrap()
        .enable_stale_stores();
    eventually("b's standby holds v1", Duration::from_secs(60), || async {
        stale.get(&"k".to_owned()).unwrap().as_deref() == Some("v1")
    })
    .await;
    assert!(
        a.metrics().tasks.len() == 1 && b.metrics().standby_tasks.len() == 1,
        "a runs the task, b keeps its standby"
    );
    // v2 is processed by a but not committed for the next 5 s; the standby
    // follows its topic every 500 ms meanwhile.
    let committed_before = committed(&kit, CUSTOMERS).await;
    send(&kit, CUSTOMERS, "k", "v2", 200).await;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if committed(&kit, CUSTOMERS).await != committed_before {
            break;
        }
        assert_eq!(
            stale.get(&"k".to_owned()).unwrap().as_deref(),
            Some("v1"),
            "the standby read the table's topic past the active's committed offset"
        );
    }
    eventually(
        "the standby follows a's commit",
        Duration::from_secs(30),
        || async { stale.get(&"k".to_owned()).unwrap().as_deref() == Some("v2") },
    )
    .await;
    a.close(Duration::from_secs(30)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
}

/// Under at-least-once a worker whose tasks have written nothing (here a
/// table's updates, which write no changelog and forward nothing) still
/// commits their input offsets and stores at its interval.
#[tokio::test(start_paused = true)]
async fn a_task_that_writes_nothing_commits_under_at_least_once() {
    let kit = testkit(1, 1).await;
    for t in [ORDERS, CUSTOMERS] {
        kit.create_topic(t, 1, std::iter::empty::<(String, String)>())
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    send(&kit, CUSTOMERS, "k", "v1", 100).await;
    let a = start(
        join(),
        streams_config(
            &kit,
            APP,
            "a",
            dir.path(),
            &[("commit.interval.ms", "1000")],
        ),
    )
    .await;
    eventually("a processed v1", Duration::from_secs(30), || async {
        a.metrics().processed == 1
    })
    .await;
    // Two commit intervals.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        committed(&kit, CUSTOMERS).await,
        Some(1),
        "the table's input offset was never committed"
    );
    a.close(Duration::from_secs(30)).await.unwrap();
}
