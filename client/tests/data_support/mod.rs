//! Shared by the producer and consumer tests against a real broker.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use weir_client::Cluster;
use weir_client::config::ClientConfig;
use weir_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use weir_protocol::kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use weir_protocol::kafka_protocol::protocol::StrBytes;

/// The broker address, or `None` (after saying so) when there is none.
/// Fails instead when `WEIR_EXPECT_BROKER=1`, so CI can't go silently green.
pub fn bootstrap() -> Option<String> {
    match std::env::var("KAFKA_BOOTSTRAP") {
        Ok(addr) if !addr.trim().is_empty() => Some(addr),
        _ => {
            assert!(
                std::env::var("WEIR_EXPECT_BROKER").as_deref() != Ok("1"),
                "WEIR_EXPECT_BROKER=1 but KAFKA_BOOTSTRAP is not set"
            );
            println!("skipped: KAFKA_BOOTSTRAP not set");
            None
        }
    }
}

/// A client config for `addr`, with short waits that suit tansu (whose
/// fetches always wait the full `fetch.max.wait.ms`).
pub fn client_config(addr: &str) -> ClientConfig {
    ClientConfig::from_properties(&[("bootstrap.servers", addr), ("client.id", "weir-data-test")])
        .unwrap()
}

/// A topic name no other test run uses.
pub fn unique_topic(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), rand::random::<u32>())
}

/// Creates `topic` with `partitions` partitions and waits for its leaders.
pub async fn create_topic(cluster: &Cluster, topic: &str, partitions: i32) {
    let request = CreateTopicsRequest::default()
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_num_partitions(partitions)
                .with_replication_factor(1),
        ])
        .with_timeout_ms(10_000);
    let response = cluster.request_controller(&request).await.unwrap();
    for t in &response.topics {
        // 36: TOPIC_ALREADY_EXISTS is fine for reruns.
        assert!(
            t.error_code == 0 || t.error_code == 36,
            "CreateTopics {topic}: error {}",
            t.error_code
        );
    }
    for _ in 0..100 {
        if let Ok(md) = cluster.refresh_metadata(&[topic]).await
            && let Some(t) = md.topic(topic)
            && t.partitions.len() == partitions as usize
            && t.partitions.iter().all(|p| p.leader >= 0)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("topic {topic} has no leaders after 5 s");
}
