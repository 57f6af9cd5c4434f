//! Cluster tests against fake brokers on loopback.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use weir_protocol::kafka_protocol::messages::find_coordinator_response::Coordinator;
use weir_protocol::kafka_protocol::messages::metadata_response::{
    MetadataResponsePartition, MetadataResponseTopic,
};
use weir_protocol::kafka_protocol::messages::{
    BrokerId as WireId, FetchRequest, FetchResponse, FindCoordinatorResponse, HeartbeatRequest,
    HeartbeatResponse, MetadataResponse, RequestKind, ResponseKind, TopicName,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::*;
use crate::fake_broker::{Handler, Reply, loopback_broker, spawn_broker};

fn config(bootstrap: &[String]) -> ClientConfig {
    ClientConfig::builder()
        .bootstrap_servers(bootstrap.iter().cloned())
        .retry_backoff(Duration::from_millis(1), Duration::from_millis(5))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Metadata naming one broker (node 1 at `port`) and, if given, topic `t`
/// with one partition led by `leader` and the topic error `error`.
fn metadata(port: u16, topic: Option<(i32, i16)>) -> ResponseKind {
    let mut r = MetadataResponse::default()
        .with_controller_id(WireId(1))
        .with_brokers(vec![loopback_broker(1, port)]);
    if let Some((leader, error)) = topic {
        r = r.with_topics(vec![
            MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("t"))))
                .with_error_code(error)
                .with_partitions(vec![
                    MetadataResponsePartition::default()
                        .with_partition_index(0)
                        .with_leader_id(WireId(leader)),
                ]),
        ]);
    }
    ResponseKind::Metadata(r)
}

/// A fake whose handler learns its own port once bound.
async fn broker_with(
    make: impl Fn(u16, &weir_protocol::api::DecodedRequest) -> Option<Reply> + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    let port = Arc::new(std::sync::OnceLock::new());
    let p = Arc::clone(&port);
    let handler: Handler = Arc::new(move |req| make(*p.get().unwrap_or(&0), req));
    let (addr, accepted) = spawn_broker(handler).await;
    let _ = port.set(addr.port());
    (addr.to_string(), accepted)
}

async fn dead_address() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    addr
}

#[tokio::test]
async fn bootstraps_past_a_dead_address_and_names_all_when_none_answers() {
    let (live, _) = broker_with(|port, _| Reply::now(metadata(port, None))).await;
    let dead = dead_address().await;
    let cluster = Cluster::connect(config(&[dead.clone(), live.clone()]))
        .await
        .unwrap();
    let md = cluster.cached_metadata();
    assert_eq!(md.controller_id, 1);
    assert_eq!(md.brokers[&1].addr(), live);

    let other_dead = dead_address().await;
    let err = Cluster::connect(config(&[dead.clone(), other_dead.clone()]))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ClientError::Bootstrap { .. }), "{msg}");
    assert!(msg.contains(&dead) && msg.contains(&other_dead), "{msg}");
}

#[tokio::test]
async fn retry_refreshes_metadata_until_a_new_topic_has_a_leader() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let (addr, _) = broker_with(move |port, req| match &req.body {
        RequestKind::Metadata(m) if m.topics.as_ref().is_some_and(|t| !t.is_empty()) => {
            // The topic is being created: unknown, then leaderless, then led by 1.
            let reply = match c.fetch_add(1, Ordering::SeqCst) {
                0 => metadata(port, Some((-1, 3))),
                1 => metadata(port, Some((-1, 5))),
                _ => metadata(port, Some((1, 0))),
            };
            Reply::now(reply)
        }
        _ => Reply::now(metadata(port, None)),
    })
    .await;
    let cluster = Cluster::connect(config(&[addr])).await.unwrap();
    let first = cluster.partition_leader("t", 0).await.unwrap_err();
    assert!(
        first.is_retriable() && first.needs_metadata_refresh(),
        "{first}"
    );
    assert_eq!(
        first.kafka_code().unwrap().name,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    let leader = cluster
        .retry("leader of t-0", || cluster.partition_leader("t", 0))
        .await
        .unwrap();
    assert_eq!(leader, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // Fresh and error-free now: served from the cache.
    assert_eq!(cluster.partition_leader("t", 0).await.unwrap(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // NOT_LEADER_OR_FOLLOWER-style invalidation forces a refresh.
    cluster.invalidate_topic("t");
    assert_eq!(cluster.partition_leader("t", 0).await.unwrap(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn retry_stops_at_non_retriable_errors_and_at_the_deadline() {
    let (addr, _) = broker_with(|port, _| Reply::now(metadata(port, None))).await;
    let cluster = Cluster::connect(config(&[addr])).await.unwrap();
    let attempts = AtomicUsize::new(0);
    let err = cluster
        .retry("create", || async {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(ClientError::server(36, ApiKey::CreateTopics))
        })
        .await
        .unwrap_err();
    assert_eq!(err.kafka_code().unwrap().name, "TOPIC_ALREADY_EXISTS");
    assert_eq!(attempts.load(Ordering::SeqCst), 1);

    let attempts = AtomicUsize::new(0);
    let backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(2));
    let err = cluster
        .retry_with("produce", backoff, Duration::from_millis(30), || async {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(ClientError::server(7, ApiKey::Produce))
        })
        .await
        .unwrap_err();
    let n = attempts.load(Ordering::SeqCst);
    assert!(n > 1, "retried");
    assert!(
        matches!(&err, ClientError::RetriesExhausted { attempts, .. } if *attempts as usize == n),
        "{err}"
    );
    assert_eq!(err.kafka_code().unwrap().name, "REQUEST_TIMED_OUT");
}

#[tokio::test]
async fn a_held_fetch_does_not_delay_a_heartbeat_on_its_own_lane() {
    let (open, gate) = watch::channel(false);
    let (addr, accepted) = broker_with(move |port, req| match &req.body {
        RequestKind::Fetch(_) => Some(Reply {
            body: ResponseKind::Fetch(FetchResponse::default()),
            hold: Some(gate.clone()),
        }),
        RequestKind::Heartbeat(_) => {
            Reply::now(ResponseKind::Heartbeat(HeartbeatResponse::default()))
        }
        _ => Reply::now(metadata(port, None)),
    })
    .await;
    let cluster = Cluster::connect(config(&[addr])).await.unwrap();
    let fetching = {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            cluster
                .request(1, Lane::Fetch, &FetchRequest::default())
                .await
        })
    };
    // Make sure the fetch is in flight (its connection accepted) first.
    while accepted.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    let hb = cluster
        .request(1, Lane::Coordinator, &HeartbeatRequest::default())
        .await
        .unwrap();
    assert_eq!(hb.error_code, 0);
    assert!(
        !fetching.is_finished(),
        "the fetch is still held by the broker"
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        3,
        "bootstrap, fetch and coordinator lanes"
    );
    open.send(true).unwrap();
    fetching.await.unwrap().unwrap();
}

#[tokio::test]
async fn lost_connections_are_replaced_on_the_next_request() {
    let drops = Arc::new(AtomicUsize::new(0));
    let d = Arc::clone(&drops);
    let (addr, accepted) = broker_with(move |port, req| match &req.body {
        // The first heartbeat kills its connection.
        RequestKind::Heartbeat(_) if d.fetch_add(1, Ordering::SeqCst) == 0 => None,
        RequestKind::Heartbeat(_) => {
            Reply::now(ResponseKind::Heartbeat(HeartbeatResponse::default()))
        }
        _ => Reply::now(metadata(port, None)),
    })
    .await;
    let cluster = Cluster::connect(config(&[addr])).await.unwrap();
    let err = cluster
        .request(1, Lane::Coordinator, &HeartbeatRequest::default())
        .await
        .unwrap_err();
    assert!(err.is_network() && err.is_retriable(), "{err}");
    let before = accepted.load(Ordering::SeqCst);
    cluster
        .request(1, Lane::Coordinator, &HeartbeatRequest::default())
        .await
        .unwrap();
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        before + 1,
        "one new connection"
    );
}

#[tokio::test]
async fn find_coordinator_retries_while_unavailable_then_caches() {
    let lookups = Arc::new(AtomicUsize::new(0));
    let l = Arc::clone(&lookups);
    let (addr, _) = broker_with(move |port, req| match &req.body {
        RequestKind::FindCoordinator(f) => {
            assert_eq!(f.coordinator_keys[0].as_str(), "g1");
            assert_eq!(f.key_type, 0);
            let code = if l.fetch_add(1, Ordering::SeqCst) == 0 {
                15
            } else {
                0
            };
            let c = Coordinator::default()
                .with_key(StrBytes::from_static_str("g1"))
                .with_node_id(WireId(7))
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(i32::from(port))
                .with_error_code(code);
            Reply::now(ResponseKind::FindCoordinator(
                FindCoordinatorResponse::default().with_coordinators(vec![c]),
            ))
        }
        _ => Reply::now(metadata(port, None)),
    })
    .await;
    let cluster = Cluster::connect(config(std::slice::from_ref(&addr)))
        .await
        .unwrap();
    let node = cluster
        .find_coordinator(CoordinatorKind::Group, "g1")
        .await
        .unwrap();
    assert_eq!(node, 7);
    assert_eq!(
        lookups.load(Ordering::SeqCst),
        2,
        "COORDINATOR_NOT_AVAILABLE was retried"
    );
    assert_eq!(
        cluster.broker_address(7).unwrap(),
        addr,
        "a coordinator outside the metadata is dialable"
    );
    assert_eq!(
        cluster
            .find_coordinator(CoordinatorKind::Group, "g1")
            .await
            .unwrap(),
        7
    );
    assert_eq!(lookups.load(Ordering::SeqCst), 2, "cached");
    cluster.invalidate_coordinator(CoordinatorKind::Group, "g1");
    cluster
        .find_coordinator(CoordinatorKind::Group, "g1")
        .await
        .unwrap();
    assert_eq!(lookups.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_throttled_lane_waits_but_other_lanes_do_not() {
    let (addr, _) = broker_with(|port, req| match &req.body {
        RequestKind::Fetch(_) => Reply::now(ResponseKind::Fetch(
            FetchResponse::default().with_throttle_time_ms(10_000),
        )),
        RequestKind::Heartbeat(_) => {
            Reply::now(ResponseKind::Heartbeat(HeartbeatResponse::default()))
        }
        _ => Reply::now(metadata(port, None)),
    })
    .await;
    let cluster = Cluster::connect(config(&[addr])).await.unwrap();
    let start = tokio::time::Instant::now();
    cluster
        .request(1, Lane::Fetch, &FetchRequest::default())
        .await
        .unwrap();
    cluster
        .request(1, Lane::Coordinator, &HeartbeatRequest::default())
        .await
        .unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "the heartbeat was not held back"
    );
    cluster
        .request(1, Lane::Fetch, &FetchRequest::default())
        .await
        .unwrap();
    assert!(
        start.elapsed() >= Duration::from_secs(10),
        "the next fetch waited out the throttle"
    );
}

#[tokio::test]
async fn a_poisoned_connection_fails_in_flight_requests_and_is_replaced() {
    let (open, gate) = watch::channel(false);
    let (addr, accepted) = broker_with(move |port, req| match &req.body {
        RequestKind::Fetch(_) => Some(Reply {
            body: ResponseKind::Fetch(FetchResponse::default()),
            hold: Some(gate.clone()),
        }),
        _ => Reply::now(metadata(port, None)),
    })
    .await;
    let cluster = Cluster::connect(config(&[addr])).await.unwrap();
    let held = {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            cluster
                .request(1, Lane::Fetch, &FetchRequest::default())
                .await
        })
    };
    while accepted.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    // Sent or about to be sent on this connection: either way it fails.
    let conn = cluster.connection(1, Lane::Fetch).await.unwrap();
    cluster
        .poison_connection(1, Lane::Fetch, ClientError::Closed)
        .await;
    assert!(!conn.is_usable());
    let err = held.await.unwrap().unwrap_err();
    assert!(matches!(err, ClientError::Poisoned { .. }), "{err}");
    drop(open);
    let before = accepted.load(Ordering::SeqCst);
    let fresh = cluster.connection(1, Lane::Fetch).await.unwrap();
    assert!(fresh.is_usable());
    assert_eq!(accepted.load(Ordering::SeqCst), before + 1);
}

#[tokio::test]
async fn metadata_falls_back_to_the_bootstrap_list_when_known_brokers_are_gone() {
    let dead = dead_address().await;
    let dead_port: u16 = dead.rsplit(':').next().unwrap().parse().unwrap();
    // The broker advertises a node that is not there.
    let (addr, _) = broker_with(move |_, _| Reply::now(metadata(dead_port, None))).await;
    let cluster = Cluster::connect(config(std::slice::from_ref(&addr)))
        .await
        .unwrap();
    assert_eq!(cluster.broker_address(1).unwrap(), dead);
    let md = cluster.refresh_metadata(&[]).await.unwrap();
    assert_eq!(
        md.controller_id, 1,
        "answered through the bootstrap address"
    );
    let err = cluster
        .request(1, Lane::Metadata, &MetadataRequest::default())
        .await
        .unwrap_err();
    assert!(err.is_network() && err.is_retriable(), "{err}");
}
