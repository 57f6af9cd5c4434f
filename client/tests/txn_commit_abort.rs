//! Commit makes records and offsets visible together; abort makes neither
//! visible, and the offsets stay where they were. Misuse is refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod txn_support;

use std::collections::BTreeMap;
use std::time::Duration;

use txn_support::{
    Kit, all_values, client, producer, read_committed, testkit, testkit_at, testkit_with,
};
use weir_client::ClientError;
use weir_client::producer::{ProducerRecord, TopicPartition};
use weir_client::transaction::{
    GroupMetadata, TransactionConfig, TransactionState, fetch_stable_offsets,
};

fn offsets(topic: &str, offset: i64) -> BTreeMap<TopicPartition, i64> {
    BTreeMap::from([(TopicPartition::new(topic, 0), offset)])
}

#[tokio::test(start_paused = true)]
async fn commit_shows_records_and_offsets_together_and_abort_shows_neither() {
    let kit = testkit(3, &["in", "out"]).await;
    let p = producer(&kit, "app", TransactionConfig::new("tx-commit")).await;
    let group = GroupMetadata::unchecked("g");
    let reader = client(&kit, "offsets-reader").await;
    let input = [TopicPartition::new("in", 0)];

    // Transaction 1: committed.
    p.begin().unwrap();
    for i in 0..10 {
        p.send(
            ProducerRecord::new("out")
                .with_key(format!("k{i}"))
                .with_value(format!("c{i}")),
        )
        .await
        .unwrap();
    }
    p.send_offsets_to_transaction(&offsets("in", 10), &group)
        .await
        .unwrap();
    // Before the commit, read_committed sees nothing and no stable offset.
    assert!(all_values(&read_committed(&kit, "out", 3).await).is_empty());
    p.commit().await.unwrap();
    assert_eq!(p.state(), TransactionState::Ready);
    let committed = all_values(&read_committed(&kit, "out", 3).await);
    let mut expected: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    expected.sort();
    assert_eq!(committed, expected);
    assert_eq!(
        fetch_stable_offsets(&reader, "g", &input).await.unwrap(),
        offsets("in", 10)
    );

    // Transaction 2: aborted, records and offsets.
    p.begin().unwrap();
    for i in 0..10 {
        p.send(
            ProducerRecord::new("out")
                .with_key(format!("k{i}"))
                .with_value(format!("a{i}")),
        )
        .await
        .unwrap();
    }
    p.send_offsets_to_transaction(&offsets("in", 20), &group)
        .await
        .unwrap();
    p.abort().await.unwrap();
    assert_eq!(all_values(&read_committed(&kit, "out", 3).await), expected);
    assert_eq!(
        fetch_stable_offsets(&reader, "g", &input).await.unwrap(),
        offsets("in", 10)
    );

    // Transaction 3: the producer goes on after an abort.
    p.begin().unwrap();
    p.send(
        ProducerRecord::new("out")
            .with_key("k0")
            .with_value("after"),
    )
    .await
    .unwrap();
    p.send_offsets_to_transaction(&offsets("in", 11), &group)
        .await
        .unwrap();
    p.commit().await.unwrap();
    let mut expected_after = expected.clone();
    expected_after.push("after".to_owned());
    expected_after.sort();
    assert_eq!(
        all_values(&read_committed(&kit, "out", 3).await),
        expected_after
    );
    assert_eq!(
        fetch_stable_offsets(&reader, "g", &input).await.unwrap(),
        offsets("in", 11)
    );
}

#[tokio::test(start_paused = true)]
async fn partitions_join_the_transaction_in_batches_before_their_first_record() {
    let kit = testkit_at(4, &["out"], 1).await;
    let p = producer(&kit, "batcher", TransactionConfig::new("tx-batch")).await;
    p.begin().unwrap();
    // Four records to four partitions, enqueued together: the partitions
    // that wait while the first AddPartitionsToTxn is out share the next.
    let futures = futures_join(&p, 4).await;
    for f in futures {
        f.await.unwrap();
    }
    p.commit().await.unwrap();
    let adds = kit
        .requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.api_key == weir_protocol::ApiKey::AddPartitionsToTxn)
        .count();
    assert!(
        (1..4).contains(&adds),
        "{adds} AddPartitionsToTxn for 4 partitions"
    );
    assert_eq!(
        read_committed(&kit, "out", 4)
            .await
            .values()
            .map(Vec::len)
            .sum::<usize>(),
        4
    );
}

async fn futures_join(
    p: &weir_client::transaction::TransactionalProducer,
    n: i32,
) -> Vec<
    impl std::future::Future<Output = weir_client::Result<weir_client::producer::RecordMetadata>>,
> {
    let sends = (0..n).map(|i| {
        p.enqueue(
            ProducerRecord::new("out")
                .with_partition(i)
                .with_value(format!("v{i}")),
        )
    });
    let mut out = Vec::new();
    for r in tokio_join_all(sends).await {
        out.push(r.unwrap());
    }
    out
}

async fn tokio_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut out = Vec::with_capacity(set.len());
    // Poll all together so that they wait on one AddPartitionsToTxn.
    let mut pending: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (i, f) in set.iter_mut().enumerate() {
            if pending[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => pending[i] = Some(v),
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    for v in pending {
        out.extend(v);
    }
    out
}

#[tokio::test(start_paused = true)]
async fn misuse_is_refused_with_a_typed_error_and_nothing_is_sent() {
    let kit = testkit(1, &["out"]).await;
    let p = producer(&kit, "misuse", TransactionConfig::new("tx-misuse")).await;
    let refused = |e: ClientError, op: &str| match e {
        ClientError::TransactionState { operation, .. } => assert_eq!(operation, op),
        other => panic!("{op}: expected a state error, got {other}"),
    };
    refused(
        p.send(ProducerRecord::new("out").with_value("x"))
            .await
            .unwrap_err(),
        "send",
    );
    refused(p.commit().await.unwrap_err(), "commit");
    refused(p.abort().await.unwrap_err(), "abort");
    refused(
        p.init_transactions().await.unwrap_err(),
        "init_transactions",
    );
    p.begin().unwrap();
    refused(p.begin().unwrap_err(), "begin");
    let (_, _, hw) = kit.offsets("out", 0).await.unwrap();
    assert_eq!(hw, 0, "a refused send wrote nothing");
    // An empty transaction commits without EndTxn.
    p.commit().await.unwrap();
    assert_eq!(p.state(), TransactionState::Ready);
}

/// m4: INVALID_TXN_STATE (48) on Produce is the partition leader's KIP-890
/// verification failure. Java's producer treats it as abortable: the
/// transaction is aborted and the producer goes on. Weir must not kill it.
#[tokio::test(start_paused = true)]
async fn invalid_txn_state_from_produce_is_abortable_not_fatal() {
    use weir_client::transaction::TransactionErrorClass;
    use weir_protocol::ApiKey;
    use weir_testkit::faults::{Intercept, InterceptAction, RequestMatcher};
    const INVALID_TXN_STATE: i16 = 48;

    let kit = testkit(1, &["out"]).await;
    let p = producer(&kit, "verify", TransactionConfig::new("tx-verify")).await;
    p.begin().unwrap();
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::Produce).client("verify"),
            InterceptAction::Error(INVALID_TXN_STATE),
        )
        .times(1),
    )
    .await
    .unwrap();
    let err = p
        .send(ProducerRecord::new("out").with_value("refused"))
        .await
        .unwrap_err();
    assert_eq!(
        err.transaction_class(),
        Some(TransactionErrorClass::Abortable),
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
    p.send(ProducerRecord::new("out").with_value("next"))
        .await
        .unwrap();
    p.commit().await.unwrap();
    assert_eq!(all_values(&read_committed(&kit, "out", 1).await), ["next"]);
}

/// m18: AddPartitionsToTxn whose answer is lost until the retries run out
/// leaves its outcome unknown: the coordinator may hold an open
/// transaction. The abort must then end it (EndTxn, then an epoch bump, as
/// Java's `epochBumpRequired`) instead of skipping EndTxn, or the
/// coordinator's timeout aborts it later with a bumped epoch and the
/// producer's next transaction is fenced.
#[tokio::test(start_paused = true)]
async fn an_abort_after_an_add_partitions_of_unknown_outcome_ends_the_open_transaction() {
    use std::time::Duration;
    use weir_client::transaction::TransactionErrorClass;
    use weir_protocol::ApiKey;
    use weir_testkit::coordinator::txn::state::TxnState;
    use weir_testkit::faults::{Intercept, InterceptAction, RequestMatcher};

    let kit = testkit_at(1, &["out"], 1).await;
    let p = producer(
        &kit,
        "unknown",
        TransactionConfig::new("tx-unknown").with_timeout(Duration::from_secs(60)),
    )
    .await;
    p.begin().unwrap();
    // The coordinator adds the partition, but the answer is lost.
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::AddPartitionsToTxn).client("unknown"),
            InterceptAction::DropResponse,
        )
        .times(1),
    )
    .await
    .unwrap();
    let err = p
        .send(ProducerRecord::new("out").with_value("unknown"))
        .await
        .unwrap_err();
    assert_eq!(
        err.transaction_class(),
        Some(TransactionErrorClass::Retriable),
        "{err}"
    );
    let state = |kit: &txn_support::Kit| {
        let kit = std::sync::Arc::clone(kit);
        async move {
            kit.with_state(|s| s.txns.transaction("tx-unknown").map(|t| t.state))
                .await
                .unwrap()
        }
    };
    assert_eq!(state(&kit).await, Some(TxnState::Ongoing));

    p.abort().await.unwrap();
    assert_ne!(
        state(&kit).await,
        Some(TxnState::Ongoing),
        "the abort left the coordinator's transaction open"
    );

    // Past the transaction timeout, the producer still works.
    tokio::time::sleep(Duration::from_secs(61)).await;
    p.begin().unwrap();
    p.send(ProducerRecord::new("out").with_value("next"))
        .await
        .unwrap();
    p.commit().await.unwrap();
    assert_eq!(all_values(&read_committed(&kit, "out", 1).await), ["next"]);
}

/// m18, the other outcome: the lost AddPartitionsToTxn never reached the
/// coordinator, so nothing is open. The abort's EndTxn gets
/// INVALID_TXN_STATE, which then only means "nothing to end".
#[tokio::test(start_paused = true)]
async fn an_abort_after_a_lost_add_partitions_that_never_arrived_succeeds() {
    use weir_protocol::ApiKey;
    use weir_testkit::faults::{Intercept, InterceptAction, RequestMatcher};

    let kit = testkit_at(1, &["out"], 1).await;
    let p = producer(&kit, "lost", TransactionConfig::new("tx-lost")).await;
    p.begin().unwrap();
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::AddPartitionsToTxn).client("lost"),
            InterceptAction::Drop,
        )
        .times(1),
    )
    .await
    .unwrap();
    assert!(
        p.send(ProducerRecord::new("out").with_value("lost"))
            .await
            .is_err()
    );
    p.abort().await.unwrap();
    assert_eq!(p.state(), TransactionState::Ready);
    p.begin().unwrap();
    p.send(ProducerRecord::new("out").with_value("next"))
        .await
        .unwrap();
    p.commit().await.unwrap();
    assert_eq!(all_values(&read_committed(&kit, "out", 1).await), ["next"]);
}

/// Transaction version 2 (KIP-890), as a Kafka 4.x cluster finalizes it:
/// partitions and group offsets join the transaction with no
/// AddPartitionsToTxn or AddOffsetsToTxn (Produce v12, TxnOffsetCommit
/// v5), every EndTxn v5 bumps the epoch, and the producer writes the next
/// transaction as the epoch it was given. Against a coordinator of version
/// 2, a producer that kept its old epoch is refused from its second
/// transaction on.
#[tokio::test(start_paused = true)]
async fn transaction_version_2_joins_implicitly_and_takes_the_epoch_of_every_end() {
    use weir_protocol::ApiKey;

    let kit = testkit(2, &["in", "out"]).await;
    let p = producer(&kit, "tv2", TransactionConfig::new("tx-tv2")).await;
    let epoch = |kit: &Kit| {
        let kit = kit.clone();
        async move {
            kit.with_state(|s| s.txns.transaction("tx-tv2").map(|t| t.producer_epoch))
                .await
                .unwrap()
                .unwrap()
        }
    };
    let first = epoch(&kit).await;
    for txn in 0..5i64 {
        p.begin().unwrap();
        for partition in 0..2 {
            p.send(
                ProducerRecord::new("out")
                    .with_partition(partition)
                    .with_value(format!("t{txn}")),
            )
            .await
            .unwrap();
        }
        p.send_offsets_to_transaction(
            &BTreeMap::from([(TopicPartition::new("in", 0), txn)]),
            &GroupMetadata::unchecked("tv2-group"),
        )
        .await
        .unwrap();
        if txn == 3 {
            p.abort().await.unwrap();
        } else {
            p.commit().await.unwrap();
        }
    }
    assert_eq!(epoch(&kit).await, first + 5, "one bump per EndTxn");
    let requests = kit.requests().await.unwrap();
    let count = |api| requests.iter().filter(|r| r.api_key == api).count();
    assert_eq!(count(ApiKey::AddPartitionsToTxn), 0);
    assert_eq!(count(ApiKey::AddOffsetsToTxn), 0);
    assert_eq!(count(ApiKey::EndTxn), 5);
    assert!(
        requests
            .iter()
            .filter(|r| r.api_key == ApiKey::EndTxn)
            .all(|r| r.version == 5),
        "EndTxn at v5"
    );
    let seen = read_committed(&kit, "out", 2).await;
    assert_eq!(seen.values().map(Vec::len).sum::<usize>(), 8, "{seen:?}");
}

/// Markers written after EndTxn is answered, as Kafka does: right after
/// `commit` returns the transaction is still completing (its records not
/// yet visible to read_committed), the next transaction's first request
/// meets `CONCURRENT_TRANSACTIONS` and is retried, and every transaction
/// commits, under both transaction versions.
#[tokio::test(start_paused = true)]
async fn markers_written_after_the_answer_delay_visibility_not_commits() {
    use weir_testkit::coordinator::txn::state::TxnState;
    for version in [1, 2] {
        let kit = testkit_with(
            weir_testkit::Cluster::builder()
                .transaction_version(version)
                .txn_marker_delay(Duration::from_millis(50)),
            1,
            &["out"],
        )
        .await;
        let p = producer(&kit, "later", TransactionConfig::new("tx-later")).await;
        for txn in 0..10 {
            p.begin().unwrap();
            p.send(ProducerRecord::new("out").with_value(format!("t{txn}")))
                .await
                .unwrap();
            p.commit().await.unwrap();
            if txn == 0 {
                let state = kit
                    .with_state(|s| s.txns.transaction("tx-later").map(|t| t.state))
                    .await
                    .unwrap();
                assert_eq!(state, Some(TxnState::PrepareCommit), "version {version}");
                let (_, lso, _) = kit.offsets("out", 0).await.unwrap();
                assert_eq!(lso, 0, "version {version}: visible before its marker");
            }
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
        let seen = all_values(&read_committed(&kit, "out", 1).await);
        assert_eq!(seen.len(), 10, "version {version}: {seen:?}");
    }
}
