//! A soak of the streams runtime: a stateful word count runs for a set
//! time on the embedded testkit cluster, with one fault every interval, and
//! an independent exactly-once check at the end (issue 17.4). Real wall
//! clock and real TCP connections: it is a bench, not a test, and not in
//! `.ci/run`.
//!
//! `cargo run --release -p weir-benches --bin soak -- [--minutes M] [--fault-every-secs S]
//! [--instances N] [--rate R] [--guarantee eos|alos] [--rss-bound-mib B]`
//! (defaults: 30 minutes, a fault every 60 s, 3 instances, 2,000 input
//! records/s, exactly-once v2, 576 MiB: see below).
//!
//! **Workload.** A producer writes records keyed by one of 1,000 words
//! (null values) to a six-partition input topic at the rate, and counts per
//! word what was acknowledged. `N` [`KafkaStreams`] instances (one stream
//! thread each, static membership) run the word count of
//! `streams_wordcount`: a persistent key-value store with a changelog and
//! `word → count` to the output.
//!
//! **Faults**, one at every multiple of `S` seconds, in turn over the
//! instances:
//! even faults are a hard kill ([`KafkaStreams::kill`]) followed by a
//! restart one second later on the same state directory, or, every third
//! kill, on an empty one (a full restore from the changelog); odd faults are
//! a rolling restart: every instance in turn closed gracefully, restarted on
//! its directory, and waited for until it runs.
//!
//! **Every 10 s** one line: input acknowledged per second, committed output
//! records per second (counted from the output log's batch headers and
//! transaction markers), `VmRSS` and `VmHWM` of this process, the bytes the
//! testkit retains in its logs (every partition of every topic: it runs in
//! this process and keeps every log in memory, without retention), `VmRSS`
//! minus those bytes, open file descriptors and live instances.
//!
//! **At the end** the producer and the faults stop, the run waits (at most
//! 180 s) until every input is counted in the committed output and no
//! transaction is open, the instances close, and the check reads the
//! committed (non-aborted) output records straight off the testkit's raw
//! log and its markers: under exactly-once each word's counts must be
//! exactly `1, 2, …, n` in offset order, `n` its acknowledged input count;
//! under at-least-once each of `1..=n` must appear (no loss), and repeats
//! and counts above `n` are reported.
//!
//! **The memory bound.** `VmRSS` minus the testkit's logs (their batch
//! bytes plus a `StoredBatch` per batch) may grow by at most `B` MiB from
//! the first sample after a minute (warm-up) to the last. The default is
//! what the stores may hold by design: each task's store (one per input
//! partition) keeps its writes in a memtable of up to 64 MiB, flushed at
//! the latest once its journal passes 64 MiB, and a block cache of up to
//! 32 MiB (`weir_store::StoreOptions` defaults, which the runtime uses):
//! 6 × 96 MiB. Without faults the growth is steady (about 0.35 MiB/s at
//! 2,000 records/s in a 1.5-minute run), which this attributes to the
//! memtables (not measured inside fjall); at this rate a task's journal
//! reaches 64 MiB only after about an hour, so a 30-minute run shows
//! growth, not the plateau. The summary also gives the growth per minute
//! over the first and the second half of the samples after warm-up. The
//! exit status is nonzero if the
//! check or the bound fails.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use weir_client::config::producer::ProducerConfig;
use weir_client::producer::{DeliveryFuture, Producer, ProducerRecord};
use weir_integration::eos::visible_records;
use weir_integration::word_count::topology;
use weir_protocol::records::{ControlKind, DecodeOptions, decode_batches};
use weir_streams::runtime::State;
use weir_streams::{KafkaStreams, StreamsConfig};
use weir_testkit::Cluster;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const APP: &str = "soak";
const INPUT: &str = "soak-in";
const OUTPUT: &str = "soak-out";
const PARTITIONS: i32 = 6;
const VOCABULARY: usize = 1_000;
const REPORT_EVERY: Duration = Duration::from_secs(10);
const WARMUP: Duration = Duration::from_secs(60);
const DRAIN_TIMEOUT: Duration = Duration::from_secs(180);

// ---------------------------------------------------------------------------
// The application is weir_integration::word_count, as in streams_wordcount;
// the input words:

fn word(i: usize) -> String {
    format!("w{i:04}")
}

// ---------------------------------------------------------------------------
// Options.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guarantee {
    ExactlyOnce,
    AtLeastOnce,
}

#[derive(Debug, Clone)]
struct Options {
    minutes: f64,
    fault_every: Duration,
    instances: usize,
    rate: u64,
    guarantee: Guarantee,
    rss_bound_mib: f64,
    /// Streams properties from `-X key=value`, applied last.
    props: Vec<(String, String)>,
}

fn options() -> Result<Options, BoxError> {
    let mut o = Options {
        minutes: 30.0,
        fault_every: Duration::from_secs(60),
        instances: 3,
        rate: 2_000,
        guarantee: Guarantee::ExactlyOnce,
        rss_bound_mib: 0.0,
        props: Vec::new(),
    };
    let mut bound_set = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--minutes" => o.minutes = value()?.parse()?,
            "--fault-every-secs" => o.fault_every = Duration::from_secs(value()?.parse()?),
            "--instances" => o.instances = value()?.parse()?,
            "--rate" => o.rate = value()?.parse()?,
            "--rss-bound-mib" => {
                o.rss_bound_mib = value()?.parse()?;
                bound_set = true;
            }
            "-X" => {
                let kv = value()?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("-X takes key=value, not {kv}"))?;
                o.props.push((k.to_owned(), v.to_owned()));
            }
            "--guarantee" => {
                o.guarantee = match value()?.as_str() {
                    "eos" => Guarantee::ExactlyOnce,
                    "alos" => Guarantee::AtLeastOnce,
                    g => return Err(format!("--guarantee is eos or alos, not {g}").into()),
                }
            }
            f => {
                return Err(format!(
                    "unknown flag {f}; flags: --minutes M --fault-every-secs S --instances N \
                     --rate R --guarantee eos|alos --rss-bound-mib B -X key=value"
                )
                .into());
            }
        }
    }
    if !bound_set {
        // The stores' design bound: every task store at its cache plus its
        // memtable (fjall's 64 MiB unless -X weir.store.memtable.bytes).
        let mib = |key: &str, default: f64| {
            o.props
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .and_then(|(_, v)| v.parse::<f64>().ok())
                .map_or(default, |b| b / f64::from(1u32 << 20))
        };
        o.rss_bound_mib = PARTITIONS as f64
            * (mib("weir.store.memtable.bytes", 64.0) + mib("weir.store.cache.bytes", 32.0));
    }
    if o.instances == 0 || o.rate == 0 || o.fault_every.is_zero() {
        return Err("--instances, --rate and --fault-every-secs must be positive".into());
    }
    Ok(o)
}

// ---------------------------------------------------------------------------
// The instances and their faults.

struct Instance {
    slot: usize,
    dir: PathBuf,
    streams: KafkaStreams,
}

struct Fleet {
    kit: Arc<Cluster>,
    props: Vec<(String, String)>,
    guarantee: Guarantee,
    root: tempfile::TempDir,
    instances: Vec<Option<Instance>>,
    generation: usize,
    live: Arc<AtomicUsize>,
    kills: usize,
    faults: usize,
    close_failures: usize,
}

impl Fleet {
    fn config(&self, slot: usize, dir: &std::path::Path) -> Result<StreamsConfig, BoxError> {
        let bootstrap = self.kit.bootstrap();
        let id = format!("soak-{slot}");
        let dir = dir.display().to_string();
        let mut props = vec![
            ("application.id", APP),
            ("bootstrap.servers", bootstrap.as_str()),
            ("client.id", id.as_str()),
            ("group.instance.id", id.as_str()),
            ("session.timeout.ms", "10000"),
            ("heartbeat.interval.ms", "1000"),
            ("fetch.max.wait.ms", "100"),
            ("linger.ms", "5"),
            ("state.dir", dir.as_str()),
        ];
        match self.guarantee {
            Guarantee::ExactlyOnce => {
                props.push(("processing.guarantee", "exactly_once_v2"));
                props.push(("transaction.timeout.ms", "10000"));
            }
            Guarantee::AtLeastOnce => props.push(("processing.guarantee", "at_least_once")),
        }
        props.extend(self.props.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        Ok(StreamsConfig::from_properties(&props)?)
    }

    fn fresh_dir(&mut self, slot: usize) -> PathBuf {
        self.generation += 1;
        self.root
            .path()
            .join(format!("i{slot}-g{}", self.generation))
    }

    async fn start(&mut self, slot: usize, dir: PathBuf) -> Result<(), BoxError> {
        let streams =
            KafkaStreams::start(topology(INPUT, OUTPUT)?, self.config(slot, &dir)?).await?;
        self.instances[slot] = Some(Instance { slot, dir, streams });
        self.live.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Waits until the instance runs with tasks of its own, none restoring,
    /// for a second on end (it reports `Running` before its first
    /// assignment and before a restore starts too); returns when that began.
    async fn await_running(&self, slot: usize, within: Duration) -> Option<Duration> {
        let started = Instant::now();
        let i = self.instances[slot].as_ref()?;
        let mut since: Option<Duration> = None;
        while started.elapsed() < within {
            let m = i.streams.metrics();
            let ok = i.streams.state() == State::Running
                && !m.tasks.is_empty()
                && m.restoring_tasks == 0;
            since = if ok {
                since.or(Some(started.elapsed()))
            } else {
                None
            };
            if let Some(t) = since
                && started.elapsed() - t >= Duration::from_secs(1)
            {
                return Some(t);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    async fn close(&mut self, slot: usize) -> Option<PathBuf> {
        let i = self.instances[slot].take()?;
        self.live.fetch_sub(1, Ordering::SeqCst);
        if let Err(e) = i.streams.close(Duration::from_secs(60)).await {
            println!("  close of instance {} failed: {e}", i.slot);
            self.close_failures += 1;
        }
        Some(i.dir)
    }

    /// One fault; returns a line describing it.
    async fn fault(&mut self, t0: Instant) -> Result<String, BoxError> {
        let n = self.faults;
        self.faults += 1;
        let count = self.instances.len();
        let at = t0.elapsed().as_secs_f64();
        if n.is_multiple_of(2) {
            let slot = (n / 2) % count;
            let Some(i) = self.instances[slot].take() else {
                return Ok(format!(
                    "fault {n} at {at:.0}s: instance {slot} is not running"
                ));
            };
            self.live.fetch_sub(1, Ordering::SeqCst);
            let empty = self.kills % 3 == 2;
            self.kills += 1;
            i.streams.kill();
            tokio::time::sleep(Duration::from_secs(1)).await;
            // An empty directory is a new one: the killed instance's store
            // may still be closing in a blocking task in the old one.
            let dir = if empty { self.fresh_dir(slot) } else { i.dir };
            self.start(slot, dir).await?;
            let running = self.await_running(slot, Duration::from_secs(120)).await;
            let restored = self.instances[slot]
                .as_ref()
                .map(|i| i.streams.metrics().restored_records)
                .unwrap_or(0);
            Ok(format!(
                "fault {n} at {at:.0}s: kill instance {slot}, restart on {} state dir; running again after {}, {restored} changelog records restored",
                if empty { "an empty" } else { "the same" },
                running.map_or("(not within 120 s)".to_owned(), |d| format!("{d:.1?}")),
            ))
        } else {
            let mut line = format!("fault {n} at {at:.0}s: rolling restart:");
            for slot in 0..count {
                let Some(dir) = self.close(slot).await else {
                    continue;
                };
                self.start(slot, dir).await?;
                let running = self.await_running(slot, Duration::from_secs(120)).await;
                line.push_str(&format!(
                    " {slot} {}",
                    running.map_or("(not running within 120 s)".to_owned(), |d| format!(
                        "{d:.1?}"
                    ))
                ));
            }
            Ok(line)
        }
    }
}

// ---------------------------------------------------------------------------
// The producer.

async fn feeder(
    bootstrap: String,
    rate: u64,
    stop: Arc<AtomicBool>,
    acked: Arc<Vec<AtomicU64>>,
    total: Arc<AtomicU64>,
) -> Result<(), BoxError> {
    let config = ProducerConfig::from_properties(&[
        ("bootstrap.servers", bootstrap.as_str()),
        ("client.id", "soak-feeder"),
        ("linger.ms", "5"),
    ])?;
    let producer = Producer::new(config).await?;
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, DeliveryFuture)>();
    let acks = tokio::spawn(async move {
        while let Some((w, ack)) = rx.recv().await {
            ack.await?;
            acked[w].fetch_add(1, Ordering::Relaxed);
            total.fetch_add(1, Ordering::Relaxed);
        }
        Ok::<(), BoxError>(())
    });
    let started = tokio::time::Instant::now();
    let mut sent: u64 = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
        while sent < due {
            // A multiplicative hash spreads the sequence over the words.
            let w = (sent.wrapping_mul(0x9E37_79B9_7F4A_7C15) % VOCABULARY as u64) as usize;
            let record = ProducerRecord::new(INPUT)
                .with_key(word(w))
                .with_timestamp(1_000 + sent as i64);
            tx.send((w, producer.enqueue(record).await?))
                .map_err(|_| "the acknowledgement task is gone")?;
            sent += 1;
        }
    }
    producer.flush().await;
    drop(tx);
    acks.await??;
    producer.close().await;
    Ok(())
}

// ---------------------------------------------------------------------------
// Reading the testkit's logs.

/// Per output partition: batches read so far, and per producer id the
/// transactional records not yet followed by a marker. Counts committed
/// records from batch headers, without decoding the records.
#[derive(Default)]
struct CommitTracker {
    next: Vec<usize>,
    pending: Vec<BTreeMap<i64, u64>>,
    committed: u64,
}

async fn track(kit: &Cluster, mut t: CommitTracker) -> Result<CommitTracker, BoxError> {
    Ok(kit
        .with_state(move |s| {
            if t.next.is_empty() {
                t.next = vec![0; PARTITIONS as usize];
                t.pending = vec![BTreeMap::new(); PARTITIONS as usize];
            }
            let Some(topic) = s.topics.get(OUTPUT) else {
                return t;
            };
            for (p, partition) in topic.partitions.iter().enumerate() {
                let batches = partition.log.batches();
                for b in &batches[t.next[p].min(batches.len())..] {
                    let h = &b.header;
                    let pending = &mut t.pending[p];
                    if h.is_control() {
                        let kind = decode_batches(&b.bytes, &DecodeOptions::default())
                            .ok()
                            .and_then(|d| d.batches.first().and_then(|b| b.control()))
                            .map(|c| c.kind);
                        let n = pending.remove(&h.producer_id).unwrap_or(0);
                        if kind == Some(ControlKind::Commit) {
                            t.committed += n;
                        }
                    } else if h.is_transactional() {
                        *pending.entry(h.producer_id).or_default() += h.record_count as u64;
                    } else {
                        t.committed += h.record_count as u64;
                    }
                }
                t.next[p] = batches.len();
            }
            t
        })
        .await?)
}

/// What the testkit's logs hold: the bytes of every stored batch of every
/// partition, and the number of those batches (each also costs a
/// `StoredBatch` in its partition's `Vec`).
async fn retained(kit: &Cluster) -> Result<(u64, u64), BoxError> {
    Ok(kit
        .with_state(|s| {
            s.topics
                .values()
                .flat_map(|t| t.partitions.iter())
                .flat_map(|p| p.log.batches())
                .fold((0, 0), |(bytes, n), b| {
                    (bytes + b.bytes.len() as u64, n + 1)
                })
        })
        .await?)
}

/// Per word, its committed output counts in offset order.
async fn committed_counts(kit: &Cluster) -> Result<Vec<Vec<u64>>, BoxError> {
    let mut counts = vec![Vec::new(); VOCABULARY];
    for p in 0..PARTITIONS {
        let log = kit.raw_log(OUTPUT, p).await?;
        for r in visible_records(&log).map_err(|e| format!("{OUTPUT}-{p}: {e}"))? {
            let key = r.key.as_deref().unwrap_or_default();
            let w = std::str::from_utf8(key)
                .ok()
                .and_then(|k| k.strip_prefix('w'))
                .and_then(|k| k.parse::<usize>().ok())
                .filter(|w| *w < VOCABULARY)
                .ok_or_else(|| format!("{OUTPUT}-{p}: an unknown key {key:?}"))?;
            let n = r
                .value
                .as_deref()
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| format!("{OUTPUT}-{p}: an unreadable count for {}", word(w)))?;
            counts[w].push(n);
        }
    }
    Ok(counts)
}

async fn output_settled(kit: &Cluster) -> Result<bool, BoxError> {
    if !kit.unfinished_transactions().await?.is_empty() {
        return Ok(false);
    }
    for p in 0..PARTITIONS {
        let (_, lso, hw) = kit.offsets(OUTPUT, p).await?;
        if lso != hw {
            return Ok(false);
        }
    }
    Ok(true)
}

// ---------------------------------------------------------------------------
// The check.

#[derive(Debug, Default)]
struct Verdict {
    pass: bool,
    words: usize,
    records: u64,
    expected: u64,
    /// Words whose counts are not exactly 1..=n (exactly-once).
    wrong_words: usize,
    /// Output records beyond one per input (repeats).
    duplicates: u64,
    /// Counts in 1..=n that never appear.
    missing: u64,
    /// Output records with a count above n.
    above: u64,
    examples: Vec<String>,
}

fn check(guarantee: Guarantee, counts: &[Vec<u64>], produced: &[u64]) -> Verdict {
    let mut v = Verdict {
        words: VOCABULARY,
        ..Verdict::default()
    };
    for (w, got) in counts.iter().enumerate() {
        let n = produced[w];
        v.records += got.len() as u64;
        v.expected += n;
        let mut seen = vec![false; n as usize];
        for &c in got {
            match c.checked_sub(1).and_then(|i| seen.get_mut(i as usize)) {
                Some(s) if !*s => *s = true,
                Some(_) => v.duplicates += 1,
                None => v.above += 1,
            }
        }
        let missing = seen.iter().filter(|s| !**s).count() as u64;
        v.missing += missing;
        let exact = got.iter().copied().eq(1..=n);
        if !exact {
            v.wrong_words += 1;
            if v.examples.len() < 5 {
                let head: Vec<u64> = got.iter().copied().take(8).collect();
                v.examples.push(format!(
                    "{}: {} records for n = {n}, {missing} counts missing, first {head:?}, last {:?}",
                    word(w),
                    got.len(),
                    got.last()
                ));
            }
        }
    }
    v.pass = match guarantee {
        Guarantee::ExactlyOnce => v.wrong_words == 0,
        Guarantee::AtLeastOnce => v.missing == 0,
    };
    v
}

// ---------------------------------------------------------------------------
// Sampling.

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

const MIB: f64 = 1024.0 * 1024.0;

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: f64,
    input_rate: f64,
    output_rate: f64,
    rss: u64,
    hwm: u64,
    retained: u64,
    fds: usize,
}

impl Sample {
    fn adjusted_mib(&self) -> f64 {
        (self.rss as f64 - self.retained as f64) / MIB
    }
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

// ---------------------------------------------------------------------------

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let o = options()?;
    let kit = Arc::new(Cluster::builder().brokers(1).build().await?);
    // The request log keeps decoded requests (Produce bodies with their
    // records): off, so it neither grows the process nor hides in its RSS.
    kit.with_state(|s| s.faults.set_log_capacity(0)).await?;
    let none: [(&str, &str); 0] = [];
    kit.create_topic(INPUT, PARTITIONS, none).await?;
    kit.create_topic(OUTPUT, PARTITIONS, none).await?;
    println!(
        "soak: {} min, a fault every {:?}, {} instances, {} input records/s over {VOCABULARY} words and \
         {PARTITIONS} partitions, {:?}, one embedded broker (in this process, logs in memory); \
         RSS bound {} MiB on the growth of VmRSS minus retained log bytes after {WARMUP:?}",
        o.minutes, o.fault_every, o.instances, o.rate, o.guarantee, o.rss_bound_mib
    );
    let t0 = Instant::now();
    let live = Arc::new(AtomicUsize::new(0));
    let mut fleet = Fleet {
        kit: Arc::clone(&kit),
        props: o.props.clone(),
        guarantee: o.guarantee,
        root: tempfile::tempdir()?,
        instances: (0..o.instances).map(|_| None).collect(),
        generation: 0,
        live: Arc::clone(&live),
        kills: 0,
        faults: 0,
        close_failures: 0,
    };
    for slot in 0..o.instances {
        let dir = fleet.fresh_dir(slot);
        fleet.start(slot, dir).await?;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..VOCABULARY).map(|_| AtomicU64::new(0)).collect());
    let total = Arc::new(AtomicU64::new(0));
    let feeder = tokio::spawn(feeder(
        kit.bootstrap(),
        o.rate,
        Arc::clone(&stop),
        Arc::clone(&acked),
        Arc::clone(&total),
    ));

    let (stop_faults_tx, mut stop_faults) = tokio::sync::watch::channel(false);
    let every = o.fault_every;
    let faults = tokio::spawn(async move {
        // At S, 2S, 3S, … from the start; a fault that overruns the next
        // slot skips it.
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop_faults.changed() => break,
            }
            if *stop_faults.borrow() {
                break;
            }
            let line = fleet.fault(t0).await?;
            println!("{line}");
        }
        Ok::<Fleet, BoxError>(fleet)
    });

    let run_for = Duration::from_secs_f64(o.minutes * 60.0);
    let mut samples: Vec<Sample> = Vec::new();
    let mut tracker = CommitTracker::default();
    let (mut last_in, mut last_out, mut last_at) = (0u64, 0u64, Instant::now());
    println!(
        "{:>6} {:>9} {:>10} {:>8} {:>8} {:>10} {:>12} {:>5} {:>5}",
        "t(s)", "in/s", "out/s", "RSS MiB", "HWM MiB", "logs MiB", "RSS-logs MiB", "fds", "live"
    );
    while t0.elapsed() < run_for {
        let left = run_for.saturating_sub(t0.elapsed());
        tokio::time::sleep(REPORT_EVERY.min(left)).await;
        if feeder.is_finished() || faults.is_finished() {
            break;
        }
        tracker = track(&kit, tracker).await?;
        let (input, output) = (total.load(Ordering::Relaxed), tracker.committed);
        let dt = last_at.elapsed().as_secs_f64();
        last_at = Instant::now();
        let s = Sample {
            at: t0.elapsed().as_secs_f64(),
            input_rate: (input - last_in) as f64 / dt,
            output_rate: (output - last_out) as f64 / dt,
            rss: status_kib("VmRSS:") * 1024,
            hwm: status_kib("VmHWM:") * 1024,
            retained: {
                let (bytes, batches) = retained(&kit).await?;
                bytes + batches * std::mem::size_of::<weir_testkit::log::StoredBatch>() as u64
            },
            fds: open_fds(),
        };
        (last_in, last_out) = (input, output);
        println!(
            "{:>6.0} {:>9.0} {:>10.0} {:>8.1} {:>8.1} {:>10.1} {:>12.1} {:>5} {:>5}",
            s.at,
            s.input_rate,
            s.output_rate,
            s.rss as f64 / MIB,
            s.hwm as f64 / MIB,
            s.retained as f64 / MIB,
            s.adjusted_mib(),
            s.fds,
            live.load(Ordering::SeqCst)
        );
        samples.push(s);
    }

    // Stop the input and the faults; wait for the output.
    stop.store(true, Ordering::SeqCst);
    let _ = stop_faults_tx.send(true);
    feeder.await??;
    let mut fleet = faults.await??;
    let produced: Vec<u64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
    let produced_total: u64 = produced.iter().sum();
    println!(
        "stopped at {:.0}s: {produced_total} input records acknowledged, {} faults; waiting for the output",
        t0.elapsed().as_secs_f64(),
        fleet.faults
    );
    let drain = Instant::now();
    let mut drained = false;
    while drain.elapsed() < DRAIN_TIMEOUT {
        tracker = track(&kit, tracker).await?;
        if tracker.committed >= produced_total && output_settled(&kit).await? {
            let counts = committed_counts(&kit).await?;
            let complete = counts
                .iter()
                .zip(&produced)
                .all(|(got, n)| match o.guarantee {
                    Guarantee::ExactlyOnce => got.last().copied().unwrap_or(0) >= *n,
                    Guarantee::AtLeastOnce => got.iter().copied().max().unwrap_or(0) >= *n,
                });
            if complete {
                drained = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "output {} after {:.1?}: {} committed output records",
        if drained { "complete" } else { "NOT complete" },
        drain.elapsed(),
        tracker.committed
    );
    for slot in 0..fleet.instances.len() {
        fleet.close(slot).await;
    }
    // Closed instances leave no transaction open; a close that failed
    // leaves one to its timeout.
    let settle = Instant::now();
    while !output_settled(&kit).await? && settle.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let open = kit.unfinished_transactions().await?;

    // The independent check, from the raw log.
    let counts = committed_counts(&kit).await?;
    let v = check(o.guarantee, &counts, &produced);
    let fds_end = open_fds();

    // The summary.
    let (tmin, tmed, tmax) = stats(samples.iter().map(|s| s.output_rate).collect());
    let (imin, imed, imax) = stats(samples.iter().map(|s| s.input_rate).collect());
    let rss: Vec<f64> = samples.iter().map(|s| s.rss as f64 / MIB).collect();
    let fds: Vec<usize> = samples.iter().map(|s| s.fds).collect();
    let warm = samples
        .iter()
        .find(|s| s.at >= WARMUP.as_secs_f64())
        .or(samples.first());
    let last = samples.last();
    let growth = match (warm, last) {
        (Some(w), Some(l)) => l.adjusted_mib() - w.adjusted_mib(),
        _ => 0.0,
    };
    let rss_ok = growth <= o.rss_bound_mib;
    // MiB per minute of VmRSS minus logs over each half after warm-up.
    let after: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at >= WARMUP.as_secs_f64())
        .collect();
    let slope = |a: &Sample, b: &Sample| {
        (b.adjusted_mib() - a.adjusted_mib()) / ((b.at - a.at) / 60.0).max(f64::EPSILON)
    };
    let halves = (after.len() >= 3).then(|| {
        let mid = after.len() / 2;
        (
            slope(after[0], after[mid]),
            slope(after[mid], after[after.len() - 1]),
        )
    });
    println!("---- summary ----");
    println!(
        "run: {:.1} min, {} faults ({} kills, {} rolling restarts), {} failed closes, {} samples",
        samples.last().map_or(0.0, |s| s.at / 60.0),
        fleet.faults,
        fleet.kills,
        fleet.faults - fleet.kills,
        fleet.close_failures,
        samples.len()
    );
    println!(
        "committed output records/s per {REPORT_EVERY:?}: min {tmin:.0} median {tmed:.0} max {tmax:.0}; \
         input acknowledged/s: min {imin:.0} median {imed:.0} max {imax:.0}"
    );
    println!(
        "VmRSS MiB: first {:.1} last {:.1} max {:.1}; VmHWM at the last sample {:.1}",
        rss.first().copied().unwrap_or(0.0),
        rss.last().copied().unwrap_or(0.0),
        rss.iter().copied().fold(0.0, f64::max),
        last.map_or(0.0, |s| s.hwm as f64 / MIB)
    );
    println!(
        "VmRSS minus retained log bytes, MiB: at {:.0}s {:.1}, at {:.0}s {:.1}: growth {growth:.1} \
         (bound {}: {}); retained logs at the end {:.1} MiB",
        warm.map_or(0.0, |s| s.at),
        warm.map_or(0.0, Sample::adjusted_mib),
        last.map_or(0.0, |s| s.at),
        last.map_or(0.0, Sample::adjusted_mib),
        o.rss_bound_mib,
        if rss_ok { "PASS" } else { "FAIL" },
        last.map_or(0.0, |s| s.retained as f64 / MIB)
    );
    if let Some((first, second)) = halves {
        println!(
            "VmRSS minus logs growth after warm-up, MiB/min: first half {first:.1}, second half {second:.1}"
        );
    }
    println!(
        "open fds: first {} last {} max {}; after closing every instance {fds_end}",
        fds.first().copied().unwrap_or(0),
        fds.last().copied().unwrap_or(0),
        fds.iter().copied().max().unwrap_or(0)
    );
    println!(
        "check ({:?}, from the raw output log): {}: {} words, {} input records, {} committed outputs, \
         {} words not exactly 1..=n, {} repeats, {} counts missing, {} above n; open transactions {:?}",
        o.guarantee,
        if v.pass { "PASS" } else { "FAIL" },
        v.words,
        v.expected,
        v.records,
        v.wrong_words,
        v.duplicates,
        v.missing,
        v.above,
        open
    );
    for e in &v.examples {
        println!("  {e}");
    }
    if !v.pass || !rss_ok {
        std::process::exit(1);
    }
    Ok(())
}
