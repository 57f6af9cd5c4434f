//! The coordinator aborts a transaction left open past
//! `transaction.timeout.ms`; its owner then learns it was fenced.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod txn_support;

use std::time::Duration;

use txn_support::{all_values, producer, read_committed, testkit, testkit_with};
use weir_client::producer::ProducerRecord;
use weir_client::transaction::TransactionConfig;

#[tokio::test(start_paused = true)]
async fn an_abandoned_transaction_is_aborted_by_its_timeout() {
    // Checks the abort at the deadline itself: no 10 s abort scan.
    let kit = testkit_with(
        weir_testkit::Cluster::builder().instant_timing(),
        1,
        &["out"],
    )
    .await;
    let txn = TransactionConfig::new("tx-timeout").with_timeout(Duration::from_millis(200));
    let p = producer(&kit, "abandoner", txn).await;
    p.begin().unwrap();
    let began = tokio::time::Instant::now();
    for i in 0..3 {
        p.send(ProducerRecord::new("out").with_value(format!("v{i}")))
            .await
            .unwrap();
    }
    let (_, lso, hw) = kit.offsets("out", 0).await.unwrap();
    assert_eq!((lso, hw), (0, 3), "the open transaction holds the LSO back");

    // On the paused clock the timeout is exact: still open shortly before
    // 200 ms (the linger and requests took a few virtual ms at most), an
    // abort marker (offset 3) releases the LSO shortly after.
    tokio::time::sleep_until(began + Duration::from_millis(180)).await;
    assert_eq!(
        kit.offsets("out", 0).await.unwrap().1,
        0,
        "aborted too early"
    );
    tokio::time::sleep_until(began + Duration::from_millis(220)).await;
    let (_, lso, hw) = kit.offsets("out", 0).await.unwrap();
    assert_eq!((lso, hw), (4, 4), "no abort marker after the timeout");
    assert!(all_values(&read_committed(&kit, "out", 1).await).is_empty());
    let err = p.commit().await.unwrap_err();
    assert!(err.transaction_class().is_some(), "{err}");
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_coordinator_fails_init_after_the_api_timeout_on_tokio_s_clock() {
    let kit = testkit(1, &["out"]).await;
    kit.partition_client(
        weir_testkit::ClientSelector::ClientId("cut-off".to_owned()),
        weir_testkit::PartitionTarget::TxnCoordinator("tx-cut".to_owned()),
    )
    .await
    .unwrap();
    let p = weir_client::transaction::TransactionalProducer::with_cluster(
        weir_client::Cluster::connect(
            weir_integration::testkit_dial::client_config(&kit, "cut-off")
                .request_timeout(Duration::from_millis(500))
                .default_api_timeout(Duration::from_secs(5))
                .build()
                .unwrap(),
        )
        .await
        .unwrap(),
        Default::default(),
        TransactionConfig::new("tx-cut"),
    )
    .unwrap();
    let (virtual_start, real_start) = (tokio::time::Instant::now(), std::time::Instant::now());
    let err = p.init_transactions().await.unwrap_err();
    assert_eq!(
        err.transaction_class(),
        Some(weir_client::transaction::TransactionErrorClass::Retriable),
        "{err}"
    );
    assert!(err.to_string().contains("gave up after"), "{err}");
    // default.api.timeout.ms is 5 s: that much virtual time (short of one
    // backoff, and 500 ms request timeouts), and little real time.
    let waited = virtual_start.elapsed();
    assert!(
        waited >= Duration::from_millis(4400) && waited <= Duration::from_millis(5500),
        "{waited:?}"
    );
    assert!(real_start.elapsed() < Duration::from_secs(3));
}

/// With Kafka's abort scan (every 10 s, the testkit's default) a timed-out
/// transaction is aborted at the first scan after its deadline, not at the
/// deadline: an abandoned transaction holds its partitions' LSO up to the
/// timeout plus a period.
#[tokio::test(start_paused = true)]
async fn with_kafkas_abort_scan_a_timed_out_transaction_waits_for_the_next_scan() {
    let kit = testkit(1, &["out"]).await;
    let txn = TransactionConfig::new("tx-scan").with_timeout(Duration::from_millis(200));
    let p = producer(&kit, "scanned", txn).await;
    p.begin().unwrap();
    let began = tokio::time::Instant::now();
    p.send(ProducerRecord::new("out").with_value("v"))
        .await
        .unwrap();
    tokio::time::sleep_until(began + Duration::from_millis(9_900)).await;
    assert_eq!(
        kit.offsets("out", 0).await.unwrap().1,
        0,
        "aborted before the scan"
    );
    tokio::time::sleep_until(began + Duration::from_millis(10_100)).await;
    let (_, lso, hw) = kit.offsets("out", 0).await.unwrap();
    assert_eq!((lso, hw), (2, 2), "no abort marker after the scan");
}
