//! The zombie (KIP-447), through weir-group's membership actor: member A
//! joins and owns every input partition; the testkit cuts A off from the
//! group coordinator past the session timeout, and A's actor reports its
//! partitions Lost; member B joins and gets them. A then reads its group
//! metadata at commit time, after the cut, as a processing loop does: it
//! gets none it can use (C1: no generation, no metadata), or the
//! coordinator refuses the TxnOffsetCommit that carries it (the coordinator
//! no longer knows A's member id); either way A's
//! `send_offsets_to_transaction` and its `commit` fail as abortable, none
//! of A's output is ever visible to read_committed, and B's output covers
//! every input exactly once.
//!
//! In memory on tokio's paused clock: the 10 s session timeout is exact
//! and costs no real time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use weir_client::Cluster;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions, IsolationLevel};
use weir_client::consumer::{Consumer, SeekTo};
use weir_client::producer::{Producer, ProducerRecord, TopicPartition};
use weir_client::transaction::{
    GroupMetadata, TransactionConfig, TransactionErrorClass, TransactionalProducer,
    fetch_stable_offsets,
};
use weir_group::GroupError;
use weir_group::assignor::{Assignor, TopicPartition as GroupPartition};
use weir_group::member::{AssignmentEvent, GroupMember, MemberConfig};
use weir_integration::testkit_dial::client_config;
use weir_testkit::{ClientSelector, PartitionTarget};

type Kit = Arc<weir_testkit::Cluster>;

const GROUP: &str = "zg";
const INPUT: &str = "in";
const OUTPUT: &str = "out";
const INPUT_PARTITIONS: i32 = 2;
const INPUTS: i32 = 10;
const SESSION: Duration = Duration::from_secs(10);
const HEARTBEAT: Duration = Duration::from_secs(1);

async fn client(kit: &Kit, id: &str) -> Cluster {
    let config = client_config(kit, id)
        .request_timeout(Duration::from_secs(2))
        .default_api_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    Cluster::connect(config).await.unwrap()
}

fn member_config() -> MemberConfig {
    MemberConfig::new(GROUP, [INPUT])
        .with_assignors([Assignor::CooperativeSticky])
        .with_session_timeout(SESSION)
        .with_heartbeat_interval(HEARTBEAT)
}

/// The group metadata a transactional offset commit carries.
fn txn_metadata(member: &GroupMember) -> GroupMetadata {
    member.metadata().unwrap().into()
}

fn all_inputs() -> BTreeSet<GroupPartition> {
    (0..INPUT_PARTITIONS)
        .map(|p| GroupPartition::new(INPUT, p))
        .collect()
}

fn client_partitions() -> Vec<TopicPartition> {
    (0..INPUT_PARTITIONS)
        .map(|p| TopicPartition::new(INPUT, p))
        .collect()
}

async fn transactional(kit: &Kit, id: &str, tid: &str) -> TransactionalProducer {
    let p = TransactionalProducer::with_cluster(
        client(kit, id).await,
        Default::default(),
        TransactionConfig::new(tid),
    )
    .unwrap();
    p.init_transactions().await.unwrap();
    p
}

/// Every input from `from`, read_committed: (partition, offset, value).
async fn read_input(
    kit: &Kit,
    id: &str,
    from: &BTreeMap<TopicPartition, i64>,
) -> Vec<(i32, i64, String)> {
    let mut consumer = Consumer::with_cluster(
        client(kit, id).await,
        ConsumerOptions {
            isolation_level: IsolationLevel::ReadCommitted,
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(100),
            ..Default::default()
        },
    );
    consumer.assign(client_partitions());
    for tp in client_partitions() {
        let at = from.get(&tp).copied().unwrap_or(0);
        consumer.seek(&tp, SeekTo::Offset(at)).unwrap();
    }
    let wanted = usize::try_from(INPUTS).unwrap() - from.values().sum::<i64>() as usize;
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < wanted {
        assert!(Instant::now() < deadline, "inputs unreadable: {out:?}");
        for r in consumer.poll_for(Duration::from_millis(500)).await.unwrap() {
            out.push((
                r.partition,
                r.offset,
                String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
            ));
        }
    }
    out
}

/// Everything read_committed shows on the output, up to its last stable offset.
async fn committed_output(kit: &Kit) -> Vec<String> {
    // Kafka (and the testkit, by default) writes a transaction's markers
    // after answering EndTxn: read once those of every ended one are in.
    kit.markers_written().await.unwrap();
    let mut consumer = Consumer::with_cluster(
        client(kit, "checker").await,
        ConsumerOptions {
            isolation_level: IsolationLevel::ReadCommitted,
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(100),
            ..Default::default()
        },
    );
    let tp = TopicPartition::new(OUTPUT, 0);
    consumer.assign([tp.clone()]);
    consumer.seek(&tp, SeekTo::Earliest).unwrap();
    let mut out = Vec::new();
    loop {
        let (_, lso, _) = kit.offsets(OUTPUT, 0).await.unwrap();
        if consumer.position(&tp).await.unwrap() >= lso {
            return out;
        }
        for r in consumer.poll_for(Duration::from_millis(500)).await.unwrap() {
            out.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
}

/// The end of each input partition, as the committed offsets must be.
fn ends_of(inputs: &[(i32, i64, String)]) -> BTreeMap<TopicPartition, i64> {
    let mut ends = BTreeMap::new();
    for (p, o, _) in inputs {
        let end = ends.entry(TopicPartition::new(INPUT, *p)).or_insert(0);
        *end = (*end).max(o + 1);
    }
    ends
}

#[tokio::test(start_paused = true)]
async fn a_member_that_lost_its_partitions_cannot_commit_output_or_offsets() {
    let kit: Kit = Arc::new(
        weir_testkit::Cluster::builder()
            .group_initial_rebalance_delay(Duration::ZERO)
            .build()
            .await
            .unwrap(),
    );
    kit.create_topic(INPUT, INPUT_PARTITIONS, [] as [(&str, &str); 0])
        .await
        .unwrap();
    kit.create_topic(OUTPUT, 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let loader = Producer::with_cluster(client(&kit, "loader").await, Default::default()).unwrap();
    for i in 0..INPUTS {
        loader
            .send(
                ProducerRecord::new(INPUT)
                    .with_partition(i % INPUT_PARTITIONS)
                    .with_value(format!("{i}")),
            )
            .await
            .unwrap();
    }
    loader.close().await;

    // 1. A joins through the membership actor and owns every partition.
    let mut a = GroupMember::start(client(&kit, "a-member").await, member_config()).unwrap();
    match a.next_event().await.unwrap() {
        AssignmentEvent::Assigned { partitions: p, .. } => {
            assert_eq!(p.into_iter().collect::<BTreeSet<_>>(), all_inputs())
        }
        other => panic!("A's first event: {other:?}"),
    }
    // Only to compare with B's below; A's commit reads its metadata again
    // after the cut (step 5).
    let a_joined = txn_metadata(&a);
    assert!(a_joined.generation_id >= 1 && !a_joined.member_id.is_empty());

    // A reads and writes everything in a transaction, but has not committed.
    let a_producer = transactional(&kit, "a-producer", "tx-a").await;
    a_producer.begin().unwrap();
    let a_input = read_input(&kit, "a-consumer", &BTreeMap::new()).await;
    for (_, _, v) in &a_input {
        a_producer
            .send(ProducerRecord::new(OUTPUT).with_value(format!("a-{v}")))
            .await
            .unwrap();
    }

    // 2. A's member is cut off from the coordinator (its producer is not: a
    //    zombie's writes go on). Before the session times out, A's actor
    //    gives its partitions up as Lost, with no answer from anyone.
    kit.partition_client(
        ClientSelector::ClientId("a-member".to_owned()),
        PartitionTarget::GroupCoordinator(GROUP.to_owned()),
    )
    .await
    .unwrap();
    let cut_at = Instant::now();
    match a.next_event().await.unwrap() {
        AssignmentEvent::Lost(p) => {
            assert_eq!(p.into_iter().collect::<BTreeSet<_>>(), all_inputs())
        }
        other => panic!("A's event after the cut: {other:?}"),
    }
    let lost_after = cut_at.elapsed();
    assert!(lost_after < SESSION, "Lost only after {lost_after:?}");
    assert!(a.assignment().is_empty());
    // C1: from the moment it gave its partitions up, A has no metadata a
    // commit could carry.
    assert!(
        matches!(a.metadata(), Err(GroupError::NoGeneration { .. })),
        "A's metadata right after Lost: {:?}",
        a.metadata()
    );

    // 3. B joins and, once A's session expired, gets every partition in a
    //    later generation.
    let mut b = GroupMember::start(client(&kit, "b-member").await, member_config()).unwrap();
    match b.next_event().await.unwrap() {
        AssignmentEvent::Assigned { partitions: p, .. } => {
            assert_eq!(p.into_iter().collect::<BTreeSet<_>>(), all_inputs())
        }
        other => panic!("B's first event: {other:?}"),
    }
    // A's session ran from its last heartbeat before the cut (at most one
    // interval earlier), and A had given the partitions up before that.
    let taken_after = cut_at.elapsed();
    assert!(
        taken_after >= SESSION - HEARTBEAT && taken_after > lost_after,
        "B got A's partitions {taken_after:?} after the cut, A lost them after {lost_after:?}"
    );
    let b_group = txn_metadata(&b);
    assert!(b_group.generation_id > a_joined.generation_id);
    assert_ne!(b_group.member_id, a_joined.member_id);

    // 4. B processes everything from the stable offsets: A committed none.
    let stable = fetch_stable_offsets(&client(&kit, "offsets").await, GROUP, &client_partitions())
        .await
        .unwrap();
    assert!(stable.is_empty(), "A committed nothing: {stable:?}");
    let b_producer = transactional(&kit, "b-producer", "tx-b").await;
    b_producer.begin().unwrap();
    let b_input = read_input(&kit, "b-consumer", &stable).await;
    for (_, _, v) in &b_input {
        b_producer
            .send(ProducerRecord::new(OUTPUT).with_value(format!("b-{v}")))
            .await
            .unwrap();
    }
    let ends = ends_of(&b_input);
    b_producer
        .send_offsets_to_transaction(&ends, &b_group)
        .await
        .unwrap();
    b_producer.commit().await.unwrap();

    // A's transaction is still open and holds the output's LSO at its first
    // record: nothing of A's (or, behind it, B's) is readable yet.
    assert!(committed_output(&kit).await.is_empty());

    // 5. The zombie tries to finish, reading its group metadata now, after
    //    the cut, as a processing loop does at commit time. Either it has
    //    none to hand out (C1: weir-group refuses metadata without a
    //    generation), and the reset identity built by hand is refused by
    //    the producer before anything is sent; or it still has its old
    //    generation, and the coordinator refuses the TxnOffsetCommit
    //    because it removed A's member id. Both are abortable.
    let commits_before = txn_offset_commits(&kit).await;
    let a_offsets = ends_of(&a_input);
    let err = match a.metadata() {
        Err(GroupError::NoGeneration { group, .. }) => {
            eprintln!("zombie after the cut: no metadata (NoGeneration)");
            assert_eq!(group, GROUP);
            let reset = GroupMetadata::new(GROUP, a.generation(), "", None);
            let err = a_producer
                .send_offsets_to_transaction(&a_offsets, &reset)
                .await
                .unwrap_err();
            assert!(
                matches!(
                    &err,
                    weir_client::ClientError::Transaction { source, .. }
                        if matches!(**source, weir_client::ClientError::NoGroupGeneration { .. })
                ),
                "{err}"
            );
            assert_eq!(txn_offset_commits(&kit).await, commits_before);
            err
        }
        Ok(stale) => {
            eprintln!("zombie after the cut: stale metadata {stale:?}");
            assert_eq!(stale.generation, a_joined.generation_id);
            let err = a_producer
                .send_offsets_to_transaction(&a_offsets, &stale.into())
                .await
                .unwrap_err();
            let code = match &err {
                weir_client::ClientError::Transaction { source, .. } => {
                    source.kafka_code().map(|c| c.name)
                }
                _ => None,
            };
            assert!(
                matches!(code, Some("UNKNOWN_MEMBER_ID" | "ILLEGAL_GENERATION")),
                "{err}"
            );
            assert!(
                txn_offset_commits(&kit).await > commits_before,
                "the coordinator itself refused it"
            );
            err
        }
        Err(other) => panic!("A's metadata after the cut: {other:?}"),
    };
    assert_eq!(
        err.transaction_class(),
        Some(TransactionErrorClass::Abortable),
        "{err}"
    );
    let refused = a_producer.commit().await.unwrap_err();
    assert_eq!(
        refused.transaction_class(),
        Some(TransactionErrorClass::Abortable),
        "{refused}"
    );
    a_producer.abort().await.unwrap();

    // 6. Exactly once: only B's output, each input once; the offsets are
    //    B's, the ends of the input.
    let mut out = committed_output(&kit).await;
    out.sort();
    let mut expected: Vec<String> = (0..INPUTS).map(|i| format!("b-{i}")).collect();
    expected.sort();
    assert_eq!(out, expected);
    let committed = fetch_stable_offsets(
        &client(&kit, "offsets-2").await,
        GROUP,
        &client_partitions(),
    )
    .await
    .unwrap();
    assert_eq!(committed, ends);
    assert_eq!(
        ends.values().sum::<i64>(),
        i64::from(INPUTS),
        "the ends cover every input"
    );
    drop(a);
    b.close(weir_group::member::ShutdownMode::Default).await;
}

/// C1: a dynamic member that stopped polling past `max.poll.interval.ms`
/// leaves the group and resets its identity. If it then reads its group
/// metadata at commit time, as a processing loop does, that metadata must
/// not get its offsets past the KIP-447 fence (generation -1 with an empty
/// member id is the one combination the coordinator never checks).
#[tokio::test(start_paused = true)]
async fn a_member_that_left_after_max_poll_interval_cannot_commit_with_its_reset_identity() {
    const MAX_POLL: Duration = Duration::from_secs(2);
    let kit: Kit = Arc::new(
        weir_testkit::Cluster::builder()
            .group_initial_rebalance_delay(Duration::ZERO)
            .build()
            .await
            .unwrap(),
    );
    kit.create_topic(INPUT, INPUT_PARTITIONS, [] as [(&str, &str); 0])
        .await
        .unwrap();
    kit.create_topic(OUTPUT, 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let loader = Producer::with_cluster(client(&kit, "loader").await, Default::default()).unwrap();
    for i in 0..INPUTS {
        loader
            .send(
                ProducerRecord::new(INPUT)
                    .with_partition(i % INPUT_PARTITIONS)
                    .with_value(format!("{i}")),
            )
            .await
            .unwrap();
    }
    loader.close().await;

    // A joins (dynamic, short max.poll.interval) and owns everything.
    let mut a = GroupMember::start(
        client(&kit, "a-member").await,
        member_config().with_max_poll_interval(MAX_POLL),
    )
    .unwrap();
    match a.next_event().await.unwrap() {
        AssignmentEvent::Assigned { partitions: p, .. } => {
            assert_eq!(p.into_iter().collect::<BTreeSet<_>>(), all_inputs())
        }
        other => panic!("A's first event: {other:?}"),
    }
    let a_producer = transactional(&kit, "a-producer", "tx-a").await;
    a_producer.begin().unwrap();
    let a_input = read_input(&kit, "a-consumer", &BTreeMap::new()).await;
    for (_, _, v) in &a_input {
        a_producer
            .send(ProducerRecord::new(OUTPUT).with_value(format!("a-{v}")))
            .await
            .unwrap();
    }

    // A's processing stalls: it does not poll, and its actor leaves the
    // group once max.poll.interval.ms has passed.
    let stalled_at = Instant::now();
    while a.generation() >= 0 {
        assert!(
            stalled_at.elapsed() < SESSION,
            "A never left after max.poll.interval"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!a.lease().is_valid());

    // B joins the group A left and gets everything at once.
    let mut b = GroupMember::start(client(&kit, "b-member").await, member_config()).unwrap();
    match b.next_event().await.unwrap() {
        AssignmentEvent::Assigned { partitions: p, .. } => {
            assert_eq!(p.into_iter().collect::<BTreeSet<_>>(), all_inputs())
        }
        other => panic!("B's first event: {other:?}"),
    }
    let b_group = txn_metadata(&b);
    let b_producer = transactional(&kit, "b-producer", "tx-b").await;
    b_producer.begin().unwrap();
    let b_input = read_input(&kit, "b-consumer", &BTreeMap::new()).await;
    for (_, _, v) in &b_input {
        b_producer
            .send(ProducerRecord::new(OUTPUT).with_value(format!("b-{v}")))
            .await
            .unwrap();
    }
    let ends = ends_of(&b_input);
    b_producer
        .send_offsets_to_transaction(&ends, &b_group)
        .await
        .unwrap();
    b_producer.commit().await.unwrap();

    // A resumes and commits the usual way, reading its metadata now. It
    // had processed only the first record of each partition: offsets that
    // would move the group back if they got through.
    let a_offsets: BTreeMap<TopicPartition, i64> =
        client_partitions().into_iter().map(|tp| (tp, 1)).collect();
    match a.metadata() {
        Err(GroupError::NoGeneration { group, .. }) => assert_eq!(group, GROUP),
        other => panic!("A's metadata after it left: {other:?}"),
    }
    // A caller that builds the reset identity by hand is refused by the
    // producer itself, before anything reaches the coordinator.
    let offset_commits_before = txn_offset_commits(&kit).await;
    let reset = GroupMetadata::new(GROUP, a.generation(), "", None);
    let err = a_producer
        .send_offsets_to_transaction(&a_offsets, &reset)
        .await
        .unwrap_err();
    assert_eq!(
        err.transaction_class(),
        Some(TransactionErrorClass::Abortable),
        "{err}"
    );
    assert!(
        matches!(
            &err,
            weir_client::ClientError::Transaction { source, .. }
                if matches!(**source, weir_client::ClientError::NoGroupGeneration { .. })
        ),
        "{err}"
    );
    assert_eq!(txn_offset_commits(&kit).await, offset_commits_before);
    let refused = a_producer.commit().await.unwrap_err();
    assert_eq!(
        refused.transaction_class(),
        Some(TransactionErrorClass::Abortable),
        "{refused}"
    );
    a_producer.abort().await.unwrap();

    // Only B's output is visible, and the offsets are still B's.
    let mut out = committed_output(&kit).await;
    out.sort();
    let mut expected: Vec<String> = (0..INPUTS).map(|i| format!("b-{i}")).collect();
    expected.sort();
    assert_eq!(out, expected);
    let committed = fetch_stable_offsets(
        &client(&kit, "offsets-2").await,
        GROUP,
        &client_partitions(),
    )
    .await
    .unwrap();
    assert_eq!(committed, ends);
    drop(a);
    b.close(weir_group::member::ShutdownMode::Default).await;
}

/// How many TxnOffsetCommit requests the testkit has received.
async fn txn_offset_commits(kit: &Kit) -> usize {
    kit.requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.api_key == weir_protocol::ApiKey::TxnOffsetCommit)
        .count()
}
