//! Interop (issue #2, item 6): records written by Weir read back
//! identically with independent clients, and the reverse.
//!
//! - Weir → independent: Weir's producer writes one topic per codec;
//!   librdkafka (confluent-kafka) and kafka-python read every topic back,
//!   and every field is compared: partition and offset (from Weir's
//!   delivery reports), key, value, headers, timestamp and its type.
//! - Independent → Weir: librdkafka writes one topic per codec; Weir's
//!   consumer reads it back, compared with librdkafka's delivery reports.
//! - Partitioning: the same keys through librdkafka's `murmur2_random`
//!   and Weir's default partitioner land on the same partitions.
//!
//! Each runs against the broker at `$KAFKA_BOOTSTRAP` (tansu under
//! scripts/test.sh) and against an in-process weir-testkit cluster. Nothing
//! here asks a broker for its "latest" offset (tansu's is wrong, see
//! shared/NOTES.md §1): readers start at offset 0 and count records.

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common_interop;

use std::time::Duration;

use common_interop::kafka_tool::{self, Reader};
use common_interop::records::{
    RecordView, SampleRecord, differences, sample_records, stored_by_tool, stored_by_weir,
};
use common_interop::{Broker, CODECS, Tools, tools_or_skip};
use weir_client::config::consumer::ConsumerConfig;
use weir_client::config::producer::ProducerConfig;
use weir_client::consumer::{Consumer, ConsumerRecord, SeekTo, TopicPartition};
use weir_client::producer::partitioner::partition_for_key;
use weir_client::producer::{Producer, RecordMetadata};

const PARTITIONS: i32 = 3;
/// Bounds every read, so a lost record fails the test instead of hanging it.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Writes `sample` to `topic` with Weir's producer, compressed with
/// `codec`, all records in flight at once so that batches hold several.
async fn weir_produce(
    bootstrap: &str,
    codec: &str,
    topic: &str,
    sample: &[SampleRecord],
) -> Result<Vec<RecordMetadata>, String> {
    let config = ProducerConfig::from_properties(&[
        ("bootstrap.servers", bootstrap),
        ("compression.type", codec),
        ("linger.ms", "20"),
        ("acks", "all"),
    ])
    .map_err(|e| e.to_string())?;
    let producer = Producer::new(config).await.map_err(|e| e.to_string())?;
    let mut deliveries = Vec::new();
    for record in sample {
        deliveries.push(
            producer
                .enqueue(record.to_weir(topic))
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let mut metadata = Vec::new();
    for delivery in deliveries {
        metadata.push(delivery.await.map_err(|e| e.to_string())?);
    }
    producer.close().await;
    Ok(metadata)
}

/// Reads `want` records of `topic` with Weir's consumer, from offset 0 of
/// every partition.
async fn weir_consume(
    bootstrap: &str,
    topic: &str,
    want: usize,
) -> Result<Vec<ConsumerRecord>, String> {
    let config = ConsumerConfig::from_properties(&[
        ("bootstrap.servers", bootstrap),
        // tansu always waits the full max wait before answering a fetch.
        ("fetch.max.wait.ms", "100"),
    ])
    .map_err(|e| e.to_string())?;
    let mut consumer = Consumer::new(config).await.map_err(|e| e.to_string())?;
    let partitions: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    consumer.assign(partitions.clone());
    for tp in &partitions {
        consumer
            .seek(tp, SeekTo::Offset(0))
            .map_err(|e| e.to_string())?;
    }
    let mut got = Vec::new();
    let read = async {
        while got.len() < want {
            got.extend(consumer.poll().await.map_err(|e| e.to_string())?);
        }
        Ok::<_, String>(())
    };
    match tokio::time::timeout(READ_TIMEOUT, read).await {
        Ok(result) => result?,
        Err(_) => println!(
            "weir consumer: {} of {want} records after {READ_TIMEOUT:?}",
            got.len()
        ),
    }
    Ok(got)
}

/// Weir writes, librdkafka and kafka-python read; returns every failure.
async fn weir_to_independent(tools: &Tools, broker: &Broker) -> Vec<String> {
    let (bootstrap, label) = (broker.bootstrap(), broker.label());
    let mut failures = Vec::new();
    let mut reads = Vec::new();
    for codec in CODECS {
        let topic = broker
            .fresh_topic(&format!("from-weir-{codec}"), PARTITIONS)
            .await;
        let sample = sample_records(codec, PARTITIONS);
        let produced = tokio::time::timeout(
            READ_TIMEOUT,
            weir_produce(&bootstrap, codec, &topic, &sample),
        )
        .await
        .unwrap_or_else(|_| Err(format!("no delivery reports within {READ_TIMEOUT:?}")));
        let metadata = match produced {
            Ok(metadata) => metadata,
            Err(e) => {
                failures.push(format!("[{label}] [{codec}] weir producer: {e}"));
                continue;
            }
        };
        let mut problems = Vec::new();
        let stored = stored_by_weir(&sample, &metadata, &mut problems);
        failures.extend(
            problems
                .into_iter()
                .map(|p| format!("[{label}] [{codec}] weir delivery report: {p}")),
        );
        // Both readers of every codec at once: each spends most of its time
        // starting Python and waiting on fetches.
        for reader in Reader::ALL {
            let (tools, bootstrap, topic) = (tools.clone(), bootstrap.clone(), topic.clone());
            let want = stored.len();
            let read = tokio::spawn(async move {
                let timeout = u32::try_from(READ_TIMEOUT.as_secs()).unwrap();
                kafka_tool::consume(&tools, &bootstrap, reader, &topic, want, timeout).await
            });
            reads.push((codec, reader, stored.clone(), read));
        }
    }
    for (codec, reader, stored, read) in reads {
        let out = read.await.unwrap();
        let what = format!("[{label}] [{codec}] weir -> {reader}");
        if out.status != 0 {
            failures.push(format!(
                "{what}: exit {}: {}",
                out.status,
                out.stderr.trim()
            ));
        }
        let mut seen = Vec::new();
        for line in &out.lines {
            match RecordView::from_json(line) {
                Ok(view) => seen.push(view),
                Err(e) => failures.push(format!("{what}: unreadable output: {e}")),
            }
        }
        let diffs = differences(&stored, &seen);
        println!(
            "{what}: {} records written, {} read, {}",
            stored.len(),
            seen.len(),
            verdict(&diffs)
        );
        failures.extend(diffs.into_iter().map(|d| format!("{what}: {d}")));
    }
    failures
}

/// librdkafka writes, Weir reads; returns every failure.
async fn independent_to_weir(tools: &Tools, broker: &Broker) -> Vec<String> {
    let (bootstrap, label) = (broker.bootstrap(), broker.label());
    let mut failures = Vec::new();
    let mut writes = Vec::new();
    for codec in CODECS {
        let topic = broker
            .fresh_topic(&format!("to-weir-{codec}"), PARTITIONS)
            .await;
        let sample = sample_records(codec, PARTITIONS);
        let lines: String = sample.iter().map(SampleRecord::to_json_line).collect();
        let (tools, bootstrap) = (tools.clone(), bootstrap.clone());
        let topic_for_task = topic.clone();
        let write = tokio::spawn(async move {
            kafka_tool::produce(&tools, &bootstrap, &topic_for_task, codec, lines).await
        });
        writes.push((codec, topic, sample, write));
    }
    for (codec, topic, sample, write) in writes {
        let out = write.await.unwrap();
        let what = format!("[{label}] [{codec}] librdkafka -> weir");
        if out.status != 0 || out.lines.len() != sample.len() {
            failures.push(format!(
                "{what}: librdkafka produce: exit {}, {} reports: {}",
                out.status,
                out.lines.len(),
                out.stderr.trim()
            ));
            continue;
        }
        let mut problems = Vec::new();
        let stored = stored_by_tool(&sample, &out.lines, &mut problems);
        problems.extend(partitioner_differences(&sample, &stored));
        let seen: Vec<RecordView> = match weir_consume(&bootstrap, &topic, stored.len()).await {
            Ok(records) => records.iter().map(RecordView::from_weir).collect(),
            Err(e) => {
                problems.push(format!("weir consumer: {e}"));
                Vec::new()
            }
        };
        problems.extend(differences(&stored, &seen));
        println!(
            "{what}: {} records written, {} read, {}",
            stored.len(),
            seen.len(),
            verdict(&problems)
        );
        failures.extend(problems.into_iter().map(|d| format!("{what}: {d}")));
    }
    failures
}

/// Keyed records librdkafka placed itself must sit where Weir's (Java's)
/// partitioner would put them.
fn partitioner_differences(sample: &[SampleRecord], stored: &[RecordView]) -> Vec<String> {
    let mut out = Vec::new();
    for (record, at) in sample.iter().zip(stored) {
        if let (Some(key), None) = (&record.key, record.partition) {
            let weir = partition_for_key(key, PARTITIONS);
            if weir != at.partition {
                out.push(format!(
                    "key {key:02x?}: librdkafka chose partition {}, Weir's partitioner {weir}",
                    at.partition
                ));
            }
        }
    }
    out
}

/// Keys of many shapes and lengths (murmur2 handles a 1–3 byte tail
/// separately), including the empty key, which both hash like Java does.
fn partitioning_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..200u16)
        .map(|i| match i % 4 {
            0 => format!("user-{i}").into_bytes(),
            1 => vec![i.to_le_bytes()[0], i.to_le_bytes()[1], 0xFF, 0x00],
            2 => "x".repeat(usize::from(i)).into_bytes(),
            _ => format!("ключ-{i}").into_bytes(),
        })
        .collect();
    keys.push(Vec::new());
    keys
}

/// The same keys through Weir's default partitioner and librdkafka's
/// `murmur2_random`; returns every key they place differently.
async fn same_partitions(tools: &Tools, broker: &Broker) -> Vec<String> {
    const SPREAD_OVER: i32 = 7;
    let (bootstrap, label) = (broker.bootstrap(), broker.label());
    let topic = broker.fresh_topic("partitioner", SPREAD_OVER).await;
    let sample: Vec<SampleRecord> = partitioning_keys()
        .into_iter()
        .map(|key| SampleRecord {
            key: Some(key),
            value: Some(b"v".to_vec()),
            headers: Vec::new(),
            timestamp: None,
            partition: None,
        })
        .collect();
    let weir = match weir_produce(&bootstrap, "none", &topic, &sample).await {
        Ok(metadata) => metadata,
        Err(e) => return vec![format!("[{label}] weir producer: {e}")],
    };
    let lines: String = sample.iter().map(SampleRecord::to_json_line).collect();
    let out = kafka_tool::produce(tools, &bootstrap, &topic, "none", lines).await;
    if out.status != 0 || out.lines.len() != sample.len() {
        return vec![format!(
            "[{label}] librdkafka produce: exit {}, {} reports: {}",
            out.status,
            out.lines.len(),
            out.stderr.trim()
        )];
    }
    let mut failures = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    for ((record, meta), report) in sample.iter().zip(&weir).zip(&out.lines) {
        let librdkafka = report["partition"].as_i64();
        used.insert(meta.partition);
        if librdkafka != Some(i64::from(meta.partition)) {
            failures.push(format!(
                "[{label}] key {:02x?}: Weir chose partition {}, librdkafka {librdkafka:?}",
                record.key, meta.partition
            ));
        }
    }
    // Agreement on one partition for everything would prove nothing.
    if used.len() != usize::try_from(SPREAD_OVER).unwrap() {
        failures.push(format!(
            "[{label}] {} keys used only partitions {used:?}",
            sample.len()
        ));
    }
    println!(
        "[{label}] partitioning: {} keys over {SPREAD_OVER} partitions, {}",
        sample.len(),
        verdict(&failures)
    );
    failures
}

fn verdict(problems: &[String]) -> String {
    if problems.is_empty() {
        "every field matches".to_owned()
    } else {
        format!("{} differences", problems.len())
    }
}

fn assert_none(test: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{test}: {} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_records_read_back_identically_by_librdkafka_and_kafka_python_on_external_broker() {
    let test =
        "weir_records_read_back_identically_by_librdkafka_and_kafka_python_on_external_broker";
    let Some(tools) = tools_or_skip(test) else {
        return;
    };
    let Some(broker) = Broker::external_or_skip(test) else {
        return;
    };
    assert_none(test, &weir_to_independent(&tools, &broker).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_records_read_back_identically_by_librdkafka_and_kafka_python_on_testkit() {
    let test = "weir_records_read_back_identically_by_librdkafka_and_kafka_python_on_testkit";
    let Some(tools) = tools_or_skip(test) else {
        return;
    };
    let broker = Broker::testkit().await;
    assert_none(test, &weir_to_independent(&tools, &broker).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_records_read_back_identically_by_weir_on_external_broker() {
    let test = "librdkafka_records_read_back_identically_by_weir_on_external_broker";
    let Some(tools) = tools_or_skip(test) else {
        return;
    };
    let Some(broker) = Broker::external_or_skip(test) else {
        return;
    };
    assert_none(test, &independent_to_weir(&tools, &broker).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_records_read_back_identically_by_weir_on_testkit() {
    let test = "librdkafka_records_read_back_identically_by_weir_on_testkit";
    let Some(tools) = tools_or_skip(test) else {
        return;
    };
    let broker = Broker::testkit().await;
    assert_none(test, &independent_to_weir(&tools, &broker).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_records_land_on_the_same_partitions_as_with_librdkafka_on_external_broker() {
    let test = "keyed_records_land_on_the_same_partitions_as_with_librdkafka_on_external_broker";
    let Some(tools) = tools_or_skip(test) else {
        return;
    };
    let Some(broker) = Broker::external_or_skip(test) else {
        return;
    };
    assert_none(test, &same_partitions(&tools, &broker).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_records_land_on_the_same_partitions_as_with_librdkafka_on_testkit() {
    let test = "keyed_records_land_on_the_same_partitions_as_with_librdkafka_on_testkit";
    let Some(tools) = tools_or_skip(test) else {
        return;
    };
    let broker = Broker::testkit().await;
    assert_none(test, &same_partitions(&tools, &broker).await);
}
