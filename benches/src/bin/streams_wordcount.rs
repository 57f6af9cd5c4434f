//! The streams runtime's overhead on a stateful word count, as a ratio to a
//! raw loop written with weir-client, in the same process and on the same
//! embedded cluster.
//!
//! `cargo run --release -p weir-benches --bin streams_wordcount -- [RECORDS] [ROUNDS]`
//! (defaults: 200,000 input records, 5 rounds).
//!
//! The input is `RECORDS` records keyed by a word (one of 1,000), over six
//! partitions, produced once. Each round runs, one after the other:
//! - **raw**: one consumer assigned every input partition from the start, a
//!   `HashMap<word, count>`, and a producer writing `(word, new count)` for
//!   every record; done when every output is acknowledged. No commits, no
//!   changelog, no store: the floor any Kafka app pays.
//! - **at-least-once**: a `KafkaStreams` instance (one stream thread) with the
//!   same logic as a topology: a persistent key-value store with a changelog,
//!   commits every 30 s (and at the end), the per-task transactional fence.
//! - **at-least-once, unfenced**: the same with the changelog written by a
//!   plain idempotent producer (the hidden `weir.internal.unfenced.changelog`,
//!   as Kafka Streams does): the cost of the per-task fence is the ratio of
//!   the two at-least-once runs.
//! - **exactly-once v2**: the same, `processing.guarantee=exactly_once_v2`,
//!   commits every 100 ms (Kafka Streams' default under exactly-once).
//! - **at-least-once / exactly-once, uncached**: the same two without
//!   caching on the store, so every input writes a changelog record (the
//!   kinds above log each word's last count once per commit; the outputs
//!   are the same).
//!
//! A streams run is timed from `start` until the output topic's last stable
//! offsets sum to `RECORDS` (a record per input record), so it includes the
//! group join and the first restore of empty stores. Every run is printed;
//! the figure is the median of each ratio to the raw run of the same round.
//! The three kinds run in a different order each round.
//! `WEIR_BENCH_KINDS=alos` (a comma list of `raw`, `alos`, `alos-unfenced`,
//! `eos`) runs only some kinds, to profile one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use weir_client::config::consumer::ConsumerConfig;
use weir_client::config::producer::ProducerConfig;
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_integration::word_count::{topology, topology_cached};
use weir_streams::{KafkaStreams, StreamsConfig};
use weir_testkit::Cluster;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const INPUT: &str = "words";
const PARTITIONS: i32 = 6;
const VOCABULARY: u64 = 1_000;

fn word(i: u64) -> String {
    // A multiplicative hash spreads the vocabulary over the partitions.
    format!("w{:04}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % VOCABULARY)
}

async fn producer(bootstrap: &str, id: &str) -> Result<Producer, BoxError> {
    let config = ProducerConfig::from_properties(&[
        ("bootstrap.servers", bootstrap),
        ("client.id", id),
        ("linger.ms", "5"),
    ])?;
    Ok(Producer::new(config).await?)
}

async fn produce_input(bootstrap: &str, records: u64) -> Result<(), BoxError> {
    let producer = producer(bootstrap, "bench-feeder").await?;
    let mut acks = Vec::new();
    for i in 0..records {
        let record = ProducerRecord::new(INPUT)
            .with_key(word(i))
            .with_timestamp(1_000 + i as i64);
        acks.push(producer.enqueue(record).await?);
    }
    producer.flush().await;
    for a in acks {
        a.await?;
    }
    Ok(())
}

/// consume → HashMap → produce, with weir-client only.
async fn raw(bootstrap: &str, output: &str, records: u64) -> Result<Duration, BoxError> {
    let started = Instant::now();
    let config = ConsumerConfig::from_properties(&[
        ("bootstrap.servers", bootstrap),
        ("client.id", "bench-raw"),
        ("fetch.max.wait.ms", "100"),
    ])?;
    let mut consumer = Consumer::new(config).await?;
    let tps: Vec<_> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(INPUT, p))
        .collect();
    consumer.assign(tps.clone());
    for tp in &tps {
        consumer.seek(tp, SeekTo::Earliest)?;
    }
    let producer = producer(bootstrap, "bench-raw-out").await?;
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut acks = Vec::with_capacity(records as usize);
    let mut seen = 0u64;
    while seen < records {
        for r in consumer.poll().await? {
            seen += 1;
            let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
            let n = counts.entry(key.clone()).or_insert(0);
            *n += 1;
            let record = ProducerRecord::new(output)
                .with_key(key)
                .with_value(n.to_string())
                .with_timestamp(r.timestamp);
            acks.push(producer.enqueue(record).await?);
        }
    }
    producer.flush().await;
    for a in acks {
        a.await?;
    }
    Ok(started.elapsed())
}

/// One streams configuration of the bench.
#[derive(Clone, Copy)]
struct Run {
    guarantee: &'static str,
    commit_ms: &'static str,
    unfenced: bool,
    cached: bool,
}

async fn streams(
    kit: &Cluster,
    output: &str,
    records: u64,
    run: Run,
    state_dir: &std::path::Path,
) -> Result<Duration, BoxError> {
    let Run {
        guarantee,
        commit_ms,
        unfenced,
        cached,
    } = run;
    let bootstrap = kit.bootstrap();
    let dir = state_dir.display().to_string();
    let app = format!("bench-{output}");
    let config = StreamsConfig::from_properties(&[
        ("application.id", app.as_str()),
        ("bootstrap.servers", bootstrap.as_str()),
        ("state.dir", dir.as_str()),
        ("processing.guarantee", guarantee),
        ("commit.interval.ms", commit_ms),
        ("fetch.max.wait.ms", "100"),
        ("linger.ms", "5"),
    ])?;
    let mut config = config;
    if unfenced {
        config.set("weir.internal.unfenced.changelog", "true")?;
    }
    let started = Instant::now();
    let topology = if cached {
        topology_cached(INPUT, output)?
    } else {
        topology(INPUT, output)?
    };
    let instance = KafkaStreams::start(topology, config).await?;
    loop {
        let mut done = 0i64;
        for p in 0..PARTITIONS {
            let (_, lso, _) = kit.offsets(output, p).await?;
            done += lso;
        }
        // Under at-least-once the outputs of records processed but not yet
        // committed may repeat; none do here (no failures), so the sum is exact.
        if done >= records as i64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed();
    instance.close(Duration::from_secs(60)).await?;
    Ok(took)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let records: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(200_000);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    // `WEIR_BENCH_KINDS=alos,eos` runs only those kinds (for a profile of
    // one); the ratios then print as NaN.
    let only = std::env::var("WEIR_BENCH_KINDS").unwrap_or_default();
    // Kafka's transaction timing (markers 20 ms after EndTxn, the abort
    // scan), but no initial rebalance delay: its 3 s, a fixed cost of any new
    // group (Kafka Streams' too), would otherwise be most of each run.
    // `WEIR_BENCH_JOIN_DELAY=1` keeps it.
    let mut builder = Cluster::builder().brokers(1);
    if std::env::var("WEIR_BENCH_JOIN_DELAY").as_deref() != Ok("1") {
        builder = builder.group_initial_rebalance_delay(std::time::Duration::ZERO);
    }
    let kit = builder.build().await?;
    let bootstrap = kit.bootstrap();
    let none: [(&str, &str); 0] = [];
    kit.create_topic(INPUT, PARTITIONS, none).await?;
    produce_input(&bootstrap, records).await?;
    println!(
        "streams word count bench: {records} records, {VOCABULARY} words, {PARTITIONS} \
         partitions, one embedded broker; every run, then medians"
    );
    const KINDS: [&str; 6] = [
        "raw",
        "alos",
        "alos-unfenced",
        "eos",
        "alos-uncached",
        "eos-uncached",
    ];
    let mut ratios: [Vec<f64>; 5] = Default::default();
    for round in 0..rounds {
        let mut line = format!("round {round}:");
        let mut times = [f64::NAN; KINDS.len()];
        // The order turns each round, so drift in the machine favours none.
        for step in 0..KINDS.len() {
            let kind = (round + step) % KINDS.len();
            let name = KINDS[kind];
            if !only.is_empty() && !only.split(',').any(|k| k == name) {
                continue;
            }
            let output = format!("out-{round}-{name}");
            kit.create_topic(&output, PARTITIONS, none).await?;
            let dir = tempfile::tempdir()?;
            let run = |guarantee, commit_ms, unfenced, cached| Run {
                guarantee,
                commit_ms,
                unfenced,
                cached,
            };
            let (alos, eos) = ("at_least_once", "exactly_once_v2");
            let took = match kind {
                0 => raw(&bootstrap, &output, records).await?,
                k => {
                    let r = match k {
                        1 => run(alos, "30000", false, true),
                        2 => run(alos, "30000", true, true),
                        3 => run(eos, "100", false, true),
                        4 => run(alos, "30000", false, false),
                        _ => run(eos, "100", false, false),
                    };
                    streams(&kit, &output, records, r, dir.path()).await?
                }
            };
            let rate = records as f64 / took.as_secs_f64();
            line.push_str(&format!("  {name} {took:>8.2?} ({rate:>8.0}/s)"));
            times[kind] = took.as_secs_f64();
        }
        let round_ratios = [
            times[0] / times[1],
            times[0] / times[3],
            times[0] / times[4],
            times[0] / times[5],
            times[2] / times[1],
        ];
        println!(
            "{line}  ratios alos {:.2}x eos {:.2}x, uncached alos {:.2}x eos {:.2}x, \
             fenced/unfenced {:.2}x",
            round_ratios[0], round_ratios[1], round_ratios[2], round_ratios[3], round_ratios[4]
        );
        for (all, r) in ratios.iter_mut().zip(round_ratios) {
            all.push(r);
        }
    }
    let [alos, eos, alos_uncached, eos_uncached, fence] = ratios.map(median);
    println!(
        "median throughput ratio to the raw loop: at-least-once {alos:.2}x (target >= 0.7), \
         exactly-once v2 {eos:.2}x (target >= 0.5); without caching on the store \
         {alos_uncached:.2}x and {eos_uncached:.2}x; the per-task fence's throughput against \
         an unfenced changelog: {fence:.2}x"
    );
    Ok(())
}
