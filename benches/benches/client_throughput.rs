//! Producer and consumer throughput against a real broker (`KAFKA_BOOTSTRAP`).
//!
//! Producer: 20,000 records of 100 bytes (8-byte keys) per iteration,
//! enqueued as fast as `buffer.memory` allows and all acknowledged, per
//! codec, idempotent with `acks=all`. Consumer: one fresh consumer per
//! iteration reads 20,000 records from the start of a pre-filled
//! 1-partition topic. Against tansu the figures measure tansu as much as
//! Weir (see shared NOTES: its fetches always wait `fetch.max.wait.ms`).
//!
//! Run: `KAFKA_BOOTSTRAP=127.0.0.1:9092 cargo bench -p weir-benches --bench client_throughput`.
//! Without `KAFKA_BOOTSTRAP` it prints that it skipped and measures nothing.

// A bench that can't reach its broker has nothing to measure: stop loudly.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokio::runtime::Runtime;
use weir_client::Cluster;
use weir_client::config::ClientConfig;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions};
use weir_client::config::producer::ProducerOptions;
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use weir_protocol::kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use weir_protocol::kafka_protocol::protocol::StrBytes;
use weir_protocol::records::Compression;

const RECORDS: usize = 20_000;
const VALUE_LEN: usize = 100;

fn value(i: usize) -> Vec<u8> {
    let mut v = format!(
        "{{\"user\":{},\"event\":\"click\",\"seq\":{i},\"pad\":\"",
        i % 977
    )
    .into_bytes();
    v.resize(VALUE_LEN - 2, b'x');
    v.extend_from_slice(b"\"}");
    v
}

async fn create_topic(cluster: &Cluster, topic: &str, partitions: i32) {
    let request = CreateTopicsRequest::default()
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_num_partitions(partitions)
                .with_replication_factor(1),
        ])
        .with_timeout_ms(10_000);
    cluster.request_controller(&request).await.unwrap();
    for _ in 0..100 {
        if let Ok(md) = cluster.refresh_metadata(&[topic]).await
            && md.topic(topic).is_some_and(|t| {
                !t.partitions.is_empty() && t.partitions.iter().all(|p| p.leader >= 0)
            })
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("topic {topic} has no leader");
}

async fn produce(producer: &Producer, topic: &str) {
    let mut deliveries = Vec::with_capacity(RECORDS);
    for i in 0..RECORDS {
        let record = ProducerRecord::new(topic)
            .with_key(format!("key{:05}", i % 10_000))
            .with_value(value(i));
        deliveries.push(producer.enqueue(record).await.unwrap());
    }
    for d in deliveries {
        d.await.unwrap();
    }
}

fn client_throughput(c: &mut Criterion) {
    let Some(addr) = std::env::var("KAFKA_BOOTSTRAP")
        .ok()
        .filter(|a| !a.is_empty())
    else {
        println!("skipped: KAFKA_BOOTSTRAP not set");
        return;
    };
    let rt = Runtime::new().unwrap();
    let config = ClientConfig::from_properties(&[("bootstrap.servers", &addr)]).unwrap();
    let cluster = rt.block_on(Cluster::connect(config)).unwrap();
    let run = std::process::id();

    let mut group = c.benchmark_group("producer");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Bytes((RECORDS * VALUE_LEN) as u64));
    for codec in [Compression::None, Compression::Lz4, Compression::Zstd] {
        let topic = format!("weir-bench-produce-{}-{run}", codec.name());
        rt.block_on(create_topic(&cluster, &topic, 3));
        let options = ProducerOptions {
            compression: codec,
            linger: Duration::from_millis(5),
            batch_size: 64 << 10,
            ..Default::default()
        };
        let producer = rt
            .block_on(async { Producer::with_cluster(cluster.clone(), options) })
            .unwrap();
        group.bench_function(codec.name(), |b| {
            b.iter_custom(|iters| {
                let started = Instant::now();
                for _ in 0..iters {
                    rt.block_on(produce(&producer, &topic));
                }
                started.elapsed()
            });
        });
        rt.block_on(producer.close());
    }
    group.finish();

    let topic = format!("weir-bench-consume-{run}");
    rt.block_on(async {
        create_topic(&cluster, &topic, 1).await;
        let producer = Producer::with_cluster(
            cluster.clone(),
            ProducerOptions {
                linger: Duration::from_millis(5),
                batch_size: 64 << 10,
                ..Default::default()
            },
        )
        .unwrap();
        produce(&producer, &topic).await;
        producer.close().await;
    });
    let mut group = c.benchmark_group("consumer");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Bytes((RECORDS * VALUE_LEN) as u64));
    group.bench_function("from_start", |b| {
        b.iter_custom(|iters| {
            let started = Instant::now();
            for _ in 0..iters {
                rt.block_on(async {
                    let options = ConsumerOptions {
                        auto_offset_reset: AutoOffsetReset::Earliest,
                        fetch_max_wait: Duration::from_millis(100),
                        ..Default::default()
                    };
                    let mut consumer = Consumer::with_cluster(cluster.clone(), options);
                    let tp = TopicPartition::new(&topic, 0);
                    consumer.assign([tp.clone()]);
                    consumer.seek(&tp, SeekTo::Earliest).unwrap();
                    let mut n = 0;
                    while n < RECORDS {
                        n += consumer.poll().await.unwrap().len();
                    }
                });
            }
            started.elapsed()
        });
    });
    group.finish();
}

criterion_group!(benches, client_throughput);
criterion_main!(benches);
