//! A mixed consumer group: librdkafka consumers (confluent-kafka,
//! cooperative-sticky, through `kafka_tool.py group-consume`) and Weir
//! members in one group on weir-testkit. Members come and go; the test
//! checks that no partition is ever owned by two members at once and that
//! every record is consumed.
//!
//! Needs `WEIR_PYTHON` and `WEIR_KAFKA_TOOL` (scripts/test.sh sets them);
//! skipped with a message without them, failed if `WEIR_EXPECT_BROKER=1`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use weir_client::config::ClientConfig;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerConfig};
use weir_client::config::producer::ProducerConfig;
use weir_client::producer::{Producer, ProducerRecord};
use weir_group::group_consumer::{AssignmentChange, GroupConsumer};
use weir_group::member::{MemberConfig, ShutdownMode};

const TOPIC: &str = "mixed";
const PARTITIONS: i32 = 6;
const RECORDS: usize = 600;
const GROUP: &str = "mixed-group";
/// How long the group may take to settle after a member came or went.
const LIMIT: Duration = Duration::from_secs(30);

/// (wall seconds, member, event) where event is "assigned"/"revoked"/"lost"/"closed".
type Events = Arc<Mutex<Vec<(f64, String, String, Vec<i32>)>>>;
type Consumed = Arc<Mutex<BTreeSet<(i32, i64)>>>;

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn tool() -> Option<(String, String)> {
    match (
        std::env::var("WEIR_PYTHON"),
        std::env::var("WEIR_KAFKA_TOOL"),
    ) {
        (Ok(p), Ok(t)) if !p.is_empty() && !t.is_empty() => Some((p, t)),
        _ => {
            let why = "mixed_group skipped: WEIR_PYTHON / WEIR_KAFKA_TOOL are not set (scripts/test.sh sets them)";
            assert!(
                std::env::var("WEIR_EXPECT_BROKER").as_deref() != Ok("1"),
                "{why}"
            );
            println!("{why}");
            None
        }
    }
}

/// Starts a librdkafka member; its events and records land in the shared logs.
fn librdkafka_member(
    (python, tool): &(String, String),
    bootstrap: &str,
    name: &str,
    events: &Events,
    consumed: &Consumed,
) -> (std::process::ChildStdin, std::thread::JoinHandle<()>) {
    let mut child = Command::new(python)
        .args([
            tool.as_str(),
            "group-consume",
            "-b",
            bootstrap,
            "-t",
            TOPIC,
            "-g",
            GROUP,
        ])
        // It leaves when the test closes its stdin; the cap only ends a
        // member the test forgot.
        .args([
            "--until-stdin-closes",
            "--run-for",
            &LIMIT.as_secs().saturating_mul(6).to_string(),
            "-X",
            &format!("client.id={name}"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start kafka_tool.py");
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (events, consumed, name) = (Arc::clone(events), Arc::clone(consumed), name.to_owned());
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            let ts = v["ts"].as_f64().unwrap();
            if let Some(event) = v["event"].as_str() {
                let partitions = v["partitions"]
                    .as_array()
                    .map(|a| a.iter().map(|p| p.as_i64().unwrap() as i32).collect())
                    .unwrap_or_default();
                events
                    .lock()
                    .unwrap()
                    .push((ts, name.clone(), event.to_owned(), partitions));
            } else {
                let p = v["partition"].as_i64().unwrap() as i32;
                consumed
                    .lock()
                    .unwrap()
                    .insert((p, v["offset"].as_i64().unwrap()));
            }
        }
        let status = child.wait().unwrap();
        assert!(status.success(), "{name}: kafka_tool.py failed: {status}");
    });
    (stdin, reader)
}

/// Starts a Weir member that polls until told to stop, then leaves (planned).
fn weir_member(
    bootstrap: &str,
    name: &str,
    events: &Events,
    consumed: &Consumed,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let config = ConsumerConfig::from_properties(&[
        ("bootstrap.servers", bootstrap),
        ("client.id", name),
        ("fetch.max.wait.ms", "100"),
        ("max.poll.records", "20"),
    ])
    .unwrap()
    .with_auto_offset_reset(AutoOffsetReset::Earliest);
    let member = MemberConfig::new(GROUP, [TOPIC])
        .with_session_timeout(Duration::from_secs(6))
        .with_heartbeat_interval(Duration::from_secs(1));
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let (events, consumed, name) = (Arc::clone(events), Arc::clone(consumed), name.to_owned());
    let task = tokio::spawn(async move {
        let mut consumer = GroupConsumer::connect(config, member).await.unwrap();
        let log = Arc::clone(&events);
        let who = name.clone();
        consumer.set_listener(Box::new(move |change, partitions| {
            let event = match change {
                AssignmentChange::Assigned => "assigned",
                AssignmentChange::Revoked => "revoked",
                AssignmentChange::Lost => "lost",
            };
            let ps = partitions.iter().map(|tp| tp.partition).collect();
            log.lock()
                .unwrap()
                .push((now(), who.clone(), event.to_owned(), ps));
        }));
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                records = consumer.poll() => {
                    for r in records.unwrap() {
                        consumed.lock().unwrap().insert((r.partition, r.offset));
                    }
                    // Some processing time, so handovers happen mid-stream.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        consumer.close(ShutdownMode::Planned).await.unwrap();
        events
            .lock()
            .unwrap()
            .push((now(), name, "closed".into(), Vec::new()));
    });
    (stop, task)
}

/// Who owns which partitions after every member's events so far, replayed
/// in time order.
fn owners(events: &Events) -> BTreeMap<String, BTreeSet<i32>> {
    let mut sorted = events.lock().unwrap().clone();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut owned: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for (_, who, event, partitions) in sorted {
        let set = owned.entry(who).or_default();
        match event.as_str() {
            "assigned" => set.extend(partitions),
            "revoked" | "lost" => partitions.iter().for_each(|p| {
                set.remove(p);
            }),
            "closed" => set.clear(),
            _ => {}
        }
    }
    owned.retain(|_, set| !set.is_empty());
    owned
}

/// Waits (polling every 50 ms, at most [`LIMIT`]) until exactly `members`
/// own partitions, each at least one, and all of them between them: the
/// group has settled after a member came or went.
async fn wait_settled(events: &Events, members: &[&str]) {
    let started = std::time::Instant::now();
    loop {
        let owned = owners(events);
        let all: BTreeSet<i32> = owned.values().flatten().copied().collect();
        let who: BTreeSet<&str> = owned.keys().map(String::as_str).collect();
        if who == members.iter().copied().collect() && all.len() == PARTITIONS as usize {
            return;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the group did not settle on {members:?} within {LIMIT:?}: owners {owned:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Replays every member's events in time order; panics on a partition
/// owned by two members at once.
fn assert_exclusive(events: &[(f64, String, String, Vec<i32>)]) {
    let mut sorted = events.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut owner: BTreeMap<i32, String> = BTreeMap::new();
    for (ts, who, event, partitions) in &sorted {
        match event.as_str() {
            "assigned" => {
                for p in partitions {
                    if let Some(other) = owner.insert(*p, who.clone()) {
                        assert_eq!(
                            &other, who,
                            "partition {p} given to {who} at {ts} while {other} owned it; events: {sorted:#?}"
                        );
                    }
                }
            }
            "revoked" | "lost" => {
                for p in partitions {
                    owner.remove(p);
                }
            }
            // A closed member owns nothing (librdkafka revokes in close()).
            "closed" => owner.retain(|_, o| o != who),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_and_weir_members_share_a_cooperative_group() {
    let Some(tool) = tool() else { return };
    let cluster = weir_testkit::Cluster::builder().build().await.unwrap();
    cluster
        .create_topic(TOPIC, PARTITIONS, std::iter::empty::<(String, String)>())
        .await
        .unwrap();
    let bootstrap = cluster.bootstrap();
    let producer = Producer::new(
        ProducerConfig::from_properties(&[("bootstrap.servers", bootstrap.as_str())]).unwrap(),
    )
    .await
    .unwrap();
    for i in 0..RECORDS {
        producer
            .send(
                ProducerRecord::new(TOPIC)
                    .with_partition((i % PARTITIONS as usize) as i32)
                    .with_value(format!("{i}")),
            )
            .await
            .unwrap();
    }
    producer.close().await;
    let _ = ClientConfig::default();

    let events: Events = Arc::default();
    let consumed: Consumed = Arc::default();
    // Each member comes or goes once the group has settled after the last
    // change: every member then owns some partitions.
    let (l1_in, l1) = librdkafka_member(&tool, &bootstrap, "rdkafka-1", &events, &consumed);
    wait_settled(&events, &["rdkafka-1"]).await;
    let (stop_w1, w1) = weir_member(&bootstrap, "weir-1", &events, &consumed);
    wait_settled(&events, &["rdkafka-1", "weir-1"]).await;
    let (l2_in, l2) = librdkafka_member(&tool, &bootstrap, "rdkafka-2", &events, &consumed);
    wait_settled(&events, &["rdkafka-1", "weir-1", "rdkafka-2"]).await;
    let (stop_w2, w2) = weir_member(&bootstrap, "weir-2", &events, &consumed);
    wait_settled(&events, &["rdkafka-1", "weir-1", "rdkafka-2", "weir-2"]).await;
    // A Weir member leaves, then a librdkafka one (its stdin closed).
    stop_w1.send(()).unwrap();
    w1.await.unwrap();
    wait_settled(&events, &["rdkafka-1", "rdkafka-2", "weir-2"]).await;
    drop(l2_in);
    tokio::task::spawn_blocking(move || l2.join().unwrap())
        .await
        .unwrap();
    wait_settled(&events, &["rdkafka-1", "weir-2"]).await;
    // Everything is consumed before the last two leave.
    let expected: BTreeSet<(i32, i64)> = (0..PARTITIONS)
        .flat_map(|p| (0..(RECORDS as i64 / PARTITIONS as i64)).map(move |o| (p, o)))
        .collect();
    let started = std::time::Instant::now();
    while !expected.is_subset(&*consumed.lock().unwrap()) && started.elapsed() < LIMIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(l1_in);
    tokio::task::spawn_blocking(move || l1.join().unwrap())
        .await
        .unwrap();
    stop_w2.send(()).unwrap();
    w2.await.unwrap();

    let events = events.lock().unwrap().clone();
    for (ts, who, event, partitions) in &events {
        println!("{ts:.3} {who:<10} {event:<8} {partitions:?}");
    }
    assert_exclusive(&events);
    let members: BTreeSet<&str> = events
        .iter()
        .filter(|e| e.2 == "assigned" && !e.3.is_empty())
        .map(|e| e.1.as_str())
        .collect();
    assert!(
        members.contains("weir-1") && members.contains("weir-2"),
        "Weir members got partitions: {events:#?}"
    );
    assert!(
        members.contains("rdkafka-1"),
        "librdkafka got partitions: {events:#?}"
    );
    let consumed = consumed.lock().unwrap();
    let missing: Vec<_> = expected.difference(&consumed).take(10).collect();
    assert!(missing.is_empty(), "not consumed (first 10): {missing:?}");
}
