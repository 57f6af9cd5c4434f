//! A consume-transform-produce instance killed at every step of a
//! transaction (after `begin`, after a send, after AddOffsetsToTxn, during
//! EndTxn) and replaced by a new instance with the same transactional id:
//! every input ends up in the committed output exactly once, and the
//! committed offset is the end of the input.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod txn_support;

use std::collections::BTreeMap;
use std::time::Duration;

use txn_support::{client, producer, read_committed, read_committed_options, testkit};
use weir_client::consumer::{Consumer, SeekTo};
use weir_client::producer::{Producer, ProducerRecord, TopicPartition};
use weir_client::transaction::{GroupMetadata, TransactionConfig, fetch_stable_offsets};
use weir_protocol::ApiKey;
use weir_testkit::{Intercept, InterceptAction, RequestMatcher};

const INPUTS: i64 = 12;
const PER_TXN: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    AfterBegin,
    AfterSend,
    AfterAddOffsets,
    DuringEndTxn,
}

/// Runs the app until the input is consumed, or until `kill` in its
/// second transaction (then it just stops, like a killed process).
async fn run(kit: &txn_support::Kit, client_id: &str, kill: Option<Kill>) {
    let p = producer(kit, client_id, TransactionConfig::new("tx-app")).await;
    let cluster = client(kit, &format!("{client_id}-consumer")).await;
    let input = TopicPartition::new("in", 0);
    let start = fetch_stable_offsets(&cluster, "app", std::slice::from_ref(&input))
        .await
        .unwrap()
        .get(&input)
        .copied()
        .unwrap_or(0);
    let mut consumer = Consumer::with_cluster(cluster, read_committed_options());
    consumer.assign([input.clone()]);
    consumer.seek(&input, SeekTo::Offset(start)).unwrap();
    let group = GroupMetadata::unchecked("app");
    let mut next = start;
    let mut txn = 0;
    while next < INPUTS {
        let mut records = Vec::new();
        while records.len() < PER_TXN && next + (records.len() as i64) < INPUTS {
            records.extend(consumer.poll_for(Duration::from_millis(50)).await.unwrap());
        }
        records.truncate(PER_TXN);
        txn += 1;
        let killing = |at: Kill| txn == 2 && kill == Some(at);
        p.begin().unwrap();
        if killing(Kill::AfterBegin) {
            return;
        }
        for r in &records {
            let v = String::from_utf8_lossy(r.value.as_deref().unwrap()).into_owned();
            p.send(ProducerRecord::new("out").with_value(format!("out-{v}")))
                .await
                .unwrap();
            if killing(Kill::AfterSend) {
                return;
            }
        }
        next = records.last().unwrap().offset + 1;
        let offsets = BTreeMap::from([(input.clone(), next)]);
        p.send_offsets_to_transaction(&offsets, &group)
            .await
            .unwrap();
        if killing(Kill::AfterAddOffsets) {
            return;
        }
        if killing(Kill::DuringEndTxn) {
            // The coordinator ends the transaction but the answer is lost,
            // and the instance dies while waiting for it.
            kit.intercept(
                Intercept::new(
                    RequestMatcher::api(ApiKey::EndTxn).client(client_id),
                    InterceptAction::DropResponse,
                )
                .times(1),
            )
            .await
            .unwrap();
            // On the paused clock this timeout fires only once every task
            // is idle: EndTxn has reached the coordinator and the client is
            // waiting for the answer it will never get. Then it "dies".
            let commit = tokio::time::timeout(Duration::from_millis(100), p.commit()).await;
            assert!(commit.is_err(), "the commit cannot finish: {commit:?}");
            let sent =
                kit.requests().await.unwrap().iter().any(|r| {
                    r.api_key == ApiKey::EndTxn && r.client_id.as_deref() == Some(client_id)
                });
            assert!(sent, "EndTxn reached the coordinator before the kill");
            return;
        }
        p.commit().await.unwrap();
        // Records re-read after a seek would be consumed twice: skip them.
        consumer.seek(&input, SeekTo::Offset(next)).unwrap();
    }
}

async fn exactly_once_after(kill: Kill) {
    let kit = testkit(1, &["in", "out"]).await;
    let plain = Producer::with_cluster(client(&kit, "loader").await, Default::default()).unwrap();
    for i in 0..INPUTS {
        plain
            .send(
                ProducerRecord::new("in")
                    .with_partition(0)
                    .with_value(format!("{i}")),
            )
            .await
            .unwrap();
    }
    run(&kit, "first", Some(kill)).await;
    run(&kit, "second", None).await;

    let mut out = read_committed(&kit, "out", 1).await.remove(&0).unwrap();
    out.sort_by_key(|v| v.trim_start_matches("out-").parse::<i64>().unwrap());
    let expected: Vec<String> = (0..INPUTS).map(|i| format!("out-{i}")).collect();
    assert_eq!(out, expected, "killed {kill:?}");
    let input = TopicPartition::new("in", 0);
    let reader = client(&kit, "checker").await;
    let committed = fetch_stable_offsets(&reader, "app", std::slice::from_ref(&input))
        .await
        .unwrap();
    assert_eq!(committed.get(&input), Some(&INPUTS), "killed {kill:?}");
}

#[tokio::test(start_paused = true)]
async fn killed_after_begin() {
    exactly_once_after(Kill::AfterBegin).await;
}

#[tokio::test(start_paused = true)]
async fn killed_after_send() {
    exactly_once_after(Kill::AfterSend).await;
}

#[tokio::test(start_paused = true)]
async fn killed_after_add_offsets() {
    exactly_once_after(Kill::AfterAddOffsets).await;
}

#[tokio::test(start_paused = true)]
async fn killed_during_end_txn() {
    exactly_once_after(Kill::DuringEndTxn).await;
}
