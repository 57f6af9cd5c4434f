//! A Fetch response is decoded at once, so the consumer caps what all of
//! its batches decode to (review m13): of many small compression "bombs",
//! each far under the per-batch cap, it delivers those that fit and fetches
//! the rest again, instead of exhausting memory; only a batch bigger than
//! the whole budget fails, with a typed error naming the partition.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions};
use weir_client::config::producer::ProducerOptions;
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_client::{ClientError, Cluster};
use weir_integration::testkit_dial::client_config;
use weir_protocol::records::Compression;

const TOPIC: &str = "bombs";
const PARTITIONS: i32 = 4;
/// Decompressed size of one bomb; gzip makes it a few hundred bytes.
const BOMB: usize = 128 << 10;
const PER_PARTITION: usize = 3;

async fn client(kit: &Arc<weir_testkit::Cluster>, id: &str) -> Cluster {
    Cluster::connect(client_config(kit, id).build().unwrap())
        .await
        .unwrap()
}

async fn setup() -> Arc<weir_testkit::Cluster> {
    setup_with(BOMB).await
}

/// The topic, with `PER_PARTITION` gzip batches of one `bomb`-byte record
/// (zeros) in each partition.
async fn setup_with(bomb: usize) -> Arc<weir_testkit::Cluster> {
    let kit = Arc::new(weir_testkit::Cluster::builder().build().await.unwrap());
    kit.create_topic(TOPIC, PARTITIONS, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let producer = Producer::with_cluster(
        client(&kit, "bomber").await,
        ProducerOptions {
            compression: Compression::Gzip,
            // One record per batch: many small batches.
            batch_size: 1,
            ..Default::default()
        },
    )
    .unwrap();
    for p in 0..PARTITIONS {
        for _ in 0..PER_PARTITION {
            producer
                .send(
                    ProducerRecord::new(TOPIC)
                        .with_partition(p)
                        .with_value(Bytes::from(vec![0u8; bomb])),
                )
                .await
                .unwrap();
        }
    }
    producer.close().await;
    kit
}

async fn consume(
    kit: &Arc<weir_testkit::Cluster>,
    fetch_max_bytes: i32,
) -> Result<usize, ClientError> {
    let mut consumer = Consumer::with_cluster(
        client(kit, "reader").await,
        ConsumerOptions {
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_bytes,
            max_partition_fetch_bytes: fetch_max_bytes,
            fetch_max_wait: Duration::from_millis(20),
            ..Default::default()
        },
    );
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p))
        .collect();
    consumer.assign(tps.clone());
    for tp in &tps {
        consumer.seek(tp, SeekTo::Earliest).unwrap();
    }
    let mut n = 0;
    for _ in 0..50 {
        n += consumer.poll_for(Duration::from_millis(100)).await?.len();
        if n == PARTITIONS as usize * PER_PARTITION {
            break;
        }
    }
    Ok(n)
}

#[tokio::test(start_paused = true)]
async fn many_small_bombs_in_one_fetch_response_are_read_in_parts_within_the_budget() {
    let kit = setup().await;
    // 64 KiB of fetch: a budget of 1 MiB decompressed per response, while
    // a response carries 12 bombs of 128 KiB (1.5 MiB) in a few KiB. The
    // seven that fit are delivered, the rest come in the next responses.
    assert_eq!(consume(&kit, 64 << 10).await.unwrap(), 12);
}

#[tokio::test(start_paused = true)]
async fn a_batch_bigger_than_the_whole_response_budget_fails_with_a_typed_error() {
    // Bombs of 768 KiB (under the producer's 1 MiB request cap): each
    // alone goes past the 512 KiB budget of a 32 KiB fetch.
    let kit = setup_with(768 << 10).await;
    let err = consume(&kit, 32 << 10).await.unwrap_err();
    match err {
        ClientError::FetchDecompressionLimit {
            ref topic,
            partition,
            limit,
            ..
        } => {
            assert_eq!(topic, TOPIC);
            assert!((0..PARTITIONS).contains(&partition));
            assert_eq!(limit, 16 * (32 << 10));
        }
        other => panic!("expected FetchDecompressionLimit, got {other}"),
    }
}

#[tokio::test(start_paused = true)]
async fn the_same_records_are_read_with_a_fetch_size_that_allows_them() {
    let kit = setup().await;
    // 1 MiB of fetch: 16 MiB decompressed per response, plenty.
    assert_eq!(consume(&kit, 1 << 20).await.unwrap(), 12);
}
