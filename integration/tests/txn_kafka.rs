//! Transactions on the real broker at `$KAFKA_BOOTSTRAP` (Apache Kafka
//! under scripts/test.sh), over hundreds of transactions per producer:
//! on Kafka 4.x with `transaction.version=2` (KIP-890) the coordinator
//! bumps the producer epoch at every EndTxn, so a client that keeps its
//! old epoch is refused as fenced from its second transaction on. Each
//! test prints the transaction version it ran under; scripts/test.sh runs
//! them on a cluster of each version.
//!
//! Abort visibility is checked only where the broker filters aborted
//! records: not on tansu (`WEIR_BROKER_KIND=tansu`), which hands them to
//! read_committed readers (the test says so when it skips that check).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use weir_client::Cluster;
use weir_client::admin::{Admin, NewTopic};
use weir_client::config::ClientConfig;
use weir_client::producer::{ProducerRecord, TopicPartition};
use weir_client::transaction::{
    GroupMetadata, TransactionConfig, TransactionErrorClass, TransactionalProducer,
    fetch_stable_offsets,
};
use weir_integration::real_broker::{bootstrap_or_skip, read_committed_values, unique};

fn config(bootstrap: &str) -> ClientConfig {
    ClientConfig::from_properties(&[
        ("bootstrap.servers", bootstrap),
        ("default.api.timeout.ms", "30000"),
    ])
    .unwrap()
}

fn filters_aborts() -> bool {
    std::env::var("WEIR_BROKER_KIND").as_deref() != Ok("tansu")
}

/// The cluster's finalized transaction version, as the first broker says.
async fn transaction_version(cluster: &Cluster) -> i16 {
    let metadata = cluster.metadata(&[]).await.unwrap();
    let broker = metadata.brokers.keys().next().copied().unwrap();
    let conn = cluster
        .connection(broker, weir_client::cluster::Lane::Metadata)
        .await
        .unwrap();
    conn.transaction_version()
}

async fn producer(cluster: &Cluster, id: &str) -> TransactionalProducer {
    let p = TransactionalProducer::with_cluster(
        cluster.clone(),
        Default::default(),
        TransactionConfig::new(id).with_timeout(Duration::from_secs(60)),
    )
    .unwrap();
    p.init_transactions().await.unwrap();
    p
}

/// 300 transactions from one producer, every fifth aborted, each with
/// records on two partitions and the group's offsets: every commit holds
/// (the epoch each EndTxn returns is adopted), read_committed sees exactly
/// the committed records in order, and the stable offset is the last
/// committed one.
#[tokio::test]
async fn three_hundred_transactions_in_a_row_commit_and_abort() {
    let Some(bootstrap) = bootstrap_or_skip("txn_kafka many transactions") else {
        return;
    };
    let topic = unique("weir-txn-many");
    let group = unique("weir-txn-many-group");
    let admin = Admin::connect(config(&bootstrap)).await.unwrap();
    admin.create_topic(NewTopic::new(&topic, 2)).await.unwrap();
    let cluster = Cluster::connect(config(&bootstrap)).await.unwrap();
    let version = transaction_version(&cluster).await;
    println!("transaction.version={version}");
    let p = producer(&cluster, &unique("weir-txn-many")).await;
    // Kafka refuses offsets of a topic it does not have.
    let input = TopicPartition::new(&topic, 1);
    let mut committed = [Vec::new(), Vec::new()];
    let mut last_committed_offset = None;
    let started = std::time::Instant::now();
    // From the end of one transaction to the first record of the next
    // acknowledged: what a retry of CONCURRENT_TRANSACTIONS (the previous
    // transaction's markers still being written) costs.
    let mut ended = None;
    let mut gaps = Vec::new();
    for txn in 0..300i64 {
        let commit = txn % 5 != 4;
        p.begin().unwrap();
        for partition in 0..2 {
            let value = format!("t{txn}-p{partition}");
            p.send(
                ProducerRecord::new(&topic)
                    .with_partition(partition)
                    .with_value(value.clone()),
            )
            .await
            .unwrap_or_else(|e| panic!("transaction {txn}: send: {e}"));
            if let Some(at) = ended.take() {
                gaps.push(std::time::Instant::now().duration_since(at));
            }
            if commit {
                committed[usize::try_from(partition).unwrap()].push(value);
            }
        }
        p.send_offsets_to_transaction(
            &BTreeMap::from([(input.clone(), txn)]),
            &GroupMetadata::unchecked(&group),
        )
        .await
        .unwrap_or_else(|e| panic!("transaction {txn}: send offsets: {e}"));
        if commit {
            p.commit()
                .await
                .unwrap_or_else(|e| panic!("transaction {txn}: commit: {e}"));
            last_committed_offset = Some(txn);
        } else {
            p.abort()
                .await
                .unwrap_or_else(|e| panic!("transaction {txn}: abort: {e}"));
        }
        ended = Some(std::time::Instant::now());
    }
    let took = started.elapsed();
    println!(
        "300 transactions in {} ms: {:.1} ms each (transaction.version={version})",
        took.as_millis(),
        took.as_secs_f64() * 1000.0 / 300.0
    );
    gaps.sort();
    let at = |q: f64| gaps[((gaps.len() - 1) as f64 * q) as usize].as_secs_f64() * 1000.0;
    println!(
        "end of a transaction to the next one's first acknowledged record: \
         median {:.1} ms, p90 {:.1} ms, max {:.1} ms over {} transactions",
        at(0.5),
        at(0.9),
        at(1.0),
        gaps.len()
    );
    let offsets = fetch_stable_offsets(&cluster, &group, std::slice::from_ref(&input))
        .await
        .unwrap();
    assert_eq!(offsets.get(&input).copied(), last_committed_offset);
    if filters_aborts() {
        for partition in 0..2 {
            let tp = TopicPartition::new(&topic, partition);
            let expected = &committed[usize::try_from(partition).unwrap()];
            let seen = read_committed_values(&cluster, &tp, expected.len())
                .await
                .unwrap();
            assert_eq!(&seen, expected, "partition {partition}");
        }
    } else {
        println!("abort visibility not checked: tansu returns aborted records");
    }
    p.close().await;
}

/// A producer that ran many transactions is replaced by a new instance
/// with the same transactional id while a transaction is open: the old one
/// is fenced for good (fatal), its open transaction is aborted, and the
/// new one goes on committing for hundreds of transactions.
#[tokio::test]
async fn a_zombie_is_fenced_and_its_successor_keeps_committing() {
    let Some(bootstrap) = bootstrap_or_skip("txn_kafka zombie") else {
        return;
    };
    let topic = unique("weir-txn-zombie");
    let id = unique("weir-txn-zombie");
    let admin = Admin::connect(config(&bootstrap)).await.unwrap();
    admin.create_topic(NewTopic::new(&topic, 1)).await.unwrap();
    let cluster = Cluster::connect(config(&bootstrap)).await.unwrap();
    println!(
        "transaction.version={}",
        transaction_version(&cluster).await
    );
    let tp = TopicPartition::new(&topic, 0);
    let record = |v: String| ProducerRecord::new(&topic).with_partition(0).with_value(v);
    let mut expected = Vec::new();

    let old = producer(&cluster, &id).await;
    for txn in 0..100 {
        old.begin().unwrap();
        old.send(record(format!("old-{txn}"))).await.unwrap();
        old.commit()
            .await
            .unwrap_or_else(|e| panic!("old producer, transaction {txn}: {e}"));
        expected.push(format!("old-{txn}"));
    }
    old.begin().unwrap();
    old.send(record("old-open".to_owned())).await.unwrap();

    // The successor fences the old epoch and aborts its open transaction.
    let new_cluster = Cluster::connect(config(&bootstrap)).await.unwrap();
    let new = producer(&new_cluster, &id).await;
    let refused = match old.send(record("old-late".to_owned())).await {
        Err(e) => e,
        Ok(_) => old.commit().await.unwrap_err(),
    };
    assert_eq!(
        refused.transaction_class(),
        Some(TransactionErrorClass::Fatal),
        "the zombie must be fenced for good: {refused}"
    );
    for txn in 0..200 {
        new.begin().unwrap();
        new.send(record(format!("new-{txn}"))).await.unwrap();
        new.commit()
            .await
            .unwrap_or_else(|e| panic!("new producer, transaction {txn}: {e}"));
        expected.push(format!("new-{txn}"));
    }
    if filters_aborts() {
        let seen = read_committed_values(&cluster, &tp, expected.len())
            .await
            .unwrap();
        assert_eq!(seen, expected);
    } else {
        println!("abort visibility not checked: tansu returns aborted records");
    }
    new.close().await;
    old.close().await;
}
