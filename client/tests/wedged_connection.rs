//! A request swallowed by a network partition wedges its connection (a
//! broker answers a connection's requests in order), so a caller that keeps
//! giving up before its timeout must not keep queueing behind it: once the
//! lost request is past `request.timeout.ms` the connection is replaced.
//! Found by the streams checker (seeds 393 and 691): a stream thread's
//! fetch loop re-issued a Metadata request every round, each abandoned
//! before its timeout, and its partition never resumed after the cut healed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod txn_support;

use std::time::Duration;

use weir_client::Cluster;
use weir_client::cluster::Lane;
use weir_integration::testkit_dial::client_config;
use weir_protocol::kafka_protocol::messages::MetadataRequest;
use weir_testkit::{ClientSelector, PartitionTarget};

#[tokio::test(start_paused = true)]
async fn a_connection_wedged_by_a_lost_request_is_replaced_once_the_request_is_overdue() {
    let kit = txn_support::testkit(1, &["t"]).await;
    let cluster = Cluster::connect(
        client_config(&kit, "cut-off")
            .request_timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let broker = 0;
    cluster
        .request(broker, Lane::Metadata, &MetadataRequest::default())
        .await
        .unwrap();

    let cut = kit
        .partition_client(
            ClientSelector::ClientId("cut-off".to_owned()),
            PartitionTarget::Broker(broker),
        )
        .await
        .unwrap();
    // A caller that gives up after 10 s each time, as a select loop does:
    // every request is abandoned before its own 30 s timeout.
    for _ in 0..4 {
        let gave_up = tokio::time::timeout(
            Duration::from_secs(10),
            cluster.request(broker, Lane::Metadata, &MetadataRequest::default()),
        )
        .await;
        // Abandoned, or (once the first lost request is overdue and the
        // connection replaced) a new connection whose handshake the cut
        // swallows too.
        assert!(!matches!(gave_up, Ok(Ok(_))), "the cut answered");
    }
    kit.remove_fault(cut).await.unwrap();

    // The first lost request is 40 s old: the connection it wedged must be
    // replaced, and the healed broker answers at once.
    let healed = tokio::time::timeout(
        Duration::from_secs(5),
        cluster.request(broker, Lane::Metadata, &MetadataRequest::default()),
    )
    .await;
    assert!(
        matches!(healed, Ok(Ok(_))),
        "still queued behind the lost requests: {healed:?}"
    );
}
