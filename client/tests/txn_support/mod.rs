//! Shared setup for the transaction tests: a testkit cluster reached in
//! memory (through weir-integration's testkit dialer) and a read_committed
//! reader. The tests run on tokio's paused clock, so every timeout is exact
//! and costs no real time.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use weir_client::Cluster;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions, IsolationLevel};
use weir_client::config::producer::ProducerOptions;
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::transaction::{TransactionConfig, TransactionalProducer};
use weir_integration::testkit_dial::client_config;

pub type Kit = Arc<weir_testkit::Cluster>;

pub async fn testkit(partitions: i32, topics: &[&str]) -> Kit {
    testkit_at(partitions, topics, 2).await
}

/// A testkit whose finalized `transaction.version` is `version`: 1 for the
/// tests of transaction version 1's own requests (AddPartitionsToTxn,
/// AddOffsetsToTxn, the KIP-360 bump after an abort), which brokers before
/// Kafka 4.0 and 4.x clusters formatted at version 1 still need.
pub async fn testkit_at(partitions: i32, topics: &[&str], version: i16) -> Kit {
    testkit_with(
        weir_testkit::Cluster::builder().transaction_version(version),
        partitions,
        topics,
    )
    .await
}

/// A testkit built by `builder`, with `topics` of `partitions` each.
pub async fn testkit_with(
    builder: weir_testkit::ClusterBuilder,
    partitions: i32,
    topics: &[&str],
) -> Kit {
    let cluster = Arc::new(builder.build().await.unwrap());
    for t in topics {
        cluster
            .create_topic(t, partitions, [] as [(&str, &str); 0])
            .await
            .unwrap();
    }
    cluster
}

pub async fn client(kit: &Kit, client_id: &str) -> Cluster {
    let config = client_config(kit, client_id)
        .default_api_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    Cluster::connect(config).await.unwrap()
}

pub async fn producer(kit: &Kit, client_id: &str, txn: TransactionConfig) -> TransactionalProducer {
    let cluster = client(kit, client_id).await;
    let p = TransactionalProducer::with_cluster(
        cluster,
        ProducerOptions {
            linger: Duration::from_millis(1),
            ..Default::default()
        },
        txn,
    )
    .unwrap();
    p.init_transactions().await.unwrap();
    p
}

/// A read_committed consumer from the earliest offset, with short fetch waits.
pub fn read_committed_options() -> ConsumerOptions {
    ConsumerOptions {
        isolation_level: IsolationLevel::ReadCommitted,
        auto_offset_reset: AutoOffsetReset::Earliest,
        fetch_max_wait: Duration::from_millis(20),
        ..Default::default()
    }
}

/// Every value a read_committed consumer sees on `topic` up to the last
/// stable offset, per partition.
pub async fn read_committed(kit: &Kit, topic: &str, partitions: i32) -> BTreeMap<i32, Vec<String>> {
    // Kafka (and the testkit, by default) writes a transaction's markers
    // after answering EndTxn: read once those of every ended transaction
    // are written. A transaction still open is not waited for.
    kit.markers_written().await.unwrap();
    let cluster = client(kit, "reader").await;
    let mut consumer = Consumer::with_cluster(cluster, read_committed_options());
    let tps: Vec<TopicPartition> = (0..partitions)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    consumer.assign(tps.clone());
    let mut out: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for tp in &tps {
        consumer.seek(tp, SeekTo::Earliest).unwrap();
        out.entry(tp.partition).or_default();
    }
    for _ in 0..200 {
        let mut done = true;
        for tp in &tps {
            let (_, lso, _) = kit.offsets(topic, tp.partition).await.unwrap();
            if consumer.position(tp).await.unwrap() < lso {
                done = false;
            }
        }
        if done {
            break;
        }
        for r in consumer.poll_for(Duration::from_millis(50)).await.unwrap() {
            let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
            out.entry(r.partition).or_default().push(v);
        }
    }
    out
}

/// All values, partitions flattened, sorted.
pub fn all_values(by_partition: &BTreeMap<i32, Vec<String>>) -> Vec<String> {
    let mut v: Vec<String> = by_partition.values().flatten().cloned().collect();
    v.sort();
    v
}
