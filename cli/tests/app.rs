//! `weir app describe|tasks` against a real weir-streams application (two
//! instances) on an in-process weir-testkit cluster, through the built
//! binary: tasks, owners and lag read from the broker alone.
//!
//! The binary is a separate process talking TCP, so the clock is real:
//! every wait polls a condition until a deadline.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use weir_client::admin::{Admin, OffsetSpec};
use weir_client::config::ClientConfig;
use weir_client::config::producer::ProducerConfig;
use weir_client::producer::{Producer, ProducerRecord};
use weir_streams::processor::{Processor, ProcessorContext};
use weir_streams::state::KvStoreRef;
use weir_streams::{KafkaStreams, ProcessError, Record, State, StreamsConfig, TopologyBuilder};
use weir_testkit::Cluster;

const APP: &str = "app-cli-test";
const INPUT: &str = "app-input";
const OUTPUT: &str = "app-output";
const PARTITIONS: i32 = 4;
const PATIENCE: Duration = Duration::from_secs(60);

struct Count(KvStoreRef<String, u64>);

impl Processor<String, String> for Count {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, String>,
    ) -> Result<(), ProcessError> {
        let store = ctx.kv_store(&self.0)?;
        let n = store.get(&r.key)?.unwrap_or(0) + 1;
        store.put(&r.key, &n, r.timestamp)?;
        ctx.forward(Record::new(r.key, n.to_string(), r.timestamp));
        Ok(())
    }
}

/// app-input → count (store `counts`, logged) → app-output: one subtopology.
fn topology() -> weir_streams::Topology {
    let mut b = TopologyBuilder::new();
    let counts = b.kv_store::<String, u64>("counts");
    let source = b.source::<String, String>("in", &[INPUT]);
    let c = counts.clone();
    let counted = b.processor("count", &[&source], move || Count(c.clone()), &[&counts]);
    b.sink("out", &[&counted], OUTPUT);
    b.build().unwrap()
}

async fn instance(bootstrap: &str, id: &str, dir: &std::path::Path) -> KafkaStreams {
    let dir = dir.join(id).display().to_string();
    let config = StreamsConfig::from_properties(&[
        ("application.id", APP),
        ("bootstrap.servers", bootstrap),
        ("client.id", &format!("client-{id}")),
        ("group.instance.id", id),
        ("state.dir", &dir),
        ("session.timeout.ms", "10000"),
        ("heartbeat.interval.ms", "500"),
        ("commit.interval.ms", "100"),
        ("num.standby.replicas", "1"),
        ("fetch.max.wait.ms", "100"),
        ("linger.ms", "5"),
    ])
    .unwrap();
    KafkaStreams::start(topology(), config).await.unwrap()
}

/// Produces `per_partition[p]` records to partition `p` of the input.
async fn produce(bootstrap: &str, per_partition: &[i64]) {
    let producer = Producer::new(
        ProducerConfig::from_properties(&[("bootstrap.servers", bootstrap), ("linger.ms", "5")])
            .unwrap(),
    )
    .await
    .unwrap();
    let mut acks = Vec::new();
    for (p, n) in per_partition.iter().enumerate() {
        for i in 0..*n {
            let record = ProducerRecord::new(INPUT)
                .with_partition(i32::try_from(p).unwrap())
                .with_key(format!("k{}", i % 5))
                .with_value("v");
            acks.push(producer.enqueue(record).await.unwrap());
        }
    }
    producer.flush().await;
    for a in acks {
        a.await.unwrap();
    }
}

async fn wait_until<F: std::future::Future<Output = bool>>(
    what: &str,
    mut done: impl FnMut() -> F,
) {
    let deadline = Instant::now() + PATIENCE;
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the group committed every input partition up to its end.
async fn caught_up(admin: &Admin) -> bool {
    let Ok(committed) = admin.list_group_offsets(APP).await else {
        return false;
    };
    let Ok(ends) = admin
        .list_topic_offsets(INPUT, OffsetSpec::Latest, false)
        .await
    else {
        return false;
    };
    ends.iter().all(|e| {
        committed
            .iter()
            .any(|c| c.topic == INPUT && c.partition == e.partition && c.offset == e.offset)
    })
}

/// Runs the binary off the runtime and returns its stdout.
async fn weir(bootstrap: &str, args: &[&str]) -> String {
    let mut all: Vec<String> = vec!["-b".into(), bootstrap.into()];
    all.extend(args.iter().map(|s| (*s).to_owned()));
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(&all)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "weir {args:?}: {}: {}\n{stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("weir {args:?}\n{stdout}");
    stdout
}

/// [`weir`], its stdout parsed as JSON.
async fn weir_json(bootstrap: &str, args: &[&str]) -> serde_json::Value {
    let stdout = weir(bootstrap, args).await;
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// Lag per input partition, from `app tasks --json`.
fn input_lags(tasks: &serde_json::Value) -> BTreeMap<i64, i64> {
    let mut lags = BTreeMap::new();
    for t in tasks["tasks"].as_array().unwrap() {
        if t["role"] == "standby" || t["role"] == "warmup" {
            continue;
        }
        for i in t["inputs"].as_array().unwrap() {
            assert_eq!(i["topic"], INPUT, "{t}");
            lags.insert(i["partition"].as_i64().unwrap(), i["lag"].as_i64().unwrap());
        }
    }
    lags
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn app_tasks_show_every_task_its_owner_and_its_lag() {
    let kit = Cluster::builder().build().await.unwrap();
    let bootstrap = kit.bootstrap();
    let none: [(&str, &str); 0] = [];
    for t in [INPUT, OUTPUT] {
        kit.create_topic(t, PARTITIONS, none).await.unwrap();
    }
    let admin = Admin::connect(
        ClientConfig::from_properties(&[("bootstrap.servers", bootstrap.as_str())]).unwrap(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let a = instance(&bootstrap, "a", dir.path()).await;
    let b = instance(&bootstrap, "b", dir.path()).await;
    let first = [5, 7, 3, 9];
    produce(&bootstrap, &first).await;
    let total: i64 = first.iter().sum();
    wait_until("both instances to process every record", || {
        let (ma, mb) = (a.metrics(), b.metrics());
        let done = i64::try_from(ma.processed + mb.processed).unwrap() >= total
            && !ma.tasks.is_empty()
            && !mb.tasks.is_empty()
            && ma.standby_tasks.len() + mb.standby_tasks.len() == 4
            && a.state() == State::Running
            && b.state() == State::Running;
        async move { done }
    })
    .await;
    wait_until("the group to commit the input's end", || caught_up(&admin)).await;

    let tasks = weir_json(&bootstrap, &["app", "tasks", APP, "--json"]).await;
    let rows = tasks["tasks"].as_array().unwrap();
    let active: Vec<&serde_json::Value> = rows.iter().filter(|t| t["role"] == "active").collect();
    let ids: Vec<&str> = active.iter().map(|t| t["task"].as_str().unwrap()).collect();
    let want: Vec<String> = (0..PARTITIONS).map(|p| format!("0_{p}")).collect();
    assert_eq!(ids, want, "every task exactly once as active: {tasks:#}");
    let owners: BTreeSet<&str> = active
        .iter()
        .map(|t| t["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners, BTreeSet::from(["a", "b"]), "{tasks:#}");
    for (id, instance) in [("a", &a), ("b", &b)] {
        let mine: BTreeSet<String> = active
            .iter()
            .filter(|t| t["owner"] == id)
            .map(|t| t["task"].as_str().unwrap().to_owned())
            .collect();
        let runs: BTreeSet<String> = instance
            .metrics()
            .tasks
            .keys()
            .map(ToString::to_string)
            .collect();
        assert_eq!(mine, runs, "{id}: {tasks:#}");
    }
    // Each task's standby is on the other instance.
    let standby: BTreeMap<&str, &str> = rows
        .iter()
        .filter(|t| t["role"] == "standby")
        .map(|t| (t["task"].as_str().unwrap(), t["owner"].as_str().unwrap()))
        .collect();
    assert_eq!(standby.len(), 4, "{tasks:#}");
    for t in &active {
        assert_ne!(
            standby[t["task"].as_str().unwrap()],
            t["owner"],
            "{tasks:#}"
        );
    }
    for t in &active {
        assert_eq!(t["lag"], 0, "{t}");
        let changelogs = t["changelogs"].as_array().unwrap();
        assert_eq!(changelogs.len(), 1, "{t}");
        assert_eq!(changelogs[0]["topic"], format!("{APP}-counts-changelog"));
        assert!(changelogs[0]["end"].as_i64().unwrap() > 0, "{t}");
    }
    let described = weir_json(&bootstrap, &["app", "describe", APP, "--json"]).await;
    assert_eq!(described["total_lag"], 0, "{described:#}");
    let members = described["members"].as_array().unwrap();
    let instances: BTreeSet<&str> = members
        .iter()
        .map(|m| m["instance_id"].as_str().unwrap())
        .collect();
    assert_eq!(instances, BTreeSet::from(["a", "b"]), "{described:#}");
    let active_count: u64 = members.iter().map(|m| m["active"].as_u64().unwrap()).sum();
    assert_eq!(active_count, 4, "{described:#}");
    let standby_count: u64 = members.iter().map(|m| m["standby"].as_u64().unwrap()).sum();
    assert_eq!(standby_count, 4, "{described:#}");
    assert_eq!(
        described["changelogs"][0]["topic"],
        format!("{APP}-counts-changelog")
    );

    let text = weir(&bootstrap, &["app", "tasks", APP]).await;
    assert_eq!(text.lines().count(), 1 + rows.len(), "{text}");
    assert_eq!(rows.len(), 8, "{tasks:#}");
    assert!(text.lines().nth(1).unwrap().starts_with("0_0 "), "{text}");
    let text = weir(&bootstrap, &["app", "describe", APP]).await;
    assert!(
        text.contains("total input lag 0 over 4 partitions"),
        "{text}"
    );

    // Closed instances process nothing: what is produced now is the lag.
    a.close(Duration::from_secs(30)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
    let more = [2, 0, 4, 1];
    produce(&bootstrap, &more).await;
    let tasks = weir_json(&bootstrap, &["app", "tasks", APP, "--json"]).await;
    let want: BTreeMap<i64, i64> = (0i64..).zip(more).collect();
    assert_eq!(input_lags(&tasks), want, "{tasks:#}");
    let described = weir_json(&bootstrap, &["app", "describe", APP, "--json"]).await;
    assert_eq!(described["total_lag"], 7, "{described:#}");
}
