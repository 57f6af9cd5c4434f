//! Compaction of `cleanup.policy=compact` topics, seen through Fetch.

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use bytes::Bytes;
use common::{TestClient, fetch_request, produce_request};
use weir_protocol::records::{
    BatchBuilder, BatchOptions, DecodeOptions, RecordInput, decode_batches,
};
use weir_testkit::{Cluster, CompactionStats};

fn keyed(records: &[(Option<&str>, Option<&str>)]) -> Bytes {
    let mut b = BatchBuilder::new(BatchOptions::default());
    for (k, v) in records {
        b.push(RecordInput {
            timestamp: 1,
            key: k.map(|k| Bytes::from(k.to_owned())),
            value: v.map(|v| Bytes::from(v.to_owned())),
            headers: vec![],
        });
    }
    b.build().unwrap()
}

#[tokio::test]
async fn compaction_keeps_the_latest_value_per_key_at_its_offset() {
    let cluster = Cluster::builder().build().await.unwrap();
    cluster
        .create_topic("table", 1, [("cleanup.policy", "compact")])
        .await
        .unwrap();
    cluster
        .create_topic("stream", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "c");
    let produce = |records: Bytes| produce_request("table", 0, records, -1, None);
    c.call(
        9,
        &produce(keyed(&[(Some("a"), Some("1")), (Some("b"), Some("1"))])),
    )
    .await;
    c.call(9, &produce(keyed(&[(Some("a"), Some("2"))]))).await;
    c.call(9, &produce(keyed(&[(Some("b"), None)]))).await;
    let resp = c.call(9, &produce(keyed(&[(None, Some("x"))]))).await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 87,
        "INVALID_RECORD: no key"
    );

    let stats = cluster.compact("table", false).await.unwrap();
    assert_eq!(
        stats,
        CompactionStats {
            records_removed: 2,
            batches_removed: 1,
            empty_batches_kept: 0
        }
    );
    let fetched = c.call(12, &fetch_request("table", 0, 0)).await;
    let part = &fetched.responses[0].partitions[0];
    assert_eq!(part.high_watermark, 4, "offsets never move");
    let decoded =
        decode_batches(part.records.as_ref().unwrap(), &DecodeOptions::default()).unwrap();
    let got: Vec<(i64, Option<Bytes>, Option<Bytes>)> = decoded
        .batches
        .iter()
        .flat_map(|b| &b.records)
        .map(|r| (r.offset, r.key.clone(), r.value.clone()))
        .collect();
    let b = |s: &str| Some(Bytes::from(s.to_owned()));
    assert_eq!(
        got,
        vec![(2, b("a"), b("2")), (3, b("b"), None)],
        "the tombstone is kept"
    );

    let stats = cluster.compact("table", true).await.unwrap();
    assert_eq!((stats.records_removed, stats.batches_removed), (1, 1));
    let fetched = c.call(12, &fetch_request("table", 0, 3)).await;
    assert!(
        fetched.responses[0].partitions[0]
            .records
            .as_ref()
            .unwrap()
            .is_empty()
    );

    assert!(
        cluster.compact("stream", false).await.is_err(),
        "a delete-policy topic is not compacted"
    );
}
