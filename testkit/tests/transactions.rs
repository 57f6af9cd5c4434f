//! Transactions over the wire: commit and abort as read_committed consumers
//! see them, fencing by a new producer instance, the transaction timeout,
//! and transactional offsets (KIP-447).

// Helpers outside `#[test]` functions unwrap too: a failure is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod group_client;

use std::time::Duration;

use common::{Producer, TestClient, batch, fetch_request, produce_request};
use group_client::*;
use weir_protocol::kafka_protocol::messages::{FetchRequest, ProduceRequest};
use weir_protocol::records::{ControlKind, DecodeOptions, decode_batches};
use weir_testkit::Cluster;

const TX: &str = "tx";
const FV: i16 = 12;

async fn setup() -> (Cluster, Client) {
    setup_with(Cluster::builder().instant_timing()).await
}

/// These tests check the coordinator's answers step by step, each right
/// after the previous one: they take instant timing (markers before
/// EndTxn's answer, timeouts aborted at their deadline). Kafka's timing,
/// the default, has its own tests below.
async fn setup_with(builder: weir_testkit::ClusterBuilder) -> (Cluster, Client) {
    let cluster = builder.build().await.unwrap();
    cluster
        .create_topic("t", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "p");
    (cluster, c)
}

async fn produce_txn(c: &mut Client, pid: i64, epoch: i16, seq: i32, vals: &[&str]) -> i16 {
    let p = Producer {
        id: pid,
        epoch,
        seq,
        transactional: true,
    };
    let resp = c
        .call(9, &produce_request("t", 0, batch(vals, p), -1, Some(TX)))
        .await;
    resp.responses[0].partition_responses[0].error_code
}

/// A read_committed fetch from 0: (committed values, LSO, HW, aborted producer ids).
async fn read_committed(c: &mut Client) -> (Vec<String>, i64, i64, Vec<(i64, i64)>) {
    let resp = c
        .call::<FetchRequest>(FV, &fetch_request("t", 0, 0).with_isolation_level(1))
        .await;
    let p = &resp.responses[0].partitions[0];
    let aborted: Vec<(i64, i64)> = p
        .aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect();
    let records = p.records.clone().unwrap_or_default();
    (
        committed_values(&records, &aborted),
        p.last_stable_offset,
        p.high_watermark,
        aborted,
    )
}

/// What a read_committed consumer delivers: Kafka's algorithm. A producer's
/// batches from the first offset of one of its aborted transactions up to
/// its ABORT marker are skipped; control records are never data.
fn committed_values(records: &bytes::Bytes, aborted: &[(i64, i64)]) -> Vec<String> {
    let decoded = decode_batches(records, &DecodeOptions::default()).unwrap();
    let mut pending: Vec<(i64, i64)> = aborted.to_vec();
    pending.sort_by_key(|&(_, first)| first);
    let mut pending = std::collections::VecDeque::from(pending);
    let mut skipping = std::collections::HashSet::new();
    let mut out = Vec::new();
    for b in &decoded.batches {
        let pid = b.header.producer_id;
        // Each aborted transaction starts skipping once, at its first offset.
        while pending
            .front()
            .is_some_and(|&(_, first)| first <= b.header.last_offset())
        {
            if let Some((p, _)) = pending.pop_front() {
                skipping.insert(p);
            }
        }
        if b.header.is_control() {
            if b.control().is_some_and(|c| c.kind == ControlKind::Abort) {
                skipping.remove(&pid);
            }
            continue;
        }
        if !skipping.contains(&pid) {
            out.extend(
                b.records
                    .iter()
                    .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap()),
            );
        }
    }
    out
}

#[tokio::test]
async fn committed_records_become_visible_and_aborted_ones_are_listed() {
    let (_cluster, mut c) = setup().await;
    let (code, pid, epoch) = init_producer(&mut c, TX, 60_000).await;
    assert_eq!((code, epoch), (0, 0));
    // Writing to a partition that was not added is refused.
    assert_eq!(
        produce_txn(&mut c, pid, epoch, 0, &["early"]).await,
        48,
        "INVALID_TXN_STATE"
    );
    assert_eq!(
        add_partitions(&mut c, TX, pid, epoch, "t", &[0]).await,
        vec![0]
    );
    assert_eq!(produce_txn(&mut c, pid, epoch, 0, &["a", "b"]).await, 0);
    let (vals, lso, hw, _) = read_committed(&mut c).await;
    assert_eq!((vals.len(), lso, hw), (0, 0, 2), "open: nothing is stable");
    assert_eq!(end_txn(&mut c, TX, pid, epoch, true, 3).await, 0);
    let (vals, lso, hw, aborted) = read_committed(&mut c).await;
    assert_eq!(vals, vec!["a", "b"]);
    assert_eq!((lso, hw), (3, 3), "the COMMIT marker is at offset 2");
    assert!(aborted.is_empty());
    // A retried EndTxn is harmless; the opposite outcome is not allowed.
    assert_eq!(end_txn(&mut c, TX, pid, epoch, true, 3).await, 0);
    assert_eq!(end_txn(&mut c, TX, pid, epoch, false, 3).await, 48);

    assert_eq!(
        add_partitions(&mut c, TX, pid, epoch, "t", &[0]).await,
        vec![0]
    );
    assert_eq!(produce_txn(&mut c, pid, epoch, 2, &["x"]).await, 0);
    assert_eq!(end_txn(&mut c, TX, pid, epoch, false, 3).await, 0);
    let (vals, lso, hw, aborted) = read_committed(&mut c).await;
    assert_eq!(vals, vec!["a", "b"], "the aborted record is skipped");
    assert_eq!((lso, hw), (5, 5));
    assert_eq!(aborted, vec![(pid, 3)]);
    // Unknown partitions: that one UNKNOWN_TOPIC_OR_PARTITION, the rest not attempted.
    assert_eq!(
        add_partitions(&mut c, TX, pid, epoch, "t", &[0, 9]).await,
        vec![55, 3]
    );
}

#[tokio::test]
async fn a_new_instance_fences_the_old_one_and_aborts_its_open_transaction() {
    let (_cluster, mut old) = setup().await;
    let (_, pid, epoch) = init_producer(&mut old, TX, 60_000).await;
    assert_eq!(
        add_partitions(&mut old, TX, pid, epoch, "t", &[0]).await,
        vec![0]
    );
    assert_eq!(produce_txn(&mut old, pid, epoch, 0, &["zombie"]).await, 0);

    let mut new = TestClient::new(_cluster.connect_duplex(0).await.unwrap(), "p2");
    // The first attempt aborts the open transaction and asks for a retry.
    assert_eq!(
        init_producer(&mut new, TX, 60_000).await.0,
        51,
        "CONCURRENT_TRANSACTIONS"
    );
    let (code, pid2, epoch2) = init_producer(&mut new, TX, 60_000).await;
    assert_eq!((code, pid2, epoch2), (0, pid, epoch + 2));
    let (vals, lso, hw, aborted) = read_committed(&mut new).await;
    assert!(
        vals.is_empty(),
        "the zombie's record is never visible: {vals:?}"
    );
    assert_eq!((lso, hw), (2, 2));
    assert_eq!(aborted, vec![(pid, 0)]);

    // The old instance is fenced on every path.
    assert_eq!(
        end_txn(&mut old, TX, pid, epoch, true, 3).await,
        90,
        "PRODUCER_FENCED"
    );
    assert_eq!(
        end_txn(&mut old, TX, pid, epoch, true, 1).await,
        47,
        "INVALID_PRODUCER_EPOCH before KIP-588"
    );
    assert_eq!(
        add_partitions(&mut old, TX, pid, epoch, "t", &[0]).await,
        vec![90]
    );
    assert_ne!(produce_txn(&mut old, pid, epoch, 1, &["late"]).await, 0);
    // The new instance works.
    assert_eq!(
        add_partitions(&mut new, TX, pid2, epoch2, "t", &[0]).await,
        vec![0]
    );
    assert_eq!(produce_txn(&mut new, pid2, epoch2, 0, &["fresh"]).await, 0);
    assert_eq!(end_txn(&mut new, TX, pid2, epoch2, true, 3).await, 0);
    assert_eq!(read_committed(&mut new).await.0, vec!["fresh"]);
}

/// A Produce to `topic`-0 under transactional id [`TX`]: the partition's error code.
async fn produce_txn_to(c: &mut Client, topic: &str, pid: i64, epoch: i16, seq: i32) -> i16 {
    let p = Producer {
        id: pid,
        epoch,
        seq,
        transactional: true,
    };
    let resp = c
        .call(
            9,
            &produce_request(topic, 0, batch(&["z"], p), -1, Some(TX)),
        )
        .await;
    resp.responses[0].partition_responses[0].error_code
}

/// The codes Apache Kafka (KIP-588, with KIP-890 verification) gives a
/// zombie: the partition leader answers its Produce with
/// `INVALID_PRODUCER_EPOCH` (47), whether or not the partition was in its
/// fenced transaction; the transaction coordinator answers InitProducerId
/// (KIP-360 form), AddPartitionsToTxn, AddOffsetsToTxn and EndTxn with
/// `PRODUCER_FENCED` (90); TxnOffsetCommit goes through the same
/// verification as Produce and gets 47.
#[tokio::test]
async fn a_fenced_zombie_gets_kafkas_codes_on_every_path() {
    let (cluster, mut a) = setup().await;
    cluster
        .create_topic("u", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let (_, pid, epoch) = init_producer(&mut a, TX, 60_000).await;
    assert_eq!(
        add_partitions(&mut a, TX, pid, epoch, "t", &[0]).await,
        vec![0]
    );
    assert_eq!(produce_txn_to(&mut a, "t", pid, epoch, 0).await, 0);
    assert_eq!(add_offsets(&mut a, TX, pid, epoch, "g").await, 0);

    let mut b = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "p2");
    assert_eq!(init_producer(&mut b, TX, 60_000).await.0, 51);
    let (code, pid_b, epoch_b) = init_producer(&mut b, TX, 60_000).await;
    assert_eq!((code, pid_b, epoch_b), (0, pid, epoch + 2));

    assert_eq!(
        produce_txn_to(&mut a, "t", pid, epoch, 1).await,
        47,
        "INVALID_PRODUCER_EPOCH on a partition of the fenced transaction"
    );
    assert_eq!(
        produce_txn_to(&mut a, "u", pid, epoch, 0).await,
        47,
        "INVALID_PRODUCER_EPOCH on a partition the zombie never wrote"
    );
    assert_eq!(
        add_partitions(&mut a, TX, pid, epoch, "u", &[0]).await,
        vec![90]
    );
    assert_eq!(add_offsets(&mut a, TX, pid, epoch, "g").await, 90);
    assert_eq!(end_txn(&mut a, TX, pid, epoch, true, 3).await, 90);
    assert_eq!(end_txn(&mut a, TX, pid, epoch, false, 3).await, 90);
    assert_eq!(
        txn_commit_offset(&mut a, TX, pid, epoch, "g", ("", -1), "t", 1).await,
        47,
        "TxnOffsetCommit: the coordinator's PRODUCER_FENCED, as the verification passes it on"
    );
    assert_eq!(
        init_producer_as(&mut a, TX, 60_000, pid, epoch).await.0,
        90,
        "InitProducerId naming the old epoch (KIP-360) is fenced"
    );
    // Other producer ids and epochs under the same transactional id.
    assert_eq!(
        produce_txn_to(&mut a, "t", pid + 77, 0, 0).await,
        49,
        "INVALID_PRODUCER_ID_MAPPING"
    );
    assert_eq!(
        produce_txn_to(&mut b, "t", pid_b, epoch_b, 0).await,
        48,
        "the current producer, partition not yet added: INVALID_TXN_STATE"
    );
    // The new instance is unharmed by all of it.
    assert_eq!(
        add_partitions(&mut b, TX, pid_b, epoch_b, "u", &[0]).await,
        vec![0]
    );
    assert_eq!(produce_txn_to(&mut b, "u", pid_b, epoch_b, 0).await, 0);
    assert_eq!(end_txn(&mut b, TX, pid_b, epoch_b, true, 3).await, 0);
}

#[tokio::test(start_paused = true)]
async fn the_transaction_timeout_aborts_exactly_on_time() {
    let (_cluster, mut c) = setup().await;
    let (_, pid, epoch) = init_producer(&mut c, TX, 10_000).await;
    assert_eq!(
        add_partitions(&mut c, TX, pid, epoch, "t", &[0]).await,
        vec![0]
    );
    let started = tokio::time::Instant::now();
    assert_eq!(produce_txn(&mut c, pid, epoch, 0, &["slow"]).await, 0);
    tokio::time::sleep_until(started + Duration::from_millis(9_999)).await;
    let (_, lso, hw, _) = read_committed(&mut c).await;
    assert_eq!((lso, hw), (0, 1), "still open 1 ms before the timeout");
    tokio::time::sleep_until(started + Duration::from_millis(10_001)).await;
    let (vals, lso, hw, aborted) = read_committed(&mut c).await;
    assert_eq!((lso, hw), (2, 2), "aborted by the coordinator");
    assert!(vals.is_empty());
    assert_eq!(aborted, vec![(pid, 0)]);
    assert_eq!(
        end_txn(&mut c, TX, pid, epoch, true, 3).await,
        90,
        "the producer was fenced"
    );
}

/// Kafka's timing, the default: EndTxn is answered before the markers are
/// written (20 ms later), and meanwhile the next AddPartitionsToTxn gets
/// `CONCURRENT_TRANSACTIONS` and read_committed readers stay at the LSO.
#[tokio::test(start_paused = true)]
async fn by_default_markers_follow_end_txn_after_kafkas_delay() {
    let (_cluster, mut c) = setup_with(Cluster::builder()).await;
    let (_, pid, epoch) = init_producer(&mut c, TX, 60_000).await;
    assert_eq!(
        add_partitions(&mut c, TX, pid, epoch, "t", &[0]).await,
        vec![0]
    );
    assert_eq!(produce_txn(&mut c, pid, epoch, 0, &["a"]).await, 0);
    let ended = tokio::time::Instant::now();
    assert_eq!(end_txn(&mut c, TX, pid, epoch, true, 3).await, 0);
    let (vals, lso, hw, _) = read_committed(&mut c).await;
    assert_eq!((vals.len(), lso, hw), (0, 0, 1), "no marker yet");
    assert_eq!(
        add_partitions(&mut c, TX, pid, epoch, "t", &[0]).await,
        vec![51],
        "CONCURRENT_TRANSACTIONS"
    );
    tokio::time::sleep_until(ended + Duration::from_millis(21)).await;
    let (vals, lso, hw, _) = read_committed(&mut c).await;
    assert_eq!((vals, lso, hw), (vec!["a".to_owned()], 2, 2));
    assert_eq!(
        add_partitions(&mut c, TX, pid, epoch, "t", &[0]).await,
        vec![0]
    );
}

/// Kafka's timing, the default: a timed-out transaction is aborted by the
/// scan that runs every 10 s, not at its deadline.
#[tokio::test(start_paused = true)]
async fn by_default_a_timed_out_transaction_waits_for_the_next_abort_scan() {
    let (_cluster, mut c) = setup_with(Cluster::builder()).await;
    let (_, pid, epoch) = init_producer(&mut c, TX, 1_000).await;
    let started = tokio::time::Instant::now();
    assert_eq!(
        add_partitions(&mut c, TX, pid, epoch, "t", &[0]).await,
        vec![0]
    );
    assert_eq!(produce_txn(&mut c, pid, epoch, 0, &["slow"]).await, 0);
    tokio::time::sleep_until(started + Duration::from_millis(9_900)).await;
    let (_, lso, hw, _) = read_committed(&mut c).await;
    assert_eq!(
        (lso, hw),
        (0, 1),
        "past its timeout, still open until the scan"
    );
    tokio::time::sleep_until(started + Duration::from_millis(10_100)).await;
    let (vals, lso, hw, aborted) = read_committed(&mut c).await;
    assert_eq!((lso, hw), (2, 2), "aborted by the scan");
    assert!(vals.is_empty());
    assert_eq!(aborted, vec![(pid, 0)]);
}

#[tokio::test]
async fn transactional_offsets_are_pending_until_commit_and_zombies_are_refused() {
    let (cluster, mut p) = setup().await;
    let mut consumer = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "c1");
    let (member, generation) = join_alone(&mut consumer, "grp", 5).await;
    consumer
        .call(5, &sync_request("grp", &member, generation, None, &[], 5))
        .await;

    let (_, pid, epoch) = init_producer(&mut p, TX, 60_000).await;
    assert_eq!(add_offsets(&mut p, TX, pid, epoch, "grp").await, 0);
    let who = (member.as_str(), generation);
    assert_eq!(
        txn_commit_offset(&mut p, TX, pid, epoch, "grp", who, "t", 10).await,
        0
    );
    assert_eq!(
        fetch_offset(&mut consumer, "grp", "t", 0, false).await,
        (-1, 0),
        "invisible"
    );
    assert_eq!(
        fetch_offset(&mut consumer, "grp", "t", 0, true).await,
        (-1, 88),
        "UNSTABLE_OFFSET_COMMIT"
    );
    assert_eq!(end_txn(&mut p, TX, pid, epoch, true, 3).await, 0);
    assert_eq!(
        fetch_offset(&mut consumer, "grp", "t", 0, true).await,
        (10, 0)
    );

    // An aborted transaction's offsets never appear.
    assert_eq!(add_offsets(&mut p, TX, pid, epoch, "grp").await, 0);
    assert_eq!(
        txn_commit_offset(&mut p, TX, pid, epoch, "grp", who, "t", 20).await,
        0
    );
    assert_eq!(end_txn(&mut p, TX, pid, epoch, false, 3).await, 0);
    assert_eq!(
        fetch_offset(&mut consumer, "grp", "t", 0, true).await,
        (10, 0)
    );

    // A rebalance makes the old generation a zombie (KIP-447).
    let mut second = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "c2");
    let m2 = start_join(&mut second, "grp", 5).await;
    consumer
        .send_only(5, &join_request("grp", &member, None, 5))
        .await;
    let (j1, _) = (
        finish_join(&mut consumer, 5).await,
        finish_join(&mut second, 5).await,
    );
    assert_eq!(j1.generation_id, generation + 1);
    assert_eq!(add_offsets(&mut p, TX, pid, epoch, "grp").await, 0);
    assert_eq!(
        txn_commit_offset(&mut p, TX, pid, epoch, "grp", who, "t", 30).await,
        22,
        "ILLEGAL_GENERATION"
    );
    let unknown = ("gone", generation + 1);
    assert_eq!(
        txn_commit_offset(&mut p, TX, pid, epoch, "grp", unknown, "t", 30).await,
        25,
        "UNKNOWN_MEMBER_ID"
    );
    let current = (m2.as_str(), generation + 1);
    assert_eq!(
        txn_commit_offset(&mut p, TX, pid, epoch, "grp", current, "t", 30).await,
        0
    );
    assert_eq!(end_txn(&mut p, TX, pid, epoch, true, 3).await, 0);
    assert_eq!(
        fetch_offset(&mut consumer, "grp", "t", 0, true).await,
        (30, 0)
    );
}

/// TxnOffsetCommit v6 names topics by id, as Kafka 4.4 accepts it: a known
/// id commits under its topic and is echoed back; an id no topic has gets
/// `UNKNOWN_TOPIC_ID` for each of its partitions.
#[tokio::test]
async fn txn_offset_commit_v6_names_topics_by_id() {
    use weir_protocol::kafka_protocol::messages::TxnOffsetCommitRequest;
    use weir_protocol::kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };

    let (cluster, mut p) = setup().await;
    let mut consumer = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "c1");
    let (member, generation) = join_alone(&mut consumer, "grp", 5).await;
    consumer
        .call(5, &sync_request("grp", &member, generation, None, &[], 5))
        .await;
    let id = cluster.with_state(|s| s.topics["t"].id).await.unwrap();
    let stranger = uuid::Uuid::from_u128(0xdead_beef);
    let by_id = |topic_id: uuid::Uuid, offset: i64| {
        TxnOffsetCommitRequestTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![
                TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(offset),
            ])
    };
    let request = |topics| {
        TxnOffsetCommitRequest::default()
            .with_transactional_id(tid(TX))
            .with_group_id(gid("grp"))
            .with_member_id(s(&member))
            .with_generation_id(generation)
            .with_topics(topics)
    };

    let (_, pid, epoch) = init_producer(&mut p, TX, 60_000).await;
    let answer = p
        .call(
            6,
            &request(vec![by_id(id, 7), by_id(stranger, 9)])
                .with_producer_id(weir_protocol::kafka_protocol::messages::ProducerId(pid))
                .with_producer_epoch(epoch),
        )
        .await;
    let got: Vec<_> = answer
        .topics
        .iter()
        .map(|t| (t.topic_id, t.partitions[0].error_code))
        .collect();
    assert_eq!(
        got,
        [(stranger, 100), (id, 0)],
        "UNKNOWN_TOPIC_ID, then NONE"
    );
    assert_eq!(end_txn(&mut p, TX, pid, epoch, true, 5).await, 0);
    assert_eq!(
        fetch_offset(&mut consumer, "grp", "t", 0, true).await,
        (7, 0)
    );

    // Only unknown ids: answered at once, nothing staged.
    let answer = p
        .call(
            6,
            &request(vec![by_id(stranger, 9)])
                .with_producer_id(weir_protocol::kafka_protocol::messages::ProducerId(pid))
                .with_producer_epoch(epoch + 1),
        )
        .await;
    assert_eq!(answer.topics[0].partitions[0].error_code, 100);
}

#[tokio::test]
async fn idempotent_producers_get_fresh_ids() {
    let (_cluster, mut c) = setup().await;
    let req = weir_protocol::kafka_protocol::messages::InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(-1);
    let a = c.call(4, &req).await;
    let b = c.call(0, &req).await;
    assert_eq!((a.error_code, b.error_code), (0, 0));
    assert_ne!(a.producer_id, b.producer_id);
    assert_eq!((a.producer_epoch, b.producer_epoch), (0, 0));
    let p = Producer {
        id: a.producer_id.0,
        epoch: 0,
        seq: 0,
        transactional: false,
    };
    let resp = c
        .call::<ProduceRequest>(9, &produce_request("t", 0, batch(&["i"], p), -1, None))
        .await;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
}

/// Markers reach every partition of the transaction, whichever broker leads
/// it, and the coordinator is the broker FindCoordinator names.
#[tokio::test]
async fn end_txn_marks_every_partition_on_every_broker() {
    use weir_protocol::kafka_protocol::messages::FindCoordinatorRequest;

    // Reads every partition right after EndTxn: markers before its answer.
    let cluster = Cluster::builder()
        .brokers(3)
        .instant_timing()
        .build()
        .await
        .unwrap();
    cluster
        .create_topic("m", 3, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let mut any = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "p");
    let found = any
        .call(
            3,
            &FindCoordinatorRequest::default()
                .with_key(s("tx-m"))
                .with_key_type(1),
        )
        .await;
    assert_eq!(found.error_code, 0);
    let coordinator = found.node_id.0;
    let mut c = TestClient::new(cluster.connect_duplex(coordinator).await.unwrap(), "p");
    let wrong = (coordinator + 1) % 3;
    let mut elsewhere = TestClient::new(cluster.connect_duplex(wrong).await.unwrap(), "p");
    assert_eq!(
        init_producer(&mut elsewhere, "tx-m", 60_000).await.0,
        16,
        "NOT_COORDINATOR"
    );

    let (_, pid, epoch) = init_producer(&mut c, "tx-m", 60_000).await;
    assert_eq!(
        add_partitions(&mut c, "tx-m", pid, epoch, "m", &[0, 1, 2]).await,
        vec![0, 0, 0]
    );
    for partition in 0..3 {
        let leader = cluster
            .with_state(move |s| s.partition("m", partition).map(|p| p.leader))
            .await
            .unwrap()
            .unwrap();
        let mut p = TestClient::new(cluster.connect_duplex(leader).await.unwrap(), "p");
        let producer = Producer {
            id: pid,
            epoch,
            seq: 0,
            transactional: true,
        };
        let records = batch(&["v"], producer);
        let resp = p
            .call(
                9,
                &produce_request("m", partition, records, -1, Some("tx-m")),
            )
            .await;
        assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
        assert_eq!(
            cluster.offsets("m", partition).await.unwrap(),
            (0, 0, 1),
            "open"
        );
    }
    assert_eq!(end_txn(&mut c, "tx-m", pid, epoch, true, 3).await, 0);
    for partition in 0..3 {
        assert_eq!(
            cluster.offsets("m", partition).await.unwrap(),
            (0, 2, 2),
            "partition {partition}: the COMMIT marker is at offset 1"
        );
    }
}

/// Kafka's `KafkaApis` turns the coordinator's `PRODUCER_FENCED` (90) into
/// `INVALID_PRODUCER_EPOCH` (47) for clients older than KIP-588: EndTxn,
/// AddPartitionsToTxn and AddOffsetsToTxn below v2, InitProducerId below v4.
/// A producer whose epoch is older than the one another instance got from
/// InitProducerId gets exactly that code at every version.
#[tokio::test]
async fn an_older_epoch_gets_producer_fenced_or_its_pre_kip588_code_at_every_version() {
    use weir_protocol::kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use weir_protocol::kafka_protocol::messages::{
        AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest,
        ProducerId,
    };

    let (cluster, mut a) = setup().await;
    let (_, pid, epoch) = init_producer(&mut a, TX, 60_000).await;
    assert_eq!(
        add_partitions(&mut a, TX, pid, epoch, "t", &[0]).await,
        vec![0]
    );
    let mut b = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "p2");
    assert_eq!(init_producer(&mut b, TX, 60_000).await.0, 51);
    let (code, pid_b, epoch_b) = init_producer(&mut b, TX, 60_000).await;
    assert_eq!((code, pid_b), (0, pid));
    assert!(epoch_b > epoch);

    let expect = |version: i16, fenced_since: i16| if version < fenced_since { 47 } else { 90 };
    for version in 0..=3 {
        for commit in [true, false] {
            let req = EndTxnRequest::default()
                .with_transactional_id(tid(TX))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_committed(commit);
            assert_eq!(
                a.call(version, &req).await.error_code,
                expect(version, 2),
                "EndTxn v{version} commit={commit}"
            );
        }
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(tid(TX))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(common::topic("t"))
                    .with_partitions(vec![0]),
            ]);
        let resp = a.call(version, &req).await;
        assert_eq!(
            resp.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
            expect(version, 2),
            "AddPartitionsToTxn v{version}"
        );
        let req = AddOffsetsToTxnRequest::default()
            .with_transactional_id(tid(TX))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_group_id(gid("g"));
        assert_eq!(
            a.call(version, &req).await.error_code,
            expect(version, 2),
            "AddOffsetsToTxn v{version}"
        );
    }
    for version in 3..=4 {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(tid(TX)))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch);
        assert_eq!(
            a.call(version, &req).await.error_code,
            expect(version, 4),
            "InitProducerId v{version} (KIP-360 form)"
        );
    }
    // None of it touched the new instance's epoch.
    assert_eq!(
        add_partitions(&mut b, TX, pid_b, epoch_b, "t", &[0]).await,
        vec![0]
    );
    assert_eq!(end_txn(&mut b, TX, pid_b, epoch_b, true, 3).await, 0);
}

/// With `transaction.partition.verification.enable=false` (brokers before
/// Kafka 3.6), a transactional batch for a partition that was never added
/// is appended, and no marker ever ends it: the partition's last stable
/// offset hangs below it, even after the transaction commits. With the
/// default (3.6+) the same batch is refused with INVALID_TXN_STATE.
#[tokio::test]
async fn without_partition_verification_an_unadded_partition_hangs() {
    // Checks the LSO right after EndTxn: markers before its answer.
    let cluster = Cluster::builder()
        .transaction_partition_verification(false)
        .instant_timing()
        .build()
        .await
        .unwrap();
    cluster
        .create_topic("t", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "p");
    let (code, pid, epoch) = init_producer(&mut c, TX, 60_000).await;
    assert_eq!((code, epoch), (0, 0));
    assert_eq!(
        produce_txn(&mut c, pid, epoch, 0, &["stray"]).await,
        0,
        "appended without asking the coordinator"
    );
    // The transaction (on another topic) commits; "t" gets no marker.
    cluster
        .create_topic("u", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    assert_eq!(
        add_partitions(&mut c, TX, pid, epoch, "u", &[0]).await,
        vec![0]
    );
    assert_eq!(end_txn(&mut c, TX, pid, epoch, true, 3).await, 0);
    let (vals, lso, hw, _) = read_committed(&mut c).await;
    assert_eq!((vals.len(), lso, hw), (0, 0, 1), "a hanging transaction");
    assert!(cluster.unfinished_transactions().await.unwrap().is_empty());

    // The default verifies, as `committed_records_become_visible...` shows
    // in detail: the same batch is refused.
    let (_verifying, mut v) = setup().await;
    let (_, pid, epoch) = init_producer(&mut v, TX, 60_000).await;
    assert_eq!(produce_txn(&mut v, pid, epoch, 0, &["stray"]).await, 48);
}
