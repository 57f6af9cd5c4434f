//! `weir perf produce` and `weir perf consume`: load tests of a topic, like
//! Kafka's `kafka-producer-perf-test` and `kafka-consumer-perf-test`.
//!
//! Both print a progress line to stderr every `--report-interval` seconds
//! and one summary on stdout at the end (text, or JSON with `--json`):
//! records, records/s, MB/s (MiB of key and value bytes per second) and
//! latency percentiles from an HDR histogram. For produce the latency of a
//! record is from the call that enqueues it to its acknowledgement; for
//! consume it is from the record's timestamp to its receipt (end to end, so
//! it includes the time the record waited in the topic and any clock skew
//! between the producing and the consuming machine).

use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use hdrhistogram::Histogram;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until};
use weir_client::config::consumer::ConsumerConfig;
use weir_client::config::producer::ProducerConfig;
use weir_client::consumer::{Consumer, ConsumerRecord, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_group::group_consumer::GroupConsumer;
use weir_group::member::{MemberConfig, ShutdownMode};

use crate::args::{Codec, ConnectArgs};
use crate::connect::{as_pairs, lookup_admin, topic};
use crate::produce::codec_name;

/// `weir perf …`.
#[derive(Debug, Subcommand)]
pub enum PerfCommand {
    /// Produce generated records as fast as allowed and report throughput and
    /// send-to-ack latency.
    ///
    /// Example: weir perf produce -b localhost:9092 -t perf --records 1000000 --throughput 50000
    Produce(PerfProduceArgs),
    /// Consume a topic from the beginning and report throughput and
    /// end-to-end latency (record timestamp to receipt).
    ///
    /// Example: weir perf consume -b localhost:9092 -t perf --records 1000000
    Consume(PerfConsumeArgs),
}

/// The `acks` a perf producer asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PerfAcks {
    /// No acknowledgement: a record counts as acked once sent.
    #[value(name = "0")]
    None,
    /// The leader's.
    #[value(name = "1")]
    Leader,
    /// Every in-sync replica's.
    #[value(name = "all")]
    All,
}

impl PerfAcks {
    fn property(self) -> &'static str {
        match self {
            PerfAcks::None => "0",
            PerfAcks::Leader => "1",
            PerfAcks::All => "all",
        }
    }
}

/// `weir perf produce`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("amount").required(true).args(["records", "duration"])))]
pub struct PerfProduceArgs {
    /// The topic (it must exist).
    #[arg(short = 't', long)]
    pub topic: String,
    /// Stop after this many records.
    #[arg(long, value_name = "N")]
    pub records: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<u64>,
    /// Bytes in each record's value.
    #[arg(long, value_name = "BYTES", default_value_t = 100)]
    pub record_size: usize,
    /// Bytes in each record's key (0: no key, records spread by the sticky partitioner).
    #[arg(long, value_name = "BYTES", default_value_t = 8)]
    pub key_size: usize,
    /// At most this many records per second (-1: no cap).
    #[arg(long, value_name = "RECORDS_PER_SEC", allow_negative_numbers = true)]
    pub throughput: Option<f64>,
    /// acks (default: the producer's, all unless -X acks=… says otherwise).
    #[arg(long, value_enum)]
    pub acks: Option<PerfAcks>,
    /// Compression codec (default: the producer's, none unless -X compression.type=…).
    #[arg(short = 'z', long = "compression", value_enum)]
    pub codec: Option<Codec>,
    /// Seconds between progress lines on stderr.
    #[arg(long, value_name = "SECS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub report_interval: u64,
    /// Print the final summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `weir perf consume`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("amount").required(true).args(["records", "duration"])))]
pub struct PerfConsumeArgs {
    /// The topic.
    #[arg(short = 't', long)]
    pub topic: String,
    /// Stop after this many records.
    #[arg(long, value_name = "N")]
    pub records: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<u64>,
    /// Consume as a member of this group (from the beginning where it has no
    /// committed offset; commits once at the end). Default: every partition,
    /// assigned, from the beginning.
    #[arg(short = 'G', long)]
    pub group: Option<String>,
    /// Seconds between progress lines on stderr.
    #[arg(long, value_name = "SECS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub report_interval: u64,
    /// Print the final summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Runs a perf command.
pub async fn run(command: PerfCommand, connect: &ConnectArgs) -> Result<(), String> {
    match command {
        PerfCommand::Produce(args) => run_produce(args, connect).await,
        PerfCommand::Consume(args) => run_consume(args, connect).await,
    }
}

/// When to stop.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    /// After this many records.
    pub records: Option<u64>,
    /// After this long.
    pub duration: Option<Duration>,
}

/// Counts and latencies (microseconds) of the records seen so far.
#[derive(Debug, Clone)]
pub struct Stats {
    records: u64,
    bytes: u64,
    latency_us: Histogram<u64>,
}

/// Latencies above an hour are recorded as an hour.
const MAX_LATENCY_US: u64 = 3_600_000_000;

impl Stats {
    fn new() -> Result<Self, String> {
        Ok(Stats {
            records: 0,
            bytes: 0,
            latency_us: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                .map_err(|e| format!("creating the latency histogram: {e}"))?,
        })
    }

    fn record(&mut self, bytes: u64, latency: Duration) {
        self.records += 1;
        self.bytes += bytes;
        let us = u64::try_from(latency.as_micros()).unwrap_or(MAX_LATENCY_US);
        self.latency_us.saturating_record(us);
    }

    fn reset(&mut self) {
        self.records = 0;
        self.bytes = 0;
        self.latency_us.reset();
    }

    fn percentile_ms(&self, q: f64) -> f64 {
        self.latency_us.value_at_quantile(q) as f64 / 1000.0
    }
}

/// The final report of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Records acknowledged (produce) or received (consume).
    pub records: u64,
    /// Records whose send failed (produce only).
    pub errors: u64,
    /// Key and value bytes of those records.
    pub bytes: u64,
    /// From the first record sent or poll made to the last ack or record.
    pub elapsed: Duration,
    /// Latency percentiles in milliseconds: p50, p99, p99.9, max.
    pub latency_ms: [f64; 4],
}

impl Summary {
    fn from_stats(stats: &Stats, errors: u64, elapsed: Duration) -> Self {
        let max = stats.latency_us.max() as f64 / 1000.0;
        Summary {
            records: stats.records,
            errors,
            bytes: stats.bytes,
            elapsed,
            latency_ms: [
                stats.percentile_ms(0.50),
                stats.percentile_ms(0.99),
                stats.percentile_ms(0.999),
                max,
            ],
        }
    }

    fn records_per_sec(&self) -> f64 {
        per_sec(self.records as f64, self.elapsed)
    }

    fn mb_per_sec(&self) -> f64 {
        per_sec(self.bytes as f64 / MIB, self.elapsed)
    }

    /// One line of text: `N records sent, R records/s (M MB/s), latency ms p50 … max …`.
    pub fn text(&self, verb: &str) -> String {
        let [p50, p99, p999, max] = self.latency_ms;
        let errors = if self.errors > 0 {
            format!(", {} errors", self.errors)
        } else {
            String::new()
        };
        format!(
            "{} records {verb}{errors}, {:.1} records/s ({:.2} MB/s) in {:.1} s, \
             latency ms p50 {p50:.3}, p99 {p99:.3}, p99.9 {p999:.3}, max {max:.3}",
            self.records,
            self.records_per_sec(),
            self.mb_per_sec(),
            self.elapsed.as_secs_f64(),
        )
    }

    /// The summary as a JSON object.
    pub fn json(&self) -> serde_json::Value {
        let [p50, p99, p999, max] = self.latency_ms;
        serde_json::json!({
            "records": self.records,
            "errors": self.errors,
            "bytes": self.bytes,
            "elapsed_secs": self.elapsed.as_secs_f64(),
            "records_per_sec": self.records_per_sec(),
            "mb_per_sec": self.mb_per_sec(),
            "latency_ms": { "p50": p50, "p99": p99, "p999": p999, "max": max },
        })
    }
}

const MIB: f64 = 1024.0 * 1024.0;

fn per_sec(amount: f64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { amount / secs } else { 0.0 }
}

/// Progress lines every `interval`, of the records seen since the last one.
struct Progress<W> {
    out: W,
    verb: &'static str,
    interval: Duration,
    next: Instant,
    since: Instant,
    total: u64,
    window: Stats,
}

impl<W: Write> Progress<W> {
    fn new(out: W, verb: &'static str, interval: Duration, start: Instant) -> Result<Self, String> {
        Ok(Progress {
            out,
            verb,
            interval,
            next: start + interval,
            since: start,
            total: 0,
            window: Stats::new()?,
        })
    }

    fn record(&mut self, bytes: u64, latency: Duration) {
        self.total += 1;
        self.window.record(bytes, latency);
    }

    /// Prints a line if one is due.
    fn tick(&mut self, now: Instant) {
        if now < self.next {
            return;
        }
        let window = now.duration_since(self.since);
        // A failed write to stderr is no reason to stop a load test.
        let _ = writeln!(
            self.out,
            "{} records {} ({:.1} records/s, {:.2} MB/s over the last {:.1} s), \
             latency ms p50 {:.3}, p99 {:.3}, max {:.3}",
            self.total,
            self.verb,
            per_sec(self.window.records as f64, window),
            per_sec(self.window.bytes as f64 / MIB, window),
            window.as_secs_f64(),
            self.window.percentile_ms(0.50),
            self.window.percentile_ms(0.99),
            self.window.latency_us.max() as f64 / 1000.0,
        );
        self.window.reset();
        self.since = now;
        while self.next <= now {
            self.next += self.interval;
        }
    }
}

/// Spaces sends `1/rate` seconds apart on average, by sleeping on tokio's
/// clock (never spinning) whenever the sender is ahead of the schedule.
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    start: Instant,
    /// Records per second; `None` is no cap.
    rate: Option<f64>,
}

impl Pacer {
    /// A pacer from `start`; a `throughput` that is absent, not positive or
    /// not finite is no cap.
    pub fn new(throughput: Option<f64>, start: Instant) -> Self {
        let rate = throughput.filter(|r| *r > 0.0 && r.is_finite());
        Pacer { start, rate }
    }

    /// When record number `sent` (0-based) may go.
    pub fn due(&self, sent: u64) -> Instant {
        match self.rate {
            Some(rate) => self.start + Duration::from_secs_f64(sent as f64 / rate),
            None => self.start,
        }
    }
}

/// Where the produce loop sends records: the real producer, or a test double.
pub trait RecordSink {
    /// Enqueues `record`; the returned future resolves on its acknowledgement.
    fn enqueue(
        &self,
        record: ProducerRecord,
    ) -> impl Future<Output = Result<AckFuture, String>> + Send;
}

/// A record's acknowledgement, or the reason it failed.
pub type AckFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

impl RecordSink for Producer {
    async fn enqueue(&self, record: ProducerRecord) -> Result<AckFuture, String> {
        let delivery = Producer::enqueue(self, record)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Box::pin(async move {
            delivery.await.map(|_| ()).map_err(|e| e.to_string())
        }))
    }
}

/// What the produce loop generates.
#[derive(Debug, Clone)]
pub struct ProducePlan {
    /// The topic.
    pub topic: String,
    /// When to stop.
    pub limit: Limit,
    /// Value bytes per record.
    pub record_size: usize,
    /// Key bytes per record; 0 is a null key.
    pub key_size: usize,
    /// The records/s cap, if any.
    pub throughput: Option<f64>,
    /// Between progress lines.
    pub report_interval: Duration,
}

/// A value of `size` bytes of printable pseudo-random characters (so that
/// compression has something to do, but not everything).
fn payload(size: usize) -> Bytes {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            b'A' + (state % 26) as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

/// Record `n`'s key: its decimal number, zero-padded (or cut to its last
/// digits) to `size` bytes, so keys spread over the partitions.
fn key(n: u64, size: usize) -> Bytes {
    let digits = format!("{n:0size$}");
    Bytes::copy_from_slice(&digits.as_bytes()[digits.len() - size..])
}

/// Sends records as `plan` says through `sink`, waits for every
/// acknowledgement, and returns the summary. `flush` runs once every record
/// is enqueued (the real producer's linger is then skipped).
pub async fn produce_loop<S, F, W>(
    plan: &ProducePlan,
    sink: &S,
    flush: F,
    progress_out: W,
) -> Result<Summary, String>
where
    S: RecordSink,
    F: Future<Output = ()>,
    W: Write,
{
    let value = payload(plan.record_size);
    let bytes = (plan.record_size + plan.key_size) as u64;
    let start = Instant::now();
    let deadline = plan.limit.duration.map(|d| start + d);
    let pacer = Pacer::new(plan.throughput, start);
    let mut progress = Progress::new(progress_out, "sent", plan.report_interval, start)?;
    let mut stats = Stats::new()?;
    let mut errors = 0u64;
    let mut last_ack = start;
    let mut in_flight: JoinSet<Result<(Duration, Instant), String>> = JoinSet::new();
    let mut settle = |done: Result<Result<(Duration, Instant), String>, tokio::task::JoinError>,
                      stats: &mut Stats,
                      progress: &mut Progress<W>| {
        match done {
            Ok(Ok((latency, at))) => {
                stats.record(bytes, latency);
                progress.record(bytes, latency);
                last_ack = last_ack.max(at);
            }
            Ok(Err(e)) => {
                if errors == 0 {
                    tracing::warn!(error = %e, "a record failed");
                }
                errors += 1;
            }
            Err(e) => {
                tracing::warn!(error = %e, "an acknowledgement task failed");
                errors += 1;
            }
        }
    };
    let mut sent = 0u64;
    'send: loop {
        if plan.limit.records.is_some_and(|n| sent >= n) {
            break;
        }
        // Wait for the record's turn, printing progress lines on the way.
        let due = pacer.due(sent);
        loop {
            let now = Instant::now();
            while let Some(done) = in_flight.try_join_next() {
                settle(done, &mut stats, &mut progress);
            }
            progress.tick(now);
            if deadline.is_some_and(|d| now >= d) {
                break 'send;
            }
            if now >= due {
                break;
            }
            let mut until = due.min(progress.next);
            if let Some(d) = deadline {
                until = until.min(d);
            }
            sleep_until(until).await;
        }
        let mut record = ProducerRecord::new(plan.topic.clone()).with_value(value.clone());
        if plan.key_size > 0 {
            record = record.with_key(key(sent, plan.key_size));
        }
        let enqueued_at = Instant::now();
        let ack = sink.enqueue(record).await?;
        in_flight.spawn(async move {
            ack.await?;
            let now = Instant::now();
            Ok((now.duration_since(enqueued_at), now))
        });
        sent += 1;
    }
    flush.await;
    while let Some(done) = in_flight.join_next().await {
        settle(done, &mut stats, &mut progress);
    }
    Ok(Summary::from_stats(
        &stats,
        errors,
        last_ack.duration_since(start),
    ))
}

fn limit(records: Option<u64>, duration: Option<u64>) -> Limit {
    Limit {
        records,
        duration: duration.map(Duration::from_secs),
    }
}

fn print_summary(summary: &Summary, verb: &str, json: bool) {
    if json {
        println!("{}", summary.json());
    } else {
        println!("{}", summary.text(verb));
    }
}

async fn run_produce(args: PerfProduceArgs, connect: &ConnectArgs) -> Result<(), String> {
    let mut props = connect.properties()?;
    if let Some(acks) = args.acks {
        props.push(("acks".into(), acks.property().into()));
    }
    if let Some(codec) = args.codec {
        props.push(("compression.type".into(), codec_name(codec).into()));
    }
    // -X is checked against the producer's properties before anything else.
    let config = ProducerConfig::from_properties(&as_pairs(&props)).map_err(|e| e.to_string())?;
    // Fail fast on an unreachable broker or an unknown topic.
    let admin = lookup_admin(connect).await?;
    topic(&admin, &args.topic).await?;
    let producer = Producer::new(config).await.map_err(|e| e.to_string())?;
    let plan = ProducePlan {
        topic: args.topic.clone(),
        limit: limit(args.records, args.duration),
        record_size: args.record_size,
        key_size: args.key_size,
        throughput: args.throughput,
        report_interval: Duration::from_secs(args.report_interval),
    };
    let summary = produce_loop(&plan, &producer, producer.flush(), std::io::stderr()).await;
    producer.close().await;
    let summary = summary?;
    print_summary(&summary, "sent", args.json);
    match summary.errors {
        0 => Ok(()),
        n => Err(format!("{n} records failed")),
    }
}

/// Where the consume loop gets records: a consumer, or a group member.
enum Source {
    Assigned(Box<Consumer>),
    Group(Box<GroupConsumer>),
}

impl Source {
    /// Records, or an empty batch once `until` has passed (the group
    /// consumer's poll is not cancel-safe, so it is awaited whole).
    async fn poll(&mut self, until: Instant) -> Result<Vec<ConsumerRecord>, String> {
        match self {
            Source::Assigned(c) => c
                .poll_for(until.saturating_duration_since(Instant::now()))
                .await
                .map_err(|e| e.to_string()),
            Source::Group(g) => g.poll().await.map_err(|e| e.to_string()),
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn record_bytes(r: &ConsumerRecord) -> u64 {
    (r.key.as_ref().map_or(0, Bytes::len) + r.value.as_ref().map_or(0, Bytes::len)) as u64
}

async fn run_consume(args: PerfConsumeArgs, connect: &ConnectArgs) -> Result<(), String> {
    let mut props = connect.properties()?;
    if args.group.is_some() {
        props.push(("auto.offset.reset".into(), "earliest".into()));
    }
    // -X is checked against the consumer's properties before anything else.
    let config = ConsumerConfig::from_properties(&as_pairs(&props)).map_err(|e| e.to_string())?;
    let admin = lookup_admin(connect).await?;
    let meta = topic(&admin, &args.topic).await?;
    let mut source = match &args.group {
        Some(group) => {
            let member = MemberConfig::new(group.clone(), [args.topic.clone()]);
            let consumer = GroupConsumer::connect(config, member)
                .await
                .map_err(|e| format!("joining group {group}: {e}"))?;
            Source::Group(Box::new(consumer))
        }
        None => {
            let mut consumer = Consumer::new(config).await.map_err(|e| e.to_string())?;
            let tps: Vec<TopicPartition> = meta
                .partitions
                .iter()
                .map(|p| TopicPartition::new(args.topic.clone(), p.partition))
                .collect();
            consumer.assign(tps.clone());
            for tp in &tps {
                consumer
                    .seek(tp, SeekTo::Earliest)
                    .map_err(|e| e.to_string())?;
            }
            Source::Assigned(Box::new(consumer))
        }
    };
    let limit = limit(args.records, args.duration);
    let start = Instant::now();
    let deadline = limit.duration.map(|d| start + d);
    let interval = Duration::from_secs(args.report_interval);
    let mut progress = Progress::new(std::io::stderr(), "read", interval, start)?;
    let mut stats = Stats::new()?;
    let mut last = start;
    let result: Result<(), String> = async {
        loop {
            let now = Instant::now();
            progress.tick(now);
            if limit.records.is_some_and(|n| stats.records >= n)
                || deadline.is_some_and(|d| now >= d)
            {
                return Ok(());
            }
            let until = deadline.map_or(progress.next, |d| d.min(progress.next));
            let records = source.poll(until).await?;
            let received = now_ms();
            for r in &records {
                if limit.records.is_some_and(|n| stats.records >= n) {
                    break;
                }
                let ms = u64::try_from(received.saturating_sub(r.timestamp)).unwrap_or(0);
                let latency = Duration::from_millis(ms);
                stats.record(record_bytes(r), latency);
                progress.record(record_bytes(r), latency);
            }
            if !records.is_empty() {
                last = Instant::now();
            }
        }
    }
    .await;
    let summary = Summary::from_stats(&stats, 0, last.duration_since(start));
    match source {
        Source::Assigned(_) => {}
        Source::Group(mut g) => {
            if result.is_ok() {
                g.commit()
                    .await
                    .map_err(|e| format!("committing offsets: {e}"))?;
            }
            g.close(ShutdownMode::Default)
                .await
                .map_err(|e| format!("leaving the group: {e}"))?;
        }
    }
    result?;
    print_summary(&summary, "read", args.json);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Acknowledges every record at once and remembers its key.
    #[derive(Default)]
    struct Instant0 {
        keys: Mutex<Vec<Option<Bytes>>>,
    }

    impl RecordSink for Instant0 {
        async fn enqueue(&self, record: ProducerRecord) -> Result<AckFuture, String> {
            self.keys.lock().unwrap().push(record.key.clone());
            assert_eq!(record.value.as_ref().map(Bytes::len), Some(10));
            Ok(Box::pin(async { Ok(()) }))
        }
    }

    fn plan(records: Option<u64>, duration: Option<u64>, throughput: Option<f64>) -> ProducePlan {
        ProducePlan {
            topic: "t".into(),
            limit: limit(records, duration),
            record_size: 10,
            key_size: 3,
            throughput,
            report_interval: Duration::from_secs(1),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_throughput_cap_spaces_records_on_the_paused_clock() {
        let sink = Instant0::default();
        let mut progress = Vec::new();
        let start = Instant::now();
        let summary = produce_loop(
            &plan(Some(100), None, Some(50.0)),
            &sink,
            async {},
            &mut progress,
        )
        .await
        .unwrap();
        let elapsed = start.elapsed();
        assert_eq!(summary.records, 100);
        assert_eq!(summary.errors, 0);
        assert_eq!(summary.bytes, 100 * 13);
        // Record 99 is due at 99/50 s; tokio's timer rounds up to the millisecond.
        assert!(elapsed >= Duration::from_millis(1980), "{elapsed:?}");
        assert!(elapsed <= Duration::from_millis(1990), "{elapsed:?}");
        // One progress line at 1 s, with about 50 records sent by then.
        let progress = String::from_utf8(progress).unwrap();
        assert_eq!(progress.lines().count(), 1, "{progress}");
        assert!(progress.starts_with("50 records sent"), "{progress}");
        let keys = sink.keys.lock().unwrap();
        assert_eq!(keys[0].as_deref(), Some(&b"000"[..]));
        assert_eq!(keys[42].as_deref(), Some(&b"042"[..]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_duration_stops_a_capped_run_at_its_deadline() {
        let sink = Instant0::default();
        let start = Instant::now();
        let summary = produce_loop(
            &plan(None, Some(3), Some(10.0)),
            &sink,
            async {},
            std::io::sink(),
        )
        .await
        .unwrap();
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_secs(3), "{elapsed:?}");
        assert!(elapsed <= Duration::from_millis(3001), "{elapsed:?}");
        // Records 0..=29 are due before 3 s (record 30 exactly at it).
        assert_eq!(summary.records, 30);
    }

    #[tokio::test(start_paused = true)]
    async fn no_cap_sends_without_waiting() {
        let sink = Instant0::default();
        let start = Instant::now();
        let summary = produce_loop(
            &plan(Some(1000), None, Some(-1.0)),
            &sink,
            async {},
            std::io::sink(),
        )
        .await
        .unwrap();
        assert_eq!(summary.records, 1000);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[test]
    fn keys_are_cut_to_their_last_digits() {
        assert_eq!(&key(7, 8)[..], b"00000007");
        assert_eq!(&key(123_456, 2)[..], b"56");
    }

    #[test]
    fn the_summary_orders_its_percentiles_and_reads_as_json() {
        let mut stats = Stats::new().unwrap();
        for ms in 1..=1000u64 {
            stats.record(100, Duration::from_millis(ms));
        }
        let s = Summary::from_stats(&stats, 0, Duration::from_secs(2));
        let [p50, p99, p999, max] = s.latency_ms;
        assert!(p50 <= p99 && p99 <= p999 && p999 <= max, "{s:?}");
        assert!((499.0..=501.0).contains(&p50), "{p50}");
        let json = s.json();
        assert_eq!(json["records"], 1000);
        assert_eq!(json["records_per_sec"], 500.0);
        assert!(
            s.text("sent")
                .starts_with("1000 records sent, 500.0 records/s")
        );
    }
}
