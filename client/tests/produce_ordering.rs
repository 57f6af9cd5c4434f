//! The idempotent producer with five requests in flight per connection,
//! against weir-testkit over TCP: every record is written exactly once and
//! in send order per partition.
//!
//! The broker checks each producer's sequences strictly, like Kafka: a
//! batch whose base sequence is not the next one gets
//! `OUT_OF_ORDER_SEQUENCE_NUMBER`. So the producer must put its requests on
//! the wire in the order it numbered them. Runs on real time (the client
//! dials TCP); `WEIR_ORDERING_RECORDS` raises the record count.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use weir_client::Cluster;
use weir_client::config::ClientConfig;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions};
use weir_client::config::producer::ProducerOptions;
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_protocol::kafka_protocol::messages::RequestKind;
use weir_protocol::records::{BatchHeader, Compression};

const TOPIC: &str = "ordered";
const PARTITIONS: i32 = 2;

async fn client(kit: &weir_testkit::Cluster, client_id: &str) -> Cluster {
    let config = ClientConfig::from_properties(&[
        ("bootstrap.servers", kit.bootstrap().as_str()),
        ("client.id", client_id),
        ("retry.backoff.ms", "10"),
        ("retry.backoff.max.ms", "50"),
    ])
    .unwrap();
    Cluster::connect(config).await.unwrap()
}

/// Reads every partition of `TOPIC` from the start up to its high watermark.
async fn read_back(kit: &weir_testkit::Cluster) -> BTreeMap<i32, Vec<String>> {
    let mut consumer = Consumer::with_cluster(
        client(kit, "reader").await,
        ConsumerOptions {
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(20),
            ..Default::default()
        },
    );
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p))
        .collect();
    consumer.assign(tps.clone());
    let mut out: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let mut ends = BTreeMap::new();
    for tp in &tps {
        consumer.seek(tp, SeekTo::Earliest).unwrap();
        let (_, _, hwm) = kit.offsets(TOPIC, tp.partition).await.unwrap();
        ends.insert(tp.partition, hwm);
        out.entry(tp.partition).or_default();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
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
        assert!(
            tokio::time::Instant::now() < deadline,
            "reading back took over a minute"
        );
        for r in consumer.poll_for(Duration::from_millis(100)).await.unwrap() {
            let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
            out.entry(r.partition).or_default().push(v);
        }
    }
}

/// Checks the Produce requests as the broker received them: per partition,
/// each batch's base sequence follows the previous batch's last one. No
/// fault is injected, so nothing is retried, and any gap means one request
/// overtook another on its way to the wire.
async fn assert_wire_order(kit: &weir_testkit::Cluster) {
    let mut next: BTreeMap<(i64, String, i32), i32> = BTreeMap::new();
    let mut batches = 0usize;
    let mut out_of_order = Vec::new();
    for request in kit.requests().await.unwrap() {
        let RequestKind::Produce(produce) = &request.body else {
            continue;
        };
        for topic in &produce.topic_data {
            for partition in &topic.partition_data {
                let Some(records) = &partition.records else {
                    continue;
                };
                let h = BatchHeader::parse(records).unwrap();
                batches += 1;
                let key = (h.producer_id, topic.name.0.to_string(), partition.index);
                let expected = next.get(&key).copied().unwrap_or(0);
                if h.base_sequence != expected {
                    out_of_order.push((partition.index, expected, h.base_sequence));
                }
                next.insert(key, h.base_sequence + h.record_count);
            }
        }
    }
    assert!(batches > 100, "only {batches} batches: too few to race");
    assert!(
        out_of_order.is_empty(),
        "{} of {batches} batches reached the broker out of sequence order \
         (partition, expected, got), first ones: {:?}",
        out_of_order.len(),
        &out_of_order[..out_of_order.len().min(5)]
    );
}

/// Produces `n` small keyed records as fast as `enqueue` takes them and
/// checks the log holds each exactly once, in send order per partition.
async fn produce_in_order(n: usize, options: ProducerOptions) {
    let kit = weir_testkit::Cluster::builder().build().await.unwrap();
    kit.create_topic(TOPIC, PARTITIONS, [] as [(&str, &str); 0])
        .await
        .unwrap();
    // Keep every request: the wire order is checked at the end.
    kit.with_state(|s| s.faults.set_log_capacity(usize::MAX))
        .await
        .unwrap();
    let producer = Producer::with_cluster(client(&kit, "ordering").await, options).unwrap();
    let mut sent: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let mut deliveries = Vec::with_capacity(n);
    for i in 0..n {
        let value = format!("r{i:06}");
        let record = ProducerRecord::new(TOPIC)
            .with_key(format!("k{}", i % 97))
            .with_value(value.clone());
        deliveries.push((value, producer.enqueue(record).await.unwrap()));
    }
    let mut offsets: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for (value, delivery) in deliveries {
        let meta = tokio::time::timeout(Duration::from_secs(120), delivery)
            .await
            .expect("delivery within two minutes")
            .unwrap_or_else(|e| panic!("{value} was not delivered: {e}"));
        sent.entry(meta.partition).or_default().push(value);
        offsets.entry(meta.partition).or_default().push(meta.offset);
    }
    producer.close().await;
    assert_wire_order(&kit).await;
    assert_eq!(sent.len(), PARTITIONS as usize, "both partitions used");
    for (partition, offsets) in &offsets {
        let contiguous: Vec<i64> = (0..offsets.len() as i64).collect();
        assert!(
            offsets == &contiguous,
            "partition {partition}: acknowledged offsets are not 0, 1, 2, … in send order"
        );
    }
    let log = read_back(&kit).await;
    for (partition, values) in &sent {
        let stored = &log[partition];
        assert_eq!(
            stored.len(),
            values.len(),
            "partition {partition}: records in the log vs records sent"
        );
        if let Some(i) = stored.iter().zip(values).position(|(a, b)| a != b) {
            panic!(
                "partition {partition}: offset {i} holds {} where {} was sent",
                stored[i], values[i]
            );
        }
    }
}

fn records() -> usize {
    std::env::var("WEIR_ORDERING_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_in_flight_deliver_every_record_once_in_order() {
    // Small batches and a short linger, as in `weir demo`: many requests
    // per partition are out at once. 2 KiB batches hold at most about 80 of
    // these records, so however the timing falls, 30,000 records make well
    // over the 100 batches `assert_wire_order` asks for (with the default
    // 16 KiB, a fast run made exactly 100).
    produce_in_order(
        records(),
        ProducerOptions {
            linger: Duration::from_millis(5),
            batch_size: 2_048,
            compression: Compression::Lz4,
            ..Default::default()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_in_flight_with_tiny_batches_deliver_every_record_once_in_order() {
    // One or two records a batch: the most requests, the most chances to
    // overtake.
    produce_in_order(
        records() / 3,
        ProducerOptions {
            linger: Duration::ZERO,
            batch_size: 100,
            max_in_flight: 5,
            ..Default::default()
        },
    )
    .await;
}
