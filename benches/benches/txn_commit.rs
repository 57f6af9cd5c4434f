//! What a transaction costs: the latency of one transaction (begin, 10
//! records of 100 bytes to one partition, commit) against the same 10
//! records sent by an idempotent producer and flushed. Both run against
//! an in-process weir-testkit cluster over TCP on 127.0.0.1, so the figures
//! are the client's round trips, not a real broker's disk.
//!
//! A commit costs AddPartitionsToTxn (first record of the transaction to
//! the partition), the Produce, and EndTxn (which writes the markers);
//! a flush costs only the Produce.
//!
//! Run: `cargo bench -p weir-benches --bench txn_commit`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use tokio::runtime::Runtime;
use weir_client::Cluster;
use weir_client::config::ClientConfig;
use weir_client::config::producer::ProducerOptions;
use weir_client::producer::{Producer, ProducerRecord};
use weir_client::transaction::{TransactionConfig, TransactionalProducer};

const RECORDS: usize = 10;

fn record(i: usize) -> ProducerRecord {
    ProducerRecord::new("bench")
        .with_partition(0)
        .with_value(vec![b'x'; 100])
        .with_key(format!("{i}"))
}

async fn client(kit: &weir_testkit::Cluster) -> Cluster {
    let config =
        ClientConfig::from_properties(&[("bootstrap.servers", kit.bootstrap().as_str())]).unwrap();
    Cluster::connect(config).await.unwrap()
}

fn options() -> ProducerOptions {
    ProducerOptions {
        linger: Duration::ZERO,
        ..ProducerOptions::default()
    }
}

fn bench(c: &mut Criterion) {
    let rt = Runtime::new().unwrap();
    let kit = rt.block_on(async {
        let kit = weir_testkit::Cluster::builder().build().await.unwrap();
        kit.create_topic("bench", 1, [] as [(&str, &str); 0])
            .await
            .unwrap();
        kit
    });
    let (plain, txn) = rt.block_on(async {
        let plain = Producer::with_cluster(client(&kit).await, options()).unwrap();
        let txn = TransactionalProducer::with_cluster(
            client(&kit).await,
            options(),
            TransactionConfig::new("bench-tx"),
        )
        .unwrap();
        txn.init_transactions().await.unwrap();
        (plain, txn)
    });

    let mut group = c.benchmark_group("txn_commit");
    group.sample_size(50);
    group.bench_function("plain_send_and_flush_10", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let mut pending = Vec::with_capacity(RECORDS);
                    for i in 0..RECORDS {
                        pending.push(plain.enqueue(record(i)).await.unwrap());
                    }
                    plain.flush().await;
                    for p in pending {
                        p.await.unwrap();
                    }
                }
                start.elapsed()
            })
        });
    });
    group.bench_function("transaction_begin_send_commit_10", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    txn.begin().unwrap();
                    for i in 0..RECORDS {
                        // The delivery is tracked by the producer; commit
                        // waits for it.
                        drop(txn.enqueue(record(i)).await.unwrap());
                    }
                    txn.commit().await.unwrap();
                }
                start.elapsed()
            })
        });
    });
    group.finish();
    // The cluster runs on `rt`: drop it there.
    rt.block_on(async move {
        plain.close().await;
        txn.close().await;
        drop(kit);
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
