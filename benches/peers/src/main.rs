//! Weir against rust-rdkafka (librdkafka) on the same broker, in one run
//! (issue 18): produce, consume, and end-to-end restore of a changelog.
//!
//! ```text
//! cd benches/peers && cargo run --release -- [--records N] [--restore-records N] [--runs N]
//! ```
//!
//! The parent process starts `weir-testkit serve` (in its own process),
//! creates and fills the topics, then runs every measurement as a child
//! process of this same binary (`peers --child CASE ...`), Weir and rdkafka
//! alternating, so that each side's CPU time (`getrusage(RUSAGE_SELF)`
//! user + system over the timed phase) and peak RSS (`VmHWM` of the
//! child) are its own. Every run is printed, then the medians and ratios.

use std::error::Error;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer as _, ProducerContext};
use weir_client::Cluster;
use weir_client::admin::{Admin, NewTopic};
use weir_client::config::ClientConfig;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions};
use weir_client::config::producer::{Acks, ProducerOptions};
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{DeliveryGroup, Producer, ProducerRecord};
use weir_protocol::records::Compression;
use weir_store::{ChangelogPartition, ChangelogRecord, RestorePath, StoreOptions, TaskStore};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// Produce keys are 8 bytes; changelog keys 16, values 100.
const PRODUCE_KEY_LEN: usize = 8;
const RESTORE_KEY_LEN: usize = 16;
const RESTORE_VALUE_LEN: usize = 100;
/// Partitions of each produce topic.
const PRODUCE_PARTITIONS: i32 = 3;
/// Distinct keys and values the producers cycle through (made before timing).
const POOL: usize = 1024;
/// Records per `Producer::enqueue_all_into` call of the Weir produce runs.
const ENQUEUE_CHUNK: usize = 1_000;
/// RocksDB write batches of the rdkafka restore baseline, as Kafka Streams.
const ROCKSDB_BATCH: usize = 1_000;
/// The result line a child prints for its parent.
const RESULT_TAG: &str = "PEERS-RESULT";

#[derive(Parser, Debug)]
#[command(name = "peers", about = "Weir against rust-rdkafka on one broker")]
struct Args {
    /// Records of each produce and consume run.
    #[arg(long, default_value_t = 200_000)]
    records: usize,
    /// Records of the changelog each restore run reads.
    #[arg(long, default_value_t = 1_000_000)]
    restore_records: usize,
    /// Runs of each side per case (the median counts).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Phases to run, comma-separated: produce, consume, restore.
    #[arg(long, default_value = "produce,consume,restore")]
    phases: String,
    /// The weir-testkit binary (default: $WEIR_TESTKIT_BIN, else the root
    /// workspace's target/release/weir-testkit).
    #[arg(long)]
    testkit: Option<PathBuf>,
    /// Use this broker instead of starting weir-testkit.
    #[arg(long)]
    bootstrap: Option<String>,
    /// Where the restore stores are written (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Internal: run one measurement in this process and print its result.
    #[arg(long, hide = true)]
    child: Option<String>,
    /// Internal (child): the topic.
    #[arg(long, hide = true)]
    topic: Option<String>,
    /// Internal (child): the value size of a produce run.
    #[arg(long, hide = true, default_value_t = 100)]
    value_len: usize,
    /// Internal (child): the codec of a produce run.
    #[arg(long, hide = true, default_value = "none")]
    codec: String,
    /// Internal (child): partitions of the topic.
    #[arg(long, hide = true, default_value_t = 1)]
    partitions: i32,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let outcome = match args.child.clone() {
        Some(case) => child(&case, &args),
        None => parent(&args),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peers: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

// ---- measurement ------------------------------------------------------------------------

/// User + system CPU time of this process so far.
fn cpu_time() -> Result<Duration> {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_SELF)?;
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    Ok(tv(u.user_time()) + tv(u.system_time()))
}

/// Peak resident set of this process since its exec, in KiB (`VmHWM` of
/// /proc/self/status). Not `ru_maxrss`: Linux carries the forking parent's
/// resident set over the exec into the child's `ru_maxrss`, so every child
/// reported the parent's peak (513 MiB for each side of a 1M restore, the
/// parent holding the changelog).
fn max_rss_kib() -> Result<i64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .ok_or("no VmHWM in /proc/self/status")?;
    Ok(line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?)
}

/// One timed phase: wall clock and CPU time from `start` to `finish`.
struct Timer {
    wall: Instant,
    cpu: Duration,
}

impl Timer {
    fn start() -> Result<Timer> {
        Ok(Timer {
            wall: Instant::now(),
            cpu: cpu_time()?,
        })
    }

    /// Prints the result line the parent parses.
    fn finish(self, records: usize) -> Result<()> {
        let wall = self.wall.elapsed();
        let cpu = cpu_time()?.saturating_sub(self.cpu);
        println!(
            "{RESULT_TAG} {records} {} {} {}",
            wall.as_secs_f64(),
            cpu.as_secs_f64(),
            max_rss_kib()?
        );
        Ok(())
    }
}

/// What a child measured.
#[derive(Debug, Clone, Copy)]
struct Sample {
    records: usize,
    wall: f64,
    cpu: f64,
    rss_kib: i64,
}

impl Sample {
    fn per_sec(&self) -> f64 {
        self.records as f64 / self.wall
    }
    fn cpu_us_per_record(&self) -> f64 {
        self.cpu * 1e6 / self.records as f64
    }
}

impl FromStr for Sample {
    type Err = Box<dyn Error + Send + Sync>;
    fn from_str(line: &str) -> Result<Sample> {
        let mut f = line.split_whitespace();
        if f.next() != Some(RESULT_TAG) {
            return Err(format!("not a result line: {line}").into());
        }
        let mut next = || f.next().ok_or_else(|| format!("short result line: {line}"));
        Ok(Sample {
            records: next()?.parse()?,
            wall: next()?.parse()?,
            cpu: next()?.parse()?,
            rss_kib: next()?.parse()?,
        })
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

// ---- data -------------------------------------------------------------------------------

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// A JSON-like value of exactly `len` bytes whose tail is random hex digits:
/// compressible about 2:1, so the codecs have work to do.
fn produce_value(i: usize, len: usize) -> Bytes {
    let mut v = format!(
        "{{\"user\":{},\"event\":\"click\",\"seq\":{i},\"pad\":\"",
        i % 977
    )
    .into_bytes();
    let mut x = 0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1);
    while v.len() + 2 < len {
        v.push(b"0123456789abcdef"[(xorshift(&mut x) & 15) as usize]);
    }
    v.extend_from_slice(b"\"}");
    v.truncate(len);
    Bytes::from(v)
}

fn produce_key(i: usize) -> Bytes {
    let mut k = format!("k{i:07}").into_bytes();
    k.truncate(PRODUCE_KEY_LEN);
    Bytes::from(k)
}

/// The changelog's records: 16-byte random keys and 100-byte random values,
/// the same for every caller (the restore bench of weir-benches uses the same
/// shape).
fn changelog(records: usize) -> Vec<(Bytes, Bytes)> {
    let mut x = 0x2545_F491_4F6C_DD1D_u64;
    let mut fill = |n: usize| {
        let mut out = Vec::with_capacity(n + 8);
        while out.len() < n {
            out.extend_from_slice(&xorshift(&mut x).to_le_bytes());
        }
        out.truncate(n);
        Bytes::from(out)
    };
    (0..records)
        .map(|_| (fill(RESTORE_KEY_LEN), fill(RESTORE_VALUE_LEN)))
        .collect()
}

fn codec(name: &str) -> Result<Compression> {
    match name {
        "none" => Ok(Compression::None),
        "gzip" => Ok(Compression::Gzip),
        "snappy" => Ok(Compression::Snappy),
        "lz4" => Ok(Compression::Lz4),
        "zstd" => Ok(Compression::Zstd),
        other => Err(format!("unknown codec {other}").into()),
    }
}

// ---- children ---------------------------------------------------------------------------

fn child(case: &str, args: &Args) -> Result<()> {
    let bootstrap = args
        .bootstrap
        .as_deref()
        .ok_or("--child needs --bootstrap")?;
    let topic = args.topic.as_deref().ok_or("--child needs --topic")?;
    let rt = tokio::runtime::Runtime::new()?;
    match case {
        "produce-weir" => rt.block_on(produce_weir(bootstrap, topic, args)),
        "produce-rdkafka" => produce_rdkafka(bootstrap, topic, args),
        "consume-weir" => rt.block_on(consume_weir(bootstrap, topic, args)),
        "consume-rdkafka" => consume_rdkafka(bootstrap, topic, args),
        "restore-weir" => rt.block_on(restore_weir(bootstrap, topic, args)),
        "restore-rocksdb" => restore_rocksdb(bootstrap, topic, args),
        "restore-store-only" => restore_store_only(args),
        other => Err(format!("unknown case {other}").into()),
    }
}

async fn connect(bootstrap: &str) -> Result<Cluster> {
    let config = ClientConfig::from_properties(&[("bootstrap.servers", bootstrap)])?;
    Ok(Cluster::connect(config).await?)
}

fn pool(value_len: usize) -> (Vec<Bytes>, Vec<Bytes>) {
    (
        (0..POOL).map(produce_key).collect(),
        (0..POOL).map(|i| produce_value(i, value_len)).collect(),
    )
}

async fn produce_weir(bootstrap: &str, topic: &str, args: &Args) -> Result<()> {
    let (keys, values) = pool(args.value_len);
    let options = ProducerOptions {
        acks: Acks::All,
        enable_idempotence: Some(true),
        linger: Duration::from_millis(5),
        batch_size: 64 << 10,
        compression: codec(&args.codec)?,
        ..Default::default()
    };
    let producer = Producer::with_cluster(connect(bootstrap).await?, options)?;
    // One acknowledged record before the clock starts, on both sides: the
    // figures are the steady state, not the connection and InitProducerId.
    producer
        .send(
            ProducerRecord::new(topic)
                .with_key(keys[0].clone())
                .with_value(values[0].clone()),
        )
        .await?;
    let timer = Timer::start()?;
    // The batch API, as the streams runtime sends: `ENQUEUE_CHUNK` records
    // per call, every outcome counted in one group instead of a future each.
    let group = DeliveryGroup::new();
    let mut i = 0;
    while i < args.records {
        let end = (i + ENQUEUE_CHUNK).min(args.records);
        let chunk = (i..end)
            .map(|j| {
                ProducerRecord::new(topic)
                    .with_key(keys[j % POOL].clone())
                    .with_value(values[j % POOL].clone())
            })
            .collect();
        producer.enqueue_all_into(chunk, &group).await?;
        i = end;
    }
    // As rdkafka's side: flush (no linger wait for the last batches), then
    // every record acknowledged.
    producer.flush().await;
    let ends = group.wait().await?;
    timer.finish(args.records)?;
    // A fresh topic holding the warm-up record and these: the offsets after
    // the last records written add up to all of them (the warm-up record's
    // partition may have had none of the group's).
    let written: i64 = ends.values().sum();
    let expected = args.records as i64;
    if written != expected && written != expected + 1 {
        return Err(format!("weir: {written} records written, {expected} enqueued").into());
    }
    producer.close().await;
    Ok(())
}

/// Counts rdkafka's delivery reports and their failures.
#[derive(Default)]
struct Deliveries {
    failed: std::sync::atomic::AtomicUsize,
    delivered: std::sync::atomic::AtomicUsize,
}

impl rdkafka::ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        use std::sync::atomic::Ordering::Relaxed;
        match result {
            Ok(_) => self.delivered.fetch_add(1, Relaxed),
            Err(_) => self.failed.fetch_add(1, Relaxed),
        };
    }
}

fn produce_rdkafka(bootstrap: &str, topic: &str, args: &Args) -> Result<()> {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    use std::sync::atomic::Ordering::Relaxed;
    let (keys, values) = pool(args.value_len);
    let producer: BaseProducer<Deliveries> = rdkafka_config(bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("batch.size", (64 << 10).to_string())
        .set("compression.type", &args.codec)
        .create_with_context(Deliveries::default())?;
    // The warm-up record, as on the Weir side.
    producer
        .send(
            BaseRecord::to(topic)
                .key(&keys[0][..])
                .payload(&values[0][..]),
        )
        .map_err(|(e, _)| e)?;
    producer.flush(Duration::from_secs(30))?;
    let timer = Timer::start()?;
    for i in 0..args.records {
        let mut record = BaseRecord::to(topic)
            .key(&keys[i % POOL][..])
            .payload(&values[i % POOL][..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(1));
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
        producer.poll(Duration::ZERO);
    }
    // Not `flush`: rust-rdkafka 0.38's `BaseProducer::flush` polls in
    // whole 100 ms steps (`poll` runs to its timeout even after an event),
    // which added up to 100 ms to every run of about 0.2 s. Polls of 1 ms
    // until every delivery report is in end within 1 ms of the last one.
    let ctx = producer.context();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while ctx.delivered.load(Relaxed) + ctx.failed.load(Relaxed) < args.records + 1 {
        if std::time::Instant::now() > deadline {
            return Err("rdkafka: delivery reports missing after 120 s".into());
        }
        producer.poll(Duration::from_millis(1));
    }
    let (delivered, failed) = (ctx.delivered.load(Relaxed), ctx.failed.load(Relaxed));
    if delivered != args.records + 1 || failed != 0 {
        return Err(format!("rdkafka: {delivered} delivered, {failed} failed").into());
    }
    timer.finish(args.records)
}

fn weir_consumer(cluster: Cluster) -> Consumer {
    let options = ConsumerOptions {
        auto_offset_reset: AutoOffsetReset::Earliest,
        ..Default::default()
    };
    Consumer::with_cluster(cluster, options)
}

/// Assigns partitions `0..partitions` of `topic`, each from offset 0 (no I/O
/// until the first poll).
fn weir_assign(consumer: &mut Consumer, topic: &str, partitions: i32) -> Result<()> {
    let tps: Vec<_> = (0..partitions)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    consumer.assign(tps.clone());
    for tp in &tps {
        // Offset 0 rather than Earliest on both sides: librdkafka's
        // OFFSET_BEGINNING against weir-testkit costs 0.5 s per partition
        // leader before the first fetch (benches/README.md).
        consumer.seek(tp, SeekTo::Offset(0))?;
    }
    Ok(())
}

/// The consume runs' clock starts once the consumer exists and holds the
/// topic's metadata, on both sides (`rdkafka_connected`), and stops after
/// the last record: it times assign, the first fetches and the reads.
async fn consume_weir(bootstrap: &str, topic: &str, args: &Args) -> Result<()> {
    let cluster = connect(bootstrap).await?;
    cluster.refresh_metadata(&[topic]).await?;
    let mut consumer = weir_consumer(cluster);
    let timer = Timer::start()?;
    weir_assign(&mut consumer, topic, args.partitions)?;
    let (mut n, mut bytes) = (0, 0usize);
    while n < args.records {
        let records = consumer.poll().await?;
        n += records.len();
        // Touch what a user would, as the rdkafka side does.
        bytes += records
            .iter()
            .map(|r| r.value.as_ref().map_or(0, Bytes::len))
            .sum::<usize>();
    }
    std::hint::black_box(bytes);
    timer.finish(n)
}

/// librdkafka's configuration: the bootstrap servers, then any
/// `PEERS_RDKAFKA="key=value;key=value"` properties (for experiments).
fn rdkafka_config(bootstrap: &str) -> rdkafka::ClientConfig {
    let mut config = rdkafka::ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    if let Ok(extra) = std::env::var("PEERS_RDKAFKA") {
        for kv in extra.split(';').filter(|kv| !kv.is_empty()) {
            if let Some((k, v)) = kv.split_once('=') {
                config.set(k, v);
            }
        }
    }
    config
}

fn rdkafka_consumer(bootstrap: &str) -> Result<BaseConsumer> {
    Ok(rdkafka_config(bootstrap)
        .set("group.id", "weir-peers")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()?)
}

/// Waits until librdkafka has a broker connection and `topic`'s metadata:
/// `create` returns before either (its threads connect in the background).
fn rdkafka_connected(consumer: &BaseConsumer, topic: &str) -> Result<()> {
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(30))?;
    if md.topics().iter().all(|t| t.name() != topic) {
        return Err(format!("rdkafka: no metadata for {topic}").into());
    }
    Ok(())
}

/// Assigns partitions `0..partitions` of `topic`, each from offset 0
/// (librdkafka starts fetching at once).
fn rdkafka_assign(consumer: &BaseConsumer, topic: &str, partitions: i32) -> Result<()> {
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Offset(0))?;
    }
    consumer.assign(&tpl)?;
    Ok(())
}

fn consume_rdkafka(bootstrap: &str, topic: &str, args: &Args) -> Result<()> {
    let consumer = rdkafka_consumer(bootstrap)?;
    rdkafka_connected(&consumer, topic)?;
    let timer = Timer::start()?;
    rdkafka_assign(&consumer, topic, args.partitions)?;
    let (mut n, mut bytes) = (0, 0usize);
    while n < args.records {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                n += 1;
                bytes += m.payload().map_or(0, <[u8]>::len);
            }
            Some(Err(e)) => return Err(e.into()),
            None => {}
        }
    }
    std::hint::black_box(bytes);
    timer.finish(n)
}

fn store_dir(args: &Args) -> Result<tempfile::TempDir> {
    Ok(match &args.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    })
}

fn empty_restorer(task: &TaskStore, end: i64) -> Result<weir_store::ChangelogRestorer> {
    task.key_value_store("kv")?;
    let tp = ChangelogPartition::new("peers-changelog", 0);
    let restorer = task.restorer("kv", tp, end)?;
    if restorer.path() != RestorePath::SortedRuns {
        return Err(format!("empty store restored by {:?}", restorer.path()).into());
    }
    Ok(restorer)
}

/// Weir's consumer fetching and decoding the changelog, its records handed
/// to weir-store's `ChangelogRestorer` as each poll returns them (as the
/// streams runtime does), until the store is finished (durable).
async fn restore_weir(bootstrap: &str, topic: &str, args: &Args) -> Result<()> {
    let dir = store_dir(args)?;
    let end = args.restore_records as i64;
    let timer = Timer::start()?;
    let task = TaskStore::open(dir.path().join("task"), StoreOptions::default())?;
    let mut restorer = empty_restorer(&task, end)?;
    let mut consumer = weir_consumer(connect(bootstrap).await?);
    weir_assign(&mut consumer, topic, 1)?;
    let mut n = 0;
    while n < args.restore_records {
        let records = consumer.poll().await?;
        let batch: Vec<ChangelogRecord<'_>> = records
            .iter()
            .filter(|r| r.offset < end)
            .map(|r| ChangelogRecord {
                offset: r.offset,
                key: r.key.as_deref().unwrap_or_default(),
                value: r.value.as_deref(),
            })
            .collect();
        n += batch.len();
        restorer.apply(&batch)?;
    }
    restorer.finish()?;
    timer.finish(n)
}

/// rust-rdkafka's consumer feeding RocksDB write batches of 1,000 with the
/// WAL off, as Kafka Streams restores (RocksDB options as Kafka Streams'
/// RocksDBStore sets them: no compression, universal compaction, 16 MiB
/// write buffers, 3 of them), then a flush of the memtables.
fn restore_rocksdb(bootstrap: &str, topic: &str, args: &Args) -> Result<()> {
    let dir = store_dir(args)?;
    let timer = Timer::start()?;
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    opts.set_compression_type(rocksdb::DBCompressionType::None);
    opts.set_compaction_style(rocksdb::DBCompactionStyle::Universal);
    opts.set_write_buffer_size(16 << 20);
    opts.set_max_write_buffer_number(3);
    opts.increase_parallelism(
        std::thread::available_parallelism().map_or(2, |n| n.get().max(2)) as i32,
    );
    let db = rocksdb::DB::open(&opts, dir.path().join("rocksdb"))?;
    let mut write = rocksdb::WriteOptions::default();
    write.disable_wal(true);
    let consumer = rdkafka_consumer(bootstrap)?;
    rdkafka_assign(&consumer, topic, 1)?;
    let mut batch = rocksdb::WriteBatch::default();
    let mut n = 0;
    while n < args.restore_records {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                n += 1;
                match m.payload() {
                    Some(v) => batch.put(m.key().unwrap_or_default(), v),
                    None => batch.delete(m.key().unwrap_or_default()),
                }
                if batch.len() >= ROCKSDB_BATCH {
                    db.write_opt(std::mem::take(&mut batch), &write)?;
                }
            }
            Some(Err(e)) => return Err(e.into()),
            None => {}
        }
    }
    if !batch.is_empty() {
        db.write_opt(batch, &write)?;
    }
    db.flush()?;
    timer.finish(n)
}

/// weir-store's restore of the same records, already in memory, handed over
/// in the 500-record batches a Weir poll returns: the ceiling for `restore-weir`.
fn restore_store_only(args: &Args) -> Result<()> {
    let dir = store_dir(args)?;
    let records = changelog(args.restore_records);
    let timer = Timer::start()?;
    let task = TaskStore::open(dir.path().join("task"), StoreOptions::default())?;
    let mut restorer = empty_restorer(&task, records.len() as i64)?;
    let max_poll = ConsumerOptions::default().max_poll_records;
    for (c, chunk) in records.chunks(max_poll).enumerate() {
        let batch: Vec<ChangelogRecord<'_>> = chunk
            .iter()
            .enumerate()
            .map(|(i, (k, v))| ChangelogRecord {
                offset: (c * max_poll + i) as i64,
                key: k,
                value: Some(v),
            })
            .collect();
        restorer.apply(&batch)?;
    }
    restorer.finish()?;
    timer.finish(records.len())
}

// ---- parent -----------------------------------------------------------------------------

/// `weir-testkit serve`, killed when dropped.
struct Broker {
    process: Child,
    bootstrap: String,
}

impl Broker {
    fn start(exe: &Path) -> Result<Broker> {
        let mut process = Command::new(exe)
            .args([
                "serve",
                "--port",
                "0",
                "--brokers",
                "1",
                "--partitions",
                "1",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", exe.display()))?;
        let mut line = String::new();
        if let Some(out) = process.stdout.take() {
            BufReader::new(out).read_line(&mut line)?;
        }
        let bootstrap = line.trim().to_owned();
        let broker = Broker { process, bootstrap };
        if broker.bootstrap.is_empty() {
            return Err("weir-testkit printed no bootstrap address".into());
        }
        Ok(broker)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

fn testkit_exe(args: &Args) -> PathBuf {
    args.testkit
        .clone()
        .or_else(|| std::env::var_os("WEIR_TESTKIT_BIN").map(PathBuf::from))
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/weir-testkit")
        })
}

/// Runs one measurement in a child process of this binary.
fn run_child(case: &str, bootstrap: &str, topic: &str, extra: &[String]) -> Result<Sample> {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe)
        .args(["--child", case, "--bootstrap", bootstrap, "--topic", topic])
        .args(extra)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("child {case} failed ({}): {stdout}", out.status).into());
    }
    stdout
        .lines()
        .rev()
        .find(|l| l.starts_with(RESULT_TAG))
        .ok_or_else(|| format!("child {case} printed no result: {stdout}"))?
        .parse()
}

async fn create_topic(cluster: &Cluster, topic: &str, partitions: i32) -> Result<()> {
    let admin = Admin::new(cluster.clone());
    for (name, result) in admin
        .create_topics(&[NewTopic::new(topic, partitions).replication_factor(1)])
        .await?
    {
        result.map_err(|e| format!("creating {name}: {e}"))?;
    }
    // The testkit creates topics synchronously; this only guards against a
    // broker that does not.
    for _ in 0..200 {
        let md = cluster.refresh_metadata(&[topic]).await?;
        if md.topic(topic).is_some_and(|t| {
            t.partitions.len() == partitions as usize && t.partitions.iter().all(|p| p.leader >= 0)
        }) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(format!("topic {topic} has no leaders").into())
}

async fn delete_topic(cluster: &Cluster, topic: &str) -> Result<()> {
    for (name, result) in Admin::new(cluster.clone()).delete_topics(&[topic]).await? {
        result.map_err(|e| format!("deleting {name}: {e}"))?;
    }
    Ok(())
}

/// Fills a topic with Weir's producer (not measured).
async fn fill(cluster: &Cluster, topic: &str, records: &[(Bytes, Bytes)]) -> Result<()> {
    let producer = Producer::with_cluster(
        cluster.clone(),
        ProducerOptions {
            batch_size: 256 << 10,
            ..Default::default()
        },
    )?;
    let mut deliveries = Vec::with_capacity(records.len());
    for (k, v) in records {
        let record = ProducerRecord::new(topic)
            .with_key(k.clone())
            .with_value(v.clone());
        deliveries.push(producer.enqueue(record).await?);
    }
    for d in deliveries {
        d.await?;
    }
    producer.close().await;
    Ok(())
}

/// One case's figures: the samples of each side, in run order.
struct Case {
    name: String,
    sides: Vec<(&'static str, Vec<Sample>)>,
}

impl Case {
    fn medians(&self, side: usize) -> (f64, f64, f64) {
        let s = &self.sides[side].1;
        (
            median(s.iter().map(Sample::per_sec).collect()),
            median(s.iter().map(Sample::cpu_us_per_record).collect()),
            median(s.iter().map(|x| x.rss_kib as f64 / 1024.0).collect()),
        )
    }
}

fn print_sample(case: &str, side: &str, run: usize, s: &Sample) {
    println!(
        "  {case:<22} {side:<12} run {run}: {:>10.0} records/s {:>7.3} µs CPU/record {:>7.1} MiB peak RSS  ({} records, {:.3} s wall, {:.3} s CPU)",
        s.per_sec(),
        s.cpu_us_per_record(),
        s.rss_kib as f64 / 1024.0,
        s.records,
        s.wall,
        s.cpu
    );
}

/// Runs `sides` alternately, `runs` times each; `setup(run, side)` names the
/// topic and extra child arguments of a run, `teardown` cleans up after it.
fn measure(
    name: &str,
    runs: usize,
    bootstrap: &str,
    sides: &[(&'static str, &'static str)],
    mut setup: impl FnMut(usize, usize) -> Result<(String, Vec<String>)>,
    mut teardown: impl FnMut(&str) -> Result<()>,
) -> Result<Case> {
    let mut case = Case {
        name: name.to_owned(),
        sides: sides
            .iter()
            .map(|(label, _)| (*label, Vec::new()))
            .collect(),
    };
    for run in 1..=runs {
        for (i, (label, child_case)) in sides.iter().enumerate() {
            let (topic, extra) = setup(run, i)?;
            let s = run_child(child_case, bootstrap, &topic, &extra)?;
            print_sample(name, label, run, &s);
            case.sides[i].1.push(s);
            teardown(&topic)?;
        }
    }
    Ok(case)
}

fn parent(args: &Args) -> Result<()> {
    let phases: Vec<&str> = args.phases.split(',').map(str::trim).collect();
    for p in &phases {
        if !["produce", "consume", "restore"].contains(p) {
            return Err(format!("unknown phase {p} (produce, consume, restore)").into());
        }
    }
    let _broker;
    let bootstrap = match &args.bootstrap {
        Some(b) => b.clone(),
        None => {
            let exe = testkit_exe(args);
            let broker = Broker::start(&exe)?;
            let b = broker.bootstrap.clone();
            _broker = broker;
            b
        }
    };
    println!(
        "peers: broker {bootstrap}; {} records per produce/consume run, {} per restore, {} runs per side",
        args.records, args.restore_records, args.runs
    );
    let rt = tokio::runtime::Runtime::new()?;
    let cluster = rt.block_on(connect(&bootstrap))?;
    let run_id = std::process::id();
    let mut cases = Vec::new();
    let extra = |pairs: &[(&str, String)]| -> Vec<String> {
        pairs
            .iter()
            .flat_map(|(k, v)| [format!("--{k}"), v.clone()])
            .collect()
    };

    if phases.contains(&"produce") {
        println!(
            "\nproduce: acks=all, idempotent, linger 5 ms, batch 64 KiB, 8 B keys, {PRODUCE_PARTITIONS} partitions, a fresh topic each run"
        );
        for (codec_name, value_len) in [("none", 100), ("lz4", 100), ("zstd", 100), ("none", 1024)]
        {
            let name = format!("produce {value_len} B {codec_name}");
            let case = measure(
                &name,
                args.runs,
                &bootstrap,
                &[("weir", "produce-weir"), ("rdkafka", "produce-rdkafka")],
                |run, side| {
                    let topic =
                        format!("peers-produce-{run_id}-{codec_name}-{value_len}-{run}-{side}");
                    rt.block_on(create_topic(&cluster, &topic, PRODUCE_PARTITIONS))?;
                    Ok((
                        topic,
                        extra(&[
                            ("records", args.records.to_string()),
                            ("value-len", value_len.to_string()),
                            ("codec", codec_name.to_owned()),
                        ]),
                    ))
                },
                |topic| rt.block_on(delete_topic(&cluster, topic)),
            )?;
            cases.push(case);
        }
    }

    if phases.contains(&"consume") {
        println!(
            "\nconsume: a fresh consumer reads every record from the start (100 B values, 8 B keys)"
        );
        let records: Vec<(Bytes, Bytes)> = (0..args.records)
            .map(|i| (produce_key(i), produce_value(i, 100)))
            .collect();
        for partitions in [1, 12] {
            let topic = format!("peers-consume-{run_id}-{partitions}");
            rt.block_on(async {
                create_topic(&cluster, &topic, partitions).await?;
                fill(&cluster, &topic, &records).await
            })?;
            let name = format!("consume {partitions} partition(s)");
            let case = measure(
                &name,
                args.runs,
                &bootstrap,
                &[("weir", "consume-weir"), ("rdkafka", "consume-rdkafka")],
                |_, _| {
                    Ok((
                        topic.clone(),
                        extra(&[
                            ("records", args.records.to_string()),
                            ("partitions", partitions.to_string()),
                        ]),
                    ))
                },
                |_| Ok(()),
            )?;
            rt.block_on(delete_topic(&cluster, &topic))?;
            cases.push(case);
        }
    }

    if phases.contains(&"restore") {
        println!(
            "\nrestore: a 1-partition changelog of {} records (16 B keys, 100 B values) into an empty store",
            args.restore_records
        );
        let topic = format!("peers-changelog-{run_id}");
        rt.block_on(async {
            create_topic(&cluster, &topic, 1).await?;
            fill(&cluster, &topic, &changelog(args.restore_records)).await
        })?;
        let mut dir = Vec::new();
        if let Some(d) = &args.dir {
            dir = vec!["--dir".to_owned(), d.display().to_string()];
        }
        let case = measure(
            "restore",
            args.runs,
            &bootstrap,
            &[
                ("weir", "restore-weir"),
                ("rdkafka+rocksdb", "restore-rocksdb"),
                ("store-only", "restore-store-only"),
            ],
            |_, _| {
                let mut e = extra(&[("restore-records", args.restore_records.to_string())]);
                e.extend(dir.iter().cloned());
                Ok((topic.clone(), e))
            },
            |_| Ok(()),
        )?;
        rt.block_on(delete_topic(&cluster, &topic))?;
        cases.push(case);
    }

    summary(&cases);
    Ok(())
}

fn summary(cases: &[Case]) {
    println!(
        "\nmedians of each side's runs (records/s, µs CPU per record, MiB peak RSS) and ratios of Weir to each other side"
    );
    println!(
        "| case | side | records/s | µs CPU/record | peak RSS MiB | Weir records/s ÷ side | Weir CPU/record ÷ side |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for case in cases {
        let (w_rate, w_cpu, _) = case.medians(0);
        for (i, (side, _)) in case.sides.iter().enumerate() {
            let (rate, cpu, rss) = case.medians(i);
            let ratios = if i == 0 {
                "| | ".to_owned()
            } else {
                format!("| {:.2}× | {:.2}×", w_rate / rate, w_cpu / cpu)
            };
            println!(
                "| {} | {side} | {rate:.0} | {cpu:.3} | {rss:.1} {ratios} |",
                case.name
            );
        }
    }
}
