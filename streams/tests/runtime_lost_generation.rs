//! A member that lost its partitions writes nothing more for them, even
//! once it has rejoined the group, until its instance has closed the tasks
//! it lost: writes and every commit go through the lease of the assignment
//! the instance last handled, which a loss closes for good.
//!
//! The instance is kept from reading its member's events the way a real one
//! is: one of its stream threads is stuck (here, descheduled in a write for
//! 40 s), so the instance stops polling the group (G6) and the `Lost` stays
//! queued while the member is cut off, expelled, and rejoins.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use support::*;
use weir_client::producer::{Producer, ProducerRecord};
use weir_protocol::ApiKey;
use weir_streams::processor::{Processor, ProcessorContext};
use weir_streams::task::TaskId;
use weir_streams::{KafkaStreams, ProcessError, Record, Topology, TopologyBuilder};
use weir_testkit::{Intercept, InterceptAction, RequestMatcher};

const APP: &str = "lg";
const PAUSE: Duration = Duration::from_secs(40);
const UNKNOWN_MEMBER_ID: i16 = 25;

struct Pass;

impl Processor<String, String> for Pass {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, String>,
    ) -> Result<(), ProcessError> {
        ctx.forward(r);
        Ok(())
    }
}

/// input → output, stateless.
fn pass() -> Topology {
    let mut b = TopologyBuilder::new();
    let input = b.source::<String, String>("in", &[INPUT]);
    let node = b.processor("pass", &[&input], || Pass, &[]);
    b.sink("out", &[&node], OUTPUT);
    b.build().unwrap()
}

async fn send(kit: &Arc<weir_testkit::Cluster>, partition: u32, value: &str) {
    let producer = Producer::with_cluster(client(kit, "feeder").await, Default::default()).unwrap();
    let mut r = ProducerRecord::new(INPUT)
        .with_key(value.to_owned())
        .with_value(value.to_owned())
        .with_timestamp(1_000);
    r.partition = Some(i32::try_from(partition).unwrap());
    producer.enqueue(r).await.unwrap().await.unwrap();
    producer.close().await;
}

/// How many times each value is in the output, as a read_committed reader
/// sees it.
async fn output_counts(kit: &Arc<weir_testkit::Cluster>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (_, _, v) in read_committed(kit, OUTPUT).await {
        *counts.entry(v).or_default() += 1;
    }
    counts
}

/// A config for instance `id` whose first write after `armed` is set
/// pauses for [`PAUSE`].
fn paused_config(
    kit: &Arc<weir_testkit::Cluster>,
    id: &str,
    dir: &std::path::Path,
    props: &[(&str, &str)],
    armed: &Arc<AtomicBool>,
    paused: &Arc<AtomicU32>,
) -> weir_streams::StreamsConfig {
    let mut config = streams_config(kit, APP, id, dir, props);
    let (arm, count) = (Arc::clone(armed), Arc::clone(paused));
    config.pause_before_write = weir_streams::config::PauseHook(Some(Arc::new(move || {
        arm.swap(false, Ordering::SeqCst).then(|| {
            count.fetch_add(1, Ordering::SeqCst);
            PAUSE
        })
    })));
    config
}

/// `a`'s worker pauses in a write (`pause_first`); once the instance has
/// stopped reading events (a stream thread stuck for 5 s), `a`'s member is
/// told it is unknown to the group at its next heartbeat: it loses its
/// partitions (the `Lost` stays queued) and rejoins, its first JoinGroup
/// held 15 s. Meanwhile the coordinator expires `a`'s session and `b` takes
/// every task. Returns once `a`'s member has rejoined (a SyncGroup of its
/// own, then a heartbeat).
async fn lose_and_rejoin(
    kit: &Arc<weir_testkit::Cluster>,
    b: &KafkaStreams,
    tasks: usize,
    pause_first: impl std::future::Future<Output = ()>,
) {
    pause_first.await;
    // Past the instance's stall detection (5 s): a fault schedule on the
    // paused clock, not a wait for something to happen.
    tokio::time::sleep(Duration::from_secs(6)).await;
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::JoinGroup).client("a"),
            InterceptAction::Delay(Duration::from_secs(15)),
        )
        .times(1),
    )
    .await
    .unwrap();
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::Heartbeat).client("a"),
            InterceptAction::Error(UNKNOWN_MEMBER_ID),
        )
        .times(1),
    )
    .await
    .unwrap();
    let lost = tokio::time::Instant::now();
    eventually("b runs every task", Duration::from_secs(30), || async {
        b.metrics().tasks.len() == tasks
    })
    .await;
    eventually("a's member rejoined", Duration::from_secs(30), || async {
        let log = kit.requests().await.unwrap();
        let synced = log.iter().find(|r| {
            r.at > lost && r.api_key == ApiKey::SyncGroup && r.client_id.as_deref() == Some("a")
        });
        synced.is_some_and(|s| {
            log.iter().any(|r| {
                r.at > s.at && r.api_key == ApiKey::Heartbeat && r.client_id.as_deref() == Some("a")
            })
        })
    })
    .await;
}

fn on_worker(tasks: &BTreeMap<TaskId, usize>, worker: usize) -> Option<TaskId> {
    tasks.iter().find(|(_, w)| **w == worker).map(|(t, _)| *t)
}

/// At-least-once, the review's interleaving: task `t` of `a` sees no
/// record while `a` is cut off, so it stays open on its worker; after `a`'s
/// member rejoined, `t`'s next record must not be processed and sent by
/// `a`, whose instance has not yet closed `t`. Its new owner `b` outputs it
/// once.
#[tokio::test(start_paused = true)]
async fn a_task_lost_while_its_instance_was_busy_sends_nothing_after_the_rejoin() {
    let kit = testkit(3, 4).await;
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [("commit.interval.ms", "1000")];
    let (armed, paused) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU32::new(0)),
    );
    let mut props_a = props.to_vec();
    props_a.push(("num.stream.threads", "2"));
    let a = start(
        pass(),
        paused_config(&kit, "a", dirs[0].path(), &props_a, &armed, &paused),
    )
    .await;
    let b = start(
        pass(),
        streams_config(&kit, APP, "b", dirs[1].path(), &props),
    )
    .await;
    eventually(
        "a runs a task on each worker",
        Duration::from_secs(60),
        || async {
            let tasks = a.metrics().tasks;
            on_worker(&tasks, 0).is_some()
                && on_worker(&tasks, 1).is_some()
                && !b.metrics().tasks.is_empty()
                && tasks.len() + b.metrics().tasks.len() == 4
                && a.state() == weir_streams::State::Running
        },
    )
    .await;
    let tasks = a.metrics().tasks;
    let (x, t) = (on_worker(&tasks, 0).unwrap(), on_worker(&tasks, 1).unwrap());
    eprintln!("a runs {tasks:?}: x = {x}, t = {t}");

    // x's worker is descheduled at its next write, so the instance stops
    // reading events; a is cut off, expelled, and rejoins.
    lose_and_rejoin(&kit, &b, 4, async {
        armed.store(true, Ordering::SeqCst);
        send(&kit, x.partition, "x-1").await;
        eventually("a's worker paused", Duration::from_secs(20), || async {
            paused.load(Ordering::SeqCst) == 1
        })
        .await;
    })
    .await;

    send(&kit, t.partition, "t-1").await;
    eventually("b outputs t-1", Duration::from_secs(20), || async {
        output_counts(&kit).await.contains_key("t-1")
    })
    .await;
    // The paused worker resumes, the instance reads what was lost.
    tokio::time::sleep(PAUSE).await;
    let counts = output_counts(&kit).await;
    eprintln!("outputs: {counts:?}");
    assert_eq!(
        counts.get("t-1"),
        Some(&1),
        "a sent t-1 for a task it had lost"
    );
    assert_eq!(
        counts.get("x-1"),
        Some(&1),
        "a sent x-1 after its lease ended"
    );
    a.close(Duration::from_secs(30)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
}

/// Exactly-once: `a` is closed while its `Lost` is still queued (its only
/// stream thread stuck in a write). The shutdown commit must not commit the
/// lost task's work under the generation `a`'s member rejoined with: that
/// work was redone by `b`, so its outputs would show twice.
#[tokio::test(start_paused = true)]
async fn closing_with_a_loss_queued_commits_nothing_for_the_lost_task() {
    let kit = testkit(3, 2).await;
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [("processing.guarantee", "exactly_once_v2")];
    let (armed, paused) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU32::new(0)),
    );
    let a = start(
        pass(),
        paused_config(&kit, "a", dirs[0].path(), &props, &armed, &paused),
    )
    .await;
    let b = start(
        pass(),
        streams_config(&kit, APP, "b", dirs[1].path(), &props),
    )
    .await;
    eventually(
        "a and b run a task each",
        Duration::from_secs(60),
        || async {
            a.metrics().tasks.len() == 1
                && b.metrics().tasks.len() == 1
                && a.state() == weir_streams::State::Running
        },
    )
    .await;
    let x = *a.metrics().tasks.keys().next().unwrap();

    lose_and_rejoin(&kit, &b, 2, async {
        armed.store(true, Ordering::SeqCst);
        send(&kit, x.partition, "x-1").await;
        eventually("a's worker paused", Duration::from_secs(20), || async {
            paused.load(Ordering::SeqCst) == 1
        })
        .await;
    })
    .await;
    eventually("b outputs x-1", Duration::from_secs(20), || async {
        output_counts(&kit).await.contains_key("x-1")
    })
    .await;
    // a closes; its handover budget runs out while its thread is stuck, so
    // it stops with the loss unread; the thread resumes and shuts down.
    a.close(Duration::from_secs(30)).await.unwrap();
    let counts = output_counts(&kit).await;
    eprintln!("outputs: {counts:?}");
    assert_eq!(
        counts.get("x-1"),
        Some(&1),
        "x-1 committed twice: by b, and by a's shutdown commit"
    );
    b.close(Duration::from_secs(30)).await.unwrap();
}
