//! Shared pieces of the runtime tests: an in-process cluster reached over
//! in-memory streams (exact under tokio's paused clock), instances of a word
//! count, and reading a topic the way a read_committed consumer would.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use weir_client::Cluster as Client;
use weir_client::config::consumer::{ConsumerOptions, IsolationLevel};
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_streams::config::StreamsConfig;
use weir_streams::processor::{Processor, ProcessorContext};
use weir_streams::state::KvStoreRef;
use weir_streams::{KafkaStreams, ProcessError, Record, Topology, TopologyBuilder};
use weir_testkit::Cluster;

pub const INPUT: &str = "text";
pub const OUTPUT: &str = "word-counts";

/// Log timestamps in virtual time (tokio's paused clock): milliseconds
/// since the first [`init_tracing`], so a trace lines up with the test's own
/// virtual-time figures.
struct VirtualTime;

static TRACE_BASE: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();

impl tracing_subscriber::fmt::time::FormatTime for VirtualTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        let base = TRACE_BASE.get_or_init(tokio::time::Instant::now);
        write!(w, "v+{:>8}ms", base.elapsed().as_millis())
    }
}

pub fn init_tracing() {
    TRACE_BASE.get_or_init(tokio::time::Instant::now);
    let _ = tracing_subscriber::fmt()
        .with_timer(VirtualTime)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

pub async fn testkit(brokers: i32, partitions: i32) -> Arc<Cluster> {
    init_tracing();
    let kit = Arc::new(Cluster::builder().brokers(brokers).build().await.unwrap());
    for t in [INPUT, OUTPUT] {
        kit.create_topic(t, partitions, std::iter::empty::<(String, String)>())
            .await
            .unwrap();
    }
    kit
}

pub async fn client(kit: &Arc<Cluster>, id: &str) -> Client {
    let config = weir_integration::testkit_dial::client_config(kit, id)
        .build()
        .unwrap();
    Client::connect(config).await.unwrap()
}

/// The config of instance `id` of application `app`: in-memory connections,
/// short group timeouts, its own state directory.
pub fn streams_config(
    kit: &Arc<Cluster>,
    app: &str,
    id: &str,
    state_dir: &std::path::Path,
    extra: &[(&str, &str)],
) -> StreamsConfig {
    let mut props = vec![
        ("application.id", app),
        ("bootstrap.servers", "placeholder:1"),
        ("client.id", id),
        ("session.timeout.ms", "10000"),
        ("heartbeat.interval.ms", "1000"),
        ("fetch.max.wait.ms", "100"),
        ("linger.ms", "5"),
    ];
    props.extend_from_slice(extra);
    let dir = state_dir.to_string_lossy().into_owned();
    props.push(("state.dir", &dir));
    let mut config = StreamsConfig::from_properties(&props).unwrap();
    let client = weir_integration::testkit_dial::client_config(kit, id)
        .build()
        .unwrap();
    config.client = client;
    config
}

struct Split;

impl Processor<(), String> for Split {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<(), String>,
    ) -> Result<(), ProcessError> {
        for w in r.value.split_whitespace() {
            let w = w.to_lowercase();
            ctx.forward(Record::new(w.clone(), w, r.timestamp));
        }
        Ok(())
    }
}

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

/// text → split → repartition by word → count (store `counts`) → word-counts.
pub fn word_count() -> Topology {
    let mut b = TopologyBuilder::new();
    let counts = b.kv_store::<String, u64>("counts");
    let lines = b.source::<(), String>("lines", &[INPUT]);
    let words = b.processor("split", &[&lines], || Split, &[]);
    let by_word = b.repartition("words", &[&words], None);
    let c = counts.clone();
    let counted = b.processor("count", &[&by_word], move || Count(c.clone()), &[&counts]);
    b.sink("out", &[&counted], OUTPUT);
    b.build().unwrap()
}

struct CountKeys(KvStoreRef<String, u64>);

impl Processor<String, ()> for CountKeys {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, ()>,
    ) -> Result<(), ProcessError> {
        let store = ctx.kv_store(&self.0)?;
        let n = store.get(&r.key)?.unwrap_or(0) + 1;
        store.put(&r.key, &n, r.timestamp)?;
        ctx.forward(Record::new(r.key, n.to_string(), r.timestamp));
        Ok(())
    }
}

/// One stage: records of `text` keyed by word → count (store `counts`) →
/// word-counts. Every task is stateful.
pub fn count_keys() -> Topology {
    count_keys_with(false)
}

/// [`count_keys`] with caching on for its store: the changelog gets each
/// word's last count once per commit.
pub fn count_keys_cached() -> Topology {
    count_keys_with(true)
}

fn count_keys_with(caching: bool) -> Topology {
    let mut b = TopologyBuilder::new();
    let counts = b.kv_store::<String, u64>("counts");
    if caching {
        b.with_caching("counts");
    }
    let words = b.source::<String, ()>("words", &[INPUT]);
    let c = counts.clone();
    let counted = b.processor("count", &[&words], move || CountKeys(c.clone()), &[&counts]);
    b.sink("out", &[&counted], OUTPUT);
    b.build().unwrap()
}

/// Produces every word of `lines` as a record keyed by the word.
pub async fn produce_words(kit: &Arc<Cluster>, lines: &[String]) {
    let producer = Producer::with_cluster(client(kit, "feeder").await, Default::default()).unwrap();
    let mut acks = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        for w in line.split_whitespace() {
            let record = ProducerRecord::new(INPUT)
                .with_key(w.to_owned())
                .with_timestamp(1_000 + i as i64);
            acks.push(producer.enqueue(record).await.unwrap());
        }
    }
    producer.flush().await;
    for a in acks {
        a.await.unwrap();
    }
}

const WORDS: &[&str] = &[
    "kafka", "stream", "state", "store", "commit", "offset", "fence", "zombie", "rust", "weir",
    "river", "water", "flow", "batch", "record", "topic",
];

/// `n` deterministic lines and the count of every word in them.
pub fn lines(n: usize, seed: u64) -> (Vec<String>, BTreeMap<String, u64>) {
    let mut state = seed.max(1);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut counts = BTreeMap::new();
    let lines = (0..n)
        .map(|_| {
            let len = 1 + (next() % 5) as usize;
            let words: Vec<&str> = (0..len)
                .map(|_| WORDS[(next() % WORDS.len() as u64) as usize])
                .collect();
            for w in &words {
                *counts.entry((*w).to_owned()).or_insert(0) += 1;
            }
            words.join(" ")
        })
        .collect();
    (lines, counts)
}

pub async fn produce_lines(kit: &Arc<Cluster>, lines: &[String]) {
    let producer = Producer::with_cluster(client(kit, "feeder").await, Default::default()).unwrap();
    let mut acks = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let record = ProducerRecord::new(INPUT)
            .with_value(line.clone())
            .with_timestamp(1_000 + i as i64);
        acks.push(producer.enqueue(record).await.unwrap());
    }
    producer.flush().await;
    for a in acks {
        a.await.unwrap();
    }
}

/// Every record of `topic` a read_committed consumer sees up to the last
/// stable offset, as (partition, key, value), in offset order per partition.
pub async fn read_committed(kit: &Arc<Cluster>, topic: &str) -> Vec<(i32, String, String)> {
    let s = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    read_committed_raw(kit, topic)
        .await
        .into_iter()
        .map(|(p, k, v)| (p, k, s(v)))
        .collect()
}

/// As [`read_committed`], with the values as bytes.
pub async fn read_committed_raw(kit: &Arc<Cluster>, topic: &str) -> Vec<(i32, String, Vec<u8>)> {
    // Kafka (and the testkit, by default) writes a transaction's markers
    // after answering EndTxn: read once those of every ended transaction
    // are written (an open transaction is not waited for).
    kit.markers_written().await.unwrap();
    let client = client(kit, "reader").await;
    let partitions = client.partition_count(topic).await.unwrap() as i32;
    let options = ConsumerOptions {
        isolation_level: IsolationLevel::ReadCommitted,
        fetch_max_wait: Duration::from_millis(50),
        ..ConsumerOptions::default()
    };
    let mut consumer = Consumer::with_cluster(client, options);
    let tps: Vec<TopicPartition> = (0..partitions)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    consumer.assign(tps.clone());
    let mut ends = BTreeMap::new();
    for tp in &tps {
        consumer.seek(tp, SeekTo::Earliest).unwrap();
        let (_, lso, _) = kit.offsets(topic, tp.partition).await.unwrap();
        ends.insert(tp.partition, lso);
    }
    let mut out = Vec::new();
    loop {
        let mut done = true;
        for tp in &tps {
            if consumer.position(tp).await.unwrap() < ends[&tp.partition] {
                done = false;
            }
        }
        if done {
            return out;
        }
        for r in consumer.poll_for(Duration::from_millis(100)).await.unwrap() {
            if r.offset < ends[&r.partition] {
                let key = String::from_utf8_lossy(&r.key.unwrap_or_default()).into_owned();
                out.push((r.partition, key, r.value.unwrap_or_default().to_vec()));
            }
        }
    }
}

/// The last count per word in the output.
pub fn last_counts(records: &[(i32, String, String)]) -> BTreeMap<String, u64> {
    let mut last = BTreeMap::new();
    for (_, k, v) in records {
        last.insert(k.clone(), v.parse::<u64>().unwrap());
    }
    last
}

/// Waits (in virtual time) until `done` holds, checking every 500 ms.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub async fn start(topology: Topology, config: StreamsConfig) -> KafkaStreams {
    KafkaStreams::start(topology, config).await.unwrap()
}

/// A crash: `id` is cut off from every broker (nothing it sends arrives any
/// more, in-flight requests included), then its instance is dropped.
pub async fn crash(kit: &Arc<Cluster>, brokers: i32, id: &str, instance: KafkaStreams) {
    for b in 0..brokers {
        kit.partition_client(
            weir_testkit::ClientSelector::ClientId(id.to_owned()),
            weir_testkit::PartitionTarget::Broker(b),
        )
        .await
        .unwrap();
    }
    instance.kill();
}

/// The committed counts in task `task`'s store under `state_dir`.
pub fn store_counts(state_dir: &std::path::Path, app: &str, task: &str) -> BTreeMap<String, u64> {
    let store = weir_store::TaskStore::open(
        state_dir.join(app).join(task),
        weir_store::StoreOptions::default(),
    )
    .unwrap();
    let kv = store.key_value_store("counts").unwrap();
    kv.iter()
        .unwrap()
        .map(|e| {
            let (k, v) = e.unwrap();
            (
                String::from_utf8(k).unwrap(),
                u64::from_be_bytes(v.as_slice().try_into().unwrap()),
            )
        })
        .collect()
}

/// When [`count_or_fail`]'s processor fails on the key `poison`, after its
/// put (so that put must never stay).
#[derive(Clone)]
pub enum Poison {
    /// Never: `poison` is counted like any key.
    Never,
    /// Every time.
    Always,
    /// Only the first time (the flag records that it did).
    Once(Arc<std::sync::atomic::AtomicBool>),
}

struct CountOrFail {
    counts: KvStoreRef<String, u64>,
    poison: Poison,
}

impl Processor<String, ()> for CountOrFail {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, ()>,
    ) -> Result<(), ProcessError> {
        let store = ctx.kv_store(&self.counts)?;
        let n = store.get(&r.key)?.unwrap_or(0) + 1;
        store.put(&r.key, &n, r.timestamp)?;
        let fail = r.key == "poison"
            && match &self.poison {
                Poison::Never => false,
                Poison::Always => true,
                Poison::Once(failed) => !failed.swap(true, std::sync::atomic::Ordering::SeqCst),
            };
        if fail {
            return Err(ProcessError::msg("cannot process poison"));
        }
        ctx.forward(Record::new(r.key, n.to_string(), r.timestamp));
        Ok(())
    }
}

/// words → count into store `counts` (in memory if `in_memory`), failing on
/// `poison` as `poison` says → output.
pub fn count_or_fail(poison: Poison, in_memory: bool) -> Topology {
    let mut b = TopologyBuilder::new();
    let counts = b.kv_store::<String, u64>("counts");
    if in_memory {
        b.in_memory("counts");
    }
    let words = b.source::<String, ()>("words", &[INPUT]);
    let c = counts.clone();
    let counted = b.processor(
        "count",
        &[&words],
        move || CountOrFail {
            counts: c.clone(),
            poison: poison.clone(),
        },
        &[&counts],
    );
    b.sink("out", &[&counted], OUTPUT);
    b.build().unwrap()
}
