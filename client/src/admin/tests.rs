//! Admin tests against fake brokers on loopback.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use weir_protocol::kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use weir_protocol::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use weir_protocol::kafka_protocol::messages::metadata_response::{
    MetadataResponsePartition, MetadataResponseTopic,
};
use weir_protocol::kafka_protocol::messages::{
    BrokerId as WireId, CreateTopicsResponse, ListOffsetsResponse, MetadataResponse, RequestKind,
    ResponseKind, TopicName,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::*;
use crate::fake_broker::{Handler, Reply, loopback_broker, spawn_broker};

fn config(bootstrap: &str) -> ClientConfig {
    ClientConfig::builder()
        .bootstrap_servers([bootstrap])
        .retry_backoff(Duration::from_millis(1), Duration::from_millis(5))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Two brokers (ids 1 and 2); topic `t` has partition 0 on broker 1 and
/// partition 1 on `p1_leader`.
fn metadata(ports: &[u16; 2], p1_leader: i32) -> ResponseKind {
    let partition = |i: i32, leader: i32| {
        MetadataResponsePartition::default()
            .with_partition_index(i)
            .with_leader_id(WireId(leader))
    };
    ResponseKind::Metadata(
        MetadataResponse::default()
            .with_controller_id(WireId(1))
            .with_brokers(vec![
                loopback_broker(1, ports[0]),
                loopback_broker(2, ports[1]),
            ])
            .with_topics(vec![
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str("t"))))
                    .with_partitions(vec![partition(0, 1), partition(1, p1_leader)]),
            ]),
    )
}

/// (broker asked, partitions asked for).
type Asked = (i32, Vec<i32>);

#[tokio::test]
async fn list_offsets_asks_each_leader_for_its_partitions_and_follows_a_moved_leader() {
    let ports: Arc<OnceLock<[u16; 2]>> = Arc::new(OnceLock::new());
    // Partition 1 is first said to be on broker 1, which answers
    // NOT_LEADER_OR_FOLLOWER; after that the metadata points at broker 2.
    let moved = Arc::new(AtomicUsize::new(0));
    let asked: Arc<Mutex<Vec<Asked>>> = Arc::new(Mutex::new(Vec::new()));
    let make = |id: i32| -> Handler {
        let (ports, moved, asked) = (Arc::clone(&ports), Arc::clone(&moved), Arc::clone(&asked));
        Arc::new(move |req| {
            let ports = ports.get().copied().unwrap_or([0, 0]);
            match &req.body {
                RequestKind::ListOffsets(r) => {
                    let ps: Vec<i32> = r.topics[0]
                        .partitions
                        .iter()
                        .map(|p| p.partition_index)
                        .collect();
                    asked.lock().unwrap().push((id, ps.clone()));
                    let answers = ps
                        .iter()
                        .map(|&p| {
                            let wrong_broker = p == 1 && id == 1;
                            if wrong_broker {
                                moved.store(1, Ordering::SeqCst);
                            }
                            ListOffsetsPartitionResponse::default()
                                .with_partition_index(p)
                                .with_error_code(if wrong_broker { 6 } else { 0 })
                                .with_offset(i64::from(100 * id + p))
                                .with_timestamp(-1)
                        })
                        .collect();
                    Reply::now(ResponseKind::ListOffsets(
                        ListOffsetsResponse::default().with_topics(vec![
                            ListOffsetsTopicResponse::default()
                                .with_name(TopicName(StrBytes::from_static_str("t")))
                                .with_partitions(answers),
                        ]),
                    ))
                }
                _ => Reply::now(metadata(
                    &ports,
                    if moved.load(Ordering::SeqCst) == 0 {
                        1
                    } else {
                        2
                    },
                )),
            }
        })
    };
    let (a1, _) = spawn_broker(make(1)).await;
    let (a2, _) = spawn_broker(make(2)).await;
    let _ = ports.set([a1.port(), a2.port()]);

    let admin = Admin::connect(config(&a1.to_string())).await.unwrap();
    let offsets = admin
        .list_offsets("t", &[1, 0], OffsetSpec::Latest, false)
        .await
        .unwrap();
    assert_eq!(
        offsets
            .iter()
            .map(|o| (o.partition, o.offset))
            .collect::<Vec<_>>(),
        [(1, 201), (0, 100)],
        "in the order asked, each from its current leader"
    );
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked[0], (1, vec![1, 0]), "first both on broker 1");
    assert!(
        asked[1..].contains(&(2, vec![1])),
        "then partition 1 alone on broker 2: {asked:?}"
    );
}

#[tokio::test]
async fn create_topics_retries_a_moved_controller_and_reports_each_topic() {
    let ports: Arc<OnceLock<[u16; 2]>> = Arc::new(OnceLock::new());
    let creates = Arc::new(AtomicUsize::new(0));
    let handler: Handler = {
        let (ports, creates) = (Arc::clone(&ports), Arc::clone(&creates));
        Arc::new(move |req| match &req.body {
            RequestKind::CreateTopics(r) => {
                let first = creates.fetch_add(1, Ordering::SeqCst) == 0;
                assert_eq!(r.topics[0].configs[0].name.as_str(), "cleanup.policy");
                let results = r
                    .topics
                    .iter()
                    .map(|t| {
                        let code = match (first, t.name.0.as_str()) {
                            (true, _) => 41,
                            (false, "exists") => 36,
                            _ => 0,
                        };
                        CreatableTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                            .with_error_message(
                                (code == 36).then(|| StrBytes::from_static_str("already there")),
                            )
                    })
                    .collect();
                Reply::now(ResponseKind::CreateTopics(
                    CreateTopicsResponse::default().with_topics(results),
                ))
            }
            _ => {
                let p = ports.get().copied().unwrap_or([0, 0]);
                Reply::now(metadata(&[p[0], p[0]], 1))
            }
        })
    };
    let (addr, _) = spawn_broker(handler).await;
    let _ = ports.set([addr.port(), addr.port()]);
    let admin = Admin::connect(config(&addr.to_string())).await.unwrap();
    let outcomes = admin
        .create_topics(&[
            NewTopic::new("fresh", 3).config("cleanup.policy", "compact"),
            NewTopic::new("exists", 1).config("cleanup.policy", "delete"),
        ])
        .await
        .unwrap();
    assert_eq!(
        creates.load(Ordering::SeqCst),
        2,
        "NOT_CONTROLLER was retried"
    );
    assert_eq!(outcomes[0].0, "fresh");
    assert!(outcomes[0].1.is_ok());
    let err = outcomes[1].1.as_ref().unwrap_err();
    assert_eq!(err.kafka_code().unwrap().name, "TOPIC_ALREADY_EXISTS");
    let msg = err.to_string();
    assert!(
        msg.contains("exists") && msg.contains("already there"),
        "{msg}"
    );
}
