//! Throughput of the testkit itself (not a pass/fail test): one client
//! producing then fetching through an in-memory connection. Heavy, so it
//! runs only with `WEIR_TESTKIT_THROUGHPUT=1`; use a release build:
//!
//! ```sh
//! WEIR_TESTKIT_THROUGHPUT=1 cargo test --release -p weir-testkit --test throughput -- --nocapture
//! ```

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Instant;

use common::{PLAIN, TestClient, batch, fetch_request, produce_request};
use weir_testkit::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_and_fetch_throughput() {
    if std::env::var("WEIR_TESTKIT_THROUGHPUT").as_deref() != Ok("1") {
        println!("skipped: produce_and_fetch_throughput: set WEIR_TESTKIT_THROUGHPUT=1 to measure");
        return;
    }
    const BATCHES: usize = 5_000;
    let cluster = Cluster::builder().build().await.unwrap();
    cluster
        .create_topic("bench", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "bench");
    let values: Vec<String> = (0..100).map(|i| format!("{i:0>100}")).collect();
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let records = batch(&refs, PLAIN);
    let batch_bytes = records.len();

    let start = Instant::now();
    for _ in 0..BATCHES {
        let resp = c
            .call(9, &produce_request("bench", 0, records.clone(), 1, None))
            .await;
        assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    }
    let produce = start.elapsed();

    let start = Instant::now();
    let mut offset = 0;
    let mut fetched = 0usize;
    while offset < (BATCHES * 100) as i64 {
        let resp = c.call(12, &fetch_request("bench", 0, offset)).await;
        let part = &resp.responses[0].partitions[0];
        let bytes = part.records.as_ref().unwrap();
        fetched += bytes.len();
        let batches = weir_protocol::records::split_batches(bytes).unwrap();
        offset = batches.last().unwrap().0.next_offset();
    }
    let fetch = start.elapsed();
    let mb = |bytes: usize| bytes as f64 / 1e6;
    println!(
        "produce: {BATCHES} requests of {batch_bytes} B (100 records) in {produce:?}: {:.0} req/s, {:.1} MB/s, {:.0} records/s",
        BATCHES as f64 / produce.as_secs_f64(),
        mb(BATCHES * batch_bytes) / produce.as_secs_f64(),
        (BATCHES * 100) as f64 / produce.as_secs_f64()
    );
    println!(
        "fetch: {:.1} MB in {fetch:?}: {:.1} MB/s",
        mb(fetched),
        mb(fetched) / fetch.as_secs_f64()
    );
}
