//! The idempotent producer across a producer-id reset, on the in-process
//! testkit and tokio's paused clock.
//!
//! A reset (a new producer id, every partition's sequences back at 0) is
//! safe only for batches the broker certainly did not write. A batch whose
//! outcome is unknown when the id changes must fail, as Java's producer
//! fails it ("the producer id changed"): resent under the new id, the
//! broker cannot recognise it as a duplicate.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions};
use weir_client::config::producer::ProducerOptions;
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_client::{ClientError, Cluster};
use weir_integration::testkit_dial::client_config;
use weir_protocol::ApiKey;
use weir_testkit::faults::{Intercept, InterceptAction, RequestMatcher};

const TOPIC: &str = "reset";
/// MESSAGE_TOO_LARGE: final, so the sequenced batch leaves a gap and the
/// producer takes a new producer id.
const MESSAGE_TOO_LARGE: i16 = 10;

type Kit = Arc<weir_testkit::Cluster>;

/// Two partitions: 0 led by broker 0, 1 by broker 1.
async fn two_brokers() -> Kit {
    let kit = Arc::new(
        weir_testkit::Cluster::builder()
            .brokers(2)
            .build()
            .await
            .unwrap(),
    );
    kit.create_topic(TOPIC, 2, [] as [(&str, &str); 0])
        .await
        .unwrap();
    kit
}

async fn client(kit: &Kit, id: &str) -> Cluster {
    let config = client_config(kit, id)
        .request_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    Cluster::connect(config).await.unwrap()
}

/// Every value of `partition`, from the start to the high watermark.
async fn log_of(kit: &Kit, partition: i32) -> Vec<String> {
    let (_, _, hwm) = kit.offsets(TOPIC, partition).await.unwrap();
    let mut consumer = Consumer::with_cluster(
        client(kit, "reader").await,
        ConsumerOptions {
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(20),
            ..Default::default()
        },
    );
    let tp = TopicPartition::new(TOPIC, partition);
    consumer.assign(vec![tp.clone()]);
    consumer.seek(&tp, SeekTo::Earliest).unwrap();
    let mut out = Vec::new();
    for _ in 0..100 {
        if consumer.position(&tp).await.unwrap() >= hwm {
            return out;
        }
        for r in consumer.poll_for(Duration::from_millis(100)).await.unwrap() {
            out.push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned());
        }
    }
    panic!("could not read partition {partition} up to {hwm}: got {out:?}");
}

fn record(partition: i32, value: &str) -> ProducerRecord {
    ProducerRecord::new(TOPIC)
        .with_partition(partition)
        .with_value(value.to_owned())
}

#[tokio::test(start_paused = true)]
async fn a_batch_of_unknown_outcome_is_not_resent_under_a_new_producer_id() {
    let kit = two_brokers().await;
    // Broker 1 writes partition 1's batch, but its answer is lost; in the
    // same instant broker 0 refuses partition 0's batch for good, which
    // resets the producer id.
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::Produce).broker(1),
            InterceptAction::DropResponse,
        )
        .times(1),
    )
    .await
    .unwrap();
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::Produce).broker(0),
            InterceptAction::Error(MESSAGE_TOO_LARGE),
        )
        .times(1),
    )
    .await
    .unwrap();
    let producer = Producer::with_cluster(
        client(&kit, "reset").await,
        ProducerOptions {
            // Both partitions' batches go out in the same round.
            linger: Duration::from_millis(10),
            ..Default::default()
        },
    )
    .unwrap();
    let refused = producer.enqueue(record(0, "a0")).await.unwrap();
    let mut unknown = Vec::new();
    for v in ["b0", "b1", "b2"] {
        unknown.push(producer.enqueue(record(1, v)).await.unwrap());
    }
    let err = refused.await.unwrap_err();
    assert_eq!(
        err.kafka_code().map(|c| c.code),
        Some(MESSAGE_TOO_LARGE),
        "{err}"
    );
    // Partition 1's records were written, but the producer can't know it:
    // they fail rather than go out again under the new producer id.
    for d in unknown {
        let err = d.await.unwrap_err();
        assert!(
            matches!(err, ClientError::ProducerIdChanged { ref topic, partition: 1, .. } if topic == TOPIC),
            "{err}"
        );
    }
    // The producer goes on under its new id.
    let after = producer.send(record(1, "b3")).await.unwrap();
    assert_eq!(after.offset, 3);
    producer.send(record(0, "a1")).await.unwrap();
    producer.close().await;

    assert_eq!(log_of(&kit, 1).await, ["b0", "b1", "b2", "b3"]);
    assert_eq!(log_of(&kit, 0).await, ["a1"]);
}

/// UNKNOWN_PRODUCER_ID (59): the broker lost the producer's state (on older
/// brokers, after retention removed its last records). The batch was not
/// written, so, as Java's idempotent producer (KIP-360), Weir bumps the
/// epoch (InitProducerId naming its current producer id and epoch) and
/// sends the batch again, instead of failing the user's records.
#[tokio::test(start_paused = true)]
async fn unknown_producer_id_on_a_clean_batch_bumps_the_epoch_and_retries() {
    use weir_protocol::kafka_protocol::messages::RequestKind;
    const UNKNOWN_PRODUCER_ID: i16 = 59;
    let kit = two_brokers().await;
    let producer = Producer::with_cluster(
        client(&kit, "unknown-pid").await,
        ProducerOptions::default(),
    )
    .unwrap();
    let first = producer.send(record(0, "a0")).await.unwrap();
    assert_eq!(first.offset, 0);
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::Produce).broker(0),
            InterceptAction::Error(UNKNOWN_PRODUCER_ID),
        )
        .times(1),
    )
    .await
    .unwrap();
    let second = producer.send(record(0, "a1")).await;
    let second = second.expect("UNKNOWN_PRODUCER_ID must not reach the user");
    assert_eq!(second.offset, 1);
    producer.send(record(0, "a2")).await.unwrap();
    producer.close().await;
    assert_eq!(log_of(&kit, 0).await, ["a0", "a1", "a2"]);

    // The second InitProducerId named the producer id and epoch it had.
    let inits: Vec<(i16, i64, i16)> = kit
        .requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.api_key == ApiKey::InitProducerId)
        .filter_map(|r| match &r.body {
            RequestKind::InitProducerId(b) => Some((r.version, b.producer_id.0, b.producer_epoch)),
            _ => None,
        })
        .collect();
    assert_eq!(inits.len(), 2, "{inits:?}");
    assert_eq!((inits[0].1, inits[0].2), (-1, -1));
    assert!(inits[1].0 >= 3, "the testkit speaks InitProducerId v3+");
    assert!(
        inits[1].1 >= 0,
        "KIP-360: the current producer id: {inits:?}"
    );
    assert_eq!(inits[1].2, 0, "and its epoch: {inits:?}");
}

/// Review M4: a batch whose gate closes while it lingers is never sent,
/// its records fail typed, and the batches of other gates (and later ones)
/// go on with unbroken sequences.
#[tokio::test(start_paused = true)]
async fn a_batch_whose_gate_closed_while_lingering_is_never_sent() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use weir_client::producer::SendGate;
    let kit = two_brokers().await;
    let producer = Producer::with_cluster(
        client(&kit, "gated").await,
        ProducerOptions {
            linger: Duration::from_millis(100),
            ..Default::default()
        },
    )
    .unwrap();
    producer.send(record(0, "a0")).await.unwrap();
    let open = Arc::new(AtomicBool::new(true));
    let gate = {
        let open = Arc::clone(&open);
        SendGate::new(move || open.load(Ordering::Acquire))
    };
    let gated = producer
        .enqueue(record(0, "gated").with_gate(gate.clone()))
        .await
        .unwrap();
    // Another gate's record of the same partition: a batch of its own.
    let other = producer
        .enqueue(record(0, "a1").with_gate(SendGate::until(
            tokio::time::Instant::now() + Duration::from_secs(60),
        )))
        .await
        .unwrap();
    open.store(false, Ordering::Release);
    let err = gated.await.unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::SendGateClosed { ref topic, partition: 0, records: 1, maybe_written: false }
                if topic == TOPIC
        ),
        "{err}"
    );
    assert_eq!(other.await.unwrap().offset, 1);
    producer.send(record(0, "a2")).await.unwrap();
    producer.close().await;
    assert_eq!(log_of(&kit, 0).await, ["a0", "a1", "a2"]);
}
