//! The zombie (KIP-447): a member loses its group membership because the
//! testkit cuts it off from the group coordinator past the session
//! timeout; a new member takes its partitions; the zombie's
//! `send_offsets_to_transaction` and `commit` fail; none of its output is
//! ever visible to read_committed, and the new owner's output covers every
//! input exactly once.
//!
//! Group membership is driven with JoinGroup/SyncGroup directly here: the
//! membership actor in weir-group was still being written when this test
//! was, and the test needs nothing from it but a generation and member id.
//! The client dials TCP only, so this runs on real time with a short
//! session timeout.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use weir_client::Cluster;
use weir_client::cluster::{CoordinatorKind, Lane};
use weir_client::config::ClientConfig;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions, IsolationLevel};
use weir_client::consumer::{Consumer, SeekTo};
use weir_client::producer::{Producer, ProducerRecord, TopicPartition};
use weir_client::transaction::{
    GroupMetadata, TransactionConfig, TransactionErrorClass, TransactionalProducer,
    fetch_stable_offsets,
};
use weir_protocol::kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use weir_protocol::kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use weir_protocol::kafka_protocol::messages::{GroupId, JoinGroupRequest, SyncGroupRequest};
use weir_protocol::kafka_protocol::protocol::StrBytes;
use weir_testkit::{ClientSelector, PartitionTarget};

const GROUP: &str = "zg";
const INPUTS: i64 = 10;
const SESSION_MS: i32 = 300;

async fn client(kit: &weir_testkit::Cluster, id: &str) -> Cluster {
    let config = ClientConfig::from_properties(&[
        ("bootstrap.servers", kit.bootstrap().as_str()),
        ("client.id", id),
        ("retry.backoff.ms", "10"),
        ("retry.backoff.max.ms", "50"),
        ("request.timeout.ms", "2000"),
        ("default.api.timeout.ms", "3000"),
    ])
    .unwrap();
    Cluster::connect(config).await.unwrap()
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// JoinGroup (answering MEMBER_ID_REQUIRED) then SyncGroup; the member is
/// alone in its generation, so it leads and assigns itself everything.
async fn join(cluster: &Cluster) -> GroupMetadata {
    let coordinator = cluster
        .find_coordinator(CoordinatorKind::Group, GROUP)
        .await
        .unwrap();
    let mut member_id = String::new();
    let joined = loop {
        let request = JoinGroupRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_session_timeout_ms(SESSION_MS)
            .with_rebalance_timeout_ms(2000)
            .with_member_id(s(&member_id))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default()
                    .with_name(s("range"))
                    .with_metadata(bytes_of(b"")),
            ]);
        let r = cluster
            .request_with_timeout(
                coordinator,
                Lane::Coordinator,
                &request,
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        match r.error_code {
            0 => break r,
            79 => member_id = r.member_id.to_string(), // MEMBER_ID_REQUIRED
            code => panic!("JoinGroup: error {code}"),
        }
    };
    let member_id = joined.member_id.to_string();
    assert_eq!(joined.leader.to_string(), member_id, "alone, so the leader");
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_generation_id(joined.generation_id)
        .with_member_id(s(&member_id))
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_assignments(vec![
            SyncGroupRequestAssignment::default()
                .with_member_id(s(&member_id))
                .with_assignment(bytes_of(b"all")),
        ]);
    let r = cluster
        .request_with_timeout(
            coordinator,
            Lane::Coordinator,
            &sync,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(r.error_code, 0, "SyncGroup");
    GroupMetadata {
        group_id: GROUP.to_owned(),
        generation_id: joined.generation_id,
        member_id,
        group_instance_id: None,
    }
}

fn bytes_of(b: &'static [u8]) -> bytes::Bytes {
    bytes::Bytes::from_static(b)
}

async fn transactional(kit: &weir_testkit::Cluster, id: &str, tid: &str) -> TransactionalProducer {
    let p = TransactionalProducer::with_cluster(
        client(kit, id).await,
        Default::default(),
        TransactionConfig::new(tid),
    )
    .unwrap();
    p.init_transactions().await.unwrap();
    p
}

async fn read_input(kit: &weir_testkit::Cluster, id: &str, from: i64) -> Vec<(i64, String)> {
    let mut consumer = Consumer::with_cluster(
        client(kit, id).await,
        ConsumerOptions {
            isolation_level: IsolationLevel::ReadCommitted,
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(20),
            ..Default::default()
        },
    );
    let tp = TopicPartition::new("in", 0);
    consumer.assign([tp.clone()]);
    consumer.seek(&tp, SeekTo::Offset(from)).unwrap();
    let mut out = Vec::new();
    while out.len() < usize::try_from(INPUTS - from).unwrap() {
        for r in consumer.poll_for(Duration::from_millis(50)).await.unwrap() {
            out.push((
                r.offset,
                String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
            ));
        }
    }
    out
}

async fn committed_output(kit: &weir_testkit::Cluster) -> Vec<String> {
    let mut consumer = Consumer::with_cluster(
        client(kit, "checker").await,
        ConsumerOptions {
            isolation_level: IsolationLevel::ReadCommitted,
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(20),
            ..Default::default()
        },
    );
    let tp = TopicPartition::new("out", 0);
    consumer.assign([tp.clone()]);
    consumer.seek(&tp, SeekTo::Earliest).unwrap();
    let mut out = Vec::new();
    for _ in 0..200 {
        let (_, lso, _) = kit.offsets("out", 0).await.unwrap();
        if consumer.position(&tp).await.unwrap() >= lso {
            break;
        }
        for r in consumer.poll_for(Duration::from_millis(50)).await.unwrap() {
            out.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
    out
}

#[tokio::test]
async fn a_member_that_lost_its_partitions_cannot_commit_output_or_offsets() {
    let kit = weir_testkit::Cluster::builder()
        .group_initial_rebalance_delay(Duration::ZERO)
        .build()
        .await
        .unwrap();
    // A session timeout short enough for real time: the testkit's floor is
    // Kafka's 6 s, lowered through its state hook.
    kit.with_state(|state| {
        state.groups.config.min_session_timeout = Duration::from_millis(100);
    })
    .await
    .unwrap();
    kit.create_topic("in", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    kit.create_topic("out", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let loader = Producer::with_cluster(client(&kit, "loader").await, Default::default()).unwrap();
    for i in 0..INPUTS {
        loader
            .send(ProducerRecord::new("in").with_value(format!("{i}")))
            .await
            .unwrap();
    }

    // 1. The zombie-to-be joins, reads and writes, but does not commit yet.
    let zombie_member = client(&kit, "zombie-member").await;
    let zombie_group = join(&zombie_member).await;
    let zombie = transactional(&kit, "zombie-producer", "tx-zombie").await;
    zombie.begin().unwrap();
    let input = read_input(&kit, "zombie-consumer", 0).await;
    for (_, v) in &input {
        zombie
            .send(ProducerRecord::new("out").with_value(format!("zombie-{v}")))
            .await
            .unwrap();
    }

    // 2. It is cut off from the group coordinator past the session timeout;
    //    a new member joins and gets a new generation with every partition.
    kit.partition_client(
        ClientSelector::ClientId("zombie-member".to_owned()),
        PartitionTarget::GroupCoordinator(GROUP.to_owned()),
    )
    .await
    .unwrap();
    let owner_member = client(&kit, "owner-member").await;
    let owner_group = join(&owner_member).await;
    assert!(owner_group.generation_id > zombie_group.generation_id);
    assert_ne!(owner_group.member_id, zombie_group.member_id);

    // 3. The new owner processes everything from the stable offsets.
    let owner = transactional(&kit, "owner-producer", "tx-owner").await;
    let tp = TopicPartition::new("in", 0);
    let reader = client(&kit, "offsets").await;
    let start = fetch_stable_offsets(&reader, GROUP, std::slice::from_ref(&tp))
        .await
        .unwrap()
        .get(&tp)
        .copied()
        .unwrap_or(0);
    assert_eq!(start, 0, "the zombie committed nothing");
    owner.begin().unwrap();
    for (_, v) in read_input(&kit, "owner-consumer", start).await {
        owner
            .send(ProducerRecord::new("out").with_value(format!("owner-{v}")))
            .await
            .unwrap();
    }
    owner
        .send_offsets_to_transaction(&BTreeMap::from([(tp.clone(), INPUTS)]), &owner_group)
        .await
        .unwrap();
    owner.commit().await.unwrap();

    // 4. The zombie's offsets are refused as a stale membership: abortable,
    //    and its commit is refused too.
    let offsets = BTreeMap::from([(tp.clone(), input.last().unwrap().0 + 1)]);
    let err = zombie
        .send_offsets_to_transaction(&offsets, &zombie_group)
        .await
        .unwrap_err();
    assert_eq!(
        err.transaction_class(),
        Some(TransactionErrorClass::Abortable),
        "{err}"
    );
    let code = match &err {
        weir_client::ClientError::Transaction { source, .. } => source.kafka_code().map(|c| c.name),
        _ => None,
    };
    assert!(
        matches!(code, Some("ILLEGAL_GENERATION" | "UNKNOWN_MEMBER_ID")),
        "{code:?}: {err}"
    );
    let refused = zombie.commit().await.unwrap_err();
    assert_eq!(
        refused.transaction_class(),
        Some(TransactionErrorClass::Abortable)
    );
    zombie.abort().await.unwrap();

    // 5. Exactly once: only the owner's output, each input once.
    let mut out = committed_output(&kit).await;
    out.sort();
    let mut expected: Vec<String> = (0..INPUTS).map(|i| format!("owner-{i}")).collect();
    expected.sort();
    assert_eq!(out, expected);
    let committed = fetch_stable_offsets(&reader, GROUP, std::slice::from_ref(&tp))
        .await
        .unwrap();
    assert_eq!(committed.get(&tp), Some(&INPUTS));
}
