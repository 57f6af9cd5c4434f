//! The GroupConsumer calls a rust-rdkafka user reaches for: commit of given
//! offsets, store_offset then commit, auto-commit of what was returned,
//! pause and resume, recv and a Stream, against an in-process testkit.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use futures_util::StreamExt;
use weir_client::admin::Admin;
use weir_client::config::ClientConfig;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerConfig};
use weir_client::config::producer::ProducerConfig;
use weir_client::consumer::ConsumerRecord;
use weir_client::producer::{Producer, ProducerRecord};
use weir_group::GroupError;
use weir_group::assignor::TopicPartition;
use weir_group::group_consumer::GroupConsumer;
use weir_group::member::{MemberConfig, ShutdownMode};
use weir_testkit::Cluster;

const TOPIC: &str = "events";
/// A bound on each wait, so a consumer that never delivers fails the test.
const WAIT: Duration = Duration::from_secs(30);

/// A cluster whose topic has `partitions` partitions, each holding
/// `per_partition` records valued `p-i`.
async fn cluster(partitions: i32, per_partition: usize) -> Cluster {
    let cluster = Cluster::builder().brokers(1).build().await.unwrap();
    let none: [(&str, &str); 0] = [];
    cluster.create_topic(TOPIC, partitions, none).await.unwrap();
    let config =
        ProducerConfig::from_properties(&[("bootstrap.servers", cluster.bootstrap().as_str())])
            .unwrap();
    let producer = Producer::new(config).await.unwrap();
    for p in 0..partitions {
        for i in 0..per_partition {
            producer
                .send(
                    ProducerRecord::new(TOPIC)
                        .with_partition(p)
                        .with_value(format!("{p}-{i}")),
                )
                .await
                .unwrap();
        }
    }
    producer.close().await;
    cluster
}

async fn consumer(cluster: &Cluster, group: &str, extra: &[(&str, &str)]) -> GroupConsumer {
    let bootstrap = cluster.bootstrap();
    let mut props = vec![
        ("bootstrap.servers", bootstrap.as_str()),
        ("fetch.max.wait.ms", "50"),
    ];
    props.extend_from_slice(extra);
    let config = ConsumerConfig::from_properties(&props)
        .unwrap()
        .with_auto_offset_reset(AutoOffsetReset::Earliest);
    GroupConsumer::connect(config, MemberConfig::new(group, [TOPIC]))
        .await
        .unwrap()
}

/// The group's committed offset per partition.
async fn committed(cluster: &Cluster, group: &str) -> Vec<(i32, i64)> {
    let admin = Admin::connect(
        ClientConfig::from_properties(&[("bootstrap.servers", cluster.bootstrap().as_str())])
            .unwrap(),
    )
    .await
    .unwrap();
    let mut offsets: Vec<(i32, i64)> = admin
        .list_group_offsets(group)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.partition, c.offset))
        .collect();
    offsets.sort_unstable();
    offsets
}

async fn poll(consumer: &mut GroupConsumer) -> Vec<ConsumerRecord> {
    tokio::time::timeout(WAIT, consumer.poll())
        .await
        .expect("records within the bound")
        .unwrap()
}

async fn recv(consumer: &mut GroupConsumer) -> ConsumerRecord {
    tokio::time::timeout(WAIT, consumer.recv())
        .await
        .expect("a record within the bound")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_offsets_and_store_offset_commit_exactly_what_they_name() {
    let cluster = cluster(1, 5).await;
    let mut c = consumer(&cluster, "g", &[]).await;
    let mut records = Vec::new();
    while records.len() < 5 {
        records.extend(poll(&mut c).await);
    }
    // Only the first two were processed.
    for record in &records[..2] {
        c.store_offset(record).unwrap();
    }
    c.commit_stored().await.unwrap();
    assert_eq!(committed(&cluster, "g").await, [(0, 2)]);

    let tp = TopicPartition::new(TOPIC, 0);
    c.commit_offsets(&[(tp, 4)]).await.unwrap();
    assert_eq!(committed(&cluster, "g").await, [(0, 4)]);

    // A partition the member does not own is refused, and nothing is sent.
    let other = TopicPartition::new(TOPIC, 7);
    let refused = c.commit_offsets(&[(other, 1)]).await.unwrap_err();
    assert!(
        matches!(refused, GroupError::NotOwned { partition: 7, .. }),
        "{refused}"
    );
    assert_eq!(committed(&cluster, "g").await, [(0, 4)]);

    // commit() is what poll returned: all five.
    c.commit().await.unwrap();
    assert_eq!(committed(&cluster, "g").await, [(0, 5)]);
    c.close(ShutdownMode::Default).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_commit_commits_only_what_was_returned() {
    let cluster = cluster(1, 5).await;
    // An interval of 0: every call commits what the calls before returned.
    let mut c = consumer(
        &cluster,
        "auto",
        &[
            ("enable.auto.commit", "true"),
            ("auto.commit.interval.ms", "0"),
        ],
    )
    .await;
    let first = recv(&mut c).await;
    assert_eq!(first.offset, 0);
    // The batch fetched holds all five; one was returned.
    let second = recv(&mut c).await;
    assert_eq!(second.offset, 1);
    assert_eq!(committed(&cluster, "auto").await, [(0, 1)]);
    let third = recv(&mut c).await;
    assert_eq!(third.offset, 2);
    assert_eq!(committed(&cluster, "auto").await, [(0, 2)]);
    // Closing commits what was returned, not what was fetched.
    c.close(ShutdownMode::Default).await.unwrap();
    assert_eq!(committed(&cluster, "auto").await, [(0, 3)]);

    // Off (the default): nothing is committed until asked.
    let cluster = self::cluster(1, 3).await;
    let mut c = consumer(&cluster, "manual", &[]).await;
    recv(&mut c).await;
    recv(&mut c).await;
    assert_eq!(committed(&cluster, "manual").await, []);
    c.close(ShutdownMode::Default).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_partition_returns_nothing_until_resumed() {
    let cluster = cluster(2, 3).await;
    let mut c = consumer(&cluster, "p", &[]).await;
    // The first record proves the member owns both partitions.
    let first = recv(&mut c).await;
    let paused = TopicPartition::new(TOPIC, first.partition);
    let other = 1 - first.partition;
    c.pause(std::slice::from_ref(&paused)).unwrap();
    assert_eq!(c.paused(), std::slice::from_ref(&paused));
    let mut from_other = 0;
    while from_other < 3 {
        for r in poll(&mut c).await {
            assert_eq!(r.partition, other, "a record of the paused partition");
            from_other += 1;
        }
    }
    // Nothing else is there while the pause holds.
    let idle = tokio::time::timeout(Duration::from_millis(300), c.poll()).await;
    assert!(idle.is_err(), "{idle:?}");
    c.resume(std::slice::from_ref(&paused)).unwrap();
    let mut rest = Vec::new();
    while rest.len() < 2 {
        rest.extend(
            poll(&mut c)
                .await
                .into_iter()
                .map(|r| (r.partition, r.offset)),
        );
    }
    // Picked up right after the one returned before the pause.
    assert_eq!(rest, [(first.partition, 1), (first.partition, 2)]);
    c.close(ShutdownMode::Default).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recv_and_the_stream_deliver_in_order_and_mix_with_poll() {
    let cluster = cluster(1, 6).await;
    let mut c = consumer(&cluster, "s", &[]).await;
    assert_eq!(recv(&mut c).await.offset, 0);
    let streamed: Vec<i64> = tokio::time::timeout(
        WAIT,
        c.stream().take(3).map(|r| r.unwrap().offset).collect(),
    )
    .await
    .unwrap();
    assert_eq!(streamed, [1, 2, 3]);
    let mut rest: Vec<i64> = Vec::new();
    while rest.len() < 2 {
        rest.extend(poll(&mut c).await.into_iter().map(|r| r.offset));
    }
    assert_eq!(rest, [4, 5]);
    c.close(ShutdownMode::Default).await.unwrap();
    assert_eq!(committed(&cluster, "s").await, [(0, 6)]);
}
