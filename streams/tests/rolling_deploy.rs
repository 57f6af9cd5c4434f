//! A rolling deploy measured, on the in-process cluster under tokio's paused
//! clock (issue 15). A feeder writes keyed words at a steady rate with
//! their production time as timestamp; an independent read_committed reader
//! notes when each count becomes visible. Per task (= partition, as the
//! counts keep their word's partition) the largest input-to-visible delay
//! during the deploy is that task's worst unavailability.
//!
//! Two shapes ([`Shape`]): [`SMALL`] (3 instances × 2 threads, 6
//! partitions, 100 records/s, one store, 1 standby) runs in CI;
//! [`REPORT`], the report's app (6 × 2 threads, 12 partitions, 800
//! records/s, three stores, 2 standbys, 6 warmups, acceptable lag 6000),
//! is `#[ignore]`d for its run time:
//! `cargo test --release -p weir-streams --test rolling_deploy -- --ignored --nocapture`
//! (`WEIR_DEPLOY_RUNS=N` repeats each strategy, `WEIR_DEPLOY_STRATEGY`
//! picks one by name). The delays are printed, never asserted.
//!
//! Checked on every run (these fail the test): no task is active on two
//! instances at once, on every 50 ms sample and from the instances' own
//! ownership histories (no two active holdings of a task on different
//! instances overlap); no task's active owner changes instance more than
//! twice between the deploy's start and its end (with empty state
//! directories 3-4 times in 3 of 4 runs, until the leader learned each
//! instance's warmups: `ClientState::warmups`); at the end, exactly-once
//! output (each word counted once, last counts equal to the recount).

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
use weir_streams::processor::{Processor, ProcessorContext};
use weir_streams::runtime::{Role, TaskMonitor};
use weir_streams::state::KvStoreRef;
use weir_streams::{KafkaStreams, ProcessError, Record, Topology, TopologyBuilder};

/// The app and its config under test.
#[derive(Clone, Copy, Debug)]
struct Shape {
    name: &'static str,
    instances: usize,
    threads: usize,
    partitions: i32,
    /// Records per second of virtual time.
    rate: u64,
    /// Key-value stores written per record (1: the count; 3: the count, the
    /// key's last timestamp and the task's record total), so a task has as
    /// many changelogs.
    stores: usize,
    standbys: usize,
    warmups: usize,
    acceptable_lag: u64,
}

/// The CI shape.
const SMALL: Shape = Shape {
    name: "small",
    instances: 3,
    threads: 2,
    partitions: 6,
    rate: 100,
    stores: 1,
    standbys: 1,
    warmups: 6,
    acceptable_lag: 100,
};

/// The report's app (issue 15), its stores' sizes aside.
const REPORT: Shape = Shape {
    name: "report",
    instances: 6,
    threads: 2,
    partitions: 12,
    rate: 800,
    stores: 3,
    standbys: 2,
    warmups: 6,
    acceptable_lag: 6000,
};

/// The most times a task's active owner may change instance in a deploy.
const MAX_REASSIGNMENTS: usize = 2;

impl Shape {
    /// The words fed: enough that every partition gets some.
    fn keys(&self) -> Vec<String> {
        (0..self.partitions * 8).map(|n| format!("w{n}")).collect()
    }

    fn topology(&self) -> Topology {
        if self.stores == 1 {
            return count_keys();
        }
        assert_eq!(self.stores, 3, "shapes have one store or three");
        let mut b = TopologyBuilder::new();
        let counts = b.kv_store::<String, u64>("counts");
        let last = b.kv_store::<String, i64>("last-seen");
        let total = b.kv_store::<String, u64>("total");
        let words = b.source::<String, ()>("words", &[INPUT]);
        let stores = (counts.clone(), last.clone(), total.clone());
        let counted = b.processor(
            "count",
            &[&words],
            move || CountThree(stores.0.clone(), stores.1.clone(), stores.2.clone()),
            &[&counts, &last, &total],
        );
        b.sink("out", &[&counted], OUTPUT);
        b.build().unwrap()
    }
}

/// Counts each key (forwarded), and writes its last timestamp and the
/// task's record total to two more stores.
struct CountThree(
    KvStoreRef<String, u64>,
    KvStoreRef<String, i64>,
    KvStoreRef<String, u64>,
);

impl Processor<String, ()> for CountThree {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, ()>,
    ) -> Result<(), ProcessError> {
        let counts = ctx.kv_store(&self.0)?;
        let n = counts.get(&r.key)?.unwrap_or(0) + 1;
        counts.put(&r.key, &n, r.timestamp)?;
        ctx.kv_store(&self.1)?
            .put(&r.key, &r.timestamp, r.timestamp)?;
        let total = ctx.kv_store(&self.2)?;
        let all = "all".to_owned();
        let t = total.get(&all)?.unwrap_or(0) + 1;
        total.put(&all, &t, r.timestamp)?;
        ctx.forward(Record::new(r.key, n.to_string(), r.timestamp));
        Ok(())
    }
}

/// Virtual milliseconds since `base`.
fn ms(base: Instant) -> i64 {
    i64::try_from(base.elapsed().as_millis()).unwrap_or(i64::MAX)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

const STRATEGIES: [Strategy; 4] = [
    Strategy::RollingKeepState,
    Strategy::RollingEmptyState,
    Strategy::KillAll,
    Strategy::CrashOne,
];

struct Figures {
    /// The largest delay before the deploy, for comparison.
    steady: i64,
    worst_per_task: BTreeMap<i32, i64>,
    deploy_ms: i64,
    /// Per task, how often its active owner changed instance between the
    /// deploy's start and its end (from the instances' ownership
    /// histories).
    reassignments: BTreeMap<String, usize>,
    /// Per task, how many active holdings began in that time (a restart on
    /// the same instance id counts here, not above).
    holdings: BTreeMap<String, usize>,
    /// The largest delay's partition, and when (ms from the deploy's start)
    /// its late output was seen.
    worst_at: (i32, i64),
    /// The longest `close` of an instance in a rolling strategy: one that
    /// took its whole handover budget (half of `close`'s 60 s) timed out
    /// with tasks still waiting for a warmup.
    longest_close_ms: i64,
}

/// A close that took this long ran out its handover budget.
const HANDOVER_BUDGET_MS: i64 = 30_000;

/// Every instance started in a run, with its ownership history (readable
/// after close) and when it was killed, if it was.
struct Started {
    client_id: String,
    monitor: TaskMonitor,
    killed_at: Option<Instant>,
}

async fn run(shape: Shape, strategy: Strategy, guarantee: &str) -> Figures {
    eprintln!("rolling deploy: {} {strategy:?} {guarantee}", shape.name);
    let exactly_once = guarantee == "exactly_once_v2";
    let kit = testkit(1, shape.partitions).await;
    let base = Instant::now();
    let (standbys, threads, lag) = (
        shape.standbys.to_string(),
        shape.threads.to_string(),
        shape.acceptable_lag.to_string(),
    );
    let warmups = shape.warmups.to_string();
    let props = [
        ("processing.guarantee", guarantee),
        ("num.standby.replicas", standbys.as_str()),
        ("num.stream.threads", threads.as_str()),
        ("acceptable.recovery.lag", lag.as_str()),
        ("max.warmup.replicas", warmups.as_str()),
        ("heartbeat.interval.ms", "250"),
    ];
    let mut dirs: Vec<tempfile::TempDir> = (0..shape.instances)
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let ids: Vec<String> = (0..shape.instances).map(|i| format!("i{i}")).collect();
    let config = |i: usize, dir: &std::path::Path| {
        let mut c = streams_config(&kit, "roll", &ids[i], dir, &props);
        c.instance_id = Some(ids[i].clone());
        c
    };
    let mut started: Vec<Started> = Vec::new();
    // Starts instance `i` on `dir`, noting it in `started`; returns its
    // index there.
    async fn launch(
        topology: Topology,
        config: weir_streams::StreamsConfig,
        started: &mut Vec<Started>,
    ) -> (KafkaStreams, usize) {
        let client_id = config.instance_id.clone().unwrap_or_default();
        let s = start(topology, config).await;
        started.push(Started {
            client_id,
            monitor: s.task_monitor(),
            killed_at: None,
        });
        (s, started.len() - 1)
    }
    let mut instances: Vec<Option<KafkaStreams>> = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let (s, _) = launch(shape.topology(), config(i, dir.path()), &mut started).await;
        instances.push(Some(s));
    }
    // Which `started` entry each slot holds.
    let mut slot_started: Vec<usize> = (0..shape.instances).collect();

    // The feeder: `rate` keyed words a second, timestamped with their
    // production time; it counts what it sent.
    let keys = shape.keys();
    let sent = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let feeding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let feeder = {
        let (kit, sent, feeding) = (Arc::clone(&kit), Arc::clone(&sent), Arc::clone(&feeding));
        tokio::spawn(async move {
            let producer =
                Producer::with_cluster(client(&kit, "feeder").await, Default::default()).unwrap();
            let mut n = 0usize;
            let mut acks = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / shape.rate));
            while feeding.load(std::sync::atomic::Ordering::SeqCst) {
                tick.tick().await;
                let key = &keys[n % keys.len()];
                n += 1;
                let record = ProducerRecord::new(INPUT)
                    .with_key(key.clone())
                    .with_timestamp(ms(base));
                acks.push(producer.enqueue(record).await.unwrap());
                *sent.lock().unwrap().entry(key.clone()).or_default() += 1;
            }
            producer.flush().await;
            for a in acks {
                a.await.unwrap();
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
            let tps: Vec<_> = (0..shape.partitions)
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

    let mut watch = Watch;
    let settle = |instances: &[Option<KafkaStreams>]| {
        instances.iter().flatten().all(|s| {
            let m = s.metrics();
            m.restoring_tasks == 0 && !m.tasks.is_empty()
        }) && instances
            .iter()
            .flatten()
            .map(|s| s.metrics().tasks.len())
            .sum::<usize>()
            == shape.partitions as usize
    };
    // Warm up: every instance runs tasks, standbys caught up.
    for _ in 0..1_200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        watch.check(&instances);
        if settle(&instances) && ms(base) > 15_000 {
            break;
        }
    }
    assert!(
        settle(&instances),
        "{strategy:?}: never settled before the deploy"
    );
    let deploy_start = ms(base);
    let deploy_start_at = Instant::now();

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

    let mut longest_close_ms = 0;
    match strategy {
        Strategy::RollingKeepState | Strategy::RollingEmptyState => {
            for i in 0..shape.instances {
                let old = instances[i].take().unwrap();
                // Sampled while it closes: the handover moves tasks then.
                let close_began = ms(base);
                let closing = tokio::spawn(old.close(Duration::from_secs(60)));
                while !closing.is_finished() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    watch.check(&instances);
                }
                closing.await.unwrap().unwrap();
                longest_close_ms = longest_close_ms.max(ms(base) - close_began);
                eprintln!(
                    "  {}: closed i{i} at +{} ms",
                    shape.name,
                    ms(base) - deploy_start
                );
                if matches!(strategy, Strategy::RollingEmptyState) {
                    dirs[i] = tempfile::tempdir().unwrap();
                }
                let (s, n) =
                    launch(shape.topology(), config(i, dirs[i].path()), &mut started).await;
                instances[i] = Some(s);
                slot_started[i] = n;
                until(
                    "the new instance to run tasks",
                    &instances,
                    &mut watch,
                    |s| settle(s),
                )
                .await;
                eprintln!(
                    "  {}: i{i} back, settled at +{} ms",
                    shape.name,
                    ms(base) - deploy_start
                );
            }
        }
        Strategy::KillAll => {
            for (i, slot) in instances.iter_mut().enumerate() {
                slot.take().unwrap().kill();
                started[slot_started[i]].killed_at = Some(Instant::now());
            }
            for i in 0..shape.instances {
                let (s, n) =
                    launch(shape.topology(), config(i, dirs[i].path()), &mut started).await;
                instances[i] = Some(s);
                slot_started[i] = n;
            }
            until("every instance to run tasks", &instances, &mut watch, |s| {
                settle(s)
            })
            .await;
        }
        Strategy::CrashOne => {
            instances[0].take().unwrap().kill();
            started[slot_started[0]].killed_at = Some(Instant::now());
            tokio::time::sleep(Duration::from_secs(2)).await;
            let (s, n) = launch(shape.topology(), config(0, dirs[0].path()), &mut started).await;
            instances[0] = Some(s);
            slot_started[0] = n;
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
    let deploy_end_at = Instant::now();
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
    if exactly_once {
        assert_eq!(
            outputs.len() as u64,
            total,
            "{strategy:?}: every word counted exactly once"
        );
    } else {
        // At-least-once: work redone after a move may repeat outputs; the
        // counts themselves (the stores) stay exact.
        assert!(
            outputs.len() as u64 >= total,
            "{strategy:?}: every word counted"
        );
    }
    let last: BTreeMap<String, u64> = outputs.into_iter().collect();
    assert_eq!(last, expected, "{strategy:?}");
    for inst in instances.into_iter().flatten() {
        inst.close(Duration::from_secs(30)).await.unwrap();
    }
    let (reassignments, holdings) =
        ownership_checks(&started, deploy_start_at, deploy_end_at, Instant::now());
    let mut worst_per_task: BTreeMap<i32, i64> = BTreeMap::new();
    let mut steady = 0;
    let mut worst_at = (0, 0);
    let mut worst = -1;
    for (seen, partition, delay) in delays.lock().unwrap().iter() {
        if *seen < deploy_start && *seen > deploy_start - 5_000 {
            steady = steady.max(*delay);
        }
        if *seen >= deploy_start {
            let w = worst_per_task.entry(*partition).or_default();
            *w = (*w).max(*delay);
            if *delay > worst {
                worst = *delay;
                worst_at = (*partition, *seen - deploy_start);
            }
        }
    }
    assert_eq!(
        worst_per_task.len(),
        shape.partitions as usize,
        "{strategy:?}: output seen from every task during the deploy"
    );
    Figures {
        steady,
        worst_per_task,
        deploy_ms,
        reassignments,
        holdings,
        worst_at,
        longest_close_ms,
    }
}

/// From every instance's ownership history: no two active holdings of a
/// task on different instances overlap in time (a killed instance's
/// holdings end at its kill; those still open end at `until`), and no
/// task's active owner changes instance more than [`MAX_REASSIGNMENTS`]
/// times between `from` and `to`. Returns, per task, those changes and
/// the active holdings begun in that time.
fn ownership_checks(
    started: &[Started],
    from: Instant,
    to: Instant,
    until: Instant,
) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    // task → (acquired, released, instance)
    let mut active: BTreeMap<String, Vec<(Instant, Instant, String)>> = BTreeMap::new();
    for s in started {
        for t in s.monitor.tasks() {
            for o in t.history.iter().filter(|o| o.role == Role::Active) {
                let end = o
                    .released_at
                    .or(s.killed_at)
                    .unwrap_or(until)
                    .min(s.killed_at.unwrap_or(until));
                active.entry(t.id.to_string()).or_default().push((
                    o.acquired_at,
                    end,
                    s.client_id.clone(),
                ));
            }
        }
    }
    let mut reassignments = BTreeMap::new();
    let mut holdings = BTreeMap::new();
    let trace = std::env::var_os("WEIR_DEPLOY_TRACE").is_some();
    for (task, spans) in &mut active {
        spans.sort();
        if trace {
            let ms = |t: Instant| {
                if t >= from {
                    (t - from).as_millis() as i64
                } else {
                    -((from - t).as_millis() as i64)
                }
            };
            let line: Vec<String> = spans
                .iter()
                .map(|(a, b, who)| format!("{who} {}..{}", ms(*a), ms(*b)))
                .collect();
            eprintln!(
                "  task {task} active (ms from the deploy's start): {}",
                line.join(", ")
            );
        }
        for (n, a) in spans.iter().enumerate() {
            for b in &spans[n + 1..] {
                assert!(
                    a.2 == b.2 || b.0 >= a.1,
                    "task {task} active on {} ({:?}..{:?}) and {} (from {:?}) at once",
                    a.2,
                    a.0 - from,
                    a.1 - from,
                    b.2,
                    b.0 - from
                );
            }
        }
        let mut owner = spans.iter().rfind(|s| s.0 < from).map(|s| s.2.clone());
        let (mut moved, mut held) = (0, 0);
        for s in spans.iter().filter(|s| s.0 >= from && s.0 <= to) {
            held += 1;
            if owner.as_ref().is_some_and(|o| *o != s.2) {
                moved += 1;
            }
            owner = Some(s.2.clone());
        }
        reassignments.insert(task.clone(), moved);
        holdings.insert(task.clone(), held);
    }
    (reassignments, holdings)
}

/// Checks on every sample that no task is active on two instances at once.
struct Watch;

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
            }
        }
    }
}

/// Runs `shape` under each strategy (`WEIR_DEPLOY_STRATEGY` picks one by
/// name), `WEIR_DEPLOY_RUNS` times each (default 1), prints the table and
/// asserts the reassignment bound.
async fn measure(shape: Shape, guarantee: &str) {
    let runs: usize = std::env::var("WEIR_DEPLOY_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let only = std::env::var("WEIR_DEPLOY_STRATEGY").ok();
    let mut rows = Vec::new();
    for strategy in STRATEGIES {
        if only.as_ref().is_some_and(|o| *o != format!("{strategy:?}")) {
            continue;
        }
        for _ in 0..runs {
            let f = run(shape, strategy, guarantee).await;
            println!(
                "{} {strategy:?}: reassignments per task {:?}; active holdings begun per task {:?}; worst delay on partition {} seen at +{} ms",
                shape.name, f.reassignments, f.holdings, f.worst_at.0, f.worst_at.1
            );
            rows.push((strategy, f));
        }
    }
    println!(
        "\n{} shape: {} instances x {} threads, {} partitions, {} records/s, {} store(s), {} standby(s), {} warmups, acceptable lag {}, {guarantee} (virtual time)",
        shape.name,
        shape.instances,
        shape.threads,
        shape.partitions,
        shape.rate,
        shape.stores,
        shape.standbys,
        shape.warmups,
        shape.acceptable_lag
    );
    println!(
        "| strategy | max delay before (ms) | max per-task delay during (ms) | per task (ms) | deploy time (ms) | max reassignments per task | longest close (ms) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (s, f) in &rows {
        let worst = f.worst_per_task.values().copied().max().unwrap_or(0);
        let per: Vec<String> = f.worst_per_task.values().map(ToString::to_string).collect();
        println!(
            "| {s:?} | {} | {worst} | {} | {} | {} | {} |",
            f.steady,
            per.join(" "),
            f.deploy_ms,
            f.reassignments.values().copied().max().unwrap_or(0),
            f.longest_close_ms
        );
    }
    for (s, f) in &rows {
        // A handover that ran out its budget left tasks to restore after
        // the close; under at-least-once the standbys' lag was measured
        // against changelog ends held open by the fences' transactions
        // (review F6), so no standby ever looked caught up.
        assert!(
            f.longest_close_ms < HANDOVER_BUDGET_MS,
            "{} {guarantee} {s:?}: a close took {} ms, its whole handover budget",
            shape.name,
            f.longest_close_ms
        );
        for (task, n) in &f.reassignments {
            assert!(
                *n <= MAX_REASSIGNMENTS,
                "{} {s:?}: task {task} reassigned {n} times in the deploy (at most {MAX_REASSIGNMENTS}); per task {:?}",
                shape.name,
                f.reassignments
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn rolling_deploys_measured() {
    measure(SMALL, "exactly_once_v2").await;
}

/// The same under at-least-once (its 30 s commit interval: each stateful
/// task's fence transaction stays open that long).
#[tokio::test(start_paused = true)]
async fn rolling_deploys_measured_at_least_once() {
    measure(SMALL, "at_least_once").await;
}

/// The report's shape; minutes of run time, so not in CI.
#[tokio::test(start_paused = true)]
#[ignore = "the report's shape runs for minutes: run with --ignored"]
async fn rolling_deploys_measured_report_shape() {
    measure(REPORT, "exactly_once_v2").await;
}

/// The report's shape under at-least-once; minutes of run time.
#[tokio::test(start_paused = true)]
#[ignore = "the report's shape runs for minutes: run with --ignored"]
async fn rolling_deploys_measured_report_shape_at_least_once() {
    measure(REPORT, "at_least_once").await;
}
