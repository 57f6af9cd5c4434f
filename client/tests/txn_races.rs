//! Races of a transactional producer used from several tasks at once
//! (review findings M2, m19) and the way out of an abortable commit (m1).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod txn_support;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::sleep;

use txn_support::{all_values, producer, read_committed, testkit, testkit_at};
use weir_client::producer::ProducerRecord;
use weir_client::transaction::{TransactionConfig, TransactionErrorClass, TransactionState};
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::RequestKind;
use weir_testkit::{Intercept, InterceptAction, RequestMatcher};

/// The number of partitions in each AddPartitionsToTxn the testkit saw.
async fn add_partitions_sizes(kit: &txn_support::Kit) -> Vec<usize> {
    kit.requests()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.body {
            RequestKind::AddPartitionsToTxn(a) => Some(
                a.v3_and_below_topics
                    .iter()
                    .map(|t| t.partitions.len())
                    .sum(),
            ),
            _ => None,
        })
        .collect()
}

/// M2: two sends to the same new partition wait together behind a third
/// caller's AddPartitionsToTxn. The request of the first of them (which
/// carries the partition for both) is lost, so it fails once its retries
/// run out. The second caller must still get its partition into the
/// transaction before producing to it, and no empty AddPartitionsToTxn may
/// ever be sent.
#[tokio::test(start_paused = true)]
async fn a_send_whose_partition_was_in_a_failed_add_partitions_adds_it_again() {
    let kit = testkit_at(2, &["out"], 1).await;
    let p = Arc::new(producer(&kit, "app", TransactionConfig::new("tx-race")).await);
    p.begin().unwrap();
    let intercept =
        |action| Intercept::new(RequestMatcher::api(ApiKey::AddPartitionsToTxn), action).times(1);
    let send = |partition: i32, v: &'static str| {
        let p = Arc::clone(&p);
        tokio::spawn(async move {
            p.send(
                ProducerRecord::new("out")
                    .with_partition(partition)
                    .with_value(v),
            )
            .await
        })
    };
    // A third caller holds the turn for a second.
    kit.intercept(intercept(InterceptAction::Delay(Duration::from_secs(1))))
        .await
        .unwrap();
    let holder = send(1, "holder");
    sleep(Duration::from_millis(10)).await;
    let sends = [send(0, "one"), send(0, "two")];
    sleep(Duration::from_millis(10)).await;
    // The next request is lost: its caller waits out the request timeout,
    // past default.api.timeout, so it gives up after that one attempt.
    kit.intercept(intercept(InterceptAction::Drop))
        .await
        .unwrap();
    holder.await.unwrap().unwrap();
    let mut results = Vec::new();
    for s in sends {
        results.push(s.await.unwrap());
    }
    let failed: Vec<_> = results.iter().filter(|r| r.is_err()).collect();
    assert_eq!(failed.len(), 1, "{results:?}");
    let err = failed[0].as_ref().unwrap_err();
    assert_eq!(
        err.transaction_class(),
        Some(TransactionErrorClass::Retriable),
        "{err}"
    );
    assert_ne!(p.state(), TransactionState::Fatal);
    let sizes = add_partitions_sizes(&kit).await;
    assert!(
        sizes.iter().all(|n| *n > 0),
        "an empty AddPartitionsToTxn: {sizes:?}"
    );
    p.commit().await.unwrap();
    let mut visible = all_values(&read_committed(&kit, "out", 2).await);
    visible.sort();
    assert_eq!(visible.len(), 2, "{visible:?}");
}

/// m19: a send admitted before `commit` began is part of the transaction,
/// even when its AddPartitionsToTxn is still under way when `commit` is
/// called: the commit waits for it. A send that starts after `commit`
/// began is refused.
#[tokio::test(start_paused = true)]
async fn commit_waits_for_an_admitted_send_and_refuses_a_later_one() {
    let kit = testkit(2, &["out"]).await;
    let p = Arc::new(producer(&kit, "app", TransactionConfig::new("tx-m19")).await);
    p.begin().unwrap();
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::AddPartitionsToTxn),
            InterceptAction::Delay(Duration::from_secs(1)),
        )
        .times(1),
    )
    .await
    .unwrap();
    let early = {
        let p = Arc::clone(&p);
        tokio::spawn(async move {
            p.send(
                ProducerRecord::new("out")
                    .with_partition(0)
                    .with_value("early"),
            )
            .await
        })
    };
    sleep(Duration::from_millis(10)).await;
    let committing = {
        let p = Arc::clone(&p);
        tokio::spawn(async move { p.commit().await })
    };
    sleep(Duration::from_millis(10)).await;
    let late = p
        .send(
            ProducerRecord::new("out")
                .with_partition(1)
                .with_value("late"),
        )
        .await;
    assert!(
        matches!(late, Err(weir_client::ClientError::TransactionState { .. })),
        "{late:?}"
    );
    early.await.unwrap().unwrap();
    committing.await.unwrap().unwrap();
    assert_eq!(p.state(), TransactionState::Ready);
    let visible = all_values(&read_committed(&kit, "out", 2).await);
    assert_eq!(visible, vec!["early".to_owned()]);
}

/// m1: an abortable answer to EndTxn(commit) says "abort the transaction";
/// `abort` must then be allowed (it was refused in Committing, and commit
/// failed the same way again: the producer was stuck).
#[tokio::test(start_paused = true)]
async fn an_abortable_commit_failure_can_be_aborted() {
    let kit = testkit(1, &["out"]).await;
    let p = producer(&kit, "app", TransactionConfig::new("tx-m1")).await;
    p.begin().unwrap();
    p.send(ProducerRecord::new("out").with_partition(0).with_value("x"))
        .await
        .unwrap();
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::EndTxn),
            InterceptAction::Error(59),
        )
        .times(1),
    )
    .await
    .unwrap();
    let err = p.commit().await.unwrap_err();
    assert_eq!(
        err.transaction_class(),
        Some(TransactionErrorClass::Abortable),
        "{err}"
    );
    assert_eq!(p.state(), TransactionState::Abortable);
    p.abort().await.unwrap();
    assert_eq!(p.state(), TransactionState::Ready);
    assert!(all_values(&read_committed(&kit, "out", 1).await).is_empty());
    // The producer goes on: the next transaction commits.
    p.begin().unwrap();
    p.send(ProducerRecord::new("out").with_partition(0).with_value("y"))
        .await
        .unwrap();
    p.commit().await.unwrap();
    assert_eq!(
        all_values(&read_committed(&kit, "out", 1).await),
        vec!["y".to_owned()]
    );
}
