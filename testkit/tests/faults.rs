//! Fault injection: intercepts, network partitions, broker kill/restart and
//! the request log.

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{PLAIN, TestClient, batch, fetch_request, produce_request, values};
use tokio::net::TcpStream;
use tokio::time::Instant;
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::{HeartbeatRequest, MetadataRequest, ProduceRequest};
use weir_protocol::kafka_protocol::protocol::StrBytes;
use weir_testkit::{
    ClientSelector, Cluster, DataOnRestart, Intercept, InterceptAction, PartitionTarget,
    RequestMatcher,
};

const PV: i16 = 9;

async fn cluster_with_topic(brokers: i32) -> Cluster {
    let cluster = Cluster::builder().brokers(brokers).build().await.unwrap();
    cluster
        .create_topic("t", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    cluster
}

fn produce() -> ProduceRequest {
    produce_request("t", 0, batch(&["a"], PLAIN), 1, None)
}

#[tokio::test]
async fn an_error_intercept_answers_a_counted_number_of_requests() {
    let cluster = cluster_with_topic(1).await;
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "p");
    let matcher = RequestMatcher::api(ApiKey::Produce).client("p");
    cluster
        .intercept(Intercept::new(matcher, InterceptAction::Error(6)).times(2))
        .await
        .unwrap();
    for _ in 0..2 {
        let resp = c.call(PV, &produce()).await;
        assert_eq!(resp.responses[0].partition_responses[0].error_code, 6);
    }
    let resp = c.call(PV, &produce()).await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 0,
        "the intercept is used up"
    );
    assert_eq!(
        cluster.offsets("t", 0).await.unwrap().2,
        1,
        "intercepted requests were not handled"
    );
}

#[tokio::test]
async fn intercepts_match_on_client_id_only_when_asked() {
    let cluster = cluster_with_topic(1).await;
    let mut other = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "other");
    let mut target = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "target");
    let id = cluster
        .intercept(Intercept::new(
            RequestMatcher::api(ApiKey::Produce).client("target"),
            InterceptAction::Error(7),
        ))
        .await
        .unwrap();
    assert_eq!(
        other.call(PV, &produce()).await.responses[0].partition_responses[0].error_code,
        0
    );
    assert_eq!(
        target.call(PV, &produce()).await.responses[0].partition_responses[0].error_code,
        7
    );
    assert!(cluster.remove_fault(id).await.unwrap());
    assert_eq!(
        target.call(PV, &produce()).await.responses[0].partition_responses[0].error_code,
        0
    );
}

#[tokio::test(start_paused = true)]
async fn delay_and_drop_intercepts() {
    let cluster = cluster_with_topic(1).await;
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "c");
    let delay = Intercept::new(
        RequestMatcher::api(ApiKey::Metadata),
        InterceptAction::Delay(Duration::from_secs(2)),
    );
    cluster.intercept(delay.times(1)).await.unwrap();
    let start = Instant::now();
    c.call(12, &MetadataRequest::default()).await;
    assert_eq!(start.elapsed(), Duration::from_secs(2));

    cluster
        .intercept(Intercept::new(
            RequestMatcher::api(ApiKey::Metadata),
            InterceptAction::Drop,
        ))
        .await
        .unwrap();
    c.send_only(12, &MetadataRequest::default()).await;
    let waited = tokio::time::timeout(Duration::from_secs(60), c.recv_frame()).await;
    assert!(waited.is_err(), "a dropped request is never answered");
}

#[tokio::test]
async fn a_close_intercept_closes_the_connection() {
    let cluster = cluster_with_topic(1).await;
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "c");
    cluster
        .intercept(
            Intercept::new(
                RequestMatcher::api(ApiKey::Produce),
                InterceptAction::CloseConnection,
            )
            .times(1),
        )
        .await
        .unwrap();
    c.send_only(PV, &produce()).await;
    assert!(c.recv_frame().await.is_none());
    let mut again = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "c");
    assert_eq!(
        again.call(PV, &produce()).await.responses[0].partition_responses[0].error_code,
        0
    );
}

#[tokio::test(start_paused = true)]
async fn a_partitioned_client_is_cut_off_from_one_broker_until_healed() {
    let cluster = Cluster::builder().brokers(2).build().await.unwrap();
    let mut to0 = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "zombie");
    let mut to1 = TestClient::new(cluster.connect_duplex(1).await.unwrap(), "zombie");
    let mut bystander = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "ok");
    let id = cluster
        .partition_client(
            ClientSelector::ClientId("zombie".into()),
            PartitionTarget::Broker(0),
        )
        .await
        .unwrap();
    to0.send_only(12, &MetadataRequest::default()).await;
    assert!(
        tokio::time::timeout(Duration::from_secs(30), to0.recv_frame())
            .await
            .is_err()
    );
    to1.call(12, &MetadataRequest::default()).await;
    bystander.call(12, &MetadataRequest::default()).await;
    assert!(cluster.remove_fault(id).await.unwrap());
    // The lost request stays lost; a new connection works again.
    let mut fresh = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "zombie");
    fresh.call(12, &MetadataRequest::default()).await;
}

fn heartbeat(group: &str) -> HeartbeatRequest {
    HeartbeatRequest::default()
        .with_group_id(weir_protocol::kafka_protocol::messages::GroupId(
            StrBytes::from_string(group.to_owned()),
        ))
        .with_generation_id(1)
        .with_member_id(StrBytes::from_static_str("m"))
}

#[tokio::test(start_paused = true)]
async fn a_client_can_be_cut_off_from_one_group_coordinator() {
    let cluster = Cluster::builder().build().await.unwrap();
    cluster
        .partition_client(
            ClientSelector::ClientId("member".into()),
            PartitionTarget::GroupCoordinator("g".into()),
        )
        .await
        .unwrap();
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "member");
    c.send_only(4, &heartbeat("g")).await;
    assert!(
        tokio::time::timeout(Duration::from_secs(30), c.recv_frame())
            .await
            .is_err(),
        "group g is unreachable"
    );
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "member");
    c.send_only(4, &heartbeat("h")).await;
    // Group h's coordinator answers (or, without a group handler, closes):
    // either way the request is not lost.
    assert!(
        tokio::time::timeout(Duration::from_secs(30), c.recv_frame())
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn kill_and_restart_a_broker_keeping_or_losing_data() {
    let cluster = cluster_with_topic(1).await;
    let addr = cluster.broker_addr(0).unwrap();
    let mut c = TestClient::new(TcpStream::connect(addr).await.unwrap(), "c");
    c.call(PV, &produce()).await;

    cluster.kill_broker(0, DataOnRestart::Keep).await.unwrap();
    assert!(
        c.recv_frame().await.is_none(),
        "open connections are closed"
    );
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "nothing listens while down"
    );
    assert!(cluster.connect_duplex(0).await.is_err());
    cluster.restart_broker(0).await.unwrap();
    let mut c = TestClient::new(TcpStream::connect(addr).await.unwrap(), "c");
    let resp = c.call(12, &fetch_request("t", 0, 0)).await;
    assert_eq!(
        values(resp.responses[0].partitions[0].records.as_ref().unwrap()),
        vec![(0, "a".into())]
    );

    cluster.kill_broker(0, DataOnRestart::Lose).await.unwrap();
    cluster.restart_broker(0).await.unwrap();
    assert_eq!(
        cluster.offsets("t", 0).await.unwrap(),
        (0, 0, 0),
        "the data is gone"
    );
}

#[tokio::test]
async fn metadata_reports_a_dead_leader() {
    let cluster = Cluster::builder().brokers(2).build().await.unwrap();
    cluster
        .create_topic("t", 2, [] as [(&str, &str); 0])
        .await
        .unwrap();
    cluster.kill_broker(1, DataOnRestart::Keep).await.unwrap();
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "c");
    let md = c
        .call(12, &MetadataRequest::default().with_topics(None))
        .await;
    assert_eq!(md.brokers.len(), 1);
    let p1 = &md.topics[0].partitions[1];
    assert_eq!(
        (p1.error_code, p1.leader_id.0),
        (5, -1),
        "LEADER_NOT_AVAILABLE"
    );
    cluster.move_leader("t", 1, 0).await.unwrap();
    let md = c
        .call(12, &MetadataRequest::default().with_topics(None))
        .await;
    let p1 = &md.topics[0].partitions[1];
    assert_eq!((p1.error_code, p1.leader_id.0, p1.leader_epoch), (0, 0, 1));
}

#[tokio::test]
async fn the_request_log_records_every_request() {
    let cluster = cluster_with_topic(1).await;
    let mut c = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "logged");
    c.call(12, &MetadataRequest::default()).await;
    c.call(PV, &produce()).await;
    let log = cluster.requests().await.unwrap();
    let seen: Vec<(ApiKey, i16, Option<String>)> = log
        .iter()
        .map(|r| (r.api_key, r.version, r.client_id.clone()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (ApiKey::Metadata, 12, Some("logged".into())),
            (ApiKey::Produce, PV, Some("logged".into()))
        ]
    );
    assert_eq!(log[0].connection_id, log[1].connection_id);
}

#[tokio::test]
async fn replicated_partitions_fail_over_and_unreplicated_ones_go_offline() {
    let cluster = Cluster::builder().brokers(3).build().await.unwrap();
    cluster
        .create_replicated_topic("r", 3, 3, [] as [(&str, &str); 0])
        .await
        .unwrap();
    cluster
        .create_topic("single", 3, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let mut c0 = TestClient::new(cluster.connect_duplex(0).await.unwrap(), "p");
    c0.call(
        PV,
        &produce_request("r", 0, batch(&["kept"], PLAIN), -1, None),
    )
    .await;

    cluster.kill_broker(0, DataOnRestart::Lose).await.unwrap();
    let mut c1 = TestClient::new(cluster.connect_duplex(1).await.unwrap(), "p");
    let md = c1
        .call(12, &MetadataRequest::default().with_topics(None))
        .await;
    let leader_of =
        |md: &weir_protocol::kafka_protocol::messages::MetadataResponse, topic: &str, p: usize| {
            let t = md
                .topics
                .iter()
                .find(|t| t.name.as_ref().unwrap().as_str() == topic)
                .unwrap();
            (
                t.partitions[p].leader_id.0,
                t.partitions[p].leader_epoch,
                t.partitions[p].error_code,
            )
        };
    assert_eq!(
        leader_of(&md, "r", 0),
        (1, 1, 0),
        "the next replica took over"
    );
    assert_eq!(
        leader_of(&md, "single", 0),
        (-1, 0, 5),
        "no other replica: offline"
    );
    let resp = c1.call(12, &fetch_request("r", 0, 0)).await;
    assert_eq!(
        values(resp.responses[0].partitions[0].records.as_ref().unwrap()),
        vec![(0, "kept".into())]
    );

    cluster.restart_broker(0).await.unwrap();
    let md = c1
        .call(12, &MetadataRequest::default().with_topics(None))
        .await;
    assert_eq!(
        leader_of(&md, "single", 0),
        (0, 1, 0),
        "back online, with a new epoch"
    );
    assert_eq!(
        leader_of(&md, "r", 0),
        (1, 1, 0),
        "a failed-over partition stays where it is"
    );
}
