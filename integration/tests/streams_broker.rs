//! The streams runtime end to end on the real broker at `$KAFKA_BOOTSTRAP`
//! (Apache Kafka under scripts/test.sh), not on weir-testkit: a stateful word
//! count (a persistent key-value store with a changelog) over 6 partitions,
//! under each guarantee. Two instances of 3 stream threads each count a
//! first input in one group and are closed; a third instance on an empty
//! state directory restores the stores from the changelog topic on the
//! broker and counts a second input on top.
//!
//! What this checks on a broker Weir did not write: internal topics
//! created and checked (partitions, `cleanup.policy=compact`), the group
//! join and assignment through the streams assignor, the per-task
//! changelog fence (at-least-once) and the transactions (exactly-once),
//! committed offsets read back with `require_stable` by the next owner,
//! and a restore from the broker's changelog. A second pair of tests runs
//! one instance through hundreds of commits under each guarantee: on Kafka
//! 4.x every commit bumps the producer epoch (transaction version 2), so
//! this is where a client that keeps a stale epoch would fail.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use weir_client::Cluster;
use weir_client::admin::{Admin, NewTopic};
use weir_client::config::ClientConfig;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions, IsolationLevel};
use weir_client::config::producer::ProducerConfig;
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_integration::real_broker::{bootstrap_or_skip, unique};
use weir_integration::word_count::topology;
use weir_streams::{KafkaStreams, StreamsConfig};

const PARTITIONS: i32 = 6;
const WORDS: u64 = 20;

/// Writes `n` keyed records (`WORDS` words, round robin from `from`).
async fn produce(bootstrap: &str, topic: &str, from: u64, n: u64) {
    let producer = Producer::new(
        ProducerConfig::from_properties(&[("bootstrap.servers", bootstrap), ("linger.ms", "5")])
            .unwrap(),
    )
    .await
    .unwrap();
    for i in from..from + n {
        producer
            .send(ProducerRecord::new(topic).with_key(format!("w{:02}", i % WORDS)))
            .await
            .unwrap();
    }
    producer.close().await;
}

/// Every committed output record, as (word, count) in each partition's order.
async fn read_output(bootstrap: &str, topic: &str) -> Vec<(String, u64)> {
    let cluster = Cluster::connect(
        ClientConfig::from_properties(&[("bootstrap.servers", bootstrap)]).unwrap(),
    )
    .await
    .unwrap();
    let mut consumer = Consumer::with_cluster(
        cluster,
        ConsumerOptions {
            isolation_level: IsolationLevel::ReadCommitted,
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(100),
            ..Default::default()
        },
    );
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    consumer.assign(tps.clone());
    for tp in &tps {
        consumer.seek(tp, SeekTo::Earliest).unwrap();
    }
    let mut out = Vec::new();
    // Until a few polls in a row bring nothing.
    let mut quiet = 0;
    while quiet < 3 {
        let records = consumer.poll_for(Duration::from_millis(300)).await.unwrap();
        quiet = if records.is_empty() { quiet + 1 } else { 0 };
        for r in records {
            let word = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
            let n = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            out.push((word, n.parse().unwrap()));
        }
    }
    out
}

fn last_counts(out: &[(String, u64)]) -> BTreeMap<String, u64> {
    out.iter().cloned().collect()
}

fn config(bootstrap: &str, app: &str, dir: &std::path::Path, guarantee: &str) -> StreamsConfig {
    config_with(bootstrap, app, dir, guarantee, "3", "500")
}

fn config_with(
    bootstrap: &str,
    app: &str,
    dir: &std::path::Path,
    guarantee: &str,
    threads: &str,
    commit_interval_ms: &str,
) -> StreamsConfig {
    let dir = dir.display().to_string();
    StreamsConfig::from_properties(&[
        ("application.id", app),
        ("num.stream.threads", threads),
        ("bootstrap.servers", bootstrap),
        ("state.dir", dir.as_str()),
        ("processing.guarantee", guarantee),
        ("commit.interval.ms", commit_interval_ms),
        // The smallest session Kafka allows by default
        // (group.min.session.timeout.ms).
        ("session.timeout.ms", "6000"),
        ("fetch.max.wait.ms", "100"),
        ("default.api.timeout.ms", "20000"),
    ])
    .unwrap()
}

/// Runs instances until the output's last counts are `expected`, or fails
/// after a minute.
async fn wait_for_counts(bootstrap: &str, output: &str, expected: &BTreeMap<String, u64>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = last_counts(&read_output(bootstrap, output).await);
        if &got == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the counts on the broker after 60 s: {got:?}, expected {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Names no earlier run used for the input, the output (both created with
/// `PARTITIONS`) and the application.
async fn new_app(bootstrap: &str, prefix: &str) -> (String, String, String) {
    let (input, output, app) = (
        unique(&format!("{prefix}-in")),
        unique(&format!("{prefix}-out")),
        unique(&format!("{prefix}-app")),
    );
    let admin =
        Admin::connect(ClientConfig::from_properties(&[("bootstrap.servers", bootstrap)]).unwrap())
            .await
            .unwrap();
    for topic in [&input, &output] {
        admin
            .create_topic(NewTopic::new(topic, PARTITIONS))
            .await
            .unwrap();
    }
    (input, output, app)
}

async fn count_restore_and_count_on(guarantee: &str) {
    let Some(bootstrap) = bootstrap_or_skip(&format!("streams_broker {guarantee}")) else {
        return;
    };
    let (input, output, app) = new_app(&bootstrap, "weir-st").await;
    let per_word = |total: u64| -> BTreeMap<String, u64> {
        (0..WORDS)
            .map(|w| {
                (
                    format!("w{w:02}"),
                    total / WORDS + u64::from(w < total % WORDS),
                )
            })
            .collect()
    };

    // 1. Two instances count 200 records, then close cleanly.
    produce(&bootstrap, &input, 0, 200).await;
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut first = Vec::new();
    for dir in &dirs {
        first.push(
            KafkaStreams::start(
                topology(&input, &output).unwrap(),
                config(&bootstrap, &app, dir.path(), guarantee),
            )
            .await
            .unwrap(),
        );
    }
    wait_for_counts(&bootstrap, &output, &per_word(200)).await;
    let tasks: Vec<usize> = first.iter().map(|i| i.metrics().tasks.len()).collect();
    for instance in first {
        instance.close(Duration::from_secs(30)).await.unwrap();
    }
    assert_eq!(
        tasks.iter().sum::<usize>(),
        PARTITIONS as usize,
        "{tasks:?}"
    );

    // 2. A new instance on an empty state directory: the store comes back
    // from the changelog on the broker, and the next 100 records count on
    // from it (a store restored short would restart words from a lower count).
    produce(&bootstrap, &input, 200, 100).await;
    let second_dir = tempfile::tempdir().unwrap();
    let second = KafkaStreams::start(
        topology(&input, &output).unwrap(),
        config(&bootstrap, &app, second_dir.path(), guarantee),
    )
    .await
    .unwrap();
    wait_for_counts(&bootstrap, &output, &per_word(300)).await;
    let restored = second.metrics().restored_records;
    second.close(Duration::from_secs(30)).await.unwrap();
    assert!(
        restored >= WORDS,
        "the second instance restored {restored} changelog records"
    );

    // With no fault, a clean close commits everything: each input record
    // gives exactly one output, and each word's counts are 1, 2, ... n.
    let out = read_output(&bootstrap, &output).await;
    assert_eq!(out.len(), 300, "one output per input");
    let mut seen: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (w, n) in &out {
        seen.entry(w).or_default().push(*n);
    }
    for (w, counts) in seen {
        let n = counts.len() as u64;
        assert_eq!(counts, (1..=n).collect::<Vec<_>>(), "{w}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_word_count_restores_from_the_brokers_changelog() {
    count_restore_and_count_on("at_least_once").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_word_count_restores_from_the_brokers_changelog() {
    count_restore_and_count_on("exactly_once_v2").await;
}

/// One instance, one stream thread, commits as often as it can: 250
/// rounds of 4 records, each round waiting for a commit that includes it.
/// Every output is exact, and the instance committed at least 250 times
/// (transactions under exactly-once, per-task fence transactions under
/// at-least-once), each on the epoch the previous EndTxn gave.
async fn hundreds_of_commits(guarantee: &str) {
    let Some(bootstrap) = bootstrap_or_skip(&format!("streams_broker commits {guarantee}")) else {
        return;
    };
    let (input, output, app) = new_app(&bootstrap, "weir-stc").await;
    let dir = tempfile::tempdir().unwrap();
    let streams = KafkaStreams::start(
        topology(&input, &output).unwrap(),
        config_with(&bootstrap, &app, dir.path(), guarantee, "1", "10"),
    )
    .await
    .unwrap();
    const ROUNDS: u64 = 250;
    const PER_ROUND: u64 = 4;
    for round in 0..ROUNDS {
        let before = streams.metrics().commits;
        produce(&bootstrap, &input, round * PER_ROUND, PER_ROUND).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let m = streams.metrics();
            if m.processed >= (round + 1) * PER_ROUND && m.commits > before {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: processed {} of {}, commits {} (before the round {before})",
                m.processed,
                (round + 1) * PER_ROUND,
                m.commits
            );
            tokio::time::sleep(Duration::from_millis(5)).await; // poll interval
        }
    }
    let commits = streams.metrics().commits;
    streams.close(Duration::from_secs(30)).await.unwrap();
    assert!(commits >= ROUNDS, "{commits} commits");
    let out = read_output(&bootstrap, &output).await;
    assert_eq!(out.len() as u64, ROUNDS * PER_ROUND, "one output per input");
    let mut seen: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (w, n) in &out {
        seen.entry(w).or_default().push(*n);
    }
    for (w, counts) in seen {
        let n = counts.len() as u64;
        assert_eq!(counts, (1..=n).collect::<Vec<_>>(), "{w}");
    }
    println!("{guarantee}: {commits} commits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_word_count_over_hundreds_of_commits() {
    hundreds_of_commits("at_least_once").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_word_count_over_hundreds_of_commits() {
    hundreds_of_commits("exactly_once_v2").await;
}

/// Forwards `tick-N` every wall-clock second; input records only start
/// the task.
struct Ticker(u64);

impl weir_streams::processor::Processor<String, ()> for Ticker {
    type KOut = String;
    type VOut = String;
    fn init(
        &mut self,
        ctx: &mut weir_streams::processor::InitContext<'_>,
    ) -> Result<(), weir_streams::ProcessError> {
        ctx.schedule(
            Duration::from_secs(1),
            weir_streams::processor::PunctuationType::WallClockTime,
        )?;
        Ok(())
    }
    fn process(
        &mut self,
        _ctx: &mut weir_streams::processor::ProcessorContext<'_, String, String>,
        _r: weir_streams::Record<String, ()>,
    ) -> Result<(), weir_streams::ProcessError> {
        Ok(())
    }
    fn punctuate(
        &mut self,
        ctx: &mut weir_streams::processor::ProcessorContext<'_, String, String>,
        _id: weir_streams::processor::ScheduleId,
        ts: i64,
    ) -> Result<(), weir_streams::ProcessError> {
        self.0 += 1;
        let tick = format!("tick-{}", self.0);
        ctx.forward(weir_streams::Record::new(tick.clone(), tick, ts));
        Ok(())
    }
}

/// Under exactly-once on Kafka, what a wall-clock punctuator forwards while
/// the input is idle commits within about a commit interval: a task whose
/// only work is punctuation still needs its commits. (Before, the ticks sat
/// in an open transaction until the coordinator aborted it at the
/// transaction timeout, and were lost.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_commits_a_punctuators_ticks_while_the_input_is_idle() {
    let Some(bootstrap) = bootstrap_or_skip("streams_broker punctuation") else {
        return;
    };
    let (input, output, app) = (
        unique("weir-stp-in"),
        unique("weir-stp-out"),
        unique("weir-stp-app"),
    );
    let client =
        ClientConfig::from_properties(&[("bootstrap.servers", bootstrap.as_str())]).unwrap();
    let admin = Admin::connect(client.clone()).await.unwrap();
    for topic in [&input, &output] {
        // One partition each: one task, whose ticks come in order.
        admin.create_topic(NewTopic::new(topic, 1)).await.unwrap();
    }
    let mut b = weir_streams::TopologyBuilder::new();
    let source = b.source::<String, ()>("in", &[input.as_str()]);
    let ticker = b.processor("ticker", &[&source], || Ticker(0), &[]);
    b.sink("out", &[&ticker], output.as_str());
    let dir = tempfile::tempdir().unwrap();
    let streams = KafkaStreams::start(
        b.build().unwrap(),
        config_with(&bootstrap, &app, dir.path(), "exactly_once_v2", "1", "100"),
    )
    .await
    .unwrap();
    produce(&bootstrap, &input, 0, 1).await;
    let cluster = Cluster::connect(client).await.unwrap();
    let tp = TopicPartition::new(&output, 0);
    // Five ticks committed by read_committed's view, with no input after the
    // first record; the transaction timeout (10 s) is never reached first.
    let seen = weir_integration::real_broker::read_committed_values(&cluster, &tp, 5)
        .await
        .unwrap();
    streams.close(Duration::from_secs(30)).await.unwrap();
    assert!(seen.len() >= 5, "ticks visible: {seen:?}");
    assert_eq!(seen[0], "tick-1");
}
