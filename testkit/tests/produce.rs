//! Produce: offsets, acks, leadership, and the idempotent producer checks.

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{PLAIN, Producer, TestClient, batch, fetch_request, produce_request, values};
use weir_protocol::kafka_protocol::messages::{FetchRequest, ProduceRequest};
use weir_testkit::Cluster;

const V: i16 = 9;

fn idem(seq: i32, epoch: i16) -> Producer {
    Producer {
        id: 42,
        epoch,
        seq,
        transactional: false,
    }
}

async fn setup() -> (Cluster, TestClient<tokio::io::DuplexStream>) {
    let cluster = Cluster::builder().build().await.unwrap();
    cluster
        .create_topic("t", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let client = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "p");
    (cluster, client)
}

async fn produce(c: &mut TestClient<tokio::io::DuplexStream>, records: bytes::Bytes) -> (i16, i64) {
    let resp = c.call(V, &produce_request("t", 0, records, -1, None)).await;
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

#[tokio::test]
async fn offsets_are_assigned_and_bytes_come_back_unchanged() {
    let (cluster, mut c) = setup().await;
    assert_eq!(
        produce(&mut c, batch(&["a", "b", "c"], PLAIN)).await,
        (0, 0)
    );
    assert_eq!(produce(&mut c, batch(&["d"], PLAIN)).await, (0, 3));
    let resp = c.call(12, &fetch_request("t", 0, 0)).await;
    let records = resp.responses[0].partitions[0].records.clone().unwrap();
    // decode_batches verifies every CRC: rewriting offsets kept them valid.
    assert_eq!(
        values(&records),
        vec![
            (0, "a".into()),
            (1, "b".into()),
            (2, "c".into()),
            (3, "d".into())
        ]
    );
    assert_eq!(cluster.offsets("t", 0).await.unwrap(), (0, 4, 4));
}

#[tokio::test]
async fn retried_batches_are_acknowledged_with_their_original_offset() {
    let (cluster, mut c) = setup().await;
    assert_eq!(
        produce(&mut c, batch(&["a", "b"], idem(0, 0))).await,
        (0, 0)
    );
    assert_eq!(produce(&mut c, batch(&["c"], idem(2, 0))).await, (0, 2));
    // Retry of the first batch: acknowledged at offset 0, not appended again.
    assert_eq!(
        produce(&mut c, batch(&["a", "b"], idem(0, 0))).await,
        (0, 0)
    );
    assert_eq!(cluster.offsets("t", 0).await.unwrap().2, 3);
}

#[tokio::test]
async fn sequence_gaps_are_rejected() {
    let (cluster, mut c) = setup().await;
    assert_eq!(produce(&mut c, batch(&["a"], idem(0, 0))).await, (0, 0));
    assert_eq!(
        produce(&mut c, batch(&["c"], idem(2, 0))).await.0,
        45,
        "OUT_OF_ORDER_SEQUENCE_NUMBER"
    );
    // A producer with no state here may start anywhere (Kafka's rule, so
    // that producers survive DeleteRecords); its next batch must follow.
    let other = Producer {
        id: 7,
        epoch: 0,
        seq: 5,
        transactional: false,
    };
    assert_eq!(produce(&mut c, batch(&["x"], other)).await, (0, 1));
    let gap = Producer { seq: 7, ..other };
    assert_eq!(produce(&mut c, batch(&["y"], gap)).await.0, 45);
    assert_eq!(
        cluster.offsets("t", 0).await.unwrap().2,
        2,
        "only in-sequence batches were appended"
    );
}

#[tokio::test]
async fn an_older_epoch_is_fenced() {
    let (_cluster, mut c) = setup().await;
    assert_eq!(produce(&mut c, batch(&["a"], idem(0, 0))).await, (0, 0));
    // A bumped epoch restarts the sequence at 0.
    assert_eq!(produce(&mut c, batch(&["b"], idem(0, 1))).await, (0, 1));
    assert_eq!(
        produce(&mut c, batch(&["z"], idem(1, 0))).await.0,
        47,
        "INVALID_PRODUCER_EPOCH"
    );
    // A bumped epoch that does not start at 0 is out of order.
    assert_eq!(produce(&mut c, batch(&["c"], idem(3, 2))).await.0, 45);
}

#[tokio::test]
async fn acks_zero_gets_no_response_and_still_appends() {
    let (cluster, mut c) = setup().await;
    c.send_only(V, &produce_request("t", 0, batch(&["a"], PLAIN), 0, None))
        .await;
    // The next response on the connection is the Fetch's, not a Produce's.
    let resp = c.call(12, &fetch_request("t", 0, 0)).await;
    assert_eq!(
        values(resp.responses[0].partitions[0].records.as_ref().unwrap()).len(),
        1
    );
    assert_eq!(cluster.offsets("t", 0).await.unwrap().2, 1);
    // An error with acks=0 closes the connection.
    c.send_only(
        V,
        &produce_request("nope", 0, batch(&["a"], PLAIN), 0, None),
    )
    .await;
    assert!(c.recv_frame().await.is_none());
}

#[tokio::test]
async fn bad_produce_requests_get_per_partition_errors() {
    let (_cluster, mut c) = setup().await;
    let resp = c
        .call(
            V,
            &produce_request("nope", 0, batch(&["a"], PLAIN), -1, None),
        )
        .await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    let resp = c
        .call(V, &produce_request("t", 0, batch(&["a"], PLAIN), 2, None))
        .await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 21,
        "INVALID_REQUIRED_ACKS"
    );
    let mut corrupt = batch(&["a"], PLAIN).to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    let resp = c
        .call(V, &produce_request("t", 0, corrupt.into(), -1, None))
        .await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 2,
        "CORRUPT_MESSAGE"
    );
    // A transactional batch under a transactional id that never called
    // InitProducerId: Kafka's leader verifies it with the transaction
    // coordinator (KIP-890), which knows no such id.
    let txn = Producer {
        id: 9,
        epoch: 0,
        seq: 0,
        transactional: true,
    };
    let resp = c
        .call(
            V,
            &produce_request("t", 0, batch(&["a"], txn), -1, Some("tx")),
        )
        .await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 49,
        "INVALID_PRODUCER_ID_MAPPING"
    );
}

#[tokio::test]
async fn only_the_leader_accepts_writes_and_reads() {
    let cluster = Cluster::builder().brokers(3).build().await.unwrap();
    cluster
        .create_topic("t", 3, [] as [(&str, &str); 0])
        .await
        .unwrap();
    // Partition 1's leader is broker 1; broker 0 refuses it.
    let mut c0 = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "p");
    let resp: <ProduceRequest as weir_protocol::kafka_protocol::protocol::Request>::Response = c0
        .call(V, &produce_request("t", 1, batch(&["a"], PLAIN), 1, None))
        .await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 6,
        "NOT_LEADER_OR_FOLLOWER"
    );
    let mut c1 = TestClient::new(cluster.connect_duplex(1).await.unwrap(), "p");
    let resp = c1
        .call(V, &produce_request("t", 1, batch(&["a"], PLAIN), 1, None))
        .await;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);

    cluster.move_leader("t", 1, 2).await.unwrap();
    let resp = c1
        .call(V, &produce_request("t", 1, batch(&["b"], PLAIN), 1, None))
        .await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 6,
        "the old leader refuses"
    );
    let fetch: FetchRequest = fetch_request("t", 1, 0);
    let resp = c1.call(12, &fetch).await;
    assert_eq!(resp.responses[0].partitions[0].error_code, 6);
    let mut c2 = TestClient::new(cluster.connect_duplex(2).await.unwrap(), "p");
    let resp = c2.call(12, &fetch).await;
    assert_eq!(
        values(resp.responses[0].partitions[0].records.as_ref().unwrap()),
        vec![(0, "a".into())]
    );
}

#[tokio::test]
async fn batches_above_max_message_bytes_are_refused() {
    let cluster = Cluster::builder().build().await.unwrap();
    cluster
        .create_topic("small", 1, [("max.message.bytes", "100")])
        .await
        .unwrap();
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "p");
    let big = "x".repeat(200);
    let resp = c
        .call(
            V,
            &produce_request("small", 0, batch(&[&big], PLAIN), 1, None),
        )
        .await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 10,
        "MESSAGE_TOO_LARGE"
    );
    let resp = c
        .call(
            V,
            &produce_request("small", 0, batch(&["ok"], PLAIN), 1, None),
        )
        .await;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
}
