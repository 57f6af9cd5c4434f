//! A rolling deploy measured, on the in-process cluster under tokio's paused
//! clock (issue 15). A feeder writes keyed words at a steady rate with
//! their production time as timestamp; an independent read_committed reader
//! notes when each count becomes visible. Per task (= partition, as the
//! counts keep their word's partition) the largest input-to-visible delay
//! during the deploy is that task's worst unavailability. Scaled down from
//! the report's 6 × 2 threads, 12 partitions and 800 records/s to keep CI
//! fast; the figures are printed (`--nocapture`), never asserted.
//!
//! Checked on every sample: no task is active on two instances at once;
//! at the end, exactly-once output (each word counted once, last counts
//! equal to the recount).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::*;
use tokio::time::Instant;
use weir_client::config::consumer::{ConsumerOptions, IsolationLevel};
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_streams::KafkaStreams;

const INSTANCES: usize = 3;
const PARTITIONS: i32 = 6;
/// Records per second of virtual time.
const RATE: u64 = 100;
const KEYS: &[&str] = &[
    "kafka", "stream", "state", "store", "commit", "offset", "fence", "zombie", "rust", "weir",
    "river", "water",
];

/// Virtual milliseconds since `base`.
fn ms(base: Instant) -> i64 {
    i64::try_from(base.elapsed().as_millis()).unwrap_or(i64::MAX)
}

#[derive(Clone, Copy, Debug)]
enum Strategy {
    /// Close each instance in turn (graceful handover), restart it on its
    /// state directory and instance id, wait until it runs tasks again.
    RollingKeepState,
    /// The same, each new instance on an empty state directory.
    RollingEmptyState,
    /// Kill every instance, then start them all again on their directories.
    KillAll,
    /// Kill one instance without close and restart it 2 s later.
    CrashOne,
}

struct Figures {
    /// The largest delay before the deploy, for comparison.
    steady: i64,
    worst_per_task: BTreeMap<i32, i64>,
    deploy_ms: i64,
    moves_max: usize,
}

async fn run(strategy: Strategy) -> Figures {
    eprintln!("rolling deploy: {strategy:?}");
    let kit = testkit(1, PARTITIONS).await;
    let base = Instant::now();
    let props = [
        ("processing.guarantee", "exactly_once_v2"),
        ("num.standby.replicas", "1"),
        ("num.stream.threads", "2"),
        ("acceptable.recovery.lag", "100"),
        ("max.warmup.replicas", "6"),
        ("heartbeat.interval.ms", "250"),
    ];
    let mut dirs: Vec<tempfile::TempDir> = (0..INSTANCES)
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let ids: Vec<String> = (0..INSTANCES).map(|i| format!("i{i}")).collect();
    let config = |i: usize, dir: &std::path::Path| {
        let mut c = streams_config(&kit, "roll", &ids[i], dir, &props);
        c.instance_id = Some(ids[i].clone());
        c
    };
    let mut instances: Vec<Option<KafkaStreams>> = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        instances.push(Some(start(count_keys(), config(i, dir.path())).await));
    }

    // The feeder: RATE keyed words a second, timestamped with their
    // production time; it counts what it sent.
    let sent = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let feeding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let feeder = {
        let (kit, sent, feeding) = (Arc::clone(&kit), Arc::clone(&sent), Arc::clone(&feeding));
        tokio::spawn(async move {
            let producer =
                Producer::with_cluster(client(&kit, "feeder").await, Default::default()).unwrap();
            let mut n = 0usize;
            let mut tick = tokio::time::interval(Duration::from_millis(1_000 / RATE));
            while feeding.load(std::sync::atomic::Ordering::SeqCst) {
                tick.tick().await;
                let key = KEYS[n % KEYS.len()];
                n += 1;
                let record = ProducerRecord::new(INPUT)
                    .with_key(key.to_owned())
                    .with_timestamp(ms(base));
                producer.send(record).await.unwrap();
                *sent.lock().unwrap().entry(key.to_owned()).or_default() += 1;
            }
        })
    };
    // The reader: when each output became visible, against its input's time.
    let delays = Arc::new(Mutex::new(Vec::<(i64, i32, i64)>::new())); // (seen, partition, delay)
    let outputs = Arc::new(Mutex::new(Vec::<(String, u64)>::new()));
    let reader = {
        let (kit, delays, outputs) = (Arc::clone(&kit), Arc::clone(&delays), Arc::clone(&outputs));
        tokio::spawn(async move {
            let options = ConsumerOptions {
                isolation_level: IsolationLevel::ReadCommitted,
                fetch_max_wait: Duration::from_millis(20),
                ..ConsumerOptions::default()
            };
            let mut consumer = Consumer::with_cluster(client(&kit, "reader").await, options);
            let tps: Vec<_> = (0..PARTITIONS)
                .map(|p| TopicPartition::new(OUTPUT, p))
                .collect();
            consumer.assign(tps.clone());
            for tp in &tps {
                consumer.seek(tp, SeekTo::Earliest).unwrap();
            }
            loop {
                for r in consumer.poll_for(Duration::from_millis(20)).await.unwrap() {
                    let now = ms(base);
                    delays
                        .lock()
                        .unwrap()
                        .push((now, r.partition, now - r.timestamp));
                    let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default());
                    let value = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default());
                    outputs
                        .lock()
                        .unwrap()
                        .push((key.into_owned(), value.parse().unwrap()));
                }
            }
        })
    };

    let mut watch = Watch::default();
    let settle = |instances: &[Option<KafkaStreams>]| {
        instances.iter().flatten().all(|s| {
            let m = s.metrics();
            m.restoring_tasks == 0 && !m.tasks.is_empty()
        }) && instances
            .iter()
            .flatten()
            .map(|s| s.metrics().tasks.len())
            .sum::<usize>()
            == PARTITIONS as usize
    };
    // Warm up: every instance runs tasks, standbys caught up.
    for _ in 0..400 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        watch.check(&instances);
        if settle(&instances) && ms(base) > 15_000 {
            break;
        }
    }
    watch.moves.clear();
    let deploy_start = ms(base);

    async fn until(
        what: &str,
        instances: &[Option<KafkaStreams>],
        watch: &mut Watch,
        done: impl Fn(&[Option<KafkaStreams>]) -> bool,
    ) {
        for _ in 0..2_400 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            watch.check(instances);
            if done(instances) {
                return;
            }
        }
        let state: Vec<_> = instances
            .iter()
            .map(|s| {
                s.as_ref().map(|s| {
                    let m = s.metrics();
                    (m.tasks.len(), m.restoring_tasks, m.standby_tasks.len())
                })
            })
            .collect();
        panic!("timed out waiting for {what}: (tasks, restoring, standbys) per instance {state:?}");
    }

    match strategy {
        Strategy::RollingKeepState | Strategy::RollingEmptyState => {
            for i in 0..INSTANCES {
                let old = instances[i].take().unwrap();
                // Sampled while it closes: the handover moves tasks then.
                let closing = tokio::spawn(old.close(Duration::from_secs(60)));
                while !closing.is_finished() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    watch.check(&instances);
                }
                closing.await.unwrap().unwrap();
                if matches!(strategy, Strategy::RollingEmptyState) {
                    dirs[i] = tempfile::tempdir().unwrap();
                }
                instances[i] = Some(start(count_keys(), config(i, dirs[i].path())).await);
                until(
                    "the new instance to run tasks",
                    &instances,
                    &mut watch,
                    |s| settle(s),
                )
                .await;
            }
        }
        Strategy::KillAll => {
            for slot in instances.iter_mut() {
                slot.take().unwrap().kill();
            }
            for (i, dir) in dirs.iter().enumerate() {
                instances[i] = Some(start(count_keys(), config(i, dir.path())).await);
            }
            until("every instance to run tasks", &instances, &mut watch, |s| {
                settle(s)
            })
            .await;
        }
        Strategy::CrashOne => {
            instances[0].take().unwrap().kill();
            tokio::time::sleep(Duration::from_secs(2)).await;
            instances[0] = Some(start(count_keys(), config(0, dirs[0].path())).await);
            until(
                "the restarted instance to run tasks",
                &instances,
                &mut watch,
                |s| settle(s),
            )
            .await;
        }
    }
    let deploy_ms = ms(base) - deploy_start;
    // Let the output catch up, then stop feeding and drain.
    tokio::time::sleep(Duration::from_secs(5)).await;
    feeding.store(false, std::sync::atomic::Ordering::SeqCst);
    feeder.await.unwrap();
    let expected = sent.lock().unwrap().clone();
    let total: u64 = expected.values().sum();
    for _ in 0..1_200 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if outputs.lock().unwrap().len() as u64 >= total {
            break;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    reader.abort();
    let outputs = outputs.lock().unwrap().clone();
    assert_eq!(
        outputs.len() as u64,
        total,
        "{strategy:?}: every word counted exactly once"
    );
    let last: BTreeMap<String, u64> = outputs.into_iter().collect();
    assert_eq!(last, expected, "{strategy:?}");
    for inst in instances.into_iter().flatten() {
        inst.close(Duration::from_secs(30)).await.unwrap();
    }
    let mut worst_per_task: BTreeMap<i32, i64> = BTreeMap::new();
    let mut steady = 0;
    for (seen, partition, delay) in delays.lock().unwrap().iter() {
        if *seen < deploy_start && *seen > deploy_start - 5_000 {
            steady = steady.max(*delay);
        }
        if *seen >= deploy_start {
            let w = worst_per_task.entry(*partition).or_default();
            *w = (*w).max(*delay);
        }
    }
    Figures {
        steady,
        worst_per_task,
        deploy_ms,
        moves_max: watch.moves.values().copied().max().unwrap_or(0),
    }
}

/// Checks that no task is active on two instances at once, and counts how
/// often each task moved.
#[derive(Default)]
struct Watch {
    owner: BTreeMap<String, usize>,
    moves: BTreeMap<String, usize>,
}

impl Watch {
    fn check(&mut self, instances: &[Option<KafkaStreams>]) {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (i, inst) in instances.iter().enumerate() {
            let Some(inst) = inst else { continue };
            for task in inst.metrics().tasks.keys() {
                let t = task.to_string();
                if let Some(other) = seen.insert(t.clone(), i) {
                    panic!("task {t} active on instances {other} and {i} at once");
                }
                if self.owner.insert(t.clone(), i).is_some_and(|o| o != i) {
                    *self.moves.entry(t).or_default() += 1;
                }
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn rolling_deploys_measured() {
    let mut rows = Vec::new();
    for strategy in [
        Strategy::RollingKeepState,
        Strategy::RollingEmptyState,
        Strategy::KillAll,
        Strategy::CrashOne,
    ] {
        let f = run(strategy).await;
        rows.push((strategy, f));
    }
    println!(
        "\n{INSTANCES} instances x 2 threads, {PARTITIONS} partitions, {RATE} records/s, 1 standby, exactly-once (virtual time)"
    );
    println!(
        "| strategy | max delay before (ms) | max per-task delay during (ms) | per task (ms) | deploy time (ms) | max moves per task seen (50 ms samples) |"
    );
    println!("|---|---|---|---|---|---|");
    for (s, f) in &rows {
        let worst = f.worst_per_task.values().copied().max().unwrap_or(0);
        let per: Vec<String> = f.worst_per_task.values().map(ToString::to_string).collect();
        println!(
            "| {s:?} | {} | {worst} | {} | {} | {} |",
            f.steady,
            per.join(" "),
            f.deploy_ms,
            f.moves_max
        );
    }
}
