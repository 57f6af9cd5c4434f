//! m12: a consumer that restarts its fetch session (after a session error)
//! closes the old one, as Java does (the old session id with epoch 0,
//! KIP-227), instead of leaving it in the broker's session cache until it
//! is evicted at the expense of other clients' sessions.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use weir_client::Cluster;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions};
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_integration::testkit_dial::client_config;
use weir_protocol::ApiKey;
use weir_testkit::faults::{Intercept, InterceptAction, RequestMatcher};

/// INVALID_FETCH_SESSION_EPOCH: the client starts a new session.
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;

#[tokio::test(start_paused = true)]
async fn a_restarted_fetch_session_closes_the_old_one() {
    let kit = Arc::new(weir_testkit::Cluster::builder().build().await.unwrap());
    kit.create_topic("s", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let cluster = Cluster::connect(client_config(&kit, "fetcher").build().unwrap())
        .await
        .unwrap();
    let producer = Producer::with_cluster(cluster.clone(), Default::default()).unwrap();
    producer
        .send(ProducerRecord::new("s").with_value("v0"))
        .await
        .unwrap();
    let mut consumer = Consumer::with_cluster(
        cluster.clone(),
        ConsumerOptions {
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(20),
            ..Default::default()
        },
    );
    let tp = TopicPartition::new("s", 0);
    consumer.assign([tp.clone()]);
    consumer.seek(&tp, SeekTo::Earliest).unwrap();
    let first = consumer.poll_for(Duration::from_secs(5)).await.unwrap();
    assert_eq!(first.len(), 1);
    let sessions = |kit: &Arc<weir_testkit::Cluster>| {
        let kit = Arc::clone(kit);
        async move { kit.with_state(|s| s.fetch_sessions.len()).await.unwrap() }
    };
    assert_eq!(sessions(&kit).await, 1);
    // Full fetches that reached the broker (not counting intercepted ones).
    async fn full_fetches(kit: &Arc<weir_testkit::Cluster>) -> i64 {
        let n = kit
            .requests()
            .await
            .unwrap()
            .iter()
            .filter(|r| {
                matches!(&r.body,
                    weir_protocol::kafka_protocol::messages::RequestKind::Fetch(f)
                        if f.session_epoch == 0)
            })
            .count();
        i64::try_from(n).unwrap()
    }

    for round in 1..=3 {
        kit.intercept(
            Intercept::new(
                RequestMatcher::api(ApiKey::Fetch).client("fetcher"),
                InterceptAction::Error(INVALID_FETCH_SESSION_EPOCH),
            )
            .times(1),
        )
        .await
        .unwrap();
        producer
            .send(ProducerRecord::new("s").with_value(format!("v{round}")))
            .await
            .unwrap();
        // Until the error was answered and a new session is open.
        let mut got = Vec::new();
        while got.is_empty() || full_fetches(&kit).await < round + 1 {
            got.extend(consumer.poll_for(Duration::from_millis(200)).await.unwrap());
        }
        assert_eq!(got[0].offset, round);
        assert_eq!(
            sessions(&kit).await,
            1,
            "round {round}: the old session was left open in the broker's cache"
        );
    }
    // The restarts named the old session with epoch 0.
    let closing = kit
        .requests()
        .await
        .unwrap()
        .iter()
        .filter_map(|r| match &r.body {
            weir_protocol::kafka_protocol::messages::RequestKind::Fetch(f) => {
                Some((f.session_id, f.session_epoch))
            }
            _ => None,
        })
        .collect::<Vec<_>>();
    let closes = closing
        .iter()
        .filter(|&&(id, epoch)| id != 0 && epoch == 0)
        .count();
    assert!(
        closes >= 3,
        "{closes} full fetches closed a session: {closing:?}"
    );
    producer.close().await;
}
