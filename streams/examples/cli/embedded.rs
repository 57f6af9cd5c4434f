//! The examples' self-check: an embedded cluster (weir-testkit, on the real
//! wire protocol over TCP), input produced to it, instances of the example
//! started under exactly-once, one of them crashed mid-run and replaced, and
//! the output read back as a read_committed consumer would.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use weir_client::config::consumer::ConsumerConfig;
use weir_client::config::producer::ProducerConfig;
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_streams::{KafkaStreams, StreamsConfig, Topology};
use weir_testkit::{ClientSelector, Cluster, PartitionTarget};

const BROKERS: i32 = 3;
/// How long a check waits for anything before it fails.
pub const PATIENCE: Duration = Duration::from_secs(120);

fn err<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("{context}: {e}")
}

/// A record to produce: key, value, timestamp.
pub type Input = (String, Option<String>, i64);

/// An embedded cluster and the state directories of the instances on it.
pub struct Embedded {
    pub cluster: Cluster,
    pub bootstrap: String,
    app: String,
    partitions: i32,
    dir: tempfile::TempDir,
}

impl Embedded {
    /// Starts a 3-broker cluster and creates `topics` with `partitions`.
    pub async fn start(app: &str, topics: &[&str], partitions: i32) -> Result<Self, String> {
        let cluster = Cluster::builder()
            .brokers(BROKERS)
            .build()
            .await
            .map_err(err("starting the embedded cluster"))?;
        let bootstrap = cluster.bootstrap();
        let none: [(&str, &str); 0] = [];
        for topic in topics {
            cluster
                .create_topic(topic, partitions, none)
                .await
                .map_err(err(&format!("creating {topic}")))?;
        }
        println!("embedded cluster (weir-testkit, {BROKERS} brokers) at {bootstrap}");
        Ok(Embedded {
            cluster,
            bootstrap,
            app: app.to_owned(),
            partitions,
            dir: tempfile::tempdir().map_err(err("a state directory"))?,
        })
    }

    /// Starts instance `id` of the application under exactly-once, 2 threads.
    pub async fn instance(&self, id: &str, topology: Topology) -> Result<KafkaStreams, String> {
        let dir = self.dir.path().join(id).display().to_string();
        let config = StreamsConfig::from_properties(&[
            ("application.id", self.app.as_str()),
            ("bootstrap.servers", &self.bootstrap),
            ("client.id", id),
            ("state.dir", &dir),
            ("num.stream.threads", "2"),
            ("processing.guarantee", "exactly_once_v2"),
            ("session.timeout.ms", "10000"),
            ("commit.interval.ms", "200"),
            ("fetch.max.wait.ms", "100"),
            ("linger.ms", "5"),
        ])
        .map_err(err("config"))?;
        KafkaStreams::start(topology, config)
            .await
            .map_err(err(&format!("starting {id}")))
    }

    /// A crash: `id` cut off from every broker, then dropped with whatever it
    /// had in flight.
    pub async fn crash(&self, id: &str, instance: KafkaStreams) -> Result<(), String> {
        for broker in 0..BROKERS {
            self.cluster
                .partition_client(
                    ClientSelector::ClientId(id.to_owned()),
                    PartitionTarget::Broker(broker),
                )
                .await
                .map_err(err("cutting an instance off"))?;
        }
        instance.kill();
        println!("crash: instance {id} cut off from every broker and dropped");
        Ok(())
    }

    /// Produces `records` to `topic`, in order.
    pub async fn produce(&self, topic: &str, records: &[Input]) -> Result<(), String> {
        let producer = Producer::new(
            ProducerConfig::from_properties(&[
                ("bootstrap.servers", self.bootstrap.as_str()),
                ("client.id", "feeder"),
                ("linger.ms", "5"),
            ])
            .map_err(err("producer config"))?,
        )
        .await
        .map_err(err("producer"))?;
        let mut deliveries = Vec::with_capacity(records.len());
        for (key, value, ts) in records {
            let mut record = ProducerRecord::new(topic)
                .with_key(key.clone())
                .with_timestamp(*ts);
            if let Some(v) = value {
                record = record.with_value(v.clone());
            }
            deliveries.push(producer.enqueue(record).await.map_err(err("enqueue"))?);
        }
        producer.flush().await;
        for d in deliveries {
            d.await.map_err(err("delivery"))?;
        }
        println!("produced {} records to {topic}", records.len());
        Ok(())
    }

    /// Every committed record of `topic` (up to each partition's last
    /// stable offset), as (key, value) strings.
    pub async fn read_committed(&self, topic: &str) -> Result<Vec<(String, String)>, String> {
        let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
        Ok(self
            .read_committed_raw(topic)
            .await?
            .into_iter()
            .map(|(k, v)| (text(k), text(v)))
            .collect())
    }

    /// As [`Self::read_committed`], as bytes.
    pub async fn read_committed_raw(&self, topic: &str) -> Result<Vec<(Vec<u8>, Vec<u8>)>, String> {
        let config = ConsumerConfig::from_properties(&[
            ("bootstrap.servers", self.bootstrap.as_str()),
            ("client.id", "checker"),
            ("isolation.level", "read_committed"),
            ("fetch.max.wait.ms", "50"),
        ])
        .map_err(err("consumer config"))?;
        let mut consumer = Consumer::new(config).await.map_err(err("consumer"))?;
        let tps: Vec<_> = (0..self.partitions)
            .map(|p| TopicPartition::new(topic, p))
            .collect();
        consumer.assign(tps.clone());
        let mut ends = BTreeMap::new();
        for tp in &tps {
            consumer.seek(tp, SeekTo::Earliest).map_err(err("seek"))?;
            let (_, lso, _) = self
                .cluster
                .offsets(topic, tp.partition)
                .await
                .map_err(err("offsets"))?;
            ends.insert(tp.partition, lso);
        }
        let bytes = |b: Option<&[u8]>| b.unwrap_or_default().to_vec();
        let mut out = Vec::new();
        loop {
            let mut behind = false;
            for tp in &tps {
                let position = consumer.position(tp).await.map_err(err("position"))?;
                behind |= position < ends.get(&tp.partition).copied().unwrap_or(0);
            }
            if !behind {
                return Ok(out);
            }
            for r in consumer
                .poll_for(Duration::from_millis(100))
                .await
                .map_err(err("reading"))?
            {
                if r.offset < ends.get(&r.partition).copied().unwrap_or(0) {
                    out.push((bytes(r.key.as_deref()), bytes(r.value.as_deref())));
                }
            }
        }
    }
}

/// Waits until `done` holds (checked every 200 ms), for at most
/// [`PATIENCE`].
pub async fn wait_for<F, Fut>(what: &str, mut done: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, String>>,
{
    let deadline = Instant::now() + PATIENCE;
    while !done().await? {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Runs a check on a multi-threaded runtime and turns its outcome into the
/// exit code: 0 and one "ok" line, or 1 and the reason.
pub fn run_check<F, Fut>(name: &str, check: F) -> std::process::ExitCode
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<String, String>>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(check()) {
        Ok(summary) => {
            println!("ok: {summary}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{name}: check failed: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

/// Compares what came out with what should have, naming the first
/// differences.
pub fn compare<V: PartialEq + std::fmt::Debug>(
    got: &BTreeMap<String, V>,
    want: &BTreeMap<String, V>,
) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    let mut diffs = Vec::new();
    for (k, v) in want {
        match got.get(k) {
            Some(g) if g == v => {}
            other => diffs.push(format!("{k}: got {other:?}, want {v:?}")),
        }
    }
    for k in got.keys().filter(|k| !want.contains_key(*k)) {
        diffs.push(format!("{k}: not expected"));
    }
    diffs.truncate(5);
    Err(diffs.join("; "))
}
