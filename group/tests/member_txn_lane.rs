//! M9: a transactional producer and a group member on one shared `Cluster`.
//! A cooperative member's JoinGroup is parked by the coordinator for the
//! whole rebalance, and a broker answers one request per connection at a
//! time; the producer's transaction-coordinator requests and its
//! TxnOffsetCommit must not wait behind it (KIP-429: a cooperative member
//! goes on processing, and committing, its retained partitions while the
//! group rebalances). And m17: a TxnOffsetCommit refused as a stale
//! membership, sent through the member, ends the member's lease.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::collections::BTreeMap;
use std::time::Duration;

use member_support::*;
use tokio::time::{Instant, sleep};
use weir_client::Cluster;
use weir_client::producer::{ProducerRecord, TopicPartition as ClientPartition};
use weir_client::transaction::{GroupMetadata, TransactionConfig, TransactionalProducer};
use weir_group::assignor::Assignor;
use weir_group::member::GroupMember;
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::RequestKind;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const HOLD: Duration = Duration::from_secs(15);

#[tokio::test(start_paused = true)]
async fn a_transaction_commits_while_the_members_own_join_group_is_parked() {
    let tk = testkit(2).await;
    tk.create_topic("out", 1, std::iter::empty::<(String, String)>())
        .await
        .unwrap();
    let journal = Journal::default();
    let cooperative = || {
        config("g")
            .with_assignors([Assignor::CooperativeSticky])
            .with_max_poll_interval(Duration::from_secs(60))
    };
    // One cluster handle for a's member and a's producer, as a streams
    // thread would have.
    let shared = Cluster::connect(
        weir_integration::testkit_dial::client_config(&tk, "a")
            .request_timeout(REQUEST_TIMEOUT)
            .default_api_timeout(Duration::from_secs(60))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let producer = TransactionalProducer::with_cluster(
        shared.clone(),
        Default::default(),
        TransactionConfig::new("tx-a"),
    )
    .unwrap();
    producer.init_transactions().await.unwrap();
    let a = App::run(
        GroupMember::start(shared.clone(), cooperative()).unwrap(),
        "a",
        &journal,
    );
    let b = App::start(&tk.bootstrap(), "b", cooperative(), &journal).await;
    journal.wait_balanced(&["a", "b"], 2).await;

    // c joins; b's rejoin is held back, so a's JoinGroup is parked until
    // b's arrives.
    delay_next(&tk, "b", ApiKey::JoinGroup, HOLD).await;
    let joins_before = requests_of(&tk, ApiKey::JoinGroup, "a").await.len();
    let c = App::start(&tk.bootstrap(), "c", cooperative(), &journal).await;
    let waited = Instant::now();
    while requests_of(&tk, ApiKey::JoinGroup, "a").await.len() == joins_before {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "a never rejoined"
        );
        sleep(Duration::from_millis(100)).await;
    }
    let parked_at = Instant::now();

    // a's membership, as its last heartbeat carried it: still the current
    // generation while the group prepares the rebalance.
    let (generation, member_id) = requests_of(&tk, ApiKey::Heartbeat, "a")
        .await
        .into_iter()
        .rev()
        .find_map(|(_, body)| match body {
            RequestKind::Heartbeat(h) => Some((h.generation_id, h.member_id.to_string())),
            _ => None,
        })
        .unwrap();
    let owned = journal.owners().get("a").cloned().unwrap_or_default();
    let tp = owned.iter().next().expect("a kept a partition").clone();

    let started = Instant::now();
    producer.begin().unwrap();
    producer
        .send(ProducerRecord::new("out").with_value("v"))
        .await
        .unwrap();
    let offsets = BTreeMap::from([(ClientPartition::new(tp.topic.clone(), tp.partition), 1)]);
    producer
        .send_offsets_to_transaction(
            &offsets,
            &GroupMetadata::new("g", generation, member_id, None),
        )
        .await
        .unwrap();
    producer.commit().await.unwrap();
    let took = started.elapsed();
    assert!(
        took < REQUEST_TIMEOUT,
        "the transaction took {took:?} while a's JoinGroup was parked"
    );
    // It really was parked all along: the rebalance had not completed (c
    // has no assignment yet) and b's held JoinGroup was not handled yet.
    assert!(parked_at.elapsed() < HOLD);
    assert!(
        !journal
            .entries()
            .iter()
            .any(|e| matches!(e, Entry::Assigned { who, .. } if who == "c")),
        "the rebalance completed before the commit"
    );

    // The group still completes its rebalance once b rejoins.
    journal.wait_balanced(&["a", "b", "c"], 2).await;
    producer.close().await;
    drop(a.stop().await);
    drop(b.stop().await);
    drop(c.stop().await);
}

/// m17: a TxnOffsetCommit refused with UNKNOWN_MEMBER_ID is the strongest
/// sign that the member is a zombie; sent through the member, the refusal
/// ends its lease at once and its partitions are reported lost, as a
/// refused plain commit does.
#[tokio::test(start_paused = true)]
async fn a_txn_offset_commit_refused_as_unknown_member_ends_the_lease() {
    let tk = testkit(2).await;
    let shared = Cluster::connect(
        weir_integration::testkit_dial::client_config(&tk, "a")
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let producer = TransactionalProducer::with_cluster(
        shared.clone(),
        Default::default(),
        TransactionConfig::new("tx-a"),
    )
    .unwrap();
    producer.init_transactions().await.unwrap();
    let mut a = GroupMember::start(shared.clone(), config("g")).unwrap();
    match a.next_event().await.unwrap() {
        weir_group::member::AssignmentEvent::Assigned { partitions: p, .. } => {
            assert_eq!(p.len(), 2)
        }
        other => panic!("a's first event: {other:?}"),
    }
    producer.begin().unwrap();
    fail_next(&tk, "a", ApiKey::TxnOffsetCommit, 25).await; // UNKNOWN_MEMBER_ID
    let offsets = BTreeMap::from([(ClientPartition::new(TOPIC, 0), 1)]);
    let err = a
        .send_offsets_to_transaction(&producer, &offsets)
        .await
        .unwrap_err();
    assert_eq!(
        err.transaction_class(),
        Some(weir_client::transaction::TransactionErrorClass::Abortable),
        "{err}"
    );
    sleep(Duration::from_millis(10)).await;
    assert!(
        !a.lease().is_valid(),
        "the lease outlived UNKNOWN_MEMBER_ID"
    );
    match a.next_event().await.unwrap() {
        weir_group::member::AssignmentEvent::Lost(p) => assert_eq!(p.len(), 2),
        other => panic!("a after the refusal: {other:?}"),
    }
    producer.abort().await.unwrap();
    producer.close().await;
    a.close(weir_group::member::ShutdownMode::Default).await;
}
