//! The coordinator aborts a transaction left open past
//! `transaction.timeout.ms`; its owner then learns it was fenced.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod txn_support;

use std::time::Duration;

use txn_support::{all_values, producer, read_committed, testkit};
use weir_client::producer::ProducerRecord;
use weir_client::transaction::TransactionConfig;

#[tokio::test(start_paused = true)]
async fn an_abandoned_transaction_is_aborted_by_its_timeout() {
    let kit = testkit(1, &["out"]).await;
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
