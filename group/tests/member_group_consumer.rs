//! GroupConsumer: committed offsets survive a handover, so two consumers
//! that share a group read every record once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::collections::BTreeSet;
use std::time::Duration;

use member_support::*;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerConfig};
use weir_client::config::producer::ProducerConfig;
use weir_client::producer::{Producer, ProducerRecord};
use weir_group::group_consumer::GroupConsumer;
use weir_group::member::ShutdownMode;

fn consumer_config(bootstrap: &str, id: &str) -> ConsumerConfig {
    ConsumerConfig::from_properties(&[
        ("bootstrap.servers", bootstrap),
        ("client.id", id),
        ("fetch.max.wait.ms", "50"),
        ("max.poll.records", "10"),
    ])
    .unwrap()
    .with_auto_offset_reset(AutoOffsetReset::Earliest)
}

async fn produce(bootstrap: &str, n: usize) {
    let config = ProducerConfig::from_properties(&[("bootstrap.servers", bootstrap)]).unwrap();
    let producer = Producer::new(config).await.unwrap();
    for i in 0..n {
        producer
            .send(
                ProducerRecord::new(TOPIC)
                    .with_partition((i % 4) as i32)
                    .with_value(format!("{i}")),
            )
            .await
            .unwrap();
    }
    producer.close().await;
}

fn values(records: &[weir_client::consumer::ConsumerRecord]) -> Vec<usize> {
    records
        .iter()
        .map(|r| {
            std::str::from_utf8(r.value.as_ref().unwrap())
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

/// Polls in its own task (GroupConsumer::poll is not cancel-safe), taking
/// 100 ms per batch, until told to stop.
fn run(
    mut consumer: GroupConsumer,
    out: tokio::sync::mpsc::UnboundedSender<usize>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<GroupConsumer>,
) {
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        loop {
            let records = tokio::select! {
                _ = &mut stopped => return consumer,
                r = consumer.poll() => r.unwrap(),
            };
            for v in values(&records) {
                out.send(v).unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (stop, task)
}

#[tokio::test(start_paused = true)]
async fn two_group_consumers_read_every_record_once() {
    let tk = testkit(4).await;
    let bootstrap = tk.bootstrap();
    produce(&bootstrap, 200).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let a = GroupConsumer::connect(consumer_config(&bootstrap, "a"), config("g"))
        .await
        .unwrap();
    let (stop_a, a) = run(a, tx.clone());
    let mut seen = Vec::new();
    while seen.len() < 60 {
        seen.push(rx.recv().await.unwrap());
    }
    let b = GroupConsumer::connect(consumer_config(&bootstrap, "b"), config("g"))
        .await
        .unwrap();
    let (stop_b, b) = run(b, tx);
    let all = tokio::time::timeout(Duration::from_secs(120), async {
        while seen.len() < 200 {
            seen.push(rx.recv().await.unwrap());
        }
    })
    .await;
    assert!(all.is_ok(), "read {} of 200", seen.len());
    // Nothing more arrives: no record is read twice.
    tokio::time::sleep(Duration::from_secs(5)).await;
    while let Ok(v) = rx.try_recv() {
        seen.push(v);
    }
    let distinct: BTreeSet<usize> = seen.iter().copied().collect();
    assert_eq!(
        distinct,
        (0..200).collect::<BTreeSet<_>>(),
        "every record read"
    );
    assert_eq!(seen.len(), 200, "no record read twice");
    stop_a.send(()).unwrap();
    stop_b.send(()).unwrap();
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!(
        a.member().assignment().len(),
        2,
        "the partitions were shared"
    );
    assert_eq!(
        b.member().assignment().len(),
        2,
        "the partitions were shared"
    );
    a.close(ShutdownMode::Planned).await.unwrap();
    b.close(ShutdownMode::Planned).await.unwrap();
}
