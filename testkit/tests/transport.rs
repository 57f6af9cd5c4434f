//! Transport: ApiVersions over TCP and duplex, the v0 fallback, and bad input
//! closing only the offending connection.

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::TestClient;
use tokio::net::TcpStream;
use weir_protocol::ApiKey;
use weir_protocol::api::decode_response;
use weir_protocol::kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
use weir_testkit::Cluster;
use weir_testkit::handlers::supported_versions;

#[tokio::test]
async fn api_versions_over_tcp_lists_exactly_the_handlers() {
    let cluster = Cluster::builder().brokers(3).build().await.unwrap();
    let addrs: Vec<String> = cluster.bootstrap().split(',').map(str::to_owned).collect();
    assert_eq!(addrs.len(), 3);
    for addr in addrs {
        let mut c = TestClient::new(TcpStream::connect(&addr).await.unwrap(), "t");
        let resp = c.call(3, &ApiVersionsRequest::default()).await;
        assert_eq!(resp.error_code, 0);
        let got: Vec<(i16, i16, i16)> = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        let want: Vec<(i16, i16, i16)> = supported_versions()
            .into_iter()
            .map(|(k, min, max)| (k as i16, min, max))
            .collect();
        assert_eq!(got, want);
        assert!(
            got.iter()
                .any(|(k, _, max)| *k == ApiKey::Fetch as i16 && *max == 12)
        );
    }
}

#[tokio::test]
async fn unsupported_api_versions_version_gets_a_v0_error_body() {
    let cluster = Cluster::builder().build().await.unwrap();
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "t");
    // v4 is valid for kafka-protocol but beyond what the testkit advertises.
    c.send_only(4, &ApiVersionsRequest::default()).await;
    let frame = c.recv_frame().await.unwrap();
    let (_, resp) = decode_response::<ApiVersionsRequest>(frame, 0).unwrap();
    assert_eq!(resp.error_code, 35, "UNSUPPORTED_VERSION");
    assert!(
        resp.api_keys
            .iter()
            .any(|k| k.api_key == ApiKey::ApiVersions as i16 && k.max_version == 3)
    );

    // A version kafka-protocol itself cannot parse (v99) gets the same answer.
    let mut raw = Vec::new();
    let body: [u8; 10] = [0, 18, 0, 99, 0, 0, 0, 7, 0xff, 0xff];
    raw.extend_from_slice(&(body.len() as i32).to_be_bytes());
    raw.extend_from_slice(&body);
    c.send_raw(&raw).await;
    let frame = c.recv_frame().await.unwrap();
    let (corr, resp) = decode_response::<ApiVersionsRequest>(frame, 0).unwrap();
    assert_eq!((corr, resp.error_code), (7, 35));
}

#[tokio::test]
async fn garbage_closes_only_that_connection() {
    let cluster = Cluster::builder().build().await.unwrap();
    let mut good = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "good");
    let mut bad = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "bad");
    // A Metadata v1 header followed by a topic count promising far more than is there.
    let body: [u8; 14] = [0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff];
    let mut raw = (body.len() as i32).to_be_bytes().to_vec();
    raw.extend_from_slice(&body);
    bad.send_raw(&raw).await;
    assert!(
        bad.recv_frame().await.is_none(),
        "the bad connection is closed"
    );

    let mut neg = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "neg");
    neg.send_raw(&(-1i32).to_be_bytes()).await;
    assert!(
        neg.recv_frame().await.is_none(),
        "a negative frame length closes the connection"
    );

    let resp = good
        .call(12, &MetadataRequest::default().with_topics(Some(vec![])))
        .await;
    assert_eq!(resp.brokers.len(), 1, "other connections are unaffected");
}

#[tokio::test]
async fn unadvertised_versions_close_the_connection() {
    let cluster = Cluster::builder().build().await.unwrap();
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "t");
    // Metadata v13 decodes fine but is not advertised.
    c.send_only(13, &MetadataRequest::default()).await;
    assert!(c.recv_frame().await.is_none());
}

/// xorshift64*: a deterministic byte source, so a failure reproduces.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed >> 12;
    *seed ^= *seed << 25;
    *seed ^= *seed >> 27;
    seed.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

#[tokio::test]
async fn random_requests_never_take_the_cluster_down() {
    let cluster = Cluster::builder().build().await.unwrap();
    cluster
        .create_topic("t", 2, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let mut seed = 0x5eed_u64;
    for round in 0..300i32 {
        let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "fuzz");
        // A real API key and a plausible version, then random bytes: this
        // reaches every body decoder and every handler, not just the framing.
        let api = [
            0i16, 1, 2, 3, 8, 9, 10, 11, 12, 14, 18, 19, 20, 21, 22, 24, 25, 26, 28, 32, 37,
        ][(next(&mut seed) % 21) as usize];
        let version = (next(&mut seed) % 14) as i16;
        let len = (next(&mut seed) % 200) as usize;
        let mut body = Vec::with_capacity(8 + len);
        body.extend_from_slice(&api.to_be_bytes());
        body.extend_from_slice(&version.to_be_bytes());
        body.extend_from_slice(&round.to_be_bytes());
        body.extend((0..len).map(|_| next(&mut seed) as u8));
        let mut frame = (body.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        c.send_raw(&frame).await;
        // Either an answer or a closed connection; never a hang or a crash.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), c.recv_frame())
            .await
            .expect("every malformed request is answered or closed at once");
    }
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "after");
    let md = c
        .call(12, &MetadataRequest::default().with_topics(None))
        .await;
    assert_eq!(md.topics.len(), 1, "the cluster still serves requests");
}
