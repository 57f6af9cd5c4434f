//! `weir demo`: a stateful word count on an embedded cluster, with no setup.
//!
//! The streams runtime is not built yet, so this wires the topology by hand
//! from the crates that exist, the way Kafka Streams would run it:
//!
//! 1. `sentences` → split into words → `wordcount-repartition`, keyed by word,
//!    so every occurrence of a word lands on one partition (Java's murmur2);
//! 2. one task per repartition partition counts words in a weir-store
//!    key-value store, writes each new count to the changelog and to
//!    `word-counts`, and commits the store together with its changelog and
//!    input offsets in one atomic batch once the producer has them acked;
//! 3. task 0's state directory is then lost and restored from its changelog.
//!
//! Everything is checked against a recount of the input: the stores, the
//! restored store and the last value per word in `word-counts`. Any mismatch
//! is an error (non-zero exit).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use weir_client::config::consumer::ConsumerConfig;
use weir_client::config::producer::ProducerConfig;
use weir_client::consumer::{Consumer, ConsumerRecord, SeekTo, TopicPartition};
use weir_client::producer::{DeliveryFuture, Producer, ProducerRecord};
use weir_store::{
    ChangelogPartition, ChangelogRecord, CommittedOffset, KeyValueStore, StoreOptions, TaskStore,
};
use weir_testkit::Cluster;

const SENTENCES: &str = "sentences";
const REPARTITION: &str = "wordcount-repartition";
const CHANGELOG: &str = "wordcount-counts-changelog";
const OUTPUT: &str = "word-counts";
const STORE: &str = "counts";
const PARTITIONS: i32 = 2;
const COMMIT_EVERY: usize = 500;

const WORDS: &[&str] = &[
    "kafka",
    "stream",
    "state",
    "store",
    "commit",
    "offset",
    "partition",
    "rust",
    "weir",
    "river",
    "water",
    "flow",
    "batch",
    "record",
    "topic",
    "task",
    "replica",
    "leader",
    "fence",
    "zombie",
];

/// Options of the demo.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Sentences to produce.
    #[arg(long, default_value_t = 5_000)]
    pub sentences: usize,
    /// Where the task state directories go (default: a fresh temporary directory).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
}

fn err(context: &str) -> impl Fn(String) -> String + '_ {
    move |e| format!("{context}: {e}")
}

/// A deterministic sentence generator (xorshift), so every run counts the same words.
fn sentences(n: usize) -> Vec<String> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|_| {
            let len = 3 + (next() % 6) as usize;
            (0..len)
                .map(|_| WORDS[(next() % WORDS.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Runs the demo.
pub async fn run(args: DemoArgs) -> Result<(), String> {
    let started = Instant::now();
    let temp;
    let state_dir = match args.state_dir {
        Some(dir) => dir,
        None => {
            temp = tempfile::tempdir().map_err(|e| format!("temporary state dir: {e}"))?;
            temp.path().to_path_buf()
        }
    };
    let cluster = Cluster::builder()
        .brokers(1)
        .build()
        .await
        .map_err(|e| format!("starting the embedded cluster: {e}"))?;
    let bootstrap = cluster.bootstrap();
    println!("embedded Kafka cluster (weir-testkit) at {bootstrap}");
    let none: [(&str, &str); 0] = [];
    let compact = [("cleanup.policy", "compact")];
    for (topic, compacted) in [
        (SENTENCES, false),
        (REPARTITION, false),
        (CHANGELOG, true),
        (OUTPUT, true),
    ] {
        let created = if compacted {
            cluster.create_topic(topic, PARTITIONS, compact).await
        } else {
            cluster.create_topic(topic, PARTITIONS, none).await
        };
        created.map_err(|e| format!("creating {topic}: {e}"))?;
    }

    let producer = Producer::new(
        ProducerConfig::from_properties(&[
            ("bootstrap.servers", bootstrap.as_str()),
            ("client.id", "weir-demo"),
            ("linger.ms", "5"),
            ("compression.type", "lz4"),
        ])
        .map_err(|e| e.to_string())?,
    )
    .await
    .map_err(|e| format!("producer: {e}"))?;

    // The input.
    let input = sentences(args.sentences);
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    let mut deliveries = Vec::with_capacity(input.len());
    for sentence in &input {
        for word in sentence.split(' ') {
            *expected.entry(word.to_owned()).or_default() += 1;
        }
        let record = ProducerRecord::new(SENTENCES).with_value(sentence.clone());
        deliveries.push(producer.enqueue(record).await.map_err(|e| e.to_string())?);
    }
    await_all(&producer, deliveries).await?;
    println!("produced {} sentences to {SENTENCES}", input.len());

    // Stage 1, stateless: split and repartition by word.
    let mut consumer = consumer_for(&bootstrap).await?;
    let mut words = 0usize;
    let mut deliveries = Vec::new();
    drain(&mut consumer, &cluster, SENTENCES, |record| {
        let value = record.value.as_deref().unwrap_or_default();
        let text = String::from_utf8_lossy(value).into_owned();
        for word in text.split(' ').filter(|w| !w.is_empty()) {
            words += 1;
            deliveries.push(
                ProducerRecord::new(REPARTITION)
                    .with_key(word.to_owned())
                    .with_value("1"),
            );
        }
    })
    .await?;
    let mut pending = Vec::with_capacity(deliveries.len());
    for record in deliveries {
        pending.push(producer.enqueue(record).await.map_err(|e| e.to_string())?);
    }
    await_all(&producer, pending).await?;
    println!("stage 1: split into {words} words, repartitioned by word into {REPARTITION}");

    // Stage 2, stateful: one task per partition.
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for partition in 0..PARTITIONS {
        let dir = state_dir.join("wordcount").join(format!("1_{partition}"));
        let counts = count_task(&producer, &cluster, &bootstrap, &dir, partition).await?;
        println!(
            "stage 2: task 1_{partition} counted {} distinct words; store committed with its offsets",
            counts.len()
        );
        totals.extend(counts);
    }
    check("stores", &totals, &expected)?;

    // Lose task 1_0's state, then restore it from its changelog.
    let dir = state_dir.join("wordcount").join("1_0");
    let before = read_store(&dir)?;
    let restored = restore_task(&cluster, &bootstrap, &dir, 0).await?;
    if restored != before {
        return Err("the restored store differs from the store before the loss".into());
    }
    println!("task 1_0: state directory wiped and restored from {CHANGELOG}: identical");

    // The output topic's last value per word.
    let mut consumer = consumer_for(&bootstrap).await?;
    let mut output: BTreeMap<String, u64> = BTreeMap::new();
    drain(&mut consumer, &cluster, OUTPUT, |record| {
        let key = String::from_utf8_lossy(record.key.as_deref().unwrap_or_default()).into_owned();
        let value =
            String::from_utf8_lossy(record.value.as_deref().unwrap_or_default()).into_owned();
        output.insert(key, value.parse().unwrap_or(u64::MAX));
    })
    .await?;
    check(OUTPUT, &output, &expected)?;

    let mut top: Vec<_> = totals.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    println!("\ntop words:");
    for (word, count) in top.iter().take(5) {
        println!("  {word:<10} {count}");
    }
    println!(
        "\nOK: stores, restored store and {OUTPUT} all equal a recount of the input ({} words, {:.1?})",
        words,
        started.elapsed()
    );
    producer.close().await;
    Ok(())
}

async fn await_all(
    producer: &Producer,
    deliveries: Vec<DeliveryFuture>,
) -> Result<Vec<i64>, String> {
    producer.flush().await;
    let mut offsets = Vec::with_capacity(deliveries.len());
    for d in deliveries {
        offsets.push(d.await.map_err(|e| format!("delivery: {e}"))?.offset);
    }
    Ok(offsets)
}

async fn consumer_for(bootstrap: &str) -> Result<Consumer, String> {
    let config = ConsumerConfig::from_properties(&[
        ("bootstrap.servers", bootstrap),
        ("client.id", "weir-demo"),
        ("fetch.max.wait.ms", "50"),
    ])
    .map_err(|e| e.to_string())?;
    Consumer::new(config)
        .await
        .map_err(|e| format!("consumer: {e}"))
}

/// Reads every partition of `topic` from the start to its current end.
async fn drain(
    consumer: &mut Consumer,
    cluster: &Cluster,
    topic: &str,
    mut each: impl FnMut(&ConsumerRecord),
) -> Result<(), String> {
    let mut ends = HashMap::new();
    for p in 0..PARTITIONS {
        let (_, _, hwm) = cluster.offsets(topic, p).await.map_err(|e| e.to_string())?;
        ends.insert(p, hwm);
    }
    let tps: Vec<_> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    consumer.assign(tps.clone());
    for tp in &tps {
        consumer
            .seek(tp, SeekTo::Earliest)
            .map_err(|e| e.to_string())?;
    }
    loop {
        let mut done = true;
        for tp in &tps {
            let end = ends.get(&tp.partition).copied().unwrap_or(0);
            if consumer.position(tp).await.map_err(|e| e.to_string())? < end {
                done = false;
            }
        }
        if done {
            return Ok(());
        }
        for record in consumer.poll().await.map_err(|e| e.to_string())? {
            each(&record);
        }
    }
}

/// One stateful task: counts the words of one repartition partition.
async fn count_task(
    producer: &Producer,
    cluster: &Cluster,
    bootstrap: &str,
    dir: &Path,
    partition: i32,
) -> Result<BTreeMap<String, u64>, String> {
    let task = blocking(|| TaskStore::open(dir, StoreOptions::default()))
        .map_err(err("opening task store"))?;
    let store = task.key_value_store(STORE).map_err(|e| e.to_string())?;
    let input = ChangelogPartition::new(REPARTITION, partition);
    let changelog = ChangelogPartition::new(CHANGELOG, partition);
    // The input position is committed with the data, so a restarted task
    // resumes exactly where its state stops: no checkpoint file to disagree.
    let start = match task.committed_offset(&input) {
        CommittedOffset::Known(o) => SeekTo::Offset(o),
        CommittedOffset::Unknown => SeekTo::Earliest,
    };
    let (_, _, end) = cluster
        .offsets(REPARTITION, partition)
        .await
        .map_err(|e| e.to_string())?;
    let mut consumer = consumer_for(bootstrap).await?;
    let tp = TopicPartition::new(REPARTITION, partition);
    consumer.assign([tp.clone()]);
    consumer.seek(&tp, start).map_err(|e| e.to_string())?;

    let mut changelog_sends = Vec::new();
    let mut output_sends = Vec::new();
    let mut next_input = None;
    let mut commits = 0usize;
    while consumer.position(&tp).await.map_err(|e| e.to_string())? < end {
        for record in consumer.poll().await.map_err(|e| e.to_string())? {
            let word = record.key.clone().unwrap_or_default();
            let count = match store.get(&word).map_err(|e| e.to_string())? {
                Some(v) => decode_count(&v)? + 1,
                None => 1,
            };
            // Staged: readable by this task, invisible after a crash until commit().
            store
                .put(&word, &count.to_be_bytes())
                .map_err(|e| e.to_string())?;
            let to_changelog = ProducerRecord::new(CHANGELOG)
                .with_partition(partition)
                .with_key(word.clone())
                .with_value(count.to_be_bytes().to_vec());
            changelog_sends.push(
                producer
                    .enqueue(to_changelog)
                    .await
                    .map_err(|e| e.to_string())?,
            );
            let to_output = ProducerRecord::new(OUTPUT)
                .with_key(word)
                .with_value(count.to_string());
            output_sends.push(
                producer
                    .enqueue(to_output)
                    .await
                    .map_err(|e| e.to_string())?,
            );
            next_input = Some(record.offset + 1);
        }
        if changelog_sends.len() >= COMMIT_EVERY {
            commit(
                producer,
                &task,
                &changelog,
                &input,
                &mut changelog_sends,
                &mut output_sends,
                next_input,
            )
            .await?;
            commits += 1;
        }
    }
    commit(
        producer,
        &task,
        &changelog,
        &input,
        &mut changelog_sends,
        &mut output_sends,
        next_input,
    )
    .await?;
    commits += 1;
    tracing::info!(partition, commits, "task finished");
    counts_in(&store)
}

/// At-least-once commit: the changelog and output records are acknowledged
/// first, then the store applies its staged writes together with the changelog
/// and input offsets in one atomic batch.
async fn commit(
    producer: &Producer,
    task: &TaskStore,
    changelog: &ChangelogPartition,
    input: &ChangelogPartition,
    changelog_sends: &mut Vec<DeliveryFuture>,
    output_sends: &mut Vec<DeliveryFuture>,
    next_input: Option<i64>,
) -> Result<(), String> {
    let changelog_offsets = await_all(producer, std::mem::take(changelog_sends)).await?;
    await_all(producer, std::mem::take(output_sends)).await?;
    let mut offsets = Vec::new();
    if let Some(last) = changelog_offsets.iter().max() {
        offsets.push((changelog.clone(), last + 1));
    }
    if let Some(next) = next_input {
        offsets.push((input.clone(), next));
    }
    blocking(|| task.commit(&offsets)).map_err(err("committing the store"))
}

fn decode_count(bytes: &[u8]) -> Result<u64, String> {
    let array: [u8; 8] = bytes
        .try_into()
        .map_err(|_| format!("a count of {} bytes", bytes.len()))?;
    Ok(u64::from_be_bytes(array))
}

fn read_store(dir: &Path) -> Result<BTreeMap<String, u64>, String> {
    let task =
        blocking(|| TaskStore::open(dir, StoreOptions::default())).map_err(err("opening"))?;
    counts_in(&task.key_value_store(STORE).map_err(|e| e.to_string())?)
}

/// Every word and its count in a store, as this task sees it.
fn counts_in(store: &KeyValueStore) -> Result<BTreeMap<String, u64>, String> {
    let mut counts = BTreeMap::new();
    for entry in store.iter().map_err(|e| e.to_string())? {
        let (k, v) = entry.map_err(|e| e.to_string())?;
        counts.insert(String::from_utf8_lossy(&k).into_owned(), decode_count(&v)?);
    }
    Ok(counts)
}

/// Wipes a task's state and rebuilds it from its changelog partition.
async fn restore_task(
    cluster: &Cluster,
    bootstrap: &str,
    dir: &Path,
    partition: i32,
) -> Result<BTreeMap<String, u64>, String> {
    let task =
        blocking(|| TaskStore::open(dir, StoreOptions::default())).map_err(err("opening"))?;
    blocking(|| task.wipe()).map_err(err("wiping"))?;
    let task =
        blocking(|| TaskStore::open(dir, StoreOptions::default())).map_err(err("reopening"))?;
    task.key_value_store(STORE).map_err(|e| e.to_string())?;
    let changelog = ChangelogPartition::new(CHANGELOG, partition);
    if task.committed_offset(&changelog) != CommittedOffset::Unknown {
        return Err("a wiped store still claims a changelog offset".into());
    }
    let (_, _, end) = cluster
        .offsets(CHANGELOG, partition)
        .await
        .map_err(|e| e.to_string())?;
    let mut restorer =
        blocking(|| task.restorer(STORE, changelog.clone(), end)).map_err(err("restorer"))?;
    let mut consumer = consumer_for(bootstrap).await?;
    let tp = TopicPartition::new(CHANGELOG, partition);
    consumer.assign([tp.clone()]);
    consumer
        .seek(&tp, SeekTo::Earliest)
        .map_err(|e| e.to_string())?;
    while consumer.position(&tp).await.map_err(|e| e.to_string())? < end {
        let records = consumer.poll().await.map_err(|e| e.to_string())?;
        let batch: Vec<ChangelogRecord<'_>> = records
            .iter()
            .map(|r| ChangelogRecord {
                offset: r.offset,
                key: r.key.as_deref().unwrap_or_default(),
                value: r.value.as_deref(),
            })
            .collect();
        blocking(|| restorer.apply(&batch)).map_err(err("restoring"))?;
    }
    let path = restorer.path();
    let progress = blocking(|| restorer.finish()).map_err(err("finishing the restore"))?;
    println!(
        "task 1_{partition}: restored {} records ({} bytes) into an empty store ({path:?})",
        progress.records, progress.bytes
    );
    drop(task);
    read_store(dir)
}

fn check(
    what: &str,
    got: &BTreeMap<String, u64>,
    expected: &BTreeMap<String, u64>,
) -> Result<(), String> {
    if got == expected {
        return Ok(());
    }
    let wrong: Vec<_> = expected
        .iter()
        .filter(|(w, c)| got.get(*w) != Some(c))
        .map(|(w, c)| format!("{w}: expected {c}, got {:?}", got.get(w)))
        .take(5)
        .collect();
    Err(format!(
        "{what} disagree with the recount: {}",
        wrong.join("; ")
    ))
}

/// fjall is synchronous: run store calls where blocking is allowed.
fn blocking<T>(f: impl FnOnce() -> weir_store::Result<T>) -> Result<T, String> {
    tokio::task::block_in_place(f).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    // The demo checks its own result (stores, restored store and output
    // against a recount) and returns an error on any mismatch.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_demo_passes_its_own_checks() {
        let dir = tempfile::tempdir().unwrap();
        let args = DemoArgs {
            sentences: 300,
            state_dir: Some(dir.path().to_path_buf()),
        };
        run(args).await.unwrap();
        assert!(dir.path().join("wordcount").join("1_0").exists());
    }

    #[test]
    fn sentences_are_deterministic() {
        assert_eq!(sentences(20), sentences(20));
        assert!(sentences(20).iter().all(|s| s.split(' ').count() >= 3));
    }
}
