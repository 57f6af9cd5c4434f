//! Fetch: min bytes and max wait on tokio's paused clock, fetch sessions,
//! watermarks, and read_committed with the aborted-transactions list.

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{PLAIN, Producer, TestClient, batch, fetch_request, produce_request, topic, values};
use tokio::io::DuplexStream;
use tokio::time::Instant;
use weir_protocol::kafka_protocol::messages::FetchRequest;
use weir_protocol::kafka_protocol::messages::fetch_request::{
    FetchPartition, FetchTopic, ForgottenTopic,
};
use weir_protocol::records::{BatchHeader, ControlKind};
use weir_testkit::Cluster;

const FV: i16 = 12;

async fn setup(partitions: i32) -> (Cluster, TestClient<DuplexStream>, TestClient<DuplexStream>) {
    let cluster = Cluster::builder().build().await.unwrap();
    cluster
        .create_topic("t", partitions, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let consumer = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "c");
    let producer = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "p");
    (cluster, consumer, producer)
}

#[tokio::test(start_paused = true)]
async fn an_empty_fetch_waits_exactly_max_wait() {
    let (_cluster, mut c, _p) = setup(1).await;
    let start = Instant::now();
    let resp = c
        .call(FV, &fetch_request("t", 0, 0).with_max_wait_ms(500))
        .await;
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    let p = &resp.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark), (0, 0));
    assert!(p.records.as_ref().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_waiting_fetch_returns_as_soon_as_min_bytes_arrive() {
    let (_cluster, mut c, mut p) = setup(1).await;
    let start = Instant::now();
    c.send_only(FV, &fetch_request("t", 0, 0).with_max_wait_ms(10_000))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    p.call(9, &produce_request("t", 0, batch(&["a"], PLAIN), 1, None))
        .await;
    let resp = c.recv::<FetchRequest>(FV).await;
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(300),
        "no wait once min bytes are there"
    );
    assert_eq!(
        values(resp.responses[0].partitions[0].records.as_ref().unwrap()),
        vec![(0, "a".into())]
    );

    // With data already there, max wait is not waited at all.
    let start = Instant::now();
    let resp = c
        .call(FV, &fetch_request("t", 0, 0).with_max_wait_ms(10_000))
        .await;
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(resp.responses[0].partitions[0].high_watermark, 1);
}

#[tokio::test(start_paused = true)]
async fn min_bytes_larger_than_the_data_waits_for_more() {
    let (_cluster, mut c, mut p) = setup(1).await;
    p.call(9, &produce_request("t", 0, batch(&["a"], PLAIN), 1, None))
        .await;
    let start = Instant::now();
    let resp = c
        .call(
            FV,
            &fetch_request("t", 0, 0)
                .with_max_wait_ms(200)
                .with_min_bytes(1 << 20),
        )
        .await;
    assert_eq!(start.elapsed(), Duration::from_millis(200));
    assert_eq!(
        values(resp.responses[0].partitions[0].records.as_ref().unwrap()).len(),
        1
    );
}

fn session_fetch(
    session_id: i32,
    epoch: i32,
    partitions: &[(i32, i64)],
    forgotten: &[i32],
) -> FetchRequest {
    let mut req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_session_id(session_id)
        .with_session_epoch(epoch);
    if !partitions.is_empty() {
        req.topics = vec![
            FetchTopic::default()
                .with_topic(topic("t"))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|(p, o)| {
                            FetchPartition::default()
                                .with_partition(*p)
                                .with_fetch_offset(*o)
                                .with_partition_max_bytes(1 << 20)
                        })
                        .collect(),
                ),
        ];
    }
    if !forgotten.is_empty() {
        req.forgotten_topics_data = vec![
            ForgottenTopic::default()
                .with_topic(topic("t"))
                .with_partitions(forgotten.to_vec()),
        ];
    }
    req
}

#[tokio::test]
async fn fetch_sessions_are_incremental() {
    let (_cluster, mut c, mut p) = setup(2).await;
    let full = c
        .call(FV, &session_fetch(0, 0, &[(0, 0), (1, 0)], &[]))
        .await;
    let id = full.session_id;
    assert!(id > 0);
    assert_eq!(
        full.responses[0].partitions.len(),
        2,
        "a full response lists every partition"
    );

    // Nothing changed: the incremental response lists nothing.
    let inc = c.call(FV, &session_fetch(id, 1, &[], &[])).await;
    assert_eq!(inc.session_id, id);
    assert!(inc.responses.is_empty());

    // New data on partition 1 only: only partition 1 comes back.
    p.call(9, &produce_request("t", 1, batch(&["x"], PLAIN), 1, None))
        .await;
    let inc = c.call(FV, &session_fetch(id, 2, &[], &[])).await;
    assert_eq!(inc.responses[0].partitions.len(), 1);
    assert_eq!(inc.responses[0].partitions[0].partition_index, 1);
    assert_eq!(
        values(inc.responses[0].partitions[0].records.as_ref().unwrap()),
        vec![(0, "x".into())]
    );

    // The client moves its position and forgets partition 0.
    let inc = c.call(FV, &session_fetch(id, 3, &[(1, 1)], &[0])).await;
    assert!(inc.responses.is_empty(), "position at the end: nothing new");
    p.call(9, &produce_request("t", 0, batch(&["y"], PLAIN), 1, None))
        .await;
    let inc = c.call(FV, &session_fetch(id, 4, &[], &[])).await;
    assert!(inc.responses.is_empty(), "partition 0 was forgotten");

    // Wrong epoch, unknown session.
    let bad = c.call(FV, &session_fetch(id, 9, &[], &[])).await;
    assert_eq!(
        (bad.error_code, bad.session_id),
        (71, 0),
        "INVALID_FETCH_SESSION_EPOCH"
    );
    let bad = c.call(FV, &session_fetch(id + 100, 1, &[], &[])).await;
    assert_eq!(bad.error_code, 70, "FETCH_SESSION_ID_NOT_FOUND");
    // Closing the session (epoch -1) gives a sessionless full answer.
    let closed = c.call(FV, &session_fetch(id, -1, &[(0, 0)], &[])).await;
    assert_eq!((closed.error_code, closed.session_id), (0, 0));
    let gone = c.call(FV, &session_fetch(id, 5, &[], &[])).await;
    assert_eq!(gone.error_code, 70);
}

#[tokio::test]
async fn out_of_range_and_log_start() {
    let (cluster, mut c, mut p) = setup(1).await;
    for v in ["a", "b", "c"] {
        p.call(9, &produce_request("t", 0, batch(&[v], PLAIN), 1, None))
            .await;
    }
    cluster
        .with_state(|s| s.partition_mut("t", 0).unwrap().log.delete_before(2))
        .await
        .unwrap();
    let resp = c.call(FV, &fetch_request("t", 0, 1)).await;
    let part = &resp.responses[0].partitions[0];
    assert_eq!(
        (part.error_code, part.log_start_offset, part.high_watermark),
        (1, 2, 3),
        "OFFSET_OUT_OF_RANGE"
    );
    let resp = c.call(FV, &fetch_request("t", 0, 4)).await;
    assert_eq!(resp.responses[0].partitions[0].error_code, 1);
    let resp = c.call(FV, &fetch_request("t", 0, 2)).await;
    let part = &resp.responses[0].partitions[0];
    assert_eq!(part.log_start_offset, 2);
    assert_eq!(
        values(part.records.as_ref().unwrap()),
        vec![(2, "c".into())]
    );
}

/// Appends a transactional batch directly to the log (the coordinator's
/// AddPartitionsToTxn is tk-coord's; this test is about the log and Fetch).
async fn txn_append(cluster: &Cluster, pid: i64, seq: i32, values: &'static [&'static str]) {
    cluster
        .with_state(move |s| {
            let bytes = batch(
                values,
                Producer {
                    id: pid,
                    epoch: 0,
                    seq,
                    transactional: true,
                },
            );
            let h = BatchHeader::parse(&bytes).unwrap();
            s.partition_mut("t", 0)
                .unwrap()
                .log
                .append_produced(vec![(h, bytes)], 0)
                .unwrap();
        })
        .await
        .unwrap();
}

async fn marker(cluster: &Cluster, pid: i64, kind: ControlKind) -> i64 {
    cluster
        .with_state(move |s| s.append_marker("t", 0, pid, 0, kind, 0).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn read_committed_stops_at_the_lso_and_lists_aborted_transactions() {
    let (cluster, mut c, mut p) = setup(1).await;
    p.call(
        9,
        &produce_request("t", 0, batch(&["plain"], PLAIN), 1, None),
    )
    .await; // offset 0
    txn_append(&cluster, 100, 0, &["aborted-1", "aborted-2"]).await; // 1, 2
    txn_append(&cluster, 200, 0, &["committed"]).await; // 3
    let committed_fetch = fetch_request("t", 0, 0).with_isolation_level(1);

    let resp = c.call(FV, &committed_fetch).await;
    let part = &resp.responses[0].partitions[0];
    assert_eq!((part.last_stable_offset, part.high_watermark), (1, 4));
    assert_eq!(
        values(part.records.as_ref().unwrap()),
        vec![(0, "plain".into())],
        "nothing above the LSO"
    );
    let uncommitted = c.call(FV, &fetch_request("t", 0, 0)).await;
    assert_eq!(
        values(
            uncommitted.responses[0].partitions[0]
                .records
                .as_ref()
                .unwrap()
        )
        .len(),
        4
    );
    assert!(
        uncommitted.responses[0].partitions[0]
            .aborted_transactions
            .is_none()
    );

    assert_eq!(marker(&cluster, 100, ControlKind::Abort).await, 4);
    let resp = c.call(FV, &committed_fetch).await;
    let part = &resp.responses[0].partitions[0];
    assert_eq!(part.last_stable_offset, 3, "producer 200 is still open");
    let aborted = part.aborted_transactions.as_ref().unwrap();
    assert_eq!(aborted.len(), 1);
    assert_eq!(
        (aborted[0].producer_id.0, aborted[0].first_offset),
        (100, 1)
    );

    assert_eq!(marker(&cluster, 200, ControlKind::Commit).await, 5);
    let resp = c.call(FV, &committed_fetch).await;
    let part = &resp.responses[0].partitions[0];
    assert_eq!((part.last_stable_offset, part.high_watermark), (6, 6));
    assert_eq!(
        values(part.records.as_ref().unwrap()).len(),
        4,
        "control records are not data"
    );
    // A fetch starting after the aborted transaction does not list it.
    let resp = c
        .call(FV, &fetch_request("t", 0, 5).with_isolation_level(1))
        .await;
    assert!(
        resp.responses[0].partitions[0]
            .aborted_transactions
            .as_ref()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn max_bytes_still_returns_one_whole_batch() {
    let (_cluster, mut c, mut p) = setup(1).await;
    p.call(
        9,
        &produce_request("t", 0, batch(&["aaaaaaaaaa"], PLAIN), 1, None),
    )
    .await;
    p.call(
        9,
        &produce_request("t", 0, batch(&["bbbbbbbbbb"], PLAIN), 1, None),
    )
    .await;
    let mut req = fetch_request("t", 0, 0).with_max_bytes(10);
    req.topics[0].partitions[0].partition_max_bytes = 10;
    let resp = c.call(FV, &req).await;
    assert_eq!(
        values(resp.responses[0].partitions[0].records.as_ref().unwrap()),
        vec![(0, "aaaaaaaaaa".into())]
    );
}

#[tokio::test(start_paused = true)]
async fn a_leader_move_answers_parked_fetches_and_fences_old_epochs() {
    let cluster = Cluster::builder().brokers(2).build().await.unwrap();
    cluster
        .create_topic("t", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "c");
    let start = Instant::now();
    let mut req = fetch_request("t", 0, 0).with_max_wait_ms(10_000);
    req.topics[0].partitions[0].current_leader_epoch = 0;
    c.send_only(FV, &req).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    cluster.move_leader("t", 0, 1).await.unwrap();
    let resp = c.recv::<FetchRequest>(FV).await;
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(100),
        "answered at the move, not at max wait"
    );
    assert_eq!(
        resp.responses[0].partitions[0].error_code, 6,
        "NOT_LEADER_OR_FOLLOWER"
    );

    // At the new leader, the old epoch is fenced and a future one unknown.
    let mut c1 = TestClient::new(cluster.connect_duplex(1).await.unwrap(), "c");
    let resp = c1.call(FV, &req.clone().with_max_wait_ms(0)).await;
    assert_eq!(
        resp.responses[0].partitions[0].error_code, 74,
        "FENCED_LEADER_EPOCH"
    );
    req.topics[0].partitions[0].current_leader_epoch = 2;
    let resp = c1.call(FV, &req.clone().with_max_wait_ms(0)).await;
    assert_eq!(
        resp.responses[0].partitions[0].error_code, 75,
        "UNKNOWN_LEADER_EPOCH"
    );
    req.topics[0].partitions[0].current_leader_epoch = 1;
    let resp = c1.call(FV, &req.with_max_wait_ms(0)).await;
    assert_eq!(resp.responses[0].partitions[0].error_code, 0);
}

/// Kafka's incremental fetch sessions rotate: a partition that returned
/// records moves to the end of the session (`IncrementalFetchContext`), so
/// with a byte budget for one batch per response, two busy partitions take
/// turns instead of the first one starving the second.
#[tokio::test]
async fn incremental_sessions_move_partitions_that_returned_data_to_the_end() {
    let (_cluster, mut c, mut p) = setup(2).await;
    for v in ["a", "b", "c"] {
        p.call(9, &produce_request("t", 0, batch(&[v], PLAIN), 1, None))
            .await;
    }
    p.call(9, &produce_request("t", 1, batch(&["x"], PLAIN), 1, None))
        .await;
    let one_batch = |req: FetchRequest| req.with_max_bytes(1);
    let full = c
        .call(FV, &one_batch(session_fetch(0, 0, &[(0, 0), (1, 0)], &[])))
        .await;
    let id = full.session_id;
    let got = |r: &weir_protocol::kafka_protocol::messages::FetchResponse| -> Vec<(i32, Vec<(i64, String)>)> {
        r.responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter_map(|p| {
                let v = values(p.records.as_ref()?);
                (!v.is_empty()).then_some((p.partition_index, v))
            })
            .collect()
    };
    assert_eq!(got(&full), vec![(0, vec![(0, "a".into())])]);
    // Partition 0 first in the session: it gets the budget and moves last.
    let inc = c
        .call(FV, &one_batch(session_fetch(id, 1, &[(0, 1)], &[])))
        .await;
    assert_eq!(got(&inc), vec![(0, vec![(1, "b".into())])]);
    // Now partition 1 comes first.
    let inc = c
        .call(FV, &one_batch(session_fetch(id, 2, &[(0, 2)], &[])))
        .await;
    assert_eq!(
        got(&inc),
        vec![(1, vec![(0, "x".into())])],
        "partition 1 starved behind partition 0"
    );
}
