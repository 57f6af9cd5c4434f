//! `DeliveryGroup`: many records' outcomes as one tally, for the plain
//! producer and inside a transaction.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod txn_support;

use std::collections::BTreeMap;
use std::time::Duration;

use txn_support::{all_values, client, producer, read_committed, testkit};
use weir_client::ClientError;
use weir_client::config::producer::ProducerOptions;
use weir_client::producer::{DeliveryGroup, Producer, ProducerRecord, TopicPartition};
use weir_client::transaction::{TransactionConfig, TransactionErrorClass, TransactionState};

#[tokio::test(start_paused = true)]
async fn a_group_gives_each_partitions_end_once_every_record_is_written() {
    let kit = testkit(3, &["out"]).await;
    let producer = Producer::with_cluster(
        client(&kit, "grouped").await,
        ProducerOptions {
            linger: Duration::from_millis(5),
            ..Default::default()
        },
    )
    .unwrap();
    let group = DeliveryGroup::new();
    let mut per_partition: BTreeMap<i32, i64> = BTreeMap::new();
    for i in 0..300i32 {
        let p = i % 3;
        *per_partition.entry(p).or_default() += 1;
        producer
            .enqueue_into(
                ProducerRecord::new("out")
                    .with_partition(p)
                    .with_value(format!("v{i}")),
                &group,
            )
            .await
            .unwrap();
    }
    assert!(
        group.pending() > 0,
        "nothing can be acknowledged before the linger"
    );
    producer.flush().await;
    let ends = group.wait().await.unwrap();
    let want: BTreeMap<TopicPartition, i64> = per_partition
        .into_iter()
        .map(|(p, n)| (TopicPartition::new("out", p), n))
        .collect();
    assert_eq!(ends, want);
    assert_eq!(group.pending(), 0);
    // The tally was taken: a second take starts empty.
    assert!(group.take().unwrap().is_empty());

    // A record refused before it is enqueued is not counted.
    let err = producer
        .enqueue_into(
            ProducerRecord::new("out")
                .with_partition(7)
                .with_value("nowhere"),
            &group,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Server { .. }), "{err}");
    assert_eq!(group.pending(), 0);
    assert!(group.wait().await.unwrap().is_empty());
}

/// A record of the transaction that fails reaches the caller's tally, and
/// the commit refuses as it does for a record sent with `send`.
/// The sender settles a batch's tallies once per batch: two groups and
/// records with futures of their own, interleaved in the same batches,
/// each get their own counts and ends.
#[tokio::test(start_paused = true)]
async fn groups_sharing_a_batch_each_get_their_own_ends() {
    let kit = testkit(1, &["out"]).await;
    let producer = Producer::with_cluster(
        client(&kit, "shared-batches").await,
        ProducerOptions {
            linger: Duration::from_millis(50),
            ..Default::default()
        },
    )
    .unwrap();
    let (a, b) = (DeliveryGroup::new(), DeliveryGroup::new());
    let mut futures = Vec::new();
    for i in 0..90 {
        let record = ProducerRecord::new("out")
            .with_partition(0)
            .with_value(format!("v{i}"));
        match i % 3 {
            0 => producer.enqueue_into(record, &a).await.unwrap(),
            // Group b's last record comes before the end of the run.
            1 if i < 60 => producer.enqueue_into(record, &b).await.unwrap(),
            _ => futures.push((i, producer.enqueue(record).await.unwrap())),
        }
    }
    assert_eq!((a.pending(), b.pending()), (30, 20));
    producer.flush().await;
    let tp = TopicPartition::new("out", 0);
    // Offsets follow the enqueue order: a's last record is 87, b's 58.
    assert_eq!(a.wait().await.unwrap(), BTreeMap::from([(tp.clone(), 88)]));
    assert_eq!(b.wait().await.unwrap(), BTreeMap::from([(tp, 59)]));
    for (i, f) in futures {
        assert_eq!(f.await.unwrap().offset, i64::from(i));
    }
    assert_eq!((a.pending(), b.pending()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_failed_record_in_the_tally_stops_the_commit() {
    use weir_protocol::ApiKey;
    use weir_testkit::faults::{Intercept, InterceptAction, RequestMatcher};
    const INVALID_TXN_STATE: i16 = 48;

    let kit = testkit(1, &["out"]).await;
    let p = producer(&kit, "grouped-txn", TransactionConfig::new("tx-grouped")).await;
    p.begin().unwrap();
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::Produce).client("grouped-txn"),
            InterceptAction::Error(INVALID_TXN_STATE),
        )
        .times(1),
    )
    .await
    .unwrap();
    let group = DeliveryGroup::new();
    p.enqueue_into(ProducerRecord::new("out").with_value("refused"), &group)
        .await
        .unwrap();
    let err = group.wait().await.unwrap_err();
    assert_eq!(
        err.kafka_code().map(|c| c.code),
        Some(INVALID_TXN_STATE),
        "{err}"
    );
    let commit = p.commit().await.unwrap_err();
    assert_eq!(
        commit.transaction_class(),
        Some(TransactionErrorClass::Abortable),
        "{commit}"
    );
    p.abort().await.unwrap();
    assert_eq!(p.state(), TransactionState::Ready);

    p.begin().unwrap();
    for i in 0..5 {
        p.enqueue_into(
            ProducerRecord::new("out").with_value(format!("n{i}")),
            &group,
        )
        .await
        .unwrap();
    }
    p.commit().await.unwrap();
    // The commit waited for every record: the tally is settled.
    assert_eq!(group.pending(), 0);
    let ends = group.take().unwrap();
    let end = ends[&TopicPartition::new("out", 0)];
    assert!(end >= 5, "{ends:?}");
    assert_eq!(
        all_values(&read_committed(&kit, "out", 1).await),
        ["n0", "n1", "n2", "n3", "n4"]
    );
}

/// Many records in one call: in chunks when they outgrow `buffer.memory`,
/// each partition's records in order, plain and inside a transaction.
#[tokio::test(start_paused = true)]
async fn enqueue_all_keeps_each_partitions_order_across_memory_chunks() {
    let kit = testkit(2, &["out", "txn-out"]).await;
    let producer = Producer::with_cluster(
        client(&kit, "all").await,
        ProducerOptions {
            linger: Duration::from_millis(5),
            // Far less than the 400 records of ~1 KiB below: several chunks.
            buffer_memory: 64 * 1024,
            ..Default::default()
        },
    )
    .unwrap();
    let group = DeliveryGroup::new();
    let value = |i: usize| format!("{i:04}{}", "x".repeat(1000));
    let records: Vec<ProducerRecord> = (0..400)
        .map(|i| {
            ProducerRecord::new("out")
                .with_partition((i % 2) as i32)
                .with_value(value(i))
        })
        .collect();
    producer.enqueue_all_into(records, &group).await.unwrap();
    producer.flush().await;
    let ends = group.wait().await.unwrap();
    assert_eq!(ends[&TopicPartition::new("out", 0)], 200);
    assert_eq!(ends[&TopicPartition::new("out", 1)], 200);
    let read = read_committed(&kit, "out", 2).await;
    for (p, values) in &read {
        let order: Vec<usize> = values.iter().map(|v| v[..4].parse().unwrap()).collect();
        let want: Vec<usize> = (0..400).filter(|i| i % 2 == *p as usize).collect();
        assert_eq!(order, want, "partition {p} in send order");
    }

    let p = producer_txn(&kit).await;
    p.begin().unwrap();
    let records = (0..10)
        .map(|i| {
            ProducerRecord::new("txn-out")
                .with_key(format!("k{i}"))
                .with_value(format!("t{i}"))
        })
        .collect();
    p.enqueue_all_into(records, &group).await.unwrap();
    p.commit().await.unwrap();
    assert_eq!(group.pending(), 0);
    let ends = group.take().unwrap();
    assert_eq!(ends.values().sum::<i64>(), 10, "{ends:?}");
    let mut committed = all_values(&read_committed(&kit, "txn-out", 2).await);
    committed.sort();
    let mut want: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
    want.sort();
    assert_eq!(committed, want);
}

async fn producer_txn(kit: &txn_support::Kit) -> weir_client::transaction::TransactionalProducer {
    producer(kit, "all-txn", TransactionConfig::new("tx-all")).await
}
