//! A second producer with the same transactional id fences the first: the
//! first's open transaction is aborted, never visible, and the first gets
//! a fatal error on every later operation.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod txn_support;

use txn_support::{all_values, producer, read_committed, testkit, testkit_at};
use weir_client::producer::ProducerRecord;
use weir_client::transaction::{TransactionConfig, TransactionErrorClass, TransactionState};

#[tokio::test(start_paused = true)]
async fn a_new_instance_fences_the_old_one_and_aborts_its_open_transaction() {
    let kit = testkit(2, &["out"]).await;
    let old = producer(&kit, "old", TransactionConfig::new("tx-fence")).await;
    old.begin().unwrap();
    for i in 0..5 {
        old.send(ProducerRecord::new("out").with_value(format!("old-{i}")))
            .await
            .unwrap();
    }

    let new = producer(&kit, "new", TransactionConfig::new("tx-fence")).await;
    new.begin().unwrap();
    new.send(ProducerRecord::new("out").with_value("new-0"))
        .await
        .unwrap();
    new.commit().await.unwrap();

    // The old instance: its commit is refused as fatal, and so is anything after.
    let err = old.commit().await.unwrap_err();
    assert_eq!(
        err.transaction_class(),
        Some(TransactionErrorClass::Fatal),
        "{err}"
    );
    assert_eq!(old.state(), TransactionState::Fatal);
    let again = old.abort().await.unwrap_err();
    assert_eq!(
        again.transaction_class(),
        Some(TransactionErrorClass::Fatal),
        "{again}"
    );
    assert_eq!(
        old.begin().unwrap_err().transaction_class(),
        Some(TransactionErrorClass::Fatal)
    );

    assert_eq!(all_values(&read_committed(&kit, "out", 2).await), ["new-0"]);
}

#[tokio::test(start_paused = true)]
async fn a_fenced_producer_s_records_fail_as_fatal() {
    let kit = testkit(1, &["out"]).await;
    let old = producer(&kit, "old", TransactionConfig::new("tx-fence-send")).await;
    old.begin().unwrap();
    old.send(ProducerRecord::new("out").with_value("a"))
        .await
        .unwrap();
    let _new = producer(&kit, "new", TransactionConfig::new("tx-fence-send")).await;
    // The partition is already in the old transaction, so this goes
    // straight to Produce, where the broker refuses the old epoch.
    let err = old
        .send(ProducerRecord::new("out").with_value("b"))
        .await
        .unwrap_err();
    assert_eq!(
        err.transaction_class(),
        Some(TransactionErrorClass::Fatal),
        "{err}"
    );
    assert!(old.commit().await.is_err());
    assert!(all_values(&read_committed(&kit, "out", 1).await).is_empty());
}

/// m2 (KIP-360): after an abort with failed records, the instance bumps its
/// own epoch with InitProducerId naming its producer id and epoch. If a new
/// instance replaced it between its EndTxn and that InitProducerId, the old
/// one must get PRODUCER_FENCED (fatal); with producer id -1 it would bump
/// the epoch again and fence its replacement instead.
#[tokio::test(start_paused = true)]
async fn an_epoch_bump_after_an_abort_does_not_fence_a_newer_instance() {
    use std::time::Duration;
    use weir_protocol::ApiKey;
    use weir_testkit::faults::{Intercept, InterceptAction, RequestMatcher};
    const MESSAGE_TOO_LARGE: i16 = 10;

    let kit = testkit_at(1, &["out"], 1).await;
    let old = producer(&kit, "old", TransactionConfig::new("tx-bump")).await;
    old.begin().unwrap();
    // The record fails, so the abort is followed by an epoch bump.
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::Produce).client("old"),
            InterceptAction::Error(MESSAGE_TOO_LARGE),
        )
        .times(1),
    )
    .await
    .unwrap();
    assert!(
        old.send(ProducerRecord::new("out").with_value("lost"))
            .await
            .is_err()
    );
    // That InitProducerId reaches the coordinator only after a new
    // instance took over the transactional id.
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::InitProducerId).client("old"),
            InterceptAction::Delay(Duration::from_secs(2)),
        )
        .times(1),
    )
    .await
    .unwrap();
    let aborting = async { old.abort().await };
    let replacing = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        producer(&kit, "new", TransactionConfig::new("tx-bump")).await
    };
    let (aborted, new) = tokio::join!(aborting, replacing);
    let err = aborted.unwrap_err();
    assert_eq!(
        err.transaction_class(),
        Some(TransactionErrorClass::Fatal),
        "the replaced instance is fenced: {err}"
    );
    assert_eq!(old.state(), TransactionState::Fatal);

    // The new instance was not fenced by it.
    new.begin().unwrap();
    new.send(ProducerRecord::new("out").with_value("new-0"))
        .await
        .unwrap();
    new.commit().await.unwrap();
    assert_eq!(all_values(&read_committed(&kit, "out", 1).await), ["new-0"]);
}
