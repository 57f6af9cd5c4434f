//! M5: a GroupConsumer whose first committed-offset fetch fails (an open
//! transaction holds the offsets: UNSTABLE_OFFSET_COMMIT past
//! default.api.timeout) must not forget the partitions it was assigned: a
//! later poll fetches the offsets again and consumes them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::collections::BTreeMap;
use std::time::Duration;

use member_support::*;
use tokio::time::Instant;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerConfig, ConsumerOptions};
use weir_client::producer::{Producer, ProducerRecord, TopicPartition as ClientPartition};
use weir_client::transaction::{GroupMetadata, TransactionConfig, TransactionalProducer};
use weir_group::group_consumer::GroupConsumer;

#[tokio::test(start_paused = true)]
async fn assigned_partitions_are_consumed_after_a_failed_offset_fetch() {
    let tk = testkit(1).await;
    let loader =
        Producer::with_cluster(client(&tk.bootstrap(), "loader").await, Default::default())
            .unwrap();
    for i in 0..3 {
        loader
            .send(
                ProducerRecord::new(TOPIC)
                    .with_partition(0)
                    .with_value(format!("{i}")),
            )
            .await
            .unwrap();
    }
    loader.close().await;
    // A transaction holds offsets for partition 0 and stays open.
    let holder = TransactionalProducer::with_cluster(
        client(&tk.bootstrap(), "holder").await,
        Default::default(),
        TransactionConfig::new("tx-holder"),
    )
    .unwrap();
    holder.init_transactions().await.unwrap();
    holder.begin().unwrap();
    holder
        .send_offsets_to_transaction(
            &BTreeMap::from([(ClientPartition::new(TOPIC, 0), 1)]),
            &GroupMetadata::unchecked("g"),
        )
        .await
        .unwrap();

    let consumer_config = ConsumerConfig {
        client: weir_integration::testkit_dial::client_config(&tk, "c")
            .default_api_timeout(Duration::from_secs(1))
            .build()
            .unwrap(),
        consumer: ConsumerOptions {
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(50),
            ..Default::default()
        },
    };
    let mut consumer = GroupConsumer::connect(consumer_config, config("g"))
        .await
        .unwrap();
    let first = consumer.poll().await;
    assert!(first.is_err(), "the offsets were unstable: {first:?}");
    holder.abort().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while seen.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "partition 0 never consumed: {seen:?}"
        );
        match tokio::time::timeout(Duration::from_secs(1), consumer.poll()).await {
            Ok(Ok(records)) => seen.extend(records.into_iter().map(|r| r.offset)),
            Ok(Err(e)) => panic!("poll after the abort: {e}"),
            Err(_) => {}
        }
    }
    assert_eq!(seen, vec![0, 1, 2], "aborted offsets are not used");
    consumer
        .close(weir_group::member::ShutdownMode::Default)
        .await
        .unwrap();
}

/// m16: with `auto.offset.reset=none`, an assigned partition without a
/// committed offset is a typed error (Java's NoOffsetForPartitionException),
/// not a silent start at the end of the log that skips its records.
#[tokio::test(start_paused = true)]
async fn auto_offset_reset_none_without_a_committed_offset_is_a_typed_error() {
    use weir_client::consumer::SeekTo;
    use weir_group::GroupError;
    use weir_group::assignor::TopicPartition;

    let tk = testkit(1).await;
    let loader =
        Producer::with_cluster(client(&tk.bootstrap(), "loader").await, Default::default())
            .unwrap();
    for i in 0..3 {
        loader
            .send(
                ProducerRecord::new(TOPIC)
                    .with_partition(0)
                    .with_value(format!("{i}")),
            )
            .await
            .unwrap();
    }
    loader.close().await;
    let consumer_config = ConsumerConfig {
        client: weir_integration::testkit_dial::client_config(&tk, "c")
            .build()
            .unwrap(),
        consumer: ConsumerOptions {
            auto_offset_reset: AutoOffsetReset::None,
            fetch_max_wait: Duration::from_millis(50),
            ..Default::default()
        },
    };
    let mut consumer = GroupConsumer::connect(consumer_config, config("g-none"))
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(30), consumer.poll())
        .await
        .expect("poll must fail, not wait at the end of the log");
    match first {
        Err(GroupError::NoOffsetForPartition {
            group,
            topic,
            partition: 0,
        }) => {
            assert_eq!((group.as_str(), topic.as_str()), ("g-none", TOPIC));
        }
        other => panic!("expected NoOffsetForPartition, got {other:?}"),
    }
    // After a seek the partition is consumed from there.
    consumer
        .seek(&TopicPartition::new(TOPIC, 0), SeekTo::Earliest)
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let records = tokio::time::timeout(Duration::from_secs(30), consumer.poll())
            .await
            .unwrap()
            .unwrap();
        seen.extend(records.into_iter().map(|r| r.offset));
    }
    assert_eq!(seen, vec![0, 1, 2]);
    consumer
        .close(weir_group::member::ShutdownMode::Default)
        .await
        .unwrap();
}
