//! The DSL's overhead, as a ratio to the same computation hand-written with
//! the Processor API over the same stores, in the same process, through
//! `TopologyTestDriver` (no broker).
//!
//! `cargo run --release -p weir-benches --bin dsl_overhead -- [RECORDS] [ROUNDS]`
//! (defaults: 20,000 records, 5 rounds) through the driver;
//! `... -- testkit [RECORDS] [ROUNDS]` (defaults 100,000 and 3) on the runtime
//! over one embedded broker (at-least-once, 6 partitions, one stream thread,
//! timed from `start` until the output holds a record per input record).
//!
//! Two computations:
//! - **windowed count**: records keyed by one of 200 users, timestamps
//!   ascending, counted per user in tumbling 10 s windows; every update is
//!   written out (DSL: `group_by_key().windowed_by(..).count().to_stream()`;
//!   by hand: one processor over a window store).
//! - **stream-table join**: a table of 200 customers, then orders joined
//!   with it (DSL: `table` + `join`; by hand: a processor writing the table's
//!   store and one reading it).
//!
//! The driver commits after every record, as it always does; both sides pay
//! that alike. Each round runs the DSL and the hand-written version in
//! alternating order; every run is printed and the figure is the median of
//! the per-round ratios (hand-written time / DSL time: the DSL's throughput
//! as a fraction of the hand-written one's).

use std::time::{Duration, Instant};

use weir_streams::dsl::{Materialized, StreamsBuilder, TimeWindows, Window, Windowed};
use weir_streams::processor::{Processor, ProcessorContext};
use weir_streams::state::{KvStoreRef, WindowStoreRef};
use weir_streams::testing::TopologyTestDriver;
use weir_streams::{ProcessError, Record, Topology, TopologyBuilder};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const USERS: u64 = 200;
const WINDOW_MS: i64 = 10_000;

fn user(i: u64) -> String {
    format!("u{:03}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % USERS)
}

fn dsl_windowed(out: &str) -> weir_streams::Result<Topology> {
    let b = StreamsBuilder::new();
    b.stream::<String, String>("views")
        .group_by_key()
        .windowed_by(TimeWindows::of_size_with_no_grace(Duration::from_millis(
            WINDOW_MS as u64,
        )))
        .materialized(Materialized::as_("views"))
        .count()
        .to_stream()
        .to(out);
    b.build()
}

struct WindowCount(WindowStoreRef<String, i64>);

impl Processor<String, String> for WindowCount {
    type KOut = Windowed<String>;
    type VOut = Option<i64>;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, Windowed<String>, Option<i64>>,
        r: Record<String, String>,
    ) -> Result<(), ProcessError> {
        let store = ctx.window_store(&self.0)?;
        let start = r.timestamp / WINDOW_MS * WINDOW_MS;
        let n = store
            .fetch(&r.key, start, start)?
            .pop()
            .map_or(0, |(_, n)| n)
            + 1;
        store.put(&r.key, &n, start)?;
        let window = Window {
            start,
            end: start + WINDOW_MS,
        };
        ctx.forward(Record::new(
            Windowed::new(r.key, window),
            Some(n),
            r.timestamp,
        ));
        Ok(())
    }
}

fn hand_windowed(out: &str) -> weir_streams::Result<Topology> {
    let mut b = TopologyBuilder::new();
    let store = b.window_store::<String, i64>("views", Duration::from_millis(WINDOW_MS as u64));
    let src = b.source::<String, String>("src", &["views"]);
    let s = store.clone();
    let p = b.processor("count", &[&src], move || WindowCount(s.clone()), &[&store]);
    b.sink("sink", &[&p], out);
    b.build()
}

fn dsl_join(out: &str) -> weir_streams::Result<Topology> {
    let b = StreamsBuilder::new();
    let customers = b.table::<String, String>("customers", Materialized::as_("customers"));
    b.stream::<String, String>("orders")
        .join(&customers, |o, c| format!("{o},{c}"))
        .to(out);
    b.build()
}

struct PutTable(KvStoreRef<String, String>);

impl Processor<String, Option<String>> for PutTable {
    type KOut = String;
    type VOut = String;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, Option<String>>,
    ) -> Result<(), ProcessError> {
        let store = ctx.kv_store(&self.0)?;
        match &r.value {
            Some(v) => store.put(&r.key, v, r.timestamp)?,
            None => store.delete(&r.key, r.timestamp)?,
        }
        Ok(())
    }
}

struct Enrich(KvStoreRef<String, String>);

impl Processor<String, String> for Enrich {
    type KOut = String;
    type VOut = String;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, String>,
    ) -> Result<(), ProcessError> {
        if let Some(c) = ctx.kv_store(&self.0)?.get(&r.key)? {
            let v = format!("{},{c}", r.value);
            ctx.forward(r.with_value(v));
        }
        Ok(())
    }
}

fn hand_join(out: &str) -> weir_streams::Result<Topology> {
    let mut b = TopologyBuilder::new();
    let store = b.kv_store::<String, String>("customers");
    let table = b.source::<String, Option<String>>("customers-src", &["customers"]);
    let orders = b.source::<String, String>("orders-src", &["orders"]);
    let (s1, s2) = (store.clone(), store.clone());
    b.processor("table", &[&table], move || PutTable(s1.clone()), &[&store]);
    let p = b.processor("enrich", &[&orders], move || Enrich(s2.clone()), &[&store]);
    b.sink("sink", &[&p], out);
    b.build()
}

fn run_windowed(topology: Topology, records: u64) -> Result<Duration, BoxError> {
    let mut driver = TopologyTestDriver::new(topology, "bench")?;
    let started = Instant::now();
    for i in 0..records {
        driver.pipe("views", &user(i), &"page".to_string(), i as i64 * 10)?;
    }
    let out = driver.read_output::<Windowed<String>, Option<i64>>("out")?;
    let elapsed = started.elapsed();
    if out.len() as u64 != records {
        return Err(format!("{} outputs for {records} records", out.len()).into());
    }
    Ok(elapsed)
}

fn run_join(topology: Topology, records: u64) -> Result<Duration, BoxError> {
    let mut driver = TopologyTestDriver::new(topology, "bench")?;
    for c in 0..USERS {
        driver.pipe(
            "customers",
            &format!("u{c:03}"),
            &Some(format!("name{c}")),
            0,
        )?;
    }
    let started = Instant::now();
    for i in 0..records {
        driver.pipe("orders", &user(i), &format!("o{i}"), i as i64)?;
    }
    let out = driver.read_output::<String, String>("out")?;
    let elapsed = started.elapsed();
    if out.len() as u64 != records {
        return Err(format!("{} outputs for {records} records", out.len()).into());
    }
    Ok(elapsed)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

type Case = (
    &'static str,
    Build,
    Build,
    fn(Topology, u64) -> Result<Duration, BoxError>,
);

const PARTITIONS: i32 = 6;

/// Builds a topology writing to the given output topic.
type Build = fn(&str) -> weir_streams::Result<Topology>;

async fn produce(
    bootstrap: &str,
    topic: &str,
    records: impl Iterator<Item = (String, Option<String>, i64)>,
) -> Result<(), BoxError> {
    use weir_client::config::producer::ProducerConfig;
    use weir_client::producer::{Producer, ProducerRecord};
    let producer = Producer::new(ProducerConfig::from_properties(&[
        ("bootstrap.servers", bootstrap),
        ("linger.ms", "5"),
    ])?)
    .await?;
    let mut acks = Vec::new();
    for (k, v, ts) in records {
        let mut r = ProducerRecord::new(topic).with_key(k).with_timestamp(ts);
        if let Some(v) = v {
            r = r.with_value(v);
        }
        acks.push(producer.enqueue(r).await?);
    }
    producer.flush().await;
    for a in acks {
        a.await?;
    }
    Ok(())
}

async fn run_on_testkit(
    kit: &weir_testkit::Cluster,
    topology: Topology,
    out: &str,
    records: u64,
) -> Result<Duration, BoxError> {
    let dir = tempfile::tempdir()?;
    let bootstrap = kit.bootstrap();
    let state = dir.path().display().to_string();
    let config = weir_streams::StreamsConfig::from_properties(&[
        ("application.id", format!("bench-{out}").as_str()),
        ("bootstrap.servers", bootstrap.as_str()),
        ("state.dir", state.as_str()),
        ("fetch.max.wait.ms", "100"),
        ("linger.ms", "5"),
    ])?;
    let started = Instant::now();
    let instance = weir_streams::KafkaStreams::start(topology, config).await?;
    loop {
        let mut done = 0i64;
        for p in 0..PARTITIONS {
            done += kit.offsets(out, p).await?.1;
        }
        if done >= records as i64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed();
    instance.close(Duration::from_secs(60)).await?;
    Ok(took)
}

fn testkit(records: u64, rounds: usize) -> Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let kit = weir_testkit::Cluster::builder().brokers(1).build().await?;
        let bootstrap = kit.bootstrap();
        let none: [(&str, &str); 0] = [];
        for t in ["views", "customers", "orders"] {
            kit.create_topic(t, PARTITIONS, none).await?;
        }
        produce(
            &bootstrap,
            "views",
            (0..records).map(|i| (user(i), Some("page".to_string()), i as i64 * 10)),
        )
        .await?;
        produce(
            &bootstrap,
            "customers",
            (0..USERS).map(|c| (format!("u{c:03}"), Some(format!("name{c}")), 0)),
        )
        .await?;
        produce(
            &bootstrap,
            "orders",
            (0..records).map(|i| (user(i), Some(format!("o{i}")), 1 + i as i64)),
        )
        .await?;
        println!(
            "on the runtime: {records} records, {PARTITIONS} partitions, one embedded broker, \
             at-least-once"
        );
        let cases: [(&str, Build, Build); 2] = [
            ("windowed count", dsl_windowed, hand_windowed),
            ("stream-table join", dsl_join, hand_join),
        ];
        for (name, dsl, hand) in cases {
            let mut ratios = Vec::new();
            for round in 0..rounds {
                let (dout, hout) = (format!("dsl-{round}-{}", name.len()), format!("hand-{round}-{}", name.len()));
                kit.create_topic(&dout, PARTITIONS, none).await?;
                kit.create_topic(&hout, PARTITIONS, none).await?;
                let (d, h) = if round % 2 == 0 {
                    let d = run_on_testkit(&kit, dsl(&dout)?, &dout, records).await?;
                    (d, run_on_testkit(&kit, hand(&hout)?, &hout, records).await?)
                } else {
                    let h = run_on_testkit(&kit, hand(&hout)?, &hout, records).await?;
                    (run_on_testkit(&kit, dsl(&dout)?, &dout, records).await?, h)
                };
                let rate = |t: Duration| records as f64 / t.as_secs_f64();
                let ratio = h.as_secs_f64() / d.as_secs_f64();
                println!(
                    "{name} (runtime) round {round}: dsl {:.0} records/s, hand-written {:.0} records/s, ratio {ratio:.3}",
                    rate(d),
                    rate(h)
                );
                ratios.push(ratio);
            }
            println!(
                "{name} (runtime): median ratio (DSL throughput / hand-written) {:.3}",
                median(ratios)
            );
        }
        Ok::<(), BoxError>(())
    })
}

fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("testkit") {
        args.next();
        let records: u64 = args.next().map_or(Ok(100_000), |a| a.parse())?;
        let rounds: usize = args.next().map_or(Ok(3), |a| a.parse())?;
        return testkit(records, rounds);
    }
    let records: u64 = args.next().map_or(Ok(20_000), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(5), |a| a.parse())?;
    let cases: [Case; 2] = [
        ("windowed count", dsl_windowed, hand_windowed, run_windowed),
        ("stream-table join", dsl_join, hand_join, run_join),
    ];
    for (name, dsl, hand, run) in cases {
        let mut ratios = Vec::new();
        for round in 0..rounds {
            let (d, h) = if round % 2 == 0 {
                let d = run(dsl("out")?, records)?;
                (d, run(hand("out")?, records)?)
            } else {
                let h = run(hand("out")?, records)?;
                (run(dsl("out")?, records)?, h)
            };
            let rate = |t: Duration| records as f64 / t.as_secs_f64();
            let ratio = h.as_secs_f64() / d.as_secs_f64();
            println!(
                "{name} round {round}: dsl {:.0} records/s, hand-written {:.0} records/s, ratio {ratio:.3}",
                rate(d),
                rate(h)
            );
            ratios.push(ratio);
        }
        println!(
            "{name}: median ratio (DSL throughput / hand-written) {:.3}",
            median(ratios)
        );
    }
    Ok(())
}
