//! Consumer calls a rust-rdkafka user reaches for: recv of one record, a
//! Stream of records, pause and resume, against an in-process testkit.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use futures_util::StreamExt;
use weir_client::config::consumer::ConsumerConfig;
use weir_client::config::producer::ProducerConfig;
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_testkit::Cluster;

const TOPIC: &str = "events";
/// A bound on each wait, so a consumer that never delivers fails the test.
const WAIT: Duration = Duration::from_secs(30);

/// A cluster whose topic has `partitions` partitions of `n` records each,
/// and a consumer assigned all of them from the start.
async fn setup(partitions: i32, n: usize) -> (Cluster, Consumer) {
    let cluster = Cluster::builder().brokers(1).build().await.unwrap();
    let none: [(&str, &str); 0] = [];
    cluster.create_topic(TOPIC, partitions, none).await.unwrap();
    let bootstrap = cluster.bootstrap();
    let producer = Producer::new(
        ProducerConfig::from_properties(&[("bootstrap.servers", &bootstrap)]).unwrap(),
    )
    .await
    .unwrap();
    for p in 0..partitions {
        for i in 0..n {
            producer
                .send(
                    ProducerRecord::new(TOPIC)
                        .with_partition(p)
                        .with_value(format!("{i}")),
                )
                .await
                .unwrap();
        }
    }
    producer.close().await;
    let config = ConsumerConfig::from_properties(&[
        ("bootstrap.servers", bootstrap.as_str()),
        ("fetch.max.wait.ms", "50"),
    ])
    .unwrap();
    let mut consumer = Consumer::new(config).await.unwrap();
    let tps: Vec<TopicPartition> = (0..partitions)
        .map(|p| TopicPartition::new(TOPIC, p))
        .collect();
    consumer.assign(tps.clone());
    for tp in &tps {
        consumer.seek(tp, SeekTo::Earliest).unwrap();
    }
    (cluster, consumer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recv_and_the_stream_deliver_one_record_at_a_time_in_order() {
    let (_cluster, mut consumer) = setup(1, 6).await;
    let first = tokio::time::timeout(WAIT, consumer.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.offset, 0);
    // The rest of the fetched batch waits for the next call.
    let tp = TopicPartition::new(TOPIC, 0);
    assert_eq!(consumer.position(&tp).await.unwrap(), 1);
    let streamed: Vec<i64> = tokio::time::timeout(
        WAIT,
        consumer
            .stream()
            .take(3)
            .map(|r| r.unwrap().offset)
            .collect(),
    )
    .await
    .unwrap();
    assert_eq!(streamed, [1, 2, 3]);
    let rest: Vec<i64> = tokio::time::timeout(WAIT, consumer.poll())
        .await
        .unwrap()
        .unwrap()
        .iter()
        .map(|r| r.offset)
        .collect();
    assert_eq!(rest, [4, 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_partition_is_not_fetched_until_resumed() {
    let (_cluster, mut consumer) = setup(2, 3).await;
    let first = tokio::time::timeout(WAIT, consumer.recv())
        .await
        .unwrap()
        .unwrap();
    let paused = TopicPartition::new(TOPIC, first.partition);
    let other = 1 - first.partition;
    consumer.pause(std::slice::from_ref(&paused)).unwrap();
    assert_eq!(consumer.paused(), std::slice::from_ref(&paused));
    // Its position went back to the first record not returned.
    assert_eq!(consumer.position(&paused).await.unwrap(), 1);
    let mut from_other = 0;
    while from_other < 3 {
        let batch = tokio::time::timeout(WAIT, consumer.poll())
            .await
            .unwrap()
            .unwrap();
        for r in batch {
            assert_eq!(r.partition, other, "a record of the paused partition");
            from_other += 1;
        }
    }
    let idle = consumer.poll_for(Duration::from_millis(300)).await.unwrap();
    assert!(idle.is_empty(), "{idle:?}");
    consumer.resume(std::slice::from_ref(&paused));
    assert!(consumer.paused().is_empty());
    let mut rest = Vec::new();
    while rest.len() < 2 {
        let batch = tokio::time::timeout(WAIT, consumer.poll())
            .await
            .unwrap()
            .unwrap();
        rest.extend(batch.into_iter().map(|r| (r.partition, r.offset)));
    }
    assert_eq!(rest, [(first.partition, 1), (first.partition, 2)]);

    let unknown = TopicPartition::new(TOPIC, 9);
    assert!(consumer.pause(&[unknown]).is_err());
}
